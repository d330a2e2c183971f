"""Review of issue 44's cut facts noted at append (review44g).

- A fact the store notes as it stores a batch is the fact of the row it is noted beside: a row whose uuid
  column no longer names its entry (a repair tool renamed it) is put back by ``insert_before_sync`` without
  its fact landing on the row that now holds that uuid (which ``load_outline`` would then read as the other
  row's skeleton);
- differential: for sessions with big results appended in random batches, some rows put back by
  ``insert_before_sync`` and batches sent again, every load, prepare and the outline a failed prepare
  keeps say what they say where the append notes no fact; every fact describes its own row."""

import asyncio
import json
import os
import random
import shutil
import tempfile
import unittest
import unittest.mock

import flower
from tests.transcripts import anchor_transcript, big_session, with_logs

KEY = {"project_key": "proj", "session_id": "s"}


def facts_of_rows(store) -> list[str]:
    """Where a noted cut fact is not the fact of the row it is noted beside (seq: why)."""
    wrong = []
    for seq, uid, fact in store._db.execute("SELECT seq, uuid, fact FROM cut_facts").fetchall():
        row = store._db.execute("SELECT uuid, payload FROM entries WHERE seq=?", (seq,)).fetchone()
        if row is not None and row[0] == uid and \
                flower.cut_fact(json.loads(row[1]), row[1], flower._compact_json()) != fact:
            wrong.append(f"{seq}: the fact of another row")
    return wrong


class Case(unittest.TestCase):
    def store(self, name: str = "s") -> tuple[flower.SqliteSessionStore, str]:
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        store = flower.SqliteSessionStore(os.path.join(tmp, name + ".db"))
        self.addCleanup(store.close)
        return store, tmp


class InsertBeforeNotesOnlyItsRows(Case):
    def test_a_row_renamed_by_a_repair_tool_lends_its_fact_to_no_other_row(self):
        raw = big_session(6, flower.CUT_STORED_CHARS + 1000)   # results noted as they are stored
        results = [e for e in raw if e["type"] == "user" and isinstance(e["message"]["content"], list)]
        renamed = results[0]
        store, _ = self.store()
        store.append_sync(KEY, raw)
        self.assertEqual(store._db.execute("SELECT COUNT(*) FROM cut_facts").fetchone()[0], 6)
        store._db.execute("UPDATE entries SET uuid='renamed-by-hand' WHERE uuid=?", (renamed["uuid"],))
        small = json.loads(json.dumps(results[-1]))   # a later entry under the freed uuid, no fact of its own
        small.update(uuid=renamed["uuid"], toolUseResult={"stdout": "small"})
        small["message"]["content"][0]["content"] = "small"
        store.append_sync(KEY, [small])
        store.insert_before_sync(KEY, [{"type": "user", "uuid": "missed", "parentUuid": None,
                                        "message": {"role": "user", "content": "hi"}}], "renamed-by-hand")
        self.assertEqual(facts_of_rows(store), [])
        outline = store.load_outline(KEY)
        self.assertEqual(outline[-1]["message"]["content"][0]["content"], "small")
        self.assertEqual(outline[-1]["toolUseResult"], {"stdout": "small"})


class SameAsWithoutAppendFacts(Case):
    """What the store returns is the same whether the append noted facts or not."""

    def session(self, seed: int) -> list[dict]:
        entries = with_logs(anchor_transcript(360, seed=seed), seed, share=0.12, lines=1000)   # ~19K chars
        return json.loads(json.dumps(with_logs(entries, seed + 1, share=0.08, lines=150)))

    def story(self, seed: int, noting: bool) -> tuple[list, dict]:
        rng = random.Random(seed)
        raw = self.session(seed)
        at = rng.randint(20, len(raw) - 40)
        while not isinstance(raw[at + 5].get("uuid"), str):
            at += 1
        missed, before, first = raw[at:at + 5], raw[at + 5]["uuid"], raw[:at] + raw[at + 5:]
        store, tmp = self.store("a" if noting else "b")
        spill = os.path.join(tmp, "spill")
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(trim=True, trim_keep=3, spill_dir=spill))
        said: list = []

        def shown(value):
            return json.loads(json.dumps(value).replace(spill, "SPILL"))
        with unittest.mock.patch.object(flower, "CUT_STORED_CHARS", flower.CUT_STORED_CHARS if noting else 10**9):
            done = 0
            while done < len(first):
                n = rng.randint(1, 90)
                store.append_sync(KEY, first[done:done + n])
                done += n
            noted = store._db.execute("SELECT COUNT(*) FROM cut_facts").fetchone()[0]
            self.assertTrue(noted > 5 if noting else noted == 0)
            for step in ("small", "insert", "again", "load", "big"):
                if step == "insert":
                    store.insert_before_sync(KEY, missed, before)
                elif step == "again":
                    store.append_sync(KEY, first[10:40])
                elif step == "load":
                    said.append(shown(asyncio.run(wrapped.load(KEY))))
                else:
                    fits = asyncio.run(wrapped.prepare(KEY, 10 if step == "small" else 10**9))
                    said.append((step, fits, wrapped.last_report.tokens))
                    if not fits:
                        said.append(shown(asyncio.run(wrapped.load_outline(KEY))))
                    said.append(shown(asyncio.run(wrapped.load(KEY))))
                flower.wait_spills()
            self.assertEqual(facts_of_rows(store), [])
            self.assertEqual(said[-1], shown(flower.prune(store.load_sync(KEY), wrapped.policy)[0]))
        files = {name: open(os.path.join(spill, name), encoding="utf-8").read() for name in os.listdir(spill)}
        return said, files

    def test_loads_prepares_and_outlines_say_the_same(self):
        for seed in (1, 2, 3):
            with self.subTest(seed=seed):
                noted, plain = self.story(seed, True), self.story(seed, False)
                self.assertEqual(noted[0], plain[0])
                self.assertEqual(noted[1], plain[1])


if __name__ == "__main__":
    unittest.main()
