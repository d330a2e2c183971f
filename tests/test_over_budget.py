"""A prune with a fallback (prepare's deciding pass) whose scan alone counts more than the budget takes
the fallback's steps at once (issue 44: a huge session that will not fit works out only the steps it
takes). What it returns, entries and report, is what the prune that works out both gives."""

from __future__ import annotations

import copy
import random
import unittest
import unittest.mock

import flower
from tests.transcripts import random_transcript, session_with_big_results


def talkative(seed: int) -> list[dict]:
    """A transcript with big results, denials and glances, and assistant texts long enough that the
    scan's count alone is over the smaller budgets."""
    rng = random.Random(seed)
    entries = random_transcript(seed, size=120) + session_with_big_results(seed + 1000, 8, sid="s-1")
    for entry in entries:
        content = entry.get("message", {}).get("content") if isinstance(entry.get("message"), dict) else None
        if entry.get("type") == "assistant" and isinstance(content, list) and content and \
                content[0].get("type") == "text":
            content[0]["text"] += " words" * rng.randint(0, 400)
    return entries


class OverBudget(unittest.TestCase):
    HARDER = flower.PrunePolicy(trim=True, trim_keep=1, trim_min_chars=1000, keep_glances=0)

    def budgets(self, entries: list[dict]) -> list[int]:
        """Budgets about the scan's own count and about the size the prune's own steps leave."""
        floor = flower._tokens(flower._drop_api_errors(copy.deepcopy(entries), flower.PrunePolicy(trim=True)).chars, [])
        size = flower._size(flower._prune(copy.deepcopy(entries), flower.PrunePolicy(trim=True), True, estimate=True))
        return sorted({10, floor - 1, floor, floor + 1, (floor + size) // 2, size - 1, size, size + 1, 10**9})

    def test_the_shortcut_gives_what_both_steps_give(self):
        taken = kept = 0
        for seed in range(12):
            for entries in (talkative(seed), random_transcript(seed, size=200)):
                for budget in self.budgets(entries):
                    policy = flower.PrunePolicy(trim=True, budget=budget, fallback=self.HARDER)
                    with self.subTest(seed=seed, budget=budget):
                        fast = flower._prune(copy.deepcopy(entries), policy, True, estimate=True)
                        with unittest.mock.patch.object(flower, "_over_anyway", lambda st, budget: False):
                            slow = flower._prune(copy.deepcopy(entries), policy, True, estimate=True)
                        self.assertEqual(fast[0], slow[0])
                        self.assertEqual(fast[1], slow[1])
                        st = flower._drop_api_errors(copy.deepcopy(entries), policy)
                        if flower._over_anyway(st, budget):
                            taken += 1
                        else:
                            kept += 1
        self.assertGreater(taken, 20)   # the shortcut was taken, and not taken, many times
        self.assertGreater(kept, 20)

    def test_no_shortcut_where_the_scan_cannot_tell_a_size(self):
        entries = talkative(1)
        entries.append(dict(entries[-1]))   # a uuid twice: careful, no estimate
        policy = flower.PrunePolicy(trim=True, budget=10, fallback=flower.PrunePolicy(trim=True, keep_glances=0))
        st = flower._drop_api_errors(copy.deepcopy(entries), policy)
        self.assertTrue(st.careful)
        self.assertFalse(flower._over_anyway(st, 10))


if __name__ == "__main__":
    unittest.main()
