"""What the CLI puts before the coordinator (issue 39: its context at the end of a job), on the real
CLI against tests/fakeapi.py. The coordinator's requests carry no auto-memory section (it tells the
model to Write, which the rules hook denies the coordinator), list only flower's worker among the
agent types (an Agent call that names none goes to the worker), have no "fork" type and no
background launch in the Agent tool (flower runs every call in the foreground), and get no "the
user hasn't heard from you" reminder however many turns the job takes; a worker still writes files
(the deny rules only govern spawning through Agent) and still starts a process with a shell's ``&``
that its next command talks to (the CLI's own background tasks are off). The control: the
same coordinator without those settings is sent all of them, so their absence is not the CLI's default.

Measured facts kept here: the session's ``tools`` binds the workers too (a worker whose Write is not
in the session's list is told "Write is disabled for this session, in subagents as well as here"),
and the CLI wraps a worker's report in its fixed hand-back frame after PostToolUse hooks ran (a hook
that replaces the report's text still gets the frame), so neither is cut."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
import unittest

import flower
from tests.fakeapi import FakeAnthropic, text, tool
from tests.helpers import E2ECase, HAVE_SDK, SKIP

MEMORY = "persistent file-based memory"          # the CLI's auto-memory section of the system prompt
FORK = "forks yourself"                           # the CLI's Agent tool text on the "fork" type
BACKGROUND = '"run_in_background"'                # the Agent tool's parameter (flower sets it false)
SILENT = "The user hasn't heard from you"         # the CLI's reminder every few silent turns
TURNS = 8                                         # tool turns: enough for the reminder to come (it did by 5)


def listed(body: dict, agent_type: str) -> bool:
    """Whether a request lists ``agent_type`` among the agent types of the Agent tool."""
    return f"- {agent_type}: " in FakeAnthropic.messages_text(body)


def agent_tool(body: dict) -> str:
    """The Agent tool's definition as sent."""
    return json.dumps([t for t in body.get("tools", []) if t.get("name") == "Agent"], ensure_ascii=False)


def system_text(body: dict) -> str:
    return json.dumps(body.get("system", ""), ensure_ascii=False)


class Sides:
    """A responder: the coordinator delegates ``TURNS`` times (the first worker writes a file; the
    second call names no agent type); every body logged by side."""

    def __init__(self, ws: str):
        self.ws = ws
        self.main: list[dict] = []
        self.sub: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict):
        with self.lock:
            if flower.text("worker_instructions")[:30] in system_text(body):
                self.sub.append(body)
                if len(self.sub) == 1:
                    return tool("Write", {"file_path": os.path.join(self.ws, "w.txt"), "content": "hi\n"})
                return text("Done: report in the workbench.")
            self.main.append(body)
            if len(self.main) > TURNS:
                return text("all done")
            call = {"description": "a piece", "prompt": "Do the next piece."}
            return tool("Agent", call if len(self.main) == 2 else dict(call, subagent_type="worker"))


