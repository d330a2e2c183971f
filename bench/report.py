"""``report`` of a long job (issue 43): 2,000 answers over 10 work sessions, two machines, handoffs, an
outage, a kill and a wake (tests/test_report.py's ``synthetic_job``), written to a workspace's
journal and manifest. Measured: what ``report`` does (read the journal and the manifest, build the
data, render the page; goal: under a second of flower's CPU time and a page under 2 MB), against the
floor of reading the same files (``json.loads`` of every line); and the journal's cost per answer
while a job runs (``Journal.add``: one line appended) against a bare ``os.write`` of the same line."""

import json
import os
import tempfile
import time

from common import QUICK, compare, paired, report
import flower
from tests.helpers import synthetic_job


def workspace(tmp, turns, sessions):
    ws = os.path.join(tmp, "ws")
    os.makedirs(ws)
    paths = flower.Paths(ws)
    paths.prepare()
    rows, records, goal = synthetic_job(turns=turns, sessions=sessions)
    with open(paths.run(flower.JOURNAL_FILE), "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
    with open(paths.run("manifest.jsonl"), "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    os.makedirs(paths.notes_dir, exist_ok=True)
    with open(paths.goal, "w", encoding="utf-8") as fh:
        fh.write(goal)
    return paths


def main():
    reps = 5 if QUICK else 11
    with tempfile.TemporaryDirectory() as tmp:
        paths = workspace(tmp, 2000, 10)
        state = flower.LocalState(paths)
        pages = []

        def whole():
            pages.append(flower.render_report(flower.gather_report(paths, state), "en"))

        def floor():
            for name in (flower.JOURNAL_FILE, "manifest.jsonl"):
                with open(paths.run(name), encoding="utf-8") as fh:
                    [json.loads(line) for line in fh]
        ours, base, pair = paired(whole, floor, reps, clock=time.process_time)
        report("report of 2,000 answers / 10 sessions vs json.loads of its files", ours, base, pair)
        size = len(pages[-1].encode("utf-8"))
        print(f"    flower's CPU time {ours * 1000:.0f} ms (goal < 1000 ms){'  ok' if ours < 1.0 else '  ABOVE GOAL'}; "
              f"page {size / 1024:.0f} KB (goal < 2048 KB){'  ok' if size < 2 << 20 else '  ABOVE GOAL'}")
        data = flower.gather_report(paths, state)
        build, render = compare(lambda: flower.report_data(
            state.manifest_rows(), state.journal_records(), brief="", goal="", running=False, now=0.0),
            lambda: flower.render_report(data), reps, clock=time.process_time)
        print(f"    of which read + report_data {build * 1000:.0f} ms, render_report {render * 1000:.0f} ms")

        journal = flower.Journal(os.path.join(tmp, "journal.jsonl"), "r1")
        journal.add("run")
        line = (json.dumps({"k": "turn", "t": 1.0, "r": "r1", "s": "work", "sid": "x" * 36, "lv": 123456,
                            "w": 200000, "at": 150000, "tools": ["Bash"]}, separators=(",", ":")) + "\n").encode()
        bare = os.path.join(tmp, "bare.jsonl")

        def add():
            for _ in range(100):
                journal.add("turn", "work", "x" * 36, lv=123456, w=200000, at=150000, tools=["Bash"])

        def write():
            for _ in range(100):
                fd = os.open(bare, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                os.write(fd, line)
                os.close(fd)
        ours, base, pair = paired(add, write, reps)
        report("100 journal records (Journal.add) vs 100 bare appends", ours, base, pair)
        print(f"    {ours * 10:.3f} ms per answer")


if __name__ == "__main__":
    main()
