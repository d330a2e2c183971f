"""Issue 42: on a wake whose sentence re-derived the goal, the work step gets the sentence and the new
checks (fake SDK)."""

import unittest

import asyncio

import flower
from tests import fakesdk
from tests.fakesdk import FAKE
from tests.fakesdk import Brain

NEW_GOAL = "# Goal\nmd2html with tables\n\n# Checks\n- `python md2html.py t.md` prints <table> TABLE-CHECK-MARK"


class WakeSendsTheNewGoal(fakesdk.FakeWorkspace, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.brain = Brain()
        self.rts = []

    def tearDown(self):
        for rt in self.rts:
            rt.close()
        super().tearDown()

    def wake(self, ask=None, *, wake_sentence=None):
        FAKE.turns = [self.brain] * 20
        rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, resilience=flower.Resilience(probe=False))
        self.rts.append(rt)
        return asyncio.run(flower.starter_flow(ask, rt=rt, wake_sentence=wake_sentence).run(rt))

    def test_the_work_step_gets_the_sentence_and_the_new_checks(self):
        self.wake("write md2html")
        self.brain.goal = NEW_GOAL
        FAKE.calls.clear()
        self.brain.roles.clear()
        self.wake(None, wake_sentence="also support tables")
        self.assertEqual(self.brain.roles, ["goal", "work", "judge"])
        work = FAKE.calls[1]["prompt"]
        self.assertTrue(work.startswith("also support tables"), work)
        self.assertIn("TABLE-CHECK-MARK", work)
        self.assertIn("re-derived", work)

    def test_an_empty_wake_keeps_the_plain_resume_prompt(self):
        self.wake("write md2html")
        FAKE.calls.clear()
        self.wake(None)
        self.assertEqual(FAKE.calls[0]["prompt"], flower.text("work_resume"))


if __name__ == "__main__":
    unittest.main()
