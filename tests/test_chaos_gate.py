"""``bench/chaos.py --delegate`` fires every planned fault (issue 39).

Seed 8 of the delegate chaos (PostgreSQL) fired 8 of its 12 faults: the coordinator gave its final answer
while a kill still waited for its phase and three faults queued behind it ("job over"). The trusting
driver holds the job's last answer while faults are due; the coordinator's final answer now waits the
same way, and a kill whose worker phase can no longer come lands while that answer waits.

Real SDK + CLI against the fake API: a small delegating job whose last two faults are planned past its
last request, so they can only land while the final answer waits (a phase, not a delay)."""

from __future__ import annotations

import unittest

from tests.helpers import HAVE_SDK, SKIP, delegating_chaos

LATE = [{"kind": "burst", "at": 10_000, "statuses": [529]},
        {"kind": "kill9", "at": 10_000, "phase": "tool"}]


@unittest.skipUnless(HAVE_SDK, SKIP)
class FaultsWaitedFor(unittest.TestCase):

    def test_faults_planned_past_the_last_request_fire_while_the_final_answer_waits(self):
        with delegating_chaos(LATE, turns=4, handoffs=1, prefix="flower-chaos-gate-") as (r, plan):
            story = "\n".join([f"{k}: {r.get(k)}" for k in ("finished", "dup", "skipped", "missing", "runs")]
                              + [f"plan: {plan}", f"logs: {r['dir']}"])
            self.assertEqual([p["kind"] for p in plan if "fired" in p], ["burst", "kill9"], story)
            self.assertTrue(plan[1].get("phase_unmet"), story)   # no worker ran any more: it landed at the end
            self.assertEqual(r["skipped"], [], story)
            self.assertTrue(r["finished"], story)
            self.assertTrue(r["expected_ok"], story)
            self.assertEqual(r["dup"], [], story)

if __name__ == "__main__":
    unittest.main()
