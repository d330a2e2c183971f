"""Fewer statements a small key's trim-on load (issue 46): the head a small load asks once, the plan's
rows (left and cut) in one merged statement; what the load returns stays what the slow way returns."""

from __future__ import annotations

import asyncio
import os
import tempfile
import unittest

import flower
from tests.transcripts import anchor_transcript


def statements(store: flower.SqliteSessionStore, run) -> tuple[object, list[str]]:
    """``run()``'s result and the SQL statements the store's connection ran meanwhile."""
    seen: list[str] = []
    store._db.set_trace_callback(lambda sql: sql.startswith("--") or seen.append(sql))   # not a sub-statement
    try:
        return run(), seen
    finally:
        store._db.set_trace_callback(None)


class SmallKeyLoad(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.store = flower.SqliteSessionStore(os.path.join(self.tmp.name, "s.db"))
        self.addCleanup(self.store.close)
        self.key = {"project_key": "p", "session_id": "s", "subpath": "subagents/agent-1"}
        self.other = {"project_key": "p", "session_id": "s", "subpath": "subagents/agent-2"}
        self.store.append_sync(self.key, anchor_transcript(400, seed=3))
        self.store.append_sync(self.other, anchor_transcript(60, seed=4))
        self.policy = flower.PrunePolicy(trim=True, trim_keep=2, trim_min_chars=1000,
                                         spill_dir=os.path.join(self.tmp.name, "spill"))
        self.wrapped = flower.PruningSessionStore(self.store, policy=self.policy)
        loop = asyncio.new_event_loop()
        self.addCleanup(loop.close)
        self.load = lambda key: loop.run_until_complete(self.wrapped.load(key))
        self.load(self.key)   # the first trim-on load notes cut facts and writes the spill files
        self.load(self.other)

    def test_a_small_load_asks_its_head_once_and_its_plan_in_one_statement(self):
        pruned, seen = statements(self.store, lambda: self.load(self.key))
        self.assertEqual(pruned, flower._prune(self.store.load_sync(self.key), self.policy)[0])
        self.assertEqual(sum("pragma_data_version" in s for s in seen), 1, seen)
        self.assertEqual(sum("cut_facts" in s and "UNION ALL" in s for s in seen), 1, seen)
        self.assertEqual(sum("cut_facts" in s for s in seen), 1, seen)
        self.assertEqual(len(seen), 3, seen)   # head, plan, rows

    def test_the_held_head_serves_only_its_own_key(self):
        # a load of another key under the hold asks its own head: the held one says "known" and
        # another data_version; an unknown key must still be None
        with self.store.small_held(self.key) as small:
            self.assertTrue(small)
            self.assertIsNone(self.store.load_pruned({"project_key": "p", "session_id": "none"}, self.policy))
            other = self.store.load_pruned(self.other, self.policy)
            mine = self.store.load_pruned(self.key, self.policy)
        self.assertEqual(other[0], flower._prune(self.store.load_sync(self.other), self.policy)[0])
        self.assertEqual(mine[0], flower._prune(self.store.load_sync(self.key), self.policy)[0])
        self.assertIsNone(self.store._held_head)

    def test_the_merged_plan_reads_both_parts_by_their_indexes(self):
        plan = " ".join(str(r[-1]) for r in self.store._db.execute("EXPLAIN QUERY PLAN " + flower.SQL_PLAN_ROWS,
                                                                   ("k",)))
        self.assertIn("COVERING INDEX", plan)
        self.assertIn("USING PRIMARY KEY", plan)
        self.assertNotIn("TEMP B-TREE", plan)   # merged as they come, not sorted again

    def test_the_plan_rows_are_the_left_rows_and_the_cut_rows(self):
        skey = flower._key_string(self.key)
        merged = self.store._db.execute(flower.SQL_PLAN_ROWS, (skey,)).fetchall()
        left = self.store._db.execute(flower.SQL_LEFT_ROWS, (skey,)).fetchall()
        cuts = self.store._db.execute(flower.SQL_CUT_ROWS, (skey,)).fetchall()
        self.assertTrue(left and cuts)
        self.assertEqual([r for r in merged if r[0] == 0], left)
        self.assertEqual([r for r in merged if r[0] == 1], cuts)


if __name__ == "__main__":
    unittest.main()
