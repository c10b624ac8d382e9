"""Client for APIs behind idempotency-proxy, standard library only.

One Idempotency-Key per logical operation, reused on every retry; an operation
name keeps its key (in memory, or in a file under ``key_dir``) from before the
first attempt until a final answer, so a restarted process resumes the
operation instead of starting a new one. What to do with each answer is the
proxy's contract (clients/contract.json in the repository): retry with the same
key (after Retry-After, else capped exponential backoff with full jitter), stop
with a typed exception, or hand the answer over. docs/clients.md describes it.

    from idempotency_client import Client
    client = Client()
    result = client.request("POST", "http://127.0.0.1:8080/v1/charges",
                            json={"order": 42}, operation="charge:order-42")
    result.status, result.replayed, result.json()
"""

from __future__ import annotations

import datetime
import email.utils
import http.client
import json as jsonlib
import os
import random
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Union

__all__ = [
    "PROBLEM_BASE", "PROBLEM_ACTIONS", "RETRY_STATUSES", "DEFAULT_MAX_POLLS", "decide", "parse_retry_after", "new_key",
    "Client", "Result", "Retry", "IdempotencyError", "ProblemError", "PayloadMismatchError",
    "KeyExpiredError", "GaveUpError",
]

#: Prefix of the type URI of every problem the proxy answers itself.
PROBLEM_BASE = "https://idempotency-proxy.dev/problems/"

#: What the client does with each of the proxy's problem types: "retry" or
#: "stop". The Python copy of clients/contract.json; the tests hold it to that file.
PROBLEM_ACTIONS: Mapping[str, str] = {
    "missing-key": "stop",
    "invalid-key": "stop",
    "body-unreadable": "stop",
    "ambiguous-body": "stop",
    "ambiguous-path": "stop",
    "ambiguous-method": "stop",
    "body-too-large": "stop",
    "in-flight": "retry",
    "key-expired": "stop",
    "payload-mismatch": "stop",
    "store-unavailable": "retry",
    "store-full": "retry",
    "record-unreadable": "stop",
    "upstream-unreachable": "retry",
    "upstream-failed": "retry",
    "upstream-timeout": "retry",
    "streaming-call": "stop",
    "status-unknown": "stop",
    "status-method": "stop",
}

#: Statuses retried when the answer carries none of the proxy's problem types.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 502, 503, 504})


#: Polls of one status URL under respond_async: ten minutes at the proxy's Retry-After of 1 s.
DEFAULT_MAX_POLLS = 600

# Headers of the request that a poll of its status URL does not carry: it is
# a GET without a body, and the key and preference were the request's.
_NOT_POLLED = frozenset({"content-type", "content-length", "content-encoding", "prefer", "idempotency-key"})


def decide(status: int, problem_type: Optional[str], replayed: bool) -> str:
    """What to do with an answer: "retry", "stop" or "done"."""
    if replayed:
        return "done"
    if problem_type and problem_type.startswith(PROBLEM_BASE):
        action = PROBLEM_ACTIONS.get(problem_type[len(PROBLEM_BASE):])
        if action:
            return action
    return "retry" if status in RETRY_STATUSES else "done"


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Retry-After (delta-seconds or an HTTP-date) in seconds, or None."""
    if value is None:
        return None
    v = value.strip()
    if v.isascii() and v.isdigit():  # not "²", which isdigit() also takes
        return float(min(int(v), 86400))
    if not v[:1].isalpha():
        # Every HTTP-date form starts with the day's name: "-5" is no date.
        return None
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        # The asctime form has no zone, and is GMT (RFC 9110 section 5.6.7), not local time.
        when = when.replace(tzinfo=datetime.timezone.utc)
    at = when.timestamp()
    # At most a day, as delta-seconds are.
    return min(max(0.0, at - (time.time() if now is None else now)), 86400.0)


def new_key() -> str:
    """A fresh random key (a UUIDv4)."""
    return str(uuid.uuid4())


class IdempotencyError(Exception):
    """Base class of the client's errors; ``key`` is the operation's key."""

    def __init__(self, message: str, *, key: str, attempts: int = 0, status: int = 0,
                 problem: Optional[Dict[str, Any]] = None):
        super().__init__(message)
        self.key = key
        self.attempts = attempts
        self.status = status
        self.problem = problem


class ProblemError(IdempotencyError):
    """The proxy answered a problem no retry with this key can change."""


class PayloadMismatchError(ProblemError):
    """422 payload-mismatch: the key was first used with a different request."""


class KeyExpiredError(ProblemError):
    """410 key-expired: the operation ran once and its record expired; look its outcome up."""


class GaveUpError(IdempotencyError):
    """Attempts exhausted; the operation's key stays kept, so calling again resumes it."""


