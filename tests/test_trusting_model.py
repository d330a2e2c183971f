"""The instrument of issue 36 tested: tests/trusting_model.py, the fake model that trusts its transcript.

Core tier: scripted conversations (API request bodies as the CLI sends them) -> which step the model does
next. It redoes a step whose result reads as rejected, not produced, interrupted, failed or missing, and
does not redo a step whose result reads as a success, or that a carried handoff document lists as done.
Real tier (skipped without the SDK): the real CLI runs the model's Bash calls through ``flower once``
against tests/fakeapi.py; each step's line is written once, and the CLI's real success results read OK.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import unittest

import flower
from tests import fakeapi
from tests import trusting_model as tm
from tests.helpers import HAVE_SDK, ROOT



def call(k: int, tool_id: str) -> dict:
    """The assistant message of a step call: text, then the tool_use (as the model answers)."""
    return {"role": "assistant", "content": [
        {"type": "text", "text": f"Doing step {k}."},
        {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": tm.step_command(k, tool_id)}}]}


def result(tool_id: str, said: str, is_error: bool = False) -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": said,
                                         "is_error": is_error}]}


def conversation(*items: dict) -> list[dict]:
    return [{"role": "user", "content": "Do the five steps."}, *items]


class Readings(unittest.TestCase):
    def test_how_results_read(self):
        cases = {
            "wrote step 1": tm.OK,
            "User rejected tool use": tm.REJECTED,
            "The user doesn't want to proceed with this tool use. The tool use was rejected": tm.REJECTED,
            flower.text("interrupted_result"): tm.NOT_PRODUCED,
            flower.text("interrupted_result", "zh"): tm.NOT_PRODUCED,
            "[Request interrupted by user for tool use]": tm.INTERRUPTED,
            "this command was stopped when the run was killed; it may have partly run: check before doing "
            "it again": tm.KILLED_SAID,
            flower.text("expired_result", cmd="echo", n=3): tm.OK,
            "Exit code 1\nDisk full: this computer's volume ... has 0 MB free": tm.DISK_FULL,
        }
        for said, reading in cases.items():
            self.assertEqual(tm.read_result({"type": "tool_result", "content": said}), reading, said)
        self.assertEqual(tm.read_result({"type": "tool_result", "content": "Exit code 137", "is_error": True}),
                         tm.ERROR)
        self.assertEqual(tm.read_result({"type": "tool_result", "content": [{"type": "text", "text": "ok"}]}),
                         tm.OK)

    def test_step_ranges_round_trip(self):
        for done in (set(), {1}, {1, 2, 3, 5}, {2, 4, 6, 7, 8}):
            self.assertEqual(tm.parse_steps(tm.format_steps(done)) if done else set(), done)
        self.assertEqual(tm.format_steps({1, 2, 3, 5}), "1-3,5")


class TrustsItsTranscript(unittest.TestCase):
    def test_does_not_redo_a_done_step(self):
        messages = conversation(call(1, "t1"), result("t1", "wrote step 1"), call(2, "t2"), result("t2", "wrote step 2"))
        self.assertEqual(tm.next_step(messages, 5), 3)
        blocks, k = tm.work_blocks(messages, 5, "t3")
        self.assertEqual(k, 3)
        self.assertEqual([b[0] for b in blocks], ["text", "tool_use"])   # text first, then the tool
        self.assertEqual(tm.step_of_input(blocks[1][2]), 3)
        self.assertEqual(blocks[1][3], "t3")

    def test_redoes_a_step_its_transcript_does_not_show_done(self):
        undone = {
            "rejected": result("t2", "User rejected tool use", is_error=True),
            "not produced": result("t2", flower.text("interrupted_result")),
            "killed": result("t2", "Exit code 137", is_error=True),
            "killed, said": result("t2", "stopped when the run was killed; it may have partly run"),
        }
        for why, second in undone.items():
            messages = conversation(call(1, "t1"), result("t1", "wrote step 1"), call(2, "t2"), second)
            self.assertEqual(tm.next_step(messages, 5), 2, why)
        no_result = conversation(call(1, "t1"), result("t1", "wrote step 1"), call(2, "t2"))
        self.assertEqual(tm.next_step(no_result, 5), 2)
        self.assertEqual(tm.calls_in(no_result)["t2"].reading, tm.NO_RESULT)
        lost = conversation(call(1, "t1"), result("t1", "wrote step 1"))   # step 2 ran, history lost it
        self.assertEqual(tm.next_step(lost, 5), 2)

    def test_a_later_success_makes_a_step_done(self):
        messages = conversation(call(1, "t1"), result("t1", "User rejected tool use", is_error=True),
                                call(1, "t1b"), result("t1b", "wrote step 1"))
        self.assertEqual(tm.next_step(messages, 2), 2)

    def test_a_successor_trusts_the_handoff_document(self):
        done = conversation(call(1, "t1"), result("t1", "wrote step 1"), call(2, "t2"),
                            result("t2", "User rejected tool use", is_error=True), call(3, "t3"),
                            result("t3", "wrote step 3"))
        status = tm.ledger_status(done)
        self.assertEqual(status, f"{tm.DONE_MARK} 1,3")   # the rejected step is not listed
        successor = [{"role": "user", "content": [{"type": "text", "text": f"carried:\n## Status\n{status}\n"}]}]
        self.assertEqual(tm.next_step(successor, 4), 2)
        # the model's own text never counts as a done list: only what the user side carries
        said = [{"role": "assistant", "content": [{"type": "text", "text": f"{tm.DONE_MARK} 1-4"}]}]
        self.assertEqual(tm.next_step(said, 4), 1)

    def test_a_degraded_handoff_and_a_judge_verdict(self):
        pointers = "\n".join(f"- ran: `{tm.step_command(k, f't{k}')}`" for k in (1, 2))
        successor = [{"role": "user", "content": [{"type": "text", "text": f"## Pointers\n{pointers}"}]}]
        self.assertEqual(tm.next_step(successor, 3), 3)   # what a degraded handoff says ran is done
        judged = successor + [{"role": "assistant", "content": "All done."},
                              {"role": "user", "content": f"## Failed checks\n- {tm.MISSING_MARK} 2"}]
        self.assertEqual(tm.next_step(judged, 3), 2)      # until a judge says it is missing
        redone = judged + [call(2, "t2b"), result("t2b", "wrote step 2")]
        self.assertEqual(tm.next_step(redone, 3), 3)

    def test_a_slow_step_is_still_its_step(self):
        command = tm.step_command(4, "t4", 0.5)
        self.assertIn("sleep 0.5", command)
        self.assertLess(command.index(tm.STEP_LOG), command.index("sleep"))   # the side effect comes first
        self.assertEqual(tm.step_of_input({"command": command}), 4)

    def test_all_done_is_a_final_text(self):
        messages = conversation(call(1, "t1"), result("t1", "wrote step 1"))
        blocks, k = tm.work_blocks(messages, 1, "t9")
        self.assertIsNone(k)
        self.assertEqual([b[0] for b in blocks], ["text"])

    def test_step_log_lines(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, tm.STEP_LOG)
            with open(path, "w") as fh:
                fh.write("step 2 1796426661.95 4242 toolu_a\ngarbage\nstep 2 1796426662.01 4243 toolu_b\n")
            lines = tm.read_step_log(path)
        self.assertEqual([(x.step, x.pid, x.tool_id) for x in lines], [(2, "4242", "toolu_a"), (2, "4243", "toolu_b")])


class HarnessCounts(unittest.TestCase):
    """bench/chaos.py's --trusting bookkeeping on made-up records (no process runs)."""

    def setUp(self):
        from tests.helpers import load_chaos
        self.chaos = load_chaos()

    def test_marks_and_concurrent_drivers(self):
        self.assertEqual(self.chaos.mark_of("/r3/v1/messages?beta=true"), "r3")
        self.assertEqual(self.chaos.mark_of("/v1/messages"), "")
        spans = {("s1", "r0"): (0.0, 10.0), ("s1", "m0"): (9.0, 12.0),    # overlap: two drivers
                 ("s1", "r1"): (12.5, 20.0), ("s2", "m1"): (13.0, 14.0)}   # one after the other; another session
        found = self.chaos.Chaos._concurrent(spans)
        self.assertEqual([c["marks"] for c in found], [["r0", "m0"]])
        self.assertEqual(found[0]["overlap_s"], 1.0)


