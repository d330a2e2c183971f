"""The store notes the cut facts of the biggest results as it appends them (issue 44): the first wake of a
session too big to resume decides without parsing those rows, and says what it said before; a session
that most likely fits is still read once, whole, where its spill files are missing."""

import asyncio
import json
import os
import shutil
import tempfile
import unittest
import unittest.mock

import flower
from tests.helpers import noted_cut_facts, true_cut_facts
from tests.transcripts import anchor_transcript, with_logs

KEY = {"project_key": "proj", "session_id": "s"}


def mixed(seed: int, n: int = 900) -> list[dict]:
    """An anchor session whose results are partly logs over CUT_STORED_CHARS, partly logs under it."""
    entries = with_logs(anchor_transcript(n, seed=seed), seed, share=0.08, lines=1000)   # ~19K chars
    return with_logs(entries, seed + 1, share=0.08, lines=150)                          # ~3K chars


def stored_facts(store) -> dict[str, str]:
    """uuid -> the cut fact the store noted for it."""
    return dict(noted_cut_facts(store).values())


def facts_of_rows(store) -> dict[str, str]:
    """uuid -> the cut fact of each stored row, worked out from the row as it is stored."""
    return dict(true_cut_facts(store, flower._key_string(KEY)).values())


class Case(unittest.TestCase):
    def store(self) -> tuple[flower.SqliteSessionStore, str]:
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        store = flower.SqliteSessionStore(os.path.join(tmp, "s.db"))
        self.addCleanup(store.close)
        return store, tmp


class AppendNotes(Case):
    def test_the_append_notes_the_facts_of_the_big_results_as_a_load_would(self):
        raw = mixed(3)
        store, _ = self.store()
        for at in range(0, len(raw), 100):
            store.append_sync(KEY, raw[at:at + 100])
        noted, every = stored_facts(store), facts_of_rows(store)
        big = {u: f for u, f in every.items() if int(f[2:].partition("|")[0]) >= flower.CUT_STORED_CHARS}
        self.assertGreater(len(big), 15)
        self.assertLess(len(big), len(every))   # the smaller big results are left to the first load
        self.assertEqual(noted, big)
        # and a trim-on load notes the rest, the same facts it noted before
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(
            trim=True, trim_min_chars=1000, spill_dir=os.path.join(os.path.dirname(store.path), "spill")))
        asyncio.run(wrapped.load(KEY))
        flower.wait_spills()
        self.assertEqual(stored_facts(store), every)

    def test_a_batch_sent_again_notes_nothing_it_did_not_store(self):
        raw = mixed(5, 300)
        store, _ = self.store()
        store.append_sync(KEY, raw[:150])
        changed = json.loads(json.dumps(raw[150:]))
        for e in changed:   # the same uuids with other texts: the first rows stay, as stored
            block = (e.get("message") or {}).get("content")
            if isinstance(block, list) and block and block[0].get("type") == "tool_result":
                block[0]["content"] = "x" * 30000
                e["toolUseResult"] = {"stdout": "x" * 30000}
        store.append_sync(KEY, raw[150:160])
        store.append_sync(KEY, changed)
        self.assertEqual(flower.SqliteSessionStore.load_sync(store, KEY)[150:160], raw[150:160])
        for uid, fact in stored_facts(store).items():   # every fact is the fact of its row as stored
            self.assertEqual(fact, facts_of_rows(store)[uid])

    def test_a_batch_with_a_lone_surrogate_notes_facts_of_its_rows_as_stored(self):
        raw = mixed(6, 300)
        for e in raw:
            block = (e.get("message") or {}).get("content")
            if isinstance(block, list) and block and block[0].get("type") == "tool_result" \
                    and len(block[0].get("content") or "") > flower.CUT_STORED_CHARS:
                block[0]["content"] += "\ud800"
                e["toolUseResult"]["stdout"] = block[0]["content"]
                break
        store, _ = self.store()
        store.append_sync(KEY, raw)
        self.assertEqual(store.load_sync(KEY), raw)
        for uid, fact in stored_facts(store).items():
            self.assertEqual(fact, facts_of_rows(store)[uid])


class FirstWake(Case):
    def wrapped(self, store, tmp):
        return flower.PruningSessionStore(store, policy=flower.PrunePolicy(
            trim=True, spill_dir=os.path.join(tmp, "spill")))

    def test_a_session_that_does_not_fit_is_decided_without_parsing_its_big_results(self):
        raw = mixed(7, 1500)
        store, tmp = self.store()
        store.append_sync(KEY, raw)
        noted = set(stored_facts(store))
        wrapped = self.wrapped(store, tmp)
        with unittest.mock.patch.object(flower.SqliteSessionStore, "_read_cut",
                                        wraps=flower.SqliteSessionStore._read_cut) as cut, \
                unittest.mock.patch.object(flower, "cut_fact", wraps=flower.cut_fact) as worked:
            self.assertFalse(asyncio.run(wrapped.prepare(KEY, 10)))
        self.assertGreater(len(noted), 20)
        self.assertGreaterEqual(cut.call_count, len(noted) - 2)   # all but the newest (trim_keep) read cut
        self.assertEqual({c.args[0]["uuid"] for c in worked.call_args_list} & noted, set())
        outline = asyncio.run(wrapped.load_outline(KEY))
        # what the handoff reads is what it read before (no fact noted by the append)
        other, tmp2 = self.store()
        with unittest.mock.patch.object(flower, "CUT_STORED_CHARS", 10**9):
            other.append_sync(KEY, raw)
        self.assertEqual(stored_facts(other), {})
        plain = self.wrapped(other, tmp2)
        self.assertFalse(asyncio.run(plain.prepare(KEY, 10)))
        self.assertEqual(json.dumps(outline), json.dumps(asyncio.run(plain.load_outline(KEY))))
        self.assertEqual(wrapped.last_report.tokens, plain.last_report.tokens)
        self.assertEqual(store.load_sync(KEY), raw)

    def test_a_session_that_most_likely_fits_is_read_once_and_its_files_written(self):
        raw = mixed(8, 1500)
        last = [e for e in raw if e.get("type") == "assistant" and e["message"].get("model") != "<synthetic>"][-1]
        last["message"]["usage"] = {"input_tokens": 40}   # its last context: far under the budget
        store, tmp = self.store()
        store.append_sync(KEY, raw)
        wrapped = self.wrapped(store, tmp)
        self.assertGreater(len(stored_facts(store)), wrapped.policy.trim_keep + 5)   # some old enough to cut
        with unittest.mock.patch.object(flower.SqliteSessionStore, "load_pruned",
                                        wraps=store.load_pruned) as passes:
            self.assertTrue(asyncio.run(wrapped.prepare(KEY, 10**9)))
        self.assertEqual(passes.call_count, 1)
        loaded = asyncio.run(wrapped.load(KEY))
        flower.wait_spills()
        pointers = [b["content"] for e in loaded if isinstance((e.get("message") or {}).get("content"), list)
                    for b in e["message"]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"
                    and isinstance(b.get("content"), str) and os.path.join(tmp, "spill") in b["content"]]
        self.assertGreater(len(pointers), 5)
        self.assertEqual(len(os.listdir(os.path.join(tmp, "spill"))) > 0, True)
        self.assertEqual(loaded, flower.prune(raw, wrapped.policy)[0])


if __name__ == "__main__":
    unittest.main()
