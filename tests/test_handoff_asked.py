"""Hand off on purpose: ``flower.py handoff`` makes the work step hand over at its next boundary."""

import asyncio
import json
import os
import subprocess
import unittest

import flower
from flower import HandoffPolicy
from tests.fakeapi import FakeAnthropic, text, tool
from tests.fakesdk import FAKE
from tests.helpers import E2ECase, FakeRuntime, RUN_FLOWER, HAVE_SDK, LEDGER_EN, SKIP, freeze_front


class AskedHandoff(FakeRuntime, unittest.TestCase):
    """The flag on the fake SDK (window 200K: the levels stay far below the threshold)."""

    def setUp(self):
        super().setUp()
        self.rt = self.runtime(handoff=HandoffPolicy(window=200_000))
        self.flag = flower.handoff_flag(self.rt.paths)

    def handoffs(self, phase):
        return [e for e in self.events if e.kind == "handoff" and e.data.get("phase") == phase]

    def test_flag_hands_over_at_the_next_answer_and_goes_only_after(self):
        def asked_during_first_tool(event):
            self.events.append(event)
            if event.kind == "tool_result" and not os.path.exists(self.flag):
                flower.ask_handoff(self.rt.paths)
        self.rt.on_event = asked_during_first_tool
        seen_at_ritual = []

        def ritual(prompt, options, loaded):
            seen_at_ritual.append(os.path.exists(self.flag))
            return [("text", LEDGER_EN, 30_000)]
        FAKE.turns = [
            [("tool", "Bash", {"command": "make"}, "built", 20_000),
             ("tool", "Bash", {"command": "make test"}, "passed", 21_000),   # the answer after the ask
             ("tool", "Bash", {"command": "never runs"}, "x", 22_000)],
            ritual,
            [("text", "finished in the new session", 5_000)],
        ]
        result = asyncio.run(self.rt.run(flower.AgentSpec("work"), "do it", lineage_key="work"))
        self.assertTrue(result.ok, result.error)
        prompts = [c["prompt"] for c in FAKE.calls]
        self.assertEqual(len(prompts), 3)
        self.assertEqual(prompts[1], flower.text("handoff_prompt"))          # the ritual, as usual
        self.assertIn("Run `python -m pytest tests/test_parser.py`", prompts[2])   # the carry
        self.assertIsNone(FAKE.calls[2]["options"].resume)                   # a fresh session
        self.assertEqual(FAKE.hook_stops, 1)                                 # at a boundary, not under a tool
        self.assertEqual(seen_at_ritual, [True])                             # kept until handed over
        self.assertFalse(os.path.exists(self.flag))                          # then gone
        asked = self.handoffs("asked")
        self.assertEqual(len(asked), 1)
        self.assertEqual(asked[0].data["reason"], "asked")
        self.assertEqual(len(self.handoffs("done")), 1)
        self.assertEqual(result.generations, 1)

    def test_flag_is_for_the_work_step_only(self):
        flower.ask_handoff(self.rt.paths)
        FAKE.turns = [[("tool", "Bash", {"command": "ls"}, "x", 10_000), ("text", "goal written", 11_000)]]
        result = asyncio.run(self.rt.run(flower.AgentSpec("goal"), "write it", lineage_key="goal"))
        self.assertTrue(result.ok, result.error)
        self.assertEqual(len(FAKE.calls), 1)
        self.assertTrue(os.path.exists(self.flag))   # waits for the work step

    def test_a_wake_with_the_flag_starts_from_a_carry(self):
        FAKE.turns = [[("text", "first run", 10_000)]]
        first = asyncio.run(self.rt.run(flower.AgentSpec("work"), "do it", lineage_key="work"))
        flower.ask_handoff(self.rt.paths)
        before = len(FAKE.calls)
        FAKE.turns = [[("text", "carried on", 3_000)]]
        second = asyncio.run(self.rt.run(flower.AgentSpec("work"), "go on", resume=first.session_id,
                                         lineage_key="work"))
        self.assertTrue(second.ok, second.error)
        self.assertEqual(second.retired, [first.session_id])
        self.assertEqual(len(FAKE.calls) - before, 1)             # the old session is not resumed at all
        self.assertIsNone(FAKE.calls[-1]["options"].resume)
        self.assertIn("first run", FAKE.calls[-1]["prompt"])      # the carry's recent thread
        self.assertFalse(os.path.exists(self.flag))


@unittest.skipUnless(HAVE_SDK, SKIP)
class AskedHandoffLive(E2ECase, unittest.TestCase):
    """``flower.py handoff`` from another process while ``go`` runs a multi-tool work step."""

    def handoff(self):
        p = subprocess.run([*RUN_FLOWER, "handoff"], cwd=self.ws, env=self.env,
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_handoff_from_another_shell_hands_over_at_the_next_boundary(self):
        def ask_then_tool(body):
            self.handoff()   # while the model "thinks": the answer that follows is the last of the session
            return tool("Bash", {"command": "echo tool-1"})
        self.roles.work = [tool("Bash", {"command": "echo tool-0"}), ask_then_tool,
                           tool("Bash", {"command": "echo tool-2"}), text("all done")]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.flower("--no-goal", "--json")
        order = [role for role, _ in self.roles.log if role in ("work", "ritual")]
        self.assertEqual(order, ["work", "work", "ritual", "work", "work"])
        ritual = next(body for role, body in self.roles.log if role == "ritual")
        self.assertIn("tool-1", FakeAnthropic.messages_text(ritual))   # the tool in flight ran to its end
        successor = self.roles.bodies("work")[2]
        sent = FakeAnthropic.messages_text(successor)
        self.assertIn("You take over unfinished work", sent)             # a fresh session started from
        self.assertIn("NEXT-STEP-MARK", sent)                            # the ledger of the ritual
        self.assertNotIn("tool_result", sent)                            # not the old transcript
        self.assertNotIn("echo tool-0", sent)
        events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        asked = [e for e in events if e["kind"] == "handoff" and e["data"].get("phase") == "asked"]
        self.assertEqual([e["data"]["reason"] for e in asked], ["asked"])
        self.assertEqual(len([e for e in events if e["kind"] == "handoff" and e["data"].get("phase") == "done"]), 1)
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".flower", "handoff")))

    def test_go_handoff_on_a_wake_starts_the_work_step_from_a_carry(self):
        self.roles.work = [tool("Bash", {"command": "echo OLD-RUN-MARK"}), text("first run done")]
        freeze_front(self.ws)   # a finished job to wake: its work and judge as a fresh go leaves them
        self.flower()
        before = len(self.roles.bodies("work"))
        self.roles.work = [text("carried on")]
        self.flower("also add a footer", "--handoff")
        later = self.roles.bodies("work")[before:]
        self.assertTrue(later)
        sent = FakeAnthropic.messages_text(later[0])
        self.assertIn("You take over unfinished work", sent)   # a carry, not the old session resumed
        self.assertNotIn("tool_result", sent)
        self.assertEqual(self.roles.bodies("ritual"), [])       # no live session to ask: the carry is built
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".flower", "handoff")))


if __name__ == "__main__":
    unittest.main()
