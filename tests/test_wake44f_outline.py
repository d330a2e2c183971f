"""The outline a first wake keeps (issue 44): the big results whose cut facts it found are cut in the
entries it read whole, their facts not parsed again; what the handoff reads is what reading the rows
gives (tests/test_huge_wake_once.py's differential covers every shape; here, the count)."""

import asyncio
import json
import os
import tempfile
import unittest
import unittest.mock

import flower
from tests.transcripts import anchor_transcript, with_logs

KEY = {"project_key": "p", "session_id": "s"}


class FirstWakeOutline(unittest.TestCase):
    def test_facts_found_now_are_not_parsed_again_and_the_outline_is_the_rows(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        store = flower.SqliteSessionStore(os.path.join(tmp.name, "s.db"))
        self.addCleanup(store.close)
        store.append_sync(KEY, with_logs(anchor_transcript(1200, seed=8), 3, share=0.2, lines=200))
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(
            trim=True, spill_dir=os.path.join(tmp.name, "spill")))
        real = flower.SqliteSessionStore._read_cut
        with unittest.mock.patch.object(flower.SqliteSessionStore, "_read_cut", side_effect=real) as read:
            self.assertFalse(asyncio.run(wrapped.prepare(KEY, 10)))
        self.assertEqual(read.call_count, 0)
        found = store._db.execute("SELECT COUNT(*) FROM cut_facts").fetchone()[0]
        self.assertGreater(found, 50)
        kept = asyncio.run(wrapped.load_outline(KEY))
        store._outline = None
        again = store.load_outline(KEY)   # from the rows and the facts just noted
        self.assertEqual(json.dumps(kept, ensure_ascii=False), json.dumps(again, ensure_ascii=False))
        cut = [e for e in kept if e.get("type") == "user" and isinstance(e["message"].get("content"), list)
               and e["message"]["content"][0].get("content") == ""]
        self.assertEqual(len(cut), found)
        self.assertFalse(any("toolUseResult" in e for e in cut))


if __name__ == "__main__":
    unittest.main()
