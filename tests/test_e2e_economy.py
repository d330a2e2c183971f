"""End-to-end tier, context economy (issue 16): waking a session whose stored transcript is far larger
than the window sends a first request under the handoff threshold (the real SDK and CLI)."""

from __future__ import annotations

import json
import unittest

from tests import test_e2e as base
from tests.fakeapi import text, tool
from tests.test_e2e import HAVE_SDK, SKIP, last_user_text


@unittest.skipUnless(HAVE_SDK, SKIP)
class Economy(unittest.TestCase):
    E = base.EndToEnd
    setUp, tearDown, flower, read, lineage, work_row, manifest = (
        E.setUp, E.tearDown, E.flower, E.read, E.lineage, E.work_row, E.manifest)
    del E

    def test_waking_an_oversized_session_sends_a_request_under_the_threshold(self):
        big = "python3 -c \"print('y' * 20000)\""
        self.roles.work = [tool("Bash", {"command": big}, input_tokens=2000) for _ in range(40)] + \
                          [text("all printed", input_tokens=2000), text("resumed fine", input_tokens=2000)]
        self.flower("--no-trim", "--window", "200000", "print a lot")
        work_sid = self.lineage()["steps"]["work"]
        before = len(self.roles.bodies("work"))
        self.flower("--no-trim", "--window", "200000", "now summarise")
        first = self.roles.bodies("work")[before]
        self.assertEqual(last_user_text(first).strip().splitlines()[-1], "now summarise")
        self.assertEqual(self.lineage()["steps"]["work"], work_sid)           # the same session, resumed
        sent = len(json.dumps(first["messages"], ensure_ascii=False))
        self.assertGreater(40 * 20000, 150_000 * 3.5)                          # the stored one would not fit
        self.assertLess(sent / 3.5, 150_000, sent)                             # what was sent does
        self.assertIn("tool result archived", json.dumps(first["messages"]))


if __name__ == "__main__":
    unittest.main()