@dataclass
class Result:
    """A final answer."""

    status: int
    headers: http.client.HTTPMessage
    body: bytes
    key: str
    attempts: int
    replayed: bool = False  #: the recorded answer of an earlier execution
    body_omitted: bool = False  #: a replay whose body was too large to record
    polls: int = 0  #: polls of the status URL under respond_async

    def json(self) -> Any:
        return jsonlib.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode(self.headers.get_content_charset() or "utf-8", "replace")


@dataclass
class Retry:
    """What ``on_retry`` sees before each wait between two attempts."""

    attempt: int  #: the attempt that failed, from 1
    delay: float  #: seconds before the next attempt
    status: int  #: 0 for a network error or a timeout
    problem: Optional[Dict[str, Any]]
    error: Optional[BaseException]
    key: str


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect is the operation's recorded answer: hand it over, never
    # follow it (urllib would turn a POST into a GET without its body).
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        return None


@dataclass
class _Flight:
    done: threading.Event = field(default_factory=threading.Event)
    result: Optional[Result] = None
    error: Optional[BaseException] = None


_MISSING = object()


class Client:
    """Sends requests as idempotent operations; safe for concurrent use.

    max_attempts: requests one operation may send, the first included.
    base_delay, max_delay: backoff in seconds (doubling, full jitter); max_delay caps
        every wait, Retry-After included.
    attempt_timeout: seconds each blocking step of one attempt (connect, send,
        each read) may take; a timeout is retried like a network error.
    key_dir: directory where a named operation keeps its key in a file until a
        final answer; None keeps keys in memory (they survive retries and calls in
        this process, not a restart).
    on_retry: called with a Retry before each wait between attempts or polls.
    opener: the urllib opener; by default one that does not follow redirects.
    respond_async: send Prefer: respond-async; a route with async: allow answers
        202 with a status URL, which request follows (GET, with the request's
        headers, after each 202's Retry-After capped by max_delay) to the answer.
    max_polls: polls of one status URL under respond_async; then GaveUpError
        with status 202 (the key kept: a later call resumes the operation).
    sleep: waits between attempts and polls (a test seam).
    """

    def __init__(self, *, max_attempts: int = 5, base_delay: float = 0.1, max_delay: float = 10.0,
                 attempt_timeout: float = 30.0, key_dir: Optional[str] = None,
                 on_retry: Optional[Callable[[Retry], None]] = None,
                 opener: Optional[urllib.request.OpenerDirector] = None,
                 sleep: Callable[[float], None] = time.sleep,
                 respond_async: bool = False, max_polls: int = DEFAULT_MAX_POLLS):
        self.max_attempts = max_attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.attempt_timeout = attempt_timeout
        self.key_dir = key_dir
        self.on_retry = on_retry
        self.opener = opener or urllib.request.build_opener(_NoRedirect)
        self._sleep = sleep
        self._clock = time.monotonic  # read against request's timeout (a test seam)
        self.respond_async = respond_async
        self.max_polls = max_polls
        self._lock = threading.Lock()
        self._memory: Dict[str, str] = {}
        self._flights: Dict[str, _Flight] = {}

    # --- keys kept by operation name

    def _key_path(self, operation: str) -> str:
        return os.path.join(self.key_dir, urllib.parse.quote(operation, safe="") + ".key")

    def pending(self, operation: str) -> Optional[str]:
        """The key an unfinished operation of this name keeps, or None."""
        if self.key_dir is None:
            with self._lock:
                return self._memory.get(operation)
        try:
            with open(self._key_path(operation), encoding="utf-8") as f:
                return jsonlib.load(f).get("key")
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise OSError(f"reading the key of operation {operation!r}: {e}") from e

    def forget(self, operation: str) -> None:
        """Drops the key an operation keeps: its next call is a new operation."""
        if self.key_dir is None:
            with self._lock:
                self._memory.pop(operation, None)
            return
        try:
            os.remove(self._key_path(operation))
        except FileNotFoundError:
            pass

    def _keep(self, operation: str, key: str) -> None:
        if self.key_dir is None:
            with self._lock:
                self._memory[operation] = key
            return
        os.makedirs(self.key_dir, exist_ok=True)
        # Written whole and synced before the first attempt: a crash from here
        # on leaves the key for the restarted process.
        fd, tmp = tempfile.mkstemp(dir=self.key_dir, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                jsonlib.dump({"key": key, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._key_path(operation))
        except BaseException:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise

    def _key_for(self, operation: Optional[str], key: Optional[str]) -> str:
        if key:
            return key
        if operation is None:
            return new_key()
        kept = self.pending(operation)
        if kept:
            return kept
        kept = new_key()
        self._keep(operation, kept)
        return kept

    # --- requests

    def request(self, method: str, url: str, *, body: Optional[Union[bytes, str]] = None, json: Any = _MISSING,
                headers: Optional[Mapping[str, str]] = None, operation: Optional[str] = None,
                key: Optional[str] = None, timeout: Optional[float] = None) -> Result:
        """Sends one logical operation, retrying it with the same key.

        operation names it: its key is kept until a final answer, and concurrent
        calls with one name in this client share one operation and its outcome.
        key is an explicit key instead, as is an Idempotency-Key in headers. body is
        bytes or str, resent whole by every attempt (a file or an iterator raises
        TypeError). json is a value sent as the JSON body. timeout bounds the
        whole operation in seconds, attempts, waits and polls included: a wait
        that would end past it is not begun, each blocking step of an attempt
        is bounded by the time left, and then GaveUpError (the key kept).
        Raises PayloadMismatchError, KeyExpiredError, ProblemError or GaveUpError.
        """
        deadline = None if timeout is None else self._clock() + timeout
        if operation is None:
            return self._run(method, url, body, json, headers, None, key, deadline)
        with self._lock:
            flight = self._flights.get(operation)
            owner = flight is None
            if owner:
                flight = self._flights[operation] = _Flight()
        if not owner:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.result
        try:
            flight.result = self._run(method, url, body, json, headers, operation, key, deadline)
            return flight.result
        except BaseException as e:
            flight.error = e
            raise
        finally:
            with self._lock:
                del self._flights[operation]
            flight.done.set()

    def _run(self, method, url, body, json, headers, operation, key, deadline) -> Result:
        hdrs = {k: v for k, v in (headers or {}).items()}
        if json is not _MISSING:
            body = jsonlib.dumps(json, separators=(",", ":")).encode()
            if not any(k.lower() == "content-type" for k in hdrs):
                hdrs["Content-Type"] = "application/json"
        if isinstance(body, str):
            body = body.encode()
        if body is not None and not isinstance(body, (bytes, bytearray, memoryview)):
            # A file or an iterator is read by the first attempt: a retry
            # would send the same key with what is left of it.
            raise TypeError(f"request: a body of type {type(body).__name__} cannot be resent; pass bytes or str")
        # A key the caller put in the headers names the operation, as in the
        # Go client: replacing it would make each call a new operation.
        given = _get(hdrs, "Idempotency-Key")
        hdrs = {k: v for k, v in hdrs.items() if k.lower() != "idempotency-key"}
        key = self._key_for(operation, key or given)
        hdrs["Idempotency-Key"] = key
        if self.respond_async:
            # Added to the caller's own preferences, in one header of any case.
            prefer = ", ".join(v for v in (_get(hdrs, "Prefer"), "respond-async") if v)
            hdrs = {k: v for k, v in hdrs.items() if k.lower() != "prefer"}
            hdrs["Prefer"] = prefer
        status, problem, error = 0, None, None
        attempt = 0
        while True:
            attempt += 1
            retry_after = None
            try:
                status, resp_headers, resp_body = self._attempt(method, url, body, hdrs, deadline)
            except (OSError, http.client.HTTPException) as e:
                # Network errors and timeouts: the answer may be lost, retry.
                status, problem, error = 0, None, e
            else:
                error = None
                if self.respond_async and _accepted(status, resp_headers, url):
                    location = urllib.parse.urljoin(url, resp_headers.get("Location"))
                    followed = self._follow(location, hdrs, operation, key, attempt,
                                            parse_retry_after(resp_headers.get("Retry-After")), deadline)
                    if not isinstance(followed, _Released):
                        return followed
                    # The key was released: the poll answered what this
                    # attempt would have been told, and the request is sent again.
                    status, problem, retry_after = followed
                else:
                    result, problem, retry_after = self._judge(status, resp_headers, resp_body, operation, key, attempt)
                    if result is not None:
                        return result
            if attempt >= self.max_attempts:
                raise _gave_up(f"gave up after {attempt} attempt(s)", key, attempt, status, problem, error)
            if not self._wait(attempt, retry_after, status, problem, error, key, deadline):
                raise _gave_up(f"timed out after {attempt} attempt(s)", key, attempt, status, problem, error)

    def _follow(self, location, hdrs, operation, key, attempts, retry_after, deadline) -> Union[Result, "_Released"]:
        """GETs the status URL of a 202 until the operation's answer.

        Each poll waits for the last 202's Retry-After (capped by max_delay) and
        carries the request's headers: the proxy answers only a poll with the
        original's scope headers (Authorization, ...). A poll that fails in a
        way worth retrying is retried the same way; at most max_polls are sent.
        An answer marked Idempotent-Released that says to retry is returned as
        _Released: the key is free, and _run sends the request again with it.
        """
        poll_headers = {k: v for k, v in hdrs.items() if k.lower() not in _NOT_POLLED}
        status, problem, error = 202, None, None
        poll = 0
        while True:
            poll += 1
            if not self._wait(poll, retry_after, status, problem, error, key, deadline):
                raise _gave_up(f"timed out after {poll - 1} poll(s) of {location}", key, poll - 1, status, problem, error)
            retry_after, problem = None, None
            try:
                status, resp_headers, resp_body = self._attempt("GET", location, None, poll_headers, deadline)
            except (OSError, http.client.HTTPException) as e:
                status, error = 0, e
            else:
                error = None
                if _accepted(status, resp_headers, location):
                    retry_after = parse_retry_after(resp_headers.get("Retry-After"))
                else:
                    result, problem, retry_after = self._judge(status, resp_headers, resp_body, operation, key, attempts)
                    if result is not None:
                        result.polls = poll
                        return result
                    if _is_true(resp_headers.get("Idempotent-Released")):
                        return _Released(status, problem, retry_after)
            if poll >= self.max_polls:
                raise _gave_up(f"gave up after {poll} poll(s) of {location}", key, poll, status, problem, error)

    def _judge(self, status, resp_headers, resp_body, operation, key, attempt):
        """Decides an answer as the contract says: (result, None, None) for a
        final answer, a raised error for a stop, else (None, problem, retry_after)."""
        replayed = _is_true(resp_headers.get("Idempotent-Replayed"))
        problem = _problem(resp_headers, resp_body) if status >= 400 and not replayed else None
        action = decide(status, problem.get("type") if problem else None, replayed)
        if action == "done":
            if operation is not None:
                self.forget(operation)
            return Result(status=status, headers=resp_headers, body=resp_body, key=key, attempts=attempt,
                          replayed=replayed, body_omitted=_is_true(resp_headers.get("Idempotent-Body-Omitted"))), None, None
        if action == "stop":
            if operation is not None:
                self.forget(operation)
            name = problem["type"][len(PROBLEM_BASE):]
            detail = problem.get("detail")
            msg = f"proxy answered {status} {name} (key {key})" + (f": {detail}" if detail else "")
            cls = {"payload-mismatch": PayloadMismatchError, "key-expired": KeyExpiredError}.get(name, ProblemError)
            raise cls(msg, key=key, attempts=attempt, status=status, problem=problem)
        return None, problem, parse_retry_after(resp_headers.get("Retry-After"))

    def _wait(self, n, retry_after, status, problem, error, key, deadline) -> bool:
        """Sleeps before the next attempt or poll: Retry-After capped by
        max_delay, else backoff with full jitter. False, without waiting,
        when the wait would end past deadline: the operation's time is up."""
        if retry_after is not None:
            delay = min(retry_after, self.max_delay)
        else:
            delay = random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (n - 1)))
        if deadline is not None and self._clock() + delay >= deadline:
            return False
        if self.on_retry:
            self.on_retry(Retry(attempt=n, delay=delay, status=status, problem=problem, error=error, key=key))
        self._sleep(delay)
        return True

    def _attempt(self, method, url, body, headers, deadline):
        timeout = self.attempt_timeout
        if deadline is not None:
            left = deadline - self._clock()
            if left <= 0:
                raise TimeoutError("the operation's timeout passed")
            timeout = min(timeout, left)
        req = urllib.request.Request(url, data=body, headers=headers, method=method)
        try:
            with self.opener.open(req, timeout=timeout) as resp:
                return resp.status, resp.headers, self._read(resp, deadline)
        except urllib.error.HTTPError as e:
            # An HTTP answer (4xx, 5xx, an unfollowed redirect), not a failure.
            with e:
                return e.code, e.headers, self._read(e, deadline)

    def _read(self, resp, deadline) -> bytes:
        """The answer's body; with a deadline a step at a time, so that a
        body trickling in cannot outlast it."""
        if deadline is None:
            return resp.read()
        chunks = []
        while True:
            if self._clock() >= deadline:
                raise TimeoutError("the operation's timeout passed while its answer was read")
            chunk = resp.read1(1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


class _Released(NamedTuple):
    """A poll's answer marked Idempotent-Released, to retry: its request's own
    answer, the key free, so the request is sent again with it."""

    status: int
    problem: Optional[Dict[str, Any]]
    retry_after: Optional[float]


def _gave_up(what, key, attempts, status, problem, error) -> GaveUpError:
    why = f"{error}" if error else f"last status {status}" + (f" ({problem.get('type')})" if problem else "")
    e = GaveUpError(f"{what}, {why}; key {key} is kept", key=key, attempts=attempts, status=status, problem=problem)
    e.__cause__ = error
    return e


def _accepted(status: int, headers: http.client.HTTPMessage, url: str) -> bool:
    """The proxy's 202 under Prefer: respond-async, to a request sent to url:
    the operation runs, and Location says where its answer will be. The proxy
    serves its status URLs on the origin the request went to; a Location on
    another origin is not one of them, and polling it would hand the
    request's headers (Authorization) to that origin."""
    location = headers.get("Location")
    return (status == 202 and bool(location) and _same_origin(urllib.parse.urljoin(url, location), url)
            and "respond-async" in (headers.get("Preference-Applied") or "").lower())


def _same_origin(a: str, b: str) -> bool:
    ua, ub = urllib.parse.urlsplit(a), urllib.parse.urlsplit(b)
    return (ua.scheme.lower(), ua.netloc.lower()) == (ub.scheme.lower(), ub.netloc.lower())


def _get(headers: Mapping[str, str], name: str) -> Optional[str]:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)


def _is_true(v: Optional[str]) -> bool:
    return (v or "").strip().lower() == "true"


def _problem(headers: http.client.HTTPMessage, body: bytes) -> Optional[Dict[str, Any]]:
    if headers.get_content_type() != "application/problem+json":
        return None
    try:
        p = jsonlib.loads(body)
    except ValueError:
        return None
    return p if isinstance(p, dict) and isinstance(p.get("type"), str) else None
