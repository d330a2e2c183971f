"""A call stored from the stream goes before the result the store already holds, never after the
newest entry (issue 36, trusting chaos PostgreSQL seed 1: step 32 done twice).

HOME's disk filled while a step's command ran: the CLI wrote the result of the call but not the call,
and flower was killed -9. At the next run the store held the result (its parent: the call's uuid) and
the write-ahead file held the call. The call was chained after the session's newest entry, which was
that result (or an attachment under it): a loop, call under result under call. The CLI mends a loop
by timestamps, and a write-ahead timestamp is cut to the second, older than the turns before it: the
resume left out the step's call and result, or the turns before them, and the trusting model did them
again. (A stored result under a call chained after it also made a loop in trusting pg seed 8 of a
ten-seed run: the whole tail of a retired session.)"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sqlite3
import unittest

import flower
from tests import fakesdk
from tests.fakesdk import AssistantMessage, TextBlock, ToolResultBlock, ToolUseBlock, UserMessage
from tests.helpers import E2ECase, HAVE_SDK, SKIP, StepModel


def entry(uid, parent=None, kind="user", text="x"):
    return {"type": kind, "uuid": uid, "parentUuid": parent, "message": {"role": kind, "content": text}}


def ahead(uid, kind="assistant"):
    """An entry as :func:`flower.write_ahead` writes it (unchained)."""
    return {"type": kind, "uuid": uid, "parentUuid": None, "flowerFromStream": True,
            "message": {"role": kind, "content": [{"type": "text", "text": uid}]}}


def stored_after(stored, runs):
    """``stored`` with the placed ``runs`` put where the store puts them."""
    out = list(stored)
    for run, before in runs:
        at = len(out) if before is None else [e.get("uuid") for e in out].index(before)
        out[at:at] = run
    return out


def loops(entries):
    """The uuids from which a walk up the parents comes back to itself."""
    parent = {e["uuid"]: e.get("parentUuid") for e in entries if isinstance(e.get("uuid"), str)}
    found = set()
    for start in parent:
        seen, uid = set(), start
        while uid in parent and uid not in seen:
            seen.add(uid)
            uid = parent[uid]
        if uid == start:
            found.add(start)
    return found


class Placed(unittest.TestCase):
    # stored: r2 (step 2's result), att (its attachment), a3 (step 3's text), r3 (step 3's result,
    # parent: the call c3 the CLI could not write), att3 under it
    STORED = [entry("r2"), entry("att", "r2", "attachment"), entry("a3", "att", "assistant"),
              entry("r3", "c3"), entry("att3", "r3", "attachment")]

    def test_a_call_whose_result_is_stored_goes_before_the_result_after_its_text(self):
        runs = flower.placed_runs([ahead("a3"), ahead("c3"), ahead("r3", "user")], self.STORED)
        self.assertEqual([([(e["uuid"], e["parentUuid"]) for e in run], before) for run, before in runs],
                         [([("c3", "a3")], "r3")])
        after = stored_after(self.STORED, runs)
        self.assertEqual([e["uuid"] for e in after], ["r2", "att", "a3", "c3", "r3", "att3"])
        self.assertEqual(loops(after), set())

    def test_text_and_call_both_missing_go_before_the_result_in_stream_order(self):
        stored = [e for e in self.STORED if e["uuid"] != "a3"]
        runs = flower.placed_runs([ahead("r2", "user"), ahead("a3"), ahead("c3")], stored)
        self.assertEqual([([(e["uuid"], e["parentUuid"]) for e in run], before) for run, before in runs],
                         [([("a3", "r2"), ("c3", "a3")], "r3")])
        self.assertEqual(loops(stored_after(stored, runs)), set())

    def test_without_a_stream_message_before_it_the_run_follows_the_stored_entry_before(self):
        stored = [e for e in self.STORED if e["uuid"] != "a3"]
        runs = flower.placed_runs([ahead("c3")], stored)
        self.assertEqual([([(e["uuid"], e["parentUuid"]) for e in run], before) for run, before in runs],
                         [([("c3", "att")], "r3")])

    def test_what_nothing_stored_hangs_under_is_chained_after_the_newest_entry(self):
        stored = [entry("r2"), entry("att", "r2", "attachment")]
        runs = flower.placed_runs([ahead("r2", "user"), ahead("a3"), ahead("c3"), ahead("r3", "user")], stored)
        self.assertEqual([([(e["uuid"], e["parentUuid"]) for e in run], before) for run, before in runs],
                         [([("a3", "att"), ("c3", "a3"), ("r3", "c3")], None)])
        self.assertEqual(flower.placed_runs([ahead("r2", "user")], stored), [])

    def test_a_tail_after_a_placed_run_follows_the_newest_entry(self):
        runs = flower.placed_runs([ahead("a3"), ahead("c3"), ahead("r3", "user"), ahead("a4"), ahead("c4")],
                                  self.STORED)
        self.assertEqual([([(e["uuid"], e["parentUuid"]) for e in run], before) for run, before in runs],
                         [([("c3", "a3")], "r3"), ([("a4", "att3"), ("c4", "a4")], None)])
        self.assertEqual(loops(stored_after(self.STORED, runs)), set())


class Unrecorded(fakesdk.FakeWorkspace, unittest.TestCase):
    """:meth:`Runtime.store_unrecorded` (a failed turn's stream) places what it stores the same way."""

    def test_the_streamed_call_goes_before_its_stored_result(self):
        rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, resilience=flower.Resilience(probe=False))
        self.addCleanup(rt.close)
        key = {"project_key": rt.project_key, "session_id": "44444444-4444-4444-4444-444444444444"}
        rt.raw_store.append_sync(key, Placed.STORED)
        seen = [AssistantMessage([TextBlock("doing step 3")], "m", message_id="msg_3", uuid="a3"),
                AssistantMessage([ToolUseBlock("toolu_3", "Bash", {"command": "echo 3"})], "m", message_id="msg_3",
                                 uuid="c3"),
                UserMessage([ToolResultBlock("toolu_3", "wrote 3", False)], uuid="r3")]
        self.assertEqual(rt.store_unrecorded(key["session_id"], seen), 1)
        after = rt.raw_store.load_sync(key)
        self.assertEqual([(e["uuid"], e["parentUuid"]) for e in after if e["uuid"] in ("c3", "r3")],
                         [("c3", "a3"), ("r3", "c3")])
        self.assertEqual(loops(after), set())


