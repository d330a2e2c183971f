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
