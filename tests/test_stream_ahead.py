"""A call that ran survives a kill -9 of flower while the CLI cannot write its transcript (issue 36).

Trusting chaos, PostgreSQL seed 1: HOME (where the CLI writes its transcript) full, a work answer's
tool_use streamed and its command ran (a line written), then flower was killed -9 before the turn
ended. The mirror flushes only at a turn's end, the CLI's transcript had no room, and the stream record
(:meth:`Runtime.store_unrecorded`) lived in the killed process: the resumed history lacked the call and
the model did the step again. Each streamed main-thread message is now written ahead to the run dir
and stored at the next resume.

The kill lands at a phase: the request that carries the tool's result is held at the fake API."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import unittest

import flower
from tests.fakeapi import error, text, tool
from tests.helpers import E2ECase, Filling, HAVE_SDK, SKIP, SmallHome, WithPostgres, fill, freeze_front, stop_shared_server
from tests.pgserver import HAVE_PG, SKIP as SKIP_PG

tearDownModule = stop_shared_server   # the one server the PostgreSQL case started for this module

STEP = "echo step-1 >> steps.log && echo STEP-1-OK"


class AheadPure(unittest.TestCase):
    def test_only_what_the_store_lacks_is_chained_after_its_newest_entry(self):
        written = [{"uuid": "a", "parentUuid": None}, {"uuid": "b", "parentUuid": None},
                   {"uuid": "c", "parentUuid": None}]
        out = flower.ahead_entries(written, "s9", {"a"})
        self.assertEqual([(e["uuid"], e["parentUuid"]) for e in out], [("b", "s9"), ("c", "b")])

    def test_a_torn_line_is_skipped(self):
        with open(os.path.join(self.tmp(), "x.jsonl"), "w") as fh:
            fh.write('{"uuid": "a"}\n{"uuid": "b", "mess\n')
            path = fh.name
        self.assertEqual(flower.read_ahead(path), [{"uuid": "a"}])

    def tmp(self):
        import tempfile
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        return d.name


@unittest.skipUnless(HAVE_SDK, SKIP)
class KilledWhileHomeFull(SmallHome, E2ECase, unittest.TestCase):
    def state(self) -> list[str]:
        """The ``--state`` arguments of both runs (none: the local files)."""
        return []

    def test_a_call_that_ran_before_the_kill_is_in_the_resumed_history(self):
        arrived, release = threading.Event(), threading.Event()
        self.addCleanup(release.set)
        filler = []

        def filling(body):
            filler.append(fill(self.home))   # from here on the CLI cannot write its transcript
            return tool("Bash", {"command": STEP}, say="doing step 1")

        def held(body):   # the request that carries the step's result: the command ran
            arrived.set()
            release.wait(120)
            return text("too late")
        self.roles.work = [filling, held]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        proc = self.spawn("--json", *self.state(), "--no-goal")
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        self.addCleanup(lambda: (proc.stdout.close(), proc.stderr.close()))
        said: list[str] = []
        threading.Thread(target=lambda: said.extend(proc.stdout), daemon=True).start()
        # the phase: the step's result reached flower (its event is out) and the next request is held
        self.wait_for(lambda: arrived.is_set() and any('"kind": "tool_result"' in line for line in said),
                      what="the step's result at flower and the request after it")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        release.set()
        os.unlink(filler[0])
        self.assertEqual(self.read("steps.log").split(), ["step-1"])

        def trusting(body):   # does the step again unless its history shows it done
            if re.search(r"STEP-1-OK", json.dumps(body.get("messages", []))):
                return text("finished")
            return tool("Bash", {"command": STEP}, say="doing step 1")
        sent = len(self.roles.log)
        self.roles.work = [trusting] * 4
        p = self.flower(*self.state(), "--no-goal", check=False)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        woke = [b for r, b in self.roles.log[sent:] if r == "work"][0]
        self.assertIn("doing step 1", json.dumps(woke.get("messages", [])))
        self.assertEqual(self.read("steps.log").split(), ["step-1"])
        ahead = os.path.join(self.ws, ".flower", "stream")
        self.assertEqual(os.listdir(ahead) if os.path.isdir(ahead) else [], [])   # stored, then gone


@unittest.skipUnless(HAVE_SDK, SKIP)
class SuccessorUnwritten(Filling, SmallHome, E2ECase, unittest.TestCase):
    """Trusting chaos, PostgreSQL seed 4: an overflow handed the work to a fresh session while HOME
    filled, and the CLI wrote nothing of the successor, not even its prompt (the carry: which steps were
    done). flower stored the streamed answer alone, a 529 made it resume, and the model, seeing answers
    to no prompt, started the job over."""

    def setUp(self):
        super().setUp()
        self.small = self.home

    def state(self) -> list[str]:
        """The ``--state`` arguments of both runs (none: the local files)."""
        return []

    def test_the_resumed_successor_starts_with_its_carry(self):
        arrived, release = threading.Event(), threading.Event()
        self.addCleanup(release.set)

        def held(body):   # the request that carries step 2's result: the command ran
            arrived.set()
            release.wait(120)
            return text("too late")
        overflow = error(400, "prompt is too long: 210000 tokens > 200000 maximum", "invalid_request_error")
        self.roles.work = [tool("Bash", {"command": STEP}, say="doing step 1"), self.full(overflow),
                           tool("Bash", {"command": "echo step-2 >> steps.log"}, say="doing step 2"), held]
        freeze_front(self.ws)
        proc = self.spawn("--json", *self.state(), "--no-goal")
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        self.addCleanup(lambda: (proc.stdout.close(), proc.stderr.close()))
        said: list[str] = []
        fillers = []

        def read():   # the predecessor's CLI freed its files on HOME as it ended: full again at once
            for line in proc.stdout:
                if '"kind": "handoff"' in line and '"phase": "done"' in line:
                    fillers.append(fill(self.home))
                said.append(line)
        threading.Thread(target=read, daemon=True).start()
        self.wait_for(lambda: arrived.is_set() and sum('"kind": "tool_result"' in line for line in said) >= 2,
                      what="step 2's result at flower and the request after it")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        release.set()
        for path in [self.filler, *fillers]:
            os.unlink(path)
        work = self.roles.bodies("work")
        carry = [b.get("text", "") for b in work[2]["messages"][0]["content"] if isinstance(b, dict)]
        self.assertTrue(any(t.startswith(flower.text("carry_head")) for t in carry), carry)
        sent = len(work)
        self.roles.work = [text("finished")]
        p = self.flower(*self.state(), "--no-goal", check=False)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        resumed = self.roles.bodies("work")[sent]["messages"]
        texts = [b if isinstance(b, str) else b.get("text", "") for m in resumed if m["role"] == "user"
                 for b in ([m["content"]] if isinstance(m["content"], str) else m["content"])]
        self.assertTrue(any(t.startswith(flower.text("carry_head")) for t in texts),
                        "the resumed successor lacks the carry it was started with")
        self.assertIn("doing step 2", json.dumps(resumed))


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, SKIP_PG)
class KilledWhileHomeFullPostgres(WithPostgres, KilledWhileHomeFull):
    """The same on PostgreSQL, where the chaos seed failed (the write-ahead file is on the machine that
    ran the call, as the CLI's transcript is)."""

    def state(self) -> list[str]:
        return ["--state", self.dsn]


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, SKIP_PG)
class SuccessorUnwrittenPostgres(WithPostgres, SuccessorUnwritten):
    """The same on PostgreSQL, where the chaos seed failed: the next process finds the start prompt in
    the database's lineage."""

    def state(self) -> list[str]:
        return ["--state", self.dsn]


if __name__ == "__main__":
    unittest.main()
