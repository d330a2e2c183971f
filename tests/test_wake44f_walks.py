"""The walks a handoff makes over a huge session's outline (issue 44), made lighter: the tool uses, the
prompt of a user entry and the ritual prompt without a generator per entry, the slim transcript
without an API-error check of every entry, the carried ledger read up to the first prompt only.
Each gives exactly what the walk before gave (kept here as the reference), on plain, delegating,
odd, sidechain, API-error, carried and Chinese transcripts."""

from __future__ import annotations

import asyncio
import os
import random
import unittest
import unittest.mock

import flower
from tests import fakesdk
from tests.fakesdk import FAKE
from tests.transcripts import Builder, anchor_transcript, random_transcript, with_odd_entries


def ref_tool_uses(entries):
    return [b for e in entries if e.get("type") == "assistant"
            for b in flower.blocks_of(e) if isinstance(b, dict) and b.get("type") == "tool_use"]


def ref_user_prompt(entry):
    if entry.get("type") != "user" or entry.get("isMeta") or entry.get("isCompactSummary"):
        return None
    content = (entry.get("message") or {}).get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and not any(isinstance(b, dict) and b.get("type") == "tool_result"
                                             for b in content):
        return flower.entry_text(entry) or None
    return None


def ref_ritual_in(entry):
    message = entry.get("message")
    content = message.get("content") if message.__class__ is dict else None
    if content.__class__ is str:
        return flower._is_ritual_prompt(content)
    if content.__class__ is not list:
        return False
    return any(b.__class__ is dict and b.get("type") == "text" and flower._is_ritual_prompt(str(b.get("text", "")))
               for b in content)


def ref_ritual_end(entries):
    return next((i for i, entry in enumerate(entries) if entry.get("type") == "user" and ref_ritual_in(entry)),
                len(entries))


def ref_slim_transcript(entries, session_id):
    lines = [f"# Transcript of session {session_id}", ""]
    pending: dict[str, int] = {}

    def flush_tools():
        if pending:
            lines.append("_(tool calls: " + ", ".join(f"{n}×{c}" for n, c in sorted(pending.items())) + ")_")
            lines.append("")
            pending.clear()

    for entry in entries:
        if entry.get("isSidechain") or flower.is_api_error_entry(entry):
            continue
        if entry.get("type") == "assistant":
            texts = []
            for block in flower.blocks_of(entry):
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    pending[block.get("name", "?")] = pending.get(block.get("name", "?"), 0) + 1
                elif isinstance(block, dict) and block.get("type") == "text":
                    texts.append(str(block.get("text", "")))
            said = "\n".join(texts).strip()
            if said and flower.is_main_assistant(entry):
                flush_tools()
                lines += ["**assistant:**", said, ""]
        elif entry.get("type") == "user" and (said := ref_user_prompt(entry)) is not None:
            flush_tools()
            lines += ["**user:**", said.strip(), ""]
    flush_tools()
    return flower.redact("\n".join(lines).rstrip() + "\n")


def ref_first_prompt(entries):
    said = [p for p in map(ref_user_prompt, [e for e in entries if not e.get("isSidechain")]) if p is not None]
    return said[0] if said else None


