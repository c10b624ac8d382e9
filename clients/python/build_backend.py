"""A PEP 517 build backend of the standard library only.

pip builds a package in an isolated environment with the backend its
pyproject.toml requires; setuptools would have to be downloaded there, so
installing this client would need PyPI. This backend needs nothing: it
writes the wheel (a zip of the module and its metadata) with zipfile, so
`pip install ./clients/python` works offline with a stock Python.
"""

import base64
import hashlib
import os
import tarfile
import zipfile

NAME = "idempotency-proxy-client"
DIST = NAME.replace("-", "_")
VERSION = "0.1.0"
PACKAGE = "idempotency_client"
HERE = os.path.dirname(os.path.abspath(__file__))
TAG = "py3-none-any"

METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Idempotency-Key client for idempotency-proxy: one key per operation, optionally kept in a file, retried by the proxy's contract
License: Apache-2.0
Requires-Python: >=3.9
Classifier: Programming Language :: Python :: 3
Classifier: License :: OSI Approved :: Apache Software License
Description-Content-Type: text/markdown

"""

WHEEL = f"""Wheel-Version: 1.0
Generator: idempotency-proxy build_backend
Root-Is-Purelib: true
Tag: {TAG}
"""


def _package_files():
    root = os.path.join(HERE, PACKAGE)
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isfile(path) and not name.endswith(".pyc"):
            yield f"{PACKAGE}/{name}", path


def _metadata():
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        return METADATA + f.read()


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}\n"


def _write_wheel(wheel_directory, files):
    info = f"{DIST}-{VERSION}.dist-info"
    wheel_name = f"{DIST}-{VERSION}-{TAG}.whl"
    record = ""
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as whl:
        for arcname, data in files + [(f"{info}/METADATA", _metadata().encode()), (f"{info}/WHEEL", WHEEL.encode())]:
            whl.writestr(arcname, data)
            record += _record_line(arcname, data)
        record += f"{info}/RECORD,,\n"
        whl.writestr(f"{info}/RECORD", record)
    return wheel_name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for arcname, path in _package_files():
        with open(path, "rb") as f:
            files.append((arcname, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file puts this directory on sys.path: edits apply at once.
    return _write_wheel(wheel_directory, [(f"{DIST}.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{DIST}-{VERSION}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for rel in ["pyproject.toml", "build_backend.py", "README.md"]:
            tar.add(os.path.join(HERE, rel), f"{base}/{rel}")
        for arcname, path in _package_files():
            tar.add(path, f"{base}/{arcname}")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []
