"""Issue 42: the judge verifies by running the goal's checks in a throwaway copy of the workspace and
cannot change the work (core: the guard and the copy; real tier: the real CLI runs the judge's command)."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import unittest

import flower
from tests.fakeapi import text, tool
from tests.helpers import E2ECase, HAVE_SDK, Roles, SKIP, role_of


def snapshot(root: str) -> dict:
    """Every file and folder under ``root`` except flower's own ``.flower``: path -> (mode, bytes)."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not (folder == root and d == ".flower"))
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            st = os.lstat(path)
            data = open(path, "rb").read() if os.path.isfile(path) and not os.path.islink(path) else b""
            seen[os.path.relpath(path, root)] = (st.st_mode, data)
    return seen


class Guard(unittest.TestCase):
    def test_write_tools_are_refused(self):
        for name in ("Write", "Edit", "MultiEdit", "NotebookEdit"):
            answer = flower.judge_tool_decision(name, {"file_path": "/w/x"}, "/tmp/copy", ("/w",))
            self.assertEqual(answer["hookSpecificOutput"]["permissionDecision"], "deny", name)

    def test_a_command_runs_in_the_copy(self):
        answer = flower.judge_tool_decision("Bash", {"command": "python3 hello.py", "timeout": 5}, "/tmp/c d", ("/w",))
        out = answer["hookSpecificOutput"]
        self.assertEqual(out["permissionDecision"], "allow")
        self.assertEqual(out["updatedInput"], {"command": "cd '/tmp/c d' && python3 hello.py", "timeout": 5})

    def test_a_command_naming_the_workspace_is_refused_but_a_longer_name_is_not(self):
        deny = flower.judge_tool_decision("Bash", {"command": "rm /w/ws/hello.py"}, "/tmp/c", ("/w/ws",))
        self.assertEqual(deny["hookSpecificOutput"]["permissionDecision"], "deny")
        deny = flower.judge_tool_decision("Bash", {"command": "cd /w/ws && rm x"}, "/tmp/c", ("/w/ws",))
        self.assertEqual(deny["hookSpecificOutput"]["permissionDecision"], "deny")
        ok = flower.judge_tool_decision("Bash", {"command": "ls /w/ws2"}, "/tmp/c", ("/w/ws",))
        self.assertEqual(ok["hookSpecificOutput"]["permissionDecision"], "allow")

    def test_no_copy_no_command_and_other_tools_pass(self):
        self.assertEqual(flower.judge_tool_decision("Bash", {"command": "ls"}, None, ("/w",))
                         ["hookSpecificOutput"]["permissionDecision"], "deny")
        self.assertEqual(flower.judge_tool_decision("Read", {"file_path": "/w/x"}, None, ("/w",)), {})

    def test_the_refusals_are_in_the_text_table(self):
        zh = flower.judge_tool_decision("Write", {}, "/c", ("/w",), "zh")
        self.assertIn("判定者", zh["hookSpecificOutput"]["permissionDecisionReason"])