@unittest.skipUnless(HAVE_SDK, SKIP)
class CoordinatorContext(E2ECase, unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.env.pop("FLOWER_NO_DELEGATE", None)

    def run_job(self, plain: bool = False) -> Sides:
        sides = Sides(self.ws)
        self.api.responder = sides
        rt = self._runtime()
        spec = flower.coordinator(rt.paths, instructions="You do the work.")
        if plain:
            spec = dataclasses.replace(spec, env={}, disallowed_tools=[])
        result = asyncio.run(rt.run(spec, "Do the job."))
        rt.close()
        self.assertTrue(result.ok, result.error)
        self.assertEqual(len(sides.main), TURNS + 1)
        return sides

    def test_the_coordinator_is_sent_none_of_what_it_cannot_use(self):
        sides = self.run_job()
        for body in sides.main:
            self.assertFalse(MEMORY in system_text(body))
            self.assertTrue(listed(body, "worker"))
            self.assertFalse(FORK in agent_tool(body))
            self.assertFalse(BACKGROUND in agent_tool(body))
            for name in flower.CLI_AGENT_TYPES:
                self.assertFalse(listed(body, name), name)
        self.assertFalse(SILENT in FakeAnthropic.messages_text(sides.main[-1]))
        # every call reached a worker, the one that named no type too; no call was refused
        self.assertFalse('"is_error": true' in FakeAnthropic.messages_text(sides.main[-1]))
        # the workers keep their hands: the deny rules govern spawning, not tools
        self.assertEqual(len(sides.sub), TURNS + 1)
        self.assertEqual(self.read("w.txt"), "hi\n")
        self.assertIn("Write", [t["name"] for t in sides.sub[0].get("tools", [])])

    def test_control_without_those_settings_the_cli_sends_all_three(self):
        sides = self.run_job(plain=True)
        self.assertIn(MEMORY, system_text(sides.main[0]))
        self.assertTrue(listed(sides.main[0], "general-purpose"))
        self.assertIn(FORK, agent_tool(sides.main[0]))
        self.assertIn(BACKGROUND, agent_tool(sides.main[0]))
        self.assertIn(SILENT, FakeAnthropic.messages_text(sides.main[-1]))


# a background process that waits for "go", then writes "done"; and the command that says "go" and
# waits (at most 60 s) for "done": no timing is assumed
WAITER = ("nohup python3 -c \"import os, time; t = time.time(); "
          "[time.sleep(0.05) for _ in iter(lambda: os.path.exists('go') or time.time() - t > 60, True)]; "
          "open('done', 'w').write('from the background')\" >/dev/null 2>&1 &")
GO = ("python3 -c \"import os, time; open('go', 'w').close(); t = time.time(); "
      "[time.sleep(0.05) for _ in iter(lambda: os.path.exists('done') or time.time() - t > 60, True)]; "
      "print(open('done').read() if os.path.exists('done') else 'NOT-DONE')\"")


@unittest.skipUnless(HAVE_SDK, SKIP)
class WorkerShell(E2ECase, unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.env.pop("FLOWER_NO_DELEGATE", None)

    def test_a_worker_still_runs_a_process_in_the_background_of_its_shell(self):
        sub = [tool("Bash", {"command": WAITER}), tool("Bash", {"command": GO}), text("Done.")]
        main = [tool("Agent", {"description": "bg", "prompt": "start and use it", "subagent_type": "worker"}),
                text("all done")]
        sent = []

        def respond(body):
            sent.append(body)
            worker = flower.text("worker_instructions")[:30] in system_text(body)
            return (sub if worker else main).pop(0)

        self.api.responder = respond
        rt = self._runtime()
        result = asyncio.run(rt.run(flower.coordinator(rt.paths, instructions="You do the work."), "go"))
        rt.close()
        self.assertTrue(result.ok, result.error)
        self.assertEqual(self.read("done"), "from the background")
        last_worker = [b for b in sent if flower.text("worker_instructions")[:30] in system_text(b)][-1]
        self.assertIn("from the background", FakeAnthropic.messages_text(last_worker))


class CoordinatorEnv(unittest.TestCase):

    def test_the_users_own_setting_wins(self):
        self.assertEqual(flower.coordinator_env({}), flower.COORDINATOR_ENV)
        mine = flower.coordinator_env({"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "0"})
        self.assertNotIn("CLAUDE_CODE_DISABLE_AUTO_MEMORY", mine)
        self.assertEqual(mine["CLAUDE_CODE_SILENT_TURN_REMINDER"], "0")

    def test_an_agent_call_that_names_no_type_goes_to_the_worker(self):
        self.assertEqual(flower.agent_call_input({"prompt": "x"}, "R")["subagent_type"], flower.WORKER_NAME)
        self.assertEqual(flower.agent_call_input({"prompt": "x", "subagent_type": "mine"}, "R")["subagent_type"], "mine")

    def test_the_coordinator_spec_carries_them(self):
        spec = flower.coordinator(flower.Paths("/nonexistent-ws"))
        for name, value in flower.coordinator_env().items():
            self.assertEqual(spec.env[name], value)
        self.assertEqual(spec.disallowed_tools, flower.coordinator_denied_agents())


if __name__ == "__main__":
    unittest.main()
