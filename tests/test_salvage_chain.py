"""Salvage never stores an entry whose parent the CLI never wrote (issue 36). With HOME's disk full the
CLI wrote a killed call's result but not the call; stored, that result was the session's newest leaf on
a broken chain, and the real CLI resumed from an older leaf, dropping three stored turns whose steps the
trusting model then redid (trusting chaos local seed 1: steps 24-25 "lost:ok")."""

from __future__ import annotations

import json
import os
import tempfile
import unittest
from unittest import mock

import flower
from tests import fakesdk


def entry(uid, parent, text="x"):
    return {"type": "user", "uuid": uid, "parentUuid": parent, "message": {"role": "user", "content": text}}


class Chained(unittest.TestCase):
    def test_only_entries_that_hang_on_the_chain(self):
        run = [entry("c", "b"), entry("d", "c"), entry("x", "never-written"), entry("y", "x"), entry("r", None)]
        self.assertEqual([e["uuid"] for e in flower.chained(run, {"a", "b"})], ["c", "d", "r"])
        self.assertEqual(flower.chained([entry("x", "gone")], {"a"}), [])


class Salvage(fakesdk.FakeWorkspace, unittest.TestCase):
    def salvaged(self, stored, transcript):
        """``stored`` in the store, ``transcript`` as the CLI's own file of the session; the salvage:
        how many entries it recovered and the stored session after it."""
        with tempfile.TemporaryDirectory() as config, mock.patch.dict(os.environ, {"CLAUDE_CONFIG_DIR": config}):
            rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, resilience=flower.Resilience(probe=False))
            self.addCleanup(rt.close)
            key = {"project_key": rt.project_key, "session_id": "33333333-3333-3333-3333-333333333333"}
            rt.raw_store.append_sync(key, stored)
            own = os.path.join(config, "projects", rt.project_key)
            os.makedirs(own)
            with open(os.path.join(own, key["session_id"] + ".jsonl"), "w") as fh:
                for e in transcript:
                    fh.write(json.dumps(e) + "\n")
            return rt.salvage(key["session_id"]), rt.raw_store.load_sync(key)

    def test_an_orphan_the_cli_left_on_a_full_disk_is_not_stored(self):
        n, stored = self.salvaged([entry("a", None), entry("b", "a")],
                                  [entry("a", None), entry("b", "a"), entry("c", "b"),
                                   entry("result", "call-never-written", "Exit code 137"), entry("att", "result")])
        self.assertEqual(n, 1)
        self.assertEqual([e["uuid"] for e in stored], ["a", "b", "c"])
        self.assertEqual(flower.newest_uuid(stored), "c")   # the newest leaf stays on an intact chain

    def test_an_entry_after_a_healed_stand_in_of_a_resume_is_stored(self):
        n, stored = self.salvaged([entry("a", None)],
                                  [entry("a", None), dict(entry("heal", "a"), flowerHealed=True), entry("next", "heal")])
        self.assertEqual(n, 1)
        self.assertEqual([e["uuid"] for e in stored], ["a", "next"])

    def test_a_branch_recovered_from_an_older_transcript_does_not_become_the_newest_leaf(self):
        # a killed run's transcript ends with a prompt (and its attachment) the store never took; a later
        # run went on from their parent and its turn is stored. Appended, the recovered pair would be
        # the newest leaf and the resume would take that older branch (trusting chaos pg seed 1: the
        # steps of the later run done again)
        n, stored = self.salvaged([entry("a", None), entry("b", "a"), entry("later", "b"), entry("later-answer", "later")],
                                  [entry("a", None), entry("b", "a"), entry("old-prompt", "b"), entry("old-att", "old-prompt")])
        self.assertEqual(n, 2)
        self.assertEqual([e["uuid"] for e in stored], ["a", "b", "old-prompt", "old-att", "later", "later-answer"])
        self.assertEqual(flower.newest_uuid(stored), "later-answer")

    def test_entries_the_transcript_ends_with_after_the_newest_stored_one_are_appended(self):
        n, stored = self.salvaged([entry("a", None), entry("b", "a")],
                                  [entry("a", None), entry("b", "a"), entry("c", "b"), entry("d", "c")])
        self.assertEqual(n, 2)
        self.assertEqual([e["uuid"] for e in stored], ["a", "b", "c", "d"])

if __name__ == "__main__":
    unittest.main()
