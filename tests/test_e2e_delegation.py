"""Delegation on the real CLI (issue 39): what the CLI honours of flower's hooks, and the coordinator,
its workers, spill at write time and the workbench, driven through flower against tests/fakeapi.py.

Verified facts (the first test class; README "Delegation" says the same):
(a) a PostToolUse ``updatedToolOutput`` in the tool's own shape replaces Bash's and Read's output in
    what the CLI sends next; (b) PreToolUse sees ``agent_id`` (and ``agent_type``) for calls inside a
    subagent, none on the main thread, and a deny there reaches the subagent with its reason; (c) a
    PreToolUse ``updatedInput`` on Agent reaches the subagent's prompt, and ``run_in_background: false``
    makes the call wait for the worker's report; (d) a subagent's transcript is stored through the
    session store under the subpath ``subagents/agent-<agent_id>``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import threading
import unittest

import flower
from tests.fakeapi import FakeAnthropic, text, tool, last_user_text
from tests.helpers import E2ECase, HAVE_SDK, SKIP, Roles, freeze_front

WORKER_MARK = "You are a worker."
SECRET = "sk-ant-api03-" + "Q" * 40


def is_worker(body):
    return WORKER_MARK in json.dumps(body.get("system", ""), ensure_ascii=False) or \
        "WORKER-SYS" in json.dumps(body.get("system", ""))


class Split:
    """A responder: one queue for the main thread, one for workers; every body logged by side."""

    def __init__(self, main=(), sub=()):
        self.main, self.sub = list(main), list(sub)
        self.log: list[tuple[str, dict]] = []
        self.lock = threading.Lock()

    def __call__(self, body):
        with self.lock:
            side = "sub" if is_worker(body) else "main"
            self.log.append((side, body))
            queue = self.sub if side == "sub" else self.main
            item = queue.pop(0) if queue else text(f"{side} ok")
            return item(body) if callable(item) else item

    def bodies(self, side):
        return [b for s, b in self.log if s == side]

    def sent(self, side):
        return "\n".join(FakeAnthropic.messages_text(b) for b in self.bodies(side))


class Base(E2ECase, unittest.TestCase):
    """The real tier's fixture with delegation on (the other end-to-end modules run single)."""

    def setUp(self):
        super().setUp()
        self.env.pop("FLOWER_NO_DELEGATE", None)