class Sandbox(unittest.TestCase):
    def test_a_round_copies_the_workspace_without_flower_and_removes_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            ws = os.path.join(tmp, "ws")
            os.makedirs(os.path.join(ws, ".flower", "notes"))
            os.makedirs(os.path.join(ws, "src"))
            with open(os.path.join(ws, "src", "a.py"), "w") as fh:
                fh.write("print('hi')\n")
            os.symlink("src/a.py", os.path.join(ws, "link"))
            box = flower.JudgeSandbox(flower.Paths(ws))
            with box.round() as copy:
                self.assertEqual(box.copy, copy)
                self.assertNotEqual(os.path.realpath(copy), os.path.realpath(ws))
                self.assertEqual(open(os.path.join(copy, "src", "a.py")).read(), "print('hi')\n")
                self.assertTrue(os.path.islink(os.path.join(copy, "link")))
                self.assertFalse(os.path.exists(os.path.join(copy, ".flower")))
                hook = asyncio.run(box.guard({"tool_name": "Bash", "tool_input": {"command": "ls"}}, None, None))
                self.assertIn(copy, hook["hookSpecificOutput"]["updatedInput"]["command"])
            self.assertFalse(os.path.exists(copy))
            self.assertIsNone(box.copy)
            self.assertTrue(os.path.exists(os.path.join(ws, ".flower", "notes")))

    def test_the_starter_judge_may_run_commands_but_not_write(self):
        with tempfile.TemporaryDirectory() as ws:
            rt = flower.Runtime.__new__(flower.Runtime)
            rt.paths, rt.lang = flower.Paths(ws), "en"
            rt._lineage = flower.Lineage(os.path.join(ws, ".flower", "lineage.json"), ws, {}, 0)
            rt._warned, rt.degraded, rt._stored_hooks = set(), [], []
            rt.state = None
            flow = flower.starter_flow("x", rt=rt)
            work = [s for s in flow.steps if s.name == "work"][0]
            self.assertIsNotNone(work.gate)
        self.assertIn("Bash", flower.JUDGE_TOOLS)
        self.assertNotIn("Write", flower.JUDGE_TOOLS)


GOAL_HI = "# Goal\nhello.py greets\n\n# Checks\n- `python3 hello.py` prints hi"


def tool_results(body: dict) -> str:
    """The text of the tool results in the last user message of a request."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user" and isinstance(message.get("content"), list):
            parts = []
            for block in message["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    content = block.get("content")
                    parts.append(content if isinstance(content, str) else json.dumps(content))
            return "\n".join(parts)
    return ""


class RunningJudge(Roles):
    """Roles whose judge runs the check with Bash (plus side effects a judge must not leave behind),
    then judges by what the command printed."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __call__(self, body):
        role = role_of(body)
        if role == "goal":
            with self.lock:
                self.log.append((role, body))
            return text(GOAL_HI)
        if role != "judge":
            return super().__call__(body)
        with self.lock:
            self.log.append((role, body))
            results = tool_results(body)
            if not results:
                return tool("Bash", {"command": "python3 hello.py; echo judged > judge_was_here.txt; rm -f hello.py",
                                     "description": "run the check"})
            self.seen.append(results)
            printed = results.split("\n")[0].strip()
            return text("## Reasons\nit printed " + printed + ("\nVERDICT: achieved" if printed == "hi"
                                                                  else "\n## Failed checks\n- prints hi\nVERDICT: not_yet"))


@unittest.skipUnless(HAVE_SDK, SKIP)
class JudgeRunsTheCheck(E2ECase, unittest.TestCase):
    """The real CLI runs the judge's command; the verdict follows what it printed."""


    def setUp(self):
        super().setUp()
        self.roles = RunningJudge()
        self.api.responder = self.roles

    def hello(self, word):
        with open(os.path.join(self.ws, "hello.py"), "w") as fh:
            fh.write(f"print({word!r})\n")

    def test_judge_runs_the_check_not_yet_then_achieved_and_the_workspace_is_untouched(self):
        self.hello("bye")
        before = snapshot(self.ws)
        p = self.flower("make hello.py print hi", "--rounds", "1", check=False)
        self.assertNotEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertTrue(self.roles.seen, p.stderr[-2000:])
        self.assertIn("bye", self.roles.seen[0])
        self.assertEqual(snapshot(self.ws), before)
        verdicts = [r for r in self.manifest() if "judge" in r["step"]]
        self.assertTrue(verdicts)
        # the same workspace, now printing hi: achieved, and still untouched by the judge
        self.hello("hi")
        before = snapshot(self.ws)
        self.roles.seen.clear()
        p = self.flower("now it prints hi")
        self.assertIn("hi", self.roles.seen[-1].split("\n")[0])
        self.assertEqual(snapshot(self.ws), before)
        self.assertFalse([d for d in os.listdir(tempfile.gettempdir()) if d.startswith("flower-judge-")
                          and os.path.exists(os.path.join(tempfile.gettempdir(), d, "ws", "judge_was_here.txt"))])


if __name__ == "__main__":
    unittest.main()
