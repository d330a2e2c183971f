"""prune() alone on 1K..200K-entry transcripts (dense adversarial mix and anchor-style mix, command cache
cleared before every run): the cost per entry must stay flat (linear time). Baseline, in the same run:
json.loads of the same entries, both sides with the cyclic GC paused and the deferred collection counted."""

import gc
import json

from common import QUICK, compare
import flower
from tests.transcripts import anchor_transcript, sized_transcript


def main():
    sizes = (1_000, 10_000, 50_000) if QUICK else (1_000, 10_000, 50_000, 200_000)
    for label, make in (("dense", sized_transcript), ("anchor-style", anchor_transcript)):
        policy = flower.PrunePolicy(trim=True, spill_dir="/tmp/flower-bench-spill")
        per_entry = {}
        for n in sizes:
            entries = make(n)
            raw = [json.dumps(e) for e in entries]

            def floor():
                gc.disable()
                try:
                    return [json.loads(r) for r in raw]
                finally:
                    gc.enable()
            reps = 3 if n >= 200_000 or QUICK else (9 if n >= 50_000 else 11)
            ours, base = compare(lambda: flower.prune(entries, policy), floor, reps,
                                 setup=flower.is_read_only_command.cache_clear, collect=True)
            per_entry[n] = (ours / n, base / n)
            print(f"prune {label:<13} {n:>7,} entries: {ours * 1000:8.1f} ms = {ours / n * 1e6:6.2f} us/entry   "
                  f"(json.loads of the same: {base * 1000:8.1f} ms, ratio {ours / base:4.2f}x)", flush=True)
        big, small = max(per_entry), min(per_entry)
        growth = per_entry[big][0] / per_entry[small][0]
        floor_growth = per_entry[big][1] / per_entry[small][1]
        print(f"    per-entry cost {big // 1000}K / {small // 1000}K: prune {growth:.2f}x, json.loads {floor_growth:.2f}x; "
              f"relative {growth / floor_growth:.2f}x (flat = linear)")


if __name__ == "__main__":
    main()
