"""The walks a handoff makes over a huge session's outline (issue 44): the delegated lines look at the
results of the Agent calls only, the ritual prompt is looked for with marks made once. Each gives exactly
what the plain walk (kept here as the reference) gives, on transcripts with and without Agent calls."""

from __future__ import annotations

import random
import unittest

import flower
from tests.transcripts import Builder, random_transcript, with_odd_entries


def reference_delegated_lines(entries: list[dict], budget: int = flower.DELEGATED_CHARS) -> list[str]:
    """flower._delegated_lines as it was: every result's text looked at, then the Agent calls."""
    results = {b.get("tool_use_id"): (flower.block_text(b), bool(b.get("is_error"))) for e in entries
               if e.get("type") == "user" for b in flower.blocks_of(e)
               if isinstance(b, dict) and b.get("type") == "tool_result"}
    lines = []
    for entry in entries:
        if entry.get("type") != "assistant":
            continue
        for b in flower.blocks_of(entry):
            if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") in flower.AGENT_TOOLS:
                args = b["input"] if isinstance(b.get("input"), dict) else {}
                task = " ".join(str(args.get("description") or args.get("prompt") or "")[:200].split())
                said, failed = results.get(b.get("id"), (None, True))
                report = flower._report_of(said)[:flower.DELEGATED_REPORT_CHARS] if not failed else \
                    f"(no report{': ' + ' '.join(said.split())[:120] if said else ''}; check the disk for what it did)"
                lines.append(f"- delegated: `{task}` -> {report}")
    kept, used = [], 0
    for line in reversed(lines):
        if used + len(line) > budget:
            return [f"- ({len(lines) - len(kept)} earlier delegation(s) not listed)"] + kept[::-1]
        kept.append(line)
        used += len(line) + 1
    return kept[::-1]


def reference_is_ritual_prompt(said: str) -> bool:
    return any(table["handoff_prompt"][:40] in said for table in flower.TEXTS.values())


def delegating_transcript(seed: int, calls: int) -> list[dict]:
    """A coordinator's transcript: Agent and Task calls (answered, failed, unanswered, one id answered
    twice) among ordinary tool calls, and now and then a ritual prompt."""
    rng = random.Random(seed)
    b = Builder(rng)
    b.prompt("build it")
    for i in range(calls):
        pick = rng.random()
        if pick < 0.5:
            name = rng.choice(flower.AGENT_TOOLS)
            args = rng.choice([{"description": f"part {i}", "prompt": "do it"}, {"prompt": f"only a prompt {i}"}, {}])
            kind = rng.choice(["ok", "ok", "ok", "error"])
            b.tool(name, args, f"{flower._REPORT_FRAME if rng.random() < 0.5 else ''}done {i}\nagentId: a{i}",
                   kind=kind, answered=rng.random() < 0.85)
            if rng.random() < 0.1 and b.entries[-1].get("type") == "user":   # the same call answered again
                again = dict(b.entries[-1], uuid=f"again-{i}")
                b.entries.append(again)
        elif pick < 0.9:
            b.tool("Bash", {"command": f"make part{i}"}, "ok " * rng.randint(1, 50))
        else:
            b.prompt(rng.choice([flower.text("handoff_prompt", "en"), flower.text("handoff_prompt", "zh"),
                                 f"carry on {i}"]))
            b.say(f"said {i}", 1000)
    return b.entries


