"""End-to-end tier, context economy (issue 16): waking a session whose stored transcript is far larger
than the window sends a first request under the handoff threshold (the real SDK and CLI)."""

from __future__ import annotations

import json
import unittest

from tests.fakeapi import text, tool, last_user_text
from tests.helpers import E2ECase, HAVE_SDK, SKIP, freeze_front


@unittest.skipUnless(HAVE_SDK, SKIP)
class Economy(E2ECase, unittest.TestCase):
    def test_waking_an_oversized_session_sends_a_request_under_the_threshold(self):
        big = "python3 -c \"print('y' * 20000)\""
        self.roles.work = [tool("Bash", {"command": big}, input_tokens=2000) for _ in range(40)] + \
                          [text("all printed", input_tokens=2000), text("resumed fine", input_tokens=2000)]
        freeze_front(self.ws)   # a finished job to wake: its work and judge as a fresh go leaves them
        self.flower("--no-trim", "--window", "200000")
        work_sid = self.lineage()["steps"]["work"]
        before = len(self.roles.bodies("work"))
        self.flower("--no-trim", "--window", "200000", "now summarise")
        first = self.roles.bodies("work")[before]
        self.assertEqual(last_user_text(first).strip().splitlines()[0], "now summarise")   # then the new goal
        self.assertEqual(self.lineage()["steps"]["work"], work_sid)           # the same session, resumed
        sent = len(json.dumps(first["messages"], ensure_ascii=False))
        self.assertGreater(40 * 20000, 150_000 * 3.5)                          # the stored one would not fit
        self.assertLess(sent / 3.5, 150_000, sent)                             # what was sent does
        self.assertIn("tool result archived", json.dumps(first["messages"]))


if __name__ == "__main__":
    unittest.main()
