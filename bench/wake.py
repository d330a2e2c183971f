"""Waking a big session (issue 16): 2,000 Bash calls with 100 KB outputs each (the CLI keeps every output
twice: the tool_result and its toolUseResult copy), stored in SQLite, resumed the way Runtime does it
(``prepare()`` under 90% of a 150K-token handoff threshold, then ``load()``), trim on with a spill dir.

Printed: what the resumed model is sent (the messages' bytes), what flower holds after the load (the
pruned list, JSON bytes; goal < 2x the bytes sent), the first wake (writes the spill files) and a later one
(finds them) against the floor SELECT + json.loads (GC paused, deferred collection counted), and the
peak memory of a later wake vs the floor's.

``wake.py huge``: a session that does not fit even trimmed hard (issue 44: 20K entries here, 200K with
BENCH_HUGE=200000; a tenth of its results 20-60 KB logs): what Runtime does before it hands off (``prepare()``,
then the handoff's read of the session and its ledger, thread and slim transcript) on the first wake (no cut
facts, no spill files) and a later one, vs the floor; and what the store still holds after it decided."""

import asyncio
import gc
import sys
import json
import os
import sqlite3
import tempfile
import time
import tracemalloc

from common import QUICK, compare, report

import flower
from tests.transcripts import Builder


def big_session(n, size):
    import random
    b = Builder(random.Random(5))
    b.prompt("read every log")
    for i in range(n):
        b.tool("Bash", {"command": f"python3 gen.py --part {i}"}, f"{i:06d}" + "y" * (size - 6), level=1000 + i)
    b.say("read them all", 5000)
    return b.entries


def sent_bytes(entries):
    """The bytes of the messages a resume sends: role and content of the user/assistant entries."""
    return sum(len(json.dumps({"role": e["message"].get("role"), "content": e["message"].get("content")},
                              ensure_ascii=False).encode()) for e in entries
               if e.get("type") in ("user", "assistant") and isinstance(e.get("message"), dict))


def huge_session(n):
    import random
    from tests.transcripts import anchor_transcript
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from store import build_log
    rng = random.Random(46)
    entries = anchor_transcript(n, seed=46)
    for e in entries:
        content = e.get("message", {}).get("content") if isinstance(e.get("message"), dict) else None
        if e.get("type") == "user" and isinstance(content, list) and content and content[0].get("type") == "tool_result" \
                and not content[0].get("is_error") and rng.random() < 0.1:
            content[0]["content"] = text = build_log(rng, rng.randint(20_000, 60_000))
            e["toolUseResult"] = {"stdout": text}
        elif e.get("type") == "assistant" and isinstance(content, list) and content and content[0].get("type") == "text":
            content[0]["text"] += " The tests in this module fail because the fixture is stale." * 50   # 3 KB
    return entries


def handoff_read(wrapped, key, loop):
    read = getattr(wrapped, "load_outline", None) or wrapped.load_raw   # (main before issue 44: a plain load)
    entries = loop.run_until_complete(read(key))
    earlier = flower.carried_ledger(entries)   # (Runtime._carried_on, on a wake in a new process)
    if hasattr(flower, "DEGRADED_THREAD"):   # the ledger's thread and the carry's, looked for once
        thread = flower.recent_thread(entries, limit=flower.DEGRADED_THREAD)
        ledger = flower.degraded_ledger(entries, "the stored session does not fit the window", "step prompt",
                                        earlier=earlier, thread=thread)
        return flower.slim_transcript(entries, "s"), thread[-10:], ledger.render("work", 2)
    ledger = flower.degraded_ledger(entries, "the stored session does not fit the window", "step prompt",
                                    earlier=earlier)
    return flower.slim_transcript(entries, "s"), flower.recent_thread(entries), ledger.render("work", 2)


