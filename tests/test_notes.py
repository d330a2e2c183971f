"""Notes: the brief, goal, verdict and handoff-ledger parsers on realistic model output."""

import unittest

import flower
from flower import Brief, Goal, Verdict, Ledger
from tests.helpers import LEDGER_EN

BRIEF_EN = """Here is what I understood.

## Goal
A CLI that converts markdown to HTML.

## Acceptance
- `python md2html.py in.md` prints HTML
- code blocks are highlighted

## Bounds
No network. Python stdlib only.

```markdown
## Goal
this heading is inside a code block and must not count
```

## Unknowns and assumptions
Assumed: input is UTF-8.
"""

BRIEF_ZH = """## 目标
写个 md 转 html 的脚本

## 验收标准
运行后输出 html

## 边界
只用标准库

## 未知与假设
假设输入是 UTF-8
"""


class BriefParser(unittest.TestCase):
    def test_english_and_code_fences(self):
        brief = Brief.parse(BRIEF_EN)
        self.assertTrue(brief.complete)
        self.assertIn("markdown to HTML", brief.sections["goal"])
        self.assertIn("this heading is inside a code block", brief.sections["bounds"])
        self.assertNotIn("this heading", brief.sections["goal"])

    def test_chinese_and_crlf(self):
        self.assertTrue(Brief.parse(BRIEF_ZH.replace("\n", "\r\n")).complete)

    def test_bold_pseudo_headings_are_not_headings(self):
        text = "**Goal**\nx\n**Acceptance**\ny\n**Bounds**\nz\n**Unknowns and assumptions**\nw\n"
        self.assertFalse(Brief.parse(text).complete)

    def test_missing_or_unfilled(self):
        self.assertFalse(Brief.parse("## Goal\nx\n## Acceptance\ny\n## Bounds\nz\n").complete)
        self.assertFalse(Brief.parse(Brief({"goal": "x"}).render()).complete)
        self.assertIn("(unfilled)", Brief({"goal": "x"}).render())
        round_trip = Brief.parse(Brief.parse(BRIEF_EN).render("zh"))
        self.assertTrue(round_trip.complete)

    def test_aliases(self):
        text = "# Objective\nx\n# Acceptance criteria\ny\n# Scope\nz\n# Assumptions\nw\n"
        self.assertTrue(Brief.parse(text).complete)

    def test_alias_tables_are_written_normalised(self):
        # the tables are not normalised at import (start-up time): an alias written otherwise would
        # never match the heading it names
        tables = (flower._LEDGER_ALIASES, flower._BRIEF_ALIASES, flower._GOAL_ALIASES, flower._VERDICT_ALIASES)
        for table in tables:
            for alias in table:
                self.assertEqual(flower._norm_heading(alias), alias)
        self.assertEqual(flower.parse_sections("## 2. Current   Status:\nbusy\n", flower._LEDGER_ALIASES)[0],
                         {"status": "busy"})


class GoalParser(unittest.TestCase):
    def test_checks_and_unverifiable(self):
        goal = Goal.parse("# Goal\nmd2html works\n\n# Checks\n- `python md2html.py t.md` exits 0\n"
                          "2. output contains <pre>\n- [ ] renders fast [cannot verify here: no benchmark data]\n")
        self.assertTrue(goal.complete)
        self.assertEqual(len(goal.checks), 3)
        self.assertEqual(len(goal.unverifiable), 1)
        self.assertEqual(Goal.parse(goal.render()).checks, goal.checks)

    def test_incomplete(self):
        self.assertFalse(Goal.parse("# Goal\nx\n").complete)
        self.assertFalse(Goal.parse("# Checks\n- a\n").complete)
        self.assertTrue(Goal.parse("# 目标\nx\n# 检查\n- a\n").complete)


class VerdictParser(unittest.TestCase):
    def test_achieved(self):
        self.assertTrue(Verdict.parse("All 3 checks pass.\nVERDICT: achieved\n").achieved)
        self.assertTrue(Verdict.parse("**VERDICT: achieved**").achieved)

    def test_fail_closed(self):
        for reply in ["VERDICT: achieved (1 of 3 checks failed)",
                      "1 of 3 checks failed. Otherwise looks achieved.",
                      "VERDICT: achieved\nVERDICT: not_yet",
                      "verdict: maybe",
                      "```\nVERDICT: achieved\n```",
                      "",
                      "VERDICT: achieved\n## Failed checks\n- tests pass: 1 failure\n"]:
            with self.subTest(reply=reply):
                self.assertFalse(Verdict.parse(reply).achieved)

    def test_not_yet_with_reasons_and_failed_checks(self):
        v = Verdict.parse("## Failed checks\n- code blocks are highlighted\n\n## Reasons\nNo <pre> in output.\n\n"
                          "VERDICT: not_yet")
        self.assertEqual(v.status, "not_yet")
        self.assertEqual(v.failed_checks, ["code blocks are highlighted"])
        self.assertIn("No <pre>", v.reason)
        self.assertEqual(Verdict.parse("VERDICT: unreachable\n## Reasons\nneeds a GPU").status, "unreachable")


