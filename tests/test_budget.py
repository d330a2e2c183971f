"""A budget for the whole job (issue 40 item 4): ``--max-cost`` / FLOWER_MAX_COST bounds the spend of
every run, step, round and judge of one job; the spend is the manifest rows', so it is the job's state.
Core tier: the spend from rows; real tier: a job stopped by its budget and continued with a higher one."""

from __future__ import annotations

import json
import re
import os
import subprocess
import unittest

import flower
from tests import fakeapi
from tests.fakeapi import tool
from tests.helpers import E2ECase, RUN_FLOWER, HAVE_SDK, SKIP



class Spend(unittest.TestCase):
    def test_the_newest_version_of_each_row_since_the_job_began(self):
        rows = [{"run": "r0", "step": "work", "started_at": "2026-01-01T00:00:00+00:00", "cost_usd": 5.0},
                {"run": "r1", "step": "work", "started_at": "2026-02-01T00:00:00+00:00", "cost_usd": 0.1},
                {"run": "r1", "step": "work", "started_at": "2026-02-01T00:00:00+00:00", "cost_usd": 0.3},
                {"run": "r2", "step": "work·judge#1", "started_at": "2026-02-02T00:00:00+00:00", "cost_usd": 0.2}]
        since = flower.job_since({"task": {"text": "x", "at": "2026-01-15T00:00:00+00:00"},
                                  "starts": {"work": {"session_id": "s", "prompt": "p",
                                                      "at": "2026-02-01T00:00:00+00:00"}}})
        self.assertEqual(since, "2026-01-15T00:00:00+00:00")
        self.assertAlmostEqual(flower.job_spend(rows, since), 0.5)   # an earlier job's row is not this job's
        self.assertAlmostEqual(flower.job_spend(rows), 5.5)

    def test_a_bad_budget_is_a_usage_error(self):
        for raw in ("0", "-1", "abc", "inf"):
            with self.assertRaises(flower.FlowerError) as caught:
                flower.parse_max_cost(raw, "--max-cost")
            self.assertEqual(caught.exception.exit_code, flower.EXIT_USAGE)
        self.assertIsNone(flower.parse_max_cost(None, "--max-cost"))
        self.assertEqual(flower.parse_max_cost("2.5", "--max-cost"), 2.5)


@unittest.skipUnless(HAVE_SDK, SKIP)
class StoppedByTheBudget(E2ECase, unittest.TestCase):
    def flower(self, *args, env=None):
        return subprocess.run([*RUN_FLOWER, *args], cwd=self.ws, env=dict(self.env, **(env or {})),
                              capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)

    def parts(self):
        return sorted(n for n in os.listdir(self.ws) if re.fullmatch(r"part\d\.txt", n))

    def rows(self):
        return flower.Manifest.read(os.path.join(self.ws, ".flower"))

    def test_stopped_by_the_cap_then_continued_with_a_higher_one(self):
        def write(body):   # the model looks at the disk: the first part that is missing, else done
            missing = [n for n in range(1, 9) if not os.path.exists(os.path.join(self.ws, f"part{n}.txt"))]
            if not missing:
                return fakeapi.text("all parts written")
            return tool("Write", {"file_path": os.path.join(self.ws, f"part{missing[0]}.txt"),
                                  "content": f"part {missing[0]}\n"})
        self.roles.work = [write] * 40
        probe = self.flower("--max-cost", "100", "write the parts")     # measures what one call costs
        self.assertEqual(probe.returncode, 0, probe.stderr[-2000:])
        turn = max(r["cost_usd"] / max(1, r["num_turns"]) for r in self.rows())
        self.assertGreater(turn, 0)
        self.flower("--new", "--max-cost", "100", "x", env={"FLOWER_MAX_COST": ""})  # (archives; a new job)
        for name in os.listdir(self.ws):
            if name.startswith("part"):
                os.unlink(os.path.join(self.ws, name))
        self.roles.work = [write] * 40
        self.roles.log.clear()
        cap = round(6.5 * turn, 6)      # clarify + goal + a few work turns
        since = flower.job_since(flower.LocalState(flower.Paths(self.ws)).peek_lineage())
        first = self.flower("--new", "--max-cost", f"{cap:.6f}", "write the parts")
        self.assertEqual(first.returncode, flower.EXIT_BUDGET, first.stderr[-2000:])
        lines = [ln for ln in first.stderr.splitlines() if "budget is spent" in ln]
        self.assertEqual(len(lines), 1, first.stderr)
        job = flower.LocalState(flower.Paths(self.ws)).peek_lineage()
        self.assertNotEqual(flower.job_since(job), since)
        spent = flower.job_spend(self.rows(), flower.job_since(job))
        self.assertGreaterEqual(spent, cap)
        self.assertLessEqual(spent, cap + turn + 1e-9)          # within one turn's cost of the cap
        written = self.parts()
        self.assertTrue(written)
        self.assertLess(len(written), 8)
        self.assertRegex(self.flower("status").stdout, r"spent +\$[0-9.]+ of a \$[0-9.]+ budget")
        before = len(self.api.requests)
        again = self.flower()                                    # the kept budget holds: nothing paid
        self.assertEqual(again.returncode, flower.EXIT_BUDGET, again.stderr[-2000:])
        self.assertEqual(len(self.api.requests), before)
        works = len(self.roles.bodies("work"))
        higher = round(2 * cap + 10 * turn, 6)
        done = self.flower("--max-cost", f"{higher:.6f}")
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertEqual(self.parts(), [f"part{n}.txt" for n in range(1, 9)])
        resumed = self.roles.bodies("work")[works]
        self.assertIn(written[-1], json.dumps(resumed["messages"]))   # the same session: no work lost
        self.assertEqual(len(self.roles.bodies("clarify")), 1)
        total = flower.job_spend(self.rows(), flower.job_since(job))
        self.assertLessEqual(total, higher + turn + 1e-9)
        status = json.loads(self.flower("status", "--json").stdout)
        self.assertAlmostEqual(status["budget"]["spent_usd"], total, places=5)
        self.assertAlmostEqual(status["budget"]["max_cost_usd"], higher, places=5)


if __name__ == "__main__":
    unittest.main()
