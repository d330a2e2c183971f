"""Context economy (issue 16): unavailable-tool errors pruned like denials, trim that really shrinks
what is loaded (no side copies), spill files named without hashing, written once, not kept in memory."""

from __future__ import annotations

import asyncio
import json
import os
import random
import tempfile
import unittest
from unittest import mock

import flower
from tests import fakesdk
from tests.fakesdk import FAKE
from tests.transcripts import Builder, big_session


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


class Fits(unittest.TestCase):
    """What a resume sends stays under the handoff threshold, or the step hands off instead."""

    def store_with(self, entries, trim=False):
        inner = flower.SqliteSessionStore(":memory:")
        key = {"project_key": "p", "session_id": "s"}
        inner.append_sync(key, entries)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        return flower.PruningSessionStore(inner, policy=flower.PrunePolicy(trim=trim, spill_dir=self.tmp.name)), key

    def test_prepare_trims_harder_until_it_fits_and_the_next_load_is_that(self):
        entries = big_session(60, 20_000)                   # ~1.2 MB of tool output, ~340K tokens
        store, key = self.store_with(entries)                # trim off, as with --no-trim
        self.assertGreater(flower.estimate_tokens(asyncio.run(store.load(key))), 300_000)
        self.assertTrue(asyncio.run(store.prepare(key, max_tokens=135_000)))
        loaded = asyncio.run(store.load(key))
        self.assertLessEqual(flower.estimate_tokens(loaded), 135_000)
        self.assertEqual(sum("archived" in json.dumps(e) for e in loaded), 59)   # all but the newest
        flower.wait_spills()   # 1.2 MB of spills: written in a thread of their own
        self.assertEqual(len(os.listdir(self.tmp.name)), 59)
        again = asyncio.run(store.load(key))                 # prepared once: later loads prune as usual
        self.assertGreater(flower.estimate_tokens(again), 300_000)

    def test_a_session_that_will_not_fit_is_pruned_once(self):
        for trim in (False, True):
            with self.subTest(trim=trim):
                store, key = self.store_with(big_session(60, 20_000), trim=trim)
                real, calls = flower._prune, []

                def counted(*args, **kw):
                    calls.append(1)
                    return real(*args, **kw)
                with mock.patch.object(flower, "_prune", counted):
                    self.assertFalse(asyncio.run(store.prepare(key, max_tokens=2_000)))
                self.assertEqual(len(calls), 1)
                self.assertEqual(os.listdir(self.tmp.name), [])   # and no spill file written for it

    def test_rows_of_a_wrong_shape_do_not_stop_the_fit(self):
        # the estimate met a message that is a string and raised; Runtime then let the SDK load the
        # whole session unchecked (an overflowing request)
        entries = big_session(60, 20_000)
        last = entries[-1]["uuid"]
        entries += [{"type": "user", "uuid": "odd1", "parentUuid": last, "message": "a message that is a string"},
                    {"type": "assistant", "uuid": "odd2", "parentUuid": "odd1", "message": ["a", "list"]},
                    {"type": "user", "uuid": "odd3", "parentUuid": "odd2", "message": {"content": 7}}]
        store, key = self.store_with(entries)
        self.assertTrue(asyncio.run(store.prepare(key, max_tokens=135_000)))
        loaded = asyncio.run(store.load(key))
        self.assertLessEqual(flower.estimate_tokens(loaded), 135_000)
        self.assertEqual([e["uuid"] for e in loaded[-3:]], ["odd1", "odd2", "odd3"])   # kept as they are

    def test_prepare_says_when_nothing_can_make_it_fit(self):
        b = Builder(random.Random(1))
        b.prompt("x" * 600_000)                              # a prompt no trimming can shorten
        b.say("ok", 1000)
        store, key = self.store_with(b.entries)
        self.assertFalse(asyncio.run(store.prepare(key, max_tokens=135_000)))


