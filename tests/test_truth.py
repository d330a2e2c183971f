"""Core tier for issue 36 (nothing false in the history): what a resumed model is told of a call that
the end of a run cut off, and what a failed store write says (see also tests/test_e2e_truth.py)."""

from __future__ import annotations

import json
import random
import sqlite3
import unittest
from unittest import mock

import flower
from flower import prune
from tests.transcripts import Builder

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


if __name__ == "__main__":
    unittest.main()
