"""Delegation under chaos (issue 39): what ``bench/chaos.py --delegate`` found, and a small job of it.

Found and fixed: a coordinator's degraded handoff document listed no delegated work (its successor
delegated the whole job again); a worker the CLI ended on an API error came back as that error and the
worker's last words although its tools ran; a worker's answer the CLI could not write (HOME full) ended
in a plain ``done``; ``flower.py handoff`` asked while a worker ran waited for one more coordinator answer
(another whole worker when that answer delegated again). Also: the fake coordinator of
tests/delegating_model.py reads its conversation as a model would, and a real-tier job under kills that
wait for their phase (a worker's tool running, between worker turns, right after an Agent call's result)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import threading
import unittest

import flower
from tests import delegating_model as dm
from tests import trusting_model as tm
from tests.fakeapi import FakeAnthropic, error, text, tool
from tests.helpers import E2ECase, RUN_FLOWER, HAVE_SDK, SKIP, SmallHome, delegating_chaos, fill, freeze_front, system_of

FRAME = ("[Subagent hand-back] The text below is the final report of a subagent this session delegated to. "
         "The report follows:\n  Conclusion: done. {report}\nagentId: a1\n<usage>subagent_tokens: 7005</usage>")


def agent_use(uid, parent, tool_id, description):
    return {"type": "assistant", "uuid": uid, "parentUuid": parent, "message": {"role": "assistant", "content": [
        {"type": "text", "text": f"delegating {description}"},
        {"type": "tool_use", "id": tool_id, "name": "Agent",
         "input": {"description": description, "prompt": f"do {description}", "subagent_type": "worker"}}]}}


def agent_result(uid, parent, tool_id, report):
    return {"type": "user", "uuid": uid, "parentUuid": parent, "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tool_id, "content": [{"type": "text", "text": FRAME.format(report=report)}]}]}}


class DegradedLedgerOfACoordinator(unittest.TestCase):
    def entries(self):
        return [{"type": "user", "uuid": "u0", "parentUuid": None, "message": {"role": "user", "content": "go"}},
                agent_use("a1", "u0", "t1", "steps 1-2"), agent_result("r1", "a1", "t1", "DONE-STEPS: 1-2."),
                agent_use("a2", "r1", "t2", "steps 3-4"), agent_result("r2", "a2", "t2", "DONE-STEPS: 3-4."),
                agent_use("a3", "r2", "t3", "steps 5-6")]   # killed while its worker ran: no result

    def test_it_lists_each_delegated_task_with_its_report(self):
        ledger = flower.degraded_ledger(self.entries(), "context overflow", "do the job")
        pointers = ledger.sections["pointers"]
        self.assertIn("- delegated: `steps 1-2` -> Conclusion: done. DONE-STEPS: 1-2.", pointers)
        self.assertIn("- delegated: `steps 3-4` -> Conclusion: done. DONE-STEPS: 3-4.", pointers)
        self.assertNotIn("agentId", pointers)
        self.assertNotIn("Subagent hand-back", pointers)
        self.assertIn("- delegated: `steps 5-6` -> (no report; check the disk for what it did)", pointers)

    def test_a_successor_that_trusts_its_carry_delegates_only_what_was_not_done(self):
        ledger = flower.degraded_ledger(self.entries(), "context overflow", "do the job")
        carry = flower.assemble_carry(ledger, nav={}, thread=[], budget_chars=18000)
        first = [{"role": "user", "content": [{"type": "text", "text": carry.text}]}]
        done, must_glance, _ = dm.coordinator_view(first)
        self.assertEqual(done, {1, 2, 3, 4})
        self.assertTrue(must_glance)   # steps 5-6 may be partly done: look at the disk first

    def test_the_newest_fit_the_budget(self):
        entries = [{"type": "user", "uuid": "u0", "parentUuid": None, "message": {"role": "user", "content": "go"}}]
        for k in range(200):
            entries += [agent_use(f"a{k}", entries[-1]["uuid"], f"t{k}", f"steps {k}"),
                        agent_result(f"r{k}", f"a{k}", f"t{k}", f"DONE-STEPS: {k}. " + "x" * 200)]
        lines = flower._delegated_lines(entries)
        self.assertLessEqual(sum(len(line) + 1 for line in lines[1:]), flower.DELEGATED_CHARS)
        self.assertRegex(lines[0], r"^- \(\d+ earlier delegation\(s\) not listed\)$")
        self.assertIn("`steps 199`", lines[-1])


    def test_a_failed_call_is_no_report(self):
        entries = self.entries()[:5] + [agent_use("a3", "r2", "t3", "steps 5-6"), {
            "type": "user", "uuid": "r3", "parentUuid": "a3", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t3", "is_error": True,
                 "content": flower.WORKER_API_ERROR + ": API Error: 500 Internal server error"}]}}]
        pointers = flower.degraded_ledger(entries, "context overflow", "do the job").sections["pointers"]
        self.assertIn("- delegated: `steps 5-6` -> (no report: Agent terminated early", pointers)
        self.assertIn("; check the disk for what it did)", pointers)


PARTIAL = {"status": "completed", "agentId": "a1", "totalToolUseCount": 1, "content": [
    {"type": "text", "text": flower.WORKER_API_ERROR + ": API Error: 500 boom.\n\nEverything below is PARTIAL output "
                             "recovered from the agent before it was cut off."},
    {"type": "text", "text": "Step 20 is not done yet; doing it now."}]}


class WorkerErrorHook(unittest.TestCase):
    """A worker the CLI ended on an API error reads as stopped, not as not done (the hook called directly)."""

    def call(self, data):
        return asyncio.run(flower.worker_error_hook()(data, "t1", None))

    def test_a_partial_result_is_replaced_by_the_neutral_one_in_its_own_shape(self):
        out = self.call({"hook_event_name": "PostToolUse", "tool_name": "Agent", "tool_response": PARTIAL})
        new = out["hookSpecificOutput"]["updatedToolOutput"]
        self.assertEqual(new["content"], [{"type": "text", "text": flower.text("worker_api_error")}])
        self.assertEqual({k: v for k, v in new.items() if k != "content"},
                         {k: v for k, v in PARTIAL.items() if k != "content"})

    def test_a_failed_call_gets_the_neutral_words_as_context(self):
        out = self.call({"hook_event_name": "PostToolUseFailure", "tool_name": "Agent",
                         "error": flower.WORKER_API_ERROR + ": API Error: 529 Overloaded"})
        self.assertEqual(out["hookSpecificOutput"], {"hookEventName": "PostToolUseFailure",
                                                     "additionalContext": flower.text("worker_api_error")})

    def test_anything_else_is_left_alone(self):
        report = dict(PARTIAL, content=[{"type": "text", "text": "Conclusion: done."}])
        self.assertEqual(self.call({"hook_event_name": "PostToolUse", "tool_name": "Agent", "tool_response": report}), {})
        self.assertEqual(self.call({"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_response": PARTIAL}), {})
        self.assertEqual(self.call({"hook_event_name": "PostToolUseFailure", "tool_name": "Agent",
                                    "error": "Permission denied"}), {})

    def test_the_coordinator_has_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            hooks = flower.coordinator(flower.Paths(tmp)).hooks
        for event in ("PostToolUse", "PostToolUseFailure"):
            self.assertTrue(any(matcher and "Agent" in matcher.split("|") for matcher, _ in hooks[event]), event)


@unittest.skipUnless(HAVE_SDK, SKIP)
class WorkerApiErrorLive(E2ECase, unittest.TestCase):
    """On the real CLI: a worker whose API calls keep failing after its first tool ran."""

    def run_case(self, say):
        self.env.pop("FLOWER_NO_DELEGATE", None)
        worker_q = [tool("Bash", {"command": "echo W1 > w1.txt"}, say=say)] + [error(500, "boom", "api_error")] * 12
        main_log = []

        def responder(body):
            if flower.text("worker_instructions")[:30] in system_of(body):
                return worker_q.pop(0) if worker_q else text("worker ok")
            main_log.append(body)
            return tool("Agent", {"description": "d", "prompt": "p", "subagent_type": "worker"}) \
                if len(main_log) == 1 else text("coordinated")
        self.api.responder = responder
        rt = self._runtime()
        result = asyncio.run(rt.run(flower.coordinator(rt.paths, instructions="You do the work."), "go"))
        rt.close()
        self.assertTrue(result.ok, result.error)
        self.assertEqual(self.read("w1.txt"), "W1\n")   # the worker's tool ran
        return FakeAnthropic.messages_text(main_log[-1])

    def test_partial_output_reaches_the_coordinator_as_the_neutral_result(self):
        sent = self.run_case(say="Writing w1 now.")
        self.assertIn(json.dumps(flower.text("worker_api_error"))[1:-1], sent)
        self.assertNotIn("Writing w1 now.", sent)
        self.assertNotIn("boom", sent)

    def test_a_failed_call_comes_with_the_neutral_words(self):
        sent = self.run_case(say="")
        self.assertIn(json.dumps(flower.text("worker_api_error"))[1:-1], sent)


@unittest.skipUnless(HAVE_SDK, SKIP)
class WorkerTranscriptUnstored(SmallHome, E2ECase, unittest.TestCase):
    """HOME (where the CLI writes transcripts) full while a worker runs (bench/chaos.py --delegate, seed 9:
    the run said plain ``done`` with a worker's answer in no store): flower says so, as for the main thread."""

    def setUp(self):
        super().setUp()
        self.env.pop("FLOWER_NO_DELEGATE", None)

    def run_job(self, full: bool):
        delegate = tool("Agent", {"description": "one", "prompt": "run one", "subagent_type": "worker"})

        def at(step):
            def answer(body):
                if full and step == "fill":
                    self.filler = fill(self.home)   # the coordinator's call starting the worker: the CLI cannot write now
                elif full and step == "free":
                    os.unlink(self.filler)   # the coordinator's closing answer: it can again
                return {"fill": delegate, "free": text("all done")}[step]
            return answer
        # HOME full before the worker's transcript exists (a file written before the fill could take
        # a few more lines into its last page) and until the worker has reported: however late the
        # CLI writes the worker's transcript, it cannot
        worker_q = [tool("Bash", {"command": "echo one"}), text("WORKER-REPORT")]

        def responder(body):
            if flower.text("worker_instructions")[:30] in system_of(body):
                item = worker_q.pop(0) if worker_q else text("worker ok")
                return item(body) if callable(item) else item
            return self.roles(body)
        self.roles.work = [at("fill"), at("free")]
        self.api.responder = responder
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.flower("--json")
        return p, [ln for ln in p.stderr.splitlines() if "never reached the session store" in ln]

    def test_a_worker_answer_the_cli_could_not_write_is_said(self):
        p, said = self.run_job(full=True)
        work_sid = self.lineage()["steps"]["work"]
        self.assertEqual(len(said), 1, p.stderr)
        self.assertIn(work_sid, said[0])
        closing = [ln for ln in p.stderr.splitlines() if ln.startswith("done ·")]
        self.assertIn("continuity degraded: 1 problem(s)", closing[0])

    def test_a_worker_whose_transcript_is_stored_is_not(self):
        p, said = self.run_job(full=False)
        self.assertEqual(said, [], p.stderr)
        self.assertNotIn("continuity degraded", p.stderr)


class FakeCoordinator(unittest.TestCase):
    """tests/delegating_model.py reads its conversation as a model would."""

    def test_a_stopped_worker_makes_it_look_at_the_disk_then_go_on(self):
        task = [{"role": "user", "content": "go"}]
        blocks, batch = dm.coordinator_blocks(task, 6, "c1", batch=2)
        self.assertEqual((blocks[-1][1], batch), ("Agent", {1, 2}))
        stopped = task + [{"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "Agent",
                                                             "input": blocks[-1][2]}]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                                        "content": flower.text("worker_stopped")}]}]
        blocks, batch = dm.coordinator_blocks(stopped, 6, "c2", batch=2)
        self.assertEqual(blocks[-1][2]["command"], dm.GLANCE)
        self.assertTrue(flower.is_read_only_command(dm.GLANCE))   # the coordinator may run it
        glanced = stopped + [{"role": "assistant", "content": [{"type": "tool_use", "id": "c2", "name": "Bash",
                                                                "input": blocks[-1][2]}]},
                             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c2",
                                                           "content": "step 1\n"}]}]
        blocks, batch = dm.coordinator_blocks(glanced, 6, "c3", batch=2)
        self.assertEqual(batch, {2, 3})

    def test_a_result_that_is_no_report_is_delegated_again(self):
        for said in ("The tool result was not produced", "Tool call interrupted", "Error: failed"):
            conv = [{"role": "user", "content": "go"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "Agent",
                                                       "input": {"prompt": f"{dm.BATCH_MARK} 1-2"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": said}]}]
            self.assertEqual(dm.coordinator_blocks(conv, 4, "c2", batch=2)[1], {1, 2}, said)

    def test_a_worker_runs_its_batch_then_reports(self):
        task = [{"role": "user", "content": f"Run steps. {dm.BATCH_MARK} 3-4 ({dm.CALL_MARK}c1)"}]
        self.assertEqual(dm.call_of(dm.worker_task(task)), "c1")
        blocks, k = dm.worker_blocks(task, "w1")
        self.assertEqual(k, 3)
        ran = task + [{"role": "assistant", "content": [{"type": "tool_use", "id": "w1", "name": "Bash",
                                                         "input": blocks[-1][2]}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "w1", "content": "wrote step 3"}]}]
        self.assertEqual(dm.worker_blocks(ran, "w2")[1], 4)
        done = ran + [{"role": "assistant", "content": [{"type": "tool_use", "id": "w2", "name": "Bash",
                                                          "input": {"command": tm.step_command(4, "w2")}}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "w2", "content": "wrote step 4"}]}]
        blocks, k = dm.worker_blocks(done, "w3")
        self.assertIsNone(k)
        self.assertIn(f"{tm.DONE_MARK} 3-4", blocks[0][1])


@unittest.skipUnless(HAVE_SDK, SKIP)
class AskedHandoffDuringAWorker(E2ECase, unittest.TestCase):
    """``flower.py handoff`` (issue 41) while a delegating ``go`` runs a worker: the hand-over waits for
    the Agent call to end; the running call is never interrupted."""

    def setUp(self):
        super().setUp()
        self.env.pop("FLOWER_NO_DELEGATE", None)

    def test_the_handoff_waits_for_the_agent_call_to_end(self):
        w1, w2 = os.path.join(self.ws, "w1.txt"), os.path.join(self.ws, "w2.txt")
        worker_log = []
        lock = threading.Lock()

        def ask_then_run(body):
            p = subprocess.run([*RUN_FLOWER, "handoff"], cwd=self.ws, env=self.env, capture_output=True,
                               text=True, timeout=60, stdin=subprocess.DEVNULL)
            self.assertEqual(p.returncode, 0, p.stderr)
            return tool("Bash", {"command": f"echo one > {w1}"})
        worker_q = [ask_then_run, tool("Bash", {"command": f"echo two > {w2}"}), text("WORKER-REPORT-MARK: wrote both")]
        self.roles.work = [tool("Agent", {"description": "write two files", "prompt": "write w1 and w2",
                                          "subagent_type": "worker"}), text("all done")]
        roles = self.roles

        def responder(body):
            if flower.text("worker_instructions")[:30] in system_of(body):
                with lock:
                    worker_log.append(body)
                    roles.log.append(("worker", body))
                    item = worker_q.pop(0) if worker_q else text("worker ok")
                return item(body) if callable(item) else item
            return roles(body)
        self.api.responder = responder
        p = self.flower("write two files", "--json")
        self.assertEqual((self.read("w1.txt"), self.read("w2.txt")), ("one\n", "two\n"))   # the worker ran on
        self.assertEqual(len(worker_log), 3)
        order = [role for role, _ in roles.log if role in ("work", "worker", "ritual")]
        # the whole worker, then at once the ritual: no answer of the coordinator in between
        self.assertEqual(order, ["work", "worker", "worker", "worker", "ritual", "work"])
        ritual = roles.bodies("ritual")[0]
        sent = FakeAnthropic.messages_text(ritual)
        self.assertIn("WORKER-REPORT-MARK", sent)             # the Agent call's result is the worker's report
        self.assertNotIn(flower.text("worker_stopped")[:40], sent)
        self.assertNotIn("interrupted", sent.lower())
        successor = roles.bodies("work")[1]
        self.assertIn("You take over unfinished work", FakeAnthropic.messages_text(successor))
        events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        phases = [e["data"].get("phase") for e in events if e["kind"] == "handoff"]
        self.assertEqual((phases.count("asked"), phases.count("done")), (1, 1))
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".flower", "handoff")))