@unittest.skipUnless(HAVE_SDK, SKIP)
class CliFacts(Base):
    """What the real CLI does with the hooks delegation is built on (raw hooks, no flower policy)."""

    def test_hook_facts(self):
        import claude_agent_sdk as sdk
        big_file = os.path.join(self.ws, "big.txt")
        with open(big_file, "w") as fh:
            fh.write("B" * 30000)
        split = Split(main=[tool("Bash", {"command": "python3 -c \"print('A'*50000)\""}),
                            tool("Read", {"file_path": big_file}),
                            tool("Agent", {"description": "do it", "prompt": "ORIGINAL-PROMPT",
                                           "subagent_type": "worker"}),
                            text("all done")],
                      sub=[tool("Bash", {"command": "echo sub"}),
                           tool("Write", {"file_path": os.path.join(self.ws, "w.txt"), "content": "hi"}),
                           text("worker report")])
        self.api.responder = split
        seen = []

        async def pre(data, tool_use_id, context):
            seen.append(("pre", data.get("tool_name"), data.get("agent_id"), data.get("agent_type")))
            if data.get("tool_name") == "Agent":
                call = dict(data["tool_input"], run_in_background=False)
                call["prompt"] += "\nINJECTED-RULES"
                return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": call}}
            if data.get("agent_id") and data.get("tool_name") == "Write":
                return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                               "permissionDecisionReason": "DENY-REASON-77"}}
            return {}

        async def post(data, tool_use_id, context):
            name, response = data.get("tool_name"), data.get("tool_response")
            seen.append(("post", name, data.get("agent_id"), response))
            if name == "Bash" and not data.get("agent_id"):
                out = dict(response, stdout="SPILLED-BASH", stderr="")
            elif name == "Read":
                out = dict(response, file=dict(response["file"], content="SPILLED-READ"))
            else:
                return {}
            return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": out}}

        rt = self._runtime()
        spec = flower.AgentSpec("work", instructions="MAIN-SYS", tools=["Bash", "Read", "Write", "Agent"],
                                allowed_tools=["Bash", "Read", "Write", "Agent"],
                                hooks={"PreToolUse": [(None, pre)], "PostToolUse": [(None, post)]},
                                agents={"worker": sdk.AgentDefinition(description="does work", prompt="WORKER-SYS",
                                                                      tools=["Bash", "Write"], model="inherit")})
        result = asyncio.run(rt.run(spec, "go"))
        rt.close()
        self.assertTrue(result.ok, result.error)
        main = split.sent("main")
        # (a) the replaced outputs reached the model, the originals did not
        self.assertIn("SPILLED-BASH", main)
        self.assertNotIn("A" * 100, main)
        self.assertIn("SPILLED-READ", main)
        self.assertNotIn("B" * 100, main)
        # (b) agent_id only inside the subagent; the deny reached it with its reason
        agent_ids = {(name, aid, kind) for phase, name, aid, kind in seen if phase == "pre"}
        self.assertIn(("Bash", None, None), agent_ids)
        sub_ids = {aid for phase, name, aid, kind in seen if phase == "pre" and name in ("Bash", "Write") and aid}
        self.assertEqual(len(sub_ids), 1)
        self.assertIn(("Write", next(iter(sub_ids)), "worker"), agent_ids)
        self.assertIn("DENY-REASON-77", split.sent("sub"))
        self.assertFalse(os.path.exists(os.path.join(self.ws, "w.txt")))
        # (c) the rewritten prompt reached the subagent; in the foreground the report came back in the call
        self.assertIn("INJECTED-RULES", FakeAnthropic.messages_text(split.bodies("sub")[0]))
        agent_post = [r for phase, name, aid, r in seen if phase == "post" and name == "Agent"][0]
        self.assertEqual(agent_post.get("status"), "completed")
        self.assertIn("worker report", main)
        # (d) the worker's transcript is in the store under its subpath
        db = sqlite3.connect(os.path.join(self.ws, ".flower", "sessions.db"))
        subpaths = [r[0] for r in db.execute("SELECT subpath FROM sessions WHERE session_id=? AND subpath IS NOT NULL",
                                             (result.session_id,))]
        db.close()
        self.assertEqual(subpaths, [f"subagents/agent-{next(iter(sub_ids))}"])


