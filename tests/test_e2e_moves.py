"""End-to-end tier for issue 40 (the job moves with its work): the real SDK and CLI against the fake
API. A CI job runs one command every time: the same words again are a continue, never new words."""

from __future__ import annotations

import json
import re
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import flower
from tests import fakeapi
from tests.fakeapi import FakeAnthropic, text, tool
from tests.pgserver import HAVE_PG, SKIP as PG_SKIP, PgServer
from tests.helpers import E2ECase, RUN_FLOWER, HAVE_SDK, ROOT, Roles, SKIP, git
from tests.fakeapi import last_user_text



@unittest.skipUnless(HAVE_SDK, SKIP)
class CiReRuns(E2ECase, unittest.TestCase):
    def ci(self, *args):
        """README's CI line: ``python3 flower.py --json "build X" > events.jsonl``."""
        return subprocess.run([*RUN_FLOWER, "--json", *args, "build X"], cwd=self.ws, env=self.env,
                              capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)

    def brief(self):
        with open(os.path.join(self.ws, ".flower", "notes", "brief.md"), encoding="utf-8") as fh:
            return fh.read()

    def test_the_same_command_five_times_is_one_paid_job(self):
        self.roles.judge = [text("VERDICT: not_yet\nFAILED:\n- hello.txt contains hi")]
        first = self.ci("--rounds", "1")          # the judge is not satisfied: exit 1, the job goes on
        self.assertEqual(first.returncode, flower.EXIT_STEP_FAILED, first.stderr[-2000:])
        brief = self.brief()
        second = self.ci()                        # the same words: the work step just continues
        self.assertEqual(second.returncode, 0, second.stderr[-2000:])
        self.assertIn(flower.text("ui_same_words"), second.stderr)
        works = self.roles.bodies("work")
        self.assertEqual(last_user_text(works[-1]).strip().splitlines()[-1], flower.text("work_resume"))
        self.assertNotIn("build X", last_user_text(works[-1]))
        self.assertEqual(self.brief(), brief)     # nothing appended
        self.assertEqual(len(self.roles.bodies("clarify")), 1)
        self.assertEqual(len(self.roles.bodies("goal")), 1)   # the goal was not re-derived
        paid = len(self.api.requests)
        for _ in range(3):                        # after "achieved": nothing to pay for
            again = self.ci()
            self.assertEqual(again.returncode, 0, again.stderr[-2000:])
            self.assertIn(flower.text("ui_nothing_new"), again.stderr)
            self.assertNotIn(flower.text("ui_same_words"), again.stderr)
            summary = [json.loads(ln) for ln in again.stdout.splitlines() if ln.strip()][-1]
            self.assertEqual((summary["kind"], summary["data"]["exit_code"]), ("summary", 0))
        self.assertEqual(len(self.api.requests), paid)
        self.assertEqual(self.brief(), brief)

    def test_new_words_are_still_added(self):
        self.assertEqual(self.ci().returncode, 0)
        p = subprocess.run([*RUN_FLOWER, "also say bye"], cwd=self.ws, env=self.env,
                           capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertIn("also say bye", self.brief())
        self.assertEqual(len(self.roles.bodies("goal")), 2)              # re-derived for new words
        self.assertIn("also say bye", last_user_text(self.roles.bodies("work")[-1]))
        brief, paid = self.brief(), len(self.api.requests)
        p = subprocess.run([*RUN_FLOWER, "also  say bye"], cwd=self.ws, env=self.env,
                           capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])   # a wake sentence given again: achieved, nothing paid
        self.assertIn(flower.text("ui_nothing_new"), p.stderr)
        self.assertEqual((self.brief(), len(self.api.requests)), (brief, paid))


REMOTE = "git@github.com:acme/hello.git"
PARTS = ("part1.txt", "part2.txt", "part3.txt")


