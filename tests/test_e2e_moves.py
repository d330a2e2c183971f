"""End-to-end tier for issue 40 (the job moves with its work): the real SDK and CLI against the fake
API. A CI job runs one command every time: the same words again are a continue, never new words."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

import flower
from tests import fakeapi
from tests.fakeapi import FakeAnthropic, text
from tests.test_e2e import HAVE_SDK, SKIP, Roles, last_user_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOWER = os.path.join(ROOT, "flower.py")


@unittest.skipUnless(HAVE_SDK, SKIP)
class CiReRuns(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.api = FakeAnthropic().start()
        self.roles = Roles()
        self.api.responder = self.roles
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "FLOWER_"))}
        self.env.update(fakeapi.cli_env(self.api, self.tmp.name))
        self.env.update(FLOWER_PROBE_INTERVAL="0.5", FLOWER_BASE_DELAY="0.2", FLOWER_MAX_DELAY="1",
                        FLOWER_MAX_OFFLINE_WAIT="120", NO_COLOR="1", PYTHONPATH=ROOT)

    def tearDown(self):
        self.api.stop()
        self.tmp.cleanup()

    def ci(self, *args):
        """README's CI line: ``python3 flower.py --json "build X" > events.jsonl``."""
        return subprocess.run([sys.executable, FLOWER, "--json", *args, "build X"], cwd=self.ws, env=self.env,
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
        p = subprocess.run([sys.executable, FLOWER, "also say bye"], cwd=self.ws, env=self.env,
                           capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertIn("also say bye", self.brief())
        self.assertEqual(len(self.roles.bodies("goal")), 2)              # re-derived for new words
        self.assertIn("also say bye", last_user_text(self.roles.bodies("work")[-1]))
        brief, paid = self.brief(), len(self.api.requests)
        p = subprocess.run([sys.executable, FLOWER, "also  say bye"], cwd=self.ws, env=self.env,
                           capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])   # a wake sentence given again: achieved, nothing paid
        self.assertIn(flower.text("ui_nothing_new"), p.stderr)
        self.assertEqual((self.brief(), len(self.api.requests)), (brief, paid))


if __name__ == "__main__":
    unittest.main()
