"""End-to-end tier, nothing done twice and nothing false in the history (issue 36, items 1, 5, 6).

The fake model here *trusts its transcript*, as a real one does: it redoes every step its conversation
does not show as done (a result that says "rejected", "not produced" or an exit code is not done), and
answers "text, then tool_use" in one message. Each step's Bash command appends a timestamped line to
``steps.log``, so a step done twice shows up on disk as a line written twice. The real SDK and CLI run
against tests/fakeapi.py; the tests assert on the disk and on what the fake API was sent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import threading
import unittest

import flower
from tests import fakeapi
from tests.fakeapi import FakeAnthropic, Reply, last_user_text
from tests.helpers import E2ECase, HAVE_SDK, Roles, SKIP, freeze_front, role_of

LOG = "steps.log"


def _texts(body: dict) -> list[tuple[str, str, bool]]:
    """(kind, text, is_error) of every text and tool_result block of a request's messages."""
    out = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            out.append(("text", content, False))
            continue
        for block in content or []:
            if block.get("type") == "text":
                out.append(("text", block.get("text", ""), False))
            elif block.get("type") == "tool_result":
                said = block.get("content")
                said = said if isinstance(said, str) else json.dumps(said, ensure_ascii=False)
                out.append(("result", said, bool(block.get("is_error"))))
    return out


def is_ritual(body: dict) -> bool:
    asked = last_user_text(body)
    return any(flower.text(key, lang)[:30] in asked for lang in ("en", "zh") for key in ("handoff_prompt", "handoff_fix"))


class TrustingModel:
    """The work model: ``steps`` numbered steps, done in order, each once its conversation shows it done.

    Done means a tool result without error that says ``STEP-k-OK`` (or a carry that says
    ``DONE-STEPS=k``). A result saying the run was killed is checked on disk before anything is redone.
    ``level(n)`` gives the context level of the n-th work answer (1-based)."""

    def __init__(self, workspace: str, steps: int = 4, level=lambda n: 20_000, slow: dict | None = None,
                 silent: tuple = ()):
        self.log = os.path.join(workspace, LOG)
        self.silent = silent            # the numbers of the work answers that are a tool_use alone
        self.steps = steps
        self.level = level
        self.slow = slow or {}          # step -> shell snippet run after its line is written
        self.answers = 0
        self.kinds: list[str] = []      # what each request was answered with, in order
        self.lock = threading.Lock()

    def done(self, body: dict) -> int:
        done = 0
        for kind, said, is_error in _texts(body):
            if kind == "text":
                done = max([done] + [int(k) for k in re.findall(r"DONE-STEPS=(\d+)", said)])
            elif not is_error:
                done = max([done] + [int(k) for k in re.findall(r"STEP-(\d+)-OK", said)])
        return done

    def to_check(self, body: dict, done: int) -> int | None:
        """The step whose last result says the run was killed mid-way (the model looks before redoing)."""
        results = [said for kind, said, _ in _texts(body) if kind == "result"]
        if results and "when the run was killed" in results[-1] and done < self.steps:
            return done + 1
        return None

    def command(self, k: int) -> str:
        line = f"echo step-{k} $(date +%s%N) >> {self.log}"
        return f"{line} && {self.slow[k]} && echo STEP-{k}-OK" if k in self.slow else f"{line} && echo STEP-{k}-OK"

    def __call__(self, body: dict) -> Reply:
        with self.lock:
            if is_ritual(body):
                done = self.done(body)
                self.kinds.append("ritual")
                return fakeapi.text(f"## Status\nDONE-STEPS={done}\n## Decisions\nsteps in order\n## Dead ends\n(none)\n"
                                    f"## Next step\nRun `sh step.sh {done + 1}`\n## Pointers\n- {LOG}",
                                    input_tokens=1000)
            self.answers += 1
            level = self.level(self.answers)
            usage = fakeapi._usage(input_tokens=1000, cache_read=max(0, level - 1000))
            done = self.done(body)
            check = self.to_check(body, done)
            if check is not None:
                self.kinds.append(f"check{check}")
                look = f"grep -q '^step-{check} ' {self.log} && echo STEP-{check}-OK || echo STEP-{check}-MISSING"
                return Reply([("text", f"checking step {check}"), ("tool_use", "Bash", {"command": look})], usage=usage)
            if done >= self.steps:
                self.kinds.append("final")
                return Reply([("text", f"all {self.steps} steps done")], usage=usage)
            k = done + 1
            self.kinds.append(f"step{k}")
            say = [] if self.answers in self.silent else [("text", f"doing step {k}")]
            return Reply(say + [("tool_use", "Bash", {"command": self.command(k)})], usage=usage)

    def lines(self) -> list[str]:
        try:
            with open(self.log, encoding="utf-8") as fh:
                return [line.split()[0] for line in fh if line.strip()]
        except FileNotFoundError:
            return []


