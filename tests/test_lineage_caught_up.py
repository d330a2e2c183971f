"""A lineage record a full disk refused is written as soon as a write goes through again (issue 39).

``bench/chaos.py --delegate`` (local state), seed 9: the run dir was full when a context overflow handed
the work over to a fresh session, so the lineage kept naming the retired session (the record stayed
owed); the disk freed, the successor delegated step 22, and flower was killed (SIGKILL) before any
later lineage write: the next run resumed the retired session and step 22 was done twice. Now the owed
record is written once the store takes entries again.

Real SDK + CLI against tests/fakeapi.py; the run dir on a small tmpfs that the test fills at the phase
(needs root, else skipped)."""

from __future__ import annotations

import json
import os
import signal
import unittest

from tests.fakeapi import FakeAnthropic, error, text, tool
from tests.helpers import E2ECase, Filling, HAVE_SDK, SKIP, mount_small, unmount_small, wait_until


@unittest.skipUnless(HAVE_SDK, SKIP)
class OwedLineageCaughtUp(Filling, E2ECase, unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.run_dir = self.small = os.path.join(self.ws, ".flower")
        why = mount_small(self.run_dir)
        if why:
            super().tearDown()
            self.skipTest(f"a small tmpfs for the run dir cannot be mounted here (needs root): {why}")

    def tearDown(self):
        unmount_small(self.run_dir)
        super().tearDown()

    def work_sid(self):
        try:
            return json.loads(self.read(".flower", "lineage.json"))["steps"].get("work")
        except (OSError, ValueError, KeyError):
            return None

    def test_the_successor_of_a_handoff_made_on_a_full_disk_is_resumed_after_a_kill(self):
        marker = os.path.join(self.ws, "step.log")
        overflow = error(400, "prompt is too long: 210000 tokens > 200000 maximum", "invalid_request_error")
        self.roles.work = [tool("Bash", {"command": "echo one"}), self.full(overflow),
                           self.freed(tool("Bash", {"command": f"echo ran >> {marker} && sleep 50"},
                                           say="SUCCESSOR-MARK"))]
        p = self.spawn("--json", "do the step")
        try:
            self.wait_for(lambda: os.path.exists(marker), timeout=180, what="the successor's step running")
            first = [b for b in self.roles.bodies("work")]
            self.assertGreaterEqual(len(first), 3)
            # the phase: the successor's step runs, its answer stored; the fixed flower wrote the owed
            # lineage record by now (its answer reaches no request before the step's 50 s are over)
            wait_until(lambda: self.work_sid() is not None
                       and any(self.work_sid() in json.dumps(b.get("metadata", "")) for b in first[2:])
                       and "SUCCESSOR-MARK" in json.dumps(self.stored(self.work_sid())),
                       timeout=15, interval=0.2)
            os.kill(p.pid, signal.SIGKILL)
        finally:
            p.communicate(timeout=60)
        self.roles.work = [text("all done")]
        self.flower("do the step", timeout=240)
        resumed = FakeAnthropic.messages_text(self.roles.bodies("work")[-1])
        self.assertIn("SUCCESSOR-MARK", resumed)   # the next run resumed the successor, not the retired one
        self.assertEqual(self.read("step.log"), "ran\n")


if __name__ == "__main__":
    unittest.main()
