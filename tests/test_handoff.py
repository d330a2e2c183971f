"""Handoff: window resolution, the carry (pure), the degraded ledger, slim transcripts, and the
runtime's handoff exit on the fake SDK."""

import asyncio
import json
import os
import random
import re
import tempfile
import unittest

import flower
from flower import Ledger, assemble_carry, degraded_ledger, HandoffPolicy, WindowBook, resolve_window
from tests import fakesdk
from tests.fakesdk import FAKE
from tests.transcripts import Builder
from tests.helpers import LEDGER_EN, SECRETS

NAV = {"handoff document": "/ws/.flower/notes/handoff-work.md", "brief": "/ws/.flower/notes/brief.md",
       "transcript 1 (retired session)": "/ws/runs/transcripts/abc.md"}


def big_ledger(seed=0, scale=1):
    rng = random.Random(seed)

    def lines(tag, n):
        return "\n".join(f"- {tag} {i}: " + " ".join(["word"] * rng.randint(3, 30)) for i in range(n))
    return Ledger({"status": lines("status", 40 * scale), "decisions": lines("decision", 40 * scale),
                   "dead_ends": lines("dead end", 12), "next_step": "Run `make test` in /ws and fix tests/test_a.py first.",
                   "pointers": lines("pointer", 60 * scale)})


THREAD = [("user" if i % 2 else "assistant", f"message {i} " + "blah " * 130) for i in range(10)]


