"""Manifest with 10,000 existing rows: one more row (Manifest.put: lock, keep the other runs' rows,
atomic replace) against the cost of re-reading and parsing the file once (json.load). Goal: < 1x."""

import json
import os
import tempfile

from common import compare
import flower


def main():
    with tempfile.TemporaryDirectory() as tmp:
        old = flower.Manifest(tmp, "old-run")
        old.rows = [{"step": f"s{i}", "started_at": str(i), "text": "x" * 200, "ok": True, "cost_usd": 0.1}
                    for i in range(10_000)]
        old.flush()
        path = os.path.join(tmp, "manifest.json")
        manifest = flower.Manifest(tmp, "new-run")
        counter = [0]

        def put():
            counter[0] += 1
            manifest.put({"step": f"n{counter[0]}", "started_at": str(counter[0])})

        def reread():
            with open(path, encoding="utf-8") as fh:
                json.load(fh)
        ours, base = compare(put, reread, 9)
        print(f"one row into a 10,000-row manifest: {ours * 1000:7.2f} ms; re-reading it once: {base * 1000:7.2f} ms; "
              f"ratio {ours / base:4.2f}x (goal < 1x)")
        assert len(flower.Manifest.read(tmp)) == 10_000 + counter[0]


if __name__ == "__main__":
    main()
