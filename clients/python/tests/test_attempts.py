"""Every attempt of one operation against a fake server on loopback: the same
key and the same bytes, whatever the caller handed over. The waits go through
an injected sleep, so nothing here sleeps."""

import http.server
import io
import threading
import unittest

import idempotency_client as ic


class _Handler(http.server.BaseHTTPRequestHandler):
    # Answers 503 to the first request, 201 to the others, recording each.
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        with self.server.lock:
            self.server.calls.append({"headers": self.headers, "body": body})
            status = 503 if len(self.server.calls) == 1 else 201
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class AttemptsTest(unittest.TestCase):
    def setUp(self):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        srv.calls, srv.lock = [], threading.Lock()
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        self.srv = srv
        self.url = f"http://127.0.0.1:{srv.server_address[1]}/v1/orders"
        self.client = ic.Client(sleep=lambda s: None)

    def test_a_body_that_cannot_be_resent_is_refused_before_anything_is_sent(self):
        for body in (io.BytesIO(b'{"order":42}'), iter([b'{"order":42}'])):
            with self.assertRaises(TypeError):
                self.client.request("POST", self.url, body=body, headers={"Content-Length": "12"},
                                    operation="order-42")
            self.assertIsNone(self.client.pending("order-42"), "no key kept for an operation never sent")
        self.assertEqual(self.srv.calls, [])

    def test_an_idempotency_key_header_the_caller_sets_is_the_operations_key(self):
        result = self.client.request("POST", self.url, json={"order": 42}, headers={"idempotency-key": "order-42"})
        self.assertEqual(result.key, "order-42")
        self.assertEqual([c["headers"].get_all("Idempotency-Key") for c in self.srv.calls],
                         [["order-42"], ["order-42"]])

    def test_a_retry_after_that_is_neither_delta_seconds_nor_an_http_date_is_ignored(self):
        for v in ("-5", "1.5", "\u00b2", "soon", ""):
            self.assertIsNone(ic.parse_retry_after(v, now=0), repr(v))
        self.assertEqual(ic.parse_retry_after("Thu, 01 Jan 1970 00:00:10 GMT", now=0), 10)


    def test_a_retry_after_date_is_read_as_at_most_a_day_away_as_delta_seconds_are(self):
        from email.utils import formatdate
        for days in (2, 36500):
            self.assertEqual(ic.parse_retry_after(formatdate(days * 86400, usegmt=True), now=0), 86400.0, days)

    def test_a_retry_after_in_asctime_form_is_read_in_gmt_whatever_the_local_zone(self):
        import os
        import time
        zone = os.environ.get("TZ")

        def restore():
            if zone is None:
                os.environ.pop("TZ", None)
            else:
                os.environ["TZ"] = zone
            time.tzset()

        self.addCleanup(restore)
        for tz in ("America/New_York", "Asia/Tokyo"):
            os.environ["TZ"] = tz
            time.tzset()
            # RFC 9110 section 5.6.7: the three forms of one instant, all in GMT.
            for v in ("Thu, 01 Jan 1970 00:00:10 GMT", "Thursday, 01-Jan-70 00:00:10 GMT", "Thu Jan  1 00:00:10 1970"):
                self.assertEqual(ic.parse_retry_after(v, now=0), 10, (tz, v))


class _Redirecting(http.server.BaseHTTPRequestHandler):
    # Redirects /v1/charges to self.server.location with self.server.status;
    # answers 201 elsewhere, recording the key of each request that reached it.
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if self.path == "/v1/charges" and self.server.location:
            self.send_response(self.server.status)
            self.send_header("Location", self.server.location)
        else:
            self.server.reached.append(self.headers.get("Idempotency-Key"))
            self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST  # a 303 is followed with a GET

    def log_message(self, *args):
        pass


class RedirectTest(unittest.TestCase):
    """A redirect is the operation's answer, never followed with its key:
    followed, it would carry the key and the body to another URL — behind the
    proxy a different request under the same key (422 payload-mismatch,
    though the operation ran), on another origin an execution the proxy never
    sees."""

    def serve(self, location, status=0):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirecting)
        srv.location, srv.status, srv.reached = location, status, []
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        return srv, f"http://127.0.0.1:{srv.server_address[1]}"

    def test_a_redirect_is_the_answer_never_followed_with_the_key(self):
        other, other_url = self.serve(None)
        for status in (303, 307):
            for name, location in (("same origin", "/v1/charges/moved"), ("another origin", other_url + "/v1/charges")):
                with self.subTest(status=status, to=name):
                    front, front_url = self.serve(location, status)
                    client = ic.Client(sleep=lambda s: None)
                    result = client.request("POST", front_url + "/v1/charges", json={"amount": 3}, operation="charge")
                    self.assertEqual((result.status, result.headers.get("Location"), result.attempts),
                                     (status, location, 1))
                    self.assertEqual(front.reached + other.reached, [], "no request carried the key to the Location")
                    self.assertIsNone(client.pending("charge"), "the redirect is a final answer")


class _Busy(http.server.BaseHTTPRequestHandler):
    # Answers every request 503 with Retry-After: 5, counting them.
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self.server.calls += 1
        self.send_response(503)
        self.send_header("Retry-After", "5")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class TimeoutTest(unittest.TestCase):
    def test_timeout_bounds_the_whole_operation_waits_included(self):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Busy)
        srv.calls = 0
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        now, waits = [1000.0], []

        def sleep(s):  # a clock that moves only when the client waits
            waits.append(s)
            now[0] += s

        client = ic.Client(sleep=sleep, max_attempts=10)
        client._clock = lambda: now[0]
        with self.assertRaises(ic.GaveUpError) as caught:
            client.request("POST", f"http://127.0.0.1:{srv.server_address[1]}/v1/orders", json={"order": 42},
                           operation="order-42", timeout=12)
        self.assertEqual(waits, [5, 5], "a wait that would end past the timeout is not begun")
        self.assertEqual((srv.calls, caught.exception.attempts, caught.exception.status), (3, 3, 503))
        self.assertIsNotNone(client.pending("order-42"), "the key is kept for a later call")


if __name__ == "__main__":
    unittest.main()
