"""Session store: (a) append throughput vs a raw executemany of the same rows; (b) load() through
PruningSessionStore of 1K/10K/50K-entry sessions vs the floor SELECT payload ORDER BY seq + json.loads,
and peak memory of the 50K load vs the floor's. Goals: (a) <= 1.5x, (b) <= 1.5x at every size.

(b) runs on two kinds of session: real CLI shapes (the captured fixtures replayed end to end) and a
dense adversarial mix where nearly every entry is a denial, an error, a glance or a big result."""

import asyncio
import json
import os
import sqlite3
import tempfile
import tracemalloc

from common import compare, report

import flower
from tests.transcripts import replayed_fixtures, sized_transcript as transcript


def append_bench(tmp, entries, batch=100):
    counter = [0]

    def ours():
        counter[0] += 1
        store = flower.SqliteSessionStore(os.path.join(tmp, f"ours{counter[0]}.db"))
        key = {"project_key": "p", "session_id": "s"}
        for i in range(0, len(entries), batch):
            store.append_sync(key, entries[i:i + batch])
        store.close()

    def raw():
        counter[0] += 1
        db = sqlite3.connect(os.path.join(tmp, f"raw{counter[0]}.db"), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE entries (seq INTEGER PRIMARY KEY AUTOINCREMENT, skey TEXT, uuid TEXT, payload TEXT)")
        db.execute("CREATE UNIQUE INDEX entries_uuid ON entries(skey, uuid) WHERE uuid IS NOT NULL")
        for i in range(0, len(entries), batch):
            rows = [("p/s", e.get("uuid"), json.dumps(e, ensure_ascii=False, separators=(",", ":")))
                    for e in entries[i:i + batch]]
            db.execute("BEGIN")
            db.executemany("INSERT OR IGNORE INTO entries(skey, uuid, payload) VALUES (?,?,?)", rows)
            db.execute("COMMIT")
        db.close()
    report(f"(a) append {len(entries)} entries in batches of {batch}", *compare(ours, raw, 5), goal=1.5)


def load_bench(tmp, n, make=transcript, label="dense"):
    path = os.path.join(tmp, f"load{label}{n}.db")
    store = flower.SqliteSessionStore(path)
    key = {"project_key": "p", "session_id": "s"}
    store.append_sync(key, make(n))
    wrapped = flower.PruningSessionStore(store)
    loop = asyncio.new_event_loop()  # the SDK calls load() from its running loop: no loop start-up per call

    def ours():
        return loop.run_until_complete(wrapped.load(key))

    db = sqlite3.connect(path)

    def floor():
        return [json.loads(r[0]) for r in db.execute("SELECT payload FROM entries WHERE skey=? ORDER BY seq", ("p/s",))]

    report(f"(b) load() of {n} entries, {label}", *compare(ours, floor, 7 if n < 50_000 else 5), goal=1.5)
    if n >= 50_000:
        tracemalloc.start()
        ours()
        _, peak_ours = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        tracemalloc.start()
        floor()
        _, peak_floor = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"{'    peak memory of that load':<52} {peak_ours / 2**20:9.1f} MB  floor    {peak_floor / 2**20:9.1f} MB"
              f"  ratio {peak_ours / peak_floor:5.2f}x")
    db.close()
    loop.close()
    store.close()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        append_bench(tmp, transcript(20_000))
        for n in (1_000, 10_000, 50_000):
            load_bench(tmp, n, replayed_fixtures, "real CLI shapes")
        for n in (1_000, 10_000, 50_000):
            load_bench(tmp, n, transcript, "dense (adversarial)")


if __name__ == "__main__":
    main()
