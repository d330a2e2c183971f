"""The command line as a subprocess: help, version, status, doctor, bad input, --json, a pty session."""

import contextlib
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
from tests.helpers import DUMMY_SDK, RUN_FLOWER, NO_SDK, base_env, load_json, manifest_rows, read_text



class Cli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.env = base_env(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def run_cli(self, args, *, mode="plain", env=None, stdin=None, timeout=60):
        if mode == "nosdk":
            cmd = [sys.executable, "-c", NO_SDK]
        elif mode == "dummysdk":
            cmd = [sys.executable, "-c", DUMMY_SDK]
        elif mode == "fake":
            cmd = [sys.executable, "-m", "tests.fake_flower"]
        else:
            cmd = RUN_FLOWER
        return subprocess.run(cmd + list(args), cwd=self.ws, env=env or self.env, input=stdin,
                              capture_output=True, timeout=timeout)

    def test_help_and_version_without_sdk(self):
        p = self.run_cli(["--help"], mode="nosdk")
        self.assertEqual(p.returncode, 0)
        self.assertIn(b"once", p.stdout)
        p = self.run_cli(["--version"], mode="nosdk")
        self.assertEqual(p.returncode, 0)
        self.assertRegex(p.stdout.decode(), r"^flower.py \d+\.\d+")
        p = self.run_cli(["go", "--help"], mode="nosdk")
        for flag in (b"--new", b"--rounds", b"--no-trim", b"--no-handoff", b"--window", b"--no-goal",
                     b"--permission-mode", b"--model", b"--lang", b"--json", b"--store"):
            self.assertIn(flag, p.stdout)

    def test_status_without_sdk_and_without_side_effects(self):
        p = self.run_cli(["status"], mode="nosdk")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"nothing to do here yet", p.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.ws, "runs")))

    def test_doctor_without_sdk(self):
        p = self.run_cli(["doctor"], mode="nosdk")
        self.assertEqual(p.returncode, 3)
        out = p.stdout.decode()
        self.assertIn("FAIL claude-agent-sdk not installed", out)
        self.assertIn("FAIL no credentials", out)
        self.assertIn("connection refused", out)   # a closed port: said as such, not just "unreachable"
        self.assertIn("OK   Python", out)

    def test_doctor_masks_credentials(self):
        env = dict(self.env, ANTHROPIC_API_KEY="sk-ant-api03-verysecretvalue-XYZ")
        p = self.run_cli(["doctor"], mode="nosdk", env=env)
        self.assertNotIn(b"verysecretvalue", p.stdout + p.stderr)
        self.assertIn(b"credentials ANTHROPIC_API_KEY", p.stdout)

    def test_bad_input_table(self):
        junk_db = b"definitely not sqlite" * 50
        judged = {"ANTHROPIC_API_KEY": "sk-test", "FAKE_JUDGE": "VERDICT: not_yet"}
        reached = {"corrupt lineage": "lineage.json was unreadable; set aside",   # proof the file was read
                   "corrupt manifest": "manifest.json was unreadable; set aside"}
        rows = [
            # name, setup, args, mode, env-extra, stdin, exit code, text in the error line
            # the corrupt state files get read: the run goes on (its judge fails it, hence exit 1)
            ("corrupt lineage", {".flower/lineage.json": b"{oops"}, ["--rounds", "1", "build x"], "fake", judged, None, 1,
             "work"),
            ("corrupt manifest", {".flower/manifest.json": b"[{not json"}, ["--rounds", "1", "build x"], "fake", judged,
             None, 1, "work"),
            ("non-sqlite sessions.db", {".flower/sessions.db": junk_db}, ["build x"], "nosdk", {}, None, 3,
             "not a usable session store"),
            ("run dir is a file", {".flower": b"a file"}, ["build x"], "nosdk", {}, None, 3, "not a directory"),
            ("read-only run dir", {}, ["-r", "/sys/flower-test-runs", "build x"], "nosdk", {}, None, 3,
             "cannot create directory"),
            ("unknown flag", {}, ["--frobnicate"], "nosdk", {}, None, 2, "unrecognized arguments"),
            ("non-UTF-8 argument", {}, [b"build \xff\xfe"], "nosdk", {}, None, 2, "not valid UTF-8"),
            ("1 MB prompt on stdin", {}, ["-"], "nosdk", {}, b"x" * (1 << 20), 2, "larger than 256 KB"),
            ("missing SDK", {}, ["build x"], "nosdk", {}, None, 3, "claude-agent-sdk is not installed"),
            ("missing credentials", {}, ["build x"], "dummysdk", {}, None, 3, "no credentials"),
            ("no task in a new directory", {}, [], "nosdk", {}, b"", 2, "nothing to do here yet"),
            ("bad store factory", {}, ["--store", "nosuchmodule:make", "build x"], "nosdk", {}, None, 3,
             "ModuleNotFoundError"),
            ("bad rounds", {}, ["--rounds", "many", "x"], "nosdk", {}, None, 2, "must be a whole number"),
            ("show unknown session", {".flower/sessions.db": None}, ["show", "abc"], "nosdk", {}, None, 2, "no stored session starts with"),
        ]
        for name, files, args, mode, extra, stdin, code, needle in rows:
            with self.subTest(name=name):
                ws = tempfile.mkdtemp(dir=self.tmp.name)
                self.ws = ws
                before = {}
                for rel, data in files.items():
                    path = os.path.join(ws, rel)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    if data is None:
                        sqlite3.connect(path).close()
                        continue
                    with open(path, "wb") as fh:
                        fh.write(data)
                    before[path] = data
                p = self.run_cli(args, mode=mode, env=dict(self.env, **extra), stdin=stdin)
                err = p.stderr.decode("utf-8", "replace")
                self.assertEqual(p.returncode, code, err)
                self.assertNotIn("Traceback", err)
                errors = [line for line in err.splitlines() if line.startswith("flower:")]
                self.assertEqual(len(errors), 1, err)
                self.assertIn(needle, errors[0])
                if name in reached:
                    self.assertEqual(err.count(reached[name]), 1, err)
                for path, data in before.items():
                    if os.path.exists(path) and not os.path.isdir(path):
                        with open(path, "rb") as fh:
                            current = fh.read()
                        if current == data:
                            continue
                    aside = [n for n in os.listdir(os.path.dirname(path))
                             if n.startswith(os.path.basename(path) + ".corrupt-")]
                    self.assertEqual(len(aside), 1, f"{path} was changed and not set aside")
                    with open(os.path.join(os.path.dirname(path), aside[0]), "rb") as fh:
                        self.assertEqual(fh.read(), data)

    def test_full_run_json_events_and_status(self):
        p = self.run_cli(["--json", "write md2html"], mode="fake", env=dict(self.env, ANTHROPIC_API_KEY="sk-test"))
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        events = [json.loads(line) for line in p.stdout.decode().splitlines()]
        kinds = {e["kind"] for e in events}
        self.assertTrue({"step", "result", "text"} <= kinds, kinds)
        self.assertEqual([e["data"]["name"] for e in events if e["kind"] == "step"],
                         ["clarify", "goal", "work", "work·judge#1"])   # the judge step has its event too
        self.assertIn(b"done", p.stderr)
        self.assertIn(b"manifest", p.stderr)
        with open(os.path.join(self.ws, ".flower", "notes", "handoff-work.md"), "w", encoding="utf-8") as fh:
            fh.write("# Handoff: work · generation 3\n\n## Status\nx\n")
        p = self.run_cli(["status"], mode="nosdk")
        out = p.stdout.decode()
        self.assertIn("handoff    work: generation 3", out)
        self.assertIn("brief      confirmed", out)
        self.assertIn("goal       1 checks", out)
        self.assertIn("work·judge#1", out)
        p = self.run_cli(["sessions"], mode="nosdk")
        self.assertEqual(len(p.stdout.decode().strip().splitlines()), 4)
        sid = load_json(os.path.join(self.ws, ".flower", "lineage.json"))["steps"]["work"]
        p = self.run_cli(["show", sid[:8]], mode="nosdk")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"[assistant] worked", p.stdout)
        p = self.run_cli(["show", sid, "--raw"], mode="nosdk")
        raw = [json.loads(line) for line in p.stdout.decode().splitlines()]
        self.assertTrue(all(e["sessionId"] == sid for e in raw if "sessionId" in e))
        self.assertTrue(raw[0]["message"]["content"].startswith("The brief"))
        # empty wake, not a TTY: carries on
        p = self.run_cli(["-q"], mode="fake", env=dict(self.env, ANTHROPIC_API_KEY="sk-test"), stdin=b"")
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_moved_workspace_and_unreadable_lineage_are_said_once(self):
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test")
        p = self.run_cli(["write md2html"], mode="fake", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        moved = self.ws + "-moved"
        os.rename(self.ws, moved)
        self.ws = moved
        p = self.run_cli([], mode="fake", env=env, stdin=b"")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr.decode().count("belongs to"), 1, p.stderr.decode())
        with open(os.path.join(moved, ".flower", "lineage.json"), "w") as fh:
            fh.write("{oops")
        p = self.run_cli([], mode="fake", env=env, stdin=b"")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr.decode().count("was unreadable"), 1, p.stderr.decode())

    def fake_log(self, path):
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]

    def test_wake_banner_new_keeps_sessions_db_and_kill_during_clarify(self):
        import flower
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test")
        log = os.path.join(self.tmp.name, "calls.jsonl")
        # killed while clarify waits for its first reply: the next run resumes it with the clarify resume prompt
        proc = subprocess.Popen([sys.executable, "-m", "tests.fake_flower", "write md2html"], cwd=self.ws,
                                env=dict(env, FAKE_CLARIFY_BLOCK="1", FAKE_LOG=log),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline and not (os.path.exists(log) and '"clarify"' in read_text(log)):
            time.sleep(0.05)
        first = self.fake_log(log)[0]
        db = os.path.join(self.ws, ".flower", "sessions.db")
        while time.time() < deadline and not self.stored(db, first["session_id"]):
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=30)
        p = self.run_cli([], mode="fake", env=dict(env, FAKE_LOG=log), stdin=b"")
        self.assertEqual(p.returncode, 0, p.stderr)
        again = self.fake_log(log)[1]
        self.assertEqual((again["role"], again["resume"]), ("clarify", first["session_id"]))
        self.assertEqual(again["prompt"], flower.text("clarify_resume"))
        # the English wake banner, with the work session's context figure
        p = self.run_cli([], mode="fake", env=env, stdin=b"")
        self.assertEqual(p.returncode, 0, p.stderr)
        work = load_json(os.path.join(self.ws, ".flower", "lineage.json"))["steps"]["work"]
        context = flower.SqliteSessionStore(db).last_context(flower.project_key(self.ws), work)
        self.assertTrue(context)
        banner = f"<- resuming in ~/ws  brief confirmed · goal 1 checks · work context {flower._human_tokens(context)}" \
                 " · wake #3"   # HOME is the temp dir
        self.assertIn(banner, p.stderr.decode().splitlines())
        # --new archives the task, never the sessions: sessions.db stays where it is, every entry intact
        before = {sid: self.stored(db, sid) for sid in self.session_ids(db)}
        p = self.run_cli(["--new", "another thing"], mode="fake", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual({sid: self.stored(db, sid) for sid in before}, before)
        self.assertGreater(len(self.session_ids(db)), len(before))
        archived = [n for _, _, names in os.walk(os.path.join(self.ws, ".flower", "notes", "archive")) for n in names]
        self.assertIn("lineage.json", archived)
        self.assertNotIn("sessions.db", archived)

    def stored(self, db, sid):
        if not os.path.exists(db):
            return []
        conn = sqlite3.connect(db)
        try:
            return [r[0] for r in conn.execute("SELECT payload FROM entries WHERE skey LIKE ? ORDER BY seq", (f"%/{sid}",))]
        except sqlite3.Error:
            return []
        finally:
            conn.close()

    def session_ids(self, db):
        import flower
        store = flower.SqliteSessionStore(db)
        try:
            return [s["session_id"] for s in store.sessions()]
        finally:
            store.close()

    def test_once_resume_and_fork_by_id_prefix(self):
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test")
        log = os.path.join(self.tmp.name, "calls.jsonl")
        p = self.run_cli(["once", "hello"], mode="fake", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        sid = p.stderr.decode().split("session ", 1)[1].split()[0]
        p = self.run_cli(["once", "--resume", sid[:8], "again"], mode="fake", env=dict(env, FAKE_LOG=log))
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.run_cli(["once", "--resume", sid[:8], "--fork", "branch"], mode="fake", env=dict(env, FAKE_LOG=log))
        self.assertEqual(p.returncode, 0, p.stderr)
        resumed, forked = self.fake_log(log)
        self.assertEqual((resumed["resume"], resumed["session_id"]), (sid, None))   # the same session goes on
        self.assertEqual(forked["resume"], sid)
        self.assertNotIn(forked["session_id"], (sid, None))                      # a branch under its own id
        rows = manifest_rows(os.path.join(self.ws, ".flower"))
        self.assertEqual(rows[1]["session_id"], sid)
        self.assertEqual(rows[2]["session_id"], forked["session_id"])
        p = self.run_cli(["once", "--resume", "ffffffff", "x"], mode="fake", env=env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(b"no unique stored session", p.stderr)

    def test_sigterm_and_sighup_write_the_manifest(self):
        for signum in (signal.SIGTERM, signal.SIGHUP):
            with self.subTest(signal=signum):
                ws = tempfile.mkdtemp(dir=self.tmp.name)
                log = os.path.join(ws, "calls.jsonl")
                env = dict(self.env, ANTHROPIC_API_KEY="sk-test", FAKE_WORK_BLOCK="1", FAKE_LOG=log)
                proc = subprocess.Popen([sys.executable, "-m", "tests.fake_flower", "write md2html"], cwd=ws, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
                deadline = time.time() + 30
                while time.time() < deadline and not (os.path.exists(log) and '"work"' in read_text(log)):
                    time.sleep(0.05)
                time.sleep(0.3)
                proc.send_signal(signum)
                out, err = proc.communicate(timeout=30)
                self.assertEqual(proc.returncode, 128 + signum, err)
                self.assertNotIn(b"Traceback", err)
                rows = manifest_rows(os.path.join(ws, ".flower"))
                self.assertEqual(rows[-1]["step"], "work")
                self.assertEqual(rows[-1]["error"], "killed-by-signal")
                self.assertEqual(load_json(os.path.join(ws, ".flower", "lineage.json"))["steps"]["work"],
                                 rows[-1]["session_id"])

    def test_custom_store_factory(self):
        custom = os.path.join(self.tmp.name, "elsewhere.db")
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test", FLOWER_TEST_STORE=custom)
        p = self.run_cli(["--store", "tests.store_factory:make", "write md2html"], mode="fake", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".flower", "sessions.db")))
        import flower
        store = flower.SqliteSessionStore(custom)
        self.assertEqual(len(store.sessions()), 4)
        store.close()
        p = self.run_cli(["--store", "tests.store_factory:broken", "x"], mode="fake", env=env)
        self.assertEqual(p.returncode, 3)
        self.assertIn(b"did not return a SessionStore", p.stderr)

    def test_chinese(self):
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test")
        p = self.run_cli(["--lang", "zh", "写个 md 转 html 的脚本"], mode="fake", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        notes = os.path.join(self.ws, ".flower", "notes")
        self.assertTrue(os.path.exists(os.path.join(notes, "需求.md")))
        self.assertTrue(os.path.exists(os.path.join(notes, "目标.md")))
        self.assertIn("完成 · 共", p.stderr.decode())
        steps = [r["step"] for r in manifest_rows(os.path.join(self.ws, ".flower"))]
        self.assertEqual(steps[-1], "work·判定#1")
        p = self.run_cli(["--lang", "zh"], mode="fake", env=env, stdin=b"")
        self.assertIn("需求已确认", p.stderr.decode())
        self.assertIn("第 2 次唤醒", p.stderr.decode())

    def test_failed_judge_exit_code_and_once(self):
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test", FAKE_JUDGE="VERDICT: not_yet")
        p = self.run_cli(["--rounds", "1", "write md2html"], mode="fake", env=env)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(b"flower: work:", p.stderr)
        p = self.run_cli(["once", "hello"], mode="fake", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"session ", p.stderr)
        self.assertEqual(p.stdout.decode().strip(), "worked")   # the answer once, on stdout
        self.assertNotIn(b"worked", p.stderr)
        rows = manifest_rows(os.path.join(self.ws, ".flower"))
        self.assertEqual(rows[-1]["step"], "once")


class GoWiring(unittest.TestCase):
    """What go hands the runtime, checked in-process with the fake SDK (the runtime is a spy)."""

    def test_go_trims_by_default_and_no_trim_turns_it_off(self):
        import io
        from contextlib import redirect_stderr
        from unittest import mock
        import flower
        from tests import fakesdk
        fakesdk.install()
        self.addCleanup(fakesdk.uninstall)
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        seen, real = [], flower.Runtime

        def spy(**kwargs):
            rt = real(**kwargs)
            seen.append((kwargs.get("trim"), rt.store.policy.trim, rt.store.policy.spill_dir))
            rt.close()
            raise flower.FlowerError("spy stops here", 99)
        with mock.patch.object(flower, "Runtime", spy), mock.patch.dict(os.environ, {"ANTHROPIC_API_KEY": "sk-test"}), \
                redirect_stderr(io.StringIO()) as err:
            codes = [flower.main(["-w", tmp.name, "-r", os.path.join(tmp.name, "runs"), *extra, "build x"])
                     for extra in ([], ["--no-trim"])]
        self.assertEqual(codes, [99, 99], err.getvalue())
        spill = flower.Paths(tmp.name, os.path.join(tmp.name, "runs")).spill_dir
        # the spill dir is known either way: a resumed session that would not fit is trimmed even with --no-trim
        self.assertEqual(seen, [(True, True, spill), (False, False, spill)])


class StatusLine(unittest.TestCase):
    """The live status line of a TTY, driven by events and by the clock."""

    def test_status_line_and_questions(self):
        import io
        import flower
        err = io.StringIO()
        reporter = flower.Reporter(err=err, out=io.StringIO(), tty=True)
        reporter.event(flower.Event("step", step="work", data={"name": "work"}))
        reporter.event(flower.Event("text", step="work", level=150_000, window=200_000, data={"text": "hello"}))
        screen = err.getvalue()
        self.assertIn("hello", screen)
        self.assertIn("work · turn 1 · ctx 150.0K/200.0K 75%", screen)
        before = err.getvalue()
        reporter.tick()
        self.assertGreater(len(err.getvalue()), len(before))      # the clock redraws
        with reporter.question():
            during = err.getvalue()
            reporter.tick()
            reporter.event(flower.Event("system", step="work", data={"subtype": "init"}))
            self.assertEqual(err.getvalue(), during)              # nothing drawn over the answer
        reporter.tick()
        self.assertNotEqual(err.getvalue(), during)

    def test_no_status_line_when_not_a_tty(self):
        import io
        import flower
        err = io.StringIO()
        reporter = flower.Reporter(err=err, out=io.StringIO(), tty=False)
        reporter.event(flower.Event("text", step="work", level=1, window=2, data={"text": "plain"}))
        reporter.tick()
        self.assertEqual(err.getvalue(), "plain\n")


@unittest.skipUnless(hasattr(os, "openpty") and sys.platform != "win32", "needs a pty")
class Pty(unittest.TestCase):
    """A person at a terminal: the wake prompt, /new, Ctrl-C that asks for words, Ctrl-C twice."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.env = dict(base_env(self.tmp.name), ANTHROPIC_API_KEY="sk-test",
                        FAKE_LOG=os.path.join(self.tmp.name, "calls.jsonl"))

    def tearDown(self):
        self.tmp.cleanup()

    def spawn(self, args, env):
        import pty
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(self.ws)
            os.execve(sys.executable, [sys.executable, "-m", "tests.fake_flower"] + args, env)
        self.pid, self.fd, self.buf = pid, fd, b""

    def expect(self, needle, timeout=30):
        deadline = time.time() + timeout
        while needle.encode() not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                self.fail(f"did not see {needle!r}; screen was:\n{self.buf.decode('utf-8', 'replace')[-2000:]}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    self.fail(f"process ended before {needle!r}:\n{self.buf.decode('utf-8', 'replace')[-2000:]}")
                self.buf += chunk

    def send(self, data):
        os.write(self.fd, data.encode())

    def finish(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    self.buf += os.read(self.fd, 4096)
                except OSError:
                    pass
        os.kill(self.pid, signal.SIGKILL)
        self.fail("did not exit")

    def calls(self):
        with open(self.env["FAKE_LOG"], encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]

    def work_calls(self) -> int:
        """How many work calls the fake model has been asked (each is logged as its turn begins)."""
        try:
            with open(self.env["FAKE_LOG"], encoding="utf-8") as fh:
                lines = fh.read().split("\n")[:-1]   # whole lines only: one may be half written
        except FileNotFoundError:
            return 0
        return sum(json.loads(line)["role"] == "work" for line in lines)

    def in_the_work_turn(self, before: int) -> None:
        """Wait until the fake model has begun the next work call: a Ctrl-C then lands inside the turn."""
        deadline = time.time() + 30
        while self.work_calls() <= before:
            if time.time() > deadline:
                self.fail(f"the work turn never began; screen was:\n{self.buf.decode('utf-8', 'replace')[-2000:]}")
            ready, _, _ = select.select([self.fd], [], [], 0.02)
            if ready:
                with contextlib.suppress(OSError):
                    self.buf += os.read(self.fd, 4096)

    def test_wake_prompt_new_and_interrupts(self):
        p = subprocess.run([sys.executable, "-m", "tests.fake_flower", "first task"], cwd=self.ws, env=self.env,
                           capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr)
        # a used directory on a TTY: the wake prompt; /new archives and asks for the new task
        self.spawn([], dict(self.env, FAKE_WORK_BLOCK="1"))
        self.expect("Continue? Enter = carry on")
        self.send("/new\r")
        self.expect("What should be done?")
        works = self.work_calls()
        self.send("second task\r")
        self.expect("== work")
        self.in_the_work_turn(works)
        self.send("\x03")  # Ctrl-C: interrupts the turn and asks for words
        self.expect("What should I tell the agent?")
        self.send("use tabs\r")
        self.expect("continuing with your words")
        self.assertEqual(self.finish(), 0, self.buf.decode("utf-8", "replace")[-2000:])
        archive = os.path.join(self.ws, ".flower", "notes", "archive")
        self.assertEqual(len(os.listdir(archive)), 1)
        work = [c for c in self.calls() if c["role"] == "work"]
        self.assertTrue(work[-1]["prompt"].endswith("use tabs"))
        self.assertEqual(work[-1]["resume"], work[-2]["session_id"])  # the same session, resumed
        # Ctrl-C twice quits cleanly with 130 and the manifest written
        works = self.work_calls()
        self.spawn(["third"], dict(self.env, FAKE_WORK_BLOCK="1"))
        self.expect("== work")
        self.in_the_work_turn(works)
        self.send("\x03")
        self.expect("What should I tell the agent?")
        self.send("\x03")
        code = self.finish()
        self.assertEqual(code, 130, self.buf.decode("utf-8", "replace")[-2000:])
        self.assertNotIn(b"Traceback", self.buf)
        rows = manifest_rows(os.path.join(self.ws, ".flower"))
        self.assertEqual(rows[-1]["step"], "work")
        self.assertEqual(rows[-1]["error"], "interrupted")


if __name__ == "__main__":
    unittest.main()
