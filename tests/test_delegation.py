"""Delegation, core tier (issue 39): the rules, spill at write time, the workbench, prune's treatment
of flower's own denial and of a stopped worker, and the work step the starter flow builds. Pure logic
and the hooks called directly; the real CLI's side is in tests/test_e2e_delegation.py."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import unittest

import flower
from tests import fakesdk
from tests.fakesdk import FAKE
from tests.helpers import LEDGER_EN as GOOD_LEDGER

SECRET = "sk-ant-api03-" + "Z" * 40


def call(hook, data):
    return asyncio.run(hook(data, "toolu_1", None))


class Rules(unittest.TestCase):
    def test_main_thread_is_denied_what_changes_things(self):
        deny = flower.main_thread_denial
        self.assertIsNotNone(deny({"tool_name": "Bash", "tool_input": {"command": "echo x > f"}}))
        self.assertIsNotNone(deny({"tool_name": "Bash", "tool_input": {"command": "rm -rf build"}}))
        for name in ("Write", "Edit", "NotebookEdit"):
            self.assertIn(name, deny({"tool_name": name, "tool_input": {}}))
        self.assertIsNone(deny({"tool_name": "Bash", "tool_input": {"command": "ls -la"}}))
        self.assertIsNone(deny({"tool_name": "Read", "tool_input": {"file_path": "x"}}))
        self.assertIsNone(deny({"tool_name": "Agent", "tool_input": {}}))

    def test_a_worker_is_allowed_everything(self):
        for name, tool_input in (("Bash", {"command": "echo x > f"}), ("Write", {}), ("Edit", {})):
            self.assertIsNone(flower.main_thread_denial({"tool_name": name, "tool_input": tool_input,
                                                         "agent_id": "a1", "agent_type": "worker"}))

    def test_the_hook_denies_with_a_reason_pointing_at_delegation(self):
        out = call(flower.rules_hook("zh"), {"tool_name": "Write", "tool_input": {}})["hookSpecificOutput"]
        self.assertEqual(out["permissionDecision"], "deny")
        self.assertEqual(out["permissionDecisionReason"], flower.text("delegate_denied", "zh", tool="Write"))
        self.assertEqual(call(flower.rules_hook(), {"tool_name": "Write", "agent_id": "a"}), {})

    def test_never_by_disallowed_tools(self):
        with tempfile.TemporaryDirectory() as tmp:
            spec = flower.coordinator(flower.Paths(tmp))
        # only the CLI's own agent types are denied (they govern spawning, not tools); no tool is
        self.assertEqual(spec.disallowed_tools, [f"Agent({name})" for name in flower.CLI_AGENT_TYPES])
        self.assertNotIn("worker", flower.CLI_AGENT_TYPES)
        for name in ("Write", "Edit", "Bash", "Agent"):
            self.assertIn(name, spec.tools)
        self.assertEqual(spec.agents["worker"].tools, flower.WORKER_TOOLS)
        self.assertEqual(spec.agents["worker"].model, "inherit")


def denial(uid, parent, tool_id, said):
    return {"type": "user", "uuid": uid, "parentUuid": parent, "toolDenialKind": "permission-rule",
            "permissionDecision": {"decision": "reject", "source": "hook"},
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id,
                                                     "content": said, "is_error": True}]}}


def use(uid, parent, tool_id, name="Bash", tool_input=None):
    return {"type": "assistant", "uuid": uid, "parentUuid": parent,
            "message": {"role": "assistant", "content": [{"type": "tool_use", "id": tool_id, "name": name,
                                                          "input": tool_input or {"command": "echo x > f"}}]}}


class PruneKeeps(unittest.TestCase):
    def test_flowers_denial_is_kept_like_the_last_denial(self):
        rule = "PreToolUse:Bash hook error: " + flower.text("delegate_denied", tool="Bash")
        entries = [{"type": "user", "uuid": "u0", "parentUuid": None, "message": {"role": "user", "content": "go"}},
                   use("a1", "u0", "t1"), denial("r1", "a1", "t1", rule),
                   use("a2", "r1", "t2"), denial("r2", "a2", "t2", "Permission to use Bash has been denied."),
                   use("a3", "r2", "t3"), denial("r3", "a3", "t3", "Permission to use Bash has been denied.")]
        kept, report = flower.prune(entries, flower.PrunePolicy())
        said = json.dumps(kept)
        self.assertIn(flower.text("delegate_denied", tool="Bash"), said)   # flower's rule stays
        self.assertEqual(said.count("has been denied"), 1)                 # of the others, the newest
        self.assertEqual(report.denials_dropped, 1)

    def test_a_worker_stopped_by_a_kill_heals_with_a_pointer_to_the_workbench(self):
        entries = [{"type": "user", "uuid": "u0", "parentUuid": None, "message": {"role": "user", "content": "go"}},
                   use("a1", "u0", "t1", "Agent", {"description": "d", "prompt": "p", "subagent_type": "worker"}),
                   use("a2", "a1", "t2", "Bash", {"command": "sleep 100"})]
        kept, report = flower.prune(entries, flower.PrunePolicy())
        results = {b["tool_use_id"]: b["content"] for e in kept for b in flower.blocks_of(e)
                   if isinstance(b, dict) and b.get("type") == "tool_result"}
        self.assertEqual(results["t1"], flower.text("worker_stopped"))
        self.assertEqual(results["t2"], flower.text("killed_result"))
        kept, _ = flower.prune(entries, flower.PrunePolicy(lang="zh"))
        self.assertIn(flower.text("worker_stopped", "zh"), json.dumps(kept, ensure_ascii=False))


class Spill(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.paths = flower.Paths(self.tmp.name)
        self.hook = flower.spill_hook(self.paths)

    def tearDown(self):
        self.tmp.cleanup()

    def spilled(self):
        folder = self.paths.spill_dir
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []

    def test_a_big_bash_output_becomes_a_pointer_and_a_redacted_file(self):
        big = "".join(f"row {i:05d}\n" for i in range(2000)) + f"token={SECRET}\n"
        out = call(self.hook, {"tool_name": "Bash", "tool_input": {"command": "cat x"},
                               "tool_response": {"stdout": big, "stderr": "", "interrupted": False,
                                                 "isImage": False}})["hookSpecificOutput"]["updatedToolOutput"]
        self.assertEqual(set(out), {"stdout", "stderr", "interrupted", "isImage"})   # the tool's own shape
        self.assertLess(len(out["stdout"]), 1000)
        self.assertIn("row 00000", out["stdout"])
        self.assertNotIn("row 01000", out["stdout"])
        [name] = self.spilled()
        path = os.path.join(self.paths.spill_dir, name)
        self.assertIn(path, out["stdout"])
        with open(path) as fh:
            self.assertEqual(fh.read(), flower.redact(big + ""))
        self.assertNotIn(SECRET, open(path).read())
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        again = call(self.hook, {"tool_name": "Bash", "tool_input": {}, "tool_response": {"stdout": big, "stderr": ""}})
        self.assertIn(path, again["hookSpecificOutput"]["updatedToolOutput"]["stdout"])   # same content, same file
        self.assertEqual(len(self.spilled()), 1)

    def test_small_outputs_and_unknown_shapes_pass(self):
        self.assertEqual(call(self.hook, {"tool_name": "Bash", "tool_response": {"stdout": "x" * 3999, "stderr": ""}}), {})
        self.assertEqual(call(self.hook, {"tool_name": "Bash", "tool_response": "x" * 9000}), {})
        self.assertEqual(call(self.hook, {"tool_name": "Write", "tool_response": {"content": "x" * 9000}}), {})
        self.assertEqual(self.spilled(), [])

    def test_read_grep_glob_webfetch_keep_their_shapes(self):
        text = "y" * 5000
        cases = {"Read": {"type": "text", "file": {"filePath": "/a", "content": text, "numLines": 1,
                                                   "startLine": 1, "totalLines": 1}},
                 "Grep": {"mode": "content", "numFiles": 0, "filenames": [], "content": text, "numLines": 1},
                 "Glob": {"filenames": [f"/d/file{i:04d}.txt" for i in range(400)], "numFiles": 400,
                          "truncated": False, "durationMs": 1},
                 "WebFetch": {"bytes": 5000, "code": 200, "codeText": "OK", "result": text, "url": "u"}}
        for name, response in cases.items():
            out = call(self.hook, {"tool_name": name, "tool_input": {"file_path": "/a"},
                                   "tool_response": response})["hookSpecificOutput"]["updatedToolOutput"]
            self.assertEqual(set(out), set(response), name)
            self.assertLess(len(json.dumps(out)), 1500, name)

    def test_a_read_of_a_spill_file_is_not_spilled_again(self):
        big = "z" * 9000
        call(self.hook, {"tool_name": "Bash", "tool_response": {"stdout": big, "stderr": ""}})
        [name] = self.spilled()
        path = os.path.join(self.paths.spill_dir, name)
        back = call(self.hook, {"tool_name": "Read", "tool_input": {"file_path": path},
                                "tool_response": {"type": "text", "file": {"filePath": path, "content": big}}})
        self.assertEqual(back, {})
        other = os.path.join(self.tmp.name, "other.txt")
        moved = call(self.hook, {"tool_name": "Read", "tool_input": {"file_path": other},
                                 "tool_response": {"type": "text", "file": {"filePath": other, "content": big}}})
        self.assertIn("updatedToolOutput", moved["hookSpecificOutput"])


class Workbench(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.paths = flower.Paths(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def put(self, rel, body):
        path = os.path.join(self.paths.workbench_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(body)
        return path

    def test_index_from_desc_lines_and_first_comments(self):
        self.put("scripts/a.py", "#!/usr/bin/env python3\n# helper\n# desc: counts rows\n")
        self.put("scripts/b.sh", "#!/bin/sh\n# rebuilds the cache\necho\n")
        self.put("notes/n.md", "# Findings on the parser\n\ntext\n")
        self.put("artifacts/out.csv", "a,b\n1,2\n")
        index = flower.refresh_workbench(self.paths)
        self.assertIn("- scripts/a.py — counts rows", index)
        self.assertIn("- scripts/b.sh — rebuilds the cache", index)
        self.assertIn("- notes/n.md — Findings on the parser", index)
        self.assertIn("- artifacts/out.csv\n", index)
        with open(self.paths.workbench_index) as fh:
            self.assertEqual(fh.read(), index)

    def test_a_write_inside_refreshes_the_index_one_outside_does_not(self):
        flower.refresh_workbench(self.paths)
        for part in flower.WORKBENCH_PARTS:   # made by flower: private
            self.assertEqual(os.stat(os.path.join(self.paths.workbench_dir, part)).st_mode & 0o777, 0o700)
        hook = flower.workbench_refresh_hook(self.paths)
        path = self.put("scripts/new.py", "# desc: NEW-SCRIPT\n")
        call(hook, {"tool_name": "Write", "tool_input": {"file_path": path}})
        self.assertIn("NEW-SCRIPT", open(self.paths.workbench_index).read())
        self.put("scripts/later.py", "# desc: LATER\n")
        call(hook, {"tool_name": "Write", "tool_input": {"file_path": os.path.join(self.tmp.name, "x.py")}})
        self.assertNotIn("LATER", open(self.paths.workbench_index).read())

    def test_rules_reach_every_agent_call_once_and_in_the_foreground(self):
        hook = flower.agent_call_hook(self.paths)
        out = call(hook, {"tool_name": "Agent", "tool_input": {"prompt": "do X", "subagent_type": "worker"}})
        updated = out["hookSpecificOutput"]["updatedInput"]
        rules = flower.text("workbench_rules", root=self.paths.workbench_dir)
        self.assertTrue(updated["prompt"].startswith("do X"))
        self.assertIn(rules, updated["prompt"])
        self.assertIs(updated["run_in_background"], False)
        twice = call(hook, {"tool_name": "Agent", "tool_input": updated})["hookSpecificOutput"]["updatedInput"]
        self.assertEqual(twice["prompt"].count(rules), 1)
        self.assertEqual(call(hook, {"tool_name": "Bash", "tool_input": {}}), {})

    def test_carry_has_the_index_only_where_there_is_a_workbench(self):
        self.assertEqual(flower.workbench_carry(self.paths), "")
        self.put("scripts/s.py", "# desc: CARRIED\n")
        self.assertIn("CARRIED", flower.workbench_carry(self.paths))


class StarterFlow(unittest.TestCase):
    def flow(self, tmp, **kw):
        rt = flower.Runtime(workspace=tmp, store=object())
        return rt, flower.starter_flow("task", rt=rt, **kw)

    def test_delegate_makes_the_work_step_a_coordinator_with_the_index_in_its_prompt(self):
        with tempfile.TemporaryDirectory() as tmp:
            rt, flow = self.flow(tmp, delegate=True, worker_model="haiku")
            work = [s for s in flow.steps if s.name == "work"][0]
            self.assertEqual(work.spec.agents["worker"].model, "haiku")
            self.assertIn(flower.text("coordinator_instructions"), work.spec.instructions)
            self.assertNotIn("Workbench index", work.spec.instructions)
            self.assertIn("Workbench index", work.prompt({}))
            self.assertTrue(work.spec.hooks["PreToolUse"])

    def test_without_delegate_the_work_step_is_todays_single_worker(self):
        with tempfile.TemporaryDirectory() as tmp:
            rt, flow = self.flow(tmp)
            work = [s for s in flow.steps if s.name == "work"][0]
            self.assertIsNone(work.spec.agents)
            self.assertEqual(work.spec.hooks, {})
            self.assertNotIn("Workbench index", work.prompt({}))
            self.assertFalse(os.path.exists(os.path.join(tmp, ".flower", "workbench")))

    def test_go_options(self):
        args = flower.build_parser().parse_args(["go", "x", "--no-delegate", "--worker-model", "haiku"])
        self.assertTrue(args.no_delegate)
        self.assertEqual(args.worker_model, "haiku")
        self.assertFalse(flower.build_parser().parse_args(["go", "x"]).no_delegate)


class Handoff(fakesdk.FakeWorkspace, unittest.TestCase):
    def test_the_carry_holds_the_workbench_index(self):
        os.environ.pop("FLOWER_WINDOW", None)
        rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, handoff=flower.HandoffPolicy(window=200_000),
                            resilience=flower.Resilience(probe=False, base_delay=0, max_attempts=2))
        try:
            os.makedirs(os.path.join(rt.paths.workbench_dir, "scripts"))
            with open(os.path.join(rt.paths.workbench_dir, "scripts", "s.py"), "w") as fh:
                fh.write("# desc: CARRY-DESC\n")
            FAKE.turns = [[("text", "step 1", 151_000)], [("text", GOOD_LEDGER, 151_000)], [("text", "done", 1000)]]
            asyncio.run(flower.Workflow([flower.Step("work", flower.AgentSpec("work"), "do it")]).run(rt))
        finally:
            rt.close()
        self.assertIn(flower.text("carry_head")[:30], FAKE.calls[2]["prompt"])   # the successor's first prompt
        self.assertIn("scripts/s.py — CARRY-DESC", FAKE.calls[2]["prompt"])
        self.assertNotIn("CARRY-DESC", FAKE.calls[0]["prompt"])   # not a delegating step: nothing added up front


if __name__ == "__main__":
    unittest.main()
