"""prepare() deciding that a stored session does not fit (issue 44): rows with a cut fact are read cut even
where their spill file is not written (a session that does not fit writes none), and a session that fits
after such a decision is loaded whole once more, so that every pointer it returns has its file."""

import asyncio
import json
import os
import tempfile
import unittest
import unittest.mock

import flower
from tests.test_bigload import PK, POLICIES, PruneOnce, mixes, prepared_before, session_with_big_results


def cut_rows(store) -> int:
    return store._db.execute("SELECT COUNT(*) FROM cut_facts").fetchone()[0]


class LaterWakes(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.spill = os.path.join(self.tmp, "spill")
        self.store = flower.SqliteSessionStore(os.path.join(self.tmp, "s.db"))
        self.key = {"project_key": PK, "session_id": "s"}
        self.store.append_sync(self.key, session_with_big_results(4, 60))
        self.wrapped = flower.PruningSessionStore(self.store, policy=flower.PrunePolicy(trim=True, spill_dir=self.spill))
        self.addCleanup(self.store.close)

    def test_a_later_wake_that_does_not_fit_reads_the_big_results_cut_and_writes_nothing(self):
        self.assertFalse(asyncio.run(self.wrapped.prepare(self.key, 50)))   # the first wake notes the cut facts
        self.assertGreater(cut_rows(self.store), 20)
        with unittest.mock.patch.object(flower.SqliteSessionStore, "_read_cut",
                                        wraps=flower.SqliteSessionStore._read_cut) as cut, \
                unittest.mock.patch.object(self.store, "load_pruned", wraps=self.store.load_pruned) as loads:
            self.assertFalse(asyncio.run(self.wrapped.prepare(self.key, 50)))
        self.assertEqual(loads.call_count, 1)
        # every old big result (all but the newest trim_keep of them) came from its fact, not its row
        self.assertEqual(cut.call_count, cut_rows(self.store) - self.wrapped.policy.trim_keep)
        self.assertFalse(os.path.exists(self.spill) and os.listdir(self.spill))
        self.assertEqual(self.wrapped._prepared, {})
        self.assertEqual(self.wrapped.last_report.unspilled, cut.call_count)
        self.assertNotIn("unspilled", self.wrapped.last_report.as_dict())   # not in the resume event

    def test_a_wake_that_fits_after_a_decision_writes_every_file_it_points_to(self):
        raw = self.store.load_sync(self.key)
        self.assertFalse(asyncio.run(self.wrapped.prepare(self.key, 50)))
        harder = self.wrapped.harder_policy()
        budget = flower.estimate_tokens(flower.prune(raw, harder)[0])
        want, want_report, fits = prepared_before(raw, self.wrapped.policy, harder, budget)
        self.assertTrue(fits)
        with unittest.mock.patch.object(self.store, "load_pruned", wraps=self.store.load_pruned) as loads:
            self.assertTrue(asyncio.run(self.wrapped.prepare(self.key, budget)))
        got = asyncio.run(self.wrapped.load(self.key))
        self.assertEqual(json.dumps(got), json.dumps(want))
        self.assertEqual(self.wrapped.last_report.as_dict(), want_report.as_dict())
        self.assertEqual(self.wrapped.last_report.unspilled, 0)
        self.assertEqual(sorted(os.listdir(self.spill)), sorted(os.path.basename(p) for p in want_report.spills))
        for path, full in want_report.spills.items():
            with open(path, encoding="utf-8") as fh:
                self.assertEqual(fh.read(), flower.redact(full))
        self.assertEqual(loads.call_count, 2)   # decided cut, then read whole for the files
        with unittest.mock.patch.object(self.store, "load_pruned", wraps=self.store.load_pruned) as loads:
            self.assertTrue(asyncio.run(self.wrapped.prepare(self.key, budget)))   # the files exist now
        self.assertEqual(loads.call_count, 1)


class DecidedThenFits(PruneOnce):
    """PruneOnce's differential with the budgets in rising order: prepare() first decides that the
    session does not fit (noting cut facts, writing no file), then that it fits."""

    def budgets(self, raw, policy, harder):
        return sorted(super().budgets(raw, policy, harder))

    def test_prune_with_a_budget_is_prune_of_the_policy_it_picks(self):
        self.skipTest("the same as PruneOnce's")

    def test_a_session_that_does_not_fit_is_loaded_and_pruned_once_and_spills_nothing(self):
        self.skipTest("the same as PruneOnce's")


del PruneOnce   # run once, from tests.test_bigload

if __name__ == "__main__":
    unittest.main()
