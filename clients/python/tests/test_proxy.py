"""The client against the built proxy and the scripted upstream of
e2e/clients_harness_test.go, which runs these tests and sets the URLs."""

import json
import os
import tempfile
import threading
import time
import unittest
import urllib.request

import idempotency_client as ic

PROXY = os.environ.get("IDEMPOTENCY_PROXY_URL")
SLOW_PROXY = os.environ.get("IDEMPOTENCY_SLOW_PROXY_URL")
FRONT = os.environ.get("IDEMPOTENCY_FRONT_URL")
UPSTREAM = os.environ.get("IDEMPOTENCY_UPSTREAM_URL")
ERRORS = {"payload-mismatch": ic.PayloadMismatchError, "key-expired": ic.KeyExpiredError}

_ids = 0
_ids_lock = threading.Lock()


def new_id():
    global _ids
    with _ids_lock:
        _ids += 1
        return f"py-{os.getpid()}-{_ids}"


def count(op_id):
    with urllib.request.urlopen(f"{UPSTREAM}/count/{op_id}", timeout=10) as r:
        return json.load(r)


def wait_for(cond, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def release(op_id):
    req = urllib.request.Request(f"{UPSTREAM}/release/{op_id}", data=b"", method="POST")
    urllib.request.urlopen(req, timeout=10).close()


@unittest.skipUnless(PROXY, "needs the harness (go test -run TestPythonClientFollowsTheContract ./e2e)")
class ProxyTest(unittest.TestCase):
    def setUp(self):
        with open(os.environ["IDEMPOTENCY_CONTRACT"], encoding="utf-8") as f:
            self.contract = json.load(f)

    def test_every_answer_of_the_contract(self):
        for row in (p for p in self.contract["problems"] if "proxy" in p["listeners"]):
            with self.subTest(row["type"]):
                op_id = new_id()
                retries = []
                client = ic.Client(max_attempts=3, base_delay=0.02, max_delay=0.05, on_retry=retries.append)
                url = f"{PROXY}/answer/{row['type']}/{op_id}"
                if row["client"] == "retry":
                    res = client.request("POST", url, json={}, operation=op_id)
                    self.assertEqual(res.status, 201)
                    self.assertEqual(len(retries), 1)
                    self.assertEqual(retries[0].status, row["status"])
                    self.assertEqual(retries[0].problem["type"], self.contract["problem_base"] + row["type"])
                    if row["retry_after"]:
                        self.assertEqual(retries[0].delay, 0.05, "Retry-After: 1, capped by max_delay")
                    else:
                        self.assertLess(retries[0].delay, 0.02, "jittered backoff under base_delay")
                    self.assertEqual(count(op_id)["hits"], 2)
                else:
                    with self.assertRaises(ERRORS.get(row.get("error"), ic.ProblemError)) as cm:
                        client.request("POST", url, json={}, operation=op_id)
                    self.assertEqual(cm.exception.status, row["status"])
                    self.assertEqual(cm.exception.problem["type"], self.contract["problem_base"] + row["type"])
                    self.assertEqual(count(op_id)["hits"], 1, "a stop answer is not retried")
                self.assertIsNone(client.pending(op_id), "a final answer drops the operation's key")

    def test_lost_answer_gets_the_replay(self):
        op_id = new_id()
        res = ic.Client(base_delay=0.01).request("POST", f"{FRONT}/lose/{op_id}", json={"amount": 1})
        self.assertEqual((res.status, res.replayed, res.attempts), (201, True, 2))
        self.assertEqual(count(op_id)["executions"], 1)

    def test_attempt_timeout_while_in_flight_is_one_execution(self):
        op_id = new_id()
        released = []

        def on_retry(r):
            # The first attempt timed out and a later one found it running.
            if r.problem and r.problem["type"].endswith("/in-flight") and not released:
                released.append(True)
                release(op_id)

        client = ic.Client(max_attempts=20, base_delay=0.01, max_delay=0.05, attempt_timeout=0.3, on_retry=on_retry)
        res = client.request("POST", f"{PROXY}/slow/{op_id}", json={"amount": 2})
        self.assertTrue(res.replayed)
        seen = count(op_id)
        self.assertEqual(seen["executions"], 1)
        self.assertEqual(len(set(seen["keys"])), 1, "every attempt carried the same key")

    def test_upstream_timeout_then_the_running_calls_answer(self):
        op_id = new_id()
        seen = []

        def on_retry(r):
            if r.problem:
                seen.append(r.problem["type"].rsplit("/", 1)[-1])
            if seen[-1:] == ["in-flight"] and seen.count("in-flight") == 1:
                release(op_id)

        client = ic.Client(max_attempts=20, base_delay=0.01, max_delay=0.05, on_retry=on_retry)
        res = client.request("POST", f"{SLOW_PROXY}/slow/{op_id}", json={"amount": 5})
        self.assertEqual(seen[:2], ["upstream-timeout", "in-flight"])
        self.assertTrue(res.replayed)
        self.assertEqual(count(op_id)["executions"], 1)

    def test_attempts_run_out_and_the_key_is_kept(self):
        op_id = new_id()
        client = ic.Client(max_attempts=3, base_delay=0.01, max_delay=0.02)
        with self.assertRaises(ic.GaveUpError) as cm:
            client.request("POST", f"{PROXY}/always/store-unavailable/{op_id}", json={}, operation=op_id)
        e = cm.exception
        self.assertEqual((e.attempts, e.status), (3, 503))
        self.assertEqual(e.problem["type"], self.contract["problem_base"] + "store-unavailable")
        self.assertEqual(client.pending(op_id), e.key)
        seen = count(op_id)
        self.assertEqual(seen["hits"], 3)
        self.assertEqual(set(seen["keys"]), {e.key})

    def test_key_reused_with_another_payload(self):
        op_id = new_id()
        client = ic.Client()
        key = f"reused-{op_id}"
        client.request("POST", f"{PROXY}/charge/{op_id}", json={"amount": 1}, key=key)
        with self.assertRaises(ic.PayloadMismatchError):
            client.request("POST", f"{PROXY}/charge/{op_id}", json={"amount": 2}, key=key)
        self.assertTrue(client.request("POST", f"{PROXY}/charge/{op_id}", json={"amount": 1}, key=key).replayed)
        self.assertEqual(count(op_id)["executions"], 1)

    def test_concurrent_calls_of_one_operation_are_one_request(self):
        op_id = new_id()
        op = f"pay-{op_id}"
        client = ic.Client()
        results = []

        def submit():
            results.append(client.request("POST", f"{PROXY}/slow/{op_id}", json={"amount": 3}, operation=op))

        first, second = threading.Thread(target=submit), threading.Thread(target=submit)
        first.start()
        wait_for(lambda: count(op_id)["hits"] == 1, "the first call to reach the upstream")
        second.start()
        # The second call waits on the first's flight (a CPython detail of
        # threading.Event, read only here): then the upstream may answer.
        wait_for(lambda: op in client._flights and len(client._flights[op].done._cond._waiters) == 1,
                 "the second call to join the first")
        release(op_id)
        first.join(10)
        second.join(10)
        self.assertEqual(len(results), 2)
        self.assertIs(results[0], results[1])
        self.assertEqual(count(op_id)["hits"], 1)

    def test_a_restarted_process_resumes_with_the_kept_key(self):
        op_id = new_id()
        op = f"checkout-{op_id}"
        with tempfile.TemporaryDirectory() as key_dir:
            first = ic.Client(key_dir=key_dir, max_attempts=1, attempt_timeout=0.2)
            with self.assertRaises(ic.GaveUpError):
                first.request("POST", f"{PROXY}/slow/{op_id}", json={"amount": 4}, operation=op)
            key = first.pending(op)
            self.assertTrue(key, "the key is kept while the operation has no final answer")

            released = []

            def on_retry(_):
                if not released:
                    released.append(True)
                    release(op_id)

            second = ic.Client(key_dir=key_dir, max_attempts=20, base_delay=0.01, max_delay=0.05, on_retry=on_retry)
            res = second.request("POST", f"{PROXY}/slow/{op_id}", json={"amount": 4}, operation=op)
            self.assertEqual(res.key, key)
            self.assertTrue(res.replayed)
            self.assertIsNone(second.pending(op))
            self.assertEqual(os.listdir(key_dir), [])
        seen = count(op_id)
        self.assertEqual(seen["executions"], 1)
        self.assertEqual(set(seen["keys"]), {key})

    def test_respond_async_202_then_the_status_urls_one_answer(self):
        op_id = new_id()
        waits = []

        def sleep(_):
            # The upstream holds the call until the release: a poll sees 202 first.
            waits.append(True)
            if len(waits) == 2:
                release(op_id)
            time.sleep(0.005)

        client = ic.Client(respond_async=True, max_polls=2000, sleep=sleep)
        res = client.request("POST", f"{PROXY}/slow/{op_id}", json={"amount": 6},
                             headers={"Authorization": "Bearer alice"})
        self.assertEqual((res.status, res.replayed), (201, True))
        self.assertGreaterEqual(res.polls, 2)
        self.assertEqual(res.json()["execution"], 1)
        self.assertEqual(count(op_id)["executions"], 1)


if __name__ == "__main__":
    unittest.main()