ODD = [{"type": "user", "message": {"content": ""}}, {"type": "user", "message": {"content": []}},
       {"type": "user", "message": {"content": [{"type": "text", "text": ""}]}},
       {"type": "user", "message": None}, {"type": "user", "message": {"content": 7}},
       {"type": "user", "message": {"content": ["plain string block"]}},
       {"type": "user", "message": {"content": [{"type": "tool_result", "content": "r"},
                                                {"type": "text", "text": "after a result"}]}},
       {"type": "user", "message": {"content": [{"type": "text", "text": "before"},
                                                {"type": "tool_result", "content": "r"}]}},
       {"type": "assistant", "message": {"content": [{"type": "text", "text": "a"}, "s",
                                                     {"type": "tool_use", "name": "Bash", "input": {}},
                                                     {"type": "tool_use", "input": {}},
                                                     {"type": "text", "text": "b"}]}},
       {"type": "assistant", "message": {"content": "plain"}},
       {"type": "assistant", "message": "not a dict"},
       {"type": "assistant", "message": {"content": {"type": "tool_use"}}},
       {"type": "assistant", "isSidechain": True, "message": {"content": [{"type": "text", "text": "side"}]}},
       {"type": "assistant", "isApiErrorMessage": True, "message": {"content": [{"type": "text", "text": "x"}]}},
       {"type": "assistant", "message": {"model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 500"}]}},
       {"type": "system", "subtype": "api_error", "message": {"content": "API Error"}},
       {"type": "system", "message": {"content": "a system note"}},
       {"type": "user", "isMeta": True, "message": {"content": "m"}},
       {"type": "user", "isCompactSummary": True, "message": {"content": "summary"}},
       {"type": "user", "isSidechain": True, "message": {"content": "a worker's prompt"}},
       {"type": "user", "message": {"content": " hi "}}]


def carried(seed: int) -> list[dict]:
    """A session started from a carry, with sidechain entries and tool results before its prompts."""
    rng = random.Random(seed)
    ledger = flower.Ledger({"status": f"- did {seed}", "decisions": "- kept it", "dead_ends": "(none)",
                            "next_step": "go on", "pointers": "- edited: a.py"})
    b = Builder(rng)
    b.add({"type": "user", "isSidechain": True, "message": {"content": "worker prompt"}})
    b.add({"type": "user", "message": {"content": [{"type": "tool_result", "content": "early"}]}})
    b.prompt(flower.assemble_carry(ledger, nav={}, thread=[("user", "x")], lang=rng.choice(["en", "zh"])).text)
    for i in range(30):
        b.tool("Bash", {"command": f"make {i}"}, "ok")
        if rng.random() < 0.2:
            b.prompt(f"and {i}")
    return b.entries


def delegating(seed: int) -> list[dict]:
    rng = random.Random(seed)
    b = Builder(rng)
    b.prompt("build it")
    for i in range(40):
        pick = rng.random()
        if pick < 0.4:
            b.tool(rng.choice(flower.AGENT_TOOLS), {"description": f"part {i}"}, f"done {i}",
                   kind=rng.choice(["ok", "error"]), answered=rng.random() < 0.8)
        elif pick < 0.8:
            b.tool(rng.choice(["Bash", "Write", "Edit", "TodoWrite"]),
                   {"command": f"make {i}", "file_path": f"f{i}.py", "todos": [{"content": "x", "status": "done"}]},
                   "ok " * rng.randint(1, 9))
        elif pick < 0.9:
            b.api_error(rng.randint(1, 3))
        else:
            b.prompt(rng.choice([flower.text("handoff_prompt", "en"), flower.text("handoff_prompt", "zh"),
                                 f"carry on {i}"]))
            b.say(f"said {i}", 1000)
    return b.entries


def transcripts():
    for seed in range(30):
        plain = random_transcript(seed, size=60)
        yield f"plain {seed}", plain
        yield f"odd {seed}", with_odd_entries(random.Random(seed), plain, "s-1", 12)
        yield f"delegating {seed}", delegating(seed)
        yield f"carried {seed}", carried(seed)
        mixed = list(ODD)
        random.Random(seed).shuffle(mixed)
        yield f"shapes {seed}", mixed
    yield "anchor", anchor_transcript(3000, seed=5)


