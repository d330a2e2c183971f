"""End-to-end tier: the real claude-agent-sdk and its bundled CLI, driven through flower, against the
fake Anthropic Messages API in tests/fakeapi.py (127.0.0.1 only). Each scenario asserts on the files
on disk and on what the fake server was sent (what the model saw). Skipped without the SDK."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import threading
import time
import unittest

import flower
from tests.fakeapi import FakeAnthropic, Reply, text, tool, error, last_user_text  # noqa: F401 (re-exported)
from tests.helpers import E2ECase, HAVE_SDK, SKIP, freeze_front, role_of


@unittest.skipUnless(HAVE_SDK, SKIP)
class EndToEnd(E2ECase, unittest.TestCase):
    # -- scenarios --

    def test_01_fresh_run_to_achieved_then_resume_in_a_second_process(self):
        hello = os.path.join(self.ws, "hello.txt")
        self.roles.work = [tool("Write", {"file_path": hello, "content": "hi\n"}), text("wrote WORK-DONE-MARK")]
        p = self.flower("write hello")
        self.assertIn("done", p.stderr)
        with open(hello) as fh:
            self.assertEqual(fh.read(), "hi\n")
        lineage = self.lineage()
        self.assertEqual(lineage["workspace"], os.path.realpath(self.ws))
        self.assertEqual(lineage["woke"], 1)
        self.assertEqual(set(lineage["steps"]), {"clarify", "goal", "work"})
        self.assertTrue(flower.Brief.parse(self.read(".flower", "notes", "brief.md")).complete)
        self.assertEqual(flower.Goal.parse(self.read(".flower", "notes", "goal.md")).checks, ["hello.txt contains hi"])
        self.assertEqual([r["step"] for r in self.manifest()], ["clarify", "goal", "work", "work·judge#1"])
        self.assertTrue(all(r["ok"] for r in self.manifest()))
        # the session is stored under the SDK's project key for the workspace
        import claude_agent_sdk
        key = claude_agent_sdk.project_key_for_directory(self.ws)
        store = flower.SqliteSessionStore(os.path.join(self.ws, ".flower", "sessions.db"))
        self.assertTrue(store.has_session(key, lineage["steps"]["work"]))
        store.close()
        judge_sid = [r for r in self.manifest() if r["step"] == "work·judge#1"][0]["session_id"]
        self.assertNotIn(judge_sid, lineage["steps"].values())
        # an empty wake after an achieved verdict pays nothing
        requests = len(self.api.requests)
        p = self.flower()
        self.assertIn("nothing new", p.stderr)
        self.assertEqual(len(self.api.requests), requests)
        # a second process with something new resumes the same work session; the earlier turns are sent back
        before = len(self.roles.bodies("work"))
        self.flower("also say bye")
        self.assertEqual(self.lineage()["steps"]["work"], lineage["steps"]["work"])
        resumed = self.roles.bodies("work")[before]
        self.assertIn("WORK-DONE-MARK", FakeAnthropic.messages_text(resumed))
        said = last_user_text(resumed)   # the sentence, then the goal it re-derived (issue 42)
        self.assertIn("also say bye", said)
        self.assertLess(said.index("also say bye"), said.index("hello.txt contains hi"))
        self.assertEqual(self.lineage()["woke"], 2)

    def test_02_kill_9_mid_tool_then_resume(self):
        slow = "python3 -c \"import time; time.sleep(60)\""   # still running at the kill, however slow the machine
        self.roles.work = [tool("Bash", {"command": slow}, say="KILL-MARK running the slow step"), text("after kill")]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        proc = self.spawn("--no-goal")

        def tool_use_stored():
            try:
                sid = self.lineage()["steps"].get("work")
                return sid and any(b.get("type") == "tool_use" for e in self.stored(sid)
                                   for b in flower.blocks_of(e) if isinstance(b, dict))
            except (OSError, ValueError, sqlite3.Error):
                return False
        self.wait_for(tool_use_stored, what="the tool_use to be mirrored")
        work_sid = self.lineage()["steps"]["work"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        # state on disk is sound
        self.manifest()
        db = sqlite3.connect(os.path.join(self.ws, ".flower", "sessions.db"))
        self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        db.close()
        before = len(self.roles.bodies("work"))
        self.flower("--no-goal")
        self.assertEqual(self.lineage()["steps"]["work"], work_sid)
        resumed = FakeAnthropic.messages_text(self.roles.bodies("work")[before])
        self.assertIn("KILL-MARK", resumed)            # the tool_use turn and everything before it
        self.assertIn("Write hello.txt", resumed)      # the brief of the first prompt
        self.assertNotIn("Tool call interrupted", resumed)

    def test_03_kill_9_before_the_first_reply(self):
        """Killed while clarify waits for its first reply: the next run resumes that same clarify
        session with the clarify resume prompt, and the earlier prompt is sent back to the model."""
        original = self.roles.__call__

        def stalling(body):
            if role_of(body) == "clarify" and not getattr(self, "_stalled", False):
                self._stalled = True
                return Reply(stall=30)
            return original(body)
        self.api.responder = stalling
        proc = self.spawn("write hello")
        self.wait_for(lambda: getattr(self, "_stalled", False), what="the first request")

        def clarify_stored():
            try:
                return bool(self.stored(self.lineage()["steps"]["clarify"]))
            except (OSError, ValueError, KeyError, sqlite3.Error):
                return False
        self.wait_for(clarify_stored, what="the clarify prompt to be mirrored (eager flush)")
        clarify_sid = self.lineage()["steps"]["clarify"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.flower()
        self.assertEqual([r["step"] for r in self.manifest()][-4:], ["clarify", "goal", "work", "work·judge#1"])
        self.assertEqual(self.lineage()["steps"]["clarify"], clarify_sid)
        self.assertEqual([r for r in self.manifest() if r["step"] == "clarify"][-1]["session_id"], clarify_sid)
        resumed = self.roles.bodies("clarify")[0]
        self.assertEqual(last_user_text(resumed).strip().splitlines()[-1], flower.text("clarify_resume"))
        self.assertIn("Task: write hello", FakeAnthropic.messages_text(resumed))   # the earlier history
        self.assertEqual(len(self.roles.bodies("clarify")), 1)

    def test_03b_kill_9_between_steps(self):
        original = self.roles.__call__

        def stall_goal(body):
            if role_of(body) == "goal" and not getattr(self, "_stalled", False):
                self._stalled = True
                self.roles.log.append(("goal", body))
                return Reply(stall=30)
            return original(body)
        self.api.responder = stall_goal
        proc = self.spawn("write hello")
        self.wait_for(lambda: getattr(self, "_stalled", False), what="the goal request")

        def goal_stored():
            try:
                return bool(self.stored(self.lineage()["steps"]["goal"]))
            except (OSError, ValueError, KeyError, sqlite3.Error):
                return False
        self.wait_for(goal_stored, what="the goal prompt to be mirrored (eager flush)")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.assertTrue(flower.Brief.parse(self.read(".flower", "notes", "brief.md")).complete)
        goal_sid = self.lineage()["steps"]["goal"]
        self.flower()
        self.assertEqual(len(self.roles.bodies("clarify")), 1)          # the frozen brief is not asked again
        self.assertEqual(self.lineage()["steps"]["goal"], goal_sid)     # the goal session is continued
        self.assertEqual([r["step"] for r in self.manifest()], ["clarify", "goal", "work", "work·judge#1"])

    def test_13_ask_tool_reaches_the_human(self):
        self.roles.work = [tool("mcp__flower__ask", {"question": "Tabs or spaces?"}), text("noted")]
        asked = []

        async def human(question):
            asked.append(question)
            return "ANSWER-MARK tabs"
        rt = self._runtime()
        spec = flower.AgentSpec("work", instructions="You do the work.", tools=[], ask=human, permission_mode="default")
        result = asyncio.run(rt.run(spec, "ask me"))
        rt.close()
        self.assertTrue(result.ok, result.error)
        self.assertEqual(asked, ["Tabs or spaces?"])
        self.assertIn("ANSWER-MARK tabs", FakeAnthropic.messages_text(self.roles.bodies("work")[-1]))

    def test_12_doctor_all_ok(self):
        p = self.flower("doctor")
        lines = p.stdout.strip().splitlines()
        self.assertTrue(all(line.startswith("OK") for line in lines), p.stdout)
        self.assertEqual(len(lines), 8)   # the last says which project settings the agents read
        self.assertIn("settings ok", p.stdout)
        self.assertRegex(p.stdout, r"endpoint 127\.0\.0\.1:\d+ reachable")
        self.assertNotIn("sk-test", p.stdout)

    def test_04_outage_mid_turn_waits_and_resumes_without_error_noise(self):
        port = self.api.port
        state = {}

        def go_down(body):
            # the request after the tool round: the endpoint goes away for 15 s, this answer is lost
            state["down"] = time.time()
            threading.Thread(target=self._outage, args=(15.0,), daemon=True).start()
            return Reply(drop=True)
        self.roles.work = [tool("Bash", {"command": "echo OUTAGE-MARK"}), go_down, text("finished after the outage")]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.flower("--json", "--no-goal", env={"FLOWER_MAX_ATTEMPTS": "4"})
        events = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual(len([e for e in events if e["kind"] == "retry"]), 1)
        self.assertTrue(any(e["kind"] == "result" for e in events))
        row = self.work_row()
        self.assertTrue(row["ok"], row)
        self.assertEqual((row["attempts"], row["resumed"]), (2, True))
        self.assertIn("retry", p.stderr)
        resumed = self.roles.bodies("work")[-1]
        seen = FakeAnthropic.messages_text(resumed)
        self.assertIn("OUTAGE-MARK", seen)
        self.assertNotIn("API Error", seen)
        self.assertNotIn("ECONNREFUSED", seen)
        self.assertIn(flower.text("resume_prompt"), seen)
        self.assertEqual(self.api.port, port)
        self.assertGreaterEqual(time.time() - state["down"], 15.0)   # it really waited the outage out

    def test_05_five_denials_then_resume_sees_one(self):
        target = os.path.join(self.ws, "x.txt")
        self.roles.work = [tool("Write", {"file_path": target, "content": f"v{i}"}) for i in range(5)] + \
                          [text("not allowed"), text("resumed")]
        rt = self._runtime()
        spec = flower.AgentSpec("work", instructions="You do the work.", tools=["Write"], allowed_tools=[],
                                permission_mode="default")
        first = asyncio.run(rt.run(spec, "write x.txt"))
        self.assertTrue(first.ok, first.error)
        second = asyncio.run(rt.run(spec, "continue", resume=first.session_id))
        rt.close()
        self.assertTrue(second.ok, second.error)
        sent = FakeAnthropic.messages_text(self.roles.bodies("work")[-1])
        self.assertEqual(sent.count("haven't granted it yet"), 1)
        stored = json.dumps(self.stored(first.session_id))
        self.assertEqual(stored.count("\"toolDenialKind\""), 5)   # the store keeps all of them

    def test_06_interrupt_mid_tool_then_resume_sees_neutral_text(self):
        slow = "python3 -c \"import time; time.sleep(3)\""
        self.roles.work = [tool("Bash", {"command": slow}), text("continuing")]
        rt = self._runtime()
        spec = flower.AgentSpec("work", instructions="You do the work.", tools=["Bash"], allowed_tools=["Bash"])
        events = []

        async def scenario():
            task = asyncio.ensure_future(rt.run(spec, "run slow", on_event=events.append))
            while not any(e.kind == "tool_call" for e in events):
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            rt.interrupt("go on please")
            return await task
        result = asyncio.run(scenario())
        rt.close()
        self.assertTrue(result.ok, result.error)
        sent = FakeAnthropic.messages_text(self.roles.bodies("work")[-1])
        self.assertIn("go on please", sent)
        self.assertNotIn("doesn't want to proceed", sent)
        self.assertIn(flower.text("interrupted_result"), sent)

    def test_07_handoff_twice_successor_gets_the_carry(self):
        def usage(level):
            return dict(input_tokens=1000, cache_read=level - 1000)
        self.roles.work = [
            tool("Bash", {"command": "echo OLD-HISTORY-MARK DAC=$DISABLE_AUTO_COMPACT"}, **usage(100_000)),
            tool("Bash", {"command": "echo two"}, **usage(160_000)),         # crosses 150K
            tool("Bash", {"command": "echo three"}, **usage(60_000)),          # successor 1
            tool("Bash", {"command": "echo four"}, **usage(165_000)),         # crosses again
            text("all done", **usage(50_000)),                                 # successor 2
        ]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.flower("--json", "--model", "claude-sonnet-4-5", "--window", "200000", "--no-goal")
        phases = [json.loads(line)["data"].get("phase") for line in p.stdout.splitlines()
                  if json.loads(line)["kind"] == "handoff"]
        self.assertEqual(phases, ["near", "writing", "done"] * 2)
        row = self.work_row()
        self.assertTrue(row["ok"], row)
        self.assertEqual(row["generations"], 2)
        self.assertEqual(len(row["retired"]), 2)
        self.assertEqual(len(self.roles.bodies("ritual")), 2)
        # the turn stops at the crossing: at most one more call of growth before the ritual
        roles = [r for r, _ in self.roles.log if r in ("work", "ritual")]
        first_ritual = roles.index("ritual")
        self.assertLessEqual(first_ritual - 2, 1, roles)   # work calls 1 and 2 (the crossing), then <= 1 more
        work = self.roles.bodies("work")
        firsts = [b for b in work if len(b.get("messages", [])) == 1]
        self.assertEqual(len(firsts), 3)   # the first session and two successors start with one message
        for carry_request in firsts[1:]:
            sent = FakeAnthropic.messages_text(carry_request)
            self.assertIn("You take over unfinished work", sent)
            self.assertIn("NEXT-STEP-MARK", sent)
            self.assertNotIn("OLD-HISTORY-MARK", sent)
            self.assertNotIn("tool_result", sent)
            self.assertLessEqual(len(last_user_text(carry_request)), 18000)
        self.assertEqual(self.lineage()["steps"]["work"], row["session_id"])
        doc = self.read(".flower", "notes", "handoff-work.md")
        self.assertIn("generation 2", doc)
        self.assertEqual(len(os.listdir(os.path.join(self.ws, ".flower", "notes", "archive", "handoff"))), 1)
        self.assertTrue(self.api.saw("DAC=1"))                                 # DISABLE_AUTO_COMPACT reached the CLI
        self.assertFalse(self.api.saw("CRITICAL: Respond with TEXT ONLY"))   # the CLI never compacted
        self.assertIn("handoff #2 -> fresh session", p.stderr)

    def test_07b_handoff_when_a_plain_text_answer_crosses(self):
        # no tool round to wait for: the interrupt meets a turn that is ending anyway
        self.roles.work = [tool("Bash", {"command": "echo one"}, input_tokens=1000, cache_read=99_000),
                           text("crossing with text only", input_tokens=1000, cache_read=159_000),
                           text("successor done", input_tokens=20_000)]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        self.flower("--model", "claude-sonnet-4-5", "--window", "200000", "--no-goal")
        row = self.work_row()
        self.assertTrue(row["ok"], row)
        self.assertEqual((row["generations"], row["text"]), (1, "successor done"))
        self.assertEqual(len(self.roles.bodies("ritual")), 1)
        self.assertNotIn("[degraded:", self.read(".flower", "notes", "handoff-work.md"))

    def test_08_overflow_gives_degraded_handoff_and_learns_the_window(self):
        self.roles.work = [
            tool("Bash", {"command": "echo big"}, input_tokens=1000, cache_read=120_000),
            error(400, "prompt is too long: 210000 tokens > 200000 maximum", "invalid_request_error"),
            text("fresh start worked", input_tokens=5000),
        ]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        self.flower("--model", "claude-sonnet-4-5", "--no-goal")
        row = self.work_row()
        self.assertTrue(row["ok"], row)
        self.assertEqual(row["generations"], 1)
        self.assertIn("[degraded: context overflow]", self.read(".flower", "notes", "handoff-work.md"))
        learned = json.loads(self.read(".flower", "window.json"))
        entry = [v for k, v in learned.items() if k.endswith("|claude-sonnet-4-5")][0]
        self.assertEqual(entry["source"], "overflow")
        self.assertEqual(entry["window"], 121_000)

    def test_09_fatal_401_stops_at_once(self):
        self.roles.work = [error(401, "invalid x-api-key", "authentication_error")] * 10
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.flower("--no-goal", check=False)
        self.assertEqual(p.returncode, flower.EXIT_SETUP, p.stderr)   # credentials rejected: a setup problem
        self.assertNotIn("Traceback", p.stderr)
        self.assertEqual(len([l for l in p.stderr.splitlines() if l.startswith("flower:")]), 1)
        row = self.work_row()
        self.assertEqual(row["attempts"], 1)
        self.assertEqual(row["error_kind"], "auth")
        self.assertLessEqual(len(self.roles.bodies("work")), 3)   # the CLI's own 2 retries at most

    def test_10_wake_sentence_empty_wake_and_new(self):
        self.flower("write hello")
        first_work = self.lineage()["steps"]["work"]
        goal_calls = len(self.roles.bodies("goal"))
        # empty wake: no clarify, no goal, work resumed with the default prompt
        self.flower()
        self.assertEqual(len(self.roles.bodies("clarify")), 1)
        self.assertEqual(len(self.roles.bodies("goal")), goal_calls)
        # wake with a sentence: brief amended, goal re-derived, work resumed with the sentence
        self.flower("also support tables")
        self.assertIn("also support tables", self.read(".flower", "notes", "brief.md"))
        self.assertEqual(len(self.roles.bodies("goal")), goal_calls + 1)
        self.assertIn("also support tables", FakeAnthropic.messages_text(self.roles.bodies("goal")[-1]))
        said = last_user_text(self.roles.bodies("work")[-1])   # the sentence, then the re-derived goal (issue 42)
        self.assertLess(said.index("also support tables"), said.index("hello.txt contains hi"))
        self.assertEqual(self.lineage()["steps"]["work"], first_work)
        # --new: archived, fresh sessions
        self.flower("--new", "something else")
        archive = os.path.join(self.ws, ".flower", "notes", "archive")
        self.assertEqual(len(os.listdir(archive)), 1)
        self.assertEqual(sorted(os.listdir(os.path.join(archive, os.listdir(archive)[0]))),
                         ["brief.md", "goal.md", "lineage.json"])
        self.assertNotEqual(self.lineage()["steps"]["work"], first_work)
        self.assertEqual(self.lineage()["woke"], 1)
        self.assertEqual(len(self.roles.bodies("clarify")), 2)

    def test_11_two_processes_in_one_run_dir(self):
        procs = [self.spawn("once", f"question {i}") for i in range(2)]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            self.assertEqual(proc.returncode, 0, err)
        rows = self.manifest()
        self.assertEqual([r["step"] for r in rows], ["once", "once"])
        self.assertEqual(len({r["run"] for r in rows}), 2)


if __name__ == "__main__":
    unittest.main()
