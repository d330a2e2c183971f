"""Manifest at 100 rows and at 100,000 rows (issue 16): one more row (``Manifest.put``: lock, append a
line, fsync) and what ``status`` reads of it (``status_data``: the last rows, lineage, sessions). Both
must be independent of the number of rows: goal <= 10 ms each at 100K, and a ratio near 1x to the
same operation on a 100-row manifest (the baseline, measured in the same run)."""

import json
import os
import tempfile

from common import QUICK, compare, report
import flower


def workspace(tmp, rows):
    ws = os.path.join(tmp, f"ws{rows}")
    paths = flower.Paths(ws, None)
    paths.prepare()
    with open(os.path.join(paths.run_dir, "manifest.jsonl"), "w", encoding="utf-8") as fh:
        for i in range(rows):
            fh.write(json.dumps({"run": f"r{i // 7}", "step": f"s{i}", "started_at": str(i), "ok": True,
                                 "cost_usd": 0.1, "num_turns": 3, "text": "x" * 200}) + "\n")
    return paths


def main():
    with tempfile.TemporaryDirectory() as tmp:
        small, big = workspace(tmp, 100), workspace(tmp, 100_000)
        size = os.path.getsize(os.path.join(big.run_dir, "manifest.jsonl"))
        counter = [0]

        def put(paths):
            manifest = flower.Manifest(paths.run_dir, flower.run_id())

            def run():
                counter[0] += 1
                manifest.put({"step": f"n{counter[0]}", "started_at": str(counter[0]), "ok": True})
            return run

        def status(paths):
            state = flower.LocalState(paths)

            def run():
                return flower.status_data(paths, state)
            return run
        reps = 21 if QUICK else 51
        t_put, base = compare(put(big), put(small), reps)
        report(f"manifest put, 100,000 rows ({size / 2**20:.0f} MB) vs 100 rows", t_put, base)
        t_status, base = compare(status(big), status(small), reps)
        report("status_data, 100,000-row manifest vs 100 rows", t_status, base)
        for name, value in (("put", t_put), ("status", t_status)):
            print(f"    {name} at 100K rows: {value * 1000:.2f} ms (goal <= 10 ms){'  ok' if value <= 0.010 else '  ABOVE GOAL'}")
        assert len(flower.Manifest.read(big.run_dir)) == 100_000 + reps

if __name__ == "__main__":
    main()
