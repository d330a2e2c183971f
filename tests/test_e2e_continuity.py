"""End-to-end tier, issue 36 items 3, 4 and 9: the real SDK and CLI against the fake API.

- No silent ``done`` with nothing stored: a CLI config dir (HOME) that is full is refused before any
  request; one that fills during the run is said, and counted in ``continuity degraded``.
- Write-ahead covers the task and the wake: a task or a wake sentence survives a kill at any point of
  the start-up, and a wake sentence survives until the work step has been sent it.
- A side question never harms the live run: ``once --resume``/``--fork`` of the session a live ``go``
  drives is refused before it touches that go's files.

Every kill lands at a phase (a request held at the fake API, a marker on disk), never after a delay."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import tempfile
import threading
import unittest

import flower
from tests import test_e2e as base
from tests.fakeapi import FakeAnthropic, text, tool
from tests.test_e2e import GOAL, HAVE_SDK, SKIP, last_user_text


def resume_copies(sid: str) -> list[str]:
    """Every file of the SDK's temp copies of session ``sid`` (a live resume's transcript and config)."""
    found = []
    for owner in ("", "flower-*"):
        pattern = os.path.join(glob.escape(tempfile.gettempdir()), owner, "claude-resume-*", "projects", "*",
                               f"{sid}.jsonl")
        for transcript in glob.glob(pattern):
            root = transcript.split(os.sep + "projects" + os.sep)[0]
            found += [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]
    return sorted(found)


class _Base(unittest.TestCase):
    E = base.EndToEnd
    setUp, tearDown, flower, read, wait_for = E.setUp, E.tearDown, E.flower, E.read, E.wait_for
    lineage, manifest, stored, work_row = E.lineage, E.manifest, E.stored, E.work_row
    del E

    def spawn(self, *args, env=None):
        proc = base.EndToEnd.spawn(self, *args, env=env)
        self.addCleanup(lambda: (proc.stdout.close(), proc.stderr.close()))
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        return proc

    def held_work(self, answer: str = "LIVE-ANSWER-MARK"):
        """A work answer the fake API holds until ``release`` is set; ``arrived`` is set when asked."""
        arrived, release = threading.Event(), threading.Event()

        def held(body):
            arrived.set()
            release.wait(120)
            return text(answer)
        self.addCleanup(release.set)
        return held, arrived, release


def fill(directory: str) -> None:
    """Write into ``directory`` until its file system says it is full."""
    fd = os.open(os.path.join(directory, f"fill-{len(os.listdir(directory))}"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 65536)
    except OSError:
        pass
    try:
        while True:
            os.write(fd, b"x")
    except OSError:
        pass
    finally:
        os.close(fd)


@unittest.skipUnless(HAVE_SDK, SKIP)
class NothingSilent(_Base):
    """Item 3: HOME (where the CLI writes its transcripts) full before or during a run."""

    def setUp(self):
        super().setUp()
        self.home = os.path.join(self.tmp.name, "home")
        os.makedirs(self.home)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", self.home],
                           capture_output=True, text=True)
        if p.returncode != 0:
            super().tearDown()
            self.skipTest(f"a small tmpfs for HOME cannot be mounted here (needs root): {p.stderr.strip()[:200]}")
        self.env.update(HOME=self.home, CLAUDE_CONFIG_DIR=os.path.join(self.home, ".claude"))

    def tearDown(self):
        if subprocess.run(["umount", self.home], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", self.home], capture_output=True)
        super().tearDown()

    def test_a_full_home_is_a_setup_problem_before_any_request(self):
        fill(self.home)
        p = self.flower("write hello", check=False)
        self.assertEqual(p.returncode, flower.EXIT_SETUP, p.stderr)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn(os.path.join(self.home, ".claude"), lines[0])
        self.assertIn("nothing was sent", lines[0])
        self.assertEqual(self.api.requests, [])

    def test_home_full_during_the_run_is_said_and_never_a_plain_done(self):
        def filling(reply):
            def answer(body):
                fill(self.home)     # the first work request: from here on the CLI cannot write its transcript
                return reply
            return answer
        self.roles.work = [filling(tool("Bash", {"command": "echo one"})), tool("Bash", {"command": "echo two"}),
                           text("finished")]
        p = self.flower("--json", "write hello")
        work_sid = self.lineage()["steps"]["work"]
        self.assertFalse([e for e in self.stored(work_sid) if e.get("type") == "assistant"])   # as on main
        said = [ln for ln in p.stderr.splitlines() if "never reached the session store" in ln]
        self.assertTrue(any(work_sid in ln and "3 of 3 answer(s)" in ln for ln in said), p.stderr)
        closing = [ln for ln in p.stderr.splitlines() if ln.startswith("done ·")]
        self.assertEqual(len(closing), 1, p.stderr)
        self.assertIn(f"continuity degraded: {len(said)} problem(s)", closing[0])
        summary = [json.loads(ln) for ln in p.stdout.splitlines() if '"summary"' in ln][-1]["data"]
        self.assertEqual(len(summary["degraded"]), len(said))


@unittest.skipUnless(HAVE_SDK, SKIP)
class SideQuestion(_Base):
    """Item 9: nothing that is not the driver touches a live driver's files."""

    def test_once_resume_and_fork_of_the_live_session_are_refused_before_touching_it(self):
        self.flower("write hello")
        work_sid = self.lineage()["steps"]["work"]
        held, arrived, release = self.held_work()
        self.roles.work = [held]
        go = self.spawn("also say bye")                 # a wake: the work step resumes its stored session
        self.wait_for(arrived.is_set, what="the live go's resumed work request")
        copies = resume_copies(work_sid)
        self.assertTrue(any(c.endswith(f"{work_sid}.jsonl") for c in copies), copies)
        requests = len(self.api.requests)
        for extra in ([], ["--fork"]):
            p = self.flower("once", "--resume", work_sid, *extra, "a side question", check=False)
            self.assertEqual(p.returncode, flower.EXIT_BUSY, p.stderr)
            self.assertIn("another flower drives session", p.stderr)
            self.assertNotIn("Traceback", p.stderr)
            self.assertEqual(resume_copies(work_sid), copies, f"once {extra} touched the live go's temp copy")
        self.assertEqual(len(self.api.requests), requests)
        release.set()
        out, err = go.communicate(timeout=180)
        self.assertEqual(go.returncode, 0, err)
        self.assertIn("LIVE-ANSWER-MARK", json.dumps(self.stored(work_sid)))
        self.assertEqual(resume_copies(work_sid), [])   # the driver removed its own copy


if __name__ == "__main__":
    unittest.main()
