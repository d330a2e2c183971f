"""A call the CLI streamed but never recorded is stored (issue 36): a CLI killed with its config dir
full streams "text, then tool_use", runs the tool and dies before any of it reaches its transcript; the
resumed model, which trusts its history, saw nothing of that call and did it again (trusting chaos:
"lost:never-sent"). flower keeps what the stream showed and stores what the store lacks."""

from __future__ import annotations

import asyncio
import unittest
import uuid
from unittest import mock

import flower
from flower import AgentSpec, Resilience, Runtime, stream_entries
from tests import fakesdk
from tests.fakesdk import FAKE, AssistantMessage, TextBlock, UserMessage, ThinkingBlock, ToolResultBlock, ToolUseBlock


def answer(*blocks, uid=None):
    return AssistantMessage(list(blocks), "m", usage={"input_tokens": 10}, message_id="msg_1", uuid=uid)


class Pure(unittest.TestCase):
    def test_unknown_messages_are_chained_in_stream_order_after_the_newest_stored(self):
        text = answer(TextBlock("doing step 3"), uid="a1")
        call = answer(ThinkingBlock("hm", "sig"), ToolUseBlock("toolu_3", "Bash", {"command": "echo 3"}), uid="a2")
        result = UserMessage([ToolResultBlock("toolu_3", "wrote 3", False)], uuid="u3")
        # a1 is stored, and after it an attachment the CLI wrote (the newest stored entry): the chain goes on there
        out = stream_entries([text, call, result], "sid", "attachment-after-a1", {"a1"})
        self.assertEqual([(e["uuid"], e["parentUuid"], e["type"]) for e in out],
                         [("a2", "attachment-after-a1", "assistant"), ("u3", "a2", "user")])
        self.assertEqual(out[0]["message"]["content"],   # the unsigned thinking block is left out
                         [{"type": "tool_use", "id": "toolu_3", "name": "Bash", "input": {"command": "echo 3"}}])
        self.assertEqual(out[1]["message"]["content"][0]["content"], "wrote 3")
        self.assertEqual(stream_entries([text, call], "sid", "leaf", set())[0]["parentUuid"], "leaf")
        self.assertEqual(stream_entries([text, call, result], "sid", "leaf", {"a1", "a2", "u3"}), [])
        self.assertEqual(stream_entries([answer(ThinkingBlock("x", "s"), uid="t")], "sid", "leaf", set()), [])

    def test_entries_are_stamped_as_the_cli_stamps_its_own(self):
        # a second-resolution stamp sorted before the CLI's entries of the same second where the CLI
        # mends a chain by time (trusting chaos, PostgreSQL seed 1)
        entry = stream_entries([answer(TextBlock("x"), uid="a1")], "sid", None, set())[0]
        self.assertRegex(entry["timestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertRegex(flower.prompt_entry("go", "sid")["timestamp"], r"\.\d{3}Z$")

    def test_newest_uuid_skips_bookkeeping_and_side_chains(self):
        entries = [{"type": "user", "uuid": "u1"}, {"type": "assistant", "uuid": "a1"},
                   {"type": "assistant", "uuid": "s1", "isSidechain": True}, {"type": "last-prompt"}]
        self.assertEqual(flower.newest_uuid(entries), "a1")
        self.assertIsNone(flower.newest_uuid([{"type": "last-prompt"}]))


class LostPrompt(unittest.TestCase):
    """Trusting chaos, PostgreSQL seed 4: an overflow's successor started while HOME filled, so the CLI
    wrote nothing of it, not even its prompt (the carry: which steps were done). flower stored the
    streamed answer alone, the retry resumed it, and the model, seeing answers to no prompt, started
    the job over (24 steps written twice)."""

    def test_the_start_prompt_heads_what_the_stream_kept_when_nothing_was_stored(self):
        kept = [{"uuid": "a1", "parentUuid": None, "type": "assistant"},
                {"uuid": "u1", "parentUuid": "a1", "type": "user"}]
        out = flower.with_lost_prompt(kept, [], "CARRY: steps 1-24 are done", "sid")
        self.assertEqual(out[0]["message"], {"role": "user", "content": "CARRY: steps 1-24 are done"})
        self.assertEqual([e["parentUuid"] for e in out], [None, out[0]["uuid"], "a1"])
        self.assertEqual(out[0]["sessionId"], "sid")

    def test_a_stored_prompt_or_an_unknown_one_changes_nothing(self):
        kept = [{"uuid": "a1", "parentUuid": "p0", "type": "assistant"}]
        stored = [{"uuid": "p0", "type": "user", "message": {"role": "user", "content": "go"}}]
        self.assertEqual(flower.with_lost_prompt(kept, stored, "go", "sid"), kept)
        self.assertEqual(flower.with_lost_prompt(kept, [], None, "sid"), kept)
        self.assertEqual(flower.with_lost_prompt([], [], "go", "sid"), [])
        results_only = [{"uuid": "u0", "type": "user", "message": {"content": [{"type": "tool_result"}]}},
                        {"uuid": "m0", "type": "user", "isMeta": True, "message": {"content": "caveat"}}]
        self.assertFalse(flower.holds_prompt(results_only))
        self.assertTrue(flower.holds_prompt(stored))


class KilledUnrecorded(fakesdk.FakeWorkspace, unittest.TestCase):
    """On the fake SDK: the mirror takes nothing of the step's call (the CLI could not write it), the
    stream shows it, then the CLI dies."""

    def setUp(self):
        super().setUp()
        self.events = []

        async def sleep(seconds):
            pass
        self.rt = Runtime(workspace=self.ws, run_dir=self.run_dir, on_event=self.events.append, sleep=sleep,
                          resilience=Resilience(probe=False, max_attempts=4))
        self.unrecorded = False
        self.last_uuid = None
        mirror = fakesdk.ClaudeSDKClient._mirror
        test = self

        async def mirror_unless_full(client, entry):
            entry.setdefault("uuid", str(uuid.uuid4()))
            test.last_uuid = entry["uuid"]
            if test.unrecorded and entry["type"] in ("assistant", "user"):
                client._parent = entry["uuid"]
                return   # the CLI's transcript write failed: nothing reaches the store
            await mirror(client, entry)

        def streamed(content, model, **kw):   # the stream's message names the entry the CLI meant to write
            return AssistantMessage(content, model, uuid=test.last_uuid, **kw)

        def streamed_user(content, **kw):
            return UserMessage(content, uuid=test.last_uuid, **kw)

        for target, new in ((fakesdk.ClaudeSDKClient, ("_mirror", mirror_unless_full)),
                            (fakesdk, ("AssistantMessage", streamed)), (fakesdk, ("UserMessage", streamed_user))):
            patcher = mock.patch.object(target, *new)
            patcher.start()
            self.addCleanup(patcher.stop)

    def tearDown(self):
        self.rt.close()
        super().tearDown()

    def test_the_resumed_model_sees_the_call_and_its_result(self):
        def fill(prompt, options, loaded):
            self.unrecorded = True
            return [("tool", "Bash", {"command": "echo step 2 >> steps.log"}, "wrote step 2", 200),
                    ("raise", fakesdk.ProcessError("Command failed with exit code 137"))]

        def after(prompt, options, loaded):
            self.unrecorded = False
            return [("text", "all done", 300)]

        FAKE.turns = [[("tool", "Bash", {"command": "echo step 1 >> steps.log"}, "wrote step 1", 100),
                       ("error", "API Error: 529 Overloaded", 529, "api_error")], fill, after]
        result = asyncio.run(self.rt.run(AgentSpec("work"), "go", lineage_key="work"))
        self.assertTrue(result.ok, result.error)
        loaded = FAKE.loaded[-1]
        results = {b["tool_use_id"]: flower.block_text(b) for e in loaded for b in flower.blocks_of(e)
                   if isinstance(b, dict) and b.get("type") == "tool_result"}
        commands = [b["input"]["command"] for e in loaded for b in flower.blocks_of(e)
                    if isinstance(b, dict) and b.get("type") == "tool_use"]
        self.assertIn("echo step 2 >> steps.log", commands)
        self.assertIn("wrote step 2", results.values())
        chain = {e["uuid"]: e.get("parentUuid") for e in loaded if isinstance(e.get("uuid"), str)}
        self.assertTrue(all(p is None or p in chain for p in chain.values()))   # one intact chain
        infos = [e.data["message"] for e in self.events if e.kind == "info"]
        self.assertIn(flower.text("info_from_stream", n=2, sid=result.session_id), infos)

    def test_a_fresh_session_the_cli_wrote_nothing_of_resumes_with_its_prompt(self):
        def unwritten(prompt, options, loaded):   # HOME full from the session's start: not even its prompt
            self.unrecorded = True
            return [("tool", "Bash", {"command": "echo step 25 >> steps.log"}, "wrote step 25", 200),
                    ("error", "API Error: 529 Overloaded", 529, "api_error")]

        def after(prompt, options, loaded):
            self.unrecorded = False
            return [("text", "all done", 300)]

        FAKE.turns = [unwritten, after]
        result = asyncio.run(self.rt.run(AgentSpec("work"), "CARRY: steps 1-24 are done", lineage_key="work"))
        self.assertTrue(result.ok, result.error)
        loaded = FAKE.loaded[-1]
        prompts = [e["message"]["content"] for e in loaded if e.get("type") == "user"
                   and isinstance(e["message"]["content"], str)]
        self.assertEqual(prompts[:1], [FAKE.calls[0]["prompt"]])
        self.assertIn("CARRY: steps 1-24 are done", prompts[0])
        chain = {e["uuid"]: e.get("parentUuid") for e in loaded if isinstance(e.get("uuid"), str)}
        self.assertTrue(all(p is None or p in chain for p in chain.values()))   # one intact chain
        self.assertEqual(sum(p is None for p in chain.values()), 1)

    def test_after_a_kill_the_write_ahead_file_is_stored_under_the_lineage_start_prompt(self):
        sid = str(uuid.uuid4())
        self.rt.lineage.remember("work", sid, "CARRY: steps 1-24 are done")
        call = answer(ToolUseBlock("toolu_25", "Bash", {"command": "echo 25"}), uid="a25")
        flower.write_ahead(flower.stream_ahead_path(self.run_dir, sid), call, sid)
        later = Runtime(workspace=self.ws, run_dir=self.run_dir)   # the next process
        self.addCleanup(later.close)
        self.assertEqual(later.store_ahead(sid), 2)
        stored = later.raw_store.load_sync({"project_key": later.project_key, "session_id": sid})
        self.assertEqual([e["type"] for e in stored], ["user", "assistant"])
        self.assertEqual(stored[0]["message"]["content"], "CARRY: steps 1-24 are done")
        self.assertEqual(stored[1]["parentUuid"], stored[0]["uuid"])


if __name__ == "__main__":
    unittest.main()