# a fixed plan: each kill waits for its phase; a burst that spends a worker's retries; an outage
PLAN = [{"kind": "kill9", "at": 3, "phase": "tool"},
        {"kind": "burst", "at": 6, "statuses": [529, 529, 500, 529]},
        {"kind": "kill_cli", "at": 9, "target": "cli", "phase": "between"},
        {"kind": "outage", "at": 13, "seconds": 3.0},
        {"kind": "sigterm", "at": 16, "phase": "agent-result"}]


@unittest.skipUnless(HAVE_SDK, SKIP)
class ChaosDelegatingSeed(unittest.TestCase):
    """A small job of ``bench/chaos.py --delegate`` (real SDK + CLI, fake API) under a fixed plan."""

    def test_a_delegating_job_under_kills_at_each_phase(self):
        with delegating_chaos(PLAN, turns=10, handoffs=1, prefix="flower-chaos-deleg-") as (r, plan):
            story = "\n".join([f"{k}: {r.get(k)}" for k in ("finished", "dup", "killed_said", "disk_full_said",
                                                              "concurrent", "false_np", "silent_done", "skipped",
                                                              "missing", "lost", "runs")] + [f"logs: {r['dir']}"])
            self.assertEqual([p["kind"] for p in plan if "fired" in p], [p["kind"] for p in plan], story)
            self.assertTrue(r["finished"], story)
            self.assertTrue(r["expected_ok"], story)     # every step in steps.log
            self.assertEqual(r["dup"], [], story)        # none of them twice
            self.assertEqual(r["concurrent"], [], story)
            self.assertEqual(r["false_np"], [], story)
            self.assertEqual(r["silent_done"], [], story)

if __name__ == "__main__":
    unittest.main()
