"""No crash, no hang, no wrong code (issue 36, item 10), core tier: subprocess runs of flower.py (or of
tests/fake_flower.py, the CLI on the fake SDK) with closed standard streams, an ASCII-only terminal,
state files nested too deep, FIFOs in place of state files and notes, a read-only run dir, a final
answer printed into a full disk, a learned window too small to hold a request, a lock whose holder left
no record, and a wrong-shaped lineage.json. Every test bounds its subprocess with a timeout: a hang is a
failure, never a wait."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import flower
from flower import AgentSpec, Resilience
from tests.fakesdk import FAKE
from tests.helpers import RUN_FLOWER, FakeRuntime, NO_SDK, base_env

DEEP = "[" * 100_000 + "]" * 100_000


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        self.run_dir = os.path.join(self.ws, ".flower")
        os.makedirs(os.path.join(self.run_dir, "notes"))
        self.env = base_env(self.tmp.name)
        self.env["ANTHROPIC_API_KEY"] = "sk-test-not-a-real-key-000"

    def tearDown(self):
        self.tmp.cleanup()

    def cli(self, args, *, fake=False, nosdk=False, env=None, timeout=60, **kwargs):
        """flower.py (or the fake-SDK CLI) in the workspace; a hang fails the test at ``timeout``."""
        cmd = [sys.executable, "-m", "tests.fake_flower"] if fake else \
            [sys.executable, "-c", NO_SDK] if nosdk else RUN_FLOWER
        kwargs.setdefault("capture_output", True)
        return subprocess.run(cmd + list(args), cwd=self.ws, env={**self.env, **(env or {})}, timeout=timeout,
                              **kwargs)

    def assertNoCrash(self, p):
        err = p.stderr.decode("utf-8", "replace") if isinstance(p.stderr, bytes) else str(p.stderr or "")
        self.assertNotIn("unexpected", err)
        self.assertNotIn("Traceback", err)

    def aside(self, name):
        return [n for n in os.listdir(self.run_dir) if n.startswith(name + ".corrupt-")]


class ClosedStreams(Base):
    def closed(self, args, fd, **kw):
        """Run with file descriptor ``fd`` closed in the child (``<&-``, ``>&-``)."""
        def close():
            os.close(fd)
        pipes = {0: {}, 1: {"stderr": subprocess.PIPE}, 2: {"stdout": subprocess.PIPE}}[fd]
        if fd == 0:
            pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        return self.cli(args, preexec_fn=close, capture_output=False, **pipes, **kw)

    def test_go_with_stdin_closed_runs_the_job(self):
        p = self.closed(["go", "write md2html"], 0, fake=True)
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"done", p.stderr)

    def test_go_with_stdout_or_stderr_closed_ends_as_its_job(self):
        for fd in (1, 2):
            with self.subTest(fd=fd):
                shutil.rmtree(self.run_dir)
                os.makedirs(self.run_dir)
                p = self.closed(["go", "write md2html"], fd, fake=True)
                self.assertNoCrash(p)
                self.assertEqual(p.returncode, 0, (p.stdout, p.stderr))
                rows = flower.Manifest.read(self.run_dir)
                self.assertTrue(rows and all(r["ok"] for r in rows), rows)

    def test_status_with_each_stream_closed(self):
        for fd in (0, 1, 2):
            with self.subTest(fd=fd):
                p = self.closed(["status"], fd, nosdk=True)
                self.assertNoCrash(p)
                self.assertEqual(p.returncode, 0)


class AsciiTerminal(Base):
    def test_chinese_output_on_an_ascii_terminal_degrades(self):
        env = {"PYTHONIOENCODING": "ascii"}
        p = self.cli(["--lang", "zh", "status"], nosdk=True, env=env)
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"\\u5de5\\u4f5c\\u533a", p.stdout)   # 工作区, escaped
        p = self.cli(["--lang", "zh", "--json", "status"], nosdk=True, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["kind"], "status")   # an escape is still JSON

    def test_a_chinese_job_on_an_ascii_terminal_finishes(self):
        p = self.cli(["--lang", "zh", "go", "写一个脚本"], fake=True, env={"PYTHONIOENCODING": "ascii",
                                                                          "FAKE_TEXT": "完成了"})
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"\\u5b8c\\u6210", p.stdout)


class DeepState(Base):
    def test_a_state_file_nested_too_deep_is_set_aside(self):
        for name in ("lineage.json", "window.json"):
            with self.subTest(name=name):
                with open(os.path.join(self.run_dir, name), "w") as fh:
                    fh.write(DEEP)
                p = self.cli(["status"], nosdk=True)
                self.assertNoCrash(p)
                self.assertEqual(p.returncode, 0, p.stderr)
                p = self.cli(["go", "write md2html"], fake=True)
                self.assertNoCrash(p)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(len(self.aside(name)), 1, os.listdir(self.run_dir))
                p = self.cli(["status"], nosdk=True)   # every later command works
                self.assertEqual(p.returncode, 0, p.stderr)
                shutil.rmtree(self.run_dir)
                os.makedirs(os.path.join(self.run_dir, "notes"))

    def test_a_manifest_line_nested_too_deep_is_skipped(self):
        with open(os.path.join(self.run_dir, "manifest.jsonl"), "w") as fh:
            fh.write(DEEP + "\n")
        p = self.cli(["status"], nosdk=True)
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.cli(["go", "write md2html"], fake=True)
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_read_json_and_peek(self):
        path = os.path.join(self.run_dir, "deep.json")
        with open(path, "w") as fh:
            fh.write(DEEP)
        self.assertIsNone(flower._peek_json(path))
        told = []
        self.assertEqual(flower.read_json(path, {"d": 1}, notify=told.append), {"d": 1})
        self.assertEqual(len(told), 1)
        self.assertEqual(len(self.aside("deep.json")), 1)
        self.assertIsNone(flower.parsed_alone('{"a": ' + DEEP + "}", flower.json.decoder.JSONDecoder().scan_once,
                                              [0]))


class Fifos(Base):
    def test_a_fifo_in_place_of_lineage_json(self):
        path = os.path.join(self.run_dir, "lineage.json")
        os.mkfifo(path)
        p = self.cli(["status"], nosdk=True, timeout=30)
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"lineage.json", p.stdout)          # status says it cannot read it
        p = self.cli(["go", "write md2html"], fake=True, timeout=60)
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(self.aside("lineage.json")), 1)

    def test_a_fifo_in_place_of_the_brief(self):
        notes = os.path.join(self.run_dir, "notes")
        os.mkfifo(os.path.join(notes, "brief.md"))
        p = self.cli(["status"], nosdk=True, timeout=30)
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.cli(["go", "write md2html"], fake=True, timeout=60)
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue([n for n in os.listdir(notes) if n.startswith("brief.md.corrupt-")], os.listdir(notes))

    def test_open_regular_refuses_without_blocking(self):
        path = os.path.join(self.run_dir, "pipe")
        os.mkfifo(path)
        with self.assertRaises(flower.NotRegularFile):
            flower.open_regular(path)
        self.assertIsNone(flower._read_text(path))
        self.assertIsNone(flower._peek_json(path))


@unittest.skipUnless(sys.platform.startswith("linux") and os.geteuid() == 0 and shutil.which("unshare"),
                     "needs root and unshare to mount the run dir read-only")
class ReadOnlyRunDir(Base):
    def test_status_reads_a_read_only_run_dir_and_go_says_why_it_cannot(self):
        p = self.cli(["go", "write md2html"], fake=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        sid = json.load(open(os.path.join(self.run_dir, "lineage.json")))["steps"]["work"]

        def read_only(args, fake=False):
            inner = [sys.executable, "-m", "tests.fake_flower"] if fake else [sys.executable, "-c", NO_SDK]
            script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
            probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount --bind -o ro / /mnt 2>/dev/null; true"],
                                   capture_output=True)
            if probe.returncode != 0:
                self.skipTest("unshare -m does not work here")
            return subprocess.run(["unshare", "-m", "sh", "-c", script, self.run_dir] + inner + args, cwd=self.ws,
                                  env=self.env, capture_output=True, timeout=60)
        p = read_only(["status"])
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(sid.encode(), p.stdout)
        self.assertIn(b"4 stored", p.stdout)
        p = read_only(["sessions"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(sid.encode(), p.stdout)
        p = read_only(["go", "more"], fake=True)
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn(b"read-only or permission denied", p.stderr)
        self.assertNotIn(b"busy or locked", p.stderr)


class FinalPrint(Base):
    def test_an_achieved_job_whose_answer_hits_a_full_disk_exits_0(self):
        with open("/dev/full", "wb") as full:
            p = self.cli(["go", "write md2html"], fake=True, capture_output=False, stdout=full,
                         stderr=subprocess.PIPE)
        self.assertNoCrash(p)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(flower.text("info_answer_lost").encode(), p.stderr)

    def test_a_failed_job_keeps_its_code_when_stdout_is_full(self):
        with open("/dev/full", "wb") as full:
            p = self.cli(["once", "hi"], fake=True, capture_output=False, stdout=full, stderr=subprocess.PIPE,
                         env={"FAKE_STATUS": "401"})
        self.assertEqual(p.returncode, 3, p.stderr)   # credentials rejected, not the full disk


class TinyWindow(Base):
    def test_a_learned_window_of_5_tokens_is_not_believed(self):
        book = flower.WindowBook(self.run_dir, base_url="http://x")
        with open(book.path, "w") as fh:
            json.dump({"http://x|m": {"window": 5, "source": "overflow"}}, fh)
        self.assertIsNone(book.get("m"))
        window, source = flower.resolve_window("m", book=book)
        self.assertGreaterEqual(window, flower.MIN_WINDOW)
        told = []
        book.notify = told.append
        book.learn("other", 200_000)                       # the next write sets the damaged book aside
        self.assertEqual(len(told), 1)
        book.lower("m", 5)
        self.assertEqual(book.get("m"), flower.MIN_WINDOW)  # an overflow never records less than the minimum

    def test_a_run_with_a_tiny_learned_window_finishes(self):
        base = self.env["ANTHROPIC_BASE_URL"]
        with open(os.path.join(self.run_dir, "window.json"), "w") as fh:
            json.dump({f"{base}|default": {"window": 5, "source": "overflow"}}, fh)
        p = self.cli(["go", "write md2html"], fake=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(b"handoff", p.stderr)


class LockHolder(Base):
    def test_a_holder_that_left_no_record_is_named_or_said_unknown(self):
        lock = os.path.join(self.run_dir, "flower.lock")
        holder = subprocess.Popen([sys.executable, "-c", (
            "import fcntl, os, sys, time\n"
            f"fd = os.open({lock!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n")], stdout=subprocess.PIPE)
        try:
            self.assertEqual(holder.stdout.readline().strip(), b"held")
            p = self.cli(["go", "write md2html"], fake=True)
            self.assertEqual(p.returncode, 5, p.stderr)
            self.assertNotIn(b"?", p.stderr)
            self.assertIn(f"pid {holder.pid}".encode(), p.stderr)
        finally:
            holder.kill()
            holder.wait()
        self.assertIn("cannot be named", flower.DriverLock(lock, "x").busy_line({}))
        self.assertNotIn("?", flower.DriverLock(lock, "x").busy_line({"pid": 7}))


class StatusLineage(Base):
    def test_status_says_a_wrong_shaped_lineage(self):
        path = os.path.join(self.run_dir, "lineage.json")
        for body in ('{"workspace": 5}', '["a list"]', '{"steps": {"work": 1}}'):
            with self.subTest(body=body):
                with open(path, "w") as fh:
                    fh.write(body)
                p = self.cli(["status"], nosdk=True)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn(b"lineage.json", p.stdout)
                self.assertIn(b"wrong shape", p.stdout)
                p = self.cli(["--json", "status"], nosdk=True)
                self.assertTrue(json.loads(p.stdout)["problems"])
                self.assertTrue(os.path.exists(path))   # status has no side effects

    def test_status_is_quiet_about_a_sound_lineage(self):
        p = self.cli(["go", "write md2html"], fake=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.cli(["--json", "status"], nosdk=True)
        self.assertEqual(json.loads(p.stdout)["problems"], [])


class StallWatch(FakeRuntime, unittest.TestCase):
    """The stall watch on the fake SDK (no CLI process to stop: the turn's reading is cancelled)."""

    def test_a_silent_turn_is_said_then_retried_as_a_stall(self):
        rt = self.runtime(resilience=Resilience(probe=False, base_delay=0, max_attempts=4, stall_timeout=1.5))
        FAKE.turns = [[("block", "never")], [("text", "after the stall", 100)]]
        result = asyncio.run(asyncio.wait_for(rt.run(AgentSpec("work"), "x", lineage_key="work"), 60))
        self.assertTrue(result.ok, result.error)
        self.assertEqual(result.attempts, 2)
        self.assertIn("stream stalled", " ".join(result.errors))
        quiet = [m for m in self.infos() if "no message from the CLI" in m]
        self.assertTrue(quiet, self.infos())
        self.assertIn(flower.text("cli_model"), quiet[0])

    def test_a_running_tool_is_waited_for_past_the_bound(self):
        rt = self.runtime(resilience=Resilience(probe=False, stall_timeout=1.0))
        said = []
        st = flower._RunState(name="work", window=200_000, at=150_000, warn_at=120_000, manage=True,
                              emit=said.append)
        st.heard, st.pending = 0.0, {"toolu_1"}   # silent for ages, a tool still running
        turn = flower._Turn()

        async def scenario():
            drive = asyncio.ensure_future(asyncio.sleep(60))
            watch = asyncio.ensure_future(rt._watch_stall(st, turn, drive))
            while len(said) < 3:
                await asyncio.sleep(0.05)
            self.assertIsNone(turn.stalled)            # past the bound, and still waiting for the tool
            self.assertFalse(drive.done())
            st.pending = set()                         # the tool is done; the model says nothing after it
            await asyncio.wait_for(watch, 30)
            self.assertTrue(drive.cancelled())
        asyncio.run(scenario())
        self.assertIn(flower.text("cli_tool"), said[0].data["message"])
        self.assertIn("stream stalled", turn.stalled)


if __name__ == "__main__":
    unittest.main()


class UnawaitedErrors(unittest.TestCase):
    """The SDK answers the CLI's control requests from tasks of its own; a CLI killed under one (a
    stop, SIGTERM) made asyncio print "Task exception was never retrieved" and two tracebacks."""

    def run_body(self, error: BaseException) -> str:
        import io
        out = io.StringIO()
        reporter = flower.Reporter(out=out, err=out, tty=False)

        class Rt:
            _current = None

            def rescue(self, *a):
                pass

        async def body():
            async def fails():
                raise error
            task = asyncio.ensure_future(fails())
            await asyncio.sleep(0.01)
            del task   # never awaited: the loop's exception handler hears of it when it is collected
            import gc
            gc.collect()
            return "done"
        import contextlib
        with contextlib.redirect_stderr(out):   # where asyncio's own handler would print
            self.assertEqual(asyncio.run(flower._run_with_signals(Rt(), reporter, body, False)), "done")
        return out.getvalue()

    def test_the_sdk_failing_to_write_to_a_stopped_cli_is_not_shown(self):
        sdk_error = type("CLIConnectionError", (Exception,), {"__module__": "claude_agent_sdk._errors"})
        said = self.run_body(sdk_error("Cannot write to terminated process (exit code: -9)"))
        self.assertNotIn("Traceback", said)
        self.assertNotIn("never retrieved", said)
        self.assertEqual(said, "")

    def test_any_other_lost_error_is_one_line_without_a_secret(self):
        said = self.run_body(ValueError("boom sk-ant-api03-" + "x" * 90))
        self.assertNotIn("Traceback", said)
        self.assertEqual(len(said.strip().splitlines()), 1, said)
        self.assertIn("ValueError: boom", said)
        self.assertNotIn("x" * 40, said)
