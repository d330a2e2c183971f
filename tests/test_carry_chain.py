"""The carry chain holds across a handoff whose document could not be written (issue 36).

A degraded handoff carries on what the sessions before did from the step's handoff document. When the
handoff before could not write that document (a full run dir, a broken notes dir: the trusting chaos's
"notes" fault), the document is an older one, or none, and the successor of the degraded handoff redid
every step of the session in between (trusting chaos: 17 lines written twice after a degraded handoff).
What the current session was started from is known: the ledger of this run's handoff, or the carry in
its own first prompt."""

from __future__ import annotations

import asyncio
import os
import tempfile
import unittest
import uuid
from unittest import mock

import flower
from flower import HandoffPolicy, Ledger, assemble_carry, carried_ledger, same_handoff
from tests import fakesdk
from tests.fakesdk import AssistantMessage, FAKE

DONE = """## Status
DONE-STEPS: 1-17

## Decisions
- one Bash call per step, because steps.log is append-only

## Dead ends
(none)

## Next step
Run `echo step 18 >> steps.log`.

## Pointers
- steps.log
"""


def carry_of(ledger: Ledger, budget: int = 18000) -> str:
    return assemble_carry(ledger, nav={"handoff document": "/ws/.flower/notes/handoff-work.md"},
                          thread=[("user", "DONE-STEPS: 99"), ("assistant", "on it")], budget_chars=budget).text


class Pure(unittest.TestCase):
    def test_the_carry_reads_back_as_its_ledger_without_thread_or_nav(self):
        ledger = Ledger.parse(DONE)
        got = carried_ledger([{"type": "user", "uuid": "u", "message": {"role": "user", "content": carry_of(ledger)}},
                              {"type": "user", "uuid": "v", "message": {"role": "user", "content": "later"}}])
        self.assertEqual(got.sections, ledger.sections)
        self.assertNotIn("DONE-STEPS: 99", repr(got.sections))   # the recent thread is not a ledger
        self.assertIsNone(carried_ledger([{"type": "user", "message": {"role": "user", "content": "do it"}}]))
        self.assertIsNone(carried_ledger([]))
        zh = Ledger.parse(DONE)
        zh_carry = assemble_carry(zh, nav={"x": "y"}, thread=[], lang="zh").text
        self.assertIn("DONE-STEPS: 1-17", carried_ledger([{"type": "user", "message": {"content": zh_carry}}])
                      .get("status"))

    def test_same_handoff_tells_the_document_a_carry_came_from(self):
        ledger = Ledger.parse(DONE)
        document = Ledger.parse(ledger.render("work", 1))
        trimmed = Ledger({**ledger.sections, "pointers": "\n".join(f"- file{i}" for i in range(3000))})
        carried = carried_ledger([{"type": "user", "message": {"content": carry_of(trimmed, budget=3000)}}])
        self.assertIn("more lines trimmed", carried.get("pointers"))
        self.assertTrue(same_handoff(carried, Ledger.parse(trimmed.render("work", 1))))
        self.assertTrue(same_handoff(carried_ledger([{"type": "user", "message": {"content": carry_of(ledger)}}]),
                                     document))
        older = Ledger({**ledger.sections, "status": "DONE-STEPS: none"})
        self.assertFalse(same_handoff(carried, older))


