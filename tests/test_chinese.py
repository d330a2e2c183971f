"""Issue 42: with --lang zh / FLOWER_LANG=zh, the paths walked here (usage and option errors, the
starter flow's headers, status marks, doctor marks) say no English sentence; the same paths in
English stay English."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import unittest

import flower
from tests.helpers import RUN_FLOWER, NO_SDK, base_env

CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
ENGLISH = re.compile(r"\b[A-Za-z]{2,}(?:[ ,;:]+[A-Za-z']{2,}){2,}")   # three English words in a row


def english_lines(output: str) -> list[str]:
    """Lines that hold an English phrase (three words in a row) once the program's name and quoted
    values (what the user typed, the choices) are taken out: a Chinese frame around an English
    sentence counts too."""
    found = []
    for line in output.splitlines():
        bare = re.sub(r"'[^']*'", "", line.replace("python3 flower.py", ""))
        if ENGLISH.search(bare):
            found.append(line)
    return found


USAGE_PATHS = [
    ["stauts"], ["status", "--bogus"], ["status", "--settings", "x"], ["once"], ["go", "--rounds"],
    ["go", "--rounds", "0"], ["go", "--rounds", "x"], ["once", "-b", "0", "x"], ["show"],
    ["--lang", "zh", "sesions"],
]


class Walk(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.env = dict(base_env(self.tmp.name), ANTHROPIC_API_KEY="sk-test")

    def tearDown(self):
        self.tmp.cleanup()

    def run_cli(self, args, *, fake=False, nosdk=False, lang="zh"):
        cmd = [sys.executable, "-m", "tests.fake_flower"] if fake else \
            [sys.executable, "-c", NO_SDK] if nosdk else RUN_FLOWER
        env = dict(self.env, FLOWER_LANG=lang)
        return subprocess.run(cmd + list(args), cwd=self.ws, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)

    def test_usage_errors_in_chinese_and_in_english(self):
        for args in USAGE_PATHS:
            with self.subTest(args=args):
                p = self.run_cli(args)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertTrue(CJK.search(p.stderr), p.stderr)
                self.assertEqual(english_lines(p.stdout + p.stderr), [])
                en = self.run_cli([a for a in args if a not in ("--lang", "zh")], lang="en")
                self.assertFalse(CJK.search(en.stderr), en.stderr)
                self.assertTrue(english_lines(en.stderr), en.stderr)

    def test_a_run_status_and_doctor_in_chinese(self):
        p = self.run_cli(["--no-goal", "写一个 md2html"], fake=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("== 澄清 ", p.stderr)
        self.assertIn("== 工作 ", p.stderr)
        self.assertNotIn("== work", p.stderr)
        p = self.run_cli(["status"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("成功", p.stdout)
        self.assertNotRegex(p.stdout, r"(?m)^  ok ")
        p = self.run_cli(["doctor"], nosdk=True)
        self.assertRegex(p.stdout, r"(?m)^正常 ")
        self.assertRegex(p.stdout, r"(?m)^失败 ")
        self.assertNotRegex(p.stdout, r"(?m)^(OK|FAIL) ")

    def test_step_titles(self):
        self.assertEqual(flower.step_title("work#round2", "zh"), "工作#round2")
        self.assertEqual(flower.step_title("work·判定#1", "zh"), "工作·判定#1")
        self.assertEqual(flower.step_title("mine", "zh"), "mine")
        self.assertEqual(flower.step_title("clarify", "en"), "clarify")


OPTION_SYNTAX = re.compile(r"\{[^}]*\}|\b[A-Z][A-Z_:]+\b|\w+(?:,\w+)+")   # choices, metavars, name lists


def help_english_lines(output: str) -> list[str]:
    """english_lines of a help page, once its option syntax (choice lists, metavars, lists of names
    such as ``Read,Glob,Grep``) is taken out: those are what the user types, in any language."""
    return english_lines(OPTION_SYNTAX.sub("", output))


# (arguments, extra environment, stdin, exit code): error paths said from the text tables
ERROR_PATHS = [
    (["status", "-w", "nope"], {}, b"", 2),
    (["go", "   "], {}, b"", 2),
    (["go", "-"], {}, b"\xff", 2),
    (["go", "-"], {}, b"x" * (flower.MAX_PROMPT_BYTES + 1), 2),
    (["once", "--fork", "hi"], {}, b"", 2),
    (["status", "--workspace-id", " "], {}, b"", 2),
    (["status", "--state", "mysql://x"], {}, b"", 2),
    (["status", "-r", "afile"], {}, b"", 3),
    (["go", "hi"], {"FLOWER_WINDOW": "5", "FLOWER_NO_PROBE": "x"}, b"", 3),
    (["go", "hi"], {"ANTHROPIC_API_KEY": ""}, b"", 3),
    (["go", "hi"], {"NO_SDK": "1"}, b"", 3),
]


class HelpAndErrors(unittest.TestCase):
    """--help, every COMMAND --help and the common error paths, in Chinese and in English."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        with open(os.path.join(self.ws, "afile"), "w") as f:
            f.write("x")
        self.env = dict(base_env(self.tmp.name), ANTHROPIC_API_KEY="sk-test")

    def tearDown(self):
        self.tmp.cleanup()

    def run_cli(self, args, lang, extra=None, stdin=b""):
        extra = dict(extra or {})
        cmd = [sys.executable, "-c", NO_SDK] if extra.pop("NO_SDK", None) else RUN_FLOWER
        env = dict(self.env, FLOWER_LANG=lang, COLUMNS="100", **extra)
        p = subprocess.run(cmd + list(args), cwd=self.ws, env=env, input=stdin, capture_output=True, timeout=120)
        return p.returncode, p.stdout.decode("utf-8") + p.stderr.decode("utf-8")

    def test_help_of_every_command_in_chinese_and_in_english(self):
        for command in ["", *flower.SUBCOMMANDS]:
            args = [command, "--help"] if command else ["--help"]
            with self.subTest(command=command):
                code, zh = self.run_cli(args, "zh")
                self.assertEqual(code, 0, zh)
                self.assertEqual(help_english_lines(zh), [])
                self.assertIn("用法:", zh)
                self.assertNotRegex(zh, r"(?m)^(usage|options|positional arguments|global options)\b")
                self.assertIn(flower.text("hp_exit_codes", "zh")[:20], zh.replace("\n", ""))
                code, en = self.run_cli(args, "en")
                self.assertEqual(code, 0, en)
                self.assertFalse(CJK.search(en), en)
                self.assertRegex(en, r"(?m)^usage: ")
                self.assertIn("show this help message and exit", en)
        code, zh = self.run_cli(["--lang", "zh", "go", "--help"], "en")   # --lang on the line wins
        self.assertIn(flower.text("hp_go_rounds", "zh"), zh.replace("\n", "").replace(" " * 24, ""))

    def test_error_paths_in_chinese_and_in_english(self):
        for args, extra, stdin, expected in ERROR_PATHS:
            with self.subTest(args=args, extra=extra):
                code, zh = self.run_cli(args, "zh", extra, stdin)
                self.assertEqual(code, expected, zh)
                self.assertTrue(CJK.search(zh), zh)
                self.assertEqual(english_lines(zh), [])
                code, en = self.run_cli(args, "en", extra, stdin)
                self.assertEqual(code, expected, en)
                self.assertFalse(CJK.search(en), en)
                self.assertRegex(en, r"\b[a-z]{2,} [a-z]{2,}\b")


if __name__ == "__main__":
    unittest.main()
