"""End-to-end tier, no hang (issue 36, item 10): the real SDK and CLI against the fake API, with the
stall bound made short by FLOWER_STALL_TIMEOUT (its lines then come every third of it, not every
minute). A stream that stalls, and a CLI stopped with SIGSTOP, each get lines saying flower waits, then
past the bound the turn is treated as a stall: the CLI is stopped for good and the turn retried (the run
finishes). Without the bound, both runs wait as long as the stall lasts: the subprocess timeout (well
under the stall) is what a hang looks like here."""

from __future__ import annotations

import json
import os
import signal
import time
import unittest

from tests.fakeapi import Reply, text
from tests.helpers import E2ECase, HAVE_SDK, SKIP, freeze_front, role_of

STALL = "4"   # seconds: FLOWER_STALL_TIMEOUT for these runs
ENV = {"FLOWER_STALL_TIMEOUT": STALL, "CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS": "600000"}


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@unittest.skipUnless(HAVE_SDK, SKIP)
class Stall(E2ECase, unittest.TestCase):
    def work_requests(self):
        return [b for r, b in self.roles.log if r == "work"]

    def test_a_stalled_stream_is_said_each_interval_then_retried(self):
        self.roles.work = [Reply(stall=120), text("done after the stall")]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.flower("--no-goal", env=ENV, timeout=90)
        quiet = [line for line in p.stderr.splitlines() if "no message from the CLI" in line]
        self.assertTrue(quiet, p.stderr[-3000:])
        self.assertIn("waiting for the model's answer", quiet[0])
        self.assertIn("retry", p.stderr)
        self.assertIn("transient", p.stderr)
        self.assertEqual(len(self.work_requests()), 2)
        work = [r for r in self.manifest() if r["step"] == "work"][-1]
        self.assertTrue(work["ok"])
        self.assertEqual(work["attempts"], 2)
        self.assertIn("stream stalled", " ".join(work["errors"]))

    def test_a_stopped_cli_is_said_then_replaced(self):
        stopped = {}
        original = self.roles.__call__

        def slow_first_work(body):
            if role_of(body) == "work" and not stopped.get("asked"):
                stopped["asked"] = True
                self.roles.log.append(("work", body))
                return Reply(stall=1.5)      # time to stop the CLI while its request is in flight
            return original(body)
        self.api.responder = slow_first_work
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        proc = E2ECase.spawn(self, "--no-goal", env=ENV)
        self.addCleanup(lambda: (proc.kill(), proc.wait(), proc.stdout.close(), proc.stderr.close()))
        self.wait_for(lambda: stopped.get("asked"), timeout=60, what="the first work request")
        live = os.path.join(self.ws, ".flower", "live")
        records = [json.load(open(os.path.join(live, n))) for n in os.listdir(live) if n.endswith(".json")]
        self.assertEqual(len(records), 1, records)
        cli = records[0]["cli"]
        os.kill(cli, signal.SIGSTOP)
        self.addCleanup(lambda: proc_state(cli) and os.kill(cli, signal.SIGKILL))
        try:
            out, err = proc.communicate(timeout=90)
        finally:
            if proc_state(cli) in ("T", "t"):
                os.kill(cli, signal.SIGCONT)
        self.assertEqual(proc.returncode, 0, err[-3000:])
        self.assertIn(f"the CLI process {cli} is stopped", err)
        self.assertIn("retry", err)
        self.assertEqual(len(self.work_requests()), 2)
        deadline = time.monotonic() + 10
        while proc_state(cli) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn(proc_state(cli), (None, "Z"))   # the stopped CLI did not outlive the stall


if __name__ == "__main__":
    unittest.main()