class ThroughAFailedDocument(unittest.TestCase):
    """On the fake SDK: handoff 1 hands over "DONE-STEPS: 1-17" but cannot replace the step's older
    document; session 2's handoff is degraded; session 3 must still be told steps 1-17 are done."""

    def setUp(self):
        fakesdk.install()
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.events = []
        os.environ.pop("FLOWER_WINDOW", None)
        self.rt = flower.Runtime(workspace=self.ws, run_dir=os.path.join(self.tmp.name, "runs"),
                                 resilience=flower.Resilience(probe=False, base_delay=0),
                                 handoff=HandoffPolicy(window=200_000), on_event=self.events.append)
        doc = self.rt.paths.handoff("work")
        os.makedirs(os.path.dirname(doc), exist_ok=True)
        with open(doc, "w", encoding="utf-8") as fh:   # an earlier wake's document
            fh.write(Ledger({**Ledger.parse(DONE).sections, "status": "DONE-STEPS: none"}).render("work", 1))
        with open(os.path.join(os.path.dirname(doc), "archive"), "w") as fh:
            fh.write("not a directory\n")   # the old document cannot be archived: no new one is written

    def tearDown(self):
        self.rt.close()
        fakesdk.uninstall()
        self.tmp.cleanup()

    def run_turns(self, turns):
        FAKE.turns = turns
        return asyncio.run(self.rt.run(flower.AgentSpec("work"), "do the 40 steps", lineage_key="work"))

    def test_the_successor_of_a_degraded_handoff_is_told_what_the_sessions_before_did(self):
        result = self.run_turns([
            [("tool", "Bash", {"command": 'echo "step 17" >> steps.log'}, "wrote", 151_000)],
            [("text", DONE, 151_000)],                                   # handoff 1: a good document
            [("tool", "Bash", {"command": 'echo "step 18" >> steps.log'}, "wrote", 151_000)],
            [("text", "no document", 151_000)],                          # handoff 2: degraded
            [("text", "finished", 1000)]])
        self.assertTrue(result.ok, result.error)
        self.assertEqual(result.generations, 2)
        self.assertIn("could not write", " ".join(e.data.get("message", "") for e in self.events if e.kind == "info"))
        third = FAKE.calls[-1]["prompt"]
        self.assertIn("[degraded:", third)
        self.assertIn("DONE-STEPS: 1-17", third)
        self.assertIn('echo "step 18" >> steps.log', third)
        self.assertNotIn("DONE-STEPS: none", third)

    def test_this_runs_ledger_carries_on_when_the_carry_never_reached_the_store(self):
        mirror = fakesdk.ClaudeSDKClient._mirror

        async def no_carry(client, entry):   # the CLI could not write the successor's first prompt
            content = (entry.get("message") or {}).get("content")
            if not (isinstance(content, str) and content.startswith(flower.text("carry_head"))):
                await mirror(client, entry)

        with mock.patch.object(fakesdk.ClaudeSDKClient, "_mirror", no_carry):
            self.test_the_successor_of_a_degraded_handoff_is_told_what_the_sessions_before_did()

    def test_a_degraded_ledger_lists_what_ran_when_the_store_holds_none_of_the_session(self):
        mirror = fakesdk.ClaudeSDKClient._mirror
        full = [False]

        async def home_full(client, entry):   # the CLI can write nothing of session 2
            if not full[0]:
                await mirror(client, entry)

        def streamed(content, model, **kw):
            return AssistantMessage(content, model, uuid=str(uuid.uuid4()), **kw)

        def session_two(prompt, options, loaded):
            full[0] = True
            return [("tool", "Bash", {"command": 'echo "step 18" >> steps.log'}, "wrote", 100_000),
                    ("error", "API Error: 400 prompt is too long", 400, "prompt_too_long")]

        with mock.patch.object(fakesdk.ClaudeSDKClient, "_mirror", home_full), \
                mock.patch.object(fakesdk, "AssistantMessage", streamed):
            result = self.run_turns([
                [("tool", "Bash", {"command": 'echo "step 17" >> steps.log'}, "wrote", 151_000)],
                [("text", DONE, 151_000)], session_two, [("text", "finished", 1000)]])
        self.assertEqual(result.generations, 2, result.error)
        third = FAKE.calls[-1]["prompt"]
        self.assertIn("[degraded: context overflow]", third)
        self.assertIn('- ran: `echo "step 18" >> steps.log`', third)
        self.assertIn("DONE-STEPS: 1-17", third)

    def state(self, sid: str, carried=None):
        return flower._RunState("work", 200_000, 150_000, 140_000, True, lambda e: None, sid=sid, carried=carried)

    def test_a_later_run_reads_it_from_the_sessions_first_prompt(self):
        self.run_turns([[("tool", "Bash", {"command": 'echo "step 17" >> steps.log'}, "wrote", 151_000)],
                        [("text", DONE, 151_000)],
                        [("text", "paused", 1000)]])
        sid = self.rt.lineage.steps["work"]
        entries = self.rt.store.inner.load_sync({"project_key": self.rt.project_key, "session_id": sid})
        earlier = self.rt._carried_on(self.state(sid), entries)   # no ledger in memory: a new run
        self.assertIn("DONE-STEPS: 1-17", earlier.get("status"))

    def test_the_ledger_of_this_runs_handoff_wins_when_the_first_prompt_was_never_stored(self):
        ledger = Ledger.parse(DONE)
        self.assertIs(self.rt._carried_on(self.state("s2", ("s2", ledger)), []), ledger)
        stale = self.rt._carried_on(self.state("s3", ("s2", ledger)), [])   # another session's: the document
        self.assertEqual(stale.get("status"), "DONE-STEPS: none")

    def test_a_trimmed_carry_is_read_whole_from_its_document(self):
        whole = Ledger({**Ledger.parse(DONE).sections, "pointers": "\n".join(f"- file{i}" for i in range(3000))})
        with open(self.rt.paths.handoff("work"), "w", encoding="utf-8") as fh:
            fh.write(whole.render("work", 2))
        entries = [{"type": "user", "uuid": "u", "message": {"role": "user", "content": carry_of(whole, 3000)}}]
        self.assertIn("- file2999", self.rt._carried_on(self.state("s"), entries).get("pointers"))


if __name__ == "__main__":
    unittest.main()
