"""Per-key fixed cost of a trim-on load (issue 46): a store remembers under which schema cookie it last saw
its triggers, asks one statement where it asked three, and parses with one JSON scanner a load. What must
hold: a trigger another connection (or this one) drops after a load is still noticed by the next load, and
every load still equals prune() of the stored rows."""

import asyncio
import json
import os
import random
import sqlite3
import tempfile
import unittest
import unittest.mock

import flower
from tests.transcripts import anchor_transcript, random_transcript

PK = "proj"


class StoreCase(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.path = os.path.join(tmp.name, "sessions.db")
        self.spill = os.path.join(tmp.name, "spill")
        self.store = flower.SqliteSessionStore(self.path)
        self.addCleanup(self.store.close)
        self.other = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(self.other.close)
        self.policy = flower.PrunePolicy(trim=True, spill_dir=self.spill)

    def same_as_prune(self, key):
        got, report = self.store.load_pruned(key, self.policy)
        want, want_report = flower.prune(self.store.load_sync(key), self.policy)
        self.assertEqual(got, want)
        self.assertEqual(report.as_dict(), want_report.as_dict())


class TriggerCookieTest(StoreCase):
    def test_triggers_are_looked_up_once_while_the_schema_holds(self):
        key = {"project_key": PK, "session_id": "s"}
        self.store.append_sync(key, anchor_transcript(200))
        with unittest.mock.patch.object(flower.SqliteSessionStore, "_facts_trusted",
                                        wraps=flower.SqliteSessionStore._facts_trusted) as looked:
            for _ in range(3):
                self.same_as_prune(key)
                with self.store.small_held(key) as small:
                    self.assertTrue(small)
            self.assertEqual(looked.call_count, 1)
            self.other.execute("CREATE TABLE unrelated(x)")   # any schema change: looked up again, once
            self.same_as_prune(key)
            self.same_as_prune(key)
            self.assertEqual(looked.call_count, 2)

    def test_a_trigger_dropped_after_a_load_is_noticed_by_the_next(self):
        rng = random.Random(46)
        for trial in range(24):
            key = {"project_key": PK, "session_id": f"s{trial}"}
            self.store.append_sync(key, random_transcript(300 + trial, size=120))
            self.same_as_prune(key)   # the triggers seen: the store remembers the cookie
            with self.store.small_held(key) as small:
                self.assertTrue(small)
            by = self.other if trial % 2 else self.store._db   # another connection, or the store's own
            name = rng.choice([flower.FACTS_TRIGGER, *flower.CUT_TRIGGERS])
            by.execute(f"DROP TRIGGER {name}")
            with self.store.small_held(key) as small:   # a repair may wait on a lock: not in the caller's thread
                self.assertFalse(small)
            # rows changed with the trigger gone keep facts that no longer tell them
            rows = self.other.execute("SELECT seq, payload, facts FROM entries WHERE skey=? AND facts IS NOT NULL",
                                      (flower._key_string(key),)).fetchall()
            for seq, payload, _ in rng.sample(rows, min(len(rows), 4)):
                entry = json.loads(payload)
                entry["uuid"] = f"moved-{trial}-{seq}"
                entry["message"] = {"role": "user", "content": [{"type": "text", "text": f"changed {seq}"}]}
                entry["type"] = "user"
                self.other.execute("UPDATE entries SET payload=? WHERE seq=?", (json.dumps(entry), seq))
            with self.subTest(trial=trial, dropped=name):
                self.same_as_prune(key)
                known = {n for (n,) in self.other.execute(flower.SQL_TRIGGERS_KNOWN)}
                self.assertEqual(known, {flower.FACTS_TRIGGER, *flower.CUT_TRIGGERS, *flower.MARK_TRIGGERS})   # back, for later writes

    def test_many_keys_through_the_wrapper_equal_prune(self):
        keys = []
        for k in range(30):
            key = {"project_key": PK, "session_id": "s", "subpath": f"subagents/agent-{k}"}
            entries = anchor_transcript(20 + 7 * k, seed=500 + k) if k % 2 else random_transcript(k, size=40 + k)
            self.store.append_sync(key, entries)
            keys.append(key)
        wrapped = flower.PruningSessionStore(self.store, policy=self.policy)

        async def every():
            return [await wrapped.load(key) for key in keys]
        for _ in range(2):   # the first writes the spill files and notes cut facts, the second reads rows cut
            got = asyncio.run(every())
            for key, entries in zip(keys, got):
                self.assertEqual(entries, flower.prune(self.store.load_sync(key), self.policy)[0])


class UncutKeysTest(StoreCase):
    def test_keys_without_cuts_still_note_them_and_later_loads_read_rows_cut(self):
        from tests.helpers import forget_listings
        from tests.transcripts import session_with_big_results
        forget_listings()
        self.addCleanup(forget_listings)
        self.policy = flower.PrunePolicy(trim=True, trim_keep=2, spill_dir=self.spill)
        keys = []
        for k in range(8):
            key = {"project_key": PK, "session_id": "s", "subpath": f"subagents/agent-{k}"}
            self.store.append_sync(key, session_with_big_results(k, 6 if k % 2 else 0, sid="s"))
            keys.append(key)
        wrapped = flower.PruningSessionStore(self.store, policy=self.policy)

        async def every():
            return [await wrapped.load(key) for key in keys]
        executed = []
        real_fresh = flower.SqliteSessionStore._fresh

        def fresh(rows, marks, plan, found):
            executed.append(len(plan.cuts) if plan else None)
            return real_fresh(rows, marks, plan, found)
        with unittest.mock.patch.object(flower.SqliteSessionStore, "_fresh", staticmethod(fresh)):
            for round in range(2):
                got = asyncio.run(every())
                for key, entries in zip(keys, got):
                    self.assertEqual(entries, flower.prune(self.store.load_sync(key), self.policy)[0])
                if round == 0:   # no spill file yet: no row read cut, but the big ones' cut facts noted
                    self.assertEqual(executed, [0] * 8)
                    noted = self.other.execute("SELECT COUNT(*) FROM cut_facts").fetchone()[0]
                    self.assertGreater(noted, 0)
        # read cut now; the keys without big results were left as they were: marked, read plainly
        self.assertEqual([bool(n) for n in executed[8:]], [True] * 4)


class OneScannerTest(unittest.TestCase):
    def test_parsed_batches_with_a_given_scanner(self):
        texts = [json.dumps({"i": i, "t": "é" * (i % 3)}) for i in range(300)] + [{"given": 1}, "[1]", "{\"x"]
        bad = [0]
        scan = json.decoder.JSONDecoder().scan_once
        got = [e for batch in flower.parsed_batches(texts, bad, scan=scan) for e in batch]
        self.assertEqual(got, [json.loads(t) for t in texts[:300]] + [{"given": 1}])
        self.assertEqual(bad[0], 2)


if __name__ == "__main__":
    unittest.main()
