"""respond_async against a fake proxy on loopback: the 202's status URL is
followed to the answer, after each Retry-After, for max_polls polls at most.
The waits go through an injected sleep, so nothing here sleeps."""

import http.server
import json
import threading
import unittest

import idempotency_client as ic

STATUS = "/.well-known/idempotency/s1.sig"


class FakeProxy(http.server.ThreadingHTTPServer):
    """Answers the request, then each poll, from answers in order (the last
    one repeated), recording what each call sent."""

    def __init__(self, answers):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = answers
        self.calls = []
        self.lock = threading.Lock()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


def accepted(retry_after):
    return 202, {"Location": STATUS, "Preference-Applied": "respond-async", "Retry-After": str(retry_after)}, b""


class _Handler(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        with self.server.lock:
            self.server.calls.append({"method": self.command, "path": self.path, "headers": self.headers, "body": body})
            status, headers, out = self.server.answers[min(len(self.server.calls), len(self.server.answers)) - 1]
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


class RespondAsyncTest(unittest.TestCase):
    def start(self, answers):
        srv = FakeProxy(answers)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        return srv

    def test_respond_async_follows_the_status_url_to_the_one_answer_after_each_retry_after(self):
        srv = self.start([accepted(3), accepted(20), (201, {"Idempotent-Replayed": "true"}, b"charged")])
        waits = []
        client = ic.Client(respond_async=True, max_delay=5.0, sleep=waits.append)
        result = client.request("POST", srv.url + "/v1/reports", json={"month": 12},
                                headers={"Authorization": "Bearer alice"}, operation="report")
        self.assertEqual((result.status, result.replayed, result.body, result.polls), (201, True, b"charged", 2))
        self.assertIsNone(client.pending("report"), "the answer ends the operation")
        self.assertEqual(waits, [3.0, 5.0], "each 202's Retry-After, capped by max_delay")
        req, *polls = srv.calls
        self.assertEqual((req["method"], req["headers"].get("Prefer")), ("POST", "respond-async"))
        self.assertEqual(len(polls), 2)
        for p in polls:
            self.assertEqual((p["method"], p["path"], p["body"]), ("GET", STATUS, b""))
            self.assertEqual(p["headers"].get("Authorization"), "Bearer alice", "the scope headers go with each poll")
            for h in ("Idempotency-Key", "Prefer", "Content-Type"):
                self.assertIsNone(p["headers"].get(h), h)

    def test_respond_async_polls_are_bounded_by_max_polls_and_the_key_is_kept(self):
        srv = self.start([accepted(1)])
        waits = []
        client = ic.Client(respond_async=True, max_polls=3, sleep=waits.append)
        with self.assertRaises(ic.GaveUpError) as cm:
            client.request("POST", srv.url + "/v1/reports", body=b"x", operation="report")
        self.assertEqual((cm.exception.status, cm.exception.attempts), (202, 3))
        self.assertEqual(len(srv.calls), 1 + 3, "the request and three polls")
        self.assertEqual(waits, [1.0, 1.0, 1.0])
        self.assertIsNotNone(client.pending("report"), "a later call resumes the operation")

    def test_respond_async_poll_answered_status_unknown_stops(self):
        problem = {"type": ic.PROBLEM_BASE + "status-unknown", "status": 404, "title": "unknown status URL"}
        srv = self.start([accepted(1), (404, {"Content-Type": "application/problem+json"}, json.dumps(problem).encode())])
        client = ic.Client(respond_async=True, sleep=lambda d: None)
        with self.assertRaises(ic.ProblemError) as cm:
            client.request("POST", srv.url + "/v1/reports", body=b"x")
        self.assertEqual(cm.exception.status, 404)
        self.assertEqual(len(srv.calls), 2)

    def test_respond_async_is_added_to_the_callers_preferences(self):
        srv = self.start([(201, {}, b"")])
        ic.Client(respond_async=True).request("POST", srv.url + "/v1/reports", body=b"x",
                                              headers={"prefer": "return=minimal"})
        self.assertEqual(srv.calls[0]["headers"].get_all("Prefer"), ["return=minimal, respond-async"])

    def test_without_respond_async_a_202_is_the_answer_and_no_preference_is_sent(self):
        srv = self.start([accepted(1)])
        client = ic.Client(sleep=lambda d: self.fail("no wait"))
        result = client.request("POST", srv.url + "/v1/reports", body=b"x")
        self.assertEqual(result.status, 202)
        self.assertEqual(len(srv.calls), 1)
        self.assertIsNone(srv.calls[0]["headers"].get("Prefer"))


    def test_respond_async_status_url_on_another_origin_is_the_answer_never_polled(self):
        elsewhere = self.start([(200, {}, b"polled")])
        srv = self.start([(202, {"Location": elsewhere.url + STATUS, "Preference-Applied": "respond-async",
                                 "Retry-After": "1"}, b"")])
        client = ic.Client(respond_async=True, sleep=lambda d: self.fail("no wait"))
        result = client.request("POST", srv.url + "/v1/reports", body=b"x", headers={"Authorization": "Bearer alice"})
        self.assertEqual(result.status, 202)
        self.assertEqual(len(srv.calls), 1)
        self.assertEqual(elsewhere.calls, [], "the request's headers stay on its origin")

    def test_respond_async_poll_answered_released_sends_the_request_again_with_its_key(self):
        srv = self.start([
            accepted(1),
            (503, {"Idempotent-Released": "true", "Retry-After": "2"}, b""),
            accepted(1),
            (201, {"Idempotent-Replayed": "true"}, b"charged"),
        ])
        waits = []
        client = ic.Client(respond_async=True, sleep=waits.append)
        result = client.request("POST", srv.url + "/v1/reports", body=b"x", operation="report")
        self.assertEqual(result.status, 201)
        self.assertEqual([c["method"] for c in srv.calls], ["POST", "GET", "POST", "GET"],
                         "the released answer is retried by sending the request again")
        self.assertEqual(srv.calls[2]["headers"].get("Idempotency-Key"), srv.calls[0]["headers"].get("Idempotency-Key"), "with its key")
        self.assertEqual(srv.calls[2]["body"], b"x")
        self.assertEqual(waits, [1.0, 2.0, 1.0], "the released answer's Retry-After before the resend")

    def test_respond_async_poll_answered_503_without_the_released_mark_polls_again(self):
        srv = self.start([accepted(1), (503, {"Retry-After": "1"}, b""), (201, {"Idempotent-Replayed": "true"}, b"charged")])
        client = ic.Client(respond_async=True, sleep=lambda d: None)
        result = client.request("POST", srv.url + "/v1/reports", body=b"x")
        self.assertEqual(result.status, 201)
        self.assertEqual([c["method"] for c in srv.calls], ["POST", "GET", "GET"])


if __name__ == "__main__":
    unittest.main()
