"""A stored entry whose parent was never stored does not cut the resumed history (issue 36).

With HOME's disk full the CLI lost the two entries of one answer (its text and its tool_use) from its
transcript and from the mirror, yet wrote the tool's result once there was room: the store held an
entry whose ``parentUuid`` names nothing stored (trusting chaos, local seeds 2, 5, 9 and 10 of the
last session). The real CLI (2.1.x), resumed from such a store, re-links the hole itself: it sends the
brief and every turn before it, and drops the result whose call is gone. This guards that behaviour
(flower re-links nothing of its own for it)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import unittest

import flower
from tests.helpers import E2ECase, HAVE_SDK, SKIP, StepModel


def forget(root: str, sid: str, uuids: list[str]) -> int:
    """Cut the lines of ``uuids`` from every CLI transcript of ``sid`` under ``root`` to a partial line, as
    a full disk left them; returns how many lines."""
    cut = 0
    for folder, _, files in os.walk(root):
        if sid + ".jsonl" not in files:
            continue
        path = os.path.join(folder, sid + ".jsonl")
        with open(path, encoding="utf-8") as fh:
            lines = fh.readlines()
        hit = [k for k, line in enumerate(lines) if any(f'"uuid":"{uid}"' in line for uid in uuids)]
        for k in hit:
            lines[k] = lines[k][:40] + "\n"
        cut += len(hit)
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(lines)
    return cut


@unittest.skipUnless(HAVE_SDK, SKIP)
class OrphanResumed(E2ECase, unittest.TestCase):
    """The real CLI resumed from a store that lost one answer's entries sends the whole history."""

    def spec(self):
        return flower.AgentSpec("work", instructions="You do the work.", tools=["Bash"], allowed_tools=["Bash"])

    def test_a_result_whose_call_was_never_stored_keeps_the_history_before_it(self):
        model = StepModel(self.ws, steps=4)
        self.api.responder = model
        run_dir = os.path.join(self.tmp.name, "run")
        rt = self._runtime(run_dir=run_dir)
        first = asyncio.run(rt.run(self.spec(), "do the four steps", lineage_key="work"))
        rt.close()
        self.assertTrue(first.ok, first.error)
        self.assertEqual(model.lines(), ["step-1", "step-2", "step-3", "step-4"])
        db = sqlite3.connect(os.path.join(run_dir, "sessions.db"))
        rows = db.execute("SELECT uuid, payload FROM entries WHERE skey LIKE ? ORDER BY seq",
                          (f"%/{first.session_id}",)).fetchall()
        lost = [uid for uid, payload in rows
                if json.loads(payload).get("type") == "assistant" and re.search(r"doing step 2|STEP-2-OK", payload)]
        self.assertEqual(len(lost), 2)   # the answer's text and its tool_use: what the full disk took
        with db:
            db.executemany("DELETE FROM entries WHERE uuid = ?", [(uid,) for uid in lost])
        db.close()
        self.assertGreater(forget(self.tmp.name, first.session_id, lost), 0)
        woken = self.resume_steps(self.spec(), first.session_id, run_dir=run_dir)
        woke = json.dumps(woken.get("messages", []))
        self.assertIn("do the four steps", woke)
        self.assertEqual(re.findall(r"doing step \d|all 4 steps done", woke),
                         ["doing step 1", "doing step 3", "doing step 4", "all 4 steps done"])
        self.assertEqual(model.lines(), ["step-1", "step-2", "step-3", "step-4"])


if __name__ == "__main__":
    unittest.main()
