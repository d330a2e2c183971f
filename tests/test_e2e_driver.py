"""End-to-end tier, one driver per session (issue 12): the real SDK and CLI against the fake API.

kill -9 of flower at random points leaves no CLI behind (no request, no tool run after the kill),
two flowers never drive one workspace, and the write-ahead redoes a session that never reached the
store with exactly the input it was started with (the task; a handoff successor's carry)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import time
import unittest

import flower
from tests.fakeapi import FakeAnthropic, Reply, text, tool, last_user_text
from tests.helpers import processes_in, E2ECase, HAVE_SDK, SKIP, freeze_front, role_of

SEED = int(os.environ.get("FLOWER_KILL_SEED", "12"))


@unittest.skipUnless(HAVE_SDK, SKIP)
class OneDriver(E2ECase, unittest.TestCase):
    """Scenarios of issue 12 on the real CLI (the fixture and helpers are EndToEnd's)."""

    def spawn(self, *args, env=None):
        proc = E2ECase.spawn(self, *args, env=env)
        self.addCleanup(lambda: (proc.stdout.close(), proc.stderr.close()))
        return proc

    def ticks(self) -> int:
        try:
            with open(os.path.join(self.ws, "ticks.txt")) as fh:
                return len(fh.read().splitlines())
        except FileNotFoundError:
            return 0

    def delete_session(self, sid: str) -> int:
        """As if the session never reached the store, nor the CLI's own transcript (a kill before the
        CLI wrote anything): flower would otherwise recover it from there."""
        import glob
        for path in glob.glob(os.path.join(self.env["CLAUDE_CONFIG_DIR"], "projects", "*", f"{sid}.jsonl")):
            os.unlink(path)
        db = sqlite3.connect(os.path.join(self.ws, ".flower", "sessions.db"))
        try:
            with db:
                n = db.execute("DELETE FROM entries WHERE skey LIKE ?", (f"%/{sid}",)).rowcount
                db.execute("DELETE FROM sessions WHERE skey LIKE ?", (f"%/{sid}",))
            return n
        finally:
            db.close()

    def test_kill_9_at_random_points_leaves_no_orphan(self):
        rng = random.Random(SEED)
        counter = {"n": 0}

        def work(body):
            counter["n"] += 1
            if counter["n"] > 60:
                return text("all ticks written")
            return tool("Bash", {"command": f"echo tick-{counter['n']} >> ticks.txt; sleep 0.3"})
        self.roles.work = [work] * 200
        trials, work_sids = 20, []
        for trial in range(trials):
            proc = self.spawn("write hello") if trial == 0 else self.spawn()
            if trial == 0:   # a kill before the task is on disk loses it: nothing could keep it
                self.wait_for(lambda: "write hello" in str(self.lineage_or_empty()), what="the task written ahead")
            self.reach_phase(proc, rng)
            proc.send_signal(signal.SIGKILL)
            killed_at, ticks_at_kill = time.time(), self.ticks()
            proc.wait(timeout=30)
            # no process of the workspace is left after the grace; then nothing can happen any more
            self.assertEqual(self.settled(), [], f"trial {trial}: a process survived flower")
            requests, ticks = len(self.api.requests), self.ticks()
            late = [t for t in self.api.arrivals if t > killed_at]
            self.assertLessEqual(len(late), 1, f"trial {trial}: requests after the kill (one was on the wire at most)")
            self.assertLessEqual(ticks - ticks_at_kill, 1, f"trial {trial}: tools started after the kill")
            time.sleep(1.0)
            self.assertEqual(len(self.api.requests), requests, f"trial {trial}: a request after the kill")
            self.assertEqual(self.ticks(), ticks, f"trial {trial}: a tool ran after the kill")
            sid = (self.lineage_or_empty().get("steps") or {}).get("work")
            if sid and (not work_sids or work_sids[-1] != sid):
                work_sids.append(sid)
        p = self.flower(timeout=300)
        self.assertIn("done", p.stderr)
        final = self.lineage()["steps"]["work"]
        if not work_sids or work_sids[-1] != final:
            work_sids.append(final)
        # the same work session all along, except where a session never reached the store
        for sid in work_sids[:-1]:
            self.assertEqual(self.stored(sid), [], f"work session {sid} was stored but not continued")
        self.assertEqual(processes_in(self.ws), [])

    def reach_phase(self, proc, rng: random.Random) -> None:
        """Wait for a phase of the run drawn from ``rng`` (flower starting, the Nth request of this run,
        a tool running), then a random moment more: the kill lands at that phase however loaded the
        machine is. A run that ends before its phase is killed as it ends."""
        requests, ticks = len(self.api.requests), self.ticks()
        phase = rng.choice(["start", "request", "request", "tool"])
        nth = rng.randint(1, 3)
        reached = {"start": lambda: True,
                   "request": lambda: len(self.api.requests) >= requests + nth,
                   "tool": lambda: self.ticks() > ticks}[phase]
        deadline = time.monotonic() + 120
        while not reached() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 1.0 if phase == "start" else 0.4))

    def settled(self) -> list[int]:
        """The workspace's processes once a stopping CLI's grace (it writes its transcript) is over."""
        deadline = time.monotonic() + flower.CLI_GRACE + 1.0
        while processes_in(self.ws) and time.monotonic() < deadline:
            time.sleep(0.05)
        return processes_in(self.ws)

    def lineage_or_empty(self) -> dict:
        try:
            return self.lineage()
        except (OSError, ValueError):
            return {}

    def test_two_go_at_once_the_second_exits_5_without_a_request(self):
        original = self.roles.__call__

        def stall_clarify(body):
            if role_of(body) == "clarify" and not getattr(self, "_stalled", False):
                self._stalled = True
                return Reply(stall=20)
            return original(body)
        self.api.responder = stall_clarify
        first = self.spawn("write hello")
        try:
            self.wait_for(lambda: getattr(self, "_stalled", False), what="the first flower's request")
            before = len(self.api.requests)
            second = self.flower("write something else", check=False)
            self.assertEqual(second.returncode, flower.EXIT_BUSY, second.stderr)
            lines = [ln for ln in second.stderr.splitlines() if ln.strip()]
            self.assertEqual(len(lines), 1, second.stderr)
            self.assertIn(f"pid {first.pid}", lines[0])
            self.assertIn("another flower drives", lines[0])
            self.assertEqual(len(self.api.requests), before)
            third = self.flower(check=False)          # a plain wake is refused the same way
            self.assertEqual(third.returncode, flower.EXIT_BUSY)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
        # the holder is gone: the lock goes with it, and the next run carries on
        p = self.flower()
        self.assertIn("done", p.stderr)

    def test_kill_after_lineage_names_clarify_redoes_it_with_the_task(self):
        original = self.roles.__call__

        def stall_clarify(body):
            if role_of(body) == "clarify" and not getattr(self, "_stalled", False):
                self._stalled = True
                return Reply(stall=30)
            return original(body)
        self.api.responder = stall_clarify
        proc = self.spawn("write hello TASK-MARK")
        self.wait_for(lambda: getattr(self, "_stalled", False), what="the clarify request")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        sid = self.lineage()["steps"]["clarify"]
        self.assertEqual(self.settled(), [])
        self.delete_session(sid)   # as if the kill came before the first prompt reached the store
        before = len(self.roles.bodies("clarify"))
        p = self.flower()
        self.assertIn("never reached the store", p.stderr)
        first = self.roles.bodies("clarify")[before]
        self.assertIn("Task: write hello TASK-MARK", last_user_text(first))
        self.assertNotIn("assistant", [m["role"] for m in first["messages"]])   # fresh, not a resume
        self.assertNotEqual(self.lineage()["steps"]["clarify"], sid)
        self.assertEqual([r["step"] for r in self.manifest()][-4:], ["clarify", "goal", "work", "work·judge#1"])

    def test_kill_after_the_handoff_switch_redoes_the_successor_with_the_carry(self):
        def usage(level):
            return dict(input_tokens=1000, cache_read=level - 1000)
        state = {"successor": False, "calls": 0}
        carry_head = flower.text("carry_head")[:40]

        def work(body):
            fresh = "assistant" not in [m["role"] for m in body["messages"]]
            if fresh and carry_head in last_user_text(body):
                if not state["successor"]:
                    state["successor"] = True
                    return Reply(stall=30)     # killed while the successor's first request is in flight
                return text("finished after the handoff", **usage(50_000))
            if state["successor"]:
                return text("finished after the handoff", **usage(50_000))
            state["calls"] += 1
            level = 100_000 if state["calls"] == 1 else 160_000     # the second call crosses 150K
            return tool("Bash", {"command": f"echo OLD-HISTORY-MARK {state['calls']}"}, **usage(level))
        self.roles.work = [work] * 20
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        proc = self.spawn("--model", "claude-sonnet-4-5", "--window", "200000", "--no-goal")
        self.wait_for(lambda: state["successor"], what="the successor's first request")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        lineage = self.lineage()
        new_sid = lineage["steps"]["work"]
        self.assertEqual(lineage["starts"]["work"]["session_id"], new_sid)
        self.assertIn("You take over unfinished work", lineage["starts"]["work"]["prompt"])
        self.assertEqual(self.settled(), [])
        self.delete_session(new_sid)   # the successor never reached the store
        before = len(self.roles.bodies("work"))
        p = self.flower("--model", "claude-sonnet-4-5", "--window", "200000", "--no-goal")
        self.assertIn("never reached the store", p.stderr)
        first = self.roles.bodies("work")[before]
        sent = last_user_text(first)
        self.assertNotIn("assistant", [m["role"] for m in first["messages"]])
        self.assertIn("You take over unfinished work", sent)
        self.assertIn("NEXT-STEP-MARK", sent)
        self.assertIn("handoff-work.md", sent)
        self.assertNotIn("OLD-HISTORY-MARK", FakeAnthropic.messages_text(first))
        self.assertTrue(self.work_row()["ok"])


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(HAVE_SDK, SKIP)
class Salvage(E2ECase, unittest.TestCase):
    """What the CLI wrote but the store never got (a kill with mirror appends in flight, a locked
    store) is recovered before the resume; SIGTERM stops the CLI before anything else (issue 17)."""

    spawn = OneDriver.spawn

    def cli_wrote(self, needle: str) -> bool:
        """Whether the CLI's own transcript (under its config dir) holds ``needle``."""
        import glob
        for path in glob.glob(os.path.join(self.env["CLAUDE_CONFIG_DIR"], "projects", "*", "*.jsonl")):
            with open(path, encoding="utf-8", errors="replace") as fh:
                if needle in fh.read():
                    return True
        return False

    def test_a_kill_while_the_store_is_locked_loses_no_turn(self):
        import sqlite3 as sql
        n = {"calls": 0}

        def work(body):
            n["calls"] += 1
            if n["calls"] == 8:
                return Reply(stall=30)              # the CLI waits here: turns 1-7 are on its own disk
            if n["calls"] > 12:
                return text("finished")
            return tool("Bash", {"command": f"echo TURN-MARK-{n['calls']}"}, say=f"SAY-MARK-{n['calls']}")
        self.roles.work = [work] * 40
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        proc = self.spawn("--no-goal")
        self.wait_for(lambda: n["calls"] >= 2, what="the work step")
        db = sql.connect(os.path.join(self.ws, ".flower", "sessions.db"), timeout=30, isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")               # the store is locked: mirror appends wait
        try:
            self.wait_for(lambda: n["calls"] >= 8, what="turns made while the store is locked")
            self.wait_for(lambda: self.cli_wrote("SAY-MARK-7"), what="turns 1-7 in the CLI's own transcript")
            said = 8
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            db.execute("ROLLBACK")
            db.close()
        before = len(self.roles.bodies("work"))
        p = self.flower("--no-goal")
        self.assertIn("store had missed", p.stderr)
        resumed = FakeAnthropic.messages_text(self.roles.bodies("work")[before])
        for i in range(1, said):                    # every answered turn before the kill is sent back
            self.assertIn(f"SAY-MARK-{i}", resumed)
        import glob
        import tempfile
        self.assertEqual([d for d in glob.glob(os.path.join(tempfile.gettempdir(), "claude-resume-*"))
                          if os.path.exists(os.path.join(d, "projects")) and self.ws in str(os.listdir(os.path.join(d, "projects")))], [])

    def test_sigterm_stops_the_cli_before_anything_else(self):
        n = {"calls": 0}

        def work(body):
            n["calls"] += 1
            return tool("Bash", {"command": f"echo {n['calls']} >> ticks.txt"})
        self.roles.work = [work] * 400
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        proc = self.spawn("--no-goal")
        self.wait_for(lambda: n["calls"] >= 3, what="the work step")
        proc.send_signal(signal.SIGTERM)
        termed_at = time.time()
        proc.wait(timeout=60)                       # flower stops its CLI before it exits
        requests = len(self.api.requests)
        late = [t for t in self.api.arrivals if t > termed_at]
        self.assertLessEqual(len(late), 1, "requests after SIGTERM (one was on the wire at most)")
        time.sleep(1.0)
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM)
        self.assertEqual(len(self.api.requests), requests, "the CLI went on working after SIGTERM")
        self.assertEqual(processes_in(self.ws), [])
        self.assertNotIn("Traceback", proc.stderr.read())
        row = [r for r in self.manifest() if r["step"] == "work"][-1]
        self.assertEqual(row["error"], "killed-by-signal")
