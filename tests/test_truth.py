"""Core tier for issue 36 (nothing false in the history): what a resumed model is told of a call that
the end of a run cut off, and what a failed store write says (see also tests/test_e2e_truth.py)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import tempfile
import unittest
from unittest import mock

import flower
from flower import prune
from tests import fakesdk
from tests.fakesdk import FAKE
from tests.transcripts import Builder
from tests.helpers import LEDGER_EN

KILLED = flower.text("killed_result")


def results(out: list[dict]) -> list[str]:
    return [flower.block_text(b) for e in out for b in flower.blocks_of(e)
            if isinstance(b, dict) and b.get("type") == "tool_result"]


class KilledCalls(unittest.TestCase):
    def session(self, after: str) -> list[dict]:
        b = Builder(random.Random(7))
        b.prompt("do the steps")
        b.tool("Bash", {"command": "make"}, "built")
        b.tool("Bash", {"command": "python3 long.py"}, "Exit code 137\npartial output", kind="exit")
        if after in ("answer", "resumed"):
            if after == "resumed":
                b.prompt(flower.text("resume_prompt"))
            b.say("next", 2000)
        return b.entries

    def test_a_kill_exit_that_ends_the_run_reads_as_stopped_by_the_kill(self):
        out, report = prune(self.session("nothing"))
        self.assertEqual(results(out), ["built", KILLED])
        self.assertEqual(report.interrupts, 1)
        zh, _ = prune(self.session("nothing"), flower.PrunePolicy(lang="zh"))
        self.assertEqual(results(zh)[-1], flower.text("killed_result", "zh"))

    def test_it_keeps_saying_so_after_the_resume_answered(self):
        out, _ = prune(self.session("resumed"))
        self.assertEqual(results(out), ["built", KILLED])

    def test_a_kill_exit_the_model_answered_in_its_turn_is_its_own_result(self):
        out, report = prune(self.session("answer"))
        self.assertEqual(results(out), ["built", "Exit code 137\npartial output"])
        self.assertEqual(report.interrupts, 0)

    def test_a_call_left_without_result_and_the_clis_own_note_read_the_same(self):
        b = Builder(random.Random(8))
        b.prompt("go")
        b.tool("Bash", {"command": "python3 long.py"}, "", kind="killed")
        b.tool("Bash", {"command": "python3 long.py"}, "", answered=False)
        out, report = flower._prune(b.entries, flower.PrunePolicy(), estimate=True)
        self.assertEqual(results(out), [KILLED, KILLED])
        self.assertEqual(report.healed, 1)
        self.assertEqual(report.tokens, flower.estimate_tokens(out))   # the heal counted with its text
        self.assertNotIn("not produced", json.dumps(out))


def entry(uid: str, text: str, parent: str | None = None) -> dict:
    return {"type": "user", "uuid": uid, "parentUuid": parent, "message": {"role": "user", "content": text}}


class FailedWrites(unittest.TestCase):
    key = {"project_key": "p", "session_id": "s"}

    def setUp(self):
        self.store = flower.SqliteSessionStore(":memory:")
        self.addCleanup(self.store.close)

    def test_a_hole_is_filled_in_its_place(self):
        self.store.append_sync(self.key, [entry("a", "one"), entry("b", "two", "a")])
        self.store.append_sync(self.key, [entry("d", "four", "c"), entry("e", "five", "d")])
        self.store.insert_before_sync(self.key, [entry("c", "three", "b")], "d")
        self.assertEqual([e["uuid"] for e in self.store.load_sync(self.key)], ["a", "b", "c", "d", "e"])
        self.store.insert_before_sync(self.key, [entry("c", "again", "b"), entry("f", "six", "e")], "nowhere")
        loaded = self.store.load_sync(self.key)
        self.assertEqual([e["uuid"] for e in loaded], ["a", "b", "c", "d", "e", "f"])   # no place: the end
        self.assertEqual(loaded[2]["message"]["content"], "three")                     # the first one stays
        self.assertEqual(self.store.last_context("p", "s"), None)

    def test_the_real_cause_of_a_failed_write_is_raised(self):
        real = self.store._insert_with_facts

        def full(*args, **kwargs):
            real(*args, **kwargs)
            self.store._db.execute("ROLLBACK")   # what SQLite does itself when the disk is full
            raise sqlite3.OperationalError("database or disk is full")
        with mock.patch.object(self.store, "_insert_with_facts", side_effect=full):
            with self.assertRaisesRegex(sqlite3.OperationalError, "disk is full"):
                self.store.append_sync(self.key, [entry("a", "one")])
            with self.assertRaisesRegex(sqlite3.OperationalError, "disk is full"):
                self.store.insert_before_sync(self.key, [entry("b", "two")], "a")
        self.assertIsNone(self.store.load_sync(self.key))
        self.store.append_sync(self.key, [entry("a", "one")])   # and the store goes on working
        self.assertEqual(len(self.store.load_sync(self.key)), 1)


class HandoffStop(unittest.TestCase):
    """Where the handoff stops the crossing turn (the real CLI's side: tests/test_e2e_truth.py)."""

    def setUp(self):
        fakesdk.install()
        self.tmp = tempfile.TemporaryDirectory()
        ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(ws)
        self.rt = flower.Runtime(workspace=ws, run_dir=os.path.join(self.tmp.name, "runs"),
                                 resilience=flower.Resilience(probe=False, base_delay=0),
                                 handoff=flower.HandoffPolicy(window=200_000))

    def tearDown(self):
        self.rt.close()
        fakesdk.uninstall()
        self.tmp.cleanup()

    def turns(self):
        FAKE.turns = [[("text", "step 1", 100_000), ("tool", "Bash", {"command": "make"}, "built", 151_000),
                       ("tool", "Bash", {"command": "never runs"}, "x", 152_000)],
                      [("text", LEDGER_EN, 152_000)], [("text", "finished", 20_000)]]

    def test_a_batch_hook_ends_the_turn_after_the_crossing_tools(self):
        self.turns()
        result = asyncio.run(self.rt.run(flower.AgentSpec("work"), "go", lineage_key="work"))
        self.assertTrue(result.ok, result.error)
        self.assertEqual((FAKE.interrupts, FAKE.hook_stops), (0, 1))
        self.assertIn("PostToolBatch", FAKE.calls[0]["options"].hooks)
        self.assertEqual(FAKE.calls[1]["prompt"], flower.text("handoff_prompt"))
        retired = self.rt.raw_store.load_sync({"project_key": self.rt.project_key, "session_id": result.retired[0]})
        self.assertIn("built", json.dumps(retired))
        self.assertNotIn("never runs", json.dumps(retired))   # the turn ended after the crossing batch

    def test_without_hooks_the_interrupt_waits_for_the_results_of_the_answer(self):
        self.turns()
        saved = fakesdk.HookMatcher
        del fakesdk.HookMatcher
        try:
            result = asyncio.run(self.rt.run(flower.AgentSpec("work"), "go", lineage_key="work"))
        finally:
            fakesdk.HookMatcher = saved
        self.assertTrue(result.ok, result.error)
        self.assertEqual((FAKE.interrupts, FAKE.hook_stops), (1, 0))
        self.assertIsNone(FAKE.calls[0]["options"].hooks)


class ToolGroups(unittest.TestCase):
    @unittest.skipUnless(os.path.isdir("/proc"), "needs /proc")
    def test_stopping_a_cli_stops_the_tools_it_runs_in_groups_of_their_own(self):
        import subprocess
        import sys
        import time
        # a "CLI" in a group of its own that starts a "tool" in a session of its own, as the CLI does
        code = ("import os, subprocess, sys, time\n"
                "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
                "print(p.pid, flush=True)\ntime.sleep(120)\n")
        cli = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.addCleanup(cli.wait)
        tool = int(cli.stdout.readline())
        cli.stdout.close()
        self.addCleanup(lambda: os.kill(tool, 9) if not flower._gone(tool) else None)
        self.assertEqual(flower.tool_groups(cli.pid), {tool})
        flower._stop_guards([(cli.pid, cli.pid)], grace=0.2)
        deadline = time.monotonic() + 30
        while not flower._gone(tool) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertTrue(flower._gone(tool))


if __name__ == "__main__":
    unittest.main()
