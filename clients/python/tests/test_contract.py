"""The client decides every answer as clients/contract.json does."""

import json
import os
import unittest
import uuid

import idempotency_client as ic

CONTRACT = os.environ.get("IDEMPOTENCY_CONTRACT") or os.path.join(
    os.path.dirname(__file__), "..", "..", "contract.json")


def load_contract():
    with open(CONTRACT, encoding="utf-8") as f:
        return json.load(f)


class ContractTest(unittest.TestCase):
    def setUp(self):
        self.contract = load_contract()
        self.rows = [p for p in self.contract["problems"] if "proxy" in p["listeners"]]

    def test_every_proxy_problem_type_is_decided_as_the_contract_says(self):
        self.assertEqual(ic.PROBLEM_BASE, self.contract["problem_base"])
        self.assertEqual(sorted(ic.PROBLEM_ACTIONS), sorted(p["type"] for p in self.rows))
        for row in self.rows:
            uri = self.contract["problem_base"] + row["type"]
            self.assertEqual(ic.decide(row["status"], uri, False), row["client"], row["type"])
            self.assertEqual(ic.decide(row["status"], uri, True), self.contract["other_answers"]["replayed"])

    def test_every_other_answer_is_decided_by_its_status(self):
        other = self.contract["other_answers"]
        for status in range(200, 600):
            want = "retry" if status in other["retry_statuses"] else other["otherwise"]
            self.assertEqual(ic.decide(status, "https://api.example/problems/x", False), want, status)
            self.assertEqual(ic.decide(status, None, True), other["replayed"], status)
        for status in range(300, 400):  # handed over, never followed (test_attempts.RedirectTest)
            self.assertEqual(ic.decide(status, None, False), other["redirect"], status)
        self.assertEqual(self.contract["network_error"], "retry")
        self.assertEqual(self.contract["attempt_timeout"], "retry")

    def test_retry_after_is_read_in_both_forms(self):
        now = 1_795_939_200.0
        self.assertEqual(ic.parse_retry_after("2", now), 2.0)
        self.assertEqual(ic.parse_retry_after(" 120 ", now), 120.0)
        from email.utils import formatdate
        self.assertEqual(ic.parse_retry_after(formatdate(now + 3, usegmt=True), now), 3.0)
        self.assertEqual(ic.parse_retry_after(formatdate(now - 60, usegmt=True), now), 0.0)
        self.assertIsNone(ic.parse_retry_after("soon", now))
        self.assertIsNone(ic.parse_retry_after(None, now))

    def test_keys_are_uuid4(self):
        k = ic.new_key()
        self.assertEqual(uuid.UUID(k).version, 4)
        self.assertNotEqual(k, ic.new_key())


if __name__ == "__main__":
    unittest.main()
