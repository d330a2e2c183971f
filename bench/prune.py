"""prune() alone on transcripts of 1K..50K entries dense with denials, API errors, glances and big
results: the cost per entry must stay flat (linear time). Baseline: json.loads of the same entries."""

import json

from common import compare
import flower
from tests.transcripts import sized_transcript as transcript


def main():
    policy = flower.PrunePolicy(trim=True, spill_dir="/tmp/flower-bench-spill")
    per_entry, floor_per_entry = {}, {}
    for n in (1_000, 10_000, 50_000):
        entries = transcript(n)
        raw = [json.dumps(e) for e in entries]
        ours, base = compare(lambda: flower.prune(entries, policy), lambda: [json.loads(r) for r in raw],
                             7 if n < 50_000 else 3)
        per_entry[n], floor_per_entry[n] = ours / n, base / n
        print(f"prune {n:>6} entries: {ours * 1000:8.1f} ms = {ours / n * 1e6:6.2f} us/entry   "
              f"(json.loads of the same: {base * 1000:8.1f} ms, ratio {ours / base:4.2f}x)")
    growth = per_entry[50_000] / per_entry[1_000]
    floor_growth = floor_per_entry[50_000] / floor_per_entry[1_000]
    print(f"per-entry cost 50K / 1K: prune {growth:.2f}x, json.loads {floor_growth:.2f}x on the same machine; "
          f"prune relative to json.loads: {growth / floor_growth:.2f}x (flat = linear)")


if __name__ == "__main__":
    main()