class LedgerParser(unittest.TestCase):
    def test_english(self):
        ledger = Ledger.parse(LEDGER_EN)
        self.assertEqual(ledger.problems(), [])
        self.assertIn("regex parser", ledger.get("dead_ends"))
        rendered = ledger.render("work", 2)
        self.assertTrue(rendered.startswith("# Handoff: work · generation 2"))
        self.assertNotIn("Handoff ledger", rendered)
        self.assertEqual(rendered.count("\n# "), 0)

    def test_chinese_aliases_and_crlf(self):
        text = ("# 交接账本\r\n## 任务状态\r\n在写解析器\r\n## 已经定下的\r\n只用标准库\r\n"
                "## 已试方案与失败原因\r\n正则不行\r\n## 进度与下一步\r\n运行 make test\r\n## 现场\r\nsrc/\r\n")
        ledger = Ledger.parse(text)
        self.assertEqual(ledger.problems(), [])
        self.assertIn("正则不行", ledger.get("dead_ends"))
        self.assertIn("## 下一步", ledger.render("干活", 1, "zh"))

    def test_body_lines_that_start_with_heading_words_and_fences(self):
        text = ("## Status\nStatus: fine. Next step is below.\n```\n## Next step\nnot a heading\n```\n"
                "## Next step\nrun it\n")
        ledger = Ledger.parse(text)
        self.assertIn("not a heading", ledger.get("status"))
        self.assertEqual(ledger.get("next_step"), "run it")

    def test_gate(self):
        self.assertIn("Next step is empty", Ledger.parse("## Status\nx\n").problems())
        self.assertTrue(any("placeholder" in p for p in Ledger.parse("## Status\nTODO\n## Next step\nx").problems()))
        self.assertTrue(any("placeholder" in p for p in Ledger.parse("## Status\nx\n## Next step\n同上").problems()))
        self.assertTrue(any("too long" in p for p in Ledger.parse("## Status\n" + "x" * 9000 + "\n## Next step\ny").problems()))

    def test_soft_problems_next_step_executable_and_sections_not_mixed(self):
        rows = [
            # (Dead ends, Next step, the soft problem expected or None)
            ("", "fix the parser", "nothing executable"),
            ("", "修复解析器", "nothing executable"),
            ("", "Run `make test`", None), ("", "edit src/parser.py first", None), ("", "运行 make test", None),
            ("", "open parser.py and fix it", None), ("", "$ pytest -x", None),
            ("- caching the AST: worked, now in place", "make test", "Dead ends holds what worked"),
            ("- 缓存 AST:成功了", "make test", "Dead ends holds what worked"),
            ("- regex parser: fails on nested lists", "make test", None),
            ("- memoising: it worked but didn't help", "make test", None),
            ("", "- [x] wrote the tokenizer\n- run `make test`", "Next step holds finished items"),
            ("", "- ✅ tokenizer\n- run `make test`", "Next step holds finished items"),
            ("", "- 已完成分词器\n- 运行 `make test`", "Next step holds finished items"),
            ("", "when that is done, run `make test`", None),
        ]
        for dead_ends, next_step, expected in rows:
            with self.subTest(dead_ends=dead_ends, next_step=next_step):
                ledger = Ledger.parse(f"## Status\nx\n## Dead ends\n{dead_ends}\n## Next step\n{next_step}\n")
                self.assertEqual(ledger.problems(soft=False), [])   # soft: never a degraded handoff
                found = ledger.problems()
                if expected is None:
                    self.assertEqual(found, [])
                else:
                    self.assertEqual(len(found), 1, found)
                    self.assertIn(expected, found[0])

    def test_secrets_never_survive(self):
        text = LEDGER_EN.replace("src/parser.py", "src/parser.py (key sk-ant-api03-SECRETSECRETSECRET123)")
        ledger = Ledger.parse(text)
        self.assertNotIn("SECRETSECRET", ledger.render("work", 1))


if __name__ == "__main__":
    unittest.main()
