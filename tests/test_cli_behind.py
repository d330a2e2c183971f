"""A CLI that is only behind is not a CLI that cannot write (issue 39, found under load).

A worker's answer makes flower store what the coordinator streamed but neither the store nor the CLI's
transcript holds: with HOME full the CLI never writes it, and a kill -9 while the worker runs would lose
the Agent call. But the CLI drains its transcript writes every 100 ms, so on a busy machine the worker's
first answer can come before the coordinator's is on disk: flower then stored it from the stream too and
said "stored 2 message(s) ... never recorded" of a normal delegation (test_delegation_unwritten, 4
workers on 2 cores). Now a CLI whose transcript has room gets a moment to write it; a full one none."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import unittest
import uuid
from unittest import mock

import flower
from flower import Resilience, Runtime
from tests import fakesdk
from tests.fakesdk import AssistantMessage, TextBlock, ToolUseBlock


class CliBehind(fakesdk.FakeWorkspace, unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.config = os.path.join(self.tmp.name, "config")
        patcher = mock.patch.dict(os.environ, {"CLAUDE_CONFIG_DIR": self.config})
        patcher.start()
        self.addCleanup(patcher.stop)
        self.events = []
        self.rt = Runtime(workspace=self.ws, run_dir=self.run_dir, on_event=self.events.append,
                          resilience=Resilience(probe=False))
        self.addCleanup(self.rt.close)
        self.sid = str(uuid.uuid4())
        self.transcript = os.path.join(self.config, "projects", self.rt.project_key, f"{self.sid}.jsonl")
        os.makedirs(os.path.dirname(self.transcript))
        with open(self.transcript, "w") as fh:   # the session's prompt, written and mirrored
            fh.write(json.dumps({"type": "user", "uuid": "p0", "sessionId": self.sid}) + "\n")
        self.call = AssistantMessage([TextBlock("delegating"), ToolUseBlock("toolu_1", "Agent", {"prompt": "x"})],
                                     "m", usage={"input_tokens": 10}, message_id="msg_1", uuid=str(uuid.uuid4()))

    def cli_writes_later(self, delay: float) -> threading.Thread:
        def write():
            time.sleep(delay)
            with open(self.transcript, "a") as fh:
                fh.write(json.dumps({"type": "assistant", "uuid": self.call.uuid, "parentUuid": "p0"}) + "\n")
        thread = threading.Thread(target=write)
        thread.start()
        self.addCleanup(thread.join)
        return thread

    def keep(self) -> list[dict]:
        """A worker's answer arrives with the coordinator's call streamed and not mirrored: what the
        store holds of the session after flower is done keeping."""
        state = flower._RunState(name="work", window=200_000, at=180_000, warn_at=150_000, manage=True,
                                 emit=self.events.append, sid=self.sid)
        turn = flower._Turn(seen=[self.call])

        async def worker_answered():
            self.rt._keep_streamed(state, turn)
            if turn.keeping is not None:
                await turn.keeping
        asyncio.run(worker_answered())
        return self.rt.raw_store.load_sync({"project_key": self.rt.project_key, "session_id": self.sid}) or []

    def infos(self) -> list[str]:
        return [e.data["message"] for e in self.events if e.kind == "info"]

    def test_a_cli_that_writes_a_moment_later_has_nothing_stored_for_it(self):
        self.cli_writes_later(0.4)
        with mock.patch.object(flower, "CLI_WRITE_GRACE", 60.0):   # however loaded the machine, it writes in time
            self.assertEqual(self.keep(), [])
        self.assertFalse([m for m in self.infos() if "never recorded" in m], self.infos())

    def test_a_cli_that_never_writes_has_the_call_stored_after_the_grace(self):
        with mock.patch.object(flower, "CLI_WRITE_GRACE", 0.3):
            stored = self.keep()
        self.assertIn(self.call.uuid, [e.get("uuid") for e in stored])
        self.assertIn(flower.text("info_from_stream", n=1, sid=self.sid), self.infos())

    def test_a_full_home_has_the_call_stored_at_once(self):
        self.cli_writes_later(0.4)   # as if: with no room the CLI cannot write it, so flower must not wait
        checks = []
        wrote = Runtime._cli_wrote

        def cli_wrote(rt, sid, uuids):
            checks.append(sid)
            return wrote(rt, sid, uuids)
        with mock.patch.object(flower, "dir_problem", return_value="no space left") as problem, \
                mock.patch.object(flower, "CLI_WRITE_GRACE", 60.0), mock.patch.object(Runtime, "_cli_wrote", cli_wrote):
            stored = self.keep()
        self.assertIn(self.call.uuid, [e.get("uuid") for e in stored])
        self.assertEqual(checks, [self.sid])   # the one look before keeping; no wait for a write that cannot come
        self.assertEqual(problem.call_args.args[0], os.path.dirname(self.transcript))   # where the CLI writes


if __name__ == "__main__":
    unittest.main()
