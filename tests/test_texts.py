"""Text tables (issue 14): every user-facing string and prompt exists in English and Chinese, and the
Chinese run speaks Chinese: the agents' instructions, the starter flow's prompts, status columns."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import unittest

import flower
from tests.helpers import ROOT

CJK = re.compile(r"[\u3400-\u9fff]")
# the same in both languages on purpose: machine-read tokens and formats without words
SAME_ALLOWED = {"n_turns", "n_turn"}


class Table(unittest.TestCase):
    def test_every_key_in_both_languages(self):
        en, zh = set(flower.TEXTS["en"]), set(flower.TEXTS["zh"])
        self.assertEqual(sorted(en - zh), [], "keys without Chinese")
        self.assertEqual(sorted(zh - en), [], "keys without English")

    def test_chinese_strings_are_chinese(self):
        not_chinese = [k for k, v in flower.TEXTS["zh"].items()
                       if not CJK.search(v) and k not in SAME_ALLOWED]
        self.assertEqual(not_chinese, [])

    def test_placeholders_match(self):
        for key, value in flower.TEXTS["en"].items():
            fields = set(re.findall(r"\{(\w+)", value))
            self.assertEqual(fields, set(re.findall(r"\{(\w+)", flower.TEXTS["zh"][key])), key)

    def test_agent_instructions_and_prompts_follow_the_language(self):
        for key in ("clarify_instructions", "goal_instructions", "work_instructions", "judge_instructions",
                    "clarify_prompt", "goal_prompt", "judge_prompt", "work_again", "handoff_prompt", "carry_head"):
            self.assertTrue(CJK.search(flower.text(key, "zh")), key)
            self.assertFalse(CJK.search(flower.text(key, "en")), key)


class ChineseCli(unittest.TestCase):
    def test_status_is_chinese_with_aligned_columns(self):
        with tempfile.TemporaryDirectory() as ws:
            env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
            p = subprocess.run([sys.executable, os.path.join(ROOT, "flower.py"), "status", "--lang", "zh"],
                               cwd=ws, env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            lines = [ln for ln in p.stdout.splitlines() if ln and not ln.startswith("这里还没有")]
            self.assertTrue(all(CJK.search(ln.split()[0]) for ln in lines), p.stdout)
            # the value column starts at the same terminal column on every line (CJK counts double)
            starts = {flower.display_width(ln[:len(ln) - len(ln.split("  ", 1)[1].lstrip())]) for ln in lines}
            self.assertEqual(len(starts), 1, p.stdout)

    def test_display_width(self):
        self.assertEqual(flower.display_width("工作区"), 6)
        self.assertEqual(flower.display_width("ab c"), 4)
        self.assertEqual(flower.display_width("a工b"), 4)
        self.assertEqual(flower.display_width("\uff21"), 2)  # full-width A
        self.assertEqual(flower.display_width("\u00e9"), 1)
        self.assertEqual(flower.pad("目标", 6), "目标  ")
        self.assertEqual(flower.pad("goal", 6), "goal  ")


if __name__ == "__main__":
    unittest.main()
