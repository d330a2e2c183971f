"""One driver per session (issue 12), core tier: the workspace and step locks, the CLI guard and the
reaper, the write-ahead start records that can redo, fail-soft continuity writes, shape-validated
state files, unreadable store rows, option validation and the wake sentence of an unfinished brief.

Everything runs on the fake SDK (tests/fakesdk.py) or on plain processes: no network, no real CLI.
The guard tests use a shell script as the "CLI" and a small Python process as the "flower" whose
death the guard must notice. Waiting is always "poll the state until a deadline", never a timed
assertion on speed.
A comment "Catches (issue 12)" names the defect its test goes red on.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
import uuid
from unittest import mock

import flower
from flower import AgentSpec, Busy, DriverLock, Resilience, Runtime, Step, Workflow
from tests import fakesdk
from tests.fakesdk import FAKE, Brain
from tests.helpers import LEDGER_EN, FakeRuntime, NO_SDK, ROOT, base_env, closed_port, read_json, wait_until

LINUX = sys.platform.startswith("linux") and os.path.isdir("/proc/self")
BRIEF = ("## Goal\nmd2html script\n## Acceptance\nprints html\n## Bounds\nstdlib only\n"
         "## Unknowns and assumptions\nassumed UTF-8 input")
GOAL = "# Goal\nmd2html works\n\n# Checks\n- `python md2html.py t.md` prints <h1>"


# --- small helpers: polling, processes ---


def proc_state(pid):
    """The /proc state letter of ``pid`` (None when there is no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[0]


def alive(pid):
    """A process that exists and is not a zombie (an unreaped corpse has done all it will do)."""
    return proc_state(pid) not in (None, "Z", "X")


def pids_with(token):
    """Live processes whose command line contains ``token``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if token in cmdline and alive(int(name)):
            found.append(int(name))
    return found


def dead_pid():
    """A pid that certainly belonged to a process that is gone now."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def record_ready(path):
    """A guard's live record that is complete (it parses to an object with a pid)."""
    value = flower._peek_json(path)
    return isinstance(value, dict) and isinstance(value.get("pid"), int)


def write_bytes(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def aside_files(path):
    """The ``<name>.corrupt-<ts>`` copies of ``path``."""
    directory, base = os.path.dirname(path), os.path.basename(path)
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.startswith(base + ".corrupt-"))


async def wait_calls(n, task, timeout=10.0):
    """Until the fake SDK has seen ``n`` queries; fails (never hangs) when ``task`` ends first or
    the deadline passes."""
    deadline = time.monotonic() + timeout
    while len(FAKE.calls) < n:
        if task.done():
            task.result()  # raises whatever the run raised
            raise AssertionError(f"the run ended before the fake SDK saw query {n}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the fake SDK never saw query {n}")
        await asyncio.sleep(0.005)


HOLD_LOCK = """
import subprocess, sys, time
sys.path.insert(0, {root!r})
import flower
lock = flower.DriverLock(sys.argv[1], "workspace test").acquire(sys.argv[2])
child = None
if len(sys.argv) > 3:  # a long-lived child that inherits every inheritable descriptor
    child = subprocess.Popen(["sleep", "60"], close_fds=False)
print("held", child.pid if child else 0, flush=True)
time.sleep(120)
""".format(root=ROOT)


def hold_lock(path, step="work", with_child=False):
    """A separate process that holds a DriverLock on ``path``; returns (process, child pid)."""
    args = [sys.executable, "-c", HOLD_LOCK, path, step] + (["child"] if with_child else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    line = proc.stdout.readline().decode().split()
    assert line and line[0] == "held", line
    return proc, int(line[1])


class Procs:
    """unittest mixin: processes started by a test are killed in tearDown: by pid, by the group a
    guard leads, and by a unique token in their command line (what a broken guard left behind)."""

    def setUp(self):
        super().setUp()
        self.procs = []   # Popen objects
        self.groups = []  # process groups we caused (guards lead their own group)
        self.tokens = []  # unique words in the command lines of the processes we caused

    def token(self, prefix="sid"):
        value = f"{prefix}-{uuid.uuid4().hex}"
        self.tokens.append(value)
        return value

    def tearDown(self):
        for token in self.tokens:
            for pid in pids_with(token) if LINUX else []:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        for pgid in self.groups:
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()
        super().tearDown()


# --- 1. the workspace lock across processes, and at the command line ---

class Locks(Procs, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "flower.lock")

    def tearDown(self):
        super().tearDown()
        self.tmp.cleanup()

    def test_second_process_gets_busy_naming_the_first(self):
        holder, _ = hold_lock(self.path, step="work")
        self.procs.append(holder)
        with self.assertRaises(Busy) as caught:
            DriverLock(self.path, "workspace ~/ws").acquire("clarify")
        busy = caught.exception
        self.assertEqual(busy.exit_code, flower.EXIT_BUSY)
        self.assertEqual(flower.EXIT_BUSY, 5)
        self.assertIsInstance(busy, flower.FlowerError)
        self.assertEqual(busy.holder["pid"], holder.pid)
        self.assertEqual(busy.holder["step"], "work")
        message = str(busy)
        self.assertIn(f"pid {holder.pid}", message)
        self.assertIn("another flower drives workspace ~/ws", message)
        self.assertIn("step work", message)
        self.assertIn(busy.holder["since"], message)
        self.assertNotIn("\n", message)

    def test_same_process_second_acquire_is_busy_and_release_frees(self):
        first = DriverLock(self.path, "workspace x").acquire("goal")
        first.set_step("work")
        self.assertEqual(DriverLock(self.path, "workspace x").holder()["step"], "work")
        with self.assertRaises(Busy):
            DriverLock(self.path, "workspace x").acquire()
        first.release()
        first.release()  # idempotent
        second = DriverLock(self.path, "workspace x").acquire("clarify")
        self.assertEqual(second.holder()["pid"], os.getpid())
        second.release()

    def test_kill9_of_the_holder_frees_the_lock_at_once(self):
        holder, _ = hold_lock(self.path)
        self.procs.append(holder)
        with self.assertRaises(Busy):
            DriverLock(self.path, "workspace x").acquire()
        holder.kill()
        holder.wait(timeout=10)
        # no wait, no cleanup: the very next attempt takes over the stale lock silently
        lock = DriverLock(self.path, "workspace x").acquire("work")
        self.assertEqual(lock.holder()["pid"], os.getpid())
        lock.release()

    def test_a_child_of_the_holder_does_not_keep_the_lock(self):
        holder, child = hold_lock(self.path, with_child=True)
        self.procs.append(holder)
        try:
            self.assertTrue(child and _exists(child))
            holder.kill()
            holder.wait(timeout=10)
            self.assertTrue(_exists(child), "the child should outlive the holder for this test to mean anything")
            lock = DriverLock(self.path, "workspace x").acquire()  # the child does not hold it
            lock.release()
        finally:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)


def _exists(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


class GoLock(Procs, unittest.TestCase):
    """Two ``go`` in one workspace: the second exits 5 with one line naming the holder."""

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.env = base_env(self.tmp.name)

    def tearDown(self):
        super().tearDown()
        self.tmp.cleanup()

    def go(self, args, mode="nosdk", env=None):
        cmd = [sys.executable, "-c", NO_SDK] if mode == "nosdk" else [sys.executable, "-m", "tests.fake_flower"]
        return subprocess.run(cmd + args, cwd=self.ws, env=env or self.env, capture_output=True, timeout=60,
                              stdin=subprocess.DEVNULL)

    def lock_files(self):
        """Where a go's workspace lock may live: the run dir (now) or the workspace's .flower/ (the
        fix suggested for running with another -r, and §13's default run dir)."""
        return [os.path.join(self.ws, "runs", "flower.lock"), os.path.join(self.ws, ".flower", "flower.lock")]

    def test_second_go_exits_5_with_one_line(self):
        locks = []
        for path in self.lock_files():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            locks.append(DriverLock(path, "workspace test").acquire("work"))
        try:
            p = self.go(["go", "x"])
            err = p.stderr.decode()
            self.assertEqual(p.returncode, 5, err)
            self.assertNotIn("Traceback", err)
            lines = [ln for ln in err.splitlines() if ln.startswith("flower:")]
            self.assertEqual(len(lines), 1, err)
            self.assertIn("another flower drives", lines[0])
            self.assertIn(f"pid {os.getpid()}", lines[0])
            self.assertIn("step work", lines[0])
            # nothing of the second flower's own state was started: no lineage, no store
            for state_dir in ("runs", ".flower"):
                for name in ("lineage.json", "sessions.db"):
                    self.assertFalse(os.path.exists(os.path.join(self.ws, state_dir, name)), (state_dir, name))
        finally:
            for lock in locks:
                lock.release()
        # the lock was the only reason: without it the same command gets as far as the missing SDK
        p = self.go(["go", "x"])
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn(b"not installed", p.stderr)

    def test_once_takes_no_workspace_lock(self):
        locks = []
        for path in self.lock_files():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            locks.append(DriverLock(path, "workspace test").acquire("work"))
        try:
            p = self.go(["once", "hello"])
            self.assertEqual(p.returncode, 3, p.stderr)  # it got past any lock, to the missing SDK
            self.assertIn(b"not installed", p.stderr)
        finally:
            for lock in locks:
                lock.release()

    def test_a_running_go_holds_the_lock_and_names_its_step(self):
        log = os.path.join(self.tmp.name, "calls.jsonl")
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test", FAKE_WORK_BLOCK="1", FAKE_LOG=log)
        first = subprocess.Popen([sys.executable, "-m", "tests.fake_flower", "write md2html"], cwd=self.ws, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        self.procs.append(first)

        def holder_step():
            for path in self.lock_files():
                info = flower._peek_json(path) if os.path.exists(path) else None
                if isinstance(info, dict) and info.get("step") == "work":
                    return path
            return None
        lock_file = wait_until(holder_step, timeout=30)
        self.assertTrue(lock_file, "the first go never reached its work step")
        # the lock names the step just before that step's model call is logged: count after it
        self.assertTrue(wait_until(lambda: os.path.exists(log) and '"work"' in open(log, encoding="utf-8").read(),
                                   timeout=30), "the first go's work call was never logged")
        calls_before = open(log, encoding="utf-8").read().count("\n")
        p = self.go(["also tables"], mode="fake", env=env)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 5, err)
        lines = [ln for ln in err.splitlines() if ln.startswith("flower:")]
        self.assertEqual(len(lines), 1, err)
        self.assertIn(f"pid {first.pid}", lines[0])
        self.assertIn("step work", lines[0])
        self.assertNotIn("Traceback", err)
        self.assertEqual(open(log, encoding="utf-8").read().count("\n"), calls_before)  # it paid nothing
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
        # the holder is gone: the lock is free again without any cleanup
        DriverLock(lock_file, "workspace test").acquire().release()


    # Catches (issue 12) the defect where the workspace lock lives in the run dir, so two `go` on one workspace with
    # different -r/--run-dir both run: two agents edit the same files at once. "One flower per
    # workspace" needs the lock keyed on the workspace (e.g. <workspace>/.flower/flower.lock).
    def test_two_gos_with_different_run_dirs_in_one_workspace(self):
        log = os.path.join(self.tmp.name, "calls.jsonl")
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test", FAKE_WORK_BLOCK="1", FAKE_LOG=log)
        first = subprocess.Popen([sys.executable, "-m", "tests.fake_flower", "-r", "runs-a", "write md2html"],
                                 cwd=self.ws, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 stdin=subprocess.DEVNULL)
        self.procs.append(first)
        self.assertTrue(wait_until(lambda: os.path.exists(log) and '"work"' in open(log, encoding="utf-8").read(),
                                   timeout=30))
        try:
            p = self.go(["-r", "runs-b", "--no-goal", "another task"], mode="fake",
                        env=dict(env, FAKE_WORK_BLOCK=""))
            self.assertEqual(p.returncode, 5, p.stderr.decode())
        finally:
            first.send_signal(signal.SIGTERM)
            first.wait(timeout=30)

# --- 2. one driver per step ---


class StepLock(Procs, FakeRuntime, unittest.TestCase):
    def test_same_step_twice_at_once_is_busy(self):
        rt1, rt2 = self.runtime(), self.runtime()
        spec = AgentSpec("work")
        FAKE.turns = [[("block", "b1"), ("text", "one", 100)], [("text", "two", 100)]]

        async def scenario():
            first = asyncio.ensure_future(rt1.run(spec, "first", lineage_key="work"))
            await wait_calls(1, first)
            sid = FAKE.calls[0]["options"].session_id
            with self.assertRaises(Busy) as caught:
                await rt2.run(spec, "second", lineage_key="work")
            self.assertEqual(len(FAKE.calls), 1)  # the second one paid nothing
            self.assertEqual(self.lineage()["steps"]["work"], sid)  # and wrote nothing
            FAKE.events.setdefault("b1", asyncio.Event()).set()
            r1 = await first
            r2 = await rt2.run(spec, "second", lineage_key="work")  # the lock went with the first run
            return caught.exception, r1, r2
        busy, r1, r2 = asyncio.run(scenario())
        self.assertEqual(busy.exit_code, 5)
        self.assertIn("step work", str(busy))
        self.assertIn(f"pid {os.getpid()}", str(busy))
        self.assertTrue(r1.ok and r2.ok)

    def test_different_steps_run_together(self):
        rt1, rt2 = self.runtime(), self.runtime()
        FAKE.turns = [[("block", "b1"), ("text", "one", 100)], [("text", "two", 100)]]

        async def scenario():
            first = asyncio.ensure_future(rt1.run(AgentSpec("a"), "first", lineage_key="a"))
            await wait_calls(1, first)
            r2 = await rt2.run(AgentSpec("b"), "second", lineage_key="b")
            self.assertFalse(first.done())
            FAKE.events.setdefault("b1", asyncio.Event()).set()
            return await first, r2
        r1, r2 = asyncio.run(scenario())
        self.assertTrue(r1.ok and r2.ok)
        self.assertEqual(set(self.lineage()["steps"]), {"a", "b"})

    def test_judges_take_no_step_lock(self):
        rt1, rt2 = self.runtime(), self.runtime()
        FAKE.turns = [[("block", "b1"), ("text", "one", 100)], [("text", "two", 100)]]

        async def scenario():
            first = asyncio.ensure_future(rt1.run(AgentSpec("judge"), "j1"))
            await wait_calls(1, first)
            r2 = await rt2.run(AgentSpec("judge"), "j2")
            FAKE.events.setdefault("b1", asyncio.Event()).set()
            return await first, r2
        r1, r2 = asyncio.run(scenario())
        self.assertTrue(r1.ok and r2.ok)

    def test_another_process_holding_the_step_is_busy(self):
        rt = self.runtime()
        locks = os.path.join(rt.paths.run_dir, "locks")
        os.makedirs(locks, exist_ok=True)
        holder, _ = hold_lock(os.path.join(locks, "step-work.lock"), step="work")
        self.procs.append(holder)
        with self.assertRaises(Busy) as caught:
            asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work"))
        self.assertIn(f"pid {holder.pid}", str(caught.exception))
        self.assertEqual(FAKE.calls, [])
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "lineage.json")))
        holder.kill()
        holder.wait(timeout=10)
        self.assertTrue(asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work")).ok)

    def test_the_step_lock_is_released_after_failure_and_cancellation(self):
        rt = self.runtime()
        FAKE.turns = [[("error", "Invalid API key · Fix external API key", 401, "api_error")]]
        self.assertFalse(asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work")).ok)
        FAKE.turns = [[("block", "never")]]

        async def cancelled():
            task = asyncio.ensure_future(rt.run(AgentSpec("work"), "x", lineage_key="work"))
            await wait_calls(2, task)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        asyncio.run(cancelled())
        FAKE.turns = []
        self.assertTrue(asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work")).ok)


# --- 3. the CLI guard: flower's CLI child never outlives flower ---

def _ticks(path):
    """The words a fake CLI has written so far (none before its file exists)."""
    try:
        with open(path) as fh:
            return fh.read().split()
    except FileNotFoundError:
        return []


FAKE_CLI = """#!/bin/sh
# a fake CLI: it and a child of its own append ticks until killed
( while :; do echo c >> "$TICKS"; sleep 0.02; done ) &
trap 'echo term >> "$TICKS"; kill $! 2>/dev/null; exit 7' TERM HUP
while :; do echo p >> "$TICKS"; sleep 0.02; done
"""
DEAF_CLI = """#!/bin/sh
# a fake CLI that ignores SIGTERM (and SIGHUP) and ticks on
trap '' TERM HUP
while :; do echo p >> "$TICKS"; sleep 0.02; done
"""
ECHO_CLI = """#!/bin/sh
read line
echo "echo:$line:$*"
exit 3
"""
FLOWER_STANDIN = """
import os, signal, subprocess, sys, time
sys.path.insert(0, {root!r})
import flower
run_dir, cli, sid, when = sys.argv[1:5]
flower.CLI_ORPHAN_GRACE = float(os.environ.get("GRACE", getattr(flower, "CLI_ORPHAN_GRACE", 0.25)))
path, env = flower.cli_guard(run_dir, cli)
# like the SDK: the CLI's stdin and stdout are pipes to flower, its env is flower's plus options.env
p = subprocess.Popen([path, "--session-id", sid, "--input-format", "stream-json"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, env={{**os.environ, **env}})
if when == "before-guard-starts":
    os.kill(os.getpid(), signal.SIGKILL)
print(p.pid, flush=True)
time.sleep(120)
""".format(root=ROOT)


@unittest.skipUnless(LINUX, "the guard tests read /proc (Linux)")
class Guard(Procs, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.run_dir = os.path.join(self.tmp.name, "runs")
        os.makedirs(self.run_dir)
        self.cli = self.script("fake-cli.sh", FAKE_CLI)

    def tearDown(self):
        super().tearDown()
        self.tmp.cleanup()

    def script(self, name, body):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as fh:
            fh.write(body)
        os.chmod(path, 0o755)
        return path

    def records(self):
        live = os.path.join(self.run_dir, "live")
        return sorted(os.listdir(live)) if os.path.isdir(live) else []

    def ticks(self, path):
        try:
            return os.path.getsize(path)
        except OSError:
            return 0

    def main_loop_ticks(self, path):
        """The fake CLI's own loop has run (its signal trap is installed before that loop)."""
        try:
            with open(path) as fh:
                return "p" in fh.read().split()
        except OSError:
            return False

    def start_standin(self, sid, ticks, when="later", **extra):
        env = dict(os.environ, TICKS=ticks, **extra)
        proc = subprocess.Popen([sys.executable, "-c", FLOWER_STANDIN, self.run_dir, self.cli, sid, when],
                                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)  # a broken guard's killpg(0) must not hit the tests
        self.procs.append(proc)
        return proc

    def assert_all_gone(self, sid, ticks):
        """Nothing with ``sid`` in its command line is left, the tick file has stopped, no record remains."""
        left = wait_until(lambda: not pids_with(sid), timeout=10)
        self.assertTrue(left, f"still running after flower died: {pids_with(sid)}")
        size = self.ticks(ticks)
        time.sleep(0.3)
        self.assertEqual(self.ticks(ticks), size, "the CLI (or its child) still writes after flower died")
        self.assertTrue(wait_until(lambda: not self.records(), timeout=5), self.records())

    def test_guard_file_and_env(self):
        path, env = flower.cli_guard(self.run_dir, self.cli)
        self.assertEqual(path, os.path.join(self.run_dir, "cli-guard.py"))
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o700)
        self.assertEqual(env["FLOWER_REAL_CLI"], self.cli)
        self.assertEqual(env["FLOWER_LIVE_DIR"], os.path.join(self.run_dir, "live"))
        self.assertEqual(os.stat(env["FLOWER_LIVE_DIR"]).st_mode & 0o777, 0o700)
        self.assertIsNone(flower.cli_guard(self.run_dir, None))
        self.assertIsNone(flower.cli_guard(self.run_dir, os.path.join(self.tmp.name, "no-such-cli")))

    def test_guard_passes_the_pipes_and_the_exit_code_through(self):
        cli = self.script("echo-cli.sh", ECHO_CLI)
        path, env = flower.cli_guard(self.run_dir, cli)
        guard = subprocess.Popen([path, "--resume=abc", "--input-format", "stream-json"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, env={**os.environ, **env})
        self.procs.append(guard)
        out, _ = guard.communicate(b"hello\n", timeout=20)
        self.assertEqual(out.decode().strip(), "echo:hello:--resume=abc --input-format stream-json")
        self.assertEqual(guard.returncode, 3)
        self.assertEqual(self.records(), [])

    def test_record_names_guard_parent_cli_and_argv(self):
        ticks = os.path.join(self.tmp.name, "ticks")
        path, env = flower.cli_guard(self.run_dir, self.cli)
        sid = self.token()
        guard = subprocess.Popen([path, "--session-id", sid, "--input-format", "stream-json"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, **env, "TICKS": ticks})
        self.procs.append(guard)
        self.groups.append(guard.pid)
        self.assertTrue(wait_until(lambda: record_ready(os.path.join(self.run_dir, "live", f"{guard.pid}.json"))))
        record = read_json(os.path.join(self.run_dir, "live", f"{guard.pid}.json"))
        self.assertEqual(record["pid"], guard.pid)
        self.assertEqual(record["parent"], os.getpid())
        self.assertEqual(record["argv"], ["--session-id", sid, "--input-format", "stream-json"])
        self.assertTrue(alive(record["cli"]))
        self.assertEqual(os.getpgid(record["cli"]), guard.pid)  # the CLI runs in the guard's own group
        self.assertNotEqual(os.getpgid(guard.pid), os.getpgid(0))

    def test_terminate_signals_are_forwarded_and_the_cli_code_returned(self):
        for signum in (signal.SIGTERM, signal.SIGHUP):
            with self.subTest(signal=signum):
                ticks = os.path.join(self.tmp.name, f"ticks-{signum}")
                path, env = flower.cli_guard(self.run_dir, self.cli)
                guard = subprocess.Popen([path, "--session-id", self.token(), "--input-format", "stream-json"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         env={**os.environ, **env, "TICKS": ticks})
                self.procs.append(guard)
                self.groups.append(guard.pid)
                self.assertTrue(wait_until(lambda: record_ready(os.path.join(self.run_dir, "live", f"{guard.pid}.json"))
                                           and self.main_loop_ticks(ticks)))  # its trap is set by then
                guard.send_signal(signum)
                self.assertEqual(guard.wait(timeout=20), 7)  # the fake CLI's own exit code for the signal
                with open(ticks) as fh:
                    self.assertIn("term", fh.read())
                self.assertEqual(self.records(), [])

    def test_kill_of_flower_at_several_points_leaves_nothing_running(self):
        rng = random.Random(12)
        points = [("record", signal.SIGKILL), ("ticks", signal.SIGKILL), ("random", signal.SIGKILL),
                  ("random", signal.SIGKILL), ("random", signal.SIGKILL), ("ticks", signal.SIGTERM),
                  ("ticks", signal.SIGHUP)]
        for n, (point, signum) in enumerate(points):
            with self.subTest(trial=n, point=point, signal=signum):
                sid = self.token()
                ticks = os.path.join(self.tmp.name, f"ticks-{n}")
                standin = self.start_standin(sid, ticks)
                guard = int(standin.stdout.readline())
                self.groups.append(guard)
                self.assertTrue(wait_until(lambda: record_ready(os.path.join(self.run_dir, "live", f"{guard}.json"))))
                if point == "ticks":
                    self.assertTrue(wait_until(lambda: self.ticks(ticks) > 8))
                elif point == "random":
                    time.sleep(rng.uniform(0, 0.4))
                standin.send_signal(signum)
                standin.wait(timeout=10)
                self.assert_all_gone(sid, ticks)

    def told_to_stop(self, ticks):
        with open(ticks) as fh:
            return "term" in fh.read().split()

    # issue 17: the guard SIGKILLed the CLI at once, and the turns it still held in memory (the CLI
    # writes its transcript about 0.1 s behind) were lost with it. SIGTERM first lets it write them.
    def test_a_killed_flowers_cli_is_told_to_stop_before_its_group_is_killed(self):
        for n in range(3):
            with self.subTest(trial=n):
                sid, ticks = self.token(), os.path.join(self.tmp.name, f"ticks-told-{n}")
                standin = self.start_standin(sid, ticks)
                guard = int(standin.stdout.readline())
                self.groups.append(guard)
                self.assertTrue(wait_until(lambda: self.main_loop_ticks(ticks)))
                standin.send_signal(signal.SIGKILL)
                standin.wait(timeout=10)
                self.assert_all_gone(sid, ticks)
                self.assertTrue(self.told_to_stop(ticks), "the CLI was killed without a chance to write")

    def running_guard(self, name):
        """A guard (child of this test) whose fake CLI ticks in its main loop, its record written."""
        sid, ticks = self.token(), os.path.join(self.tmp.name, name)
        path, env = flower.cli_guard(self.run_dir, self.cli)
        guard = subprocess.Popen([path, "--session-id", sid, "--input-format", "stream-json"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env={**os.environ, **env, "TICKS": ticks})
        self.procs.append(guard)
        self.groups.append(guard.pid)
        self.assertTrue(wait_until(lambda: record_ready(os.path.join(self.run_dir, "live", f"{guard.pid}.json"))
                                   and self.main_loop_ticks(ticks)))
        return guard, sid, ticks

    def test_a_killed_guard_tells_its_cli_to_stop(self):
        guard, sid, ticks = self.running_guard("ticks-guard-killed")
        guard.send_signal(signal.SIGKILL)
        guard.wait(timeout=10)
        self.assertTrue(wait_until(lambda: not pids_with(sid)), pids_with(sid))
        self.assertTrue(self.told_to_stop(ticks))

    def test_a_cli_deaf_to_sigterm_is_killed_after_the_grace(self):
        sid, ticks = self.token(), os.path.join(self.tmp.name, "ticks-deaf")
        cli = self.script("deaf-cli.sh", DEAF_CLI)
        proc = subprocess.Popen([sys.executable, "-c", FLOWER_STANDIN, self.run_dir, cli, sid, "later"],
                                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=dict(os.environ, TICKS=ticks, GRACE="1.5"))
        self.procs.append(proc)
        guard = int(proc.stdout.readline())
        self.groups.append(guard)
        self.assertTrue(wait_until(lambda: self.ticks(ticks) > 8))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        self.assert_all_gone(sid, ticks)

    def test_stop_own_clis_lets_the_cli_write_then_kills_the_group(self):
        guard, sid, ticks = self.running_guard("ticks-own")
        self.assertEqual(flower.stop_own_clis(self.run_dir), [guard.pid])
        self.assertIn(guard.wait(timeout=10), (-signal.SIGKILL, 7))
        self.assertTrue(self.told_to_stop(ticks))
        self.assertTrue(wait_until(lambda: not pids_with(sid)), pids_with(sid))
        self.assertEqual(self.records(), [])

    def test_stop_own_clis_finds_a_guard_whose_record_was_never_written(self):
        # a full run dir: the guard runs, its live record is not there; SIGTERM must still stop the CLI
        guard, sid, ticks = self.running_guard("ticks-unrecorded")
        os.unlink(os.path.join(self.run_dir, "live", f"{guard.pid}.json"))
        self.assertEqual(flower.stop_own_clis(self.run_dir), [guard.pid])
        self.assertTrue(self.told_to_stop(ticks))
        self.assertTrue(wait_until(lambda: not pids_with(sid)), pids_with(sid))

    # Catches (issue 12) the defect where the guard reads its parent with os.getppid() when it starts. When flower dies
    # between spawning the guard and the guard's first line (Python start-up, ~20-50 ms), the guard
    # is already re-parented and records init (or a subreaper) as its "parent", never sees a change,
    # and the CLI runs on forever: an orphan, exactly what the guard is for.
    def test_kill_of_flower_before_the_guard_starts_leaves_nothing_running(self):
        sid = self.token()
        ticks = os.path.join(self.tmp.name, "ticks-early")
        standin = self.start_standin(sid, ticks, when="before-guard-starts")
        standin.wait(timeout=10)
        try:
            self.assert_all_gone(sid, ticks)
        finally:
            for pid in pids_with(sid):  # whatever survived belongs to this test
                with contextlib.suppress(OSError):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)

    # Catches (issue 12) the defect where the guard writes its live record with open()+json.dump, not atomically. A reaper
    # running at that moment (every new Runtime and every _write_ahead reaps) reads an empty or half
    # file, takes it for garbage and deletes it: that live guard is then invisible to every later
    # reaper. (This made an earlier version of the Reaper tests flaky.) Write a temp file + os.replace.
    def test_the_live_record_is_never_seen_half_written(self):
        cli = self.script("sleepy-cli.sh", "#!/bin/sh\nexec sleep 30\n")
        path, env = flower.cli_guard(self.run_dir, cli)
        half = 0
        for n in range(30):
            guard = subprocess.Popen([path, "--session-id", self.token(), "--input-format", "stream-json"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, **env})
            self.procs.append(guard)
            self.groups.append(guard.pid)
            record = os.path.join(self.run_dir, "live", f"{guard.pid}.json")
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # read as fast as a reaper could
                try:
                    with open(record, "rb") as fh:
                        raw = fh.read()
                except FileNotFoundError:
                    continue
                try:
                    json.loads(raw)
                    break
                except ValueError:
                    half += 1
                    break
            os.killpg(guard.pid, signal.SIGKILL)
            guard.wait(timeout=10)
        self.assertEqual(half, 0, f"a half-written record was visible for {half} of 30 guards")

    def test_build_options_points_cli_path_at_the_guard(self):
        fakesdk.install()
        try:
            rt = Runtime(workspace=self.tmp.name, run_dir=self.run_dir, resilience=Resilience(probe=False))
            try:
                sdk = rt._sdk()
                with mock.patch.object(flower, "find_cli", return_value=self.cli):
                    options = rt.build_options(sdk, AgentSpec("work"), session_id="s1", resume=None, fork=False,
                                               manage_context=True)
                self.assertEqual(options.cli_path, os.path.join(self.run_dir, "cli-guard.py"))
                self.assertEqual(options.env["FLOWER_REAL_CLI"], self.cli)
                self.assertEqual(options.env["FLOWER_LIVE_DIR"], os.path.join(self.run_dir, "live"))
                self.assertEqual(options.env["DISABLE_AUTO_COMPACT"], "1")  # flower's own env is kept
                with mock.patch.object(flower, "find_cli", return_value=None):
                    options = rt.build_options(sdk, AgentSpec("work"), session_id="s1", resume=None, fork=False,
                                               manage_context=True)
                self.assertIsNone(options.cli_path)
                self.assertNotIn("FLOWER_REAL_CLI", options.env)
            finally:
                rt.close()
        finally:
            fakesdk.uninstall()

    def test_find_cli_prefers_the_bundled_one(self):
        pkg = os.path.join(self.tmp.name, "sdkpkg")
        write_bytes(os.path.join(pkg, "_bundled", "claude"), b"#!/bin/sh\n")
        sdk = mock.Mock(__file__=os.path.join(pkg, "__init__.py"))
        self.assertEqual(flower.find_cli(sdk), os.path.join(pkg, "_bundled", "claude"))


# --- 4. the reaper: stops a dead flower's guard, never a reused pid ---

@unittest.skipUnless(LINUX, "the reaper tests read /proc (Linux)")
class Reaper(Procs, FakeRuntime, unittest.TestCase):
    def setUp(self):
        super().setUp()
        os.makedirs(self.run_dir, exist_ok=True)
        self.live = os.path.join(self.run_dir, "live")
        self.cli = os.path.join(self.tmp.name, "fake-cli.sh")
        with open(self.cli, "w") as fh:
            fh.write(FAKE_CLI)
        os.chmod(self.cli, 0o755)

    def guard(self, sid, run_dir=None):
        """A real guard driving the fake CLI for ``sid``, child of this test process."""
        run_dir = run_dir or self.run_dir
        path, env = flower.cli_guard(run_dir, self.cli)
        ticks = os.path.join(self.tmp.name, f"ticks-{sid}")
        proc = subprocess.Popen([path, "--session-id", sid, "--input-format", "stream-json"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env={**os.environ, **env, "TICKS": ticks})
        self.procs.append(proc)
        self.groups.append(proc.pid)
        record = os.path.join(run_dir, "live", f"{proc.pid}.json")
        self.assertTrue(wait_until(lambda: record_ready(record)))
        self.assertTrue(wait_until(lambda: len(pids_with(sid)) >= 2))  # guard + CLI are up
        # and the CLI has set its trap (it ticks "p" only after): a SIGTERM before that would end the
        # shell without a word, which is no failure of flower's (seen once in CI)
        self.assertTrue(wait_until(lambda: "p" in _ticks(ticks)))
        return proc, record

    def assertStopped(self, proc, sid):  # noqa: N802
        """The guard is gone (killed with its group, or exited with the CLI's code for SIGTERM) and its
        CLI was told to stop with SIGTERM first, so that it could write its transcript."""
        self.assertIn(proc.wait(timeout=10), (-signal.SIGKILL, 7))
        with open(os.path.join(self.tmp.name, f"ticks-{sid}")) as fh:
            self.assertIn("term", fh.read().split(), "the CLI was killed without a chance to write")

    def rewrite(self, record, **changes):
        data = read_json(record)
        data.update(changes)
        with open(record, "w") as fh:
            json.dump(data, fh)

    def test_a_guard_whose_flower_is_dead_is_stopped(self):
        sid = self.token()
        proc, record = self.guard(sid)
        self.rewrite(record, parent=dead_pid())  # as if its flower had died and the guard missed it
        self.assertEqual(flower.reap_orphans(self.run_dir), [proc.pid])
        self.assertStopped(proc, sid)
        self.assertTrue(wait_until(lambda: not pids_with(sid)), pids_with(sid))  # the whole group
        self.assertFalse(os.path.exists(record))

    def test_a_guard_recorded_under_init_is_stopped(self):
        sid = self.token()
        proc, record = self.guard(sid)
        self.rewrite(record, parent=1)
        self.assertEqual(flower.reap_orphans(self.run_dir), [proc.pid])
        self.assertStopped(proc, sid)

    def test_a_live_flowers_guard_is_left_alone_and_our_own_leftover_is_stopped(self):
        sid = self.token()
        proc, record = self.guard(sid)  # its flower (this test process) is alive
        self.assertEqual(flower.reap_orphans(self.run_dir, ["some-other-session"]), [])
        self.assertEqual(flower.reap_orphans(self.run_dir), [])
        self.assertIsNone(proc.poll())
        self.assertTrue(os.path.exists(record))
        # about to drive the same session again (a retry in the same process): the leftover goes first
        self.assertEqual(flower.reap_orphans(self.run_dir, [sid]), [proc.pid])
        self.assertStopped(proc, sid)

    def test_a_reused_pid_is_never_killed(self):
        sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a group leader, like a guard
        self.procs.append(sleeper)
        os.makedirs(self.live, exist_ok=True)
        record = os.path.join(self.live, f"{sleeper.pid}.json")
        with open(record, "w") as fh:
            json.dump({"pid": sleeper.pid, "parent": dead_pid(), "cli": 0,
                       "argv": ["--session-id", "sid-x", "--input-format", "stream-json"]}, fh)
        self.assertEqual(flower.reap_orphans(self.run_dir, ["sid-x"]), [])
        time.sleep(0.1)
        self.assertIsNone(sleeper.poll())

    # Catches (issue 12) the defect where the "proof" that a recorded pid is still that guard is only "cli-guard.py" plus
    # the record's last two argv items, which are the same for every CLI the SDK starts
    # ("--input-format stream-json"). A stale record whose pid now belongs to ANOTHER flower's guard
    # (another workspace, another session) passes that check and the other flower's CLI is killed.
    def test_a_reused_pid_of_another_guard_is_never_killed(self):
        other_run_dir = os.path.join(self.tmp.name, "other-runs")
        os.makedirs(other_run_dir)
        other, _ = self.guard(self.token("sid-of-another-workspace"), run_dir=other_run_dir)
        os.makedirs(self.live, exist_ok=True)
        with open(os.path.join(self.live, f"{other.pid}.json"), "w") as fh:  # a stale record, pid reused
            json.dump({"pid": other.pid, "parent": dead_pid(), "cli": 0,
                       "argv": ["--resume=sid-of-ours", "--input-format", "stream-json"]}, fh)
        self.assertEqual(flower.reap_orphans(self.run_dir, ["sid-of-ours"]), [])
        time.sleep(0.1)
        self.assertIsNone(other.poll(), "another workspace's live CLI was killed")

    # Catches (issue 12) the defect where _write_ahead -> reap_orphans(run_dir, [sid]) kills the guard of ANOTHER LIVE flower
    # that drives the same session (e.g. `once --resume SID` while `go` drives SID, or two such
    # `once`): the other flower's turn dies under it and both then drive one session in turn, each
    # killing the other's CLI before its next attempt. One driver per session means the second one
    # stops with Busy (exit 5) and leaves the first alone; only a dead flower's CLI (or this
    # process's own leftover) may be stopped.
    def test_a_concurrent_flowers_cli_of_the_same_session_is_not_killed(self):
        rt = self.runtime()
        FAKE.turns = [[("text", "first", 100)]]
        sid = asyncio.run(rt.run(AgentSpec("once"), "x", step_name="once")).session_id
        self.tokens.append(sid)
        standin = subprocess.Popen([sys.executable, "-c", FLOWER_STANDIN, self.run_dir, self.cli, sid, "later"],
                                   stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True,
                                   env=dict(os.environ, TICKS=os.path.join(self.tmp.name, "ticks-standin")))
        self.procs.append(standin)
        guard = int(standin.stdout.readline())
        self.groups.append(guard)
        self.assertTrue(wait_until(lambda: record_ready(os.path.join(self.live, f"{guard}.json"))))
        FAKE.turns = [[("text", "second driver", 100)]]
        with self.assertRaises(Busy):
            asyncio.run(rt.run(AgentSpec("once"), "go on", step_name="once", resume=sid))
        time.sleep(0.1)
        self.assertTrue(alive(guard), "a live flower's CLI was killed by another flower")
        self.assertEqual(len(FAKE.calls), 1)

    def test_dead_and_garbage_records_are_removed(self):
        os.makedirs(self.live, exist_ok=True)
        gone = os.path.join(self.live, "123.json")
        with open(gone, "w") as fh:
            json.dump({"pid": dead_pid(), "parent": dead_pid(), "argv": []}, fh)
        junk = os.path.join(self.live, "junk.json")
        with open(junk, "w") as fh:
            fh.write("{not json")
        nopid = os.path.join(self.live, "nopid.json")
        with open(nopid, "w") as fh:
            json.dump({"pid": "12"}, fh)
        self.assertEqual(flower.reap_orphans(self.run_dir, ["x"]), [])
        self.assertEqual(os.listdir(self.live), [])
        self.assertEqual(flower.reap_orphans(os.path.join(self.tmp.name, "nowhere")), [])

    def test_a_new_runtime_reaps_orphans_and_a_resume_stops_the_sessions_cli_first(self):
        orphan_sid = self.token()
        orphan, orphan_record = self.guard(orphan_sid)
        self.rewrite(orphan_record, parent=dead_pid())
        rt = self.runtime()
        self.assertStopped(orphan, orphan_sid)
        # a stored session whose CLI (left by a flower that is still alive) is still running
        FAKE.turns = [[("text", "first", 100)]]
        first = asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work"))
        sid = first.session_id
        self.tokens.append(sid)
        still, record = self.guard(sid)
        seen = {}

        def turn(prompt, options, loaded):
            seen["record"] = os.path.exists(record)
            # the old CLI and everything in its group; its guard drops its record only once they are
            # gone, and may still be finishing its own exit then (seen once in CI under load)
            seen["alive"] = any(alive(p) for p in pids_with(sid) if p != still.pid) or \
                not wait_until(lambda: not alive(still.pid))
            return [("text", "resumed", 100)]
        FAKE.turns = [turn]
        second = asyncio.run(rt.run(AgentSpec("work"), "go on", resume=sid, lineage_key="work"))
        self.assertTrue(second.ok)
        self.assertEqual(seen, {"record": False, "alive": False})  # stopped before the new CLI started
        self.assertStopped(still, sid)


# --- 5. write-ahead that can redo ---

class WriteAhead(FakeRuntime, unittest.TestCase):
    def forget(self, rt, sid):
        """The session never reached the store (the kill came before the first entry was mirrored)."""
        asyncio.run(rt.raw_store.delete({"project_key": rt.project_key, "session_id": sid}))

    def killed_run(self, rt, spec, prompt, turns, calls, **kw):
        """Run until the fake SDK has seen ``calls`` queries, then stop dead (a kill, as seen on disk)."""
        FAKE.turns = turns

        async def scenario():
            task = asyncio.ensure_future(rt.run(spec, prompt, **kw))
            await wait_calls(calls, task)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        asyncio.run(scenario())

    def test_the_start_record_is_on_disk_before_the_cli_starts(self):
        rt = self.runtime()
        seen = []

        def turn(prompt, options, loaded):
            seen.append((read_json(os.path.join(self.run_dir, "lineage.json")), options.session_id, prompt))
            return [("text", "ok", 100)]
        FAKE.turns = [turn]
        asyncio.run(rt.run(AgentSpec("work"), "Task: write md2html", lineage_key="work"))
        on_disk, sid, prompt = seen[0]
        self.assertEqual(on_disk["steps"]["work"], sid)
        self.assertEqual(on_disk["starts"]["work"]["session_id"], sid)
        self.assertEqual(on_disk["starts"]["work"]["prompt"], "Task: write md2html")
        self.assertTrue(on_disk["starts"]["work"]["at"])

    def test_start_record_is_redacted(self):
        rt = self.runtime()
        asyncio.run(rt.run(AgentSpec("work"), "deploy with sk-ant-api03-SECRETSECRETSECRET99", lineage_key="work"))
        raw = open(os.path.join(self.run_dir, "lineage.json"), encoding="utf-8").read()
        self.assertNotIn("SECRETSECRETSECRET99", raw)
        self.assertIn("[REDACTED]", raw)

    def test_a_step_whose_session_never_reached_the_store_restarts_with_the_same_input(self):
        rt1 = self.runtime()
        self.killed_run(rt1, AgentSpec("work"), "Task: the original input", [[("block", "never")]], 1,
                        lineage_key="work")
        lost = FAKE.calls[0]["options"].session_id
        self.forget(rt1, lost)
        FAKE.calls.clear()
        rt2 = self.runtime()
        flow = Workflow([Step("work", AgentSpec("work"), "Task: ")])  # what the re-run would say now
        asyncio.run(flow.run(rt2))
        first = FAKE.calls[0]
        self.assertEqual(first["prompt"], "Task: the original input")
        self.assertIsNone(first["options"].resume)
        self.assertNotEqual(first["options"].session_id, lost)
        self.assertTrue(any("never reached the store" in m and "starting them again with the same input" in m
                            for m in self.infos()), self.infos())
        record = self.lineage()["starts"]["work"]
        self.assertEqual((record["session_id"], record["prompt"]), (first["options"].session_id, "Task: the original input"))

    def test_clarify_killed_before_its_prompt_was_stored_is_redone_with_the_task(self):
        rt1 = self.runtime()
        FAKE.turns = [[("block", "never")]]

        async def first_run():
            flow = flower.starter_flow("write md2html", rt=rt1)
            task = asyncio.ensure_future(flow.run(rt1))
            await wait_calls(1, task)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        asyncio.run(first_run())
        self.forget(rt1, FAKE.calls[0]["options"].session_id)
        FAKE.calls.clear()
        from tests.fake_flower import brain
        FAKE.turns = [brain] * 10
        rt2 = self.runtime()
        asyncio.run(flower.starter_flow(None, rt=rt2).run(rt2))  # an empty wake: no task given this time
        self.assertIn("Task: write md2html", FAKE.calls[0]["prompt"])
        self.assertNotIn("Task: \n", FAKE.calls[0]["prompt"])

    def handed_over_then_killed(self, rt):
        """A work step hands over; the successor is killed before anything of it was stored."""
        turns = [[("text", "step 1", 151_000)], [("text", LEDGER_EN, 151_000)], [("block", "never")]]
        rt.handoff = flower.HandoffPolicy(window=200_000)
        self.killed_run(rt, AgentSpec("work"), "BARE WORK PROMPT", turns, 3, lineage_key="work")
        successor = FAKE.calls[2]
        self.forget(rt, successor["options"].session_id)
        return successor

    def test_a_successor_killed_before_it_was_stored_is_redone_with_the_carry(self):
        rt1 = self.runtime()
        successor = self.handed_over_then_killed(rt1)
        carry = successor["prompt"]
        self.assertIn(flower.text("carry_head")[:30], carry)
        self.assertEqual(self.lineage()["starts"]["work"]["prompt"], carry)
        FAKE.calls.clear()
        rt2 = self.runtime(handoff=flower.HandoffPolicy(window=200_000))
        asyncio.run(Workflow([Step("work", AgentSpec("work"), "BARE WORK PROMPT")]).run(rt2))
        redo = FAKE.calls[0]["prompt"]
        self.assertEqual(redo, carry)
        self.assertNotEqual(redo, "BARE WORK PROMPT")
        self.assertIn(rt2.paths.handoff("work"), redo)  # the pointer to the handoff document
        self.assertIsNone(FAKE.calls[0]["options"].resume)

    def test_a_retry_of_an_unstored_successor_reuses_the_carry(self):
        rt = self.runtime(handoff=flower.HandoffPolicy(window=200_000))

        def refused(prompt, options, loaded):  # fails before anything of the session is mirrored
            raise fakesdk.ProcessError("Connection refused (ECONNREFUSED)")
        FAKE.turns = [[("text", "step 1", 151_000)], [("text", LEDGER_EN, 151_000)], refused,
                      [("text", "done", 1000)]]
        result = asyncio.run(rt.run(AgentSpec("work"), "BARE WORK PROMPT", lineage_key="work"))
        self.assertTrue(result.ok, result.error)
        carry, retry = FAKE.calls[2], FAKE.calls[3]
        self.assertIsNone(retry["options"].resume)
        self.assertNotEqual(retry["options"].session_id, carry["options"].session_id)
        self.assertEqual(retry["prompt"], carry["prompt"])
        self.assertNotEqual(retry["prompt"], "BARE WORK PROMPT")
        self.assertEqual(self.lineage()["starts"]["work"]["prompt"], carry["prompt"])

    def test_a_resume_keeps_the_start_record(self):
        rt = self.runtime()
        FAKE.turns = [[("text", "part", 100), ("error", "API Error: 529 Overloaded", 529, "api_error")],
                      [("text", "done", 100)]]
        result = asyncio.run(rt.run(AgentSpec("work"), "Task: keep me", lineage_key="work"))
        self.assertTrue(result.ok and result.resumed)
        self.assertEqual(FAKE.calls[1]["prompt"], flower.text("resume_prompt"))
        self.assertEqual(self.lineage()["starts"]["work"]["prompt"], "Task: keep me")

    def test_a_session_that_is_stored_is_resumed_not_redone(self):
        rt1 = self.runtime()
        asyncio.run(Workflow([Step("work", AgentSpec("work"), "Task: first")]).run(rt1))
        sid = FAKE.calls[0]["options"].session_id
        FAKE.calls.clear()
        rt2 = self.runtime()
        asyncio.run(Workflow([Step("work", AgentSpec("work"), "Task: first", resume_prompt="carry on")]).run(rt2))
        self.assertEqual(FAKE.calls[0]["options"].resume, sid)
        self.assertEqual(FAKE.calls[0]["prompt"], "carry on")
        self.assertFalse(any("never reached the store" in m for m in self.infos()))


# --- 6. fail-soft continuity ---

def failing_writes(match):
    """Patch flower.atomic_write so that writes to paths matching ``match`` fail like a full disk,
    with the temp file's name in the error (the warning must name the real file)."""
    real, real_append = flower.atomic_write, flower.append_lines
    failed = []

    def atomic_write(path, data, mode=0o600):
        if match(path):
            failed.append(path)
            tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.abcd.tmp")
            raise OSError(errno.ENOSPC, "No space left on device", tmp)
        return real(path, data, mode)

    def append_lines(path, data, mode=0o600):   # the manifest appends its lines
        if match(path):
            failed.append(path)
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real_append(path, data, mode)
    patch = mock.patch.multiple(flower, atomic_write=atomic_write, append_lines=append_lines)
    return patch, failed


class FailSoft(FakeRuntime, unittest.TestCase):
    def handoff_run(self, rt):
        FAKE.turns = [[("text", "step 1", 151_000)], [("text", LEDGER_EN, 151_000)], [("text", "done", 1000)]]
        return asyncio.run(Workflow([Step("work", AgentSpec("work"), "do it")]).run(rt))

    def test_each_state_write_failing_warns_once_and_the_work_goes_on(self):
        targets = {
            "lineage.json": lambda rt, p: p == os.path.join(rt.paths.run_dir, "lineage.json"),
            "manifest.jsonl": lambda rt, p: p == os.path.join(rt.paths.run_dir, "manifest.jsonl"),
            "window.json": lambda rt, p: p == os.path.join(rt.paths.run_dir, "window.json"),
            "handoff document": lambda rt, p: p == rt.paths.handoff("work"),
            "retired transcript": lambda rt, p: os.path.dirname(p) == os.path.join(rt.paths.run_dir, "transcripts"),
        }
        for name, match in targets.items():
            with self.subTest(target=name):
                self.tmp.cleanup()
                os.makedirs(self.ws)
                self.events.clear()
                self.lines.clear()
                FAKE.reset()
                rt = self.runtime(handoff=flower.HandoffPolicy(window=200_000))
                patch, failed = failing_writes(lambda p: match(rt, p))
                with patch:
                    ctx = self.handoff_run(rt)
                self.assertTrue(failed, f"{name} was never written: the injection missed")
                self.assertTrue(ctx["_results"]["work"].ok)
                self.assertEqual(ctx["work"], "done")
                real = failed[0]
                warnings = [m for m in self.infos() if "could not write" in m]
                self.assertEqual(len(warnings), 1, warnings)
                self.assertIn(real, warnings[0])
                self.assertNotIn(".tmp", warnings[0])
                self.assertIn("No space left on device", warnings[0])
                self.assertEqual(rt.degraded, warnings)
                # only the carry is essential: the successor got it even without the document
                self.assertIn(flower.text("carry_head")[:30], FAKE.calls[2]["prompt"])
                if name in ("handoff document", "retired transcript"):   # and no pointer to a missing file
                    self.assertNotIn(real, FAKE.calls[2]["prompt"])

    def test_mirror_errors_are_reported_once_and_count_as_degraded(self):
        rt = self.runtime()
        FAKE.turns = [[("system", "mirror_error", {"error": "disk I/O error"}), ("text", "a", 100),
                       ("system", "mirror_error", {"error": "disk I/O error"})]]
        result = asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work"))
        self.assertTrue(result.ok)
        lines = [m for m in self.infos() if "could not save" in m]
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(len(rt.degraded), 1)

    def test_a_failing_lineage_never_stops_a_run(self):
        rt = self.runtime()
        patch, failed = failing_writes(lambda p: p.endswith("lineage.json"))
        with patch:
            result = asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work"))
        self.assertTrue(result.ok)
        self.assertTrue(failed)
        self.assertEqual(len(rt.degraded), 1)

    # Catches (issue 12) the defect where an unreadable lineage.json (a directory here; EACCES or EIO in the wild) raises
    # FlowerError out of Runtime.run: Runtime.lineage opens it outside any fail-soft guard (and
    # _write_ahead evaluates ``self.lineage.path`` before calling soft). Continuity must never block work.
    def test_an_unreadable_lineage_never_stops_a_run(self):
        os.makedirs(os.path.join(self.run_dir, "lineage.json"))
        rt = self.runtime()
        result = asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work"))
        self.assertTrue(result.ok)
        self.assertTrue(rt.degraded)


class InProcessCli(FakeRuntime):
    """flower.main() in this process with the fake SDK answering by role (like tests/fake_flower.py)."""

    def main(self, args, stdin=""):
        from tests.fake_flower import brain
        FAKE.turns = [brain] * 200
        out, err = io.StringIO(), io.StringIO()
        env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{closed_port()}",
               "FLOWER_PROBE_TIMEOUT": "1", "NO_COLOR": "1", "FLOWER_NO_PROBE": "1",
               # a full disk is retried with backoff before going on fail-soft: not what these tests time
               "FLOWER_BASE_DELAY": "0.01", "FLOWER_MAX_DELAY": "0.05"}
        with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                mock.patch.object(sys, "stdin", io.StringIO(stdin)):
            code = flower.main(list(args) + ["-w", self.ws, "-r", self.run_dir])
        return code, out.getvalue(), err.getvalue()


class FailSoftCli(InProcessCli, unittest.TestCase):
    def test_closing_line_and_summary_say_continuity_was_degraded(self):
        patch, failed = failing_writes(lambda p: p.endswith("lineage.json"))
        with patch:
            code, out, err = self.main(["--json", "write md2html"])
        self.assertEqual(code, 0, err)
        self.assertTrue(failed)
        closing = err.strip().splitlines()[-1]
        self.assertIn("continuity degraded: 1 problem(s)", closing)
        self.assertEqual(err.count("could not write"), 1, err)
        events = [json.loads(line) for line in out.splitlines()]
        summary = [e for e in events if e["kind"] == "summary"]
        self.assertEqual(len(summary), 1)
        self.assertIs(events[-1], summary[0])
        data = summary[0]["data"]
        self.assertEqual((data["exit_code"], data["reason"]), (0, "done"))
        self.assertEqual(len(data["degraded"]), 1)
        self.assertIn(os.path.join(os.path.realpath(self.run_dir), "lineage.json"), data["degraded"][0])
        self.assertEqual(data["steps"], ["clarify", "goal", "work", "work·judge#1"])
        self.assertEqual(len(data["sessions"]), 4)
        self.assertGreater(data["cost_usd"], 0)
        self.assertTrue(data["manifest"].endswith("manifest.jsonl"))

    def test_a_clean_run_has_an_empty_degraded_list(self):
        code, out, err = self.main(["--json", "write md2html"])
        self.assertEqual(code, 0, err)
        self.assertNotIn("degraded", err)
        summary = [json.loads(line) for line in out.splitlines() if '"summary"' in line]
        self.assertEqual(summary[-1]["data"]["degraded"], [])

    # (failed on 02ff776, where once had no summary and a silent closing line; fixed on main by 44c2d9c)
    def test_once_says_continuity_was_degraded(self):
        patch, failed = failing_writes(lambda p: p.endswith("manifest.jsonl"))
        with patch:
            code, out, err = self.main(["once", "--json", "hello"])
        self.assertEqual(code, 0, err)
        self.assertTrue(failed)
        self.assertIn("continuity degraded", err.strip().splitlines()[-1])
        summary = [json.loads(line) for line in out.splitlines() if '"summary"' in line]
        self.assertEqual(len(summary), 1, out)
        self.assertEqual(len(summary[0]["data"]["degraded"]), 1)


# --- 7. wrong-shaped state files ---

LINEAGE_SHAPES = {
    "steps is a list": {"steps": ["work"]},
    "woke is a string": {"woke": "3"},
    "woke is a bool": {"woke": True},
    "a step id is an int": {"steps": {"work": 5}},
    "starts is a list": {"starts": []},
    "a start lacks its prompt": {"starts": {"work": {"session_id": "s"}}},
    "a start prompt is a number": {"starts": {"work": {"session_id": "s", "prompt": 3}}},
    "a start is a string": {"starts": {"work": "s"}},
    "workspace is a number": {"workspace": 7},
    "the file is a list": None,
}
MANIFEST_SHAPES = {
    "cost is a word": {"cost_usd": "lots"},
    "ok is a word": {"ok": "yes"},
    "turns is a float": {"num_turns": 1.5},
    "ok is an int": {"ok": 1},
    "cost is a bool": {"cost_usd": True},
    "no step": {"step": None},
}


class Shapes(InProcessCli, unittest.TestCase):
    def lineage_file(self, change):
        base = {"workspace": os.path.realpath(self.ws), "woke": 1, "steps": {"work": "sid-1"},
                "starts": {"work": {"session_id": "sid-1", "prompt": "p", "at": "t"}}}
        value = [base] if change is None else {**base, **change}
        data = json.dumps(value).encode()
        write_bytes(os.path.join(self.run_dir, "lineage.json"), data)
        return data

    def read_only_commands_survive(self):
        for command in (["status"], ["status", "--json"], ["sessions"]):
            code, out, err = self.main(command)
            self.assertEqual(code, 0, err)
            self.assertNotIn("unexpected", err)

    def test_lineage_of_the_wrong_shape(self):
        for name, change in LINEAGE_SHAPES.items():
            with self.subTest(shape=name):
                self.tmp.cleanup()
                os.makedirs(self.ws)
                self.lines.clear()
                self.events.clear()
                flower.SqliteSessionStore(os.path.join(self.run_dir, "sessions.db")).close()
                data = self.lineage_file(change)
                path = os.path.join(self.run_dir, "lineage.json")
                self.read_only_commands_survive()
                self.assertEqual(open(path, "rb").read(), data)  # readers have no side effects
                state = flower.wake_state(self.ws, self.run_dir)
                self.assertEqual((state["steps"], state["woke"]), ({}, 0))
                rt = self.runtime()
                self.assertEqual(rt.lineage.steps, {})
                moved = aside_files(path)
                self.assertEqual(len(moved), 1)
                self.assertEqual(open(moved[0], "rb").read(), data)
                self.assertEqual(len([m for m in self.infos() if "lineage.json" in m]), 1, self.infos())
                self.assertTrue(asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work")).ok)
                self.assertIn("work", self.lineage()["steps"])

    def test_lineage_of_the_wrong_shape_under_go(self):
        for name, change in LINEAGE_SHAPES.items():
            with self.subTest(shape=name):
                self.tmp.cleanup()
                os.makedirs(self.ws)
                data = self.lineage_file(change)
                code, out, err = self.main(["write md2html"])
                self.assertEqual(code, 0, err)
                moved = aside_files(os.path.join(self.run_dir, "lineage.json"))
                self.assertEqual(len(moved), 1)
                self.assertEqual(open(moved[0], "rb").read(), data)
                self.assertEqual(len([ln for ln in err.splitlines() if "lineage.json" in ln]), 1, err)

    def test_manifest_rows_of_the_wrong_shape(self):
        good = {"run": "r0", "step": "clarify", "ok": True, "cost_usd": 0.5, "num_turns": 2,
                "started_at": "2026-01-01T00:00:00+00:00"}
        for name, change in MANIFEST_SHAPES.items():
            with self.subTest(shape=name):
                self.tmp.cleanup()
                os.makedirs(self.ws)
                self.lines.clear()
                bad = {**good, "run": "r1", "step": "work", **change}
                data = json.dumps([good, bad, 7, "text", None]).encode()
                path = os.path.join(self.run_dir, "manifest.json")
                write_bytes(path, data)
                code, out, err = self.main(["status"])
                self.assertEqual(code, 0, err)
                self.assertIn("clarify", out)
                code, out, err = self.main(["status", "--json"])
                self.assertEqual(code, 0, err)
                self.assertEqual([r["step"] for r in json.loads(out)["manifest"]], ["clarify"])
                self.assertEqual(open(path, "rb").read(), data)
                self.assertEqual([r["step"] for r in flower.Manifest.read(self.run_dir)], ["clarify"])
                rt = self.runtime()
                result = asyncio.run(rt.run(AgentSpec("once"), "x", step_name="once"))
                rt.record(result)
                moved = aside_files(path)
                self.assertEqual(len(moved), 1)
                self.assertEqual(open(moved[0], "rb").read(), data)
                self.assertEqual([r["step"] for r in flower.Manifest.read(self.run_dir)], ["clarify", "once"])
                self.assertEqual(len([m for m in self.lines if "manifest.json" in m]), 1, self.lines)
                self.assertEqual(rt.degraded, [])
                # and a whole go over such a file (set aside again, nothing crashes)
                write_bytes(path, data)
                code, out, err = self.main(["write md2html"])
                self.assertEqual(code, 0, err)
                self.assertEqual(len([ln for ln in err.splitlines() if "manifest.json" in ln and "set aside" in ln]), 1, err)

    def test_window_book_of_the_wrong_shape(self):
        key = flower.WindowBook(self.run_dir)._key(None)
        shapes = {
            "an entry is a string": {key: "big"},
            "a window is a string": {key: {"window": "200000", "source": "x"}},
            "another model's entry is a string": {"other|m": "big"},
            "the file is a list": [1, 2],
        }
        for name, value in shapes.items():
            with self.subTest(shape=name):
                self.tmp.cleanup()
                os.makedirs(self.ws)
                self.lines.clear()
                FAKE.reset()
                data = json.dumps(value).encode()
                path = os.path.join(self.run_dir, "window.json")
                write_bytes(path, data)
                rt = self.runtime()
                result = asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work"))
                self.assertTrue(result.ok, result.error)
                self.assertEqual((result.attempts, result.errors), (1, []))
                moved = aside_files(path)
                self.assertEqual(len(moved), 1)
                self.assertEqual(open(moved[0], "rb").read(), data)
                self.assertEqual(read_json(path)[key]["window"], FAKE.context_window)  # learned anew
                self.assertEqual(len([m for m in self.lines if "window.json" in m]), 1, self.lines)
                write_bytes(path, data)
                code, out, err = self.main(["write md2html"])
                self.assertEqual(code, 0, err)
                self.assertNotIn("retry", err)
                self.assertEqual(len([ln for ln in err.splitlines() if "window.json" in ln and "set aside" in ln]), 1, err)

    # Catches (issue 12) the defect where WindowBook.get() (the reader resolve_window uses before the first paid call) takes
    # any int as a learned window: a negative window, 0-or-less, or a JSON ``true`` passes, the
    # handoff threshold becomes <= 0 and every turn hands over until "two degraded handoffs in a row"
    # fails the step, on every run (the writer sets the file aside only after that).
    def test_window_book_with_a_window_that_is_not_positive(self):
        key = flower.WindowBook(self.run_dir)._key(None)
        for name, window in {"negative": -5, "true": True}.items():
            with self.subTest(window=name):
                self.tmp.cleanup()
                os.makedirs(self.ws)
                FAKE.reset()
                write_bytes(os.path.join(self.run_dir, "window.json"),
                            json.dumps({key: {"window": window, "source": "x"}}).encode())
                rt = self.runtime()
                result = asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work"))
                self.assertTrue(result.ok, result.error)
                self.assertEqual(len(FAKE.calls), 1)


# --- 8. notes that are not UTF-8 ---

class Latin1Notes(InProcessCli, unittest.TestCase):
    def test_brief_and_goal_are_set_aside_never_overwritten(self):
        notes = os.path.join(self.ws, ".flower", "notes")
        files = {
            "brief.md": "## Goal\nun café pour René\n## Acceptance\nça marche\n".encode("latin-1"),
            "goal.md": "# Goal\nhéhé\n\n# Checks\n- `ls` shows café.txt\n".encode("latin-1"),
            "handoff-work.md": "# Handoff: work · generation 2\n\n## Status\nfini à moitié\n".encode("latin-1"),
        }
        for name, data in files.items():
            write_bytes(os.path.join(notes, name), data)
        code, out, err = self.main(["write md2html"])
        self.assertEqual(code, 0, err)
        for name, data in files.items():
            with self.subTest(note=name):
                moved = aside_files(os.path.join(notes, name))
                self.assertEqual(len(moved), 1, os.listdir(notes))
                with open(moved[0], "rb") as fh:
                    self.assertEqual(fh.read(), data)
                self.assertEqual(len([ln for ln in err.splitlines() if name + ".corrupt-" in ln]), 1, err)
        with open(os.path.join(notes, "brief.md"), encoding="utf-8") as fh:
            self.assertTrue(flower.Brief.parse(fh.read()).complete)

    def test_a_wake_sentence_with_a_latin1_brief_keeps_the_old_bytes(self):
        code, out, err = self.main(["write md2html"])
        self.assertEqual(code, 0, err)
        brief = os.path.join(self.ws, ".flower", "notes", "brief.md")
        data = "## Goal\nrésumé edited by hand\n".encode("latin-1")
        write_bytes(brief, data)
        code, out, err = self.main(["also support tables"])
        self.assertEqual(code, 0, err)
        moved = aside_files(brief)
        self.assertEqual(len(moved), 1)
        self.assertEqual(open(moved[0], "rb").read(), data)
        self.assertIn("also support tables", open(brief, encoding="utf-8").read())

    def test_check_text_file(self):
        path = os.path.join(self.tmp.name, "note.md")
        self.assertTrue(flower.check_text_file(path))  # missing is fine
        write_bytes(path, "ok ✓".encode())
        self.assertTrue(flower.check_text_file(path))
        write_bytes(path, b"caf\xe9")
        told = []
        self.assertFalse(flower.check_text_file(path, told.append))
        self.assertFalse(os.path.exists(path))
        self.assertEqual(len(told), 1)
        self.assertEqual(open(aside_files(path)[0], "rb").read(), b"caf\xe9")


# --- 9. unreadable rows in sessions.db ---

class StoreRows(FakeRuntime, unittest.TestCase):
    def damaged_store(self, key):
        path = os.path.join(self.run_dir, "sessions.db")
        store = flower.SqliteSessionStore(path)
        store.append_sync(key, [{"type": "user", "uuid": f"u{i}", "n": i} for i in range(6)])
        store.close()
        db = sqlite3.connect(path)
        skey = f"{key['project_key']}/{key['session_id']}"
        seqs = [r[0] for r in db.execute("SELECT seq FROM entries WHERE skey=? ORDER BY seq", (skey,))]
        db.execute("UPDATE entries SET payload=? WHERE seq=?", ("{not json", seqs[1]))
        db.execute("UPDATE entries SET payload=? WHERE seq=?", ("[1, 2]", seqs[3]))
        db.execute("UPDATE entries SET payload=? WHERE seq=?", ("null", seqs[4]))
        db.commit()
        before = db.execute("SELECT seq, payload FROM entries ORDER BY seq").fetchall()
        db.close()
        return path, skey, before

    def test_bad_rows_are_skipped_and_left_as_they_are(self):
        key = {"project_key": "pk", "session_id": "s1"}
        path, skey, before = self.damaged_store(key)
        store = flower.SqliteSessionStore(path)
        entries = store.load_sync(key)
        self.assertEqual([e["n"] for e in entries], [0, 2, 5])
        self.assertEqual(store.skipped[skey], 3)
        self.assertEqual([e["n"] for e in asyncio.run(store.load(key))], [0, 2, 5])
        self.assertTrue(store.has_session("pk", "s1"))
        store.close()
        db = sqlite3.connect(path)
        self.assertEqual(db.execute("SELECT seq, payload FROM entries ORDER BY seq").fetchall(), before)
        db.close()

    def test_a_resume_over_bad_rows_is_not_retried_and_says_so(self):
        rt = self.runtime()
        FAKE.turns = [[("text", "first", 100)]]
        sid = asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work")).session_id
        rt.close()
        self.rts.remove(rt)
        db = sqlite3.connect(os.path.join(self.run_dir, "sessions.db"))
        seq = db.execute("SELECT seq FROM entries WHERE skey LIKE ? ORDER BY seq DESC LIMIT 1", (f"%/{sid}",)).fetchone()[0]
        db.execute("UPDATE entries SET payload='[\"not an object\"]' WHERE seq=?", (seq,))
        db.commit()
        db.close()
        rt = self.runtime()
        FAKE.turns = [[("text", "resumed", 100)]]
        result = asyncio.run(rt.run(AgentSpec("work"), "go on", resume=sid, lineage_key="work"))
        self.assertTrue(result.ok, result.error)
        self.assertEqual(result.attempts, 1)
        self.assertEqual(FAKE.calls[-1]["options"].resume, sid)
        lines = [m for m in self.infos() if "unreadable stored" in m]
        self.assertEqual(len(lines), 1, self.infos())
        self.assertIn(sid, lines[0])


# --- 10. options validated before any paid call; CLI usage errors are fatal ---

class Options(FakeRuntime, unittest.TestCase):
    def test_check_spec_table(self):
        rows = [
            ("unknown permission mode", dict(permission_mode="bogus"), {}, 2, "permission mode"),
            ("negative budget", dict(max_budget_usd=-1.0), {}, 2, "budget"),
            ("zero budget", dict(max_budget_usd=0), {}, 2, "budget"),
            ("NaN budget", dict(max_budget_usd=float("nan")), {}, 2, "budget"),
            ("zero turns", dict(max_turns=0), {}, 2, "turns"),
            ("bypass as root", dict(permission_mode="bypassPermissions"), {"root": True}, 2, "root"),
            ("bypass as root in a sandbox", dict(permission_mode="bypassPermissions"),
             {"root": True, "IS_SANDBOX": "1"}, None, ""),
            ("bypass as root, sandbox in spec env", dict(permission_mode="bypassPermissions", env={"IS_SANDBOX": "1"}),
             {"root": True}, None, ""),
            ("bypass as a user", dict(permission_mode="bypassPermissions"), {"root": False}, None, ""),
            ("defaults", {}, {}, None, ""),
            ("every known mode", dict(permission_mode="plan"), {}, None, ""),
            ("positive limits", dict(max_budget_usd=0.5, max_turns=1), {}, None, ""),
        ]
        for name, fields, world, code, needle in rows:
            with self.subTest(row=name):
                env = {k: v for k, v in os.environ.items() if k != "IS_SANDBOX"}
                if "IS_SANDBOX" in world:
                    env["IS_SANDBOX"] = world["IS_SANDBOX"]
                euid = 0 if world.get("root", False) else 1000
                with mock.patch.dict(os.environ, env, clear=True), mock.patch.object(os, "geteuid", return_value=euid):
                    spec = AgentSpec("x", **fields)
                    if code is None:
                        flower.check_spec(spec)
                        continue
                    with self.assertRaises(flower.FlowerError) as caught:
                        flower.check_spec(spec)
                    self.assertEqual(caught.exception.exit_code, code)
                    self.assertIn(needle, str(caught.exception))
        for mode in flower.PERMISSION_MODES:
            if mode != "bypassPermissions":
                flower.check_spec(AgentSpec("x", permission_mode=mode))

    def test_runtime_refuses_a_bad_spec_before_paying_or_writing(self):
        rt = self.runtime()
        with self.assertRaises(flower.FlowerError) as caught:
            asyncio.run(rt.run(AgentSpec("work", max_budget_usd=-1), "x", lineage_key="work"))
        self.assertEqual(caught.exception.exit_code, 2)
        self.assertEqual(FAKE.calls, [])
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "lineage.json")))
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "locks", "step-work.lock")))

    def test_cli_usage_errors_are_fatal(self):
        fatal = [
            "error: option '--max-budget-usd <amount>' argument '-1' is invalid.",
            "error: option '--max-budget-usd <amount>' argument '-1.0' is invalid. Budget must be positive",
            "error: option '--permission-mode <mode>' argument 'bogus' is invalid. Allowed choices are "
            "acceptEdits, bypassPermissions, default, dontAsk, plan.",
            "error: unknown option '--frobnicate'",
            "ProcessError: Command failed with exit code 1 (exit code: 1)\nError output: error: unknown option '-x'",
        ]
        for message in fatal:
            with self.subTest(message=message):
                self.assertEqual(flower.classify(message), flower.FATAL)
        for message in ("Connection error.", "API Error: 529 Overloaded", "stream idle timeout"):
            with self.subTest(message=message):
                self.assertEqual(flower.classify(message), flower.TRANSIENT)

    def test_a_cli_usage_error_is_not_retried(self):
        rt = self.runtime()
        FAKE.turns = [[("raise", fakesdk.ProcessError(
            "Command failed with exit code 1 (exit code: 1)\nError output: error: option "
            "'--max-budget-usd <amount>' argument '-1' is invalid."))]]
        result = asyncio.run(rt.run(AgentSpec("once"), "x", step_name="once"))
        self.assertFalse(result.ok)
        self.assertEqual((result.attempts, len(FAKE.calls)), (1, 1))
        self.assertEqual([e for e in self.events if e.kind == "retry"], [])