class LighterWalks(unittest.TestCase):
    def test_each_walk_gives_what_it_gave(self):
        ritual = carries = 0
        for name, entries in transcripts():
            with self.subTest(name):
                self.assertEqual(flower._tool_uses(entries), ref_tool_uses(entries))
                self.assertEqual([flower._user_prompt(e) for e in entries], [ref_user_prompt(e) for e in entries])
                self.assertEqual([flower._ritual_in(e) for e in entries if e.get("type") == "user"],
                                 [ref_ritual_in(e) for e in entries if e.get("type") == "user"])
                self.assertEqual(flower.slim_transcript(entries, "s"), ref_slim_transcript(entries, "s"))
                end = ref_ritual_end(entries)
                ritual += end < len(entries)
                for limit in (10, 50, 0):
                    kept = [e for e in entries[:end]]
                    self.assertEqual(flower.recent_thread(entries, limit=limit),
                                     flower.recent_thread(kept + [{"type": "user", "message": {
                                         "content": flower.text("handoff_prompt")}}], limit=limit))
                first = ref_first_prompt(entries)
                got = flower.carried_ledger(entries)
                want = None
                if first is not None and any(first.startswith(flower.text("carry_head", lang)) for lang in flower.TEXTS):
                    carries += 1
                    want = flower.carried_ledger([{"type": "user", "message": {"content": first}}])
                self.assertEqual(None if got is None else got.sections, None if want is None else want.sections)
        self.assertGreater(ritual, 10)
        self.assertGreater(carries, 20)

    def test_one_thread_serves_the_ledger_and_the_carry(self):
        for name, entries in transcripts():
            with self.subTest(name):
                thread = flower.recent_thread(entries, limit=flower.DEGRADED_THREAD)
                self.assertEqual(thread[-10:], flower.recent_thread(entries))
                given = flower.degraded_ledger(entries, "why", "prompt", thread=thread)
                self.assertEqual(given.render("work", 2), flower.degraded_ledger(entries, "why", "prompt").render("work", 2))

    def test_the_carried_ledger_reads_up_to_the_first_prompt(self):
        entries = carried(1)
        first = next(i for i, e in enumerate(entries) if not e.get("isSidechain") and ref_user_prompt(e) is not None)
        self.assertLess(first + 1, len(entries) // 2)
        with unittest.mock.patch.object(flower, "_user_prompt", wraps=flower._user_prompt) as asked:
            ledger = flower.carried_ledger(entries)
        self.assertIsNotNone(ledger)
        self.assertEqual(asked.call_count, first + 1 - sum(bool(e.get("isSidechain")) for e in entries[:first]))


if __name__ == "__main__":
    unittest.main()


class HandoverThread(fakesdk.FakeWorkspace, unittest.TestCase):
    def test_a_degraded_handoff_looks_for_the_thread_once_and_carries_its_end(self):
        os.environ.pop("FLOWER_WINDOW", None)
        real_thread, real_carry = flower.recent_thread, flower.assemble_carry
        threads, carried_threads = [], []

        def thread(entries, *args, **kwargs):
            got = real_thread(entries, *args, **kwargs)
            threads.append((entries, args, kwargs, got))
            return got

        def carry(ledger, **kwargs):
            carried_threads.append(kwargs["thread"])
            return real_carry(ledger, **kwargs)
        rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, handoff=flower.HandoffPolicy(window=200_000),
                            resilience=flower.Resilience(probe=False, base_delay=0, max_attempts=2))
        self.addCleanup(rt.close)
        FAKE.turns = [[("text", f"part {i}", 1000) for i in range(14)] + [("text", "step 1", 151_000)],
                      [("text", "sorry, no document", 151_000)], [("text", "done", 1000)]]
        with unittest.mock.patch.object(flower, "recent_thread", thread), \
                unittest.mock.patch.object(flower, "assemble_carry", carry):
            asyncio.run(flower.Workflow([flower.Step("work", flower.AgentSpec("work"), "do it")]).run(rt))
        self.assertEqual(len(carried_threads), 1)
        self.assertEqual(len(threads), 1)   # the ledger's and the carry's: one walk
        entries, args, kwargs, got = threads[0]
        self.assertEqual(kwargs, {"limit": flower.DEGRADED_THREAD})
        self.assertGreater(len(got), 10)
        self.assertEqual(carried_threads[0], real_thread(entries))
