"""End-to-end tier, issue 36 items 3, 4 and 9: the real SDK and CLI against the fake API.

- No silent ``done`` with nothing stored: a CLI config dir (HOME) that is full is refused before any
  request; one that fills during the run is said, and counted in ``continuity degraded``.
- Write-ahead covers the task and the wake: a task or a wake sentence survives a kill at any point of
  the start-up, and a wake sentence survives until the work step has been sent it.
- A side question never harms the live run: ``once --resume``/``--fork`` of the session a live ``go``
  drives is refused before it touches that go's files.

Every kill lands at a phase (a request held at the fake API, a marker on disk), never after a delay."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import unittest

import flower
from tests.fakeapi import FakeAnthropic, text, tool, last_user_text
from tests.helpers import E2ECase, HAVE_SDK, ROOT, SKIP, SmallHome, fill, freeze_front, resume_copies, role_of


class _Base(E2ECase, unittest.TestCase):
    def spawn(self, *args, env=None):
        proc = E2ECase.spawn(self, *args, env=env)
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
class NothingSilent(SmallHome, _Base):
    """Item 3: HOME (where the CLI writes its transcripts) full before or during a run."""

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
        # the first answer is longer than a page: the transcript begun before the fill has room for less in
        # its last tmpfs page, whatever the lines before it took (else that answer could still be written)
        pad = "#" * 5000
        self.roles.work = [filling(tool("Bash", {"command": f"echo one  {pad}"})), tool("Bash", {"command": "echo two"}),
                           text("finished")]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.flower("--json")
        work_sid = self.lineage()["steps"]["work"]
        kept = [e for e in self.stored(work_sid) if e.get("type") == "assistant"]
        self.assertEqual(len(kept), 3)                  # the CLI wrote none: flower kept them from the stream
        self.assertTrue(all(e.get("flowerFromStream") for e in kept), kept)
        said = [ln for ln in p.stderr.splitlines() if "never reached the session store" in ln]
        self.assertTrue(any(work_sid in ln and "3 of 3 answer(s)" in ln for ln in said), p.stderr)
        closing = [ln for ln in p.stderr.splitlines() if ln.startswith("done ·")]
        self.assertEqual(len(closing), 1, p.stderr)
        self.assertIn(f"continuity degraded: {len(said)} problem(s)", closing[0])
        summary = [json.loads(ln) for ln in p.stdout.splitlines() if '"summary"' in ln][-1]["data"]
        self.assertEqual(len(summary["degraded"]), len(said))


@unittest.skipUnless(HAVE_SDK, SKIP)
class WriteAhead(_Base):
    """Item 4: the task and a wake sentence are on disk before anything heavy runs, and a wake stays
    pending until the work step was sent it."""

    def blocking_sdk(self) -> tuple[dict, str]:
        """An environment whose ``claude_agent_sdk`` import leaves a marker and then blocks: a kill that
        waits for the marker lands while flower imports the SDK (its heaviest start-up phase)."""
        root = os.path.join(self.tmp.name, "shim")
        os.makedirs(os.path.join(root, "claude_agent_sdk"), exist_ok=True)
        mark = os.path.join(root, "importing")
        with open(os.path.join(root, "claude_agent_sdk", "__init__.py"), "w") as fh:
            fh.write("import os, time\nopen(os.environ['SDK_IMPORT_MARK'], 'w').close()\ntime.sleep(600)\n")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(mark)
        return {"PYTHONPATH": root + os.pathsep + ROOT, "SDK_IMPORT_MARK": mark}, mark

    def lineage_text(self) -> str:
        try:
            return self.read(".flower", "lineage.json")
        except OSError:
            return ""

    def held(self, role: str):
        """Hold the first request of ``role`` at the fake API; returns (arrived, release)."""
        arrived, release = threading.Event(), threading.Event()
        self.addCleanup(release.set)

        def holding(body):
            if role_of(body) == role and not arrived.is_set():
                arrived.set()
                release.wait(60)
                return text("too late")
            return self.roles(body)
        self.api.responder = holding
        return arrived, release

    def killed_at(self, phase: str, *args) -> None:
        """Start ``flower *args`` and kill -9 it at ``phase``: "sdk" (importing the SDK), "recorded"
        (the lineage holds the words), or a role whose first request is then held at the fake API."""
        env, mark = self.blocking_sdk() if phase == "sdk" else ({}, "")
        arrived, release = self.held(phase) if phase not in ("sdk", "recorded") else (None, None)
        proc = self.spawn(*args, env=env)
        if phase == "sdk":
            self.wait_for(lambda: os.path.exists(mark), what="flower importing the SDK")
        elif phase == "recorded":
            self.wait_for(lambda: args[-1] in self.lineage_text(), timeout=120, what="the words in lineage.json")
        else:
            self.wait_for(arrived.is_set, what=f"the {phase} request")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if release is not None:
            release.set()
        self.api.responder = self.roles

    def test_a_task_survives_a_kill_at_any_point_of_the_start_up(self):
        for phase in ("sdk", "recorded", "clarify"):
            with self.subTest(phase=phase):
                self.ws = os.path.join(self.tmp.name, f"ws-{phase}")
                os.makedirs(self.ws)
                task = f"write hello TASK-MARK-{phase}"
                self.killed_at(phase, task)
                before = len(self.roles.bodies("clarify"))
                p = self.flower()                                    # no task this time
                self.assertIn("done", p.stderr)
                first = self.roles.bodies("clarify")[before]
                self.assertIn(f"Task: {task}", FakeAnthropic.messages_text(first))
                self.assertEqual([r["step"] for r in self.manifest()][-4:], ["clarify", "goal", "work", "work·judge#1"])
                if phase == "sdk":
                    self.assertIn("carrying on with the task given before", p.stderr)

    def test_a_wake_sentence_survives_a_kill_until_the_work_step_was_sent_it(self):
        freeze_front(self.ws)   # a finished job to wake: its work and judge as a fresh go leaves them
        self.flower()
        for phase in ("sdk", "goal"):
            with self.subTest(phase=phase):
                sentence = f"also support tables WAKE-MARK-{phase}"
                self.killed_at(phase, sentence)
                goals, works = len(self.roles.bodies("goal")), len(self.roles.bodies("work"))
                p = self.flower()                                    # an empty wake
                self.assertIn("done", p.stderr)
                self.assertIn(sentence, FakeAnthropic.messages_text(self.roles.bodies("goal")[goals]))  # re-derived
                resumed = self.roles.bodies("work")[works]
                said = last_user_text(resumed)   # the sentence, then the goal it re-derived (issue 42)
                self.assertIn(sentence, said.splitlines())
                self.assertLess(said.index(sentence), said.index("hello.txt contains hi"))
                self.assertEqual(self.read(".flower", "notes", "brief.md").count(sentence), 1)
                self.assertIsNone(self.lineage().get("wake"))        # carried through: nothing pending
                self.assertEqual(self.flower().stderr.count("nothing new"), 1)   # and the next wake pays nothing

    def test_a_sentence_the_work_step_holds_is_not_sent_again(self):
        freeze_front(self.ws)   # a finished job to wake: its work and judge as a fresh go leaves them
        self.flower()
        work_sid = self.lineage()["steps"]["work"]
        sentence = "also support tables SENT-MARK"
        arrived, release = self.held("work")
        proc = self.spawn(sentence)
        self.wait_for(arrived.is_set, what="the work request")
        self.wait_for(lambda: sentence in json.dumps(self.stored(work_sid)), what="the prompt in the store")
        self.wait_for(lambda: self.lineage().get("wake") is None, what="the pending wake settled")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        release.set()
        self.api.responder = self.roles
        works = len(self.roles.bodies("work"))
        self.flower()
        sent = FakeAnthropic.messages_text(self.roles.bodies("work")[works])
        self.assertEqual(sent.count(sentence), 1)                    # in the history, not again as the prompt
        self.assertEqual(last_user_text(self.roles.bodies("work")[works]).strip(), flower.text("work_resume"))


@unittest.skipUnless(HAVE_SDK, SKIP)
class SideQuestion(_Base):
    """Item 9: nothing that is not the driver touches a live driver's files."""

    def test_once_resume_and_fork_of_the_live_session_are_refused_before_touching_it(self):
        freeze_front(self.ws)   # a finished job to wake: its work and judge as a fresh go leaves them
        self.flower()
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
