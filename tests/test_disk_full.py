"""A full disk is said as a full disk with the directory flower was writing (issue 36): classified
``disk-full`` (not ``unknown``), retried like a passing fault, a step that still fails on it exits 3,
and a write that failed without naming its file (``write()``, ``fsync()``) is named by flower."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import os
import unittest
from unittest import mock

import flower
from flower import AgentSpec, Resilience, Runtime
from tests import fakesdk
from tests.fakesdk import FAKE


def enospc() -> OSError:
    """What a failed write() or fsync() raises on a full disk: no file named."""
    return OSError(errno.ENOSPC, "No space left on device")


class Classify(unittest.TestCase):
    def test_a_full_disk_is_its_own_kind_and_retried(self):
        for said in ("OSError: [Errno 28] No space left on device",
                     "Error: ENOSPC: no space left on device, write",
                     "database or disk is full",
                     flower.text("disk_full", path="/tmp/x"),
                     flower.text("disk_full", "zh", path="/tmp/x")):
            with self.subTest(said=said):
                self.assertEqual(flower.classify(said), flower.DISK_FULL)
        self.assertTrue(Resilience(probe=False).should_retry(flower.DISK_FULL))
        self.assertEqual(flower.classify("connection reset"), flower.TRANSIENT)


class NamedWrites(unittest.TestCase):
    def setUp(self):
        self.dir = self.enterContext(__import__("tempfile").TemporaryDirectory())

    def test_atomic_write_names_the_file_a_full_disk_refused(self):
        path = os.path.join(self.dir, "lineage.json")
        with mock.patch.object(flower.os, "fsync", side_effect=enospc()):
            with self.assertRaises(OSError) as caught:
                flower.atomic_write(path, "{}")
        self.assertEqual((caught.exception.errno, caught.exception.filename), (errno.ENOSPC, path))
        self.assertEqual(os.listdir(self.dir), [])   # no temp file left behind

    def test_append_lines_and_the_spool_name_their_file(self):
        path = os.path.join(self.dir, "log.jsonl")
        with mock.patch.object(flower.os, "fsync", side_effect=enospc()):
            with self.assertRaises(OSError) as caught:
                flower.append_lines(path, b"x\n")
        self.assertEqual(caught.exception.filename, path)
        spool = flower.StateSpool(os.path.join(self.dir, "spool", "state.jsonl"))
        with mock.patch.object(flower.os, "fsync", side_effect=enospc()):
            with self.assertRaises(OSError) as caught:
                spool.add({"t": "note"})
        self.assertEqual(caught.exception.filename, spool.path)

    def test_the_last_line_says_disk_full_and_names_the_directory(self):
        path = os.path.join(self.dir, "state.jsonl")

        def command(args, reporter):
            flower.atomic_write(path, "x")
            return 0

        err = io.StringIO()
        with mock.patch.dict(flower.COMMANDS, {"status": command}), \
                mock.patch.object(flower.os, "fsync", side_effect=enospc()), contextlib.redirect_stderr(err):
            code = flower.main(["status"])
        self.assertEqual(code, flower.EXIT_SETUP)
        self.assertEqual(err.getvalue().strip(), "flower: " + flower.text("disk_full", path=self.dir))


class DuringARun(fakesdk.FakeWorkspace, unittest.TestCase):
    """The SDK's copy of a resumed session (in flower's own temp dir) meets a full disk."""

    def setUp(self):
        super().setUp()
        self.events = []

        async def sleep(seconds):
            pass
        self.rt = Runtime(workspace=self.ws, run_dir=self.run_dir, on_event=self.events.append, sleep=sleep,
                          resilience=Resilience(probe=False, max_attempts=3))

    def tearDown(self):
        self.rt.close()
        super().tearDown()

    def test_a_resume_that_cannot_write_its_copy_is_a_full_temp_dir(self):
        FAKE.turns = [[("text", "part", 100), ("error", "API Error: 529 Overloaded", 529, "api_error")]]
        connect = fakesdk.ClaudeSDKClient.connect

        async def full_on_resume(client):
            if client.options.resume:
                raise enospc()
            await connect(client)

        with mock.patch.object(fakesdk.ClaudeSDKClient, "connect", full_on_resume):
            result = asyncio.run(self.rt.run(AgentSpec("work"), "go", lineage_key="work"))
        self.assertFalse(result.ok)
        errors = [e.data for e in self.events if e.kind == "error"]
        self.assertEqual(errors[0]["kind"], "transient")
        self.assertEqual({e["kind"] for e in errors[1:]}, {flower.DISK_FULL})
        self.assertEqual(errors[-1]["message"], flower.text("disk_full", path=flower.own_tempdir()))
        self.assertEqual(result.error_kind, flower.DISK_FULL)
        self.assertEqual(len(errors), 3)   # retried to the bound, as a passing fault is

    def test_a_store_write_that_met_a_full_disk_names_the_stores_directory(self):
        FAKE.turns = [[("system", "mirror_error", {"error": "database or disk is full"}), ("text", "ok", 100)]]
        asyncio.run(self.rt.run(AgentSpec("work"), "go", lineage_key="work"))
        where = os.path.dirname(os.path.abspath(self.rt.raw_store.path))
        said = flower.text("info_mirror_error", error=flower.text("disk_full", path=where))
        self.assertIn(said, [e.data["message"] for e in self.events if e.kind == "info"])
        self.assertIn(said, self.rt.degraded)

    def test_a_step_failed_on_a_full_disk_exits_as_setup(self):
        from types import SimpleNamespace
        rows = [{"ok": False, "error_kind": flower.DISK_FULL}]
        self.assertEqual(flower._exit_code(SimpleNamespace(manifest=SimpleNamespace(rows=rows)), "work failed"),
                         flower.EXIT_SETUP)


if __name__ == "__main__":
    unittest.main()