@unittest.skipUnless(HAVE_SDK, SKIP)
class Truth(E2ECase, unittest.TestCase):
    flower, spawn = E2ECase.flower, E2ECase.spawn

    def flow(self, model: TrustingModel) -> None:
        """The starter flow's fixed roles answer as in test_e2e; the work step is ``model``."""
        roles = Roles()

        def respond(body):
            return model(body) if role_of(body) in ("work", "ritual") else roles(body)
        self.api.responder = respond

    def stop_leftovers(self) -> None:
        """A tool the CLI ran in a process group of its own can outlive a killed flower: stop it."""
        from tests.helpers import processes_in
        for pid in processes_in(self.ws):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def stored_in(self, run_dir: str, sid: str) -> list[dict]:
        import sqlite3
        db = sqlite3.connect(os.path.join(run_dir, "sessions.db"))
        try:
            rows = db.execute("SELECT payload FROM entries WHERE skey LIKE ? ORDER BY seq", (f"%/{sid}",)).fetchall()
            return [json.loads(r[0]) for r in rows]
        finally:
            db.close()

    def spec(self):
        return flower.AgentSpec("work", instructions="You do the work.", tools=["Bash"], allowed_tools=["Bash"])

    def sent_results(self, body: dict) -> list[str]:
        return [said for kind, said, _ in _texts(body) if kind == "result"]

    # -- item 1 --

    def test_handoff_crossing_on_a_text_block_lets_its_tool_finish_and_pays_no_extra_request(self):
        """The crossing answer is "text, then tool_use" (the text block brings the level): the tool runs
        once, its result is recorded as it is, and the ritual is the very next request."""
        model = TrustingModel(self.ws, steps=4, level=lambda n: 160_000 if n == 2 else 20_000)
        self.api.responder = model
        rt = self._runtime(handoff=flower.HandoffPolicy(window=200_000), model="claude-sonnet-4-5")
        result = asyncio.run(rt.run(self.spec(), "do the four steps", lineage_key="work"))
        rt.close()
        self.assertTrue(result.ok, result.error)
        self.assertEqual(result.generations, 1)
        self.assertEqual(model.lines(), ["step-1", "step-2", "step-3", "step-4"])   # none twice
        # the ritual follows the crossing answer at once: no request whose answer is thrown away
        self.assertEqual(model.kinds, ["step1", "step2", "ritual", "step3", "step4", "final"])
        self.assertEqual(len(self.api.requests), 6)
        ritual = self.api.requests[2]
        self.assertIn("STEP-2-OK", self.sent_results(ritual)[-1])
        for body in self.api.requests:
            self.assertFalse(any("rejected" in said for said in self.sent_results(body)))
        retired = self.stored(result.retired[0])
        kept = [b for e in retired for b in flower.blocks_of(e) if isinstance(b, dict) and b.get("type") == "tool_result"]
        self.assertEqual([b.get("is_error") for b in kept], [False, False])
        self.assertNotIn("User rejected tool use", json.dumps(retired))

    def test_handoff_after_a_tool_round_sends_no_request_whose_answer_nobody_reads(self):
        """The crossing answer is a tool_use alone: the turn ends once its result is recorded, before the
        CLI asks the model again (an interrupt after the result lands when that request is out)."""
        model = TrustingModel(self.ws, steps=3, level=lambda n: 160_000 if n == 2 else 20_000, silent=(2,))
        self.api.responder = model
        rt = self._runtime(handoff=flower.HandoffPolicy(window=200_000), model="claude-sonnet-4-5")
        result = asyncio.run(rt.run(self.spec(), "do the three steps", lineage_key="work"))
        rt.close()
        self.assertTrue(result.ok, result.error)
        self.assertEqual(model.lines(), ["step-1", "step-2", "step-3"])
        self.assertEqual(model.kinds, ["step1", "step2", "ritual", "step3", "final"])
        self.assertEqual(len(self.api.requests), 5)
        self.assertIn("STEP-2-OK", self.sent_results(self.api.requests[2])[-1])

    # -- item 5 --

    def test_a_tool_stopped_by_a_kill_of_flower_reads_as_stopped_on_resume(self):
        """kill -9 of flower while step 2's command runs (after its line is written): the guard stops
        the CLI and its tool (the CLI runs it in a process group of its own). The resumed model is told the command was stopped by the kill (not an exit
        code it would take for a failure), so it looks at the disk instead of running the step again."""
        model = TrustingModel(self.ws, steps=3, slow={2: "python3 -c 'import time; time.sleep(120)'"})
        self.flow(model)
        self.addCleanup(self.stop_leftovers)
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        proc = self.spawn("--no-goal")
        self.addCleanup(lambda: (proc.stdout.close(), proc.stderr.close()))
        self.wait_for(lambda: model.lines() == ["step-1", "step-2"], timeout=120, what="step 2 to be running")
        proc.kill()
        proc.wait(timeout=30)
        from tests.helpers import processes_in
        self.wait_for(lambda: not processes_in(self.ws), timeout=20, what="the tool to stop with its flower")
        killed = len(self.api.requests)
        self.flower("--no-goal")
        self.assertEqual(model.lines(), ["step-1", "step-2", "step-3"])   # step 2 was not run again
        resumed = self.api.requests[killed]
        said = self.sent_results(resumed)
        self.assertIn(flower.text("killed_result"), said[-1])
        self.assertFalse(any("Exit code 137" in r or "Exit code 143" in r for r in said), said)
        self.assertIn("check2", model.kinds)

    # -- item 6 --

    def small_disk(self, size: str = "16m") -> str:
        """A tmpfs of ``size`` for the run dir (root only: skipped where it cannot be mounted)."""
        import subprocess
        import tempfile
        mnt = tempfile.mkdtemp(prefix="flower-small-")
        self.addCleanup(os.rmdir, mnt)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", mnt],
                              capture_output=True, text=True)
        if done.returncode != 0:
            self.skipTest(f"cannot mount a small tmpfs here: {done.stderr.strip()[:100]}")
        self.addCleanup(subprocess.run, ["umount", mnt], capture_output=True)
        return mnt

    def test_a_store_write_that_failed_on_a_full_disk_is_recovered_from_the_clis_transcript(self):
        """Step 2's command fills the run dir's disk; it has room again once flower has said that a write
        failed (step 3's command waits for that). The store misses what came in between, the CLI's own
        transcript holds it. The next wake sends it as it was (not "not produced"), nothing is done
        twice, and the warning names the real cause."""
        run_dir = os.path.join(self.small_disk(), "run")
        ballast = os.path.join(os.path.dirname(run_dir), "ballast")
        model = TrustingModel(self.ws, steps=4, slow={
            2: f"{{ head -c 64M /dev/zero > {ballast} 2>/dev/null || true; }}",
            3: f"for i in $(seq 600); do [ -e {ballast} ] || break; sleep 0.1; done"})
        self.api.responder = model
        events = []

        def on_event(event):
            events.append(event)
            if event.kind == "info" and "could not save" in event.data.get("message", ""):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(ballast)
        rt = self._runtime(run_dir=run_dir, on_event=on_event)
        first = asyncio.run(rt.run(self.spec(), "do the four steps", lineage_key="work"))
        rt.close()
        self.assertTrue(first.ok, first.error)
        self.assertEqual(model.lines(), ["step-1", "step-2", "step-3", "step-4"])
        warned = [e.data["message"] for e in events if e.kind == "info"]
        self.assertFalse(os.path.exists(ballast), warned)                          # a write did fail
        self.assertTrue(any("full" in line for line in warned), warned)           # the real cause is named
        self.assertFalse(any("no transaction is active" in line for line in warned), warned)
        woke = self.resume_steps(self.spec(), first.session_id, run_dir=run_dir)
        self.assertEqual(model.lines(), ["step-1", "step-2", "step-3", "step-4"])   # nothing done twice
        said = self.sent_results(woke)
        self.assertEqual([re.findall(r"STEP-\d-OK", r)[:1] for r in said],
                         [["STEP-1-OK"], ["STEP-2-OK"], ["STEP-3-OK"], ["STEP-4-OK"]])
        self.assertIn("doing step 3", FakeAnthropic.messages_text(woke))
        self.assertNotIn("not produced", FakeAnthropic.messages_text(woke))
        # the store has them back in their place: each step's result before the next answer
        order = [m for e in self.stored_in(run_dir, first.session_id) for b in flower.blocks_of(e)
                 if isinstance(b, dict) and b.get("type") in ("text", "tool_result")
                 for m in re.findall(r"STEP-\d-OK|doing step \d", flower.block_text(b))]
        self.assertEqual(order[:8], ["doing step 1", "STEP-1-OK", "doing step 2", "STEP-2-OK",
                                     "doing step 3", "STEP-3-OK", "doing step 4", "STEP-4-OK"])

    def test_what_a_resumed_connection_could_not_store_is_kept_for_the_next_wake(self):
        """A resumed session writes its transcript into the SDK's temp copy, which disconnect deletes.
        The disk is full from step 2's command to the end of that connection: the copy is kept, and
        the next wake stores what it holds before the model is asked anything."""
        run_dir = os.path.join(self.small_disk(), "run")
        ballast = os.path.join(os.path.dirname(run_dir), "ballast")
        model = TrustingModel(self.ws, steps=1, slow={2: f"{{ head -c 64M /dev/zero > {ballast} 2>/dev/null || true; }}"})
        self.api.responder = model
        rt = self._runtime(run_dir=run_dir)
        first = asyncio.run(rt.run(self.spec(), "do the steps", lineage_key="work"))
        model.steps = 3
        events = []
        rt.on_event = events.append
        second = asyncio.run(rt.run(self.spec(), "now all three", resume=first.session_id, lineage_key="work"))
        rt.close()
        self.assertTrue(second.ok, second.error)
        self.assertTrue(any("full" in e.data.get("message", "") for e in events if e.kind == "info"))
        os.remove(ballast)
        sent = len(self.api.requests)
        rt = self._runtime(run_dir=run_dir)
        third = asyncio.run(rt.run(self.spec(), "check the steps once more", resume=first.session_id,
                                   lineage_key="work"))
        rt.close()
        self.assertTrue(third.ok, third.error)
        self.assertEqual(model.lines(), ["step-1", "step-2", "step-3"])
        woke = FakeAnthropic.messages_text(self.api.requests[sent])
        for k in (1, 2, 3):
            self.assertIn(f"STEP-{k}-OK", " ".join(self.sent_results(self.api.requests[sent])))
        self.assertIn("all 3 steps done", woke)
        self.assertNotIn(flower.text("killed_result"), woke)
        self.assertNotIn("not produced", woke)
        import glob
        import tempfile
        self.assertEqual(glob.glob(os.path.join(tempfile.gettempdir(), "claude-resume-kept-*", "projects", "*",
                                                first.session_id + ".jsonl")), [])   # stored, then removed


if __name__ == "__main__":
    unittest.main()