class OptionsCli(unittest.TestCase):
    """Bad options at the command line: exit 2, one line, before the SDK is even needed."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.env = base_env(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def run_cli(self, args):
        return subprocess.run([sys.executable, "-c", NO_SDK] + args, cwd=self.ws, env=self.env,
                              capture_output=True, timeout=60, stdin=subprocess.DEVNULL)

    def test_bad_options_exit_2_and_write_nothing(self):
        rows = [
            (["once", "-b", "-1", "hi"], "budget"),
            (["once", "-b", "0", "hi"], "budget"),
            (["once", "-p", "bogus", "hi"], "permission"),
            (["go", "--permission-mode", "bogus", "x"], "permission"),
            (["--permission-mode", "bogus", "x"], "permission"),
        ]
        for args, needle in rows:
            with self.subTest(args=args):
                p = self.run_cli(args)
                err = p.stderr.decode()
                self.assertEqual(p.returncode, 2, err)
                self.assertNotIn("Traceback", err)
                lines = [ln for ln in err.splitlines() if ln.startswith("flower:")]
                self.assertEqual(len(lines), 1, err)
                self.assertIn(needle, lines[0])
                self.assertEqual(os.listdir(self.ws), [], "something was written before the options were checked")

    # a negative window makes every turn hand over until the step fails, after paying for it
    # (failed on 02ff776; fixed on main by dd6ea16)
    def test_a_window_that_is_not_positive_is_a_usage_error(self):
        p = self.run_cli(["go", "--window", "-5", "x"])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(b"window", p.stderr)


class Documented(unittest.TestCase):
    # "Document the lock and the new exit code in README" (failed on 02ff776; fixed on main by e0c093f)
    def test_exit_code_5_is_documented(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
            readme = fh.read()
        exit_codes = readme[readme.lower().index("| exit code |"):][:1200]
        self.assertRegex(exit_codes, r"\| `5` \| another flower drives this workspace")
        helptext = flower.build_parser().format_help()
        self.assertRegex(helptext[helptext.lower().index("exit codes"):], r"\b5\b")

# --- 11. a wake sentence while the brief is still unfinished ---

class WakeWhileClarifying(FakeRuntime, unittest.TestCase):
    def brain(self, clarify_answer=BRIEF):
        brain = Brain()
        original = brain.__call__

        def answer(prompt, options, loaded):
            actions = original(prompt, options, loaded)
            if brain.roles[-1] == "clarify":
                return [("text", clarify_answer, 1000)]
            return actions
        return brain, answer

    def test_the_sentence_reaches_clarify_and_survives_into_the_brief(self):
        brain, unfinished = self.brain("I still need to think about it")
        FAKE.turns = [unfinished] * 10
        rt1 = self.runtime()
        with self.assertRaises(flower.StepAbort):
            asyncio.run(flower.starter_flow("write md2html", rt=rt1).run(rt1))
        clarify_sid = self.lineage()["steps"]["clarify"]
        self.assertTrue(flower.wake_state(self.ws, self.run_dir)["waking"])  # go would treat it as a wake
        self.assertFalse(flower.wake_state(self.ws, self.run_dir)["brief"])
        FAKE.calls.clear()
        brain, finished = self.brain()
        FAKE.turns = [finished] * 10
        rt2 = self.runtime()
        ctx = asyncio.run(flower.starter_flow(None, rt=rt2, wake_sentence="also support tables").run(rt2))
        first = FAKE.calls[0]
        self.assertEqual(brain.roles[0], "clarify")
        self.assertEqual(first["options"].resume, clarify_sid)
        self.assertIn("also support tables", first["prompt"])
        with open(rt2.paths.brief, encoding="utf-8") as fh:
            brief = fh.read()
        self.assertTrue(flower.Brief.parse(brief).complete)
        self.assertIn("### Added on wake", brief)
        self.assertIn("also support tables", brief)
        self.assertIn("md2html script", brief)
        goal_call = FAKE.calls[brain.roles.index("goal")]
        self.assertIn("also support tables", goal_call["prompt"])
        self.assertTrue(ctx["_results"]["work"].ok)

    def test_the_sentence_also_reaches_a_redone_clarify(self):
        rt1 = self.runtime()
        FAKE.turns = [[("block", "never")]]

        async def killed():
            task = asyncio.ensure_future(flower.starter_flow("write md2html", rt=rt1).run(rt1))
            await wait_calls(1, task)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        asyncio.run(killed())
        asyncio.run(rt1.raw_store.delete({"project_key": rt1.project_key,
                                          "session_id": FAKE.calls[0]["options"].session_id}))
        FAKE.calls.clear()
        brain, finished = self.brain()
        FAKE.turns = [finished] * 10
        rt2 = self.runtime()
        asyncio.run(flower.starter_flow(None, rt=rt2, wake_sentence="also support tables").run(rt2))
        first = FAKE.calls[0]["prompt"]
        self.assertIn("Task: write md2html", first)
        self.assertIn("also support tables", first)
        with open(rt2.paths.brief, encoding="utf-8") as fh:
            self.assertIn("also support tables", fh.read())


if __name__ == "__main__":
    unittest.main()
