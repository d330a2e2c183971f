"""Salvage (issue 17): what the CLI wrote to its own transcript but the store never got comes back
before a resume; flower's healed stand-ins and what the store has are never added twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import unittest
from unittest import mock

import flower
from tests import fakesdk


def line(uid, **extra):
    return json.dumps({"type": "user", "uuid": uid, "message": {"role": "user", "content": f"text {uid}"}, **extra},
                      separators=(",", ":")) + "\n"


class MissingEntries(unittest.TestCase):
    def test_what_the_store_lacks_in_the_middle_and_at_the_end(self):
        lines = [line("a"), line("b"), line("x-not-stored-before"), line("c"), line("d"), "{broken\n",
                 json.dumps({"type": "last-prompt"}) + "\n", line("h", flowerHealed=True), line("e")]
        got = flower.missing_entries(lines, known={"a", "b", "c"})
        self.assertEqual([e["uuid"] for e in got], ["x-not-stored-before", "d", "e"])   # a failed write's hole too
        runs = flower.missing_runs(lines, known={"a", "b", "c"})
        self.assertEqual([([e["uuid"] for e in run], before) for run, before in runs],
                         [(["x-not-stored-before"], "c"), (["d", "e"], None)])

    def test_nothing_missing_and_nothing_known(self):
        self.assertEqual(flower.missing_entries([line("a"), line("b")], known={"a", "b"}), [])
        self.assertEqual([e["uuid"] for e in flower.missing_entries([line("a"), line("b")], known=set())], ["a", "b"])

    def test_a_uuid_inside_content_does_not_move_the_cut(self):
        inner = json.dumps({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result",
                            "content": "{\"uuid\":\"a\"}"}]}, "toolUseResult": {"uuid": "zz"}, "uuid": "n1"}) + "\n"
        got = flower.missing_entries([line("a"), inner], known={"a"})
        self.assertEqual([e["uuid"] for e in got], ["n1"])


class RuntimeSalvage(fakesdk.FakeWorkspace, unittest.TestCase):
    def test_resume_recovers_missed_entries_and_removes_leftover_copies(self):
        with tempfile.TemporaryDirectory() as config, tempfile.TemporaryDirectory() as tmp, \
                mock.patch.dict(os.environ, {"CLAUDE_CONFIG_DIR": config}), \
                mock.patch("tempfile.gettempdir", return_value=tmp):
            rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, resilience=flower.Resilience(probe=False))
            self.addCleanup(rt.close)
            events = []
            rt.on_event = events.append
            key = {"project_key": rt.project_key, "session_id": "11111111-1111-1111-1111-111111111111"}
            rt.raw_store.append_sync(key, [json.loads(line("a")), json.loads(line("b"))])
            own = os.path.join(config, "projects", rt.project_key)
            os.makedirs(own)
            with open(os.path.join(own, key["session_id"] + ".jsonl"), "w") as fh:
                fh.writelines([line("a"), line("b"), line("c")])
            left = os.path.join(tmp, "claude-resume-abc", "projects", rt.project_key)
            os.makedirs(left)
            with open(os.path.join(left, key["session_id"] + ".jsonl"), "w") as fh:
                fh.writelines([line("a"), line("h", flowerHealed=True), line("b"), line("c"), line("d")])
            recovered = rt.salvage(key["session_id"])
            self.assertEqual(recovered, 2)                                  # c from the config dir, d from the copy
            self.assertEqual([e["uuid"] for e in rt.raw_store.load_sync(key)], ["a", "b", "c", "d"])
            self.assertFalse(os.path.exists(os.path.join(tmp, "claude-resume-abc")))   # it held credentials too
            self.assertTrue(os.path.exists(own))
            self.assertEqual(sum("store had missed" in e.data.get("message", "") for e in events), 1)
            self.assertEqual(rt.salvage(key["session_id"]), 0)   # nothing twice


if __name__ == "__main__":
    unittest.main()


class NeverStored(fakesdk.FakeWorkspace, unittest.TestCase):
    def test_a_session_only_the_cli_wrote_is_recovered_instead_of_started_over(self):
        with tempfile.TemporaryDirectory() as config, mock.patch.dict(os.environ, {"CLAUDE_CONFIG_DIR": config}):
            rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, resilience=flower.Resilience(probe=False))
            self.addCleanup(rt.close)
            sid = "22222222-2222-2222-2222-222222222222"
            self.assertFalse(rt.has_session(sid))
            own = os.path.join(config, "projects", rt.project_key)
            os.makedirs(own)
            with open(os.path.join(own, sid + ".jsonl"), "w") as fh:
                fh.writelines([line("p"), line("q")])
            self.assertTrue(rt.has_session(sid))
            key = {"project_key": rt.project_key, "session_id": sid}
            self.assertEqual([e["uuid"] for e in rt.raw_store.load_sync(key)], ["p", "q"])


class TempCopy(fakesdk.FakeWorkspace, unittest.TestCase):
    """A resumed connection's CLI wrote turns into its temp copy (the SDK's ``claude-resume-*`` dir) that
    the store never got; ``disconnect()`` deletes that copy, as the SDK does."""

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        patcher = mock.patch("tempfile.gettempdir", return_value=tmp.name)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.live = os.path.join(tmp.name, "claude-resume-live")
        self.rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir,
                                 resilience=flower.Resilience(probe=False, base_delay=0, max_attempts=3))
        self.addCleanup(self.rt.close)
        self.sid = "33333333-3333-3333-3333-333333333333"
        self.key = {"project_key": self.rt.project_key, "session_id": self.sid}
        self.rt.raw_store.append_sync(self.key, [json.loads(line("a"))])
        self.copy = os.path.join(self.live, "projects", self.rt.project_key, self.sid + ".jsonl")
        real_disconnect = fakesdk.ClaudeSDKClient.disconnect

        async def disconnect(client):   # like the SDK: the materialised copy goes with the connection
            shutil.rmtree(self.live, ignore_errors=True)
            await real_disconnect(client)
        patcher = mock.patch.object(fakesdk.ClaudeSDKClient, "disconnect", disconnect)
        patcher.start()
        self.addCleanup(patcher.stop)

    def write_copy(self, *uuids):
        os.makedirs(os.path.dirname(self.copy), exist_ok=True)
        with open(self.copy, "w") as fh:
            fh.writelines(line(u) for u in uuids)

    def stored(self):
        return {e.get("uuid") for e in self.rt.raw_store.load_sync(self.key)}

    def test_what_the_dead_cli_wrote_to_its_temp_copy_is_stored_before_disconnect(self):
        from tests.fakesdk import FAKE

        def dies(prompt, options, loaded):
            self.write_copy("a", "m1", "m2")
            return [("raise", RuntimeError("the CLI died: ECONNRESET"))]
        FAKE.turns = [dies, [("text", "carried on", 1000)]]
        result = asyncio.run(self.rt.run(flower.AgentSpec("work"), "go on", resume=self.sid, lineage_key="work"))
        self.assertTrue(result.ok, result.error)
        self.assertLessEqual({"a", "m1", "m2"}, self.stored())

    # issue 17: on SIGTERM rescue() stops the CLI (which then writes what it held) and the step is
    # cancelled; disconnect() then deleted the resumed connection's temp copy with turns the store
    # never got (chaos seeds 5, 7, 9: answers carried by later requests, gone after the restart).
    def test_a_cancelled_turn_stores_the_temp_copy_before_disconnect(self):
        from tests.fakesdk import FAKE

        def stopped(prompt, options, loaded):
            self.write_copy("a", "t1", "t2")   # what the stopping CLI wrote but never mirrored
            return [("block", "never")]
        FAKE.turns = [stopped]

        async def main():
            task = asyncio.ensure_future(self.rt.run(flower.AgentSpec("work"), "go on", resume=self.sid,
                                                     lineage_key="work"))
            while not os.path.exists(self.copy):
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            task.cancel()   # what _run_with_signals does after rescue()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        asyncio.run(main())
        self.assertLessEqual({"a", "t1", "t2"}, self.stored())
        self.assertFalse(os.path.exists(self.copy))