class FitsRuntime(fakesdk.FakeWorkspace, unittest.TestCase):
    def test_an_oversized_stored_session_hands_off_instead_of_overflowing(self):
        b = Builder(random.Random(2), sid="old")
        b.prompt("p" * 700_000)                              # ~200K tokens of prompt: cannot be trimmed
        b.say("working on it OLD-MARK", 150_000)
        rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, resilience=flower.Resilience(probe=False),
                            handoff=flower.HandoffPolicy(window=200_000))
        self.addCleanup(rt.close)
        rt.raw_store.append_sync({"project_key": rt.project_key, "session_id": "old-sid"}, b.entries)
        FAKE.turns = [[("text", "continued in a fresh session", 10_000)]]
        result = asyncio.run(rt.run(flower.AgentSpec("work"), "do it", resume="old-sid", lineage_key="work"))
        self.assertTrue(result.ok, result.error)
        self.assertEqual(result.retired, ["old-sid"])
        self.assertEqual(len(FAKE.calls), 1)                 # no resume of the old session was ever sent
        self.assertIsNone(FAKE.calls[0]["options"].resume)
        self.assertIn(flower.text("carry_head")[:40], FAKE.calls[0]["prompt"])
        with open(rt.paths.handoff("work"), encoding="utf-8") as fh:
            self.assertIn("does not fit the window", fh.read())


class OneLoad(unittest.TestCase):
    """Load and prune under one GC pause; the loaded list is consumed only when it is the store's own copy."""

    def test_sqlite_load_is_prune_of_the_stored_rows_and_leaves_gc_on(self):
        from tests.transcripts import anchor_transcript
        entries = anchor_transcript(3000)
        store = flower.SqliteSessionStore(":memory:")
        key = {"project_key": "p", "session_id": "s"}
        store.append_sync(key, entries)
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(keep_glances=3))
        loaded = asyncio.run(wrapped.load(key))
        self.assertEqual(loaded, flower.prune(entries, flower.PrunePolicy(keep_glances=3))[0])
        self.assertTrue(__import__("gc").isenabled())
        self.assertGreater(wrapped.last_report.expired, 100)
        self.assertGreater(wrapped.last_report.dropped_errors, 100)

    def test_another_stores_list_is_never_emptied(self):
        entries = big_session(5, 10)
        entries.append({"type": "system", "subtype": "api_error", "uuid": "e1", "parentUuid": entries[-1]["uuid"]})
        kept = list(entries)

        class Keeper:   # a user's store that hands out the list it keeps
            async def load(self, key):
                return entries

            async def append(self, key, batch):
                entries.extend(batch)
        wrapped = flower.PruningSessionStore(Keeper())
        pruned = asyncio.run(wrapped.load({"project_key": "p", "session_id": "s"}))
        self.assertEqual(entries, kept)
        self.assertEqual(len(pruned), len(kept) - 1)
        self.assertTrue(__import__("gc").isenabled())


def report_session(n: int, size: int, image: bool = False) -> list[dict]:
    """Subagent reports: tool results whose content is a list of text blocks (and an image)."""
    b = Builder(random.Random(5))
    b.prompt("survey the code")
    for i in range(n):
        b.tool("Task", {"description": f"part {i}", "prompt": "look"}, "")
        blocks = [{"type": "text", "text": f"{i:05d}" + "r" * size}]
        if image:
            blocks.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 400_000}})
        b.entries[-1]["message"]["content"][0]["content"] = blocks
        b.entries[-1]["toolUseResult"] = {"content": blocks, "status": "completed"}
    return b.entries