class Carry(unittest.TestCase):
    def test_within_budget_is_byte_identical_and_complete(self):
        ledger = Ledger.parse(LEDGER_EN)
        a = assemble_carry(ledger, nav=NAV, thread=THREAD[:3], budget_chars=18000)
        b = assemble_carry(Ledger.parse(LEDGER_EN), nav=dict(NAV), thread=list(THREAD[:3]), budget_chars=18000)
        self.assertEqual(a.text.encode(), b.text.encode())
        self.assertEqual((a.trimmed, a.dropped), ([], []))
        for part in ("Next step", "Dead ends", "Status", "Decisions", "Pointers", "Recent thread"):
            self.assertIn(f"## {part}", a.text)
        self.assertLess(a.text.index("## Next step"), a.text.index("## Dead ends"))
        self.assertLess(a.text.index("## Dead ends"), a.text.index("## Status"))

    def test_under_pressure(self):
        ledger = big_ledger()
        for budget in range(4000, 18001, 1000):
            with self.subTest(budget=budget):
                carry = assemble_carry(ledger, nav=NAV, thread=THREAD, budget_chars=budget)
                self.assertLessEqual(len(carry.text), budget)
                self.assertIn(ledger.get("next_step"), carry.text)       # intact
                self.assertIn(ledger.get("dead_ends"), carry.text)       # intact
                for path in NAV.values():
                    self.assertIn(path, carry.text)
                self.assertIn(flower.text("carry_head"), carry.text)
                for key in carry.dropped:
                    heading = flower.LEDGER_HEADINGS["en"].get(key, "Recent thread")
                    self.assertNotIn(f"## {heading}\n", carry.text)
                for key in carry.trimmed:
                    self.assertIn("more lines trimmed", carry.text)
                if carry.dropped or carry.trimmed:
                    self.assertIn("Full text: " + NAV["handoff document"], carry.text)
                # lower priorities go first: if anything higher was cut, everything lower is dropped
                order = list(flower.CARRY_PRIORITY)
                cut = [order.index(k) for k in carry.trimmed + carry.dropped]
                if cut:
                    for k in order[max(cut) + 1:]:
                        self.assertIn(k, carry.dropped)

    def test_property_within_budget_and_first_parts_verbatim_when_they_fit(self):
        """Thousands of random ledgers, threads, nav lists and budgets (4,000..18,000): the carry never
        exceeds its budget, and Next step and Dead ends come through verbatim whenever they fit."""
        rng = random.Random(18)
        words = ["alpha", "beta", "gamma", "delta", "make", "test", "src/a.py", "修复", "路径", "x" * 40]

        def body(max_lines):   # rng.choices: the uniform picks of rng.choice, without its per-word CPU
            return "\n".join("- " + " ".join(rng.choices(words, k=rng.randint(1, 40)))
                             for _ in range(rng.randint(1, max_lines)))
        for case in range(2500):
            lang = rng.choice(["en", "zh"])
            ledger = Ledger({k: body(rng.choice([1, 3, 20, 80, 160])) for k in flower.LEDGER_KEYS
                             if k in ("status", "next_step") or rng.random() < 0.8})
            thread = [(rng.choice(["user", "assistant"]), " ".join(rng.choices(words, k=rng.randint(1, 120))))
                      for _ in range(rng.randint(0, 10))]
            nav = {f"transcript {i}": "/ws/.flower/transcripts/" + "d" * rng.randint(1, 80) + ".md"
                   for i in range(rng.randint(1, 8))}
            budget = rng.randint(4000, 18000)
            carry = assemble_carry(ledger, nav=nav, thread=thread, budget_chars=budget, lang=lang)
            with self.subTest(case=case, budget=budget, lang=lang):
                self.assertLessEqual(len(carry.text), budget)
                heads = flower.LEDGER_HEADINGS[lang]
                first = Ledger({k: ledger.get(k) for k in ("next_step", "dead_ends") if ledger.get(k)})
                alone = assemble_carry(first, nav=nav, thread=[], budget_chars=10 ** 9, lang=lang).text
                rest = [flower.text("carry_thread", lang)] + [heads[k] for k in ("status", "decisions", "pointers")]
                closing = flower.text("carry_closing", lang, trimmed="-", dropped=", ".join(rest),
                                      path=next(iter(nav.values())))
                if len(alone) + 2 + len(closing) <= budget:  # they fit beside everything that must stay
                    for key in first.sections:
                        self.assertIn(f"## {heads[key]}\n{ledger.get(key)}\n\n", carry.text)
                        self.assertNotIn(key, carry.trimmed + carry.dropped)

    def test_small_budget_drops_low_priority_first(self):
        carry = assemble_carry(big_ledger(), nav=NAV, thread=THREAD, budget_chars=4000)
        self.assertIn("thread", carry.dropped)
        self.assertIn("pointers", carry.dropped)
        self.assertNotIn("next_step", carry.dropped + carry.trimmed)

    def test_secrets_never_survive_into_carry(self):
        ledger = Ledger.parse(LEDGER_EN + "\n".join(SECRETS))
        ledger.sections["next_step"] += " with password=hunter2xyz"
        carry = assemble_carry(ledger, nav=NAV, thread=[("user", "my key is " + SECRETS[0])], budget_chars=18000)
        for secret in SECRETS + ["hunter2xyz"]:
            self.assertNotIn(secret.splitlines()[0] if "PRIVATE" not in secret else "MIIEowIBAAKCAQEA", carry.text)

    def test_zh(self):
        carry = assemble_carry(Ledger.parse(LEDGER_EN), nav=NAV, thread=[], budget_chars=18000, lang="zh")
        self.assertIn("## 下一步", carry.text)
        self.assertIn("材料已分层", carry.text)


