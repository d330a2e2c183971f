"""A first trim-on load of a session with long big results (issue 44) returns once its pointers are
built: the spill files are redacted and written in a thread of their own; a Runtime's session waits for
them before its first query, or, if it delegates, before each tool call (one may read a file).

- the load returns while the writer is held (the test lets it go: no timing); the files then hold
  redact() of each text (a credential never reaches one), 0600, and nothing is left pending;
- spills shorter than SPILL_LOAD_DEFER_AT in all are written before the load returns, as before;
- a writer that fails leaves no traceback and no file, and the next load writes it;
- a single session's first query waits for the files being written; a delegating session's tool calls do."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import tempfile
import threading
import unittest
import unittest.mock

import flower
from flower import AgentSpec, PrunePolicy, PruningSessionStore, Resilience, Runtime, SqliteSessionStore
from tests import fakesdk
from tests.fakesdk import FAKE
from tests.transcripts import Builder

KEY = {"project_key": "p", "session_id": "s"}
SECRET = "sk-ant-api03-" + "Q" * 40


def session(n: int, size: int) -> list[dict]:
    """``n`` Bash results of ``size`` chars, each with a credential in it (two of them equal)."""
    import random
    b = Builder(random.Random(4))
    b.prompt("read everything")
    for i in range(n):
        body = f"{i % (n - 1):05d} export API_TOKEN={SECRET}\n" + "y" * size
        b.tool("Bash", {"command": f"python3 gen.py {i}"}, body)
    return b.entries


class LoadSpillsLater(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.addCleanup(flower.wait_spills, 30)
        self.store = SqliteSessionStore(os.path.join(self.tmp.name, "s.db"))
        self.addCleanup(self.store.close)
        self.spill = os.path.join(self.tmp.name, "spill")

    def load(self):
        wrapped = PruningSessionStore(self.store, policy=PrunePolicy(trim=True, trim_keep=2, spill_dir=self.spill))
        return asyncio.run(wrapped.load(KEY)), wrapped.last_report

    def files(self) -> dict[str, str]:
        if not os.path.isdir(self.spill):
            return {}
        out = {}
        for name in os.listdir(self.spill):
            with open(os.path.join(self.spill, name), encoding="utf-8") as fh:
                out[name] = fh.read()
        return out

    def held(self):
        """write_spills patched to wait until the test lets it go; (started, release)."""
        started, release, real = threading.Event(), threading.Event(), flower.write_spills

        def held_write(spills):
            started.set()
            release.wait(10)
            real(spills)
        patcher = unittest.mock.patch.object(flower, "write_spills", held_write)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.addCleanup(release.set)
        return started, release

    def test_a_long_first_load_returns_before_its_files_are_written(self):
        self.store.append_sync(KEY, session(12, flower.SPILL_LOAD_DEFER_AT // 6))
        _, release = self.held()
        entries, report = self.load()
        self.assertFalse(release.is_set())   # the load came back while the writer was held
        self.assertGreater(report.trimmed, 0)
        pointers = [e for e in entries if self.spill in str(e)]
        self.assertEqual(len(pointers), report.trimmed)
        self.assertEqual(self.files(), {})
        self.assertEqual(len(set(flower._SPILL_WRITERS.values())), 1)
        self.assertEqual(len(flower._SPILL_WRITERS), report.trimmed)
        release.set()
        flower.wait_spills()
        self.assertEqual(flower._SPILL_WRITERS, {})
        files = self.files()
        self.assertEqual(len(files), report.trimmed)
        for name, body in files.items():
            self.assertNotIn(SECRET, body)
            self.assertIn("[REDACTED]", body)
            self.assertEqual(os.stat(os.path.join(self.spill, name)).st_mode & 0o777, 0o600)
        texts = {e["message"]["content"][0]["content"] for e in session(12, flower.SPILL_LOAD_DEFER_AT // 6)
                 if e["type"] == "user" and isinstance(e["message"]["content"], list)}
        self.assertLessEqual(set(files.values()), {flower.redact(t) for t in texts})
        again, report = self.load()   # the files are found: nothing is written again
        self.assertEqual(report.trimmed, len(files))
        self.assertEqual(flower._SPILL_WRITERS, {})
        self.assertEqual(again, entries)

    def test_short_spills_are_written_before_the_load_returns(self):
        self.store.append_sync(KEY, session(12, 3000))
        entries, report = self.load()
        self.assertGreater(report.trimmed, 0)
        self.assertEqual(flower._SPILL_WRITERS, {})
        files = self.files()
        self.assertEqual(len(files), report.trimmed)
        self.assertFalse(any(SECRET in body for body in files.values()))

    def test_a_failed_writer_leaves_no_file_and_the_next_load_writes_it(self):
        self.store.append_sync(KEY, session(12, flower.SPILL_LOAD_DEFER_AT // 6))

        def full_disk(spills):
            raise OSError(28, "No space left on device")
        err = io.StringIO()
        with unittest.mock.patch.object(flower, "write_spills", full_disk), contextlib.redirect_stderr(err):
            entries, report = self.load()
            flower.wait_spills()
        self.assertEqual(err.getvalue(), "")   # no traceback from the thread
        self.assertEqual(flower._SPILL_WRITERS, {})
        self.assertEqual(self.files(), {})
        again, report2 = self.load()
        flower.wait_spills()
        self.assertEqual(again, entries)
        self.assertEqual(len(self.files()), report.trimmed)


class LoadSpillsLaterInAWorker(LoadSpillsLater):
    """The same for a session loaded in a worker thread (more rows than ``quick_rows``)."""

    def setUp(self):
        super().setUp()
        self.store.quick_rows = 1


class RuntimeWaits(fakesdk.FakeWorkspace, unittest.TestCase):
    """A session without workers waits for a load's spill files before its first query; a delegating one
    sends it at once, and its catch-all PreToolUse hook holds each tool call until they are written."""

    def run_with_writer(self, spec: AgentSpec) -> tuple[list, list, threading.Event, threading.Thread]:
        release, seen, hooks = threading.Event(), [], []
        writer = threading.Thread(target=release.wait, args=(10,))
        writer.start()
        self.addCleanup(writer.join)
        self.addCleanup(release.set)
        path = os.path.join(self.ws, "spill", "x-0.txt")
        flower._SPILL_WRITERS[path] = writer
        self.addCleanup(flower._SPILL_WRITERS.pop, path, None)
        real_wait, real_query = flower.wait_spills, fakesdk.ClaudeSDKClient.query

        def waiting(timeout=None):   # the writer ends once the Runtime waits for it
            release.set()
            real_wait(timeout)

        async def query(client, prompt, session_id="default"):
            seen.append(writer.is_alive())
            hooks.extend(h for m in client.options.hooks.get("PreToolUse", []) if m.matcher is None for h in m.hooks
                         if getattr(h, "waits_for_spills", False))
            await real_query(client, prompt, session_id)
        FAKE.turns = [[("text", "done", 1000)]]
        rt = Runtime(workspace=self.ws, run_dir=self.run_dir, resilience=Resilience(probe=False, max_attempts=2))
        self.addCleanup(rt.close)
        with unittest.mock.patch.object(flower, "wait_spills", waiting), \
                unittest.mock.patch.object(fakesdk.ClaudeSDKClient, "query", query):
            result = asyncio.run(rt.run(spec, "go"))
        self.assertEqual(result.text, "done")
        return seen, hooks, release, writer

    def test_a_single_session_waits_for_the_files_before_its_first_query(self):
        seen, hooks, _, _ = self.run_with_writer(AgentSpec("work"))
        self.assertEqual(seen, [False])
        self.assertEqual(hooks, [])   # no hook before each tool call (see flower.spill_waits)

    def test_a_delegating_session_queries_at_once_and_its_tool_calls_wait(self):
        seen, hooks, release, writer = self.run_with_writer(AgentSpec("work", agents={"worker": flower.worker()}))
        self.assertEqual(seen, [True])   # not held: the writer was still at work
        self.assertEqual(len(hooks), 1)

        async def tool_call():   # the hook, as the CLI calls it before a tool runs
            task = asyncio.ensure_future(hooks[0]({"tool_name": "Read"}, "toolu_1", {}))
            await asyncio.sleep(0.2)
            held = not task.done()
            release.set()
            self.assertEqual(await asyncio.wait_for(task, 10), {})
            return held
        self.assertTrue(asyncio.run(tool_call()))
        self.assertFalse(writer.is_alive())


if __name__ == "__main__":
    unittest.main()
