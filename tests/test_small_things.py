"""Issue 42, the small things a user trips on, each with a test."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

import asyncio

import flower
from tests import fakesdk
from tests.fakesdk import FAKE
from tests.helpers import FLOWER, RUN_FLOWER, NO_SDK, ROOT, base_env
from tests.fakesdk import Brain



class Cli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.env = base_env(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def run_cli(self, args, cmd=None, env=None):
        return subprocess.run((cmd or RUN_FLOWER) + list(args), cwd=self.ws, env=env or self.env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)

    def test_new_without_a_task_archives_nothing(self):
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test")
        p = self.run_cli(["write md2html"], cmd=[sys.executable, "-m", "tests.fake_flower"],
                         env=dict(env, PYTHONPATH=ROOT))
        self.assertEqual(p.returncode, 0, p.stderr)
        flower_dir = os.path.join(self.ws, ".flower")
        before = sorted(os.path.relpath(os.path.join(d, n), flower_dir) for d, _, ns in os.walk(flower_dir) for n in ns)
        p = self.run_cli(["--new"], cmd=[sys.executable, "-m", "tests.fake_flower"], env=dict(env, PYTHONPATH=ROOT))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("nothing was archived", p.stderr)
        after = sorted(os.path.relpath(os.path.join(d, n), flower_dir) for d, _, ns in os.walk(flower_dir) for n in ns)
        self.assertFalse([n for n in after if "archive" in n], after)
        self.assertIn("lineage.json", after)
        self.assertLessEqual(set(before) - {"manifest.jsonl"}, set(after))

    def test_a_run_refused_for_a_missing_sdk_creates_nothing(self):
        p = self.run_cli(["do something"], cmd=[sys.executable, "-c", NO_SDK])
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(os.listdir(self.ws), [])

    def test_the_installed_command_names_itself(self):
        link = os.path.join(self.tmp.name, "flower")
        os.symlink(FLOWER, link)
        p = self.run_cli(["status"], cmd=[sys.executable, link])
        self.assertIn('flower "what should be done"', p.stdout)
        self.assertNotIn("python3 flower.py", p.stdout + p.stderr)
        p = self.run_cli([], cmd=[sys.executable, link])
        self.assertEqual(p.returncode, 2)
        self.assertIn('flower "what should be done"', p.stderr)
        self.assertNotIn("python3 flower.py", p.stderr)
        for key in ("st_no_match", "ui_nothing_to_do", "store_damaged"):
            for lang in ("en", "zh"):
                self.assertNotIn("python3 flower.py", flower.TEXTS[lang][key])

    def test_show_says_nothing_of_pruning_when_nothing_was_pruned(self):
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test", PYTHONPATH=ROOT)
        p = self.run_cli(["write md2html"], cmd=[sys.executable, "-m", "tests.fake_flower"], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.ws, ".flower", "lineage.json"), encoding="utf-8") as fh:
            sid = json.load(fh)["steps"]["clarify"]
        p = self.run_cli(["show", sid[:8]], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.strip())
        self.assertNotIn("pruned for resume", p.stderr)

    def test_on_a_terminal_the_banner_comes_before_the_wake_question(self):
        import pty
        import select
        import time
        env = dict(self.env, ANTHROPIC_API_KEY="sk-test", PYTHONPATH=ROOT, TERM="dumb")
        p = self.run_cli(["write md2html"], cmd=[sys.executable, "-m", "tests.fake_flower"], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        pid, fd = pty.fork()
        if pid == 0:   # pragma: no cover (the child)
            os.chdir(self.ws)
            os.execve(sys.executable, [sys.executable, "-m", "tests.fake_flower"], env)
        os.write(fd, b"\n")   # Enter, typed ahead: continue with no words
        screen, deadline = b"", time.time() + 60
        try:
            while time.time() < deadline:
                if select.select([fd], [], [], 0.1)[0]:
                    try:
                        chunk = os.read(fd, 4096)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        break
                    screen += chunk
        finally:
            os.close(fd)
            os.waitpid(pid, 0)
        shown = screen.decode("utf-8", "replace")
        question = flower.text("wake_continue_question").splitlines()[0][:30]
        self.assertIn("<- resuming", shown)
        self.assertIn(question, shown)
        self.assertLess(shown.index("<- resuming"), shown.index(question), shown)

    def test_gitignore_covers_build_output(self):
        with open(os.path.join(ROOT, ".gitignore"), encoding="utf-8") as fh:
            lines = fh.read().split()
        self.assertIn("build/", lines)
        self.assertIn("*.egg-info/", lines)


class Words(unittest.TestCase):
    def said(self, event, verbose=False):
        err = io.StringIO()
        flower.Reporter(verbose=verbose, err=err, tty=False).event(event)
        return err.getvalue()

    def test_enter_with_no_words_says_continuing(self):
        out = self.said(flower.Event("resume", data={"reason": "human", "words": ""}))
        self.assertIn("continuing", out)
        self.assertNotIn("your words", out)
        out = self.said(flower.Event("resume", data={"reason": "human", "words": "use tabs"}))
        self.assertIn("continuing with your words", out)

    def test_verbose_prune_report_is_not_a_python_dict(self):
        out = self.said(flower.Event("resume", data={"pruned": {"api_errors": 2, "expired": 1}}), verbose=True)
        self.assertIn("api_errors 2", out)
        self.assertNotIn("{", out)

    def test_recovered_singular_and_plural(self):
        self.assertIn("recovered 1 entry of", flower.text("info_recovered_one", sid="s"))
        self.assertIn("recovered 3 entries of", flower.text("info_recovered", n=3, sid="s"))
        self.assertNotIn("(y/ies)", flower.TEXTS["en"]["info_recovered"])
        import inspect
        self.assertIn('"info_recovered_one" if recovered == 1', inspect.getsource(flower.Runtime.salvage))

    def test_tool_input_is_always_an_object(self):
        big = {"command": "x" * 5000, "description": "run"}
        short = flower._short_input(big)
        self.assertIsInstance(short, dict)
        self.assertEqual(set(short), {"command", "description"})
        self.assertLess(len(json.dumps(short)), 600)
        self.assertEqual(short["description"], "run")
        self.assertIsInstance(flower._short_input("just text"), dict)
        self.assertEqual(flower._short_input({"a": 1}), {"a": 1})


class JudgeRounds(fakesdk.FakeWorkspace, unittest.TestCase):
    def run_flow(self, verdicts, rounds=3):
        brain = Brain(verdicts=verdicts)
        FAKE.turns = [brain] * 20
        events = []
        rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, resilience=flower.Resilience(probe=False),
                            on_event=events.append)
        try:
            asyncio.run(flower.starter_flow("write md2html", rt=rt, rounds=rounds).run(rt))
        finally:
            rt.close()
        return events

    def test_the_judge_step_has_a_step_event(self):
        events = self.run_flow(["VERDICT: achieved"])
        steps = [e.step for e in events if e.kind == "step"]
        self.assertEqual(steps, ["clarify", "goal", "work", "work·judge#1"])

    def test_the_closing_reason_after_the_rounds_run_out_is_one_line(self):
        verdict = "## Failed checks\n- code blocks get <pre>\n## Reasons\nno pre tag\nat all\nVERDICT: not_yet"
        with self.assertRaises(flower.StepAbort) as caught:
            self.run_flow([verdict] * 3, rounds=1)
        self.assertNotIn("\n", str(caught.exception))
        self.assertIn("no pre tag at all", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