def huge():
    n = int(os.environ.get("BENCH_HUGE", 20_000))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.db")
        store = flower.SqliteSessionStore(path)
        key = {"project_key": "p", "session_id": "s"}
        store.append_sync(key, huge_session(n))
        # the cut facts a store notes as it appends (of the biggest results): a first wake meets them
        appended = store._db.execute("SELECT skey, seq, uuid, fact FROM cut_facts").fetchall()

        def as_appended():
            store._db.execute("DELETE FROM cut_facts")
            store._db.executemany("INSERT INTO cut_facts(skey, seq, uuid, fact) VALUES (?,?,?,?)", appended)
        spill = os.path.join(tmp, "spill")
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(trim=True, spill_dir=spill))
        loop = asyncio.new_event_loop()
        limit = int(150_000 * 0.9)
        db = sqlite3.connect(path)

        def floor():
            gc.disable()
            try:
                return [json.loads(r[0]) for r in db.execute("SELECT payload FROM entries WHERE skey=? ORDER BY seq",
                                                             ("p/s",))]
            finally:
                gc.enable()

        def wake():
            fits = loop.run_until_complete(wrapped.prepare(key, limit))
            return fits, None if fits else handoff_read(wrapped, key, loop)

        def read_once():
            """The floor as the wake is timed: the rows read, then let go (as the handoff lets go of what
            it read) before the collection the timing includes, not walked by it while still held."""
            floor()
        print(f"{n:,} entries, {os.path.getsize(path) / 2**20:.0f} MB stored", flush=True)
        firsts, floors, ratios = [], [], []
        print(f"    cut facts noted by the append: {len(appended):,}", flush=True)
        for _ in range(3):
            as_appended()
            if os.path.isdir(spill):
                import shutil
                shutil.rmtree(spill)
            gc.collect()
            start = time.perf_counter()   # wall time: the old way writes spill files
            fits, _ = wake()
            gc.collect()
            firsts.append(time.perf_counter() - start)
            gc.collect()
            start = time.perf_counter()
            read_once()
            gc.collect()
            floors.append(time.perf_counter() - start)
            ratios.append(firsts[-1] / floors[-1])
        import statistics
        spills = len(os.listdir(spill)) if os.path.isdir(spill) else 0
        report(f"first wake, fits={fits}: prepare() + the handoff's read ({spills} spill files), wall",
               statistics.median(firsts), statistics.median(floors), statistics.median(ratios), goal=1.5)
        from common import paired
        report("    the same, CPU (no spill file is written: a load average of its own does not count)",
               *paired(wake, read_once, 3 if QUICK else 5, setup=as_appended,
                       collect=True, clock=time.process_time), goal=1.5)
        report("later wake (cut facts noted), CPU", *paired(wake, read_once, 3 if QUICK else 5, collect=True,
                                                             clock=time.process_time), goal=1.3)
        real_redact = flower.redact
        flower.redact = lambda value, secrets=None: value
        try:
            report("    the same, redaction left out (the slim transcript's, the ledger's)",
                   *paired(wake, read_once, 3 if QUICK else 5, collect=True, clock=time.process_time), goal=1.3)
        finally:
            flower.redact = real_redact
        prepared = getattr(wrapped, "_prepared", {})
        held = sum(len(json.dumps(v, ensure_ascii=False).encode()) for v in prepared.values())
        loop.run_until_complete(wrapped.prepare(key, limit))
        kept = getattr(store, "_outline", None)
        outline = len(json.dumps(kept[2], ensure_ascii=False).encode()) if kept else 0
        entries = loop.run_until_complete(wrapped.load_outline(key))
        read = len(json.dumps(entries, ensure_ascii=False).encode())
        del entries
        print(f"    held by the store after it decided: {held / 2**20:.2f} MB ({len(prepared)} prepared sessions); "
              f"until the handoff reads it, its outline: {outline / 2**20:.2f} MB (what the handoff reads: "
              f"{read / 2**20:.2f} MB); after it: {'kept' if getattr(store, '_outline', None) else 'nothing'}")
        db.close()
        store.close()
        loop.close()


def main():
    if sys.argv[1:] == ["huge"]:
        return huge()
    n = 500 if QUICK else 2_000
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.db")
        store = flower.SqliteSessionStore(path)
        key = {"project_key": "p", "session_id": "s"}
        store.append_sync(key, big_session(n, 100_000))
        stored = os.path.getsize(path)
        spill = os.path.join(tmp, "spill")
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(trim=True, spill_dir=spill))
        loop = asyncio.new_event_loop()
        limit = int(150_000 * 0.9)

        def wake():
            fits = loop.run_until_complete(wrapped.prepare(key, limit))
            return fits, loop.run_until_complete(wrapped.load(key))
        db = sqlite3.connect(path)

        def floor():
            gc.disable()
            try:
                return [json.loads(r[0]) for r in db.execute("SELECT payload FROM entries WHERE skey=? ORDER BY seq",
                                                             ("p/s",))]
            finally:
                gc.enable()
        start = time.perf_counter()
        fits, pruned = wake()
        gc.collect()
        first = time.perf_counter() - start
        flower.wait_spills()   # long spills are written in a thread of their own: later wakes find them
        written = time.perf_counter() - start
        held = len(json.dumps(pruned, ensure_ascii=False).encode())
        sent = sent_bytes(pruned)
        print(f"{n:,} x 100 KB session: {stored / 2**20:.0f} MB stored; fits={fits}; sends {sent / 2**20:.2f} MB "
              f"({flower.estimate_tokens(pruned):,} est. tokens, limit {limit:,}); holds {held / 2**20:.2f} MB after "
              f"load = {held / sent:.2f}x the bytes sent{'  ok' if held <= 2 * sent else '  ABOVE GOAL 2x'}; "
              f"{len(os.listdir(spill))} spill files")
        del pruned
        _, t_floor = compare(lambda: None, floor, 3, collect=True)
        report("first wake (prepare + load, writes the spills)", first, t_floor)
        report("    the same until its spill files are written", written, t_floor)
        report("later wake (spills exist)", *compare(wake, floor, 3 if QUICK else 5, collect=True))
        gc.collect()
        tracemalloc.start()
        result = wake()
        _, p_ours = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del result
        gc.collect()
        tracemalloc.start()
        result = floor()
        _, p_floor = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del result
        print(f"{'    peak memory of a later wake':<60} {p_ours / 2**20:9.1f} MB  floor    {p_floor / 2**20:9.1f} MB"
              f"  ratio {p_ours / p_floor:5.2f}x")
        db.close()
        store.close()
        loop.close()


if __name__ == "__main__":
    main()
