"""The starter flow (clarify -> goal -> work + judge) and wake semantics, on the fake SDK."""

import asyncio
import json
import os
import unittest

import flower
from flower import Runtime, Resilience, starter_flow, wake_state, Manifest, Human
from tests import fakesdk
from tests.fakesdk import FAKE, MD2HTML_BRIEF, MD2HTML_GOAL, Brain

BRIEF, GOAL = MD2HTML_BRIEF, MD2HTML_GOAL


def read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


class ScriptedHuman(Human):
    def __init__(self, answers):
        self.answers = list(answers)
        self.asked = []
        self.options = []

    async def ask(self, question):
        self.asked.append(question)
        return self.answers.pop(0)

    async def choose(self, question, options):
        self.asked.append(question)
        self.options.append(options)
        return self.answers.pop(0)


class StarterFlow(fakesdk.FakeWorkspace, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.brain = Brain()
        self.rts = []

    def tearDown(self):
        for rt in self.rts:
            rt.close()
        super().tearDown()

    def wake(self, ask=None, *, wake_sentence=None, human=None, rounds=3, use_goal=True, lang="en"):
        FAKE.turns = [self.brain] * 20
        rt = Runtime(workspace=self.ws, run_dir=self.run_dir, resilience=Resilience(probe=False), lang=lang)
        self.rts.append(rt)
        flow = starter_flow(ask, rt=rt, wake_sentence=wake_sentence, human=human, rounds=rounds, use_goal=use_goal)
        return rt, asyncio.run(flow.run(rt))

    def test_first_run(self):
        rt, ctx = self.wake("write md2html")
        self.assertEqual(self.brain.roles, ["clarify", "goal", "work", "judge"])
        state = wake_state(self.ws, self.run_dir)
        self.assertTrue(state["brief"] and state["goal"])
        self.assertEqual(state["checks"], 2)
        self.assertEqual(set(state["steps"]), {"clarify", "goal", "work"})
        self.assertNotIn(ctx["_judges"][0], state["steps"].values())
        steps = [r["step"] for r in Manifest.read(self.run_dir)]
        self.assertEqual(steps, ["clarify", "goal", "work", "work·judge#1"])
        self.assertIn("Task: write md2html", FAKE.calls[0]["prompt"])
        self.assertIn("No human is available", FAKE.calls[0]["prompt"])
        self.assertEqual(FAKE.calls[0]["options"].tools, [])  # the clarifier writes no files

    def test_empty_wake_changes_nothing_and_costs_nothing_extra(self):
        self.wake("write md2html")
        with open(rt_brief := os.path.join(self.ws, ".flower/notes/brief.md"), encoding="utf-8") as fh:
            brief_before = fh.read()
        self.brain.roles.clear()
        FAKE.calls.clear()
        rt, ctx = self.wake(None)
        self.assertEqual(self.brain.roles, ["work", "judge"])
        self.assertEqual(FAKE.calls[0]["prompt"], flower.text("work_resume"))
        self.assertTrue(FAKE.calls[0]["options"].resume)
        with open(rt_brief, encoding="utf-8") as fh:
            self.assertEqual(fh.read(), brief_before)
        self.assertEqual(ctx["_woke"], 2)

    def test_wake_sentence_lands_in_three_places(self):
        _, first = self.wake("write md2html")
        self.brain.roles.clear()
        FAKE.calls.clear()
        rt, ctx = self.wake(None, wake_sentence="also support tables")
        # (1) the brief, under a dated heading, still complete
        brief = read(os.path.join(self.ws, ".flower/notes/brief.md"))
        self.assertIn("### Added on wake", brief)
        self.assertIn("also support tables", brief)
        self.assertTrue(flower.Brief.parse(brief).complete)
        # (3) the goal is re-derived from the amended brief; (2) the work step is resumed with the sentence
        self.assertEqual(self.brain.roles, ["goal", "work", "judge"])
        self.assertIn("also support tables", FAKE.calls[0]["prompt"])
        self.assertTrue(FAKE.calls[1]["prompt"].startswith("also support tables"))   # then the new goal
        self.assertEqual(FAKE.calls[1]["options"].resume, first["_sessions"]["work"])

    def test_credentials_never_reach_a_prompt(self):
        self.wake("deploy with key sk-ant-api03-SECRETSECRETSECRET99")
        self.wake(None, wake_sentence="also use token=abcdef123456")
        sent = json.dumps([c["prompt"] for c in FAKE.calls])
        self.assertNotIn("SECRETSECRETSECRET99", sent)
        self.assertNotIn("abcdef123456", sent)
        self.assertIn("[REDACTED]", sent)
        self.assertNotIn("abcdef123456", read(os.path.join(self.ws, ".flower/notes/brief.md")))

    def test_not_yet_then_achieved(self):
        self.brain.verdicts = ["## Failed checks\n- code blocks get <pre>\n## Reasons\nno pre tag\nVERDICT: not_yet",
                               "VERDICT: achieved"]
        rt, ctx = self.wake("write md2html")
        self.assertEqual(self.brain.roles, ["clarify", "goal", "work", "judge", "work", "judge"])
        round_call = FAKE.calls[4]
        self.assertIn("code blocks get <pre>", round_call["prompt"])
        self.assertIn("no pre tag", round_call["prompt"])
        self.assertNotIn("md2html works", round_call["prompt"])  # only reasons and failed checks
        self.assertEqual(round_call["options"].resume, ctx["_sessions"]["work"])
        self.assertEqual(len(set(ctx["_judges"])), 2)
        self.assertTrue(all(j not in wake_state(self.ws, self.run_dir)["steps"].values() for j in ctx["_judges"]))
        steps = [r["step"] for r in Manifest.read(self.run_dir)]
        self.assertEqual(steps[2:], ["work", "work·judge#1", "work#round2", "work·judge#2"])

    def test_rounds_are_limited(self):
        self.brain.verdicts = ["VERDICT: not_yet"] * 5
        with self.assertRaises(flower.StepAbort):
            self.wake("write md2html", rounds=2)
        self.assertEqual(self.brain.roles.count("judge"), 2)

    def test_rounds_reset_on_every_wake(self):
        self.brain.verdicts = ["VERDICT: not_yet"] * 2
        with self.assertRaises(flower.StepAbort):
            self.wake("write md2html", rounds=2)
        self.brain.roles.clear()
        self.brain.verdicts = ["VERDICT: not_yet", "VERDICT: achieved"]
        rt, ctx = self.wake(rounds=2)   # the next wake has its two rounds again
        self.assertEqual(self.brain.roles, ["work", "judge", "work", "judge"])
        self.assertTrue(ctx["_verdict"].achieved)

    def test_unreachable_without_a_human_stops(self):
        self.brain.verdicts = ["## Reasons\nneeds a GPU\nVERDICT: unreachable"]
        with self.assertRaises(flower.StepAbort) as caught:
            self.wake("write md2html")
        self.assertIn("unreachable", str(caught.exception))

    def test_unreachable_with_a_human(self):
        """"keep working: the judge is wrong" resumes the worker with that as feedback."""
        self.brain.verdicts = ["## Reasons\nneeds a GPU\nVERDICT: unreachable", "VERDICT: achieved"]
        human = ScriptedHuman([flower.text("choice_keep_working")])
        rt, ctx = self.wake("write md2html", human=human)
        self.assertTrue(any("unreachable" in q for q in human.asked))
        self.assertEqual(self.brain.roles, ["clarify", "goal", "work", "judge", "work", "judge"])
        again = FAKE.calls[4]
        self.assertIn("the judge is wrong", again["prompt"])
        self.assertIn("needs a GPU", again["prompt"])
        self.assertEqual(again["options"].resume, FAKE.calls[2]["options"].session_id)
        self.assertTrue(ctx["_verdict"].achieved)
        self.assertEqual(ctx["work"], "worked")

    def test_unreachable_choices_say_their_consequence(self):
        human = ScriptedHuman([flower.text("choice_accept")])
        self.brain.verdicts = ["VERDICT: unreachable"]
        rt, ctx = self.wake("write md2html", human=human)
        self.assertEqual(human.options, [["accept the work as it is: the step passes", "amend the goal",
                                          "keep working: the judge is wrong", "stop"]])
        self.assertEqual(self.brain.roles, ["clarify", "goal", "work", "judge"])  # accepted: the step passes
        self.assertEqual(ctx["work"], "worked")
        self.assertEqual(ctx["_verdict"].status, "unreachable")

    def test_unreachable_then_stop(self):
        self.brain.verdicts = ["VERDICT: unreachable", "VERDICT: achieved"]
        human = ScriptedHuman([flower.text("choice_stop")])
        with self.assertRaises(flower.StepAbort) as caught:
            self.wake("write md2html", human=human)
        self.assertIn("chose to stop", str(caught.exception))
        self.assertEqual(self.brain.roles, ["clarify", "goal", "work", "judge"])

    def test_unreachable_choices_in_chinese(self):
        self.brain.verdicts = ["VERDICT: unreachable", "VERDICT: achieved"]
        human = ScriptedHuman([flower.text("choice_keep_working", "zh")])
        rt, ctx = self.wake("write md2html", human=human, lang="zh")
        self.assertEqual(human.options, [[flower.text(k, "zh") for k in flower.UNREACHABLE_CHOICES]])
        self.assertIn("判定者认为目标无法达成", human.asked[0])
        self.assertEqual(self.brain.roles.count("work"), 2)
        self.assertIn("判定者判错了", FAKE.calls[4]["prompt"])

    def test_amend_goal_with_a_human(self):
        self.brain.verdicts = ["VERDICT: unreachable", "VERDICT: achieved"]
        human = ScriptedHuman(["amend the goal", "just headings"])
        rt, ctx = self.wake("write md2html", human=human)
        self.assertIn("just headings", read(os.path.join(self.ws, ".flower/notes/goal.md")))
        self.assertEqual(self.brain.roles, ["clarify", "goal", "work", "judge", "work", "judge"])
        self.assertIn("amended the goal: just headings", FAKE.calls[4]["prompt"])

    def test_clarifier_has_the_ask_tool_with_a_human(self):
        rt, ctx = self.wake("write md2html", human=ScriptedHuman([]))
        options = FAKE.calls[0]["options"]
        self.assertIn("flower", options.mcp_servers)
        self.assertIn("mcp__flower__ask", options.allowed_tools)

    def test_new_archives_then_fresh_run(self):
        rt, first = self.wake("write md2html")
        paths = rt.paths
        target = flower.archive_dir(paths.notes_dir)
        moved = rt.lineage.archive(target, extra=[paths.brief, paths.goal])
        self.assertEqual(sorted(os.path.basename(m) for m in moved), ["brief.md", "goal.md", "lineage.json"])
        self.brain.roles.clear()
        rt2, second = self.wake("another thing")
        self.assertEqual(self.brain.roles, ["clarify", "goal", "work", "judge"])
        self.assertNotEqual(first["_sessions"]["work"], second["_sessions"]["work"])
        self.assertEqual(second["_woke"], 1)

    def test_no_goal(self):
        rt, ctx = self.wake("write md2html", use_goal=False)
        self.assertEqual(self.brain.roles, ["clarify", "work"])


if __name__ == "__main__":
    unittest.main()