@unittest.skipUnless(HAVE_SDK, SKIP)
class Coordinator(Base):
    """flower's coordinator spec and its hooks on the real CLI."""

    def run_coordinator(self, split, prompt="go"):
        self.api.responder = split
        rt = self._runtime()
        spec = flower.coordinator(rt.paths, instructions="You do the work.")
        result = asyncio.run(rt.run(spec, prompt))
        rt.close()
        self.assertTrue(result.ok, result.error)
        return result, rt

    def test_coordinator_denied_a_write_command_a_worker_allowed_it(self):
        split = Split(main=[tool("Bash", {"command": "echo main > f"}),
                            tool("Bash", {"command": "ls"}),
                            tool("Agent", {"description": "write f", "prompt": "write f", "subagent_type": "worker"}),
                            text("coordinated")],
                      sub=[tool("Bash", {"command": "echo worker > f"}), text("wrote f")])
        result, rt = self.run_coordinator(split)
        self.assertEqual(self.read("f"), "worker\n")
        main = split.sent("main")
        self.assertIn(flower.text("delegate_denied", tool="Bash"), main)
        last = FakeAnthropic.messages_text(split.bodies("main")[-1])
        self.assertEqual(last.count(flower.text("delegate_denied", tool="Bash")), 1)   # `ls` was allowed
        self.assertNotIn(flower.text("delegate_denied", tool="Bash"), split.sent("sub"))
        # the rules reach every Agent call, from flower, not from the coordinator
        self.assertIn(flower.text("workbench_rules", root=rt.paths.workbench_dir),
                      FakeAnthropic.messages_text(split.bodies("sub")[0]))
        # the stored denial is flower's rule, which prune keeps like the last denial
        denials = [e for e in self.stored(result.session_id) if e.get("toolDenialKind")]
        self.assertEqual(len(denials), 1)
        self.assertTrue(flower.is_delegation_rule(denials[0]))
        self.assertFalse(flower._is_denial(denials[0]))
        # the worker's transcript is stored under its subkey
        db = sqlite3.connect(os.path.join(self.ws, ".flower", "sessions.db"))
        subpaths = [r[0] for r in db.execute("SELECT subpath FROM sessions WHERE session_id=? AND subpath IS NOT NULL",
                                             (result.session_id,))]
        db.close()
        self.assertEqual(len(subpaths), 1)
        self.assertTrue(subpaths[0].startswith("subagents/agent-"))

    def test_a_big_output_reaches_the_model_as_a_pointer_and_its_file_is_whole_and_redacted(self):
        big = os.path.join(self.ws, "big.log")
        with open(big, "w") as fh:
            fh.write("".join(f"line {i:05d} " + "x" * 40 + "\n" for i in range(1000)))
            fh.write(f"ANTHROPIC_API_KEY={SECRET}\n")
        with open(big) as fh:
            whole = fh.read()
        self.assertGreater(len(whole), 50000)
        split = Split(main=[tool("Bash", {"command": f"cat {big}"}), text("seen")])
        self.run_coordinator(split)
        sent = FakeAnthropic.messages_text(split.bodies("main")[-1])
        self.assertIn("line 00000", sent)             # the head stays
        self.assertNotIn("line 00500", sent)          # the rest does not
        self.assertNotIn(SECRET, sent)
        spill_dir = os.path.join(self.ws, ".flower", "spill")
        files = os.listdir(spill_dir)
        self.assertEqual(len(files), 1)
        self.assertIn(os.path.join(spill_dir, files[0]), sent)   # the pointer names the file
        with open(os.path.join(spill_dir, files[0])) as fh:
            kept = fh.read()
        self.assertNotIn(SECRET, kept)
        self.assertEqual(kept, flower.redact(whole))
        self.assertEqual(os.stat(os.path.join(spill_dir, files[0])).st_mode & 0o777, 0o600)

    def test_a_spill_file_read_back_is_not_spilled_again(self):
        big = os.path.join(self.ws, "big.log")
        with open(big, "w") as fh:
            fh.write("".join(f"row {i:05d} " + "y" * 40 + "\n" for i in range(200)))
        holder = {}

        def read_spill(body):
            path = os.path.join(self.ws, ".flower", "spill", os.listdir(os.path.join(self.ws, ".flower", "spill"))[0])
            holder["path"] = path
            return tool("Read", {"file_path": path})
        split = Split(main=[tool("Bash", {"command": f"cat {big}"}), read_spill, text("read it")])
        self.run_coordinator(split)
        sent = FakeAnthropic.messages_text(split.bodies("main")[-1])
        self.assertIn("row 00199", sent)              # the Read of the spill file came back whole
        self.assertEqual(len(os.listdir(os.path.join(self.ws, ".flower", "spill"))), 1)