class Degraded(unittest.TestCase):
    def test_built_from_the_transcript(self):
        b = Builder(random.Random(1))
        b.prompt("build md2html")
        b.tool("TodoWrite", {"todos": [{"content": "write parser", "status": "completed"},
                                       {"content": "add highlighting", "status": "in_progress"}]}, "ok")
        b.tool("Write", {"file_path": "/ws/md2html.py", "content": "x"}, "ok")
        b.tool("Edit", {"file_path": "/ws/README.md", "old_string": "a", "new_string": "b"}, "ok")
        b.tool("Bash", {"command": "python3 md2html.py t.md"}, "ok")
        for i in range(5):
            b.say(f"note {i}", 1000)
        b.api_error(2)
        ledger = degraded_ledger(b.entries, "timed out", "build md2html")
        self.assertEqual(ledger.degraded, "timed out")
        self.assertIn("add highlighting", ledger.get("next_step"))
        self.assertIn("[x] write parser", ledger.get("status"))
        self.assertIn("note 4", ledger.get("status"))
        self.assertNotIn("note 1", ledger.get("status"))
        self.assertIn("/ws/md2html.py", ledger.get("pointers"))
        self.assertIn("python3 md2html.py", ledger.get("pointers"))
        self.assertNotIn("API Error", json.dumps(ledger.sections))
        self.assertIn("[degraded: timed out]", ledger.render("work", 1))

    def test_lists_every_command_that_fits_newest_kept(self):
        # a successor that trusts its history redoes what the carry does not show as run
        b = Builder(random.Random(2))
        b.prompt("run the steps")
        for i in range(300):
            b.tool("Bash", {"command": f'echo "step {i}" >> steps.log'}, "ok")
        b.tool("Bash", {"command": 'echo "step 298" >> steps.log'}, "ok")   # run again: listed once
        pointers = degraded_ledger(b.entries, "overflow", "run the steps").get("pointers")
        ran = [line for line in pointers.splitlines() if line.startswith("- ran:")]
        self.assertGreater(len(ran), 40)
        self.assertEqual(ran[-1], '- ran: `echo "step 298" >> steps.log`')
        self.assertEqual(ran[-2], '- ran: `echo "step 299" >> steps.log`')
        self.assertEqual(len(ran), len(set(ran)))
        shown = {int(re.search(r"step (\d+)", line).group(1)) for line in ran}
        self.assertEqual(shown, set(range(300 - len(ran), 300)))
        self.assertIn(f"({300 - len(ran)} earlier command(s) not listed)", pointers)
        self.assertLessEqual(sum(len(line) + 1 for line in ran), flower.DEGRADED_RAN_CHARS)

    def test_carries_on_what_the_sessions_before_handed_over(self):
        # a session started from a carry: its transcript does not show what its predecessors did
        before = Ledger({"status": "DONE-STEPS: 1-17", "decisions": "one Bash call per step",
                         "dead_ends": "(none)", "next_step": "step 18", "pointers": "- steps.log"})
        b = Builder(random.Random(3))
        b.prompt("the carry")
        b.tool("Bash", {"command": 'echo "step 18" >> steps.log'}, "ok")
        ledger = degraded_ledger(b.entries, "overflow", "go on", earlier=Ledger.parse(before.render("work", 1)))
        self.assertIn("DONE-STEPS: 1-17", ledger.get("status"))
        self.assertIn("one Bash call per step", ledger.get("decisions"))
        self.assertIn('- ran: `echo "step 18" >> steps.log`', ledger.get("pointers"))
        self.assertIn("- steps.log", ledger.get("pointers"))
        self.assertNotIn("From the sessions before", ledger.get("dead_ends"))   # "(none)" is not carried
        long_before = Ledger({**before.sections, "status": "\n".join(f"- step {i} done" for i in range(2000))})
        status = degraded_ledger(b.entries, "overflow", "go on", earlier=long_before).get("status")
        self.assertLessEqual(len(status.split("From the sessions before")[1]), flower.EARLIER_CHARS + 60)
        self.assertIn("- step 0 done", status)

    def test_a_hand_over_reads_the_steps_previous_document(self):
        with tempfile.TemporaryDirectory() as tmp:
            rt = flower.Runtime.__new__(flower.Runtime)
            rt.paths = flower.Paths(tmp, None, "en")
            st = type("St", (), {"name": "work"})()
            self.assertIsNone(rt._earlier_ledger(st))
            os.makedirs(os.path.dirname(rt.paths.handoff("work")), exist_ok=True)
            with open(rt.paths.handoff("work"), "w") as fh:
                fh.write(Ledger({"status": "DONE-STEPS: 1-3", "decisions": "d", "dead_ends": "(none)",
                                 "next_step": "n", "pointers": "p"}).render("work", 1))
            self.assertEqual(rt._earlier_ledger(st).get("status"), "DONE-STEPS: 1-3")

    def test_empty_transcript_uses_the_prompt(self):
        ledger = degraded_ledger([], "overflow", "do the thing")
        self.assertIn("do the thing", ledger.get("next_step"))


