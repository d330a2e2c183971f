"""A lineage record a full disk refused is written once there is room (issue 36).

Trusting chaos, local seed 1: a degraded handoff came while the run dir was full, so ``lineage.json``
kept naming the retired session; the successor worked on, flower was stopped, and the next run resumed
the retired session and redid the successor's steps 20-23. The fault here lands at a phase: the run
dir fills up when the handoff's ritual is answered, and room comes back after a counted number of
refused writes or at the successor's first tool batch (never after a wall-clock delay)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import unittest
from unittest import mock

import flower
from flower import HandoffPolicy
from tests import fakesdk
from tests.fakesdk import FAKE
from tests.helpers import FakeRuntime

DONE = """## Status
DONE-STEPS: 1-19

## Decisions
- one Bash call per step

## Dead ends
(none)

## Next step
Run `echo step 20 >> steps.log`.

## Pointers
- steps.log
"""


class OwedLineage(FakeRuntime, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.full = False
        self.refused = 0
        self.sleeps: list[float] = []
        self.on_disk: list[tuple[str, str | None]] = []   # (phase, the work step's session in lineage.json)

    def runtime(self, attempts: int) -> flower.Runtime:
        async def sleep(seconds):
            self.sleeps.append(seconds)
        self.rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir,
                                 resilience=flower.Resilience(probe=False, base_delay=0, max_attempts=attempts),
                                 handoff=HandoffPolicy(window=200_000), sleep=sleep)
        self.rts.append(self.rt)   # closed in tearDown
        return self.rt

    def disk(self) -> str | None:
        with open(os.path.join(self.run_dir, "lineage.json"), encoding="utf-8") as fh:
            return json.load(fh)["steps"].get("work")

    def write_json(self, real):
        def write(path, value):
            if self.full and os.path.basename(path) == "lineage.json":
                self.refused += 1
                raise OSError(errno.ENOSPC, "No space left on device", path)
            return real(path, value)
        return write

    def ritual(self, prompt, options, loaded):
        self.retired = options.session_id
        self.full = True   # the run dir fills up as the handoff is answered
        return [("text", DONE, 151_000)]

    def successor(self, prompt, options, loaded):
        self.successor_sid = options.session_id
        self.on_disk.append(("first request", self.disk()))
        return [("tool", "Bash", {"command": "echo step 20 >> steps.log"}, "ok", 20_000),
                ("tool", "Bash", {"command": "echo step 21 >> steps.log"}, "ok", 21_000),
                ("text", "paused", 22_000)]

    def work(self, rt: flower.Runtime, room_after: int | None = None):
        real = flower.write_json
        batch = fakesdk.ClaudeSDKClient._batch_stops
        test = self

        async def batch_stops(client, calls):
            if client._sid == getattr(test, "successor_sid", None) and room_after == 0:
                test.full = False   # room again once the successor's first tool ran
            stop = await batch(client, calls)
            if client._sid == getattr(test, "successor_sid", None):
                test.on_disk.append(("after a batch", test.disk()))
            return stop

        def write(path, value):
            if self.full and room_after and self.refused >= room_after:
                self.full = False
            return self.write_json(real)(path, value)

        FAKE.turns = [[("tool", "Bash", {"command": "echo step 19 >> steps.log"}, "ok", 151_000)],
                      self.ritual, self.successor]
        with mock.patch.object(flower, "write_json", write), \
                mock.patch.object(fakesdk.ClaudeSDKClient, "_batch_stops", batch_stops):
            return asyncio.run(rt.run(flower.AgentSpec("work"), "do the 40 steps", lineage_key="work"))

    def test_a_successor_waits_for_room_before_its_first_request(self):
        result = self.work(self.runtime(attempts=6), room_after=3)
        self.assertTrue(result.ok, result.error)
        self.assertEqual(result.retired, [self.retired])
        self.assertGreaterEqual(self.refused, 3)
        self.assertEqual(self.on_disk[0], ("first request", self.successor_sid))
        self.assertTrue(self.sleeps, "the write-ahead waited with the backoff")
        # a new run (this one killed now) opens the successor, never the session it replaced
        self.assertEqual(flower.Lineage.open(self.rt.paths.run_dir, self.ws).steps["work"], self.successor_sid)

    def test_the_first_tool_batch_writes_it_when_the_wait_gave_up(self):
        result = self.work(self.runtime(attempts=1), room_after=0)
        self.assertTrue(result.ok, result.error)
        self.assertEqual(self.on_disk[0], ("first request", self.retired))   # no wait: the budget is 1
        self.assertEqual(self.on_disk[1], ("after a batch", self.successor_sid))   # before request 2

    def test_this_process_never_drives_the_retired_session_while_the_disk_stays_full(self):
        rt = self.runtime(attempts=1)
        result = self.work(rt)
        self.assertTrue(result.ok, result.error)
        self.assertEqual(self.disk(), self.retired)
        self.assertEqual(rt.lineage.steps["work"], self.successor_sid)   # what a resume of the step takes
        self.full = False
        rt.lineage.bump()   # any later write carries the owed record first
        self.assertEqual(self.disk(), self.successor_sid)
        self.assertEqual(rt.lineage.steps["work"], self.successor_sid)
        self.assertEqual(rt.lineage.starts["work"]["session_id"], self.successor_sid)

    def test_a_stop_by_signal_writes_it_when_there_is_room(self):
        rt = self.runtime(attempts=1)
        self.work(rt)
        self.full = False
        with mock.patch.object(flower, "write_json", self.write_json(flower.write_json)):
            rt.rescue()
        self.assertEqual(self.disk(), self.successor_sid)


if __name__ == "__main__":
    unittest.main()