@unittest.skipUnless(HAVE_SDK, SKIP)
class TheWorkMovesWithTheJob(unittest.TestCase):
    """A writes files through tools and is killed -9 mid-job; B, another clone with another HOME,
    restores them before its first request, and the model (which looks at the disk) writes none twice."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.api = FakeAnthropic().start()
        self.roles = Roles()
        self.api.responder = self.roles
        self.writes: list[str] = []
        self.slept = False
        self.here = ""          # the workspace the model works in now
        self.seen_at_first: dict = {}
        self.roles.work = [self.model] * 40
        self.origin = os.path.join(self.tmp.name, "origin")
        os.makedirs(self.origin)
        git(self.origin, "init", "-q", "-b", "main")
        with open(os.path.join(self.origin, "README.md"), "w") as fh:
            fh.write("the repository\n")
        git(self.origin, "add", "-A")
        git(self.origin, "commit", "-q", "-m", "base")
        self.procs = []

    def tearDown(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        self.api.stop()
        self.tmp.cleanup()

    def model(self, body):
        if self.here not in self.seen_at_first:
            self.seen_at_first[self.here] = sorted(n for n in PARTS if os.path.exists(os.path.join(self.here, n)))
        missing = [n for n in PARTS if not os.path.exists(os.path.join(self.here, n))]
        if missing:
            self.writes.append(missing[0])
            return tool("Write", {"file_path": os.path.join(self.here, missing[0]), "content": f"{missing[0]}\n"})
        if not self.slept:
            self.slept = True
            return tool("Bash", {"command": "python3 -c \"import time; time.sleep(60)\""}, say="working on")
        return text("all parts are written")

    def clone(self, path, home):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        git(os.path.dirname(path), "clone", "-q", self.origin, path)
        git(path, "remote", "set-url", "origin", REMOTE)   # the same repository on every machine
        os.makedirs(home, exist_ok=True)
        return path

    def env(self, home):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "FLOWER_", "GIT_"))}
        env.update(fakeapi.cli_env(self.api, home))
        env.update(FLOWER_PROBE_INTERVAL="0.5", FLOWER_BASE_DELAY="0.2", FLOWER_MAX_DELAY="1",
                   FLOWER_MAX_OFFLINE_WAIT="120", NO_COLOR="1", PYTHONPATH=ROOT, FLOWER_SNAPSHOT_EVERY="0", FLOWER_NO_DELEGATE="1")
        return env

    def spawn(self, ws, home, *args):
        proc = subprocess.Popen([*RUN_FLOWER, *self.state_args(), *args], cwd=ws, env=self.env(home),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def run_flower(self, ws, home, *args):
        p = subprocess.run([*RUN_FLOWER, *self.state_args(), *args], cwd=ws, env=self.env(home),
                           capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return p

    def state_args(self):
        return []

    def latest(self, ws):
        state = flower.LocalState(flower.Paths(ws))
        return state.latest_snapshot()

    def wait_for(self, predicate, what, timeout=240):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if predicate():
                    return
            except Exception:
                pass
            time.sleep(0.1)
        self.fail(f"timed out waiting for {what}")

    def killed_on_a(self, a, home_a, before_kill=None):
        self.here = a
        proc = self.spawn(a, home_a, "write the parts")
        self.wait_for(lambda: self.slept, "A's long tool call")
        self.wait_for(lambda: set(PARTS) <= set(flower.Snapshot.unpack(self.latest(a)).files), "A's snapshot")
        if before_kill:
            before_kill(proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def continued_on_b(self, b, home_b):
        self.here = b
        self.seen_at_first.pop(b, None)   # (B may be at A's path, as on a CI runner)
        before = len(self.roles.bodies("work"))
        p = self.run_flower(b, home_b, "write the parts")
        self.assertEqual(len(self.roles.bodies("clarify")), 1)                     # the same job
        self.assertIn(flower.text("snapshot_restored", n=3, at="", host="").split(" from")[0], p.stderr)
        self.assertEqual(self.seen_at_first[b], list(PARTS))                       # before the first request
        self.assertEqual(sorted(self.writes), sorted(PARTS))                       # nothing written twice
        for name in PARTS:
            with open(os.path.join(b, name)) as fh:
                self.assertEqual(fh.read(), f"{name}\n")
        sent = last_user_text(self.roles.bodies("work")[before])
        self.assertIn("flower restored 3 file(s)", sent)                           # the model is told
        self.assertEqual(git(b, "status", "--porcelain", "--untracked-files=no"), b"")   # nothing tracked touched
        return p

    def test_local_backend_flower_dir_carried_like_a_ci_cache(self):
        a = self.clone(os.path.join(self.tmp.name, "runner", "hello"), os.path.join(self.tmp.name, "home-a"))
        self.killed_on_a(a, os.path.join(self.tmp.name, "home-a"))
        old = os.path.join(self.tmp.name, "runner-a-gone")
        os.rename(os.path.dirname(a), old)                    # the runner is gone; the cache keeps .flower/
        b = self.clone(os.path.join(self.tmp.name, "runner", "hello"), os.path.join(self.tmp.name, "home-b"))
        shutil.copytree(os.path.join(old, "hello", ".flower"), os.path.join(b, ".flower"),
                        ignore=shutil.ignore_patterns("*.lock", "live"))
        self.continued_on_b(b, os.path.join(self.tmp.name, "home-b"))
        again = self.run_flower(b, os.path.join(self.tmp.name, "home-b"), "write the parts")
        self.assertNotIn("restored", again.stderr)           # the same workspace on the same machine


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, PG_SKIP)
class TheWorkMovesThroughPostgres(TheWorkMovesWithTheJob):
    @classmethod
    def setUpClass(cls):
        cls.server = PgServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def setUp(self):
        super().setUp()
        self.dsn = self.server.database()

    def state_args(self):
        return ["--state", self.dsn]

    def latest(self, ws):
        import psycopg
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT body FROM flower.snapshots ORDER BY id DESC LIMIT 1").fetchone()
        return bytes(row[0])

    test_local_backend_flower_dir_carried_like_a_ci_cache = None   # the local backend's case: not run here

    def test_killed_on_a_restored_on_b_another_clone_elsewhere(self):
        home_a, home_b = os.path.join(self.tmp.name, "home-a"), os.path.join(self.tmp.name, "home-b")
        a = self.clone(os.path.join(self.tmp.name, "a", "hello"), home_a)
        b = self.clone(os.path.join(self.tmp.name, "b", "src", "hello"), home_b)

        def status_on_b(proc):   # B never ran the job: status shows it, and that A drives it now
            p = subprocess.run([*RUN_FLOWER, "--state", self.dsn, "status", "--json"], cwd=b,
                               env=self.env(home_b), capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            data = json.loads(p.stdout)
            self.assertTrue(data["wake"]["brief"])
            self.assertEqual((data["wake"]["checks"], data["wake"]["statement"]), (1, "hello.txt exists"))
            self.assertEqual(sorted(s["step"] for s in data["steps"]), ["clarify", "goal", "work"])
            self.assertEqual((data["driver"]["pid"], data["driver"]["step"]), (proc.pid, "work"))
            shown = subprocess.run([*RUN_FLOWER, "--state", self.dsn, "status"], cwd=b,
                                   env=self.env(home_b), capture_output=True, text=True, timeout=120).stdout
            self.assertRegex(shown, rf"driven by +pid {proc.pid} on \S+ in {re.escape(os.path.realpath(a))}, "
                                    rf"since \S+, step work")   # A's own host and path
            self.assertRegex(shown, r"brief +confirmed")
            self.assertFalse(os.path.exists(os.path.join(b, ".flower", "notes", "brief.md")))
        self.killed_on_a(a, home_a, before_kill=status_on_b)
        self.continued_on_b(b, home_b)

    def test_a_diverged_b_keeps_its_edit_the_rest_restored_or_set_aside(self):
        home_a, home_b = os.path.join(self.tmp.name, "home-a"), os.path.join(self.tmp.name, "home-b")
        a = self.clone(os.path.join(self.tmp.name, "a", "hello"), home_a)
        self.killed_on_a(a, home_a)
        b = self.clone(os.path.join(self.tmp.name, "b", "src", "hello"), home_b)
        with open(os.path.join(b, "part2.txt"), "w") as fh:   # B's own edit where A wrote too
            fh.write("B's own part 2\n")
        self.here = b
        before = len(self.roles.bodies("work"))
        p = self.run_flower(b, home_b, "write the parts")
        with open(os.path.join(b, "part2.txt")) as fh:
            self.assertEqual(fh.read(), "B's own part 2\n")                        # the local edit survives
        for name in ("part1.txt", "part3.txt"):
            with open(os.path.join(b, name)) as fh:
                self.assertEqual(fh.read(), f"{name}\n")
        self.assertIn("restored 2 file(s)", p.stderr)
        self.assertIn("set aside in", p.stderr)
        aside = os.path.join(b, ".flower", "snapshot-aside")
        [stamp] = os.listdir(aside)
        with open(os.path.join(aside, stamp, "files", "part2.txt")) as fh:
            self.assertEqual(fh.read(), "part2.txt\n")
        sent = last_user_text(self.roles.bodies("work")[before])
        self.assertIn("flower restored 2 file(s)", sent)
        self.assertIn("set aside in", sent)
        self.assertEqual(sorted(self.writes), sorted(PARTS))                       # nothing written twice


if __name__ == "__main__":
    unittest.main()