class Window(unittest.TestCase):
    def test_resolution_order(self):
        with tempfile.TemporaryDirectory() as tmp:
            book = WindowBook(tmp, base_url="http://x")
            saved = os.environ.pop("FLOWER_WINDOW", None)
            try:
                self.assertEqual(resolve_window(None, book=book), (200_000, "default"))
                self.assertEqual(resolve_window("claude-sonnet-4-5", book=book), (200_000, "model"))
                self.assertEqual(resolve_window("claude-sonnet-4-5[1m]", book=book), (1_000_000, "model"))
                self.assertEqual(resolve_window("claude-opus-5-5", book=book), (1_000_000, "model"))
                book.learn("claude-opus-5-5", 500_000)
                self.assertEqual(resolve_window("claude-opus-5-5", book=book), (500_000, "learned"))
                book.lower("claude-opus-5-5", 300_000)
                book.learn("claude-opus-5-5", 1_000_000)  # an advertised window never undoes a real overflow
                self.assertEqual(resolve_window("claude-opus-5-5", book=book), (300_000, "learned"))
                os.environ["FLOWER_WINDOW"] = "123456"
                self.assertEqual(resolve_window("claude-opus-5-5", book=book), (123456, "FLOWER_WINDOW"))
                self.assertEqual(resolve_window("claude-opus-5-5", explicit=1000, book=book), (1000, "--window"))
            finally:
                os.environ.pop("FLOWER_WINDOW", None)
                if saved is not None:
                    os.environ["FLOWER_WINDOW"] = saved

    def test_thresholds(self):
        policy = HandoffPolicy()
        self.assertEqual(policy.at(200_000), 150_000)
        self.assertEqual(policy.warn_at(200_000), 140_000)


GOOD_LEDGER = LEDGER_EN