class HandoffWalks(unittest.TestCase):
    def transcripts(self):
        for seed in range(40):
            yield f"delegating {seed}", delegating_transcript(seed, 5 + seed * 3)
            plain = random_transcript(seed, size=60)
            yield f"plain {seed}", plain
            yield f"odd {seed}", with_odd_entries(random.Random(seed), plain, "s-1", 12)

    def test_delegated_lines_are_the_plain_walks(self):
        agents = 0
        for name, entries in self.transcripts():
            with self.subTest(name):
                want = reference_delegated_lines(entries)
                self.assertEqual(flower._delegated_lines(entries), want)
                self.assertEqual(flower._delegated_lines(entries, budget=300), reference_delegated_lines(entries, 300))
                agents += bool(want)
        self.assertGreater(agents, 30)   # the transcripts do hold Agent calls, answered and not

    def test_the_ritual_prompt_is_found_as_before(self):
        found = 0
        for name, entries in self.transcripts():
            for entry in entries:
                said = flower.entry_text(entry)
                self.assertEqual(flower._is_ritual_prompt(said), reference_is_ritual_prompt(said), name)
                found += reference_is_ritual_prompt(said)
        self.assertGreater(found, 10)
        for lang in flower.TEXTS:
            prompt = flower.text("handoff_prompt", lang)
            self.assertTrue(flower._is_ritual_prompt("before\n" + prompt))
            self.assertFalse(flower._is_ritual_prompt(prompt[:39]))

    def test_a_user_entry_holds_the_ritual_prompt_as_its_joined_text_says(self):
        """``_ritual_in`` looks block by block and builds no text for a tool result: the same verdict as
        the joined text's, since no mark holds a newline."""
        self.assertFalse(any("\n" in mark for mark in flower._RITUAL_MARKS))
        prompt = flower.text("handoff_prompt")
        odd = [{"type": "user", "message": "x"}, {"type": "user", "message": {"content": 7}},
               {"type": "user", "message": {"content": [prompt]}},
               {"type": "user", "message": {"content": [{"type": "text", "text": prompt[:20]},
                                                        {"type": "text", "text": prompt[20:]}]}},
               {"type": "user", "message": {"content": [{"type": "tool_result", "content": prompt}]}},
               {"type": "user", "message": {"content": [{"type": "tool_result", "content": "x"},
                                                        {"type": "text", "text": "so: " + prompt}]}}]
        seen = 0
        for name, entries in [*self.transcripts(), ("odd", odd)]:
            for entry in entries:
                if entry.get("type") == "user":
                    want = flower._is_ritual_prompt(flower.entry_text(entry))
                    self.assertEqual(flower._ritual_in(entry), want, (name, entry))
                    seen += want
        self.assertGreater(seen, 10)

    def test_a_ledger_from_the_tool_uses_walked_once_is_the_same(self):
        for name, entries in self.transcripts():
            uses = flower._tool_uses(entries)
            self.assertEqual(flower._delegated_lines(entries, uses=uses), reference_delegated_lines(entries), name)

    def test_the_slim_transcript_of_odd_entries_is_as_it_was(self):
        """slim_transcript walks each entry once (texts and calls in one pass, the prompt without a list
        per entry): the same document as before, empty prompts and odd shapes included."""
        odd = [{"type": "user", "message": {"content": ""}}, {"type": "user", "message": {"content": []}},
               {"type": "user", "message": {"content": [{"type": "text", "text": ""}]}},
               {"type": "user", "message": None},
               {"type": "assistant", "message": {"content": [{"type": "text", "text": "a"},
                                                             {"type": "tool_use", "name": "Bash", "input": {}},
                                                             {"type": "text", "text": "b"}]}},
               {"type": "assistant", "message": {"content": "plain"}},
               {"type": "user", "isMeta": True, "message": {"content": "m"}},
               {"type": "user", "message": {"content": [{"type": "tool_result", "content": "r"}]}},
               {"type": "user", "message": {"content": " hi "}}]
        self.assertEqual(flower.slim_transcript(odd, "s"),
                         "# Transcript of session s\n\n**user:**\n\n\n_(tool calls: Bash×1)_\n\n"
                         "**assistant:**\na\nb\n\n**assistant:**\nplain\n\n**user:**\nhi\n")
        self.assertEqual(flower._user_prompts(odd), ["", " hi "])


if __name__ == "__main__":
    unittest.main()