@unittest.skipUnless(HAVE_SDK, SKIP)
class GoDelegates(Base):
    """``go`` with and without delegation."""

    def test_index_in_the_first_user_message_not_in_the_system_prompt(self):
        scripts = os.path.join(self.ws, ".flower", "workbench", "scripts")
        os.makedirs(scripts)
        with open(os.path.join(scripts, "probe.py"), "w") as fh:
            fh.write("#!/usr/bin/env python3\n# desc: PROBE-DESC measures the thing\nprint(1)\n")
        hello = os.path.join(self.ws, "hello.txt")
        worker_q = [tool("Write", {"file_path": hello, "content": "hi\n"}), text("wrote hello.txt")]

        def work(body):
            if is_worker(body):
                return worker_q.pop(0) if worker_q else text("worker ok")
            return None
        roles = Roles(work=[tool("Agent", {"description": "hello", "prompt": "write hello.txt saying hi",
                                            "subagent_type": "worker"}), text("WORK-DONE")])
        original = roles.__call__

        def responder(body):
            return work(body) or original(body)
        self.api.responder = responder
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        self.flower("--no-goal")
        self.assertEqual(self.read("hello.txt"), "hi\n")
        first = roles.bodies("work")[0]
        self.assertIn("PROBE-DESC", last_user_text(first))
        self.assertNotIn("PROBE-DESC", json.dumps(first.get("system", "")))
        self.assertIn(flower.text("coordinator_instructions")[:40], json.dumps(first.get("system", "")))
        index = self.read(".flower", "workbench", "INDEX.md")
        self.assertIn("scripts/probe.py — PROBE-DESC measures the thing", index)

    def test_no_delegate_is_a_single_worker(self):
        hello = os.path.join(self.ws, "hello.txt")
        self.roles.work = [tool("Write", {"file_path": hello, "content": "hi\n"}), text("WORK-DONE")]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        self.flower("--no-goal", env={"FLOWER_NO_DELEGATE": "1"})
        self.assertEqual(self.read("hello.txt"), "hi\n")
        first = self.roles.bodies("work")[0]
        self.assertNotIn(flower.text("coordinator_instructions")[:40], json.dumps(first.get("system", "")))
        self.assertNotIn("Workbench index", json.dumps(first))
        self.assertNotIn(flower.text("delegate_denied", tool="Write"), FakeAnthropic.messages_text(self.roles.bodies("work")[-1]))
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".flower", "workbench")))

    def test_kill_9_mid_worker_then_the_coordinator_resumes_with_a_neutral_result(self):
        slow = "python3 -c \"import time; time.sleep(60)\""   # still running at the kill
        worker_q = [tool("Bash", {"command": slow}, say="WORKER-KILL-MARK")]
        roles = Roles(work=[tool("Agent", {"description": "slow", "prompt": "run the slow step",
                                            "subagent_type": "worker"}, say="COORD-MARK"), text("after kill")])

        def responder(body):
            if is_worker(body):
                return worker_q.pop(0) if worker_q else text("worker ok")
            return roles(body)
        self.api.responder = responder
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        proc = self.spawn("--no-goal")

        def worker_call_stored():
            try:
                db = sqlite3.connect(os.path.join(self.ws, ".flower", "sessions.db"))
                try:
                    rows = db.execute("SELECT payload FROM entries WHERE skey LIKE '%/subagents/%'").fetchall()
                finally:
                    db.close()
            except sqlite3.Error:
                return False
            return any("WORKER-KILL-MARK" in r[0] for r in rows) and any('"tool_use"' in r[0] for r in rows)
        self.wait_for(worker_call_stored, what="the worker's tool_use to be mirrored under its subkey")
        work_sid = self.lineage()["steps"]["work"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        before = len(roles.bodies("work"))
        self.flower("--no-goal")
        self.assertEqual(self.lineage()["steps"]["work"], work_sid)   # the coordinator's session goes on
        resumed = FakeAnthropic.messages_text(roles.bodies("work")[before])
        self.assertIn("COORD-MARK", resumed)
        self.assertIn(flower.text("worker_stopped"), resumed)
        self.assertNotIn("Tool call interrupted", resumed)


if __name__ == "__main__":
    unittest.main()