class RichResults(unittest.TestCase):
    """Results that come as lists of blocks (a subagent's report, a read image) count, and trim, as text."""

    def test_the_estimate_counts_their_text_and_an_image_at_its_most(self):
        report = report_session(1, 50_000)
        self.assertGreaterEqual(flower.estimate_tokens(report), 50_000 / 3.5)   # it counted 0
        self.assertEqual(flower.block_text(report[-1]["message"]["content"][0]), "00000" + "r" * 50_000)
        pictured = report_session(1, 10, image=True)
        tokens = flower.estimate_tokens(pictured)
        self.assertGreaterEqual(tokens, 1_600)                # what the API charges for an image at most
        self.assertLess(tokens, 2_000)                        # not its 400 KB of base64
        alone = [{"type": "user", "message": {"role": "user", "content": [{"type": "image", "source": {}}]}}]
        self.assertEqual(flower.estimate_tokens(alone), 1_600)

    def test_prepare_trims_old_reports_until_the_resume_fits(self):
        inner = flower.SqliteSessionStore(":memory:")
        key = {"project_key": "p", "session_id": "s"}
        inner.append_sync(key, report_session(60, 20_000))   # ~1.2 MB of reports: ~340K tokens
        with tempfile.TemporaryDirectory() as tmp:
            store = flower.PruningSessionStore(inner, policy=flower.PrunePolicy(spill_dir=tmp))
            self.assertTrue(asyncio.run(store.prepare(key, max_tokens=135_000)))
            loaded = asyncio.run(store.load(key))
            self.assertLess(len(json.dumps(loaded, ensure_ascii=False)), 135_000 * 3.5)   # what is sent, measured apart
            self.assertEqual(sum("archived" in json.dumps(e) for e in loaded), 59)
            texts = set()
            flower.wait_spills()   # 1.2 MB of spills: written in a thread of their own
            for name in os.listdir(tmp):
                with open(os.path.join(tmp, name), encoding="utf-8") as fh:
                    texts.add(fh.read())
            self.assertEqual(texts, {f"{i:05d}" + "r" * 20_000 for i in range(59)})   # each report's text, whole

    def test_a_result_with_an_image_is_never_trimmed(self):
        entries = report_session(30, 5_000, image=True)
        with tempfile.TemporaryDirectory() as tmp:
            pruned, report = flower.prune(entries, flower.PrunePolicy(trim=True, trim_keep=1, trim_min_chars=1000,
                                                                      spill_dir=tmp))
        self.assertEqual(report.trimmed, 0)                   # a spill file could not bring the image back
        self.assertEqual(pruned, flower.prune(entries)[0])

    def test_a_result_nested_hundreds_of_levels_deep_is_stored_and_loaded(self):
        # block_text() recursed into lists once they counted: a row 250 levels deep exhausted the stack
        deep = "boom"
        for _ in range(300):
            deep = [{"content": deep}]
        row = {"type": "user", "uuid": "r", "parentUuid": None, "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "T", "is_error": True, "content": deep}]}}
        store = flower.SqliteSessionStore(":memory:")
        key = {"project_key": "p", "session_id": "s"}
        store.append_sync(key, [row])
        self.assertEqual(asyncio.run(flower.PruningSessionStore(store).load(key)), [row])
        self.assertEqual(flower.block_text(row["message"]["content"][0]), "")


class SharedWrapper(unittest.TestCase):
    def test_two_prepares_at_once_each_tell_their_own_size(self):
        # prepare() read the size from the wrapper's last_report, which a prepare of another session in
        # the other worker thread could replace in between: "fits" for a session 500 times too big
        import threading
        inner = flower.SqliteSessionStore(":memory:")
        small, big = {"project_key": "p", "session_id": "small"}, {"project_key": "p", "session_id": "big"}
        inner.append_sync(small, big_session(1, 10))
        inner.append_sync(big, big_session(30, 20_000))
        inner.quick_rows = 0   # both in worker threads (a small session is loaded in the loop's, one at a time)
        wrapped = flower.PruningSessionStore(inner)
        real, small_kept = wrapped._kept, threading.Event()

        def kept(done, *spills):   # the big session's prune waits until the small one's report is the last
            out = real(done, *spills)
            if len(out[0]) > 40:
                small_kept.wait(10)
            else:
                small_kept.set()
            return out
        wrapped._kept = kept

        async def both():
            return await asyncio.gather(wrapped.prepare(big, 1_000), wrapped.prepare(small, 1_000))
        self.assertEqual(asyncio.run(both()), [False, True])
        self.assertTrue(small_kept.is_set())
