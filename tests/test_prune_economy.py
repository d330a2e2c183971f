"""Context economy (issue 16): unavailable-tool errors pruned like denials, trim that really shrinks
what is loaded (no side copies), spill files named without hashing, written once, not kept in memory."""

from __future__ import annotations

import asyncio
import json
import os
import random
import tempfile
import unittest

import flower
from tests.transcripts import Builder


def session_with_unavailable(n_write: int, n_edit: int) -> list[dict]:
    b = Builder(random.Random(7))
    b.prompt("write x")
    for i in range(n_write):
        b.tool("Write", {"file_path": "/w/x", "content": f"v{i}"}, "", kind="disallowed")
    for i in range(n_edit):
        b.tool("Edit", {"file_path": "/w/x"}, "", kind="disallowed")
    b.say("cannot write", 1000)
    return b.entries


def unavailable_results(entries: list[dict]) -> list[str]:
    return [flower.block_text(blk) for e in entries for blk in flower.blocks_of(e)
            if isinstance(blk, dict) and blk.get("type") == "tool_result" and "No such tool available" in flower.block_text(blk)]


class Unavailable(unittest.TestCase):
    def test_only_the_newest_per_tool_survives(self):
        entries = session_with_unavailable(5, 3)
        pruned, report = flower.prune(entries)
        texts = unavailable_results(pruned)
        self.assertEqual(len(texts), 2)                       # newest Write, newest Edit
        self.assertEqual(report.unavailable_dropped, 6)
        uses = [blk for e in pruned for blk in flower.blocks_of(e) if isinstance(blk, dict) and blk.get("type") == "tool_use"]
        self.assertEqual(sorted(u["name"] for u in uses), ["Edit", "Write"])
        self.assertEqual(uses[0]["input"]["content"], "v4")   # the newest Write call is the one kept
        self.assertEqual(flower.prune(pruned)[0], pruned)     # idempotent
        parents = {e.get("uuid") for e in pruned}
        self.assertTrue(all(e.get("parentUuid") in parents or e.get("parentUuid") is None for e in pruned))

    def test_policy_can_keep_all(self):
        entries = session_with_unavailable(4, 0)
        pruned, report = flower.prune(entries, flower.PrunePolicy(keep_unavailable=10))
        self.assertEqual(len(unavailable_results(pruned)), 4)
        self.assertEqual(report.unavailable_dropped, 0)


def big_session(n: int, size: int) -> list[dict]:
    b = Builder(random.Random(3))
    b.prompt("read everything")
    for i in range(n):
        b.tool("Bash", {"command": f"python3 gen.py {i}"}, f"{i:05d}" + "y" * size)
    return b.entries


class Trim(unittest.TestCase):
    def test_trimmed_results_lose_their_side_copy_and_are_named_by_uuid(self):
        entries = big_session(30, 5000)
        with tempfile.TemporaryDirectory() as tmp:
            pruned, report = flower.prune(entries, flower.PrunePolicy(trim=True, trim_keep=5, spill_dir=tmp))
            self.assertEqual(report.trimmed, 25)
            trimmed = [e for e in pruned if e.get("type") == "user" and "archived" in json.dumps(e)]
            self.assertEqual(len(trimmed), 25)
            self.assertTrue(all("toolUseResult" not in e for e in trimmed))
            kept = [e for e in pruned if e.get("type") == "user" and "toolUseResult" in e]
            self.assertEqual(len(kept), 5)
            self.assertTrue(all(len(json.dumps(e)) < 1000 for e in trimmed))   # no 5,000-char copy left
            self.assertLess(len(json.dumps(pruned)), len(json.dumps(entries)) * 0.25)
            for path in report.spills:
                uid, index = os.path.basename(path)[:-4].rsplit("-", 1)
                self.assertIn(uid, {e.get("uuid") for e in entries})
                self.assertEqual(index, "0")

    def test_store_writes_each_spill_once_and_keeps_no_text(self):
        entries = big_session(12, 3000)
        with tempfile.TemporaryDirectory() as tmp:
            inner = flower.SqliteSessionStore(":memory:")
            key = {"project_key": "p", "session_id": "s"}
            inner.append_sync(key, entries)
            store = flower.PruningSessionStore(inner, policy=flower.PrunePolicy(trim=True, trim_keep=2, spill_dir=tmp))
            asyncio.run(store.load(key))
            self.assertEqual(store.last_report.spills, {})            # not kept in memory
            self.assertEqual(store.last_report.trimmed, 10)
            names = sorted(os.listdir(tmp))
            self.assertEqual(len(names), 10)
            stamp = {n: os.stat(os.path.join(tmp, n)).st_mtime_ns for n in names}
            asyncio.run(store.load(key))                               # a second load writes nothing again
            self.assertEqual({n: os.stat(os.path.join(tmp, n)).st_mtime_ns for n in names}, stamp)
            with open(os.path.join(tmp, names[0]), encoding="utf-8") as fh:
                body = fh.read()
            self.assertTrue(body.startswith("0") and body.endswith("y"))
            self.assertEqual(oct(os.stat(os.path.join(tmp, names[0])).st_mode & 0o777), "0o600")


if __name__ == "__main__":
    unittest.main()
