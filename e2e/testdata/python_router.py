# A Python upstream on the standard library's WSGI server (wsgiref): it
# routes PATH_INFO, which the server percent-decodes, exactly, as Flask's
# and Django's routers do by default, and answers with the handler that took
# the request, so a test can hold the proxy's reading of a path to Python's.
# Usage: python3 python_router.py PORT (on 127.0.0.1).
import json
import re
import sys
from wsgiref.simple_server import WSGIRequestHandler, make_server

ROUTES = [
    ("POST", re.compile(r"/v1/charges"), "charges"),
    ("POST", re.compile(r"/v1/charges/[^/]+/capture"), "capture"),
]


def app(environ, start_response):
    handler, status = "none", "404 Not Found"
    for method, pattern, name in ROUTES:
        if environ["REQUEST_METHOD"] == method and pattern.fullmatch(environ["PATH_INFO"]):
            handler, status = name, "201 Created"
            break
    body = json.dumps({"handler": handler}).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


make_server("127.0.0.1", int(sys.argv[1]), app, handler_class=QuietHandler).serve_forever()