class RuntimeHandoff(unittest.TestCase):
    """The handoff exit of Runtime.run on the fake SDK (window 200K: at = 150K, warn at 140K)."""

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
        self.spec = flower.AgentSpec("work")

    def tearDown(self):
        self.rt.close()
        fakesdk.uninstall()
        self.tmp.cleanup()

    def run_step(self, prompt="do it"):
        return asyncio.run(self.rt.run(self.spec, prompt, lineage_key="work"))

    def handoffs(self, phase):
        return [e for e in self.events if e.kind == "handoff" and e.data.get("phase") == phase]

    def test_threshold_mid_turn_one_ritual_successor_gets_carry(self):
        FAKE.turns = [
            [("text", "step 1", 100_000), ("tool", "Bash", {"command": "make"}, "built", 145_000),
             ("tool", "Bash", {"command": "make test"}, "passed", 151_000),   # crosses 150K
             ("tool", "Bash", {"command": "never runs"}, "x", 152_000)],
            [("text", GOOD_LEDGER, 152_000)],                                  # the ritual
            [("text", "finished in the new session", 20_000)],                 # the successor
        ]
        result = self.run_step()
        self.assertTrue(result.ok, result.error)
        self.assertEqual(len(self.handoffs("near")), 1)
        self.assertEqual(len(self.handoffs("writing")), 1)
        self.assertEqual(len(self.handoffs("done")), 1)
        self.assertEqual((FAKE.interrupts, FAKE.hook_stops), (0, 1))   # stopped after the tool, not under it
        prompts = [c["prompt"] for c in FAKE.calls]
        self.assertEqual(prompts[1], flower.text("handoff_prompt"))
        self.assertIn("Run `python -m pytest tests/test_parser.py`", prompts[2])   # the carry
        self.assertNotIn(flower.text("handoff_prompt")[:40], prompts[2])          # not the ritual exchange
        self.assertIn("step 1", prompts[2])                                        # the recent thread
        self.assertIsNone(FAKE.calls[2]["options"].resume)                       # a fresh session
        self.assertEqual(FAKE.calls[2]["options"].session_id, result.session_id)
        self.assertEqual(result.retired, [FAKE.calls[0]["options"].session_id])
        self.assertEqual(result.attempts, 1)
        self.assertEqual(result.generations, 1)
        self.assertEqual(self.rt.lineage.steps["work"], result.session_id)
        doc = self.rt.paths.handoff("work")
        with open(doc, encoding="utf-8") as fh:
            self.assertIn("# Handoff: work · generation 1", fh.read())
        self.assertTrue(os.path.exists(self.rt.paths.transcript(result.retired[0])))
        self.assertEqual(FAKE.calls[1]["options"].env.get("DISABLE_AUTO_COMPACT"), "1")
        self.assertEqual(result.context, 20_000)  # the water level reset with the new session

    def test_document_numbering_continues_across_wakes(self):
        with open(self.rt.paths.handoff("work"), "w", encoding="utf-8") as fh:
            fh.write("# Handoff: work · generation 5\n\n## Status\nold\n")
        FAKE.turns = [[("text", "x", 151_000)], [("text", GOOD_LEDGER, 151_000)], [("text", "done", 1000)]]
        result = self.run_step()
        self.assertEqual(result.generations, 1)   # the cap counts this run
        with open(self.rt.paths.handoff("work"), encoding="utf-8") as fh:
            self.assertTrue(fh.read().startswith("# Handoff: work · generation 6"))
        self.assertEqual(flower.ledger_generation("# 交接:干活 · 第 3 代\n"), 3)

    def test_ritual_incomplete_gives_degraded_ledger(self):
        FAKE.turns = [
            [("tool", "Write", {"file_path": "/ws/a.py", "content": "x"}, "ok", 151_000)],
            [("text", "sorry, no document", 151_000)],
            [("text", "done", 1000)],
        ]
        result = self.run_step()
        self.assertTrue(result.ok)
        done = self.handoffs("done")[0]
        self.assertIn("incomplete", done.data["degraded"])
        self.assertIn("/ws/a.py", FAKE.calls[2]["prompt"])   # the degraded ledger carried the file

    def test_soft_problems_are_asked_once_then_the_fix_is_carried(self):
        vague = GOOD_LEDGER.replace("Run `python -m pytest tests/test_parser.py` and fix the first failure.",
                                    "Fix the remaining failure.")
        FAKE.turns = [[("text", "x", 151_000)], [("text", vague, 151_000)],
                      [("text", GOOD_LEDGER, 151_000)], [("text", "done", 1000)]]
        result = self.run_step()
        self.assertTrue(result.ok, result.error)
        prompts = [c["prompt"] for c in FAKE.calls]
        self.assertIn("nothing executable", prompts[2])                     # the one request to fix
        self.assertTrue(prompts[2].startswith(flower.text("handoff_fix")[:30]))
        self.assertIn("Run `python -m pytest tests/test_parser.py`", prompts[3])   # the carry has the fix
        self.assertIsNone(self.handoffs("done")[0].data["degraded"])
        with open(self.rt.paths.handoff("work"), encoding="utf-8") as fh:
            self.assertIn("tests/test_parser.py", fh.read())

    def test_soft_problems_are_accepted_after_one_request(self):
        vague = GOOD_LEDGER.replace("Run `python -m pytest tests/test_parser.py` and fix the first failure.",
                                    "Fix the remaining failure.")
        FAKE.turns = [[("text", "x", 151_000)], [("text", vague, 151_000)],
                      [("text", vague.replace("remaining", "last"), 151_000)], [("text", "done", 1000)]]
        result = self.run_step()
        self.assertTrue(result.ok, result.error)
        prompts = [c["prompt"] for c in FAKE.calls]
        self.assertEqual(sum(p.startswith(flower.text("handoff_fix")[:30]) for p in prompts), 1)
        self.assertIn("Fix the last failure.", prompts[3])
        self.assertIsNone(self.handoffs("done")[0].data["degraded"])

    def test_ritual_timeout_is_fail_soft(self):
        self.rt.handoff.ritual_timeout = 0.2
        FAKE.turns = [
            [("text", "big", 151_000)],
            [("block", "never")],
            [("text", "done", 1000)],
        ]
        result = self.run_step()
        self.assertTrue(result.ok)
        self.assertIn("timed out", self.handoffs("done")[0].data["degraded"])

    def test_two_degraded_in_a_row_from_passing_faults_go_on(self):
        FAKE.turns = [[("text", "a", 151_000)], [("text", "no doc", 151_000)],          # degraded 1: no document
                      [("error", "API Error: 400 prompt is too long", 400, "prompt_too_long")],  # a spurious overflow
                      [("text", "finished", 2000)]]                                      # at a low level: go on
        result = self.run_step()
        self.assertTrue(result.ok, result.error)
        self.assertEqual(result.generations, 2)
        self.assertEqual(len(result.retired), 2)

    def test_two_degraded_in_a_row_stop_with_a_diagnostic(self):
        FAKE.turns = [[("text", "a", 151_000)], [("text", "no doc", 151_000)],
                      [("text", "b", 160_000)], [("text", "no doc", 160_000)]]
        result = self.run_step()
        self.assertFalse(result.ok)
        self.assertIn("two degraded handoffs in a row", result.error)
        self.assertIn("window 200000", result.error)
        self.assertIn("threshold 150000", result.error)
        self.assertIn("level 160000", result.error)

    def test_generation_cap(self):
        """Three handoffs, then the fourth crossing stops the step without a (paid) handoff document."""
        self.rt.handoff.max_generations = 3
        FAKE.turns = [[("text", "x", 151_000)], [("text", GOOD_LEDGER, 151_000)]] * 5
        result = self.run_step()
        self.assertFalse(result.ok)
        self.assertIn("generation cap", result.error)
        self.assertEqual(len(result.retired), 3)
        self.assertEqual(result.generations, 3)
        prompts = [c["prompt"] for c in FAKE.calls]
        self.assertEqual(prompts.count(flower.text("handoff_prompt")), 3)
        self.assertEqual(len(prompts), 7)   # 4 sessions + 3 rituals
        self.assertEqual(len(self.handoffs("writing")), 3)
        self.assertEqual(self.rt.lineage.steps["work"], result.session_id)   # the last session stays current

    def test_overflow_error_gives_degraded_handoff_and_learns_window(self):
        FAKE.turns = [
            [("text", "working", 120_000), ("error", "Prompt is too long", 400, "prompt_too_long")],
            [("text", "done", 1000)],
        ]
        result = self.run_step()
        self.assertTrue(result.ok, result.error)
        self.assertEqual(len(self.handoffs("writing")), 0)     # no ritual on an overflowed session
        self.assertEqual(self.handoffs("done")[0].data["degraded"], "context overflow")
        self.assertEqual(self.rt.windows.get(None), 120_000)
        self.assertEqual(result.attempts, 1)

    def test_exempt_specs_never_hand_off(self):
        self.spec = flower.AgentSpec("judge", handoff=False)
        FAKE.turns = [[("text", "x", 190_000), ("text", "y", 195_000)]]
        result = self.run_step()
        self.assertTrue(result.ok)
        self.assertEqual(self.handoffs("done"), [])
        self.assertNotIn("DISABLE_AUTO_COMPACT", FAKE.calls[0]["options"].env)

    def test_no_handoff_policy(self):
        self.rt.handoff.enabled = False
        FAKE.turns = [[("text", "x", 190_000)]]
        self.assertTrue(self.run_step().ok)
        self.assertEqual(self.handoffs("done"), [])


if __name__ == "__main__":
    unittest.main()
