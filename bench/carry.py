"""Carry assembly for ledgers of 1K..200K chars at the default 18K budget: time per KB of ledger must
be flat and far below 1 ms per KB. Baseline: one str.join of the ledger's text (the cost of merely
touching every byte once)."""

import random

from common import compare
import flower


def ledger(chars):
    rng = random.Random(chars)
    sections = {}
    for key in flower.LEDGER_KEYS:
        lines, size = [], 0
        while size < chars // 5:
            line = f"- {key} item {len(lines)}: " + " ".join(rng.choice(["alpha", "beta", "gamma", "delta"])
                                                            for _ in range(rng.randint(4, 20)))
            lines.append(line)
            size += len(line) + 1
        sections[key] = "\n".join(lines)
    return flower.Ledger(sections)


def main():
    nav = {"handoff document": "/ws/.flower/notes/handoff-work.md", "transcript": "/ws/runs/transcripts/x.md"}
    thread = [("user", "message " * 80)] * 10
    for chars in (1_000, 10_000, 50_000, 200_000):
        led = ledger(chars)
        body = list(led.sections.values())
        ours, base = compare(lambda: flower.assemble_carry(led, nav=nav, thread=thread, budget_chars=18000),
                             lambda: "\n".join(body), 9)
        kb = (chars + sum(len(t) for _, t in thread)) / 1024  # all the text it reads: ledger and thread
        print(f"carry from a {chars:>7}-char ledger (+{sum(len(t) for _, t in thread)}-char thread): "
              f"{ours * 1000:7.2f} ms = {ours * 1000 / kb:6.3f} ms/KB "
              f"(join baseline {base * 1000:6.3f} ms)")


if __name__ == "__main__":
    main()