@unittest.skipUnless(HAVE_SDK, "claude-agent-sdk not installed: the real tier runs in CI (.ci/run installs it)")
class RealCli(unittest.TestCase):
    def test_each_step_once_through_the_real_cli(self):
        """Three steps through the real CLI's Bash tool: each line written once, the final answer after
        them, and every result the model was sent reads as a success."""
        steps, lock, sent = 3, threading.Lock(), []

        def model(body: dict) -> fakeapi.Reply:
            with lock:
                sent.append(body)
                blocks, _ = tm.work_blocks(body.get("messages") or [], steps, f"toolu_t{len(sent):03d}")
            return fakeapi.Reply(blocks)

        with tempfile.TemporaryDirectory() as tmp, fakeapi.FakeAnthropic() as api:
            ws = os.path.join(tmp, "ws")
            os.makedirs(ws)
            api.responder = model
            env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "FLOWER_"))}
            env.update(fakeapi.cli_env(api, tmp), NO_COLOR="1")
            done = subprocess.run([sys.executable, os.path.join(ROOT, "flower.py"), "once", "-t", "Bash",
                                   "-p", "bypassPermissions", "Do the steps."], cwd=ws, env=env,
                                  capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
            self.assertEqual(done.returncode, 0, done.stderr[-2000:])
            lines = tm.read_step_log(os.path.join(ws, tm.STEP_LOG))
        self.assertEqual([x.step for x in lines], [1, 2, 3], done.stdout)
        self.assertEqual(len({x.pid for x in lines}), 3)
        self.assertIn(f"All {steps} steps are done.", done.stdout)
        readings = [r for _, r, _ in tm.results_in(sent[-1]["messages"])]
        self.assertEqual(readings, [tm.OK] * steps)


if __name__ == "__main__":
    unittest.main()