@unittest.skipUnless(HAVE_SDK, SKIP)
class ResumedAfterAhead(E2ECase, unittest.TestCase):
    """The real CLI resumed after :meth:`Runtime.store_ahead` stored a call whose result was stored."""

    def spec(self):
        return flower.AgentSpec("work", instructions="You do the work.", tools=["Bash"], allowed_tools=["Bash"])

    def test_the_resumed_model_is_sent_every_step_with_its_result(self):
        model = StepModel(self.ws, steps=3)
        self.api.responder = model
        run_dir = os.path.join(self.tmp.name, "run")
        rt = self._runtime(run_dir=run_dir)
        first = asyncio.run(rt.run(self.spec(), "do the three steps", lineage_key="work"))
        rt.close()
        self.assertTrue(first.ok, first.error)
        sid = first.session_id
        db = sqlite3.connect(os.path.join(run_dir, "sessions.db"))
        rows = [(seq, uid, json.loads(p)) for seq, uid, p in db.execute(
            "SELECT seq, uuid, payload FROM entries WHERE skey LIKE ? ORDER BY seq", (f"%/{sid}",))]
        said = [json.dumps(e.get("message")) for _, _, e in rows]
        result1 = next(e for (_, _, e), s in zip(rows, said) if e["type"] == "user" and "STEP-1-OK" in s)
        call3 = next(k for k, s in enumerate(said) if rows[k][2]["type"] == "assistant" and "step-3 >>" in s)
        result3 = next(k for k, s in enumerate(said) if rows[k][2]["type"] == "user" and "STEP-3-OK" in s)
        # the disk took the call; flower was killed after the result: the store ends there
        with db:
            db.executemany("DELETE FROM entries WHERE seq = ?",
                           [(seq,) for seq, _, _ in [rows[call3]] + rows[result3 + 1:]])
        db.close()
        for folder, _, files in os.walk(self.tmp.name):   # the CLI's own transcript is gone with its disk
            if sid + ".jsonl" in files:
                os.unlink(os.path.join(folder, sid + ".jsonl"))
        # the write-ahead file: the run's streamed messages; the call's timestamp, cut to the second,
        # lies before step 2's turn
        cut = dt.datetime.fromisoformat(result1["timestamp"].replace("Z", "+00:00")) + dt.timedelta(milliseconds=1)
        path = flower.stream_ahead_path(run_dir, sid)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            for k, (_, uid, e) in enumerate(rows[:result3 + 1]):
                if e["type"] in ("assistant", "user") and isinstance(e["message"].get("content"), list):
                    when = cut.isoformat(timespec="milliseconds") if k == call3 else e["timestamp"]
                    fh.write(json.dumps({**e, "parentUuid": None, "flowerFromStream": True, "timestamp": when}) + "\n")
        rt = self._runtime(run_dir=run_dir)
        self.assertEqual(rt.store_ahead(sid), 1)
        rt.close()
        woken = self.resume_steps(self.spec(), sid, run_dir=run_dir)
        sent = json.dumps(woken["messages"])
        for k in (1, 2, 3):
            self.assertIn(f"doing step {k}", sent)
            self.assertIn(f"STEP-{k}-OK", sent)
        self.assertEqual(model.lines(), ["step-1", "step-2", "step-3"])


if __name__ == "__main__":
    unittest.main()
