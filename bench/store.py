"""Session store, against floors measured in the same run (issue 16):

(a) append in batches of 100 vs ``json.dumps`` + ``executemany`` of the same rows into a table with the
    same indexes (goal <= 1.1x); also printed: the ratio to a raw ``executemany`` of rows dumped beforehand
    (pre-serialised: flower's own json.dumps is then counted against it). Where the SDK is importable,
    flower folds each batch into the SDK's session summary (``fold_session_summary``, the protocol's
    summaries): the floor then folds too, and the ratio without that is printed beside it.
(b) load() through PruningSessionStore (SELECT + json.loads + prune: what a resume costs; rows are read
    with the facts flower stored beside them when they were appended, so rows prune drops whole are not
    parsed and stored read-only verdicts are used; also printed at 50K: the same store without facts) vs the fair
    floor: ``SELECT payload ORDER BY seq`` + ``json.loads`` with the cyclic GC paused, both timings
    including the deferred ``gc.collect()``. The command cache is cleared before every timed load (cold:
    a real resume meets each command once). Three mixes: real CLI shapes (captured fixtures replayed),
    the dense adversarial mix, and an anchor-style run (thousands of distinct Bash commands, API errors,
    user-rejected denials). 1K/10K/50K/200K entries; per-entry cost must stay flat (linear). Peak memory
    (tracemalloc) at 50K vs the floor's. Goal <= 1.3x time, <= 1.1x memory.
(c) the product's trim-on load (the CLI default, spill dir set): the first load writes the spill files
    (vs the floor plus writing files of the same sizes plainly: wall time, paired), later loads find
    them; and ``prepare()`` + ``load()`` (what Runtime does before a resume).

(d) a session with subagent transcripts, loaded as the SDK resumes it (the main key, then each subagent's
    key): 50K main entries + 150K subagent entries in 4,500 keys (a tenth of that with BENCH_QUICK), trim
    off and on, first load (writes the spill files; wall time, vs the floor plus writing files of the
    same sizes) and later loads, vs the floor of every key's rows; then the per-entry cost as the
    sessions grow 10x (a tenth of the session, then all of it) and as the spill folder holds 10x more
    files (other sessions' spills): goal <= 1.3x for later trim-on loads, <= 1.1x per entry.

(e) big outputs (issue 44): the first trim-on load of a 10K-entry session with a few huge tool outputs
    (~800 spill files, ~33 MB) vs the floor plus writing the same files plainly (wall time, paired), and
    one 5 MB tool output spilled by the write-time hook (``spill_output``: until the pointer is back, and
    until its file is written) and by a load (``write_spills``) vs writing it plainly; each with today's ``redact()``
    and with redaction left out (a no-op patched in here only), to tell what is redaction's. Then that
    session's first wake as Runtime makes it, through the real SDK and CLI (where installed): until the first
    query goes, and until the spill files are written (a tool call waits for them), vs a later wake.

BENCH_QUICK=1 runs fewer sizes and repetitions (development only; figures for the README come from a full run)."""

import asyncio
import gc
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

from common import QUICK, paired, report

import flower
from tests.transcripts import anchor_transcript, replayed_fixtures, sized_transcript

MIXES = {"real CLI shapes": replayed_fixtures, "dense (adversarial)": sized_transcript,
         "anchor-style (distinct commands)": anchor_transcript}
SIZES = (1_000, 10_000, 50_000) if QUICK else (1_000, 10_000, 50_000, 200_000)
SELECT = "SELECT payload FROM entries WHERE skey=? ORDER BY seq"
CPU = time.process_time   # work in this process: CPU time, steadier than wall time here (not for the
                          # first trim-on load, which writes files)


def reps(n: int) -> int:
    if QUICK:
        return 3 if n >= 50_000 else 5
    return {1_000: 101, 10_000: 21, 50_000: 15}.get(n, 9)   # small loads are quick, and noisy: more pairs


def append_bench(tmp, entries, batch=100, label="dense mix"):
    counter = [0]
    dumped = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in entries]
    key = {"project_key": "p", "session_id": "s"}

    def ours():
        counter[0] += 1
        store = flower.SqliteSessionStore(os.path.join(tmp, f"ours{counter[0]}.db"))
        for i in range(0, len(entries), batch):
            store.append_sync(key, entries[i:i + batch])
        store.close()

    fold = flower._summary_fold()   # the SDK's, when it is importable: flower folds every batch with it

    def raw(pre_dumped: bool, folded: bool = False):
        def run():
            counter[0] += 1
            summary[0] = None
            db = sqlite3.connect(os.path.join(tmp, f"raw{counter[0]}.db"), isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(flower._SCHEMA)
            for i in range(0, len(entries), batch):
                if pre_dumped:
                    rows = [("p/s", e.get("uuid"), d) for e, d in zip(entries[i:i + batch], dumped[i:i + batch])]
                else:
                    rows = [("p/s", e.get("uuid"), json.dumps(e, ensure_ascii=False, separators=(",", ":")))
                            for e in entries[i:i + batch]]
                db.execute("BEGIN IMMEDIATE")
                db.executemany("INSERT OR IGNORE INTO entries(skey, uuid, payload) VALUES (?,?,?)", rows)
                if folded:
                    summary[0] = fold(summary[0], key, entries[i:i + batch])
                db.execute("COMMIT")
            db.close()
        summary = [None]
        return run
    label = f"(a) append {len(entries)} entries ({label}), batches of {batch}"
    repeat = 5 if QUICK else 15   # the commits' disk writes make single runs swing by 10-20%
    if fold is None:
        report(label + " vs json.dumps+executemany", *paired(ours, raw(False), repeat, clock=CPU), goal=1.1)
    else:   # flower folds the SDK's summary into each batch: the floor does it too (not with the SDK: below)
        report(label + " vs json.dumps+executemany+the SDK's fold", *paired(ours, raw(False, True), repeat, clock=CPU),
               goal=1.1)
        report("    same, vs json.dumps+executemany (the fold counted against flower)",
               *paired(ours, raw(False), repeat, clock=CPU))
    report("    same, vs executemany of pre-serialised rows", *paired(ours, raw(True), repeat, clock=CPU))


def make_store(tmp, label, n, make):
    path = os.path.join(tmp, f"{label.split()[0]}{n}.db")
    store = flower.SqliteSessionStore(path)
    store.append_sync({"project_key": "p", "session_id": "s"}, make(n))
    return path, store


def floor_of(path):
    db = sqlite3.connect(path)

    def floor():
        gc.disable()
        try:
            return [json.loads(r[0]) for r in db.execute(SELECT, ("p/s",))]
        finally:
            gc.enable()
    return db, floor


def peak(fn, setup=None):
    if setup:
        setup()
    gc.collect()
    tracemalloc.start()
    result = fn()
    _, top = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return top


def load_bench(tmp, label, make):
    key = {"project_key": "p", "session_id": "s"}
    per_entry = {}
    loop = asyncio.new_event_loop()  # the SDK calls load() from its running loop: no loop start-up per call
    for n in SIZES:
        path, store = make_store(tmp, label, n, make)
        wrapped = flower.PruningSessionStore(store)
        db, floor = floor_of(path)
        ours = lambda: loop.run_until_complete(wrapped.load(key))  # noqa: E731
        cold = flower.is_read_only_command.cache_clear
        t_ours, t_floor, pair = paired(ours, floor, reps(n), setup=cold, collect=True, clock=CPU)
        per_entry[n] = (t_ours / n, t_floor / n)
        report(f"(b) load() {n:>7,} entries, {label}", t_ours, t_floor, pair, goal=1.3)
        if n == 50_000:
            # the same session without the facts flower stores beside each row (a store written before
            # them): every row parsed, every command classified, prune's own scan decides everything
            facts = store._db.execute("SELECT seq, facts FROM entries WHERE facts IS NOT NULL").fetchall()
            store._db.execute("UPDATE entries SET facts = NULL")
            report("    the same without stored facts", *paired(ours, floor, reps(n), setup=cold, collect=True, clock=CPU))
            store._db.executemany("UPDATE entries SET facts = ? WHERE seq = ?", [(f, q) for q, f in facts])
            p_ours, p_floor = peak(ours, cold), peak(floor)
            print(f"{'    peak memory of that load':<60} {p_ours / 2**20:9.1f} MB  floor    {p_floor / 2**20:9.1f} MB"
                  f"  ratio {p_ours / p_floor:5.2f}x{'  ok' if p_ours <= 1.1 * p_floor else '  ABOVE GOAL 1.1x'}",
                  flush=True)
        db.close()
        store.close()
        os.remove(path)
    big, small = max(per_entry), min(per_entry)
    growth = (per_entry[big][0] / per_entry[small][0]) / (per_entry[big][1] / per_entry[small][1])
    print(f"    per-entry cost {big // 1000}K / {small // 1000}K relative to the floor's: {growth:.2f}x (flat = linear)",
          flush=True)
    loop.close()


def first_trim_pairs(tmp, store, label, n, floor, trials=3, whole=None):
    """The first trim-on load (it writes the spill files) against the floor plus writing files of the
    same sizes plainly (open, write, close), side by side: creating thousands of files is the disk's
    cost, which on this VM swings 30-fold between runs (0.03-0.9 ms a file), not flower's. A load
    whose spill files are written in a thread of their own is timed until it returns; ``whole`` (a
    list) gets (until its files are written, the same baseline) for each trial, and the plain writes
    start once they are."""
    key = {"project_key": "p", "session_id": "s"}
    written: list[int] = []
    real_write = flower.write_spills

    def recording(spills):
        written[:] = [len(text.encode("utf-8", "surrogatepass")) for text in spills.values()]
        real_write(spills)

    ours, base, ratios = [], [], []
    flower.write_spills = recording
    try:
        for trial in range(trials):
            spill = os.path.join(tmp, f"spill-{label.split()[0]}-{n}-{trial}")
            wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(trim=True, spill_dir=spill))
            loop = asyncio.new_event_loop()
            flower.is_read_only_command.cache_clear()
            gc.collect()
            start = time.perf_counter()   # wall time: this load writes files, and waits on the disk
            loop.run_until_complete(wrapped.load(key))
            gc.collect()
            ours.append(time.perf_counter() - start)
            flower.wait_spills()
            until = time.perf_counter() - start
            loop.close()
            plain = os.path.join(tmp, f"plain-{label.split()[0]}-{n}-{trial}")
            os.mkdir(plain)
            gc.collect()
            start = time.perf_counter()
            floor()
            for i, size in enumerate(written):
                with open(os.path.join(plain, f"{i}.txt"), "wb") as fh:
                    fh.write(b"x" * size)
            gc.collect()
            base.append(time.perf_counter() - start)
            ratios.append(ours[-1] / base[-1])
            if whole is not None:
                whole.append((until, base[-1]))
    finally:
        flower.write_spills = real_write
    return statistics.median(ours), statistics.median(base), statistics.median(ratios), len(written)


def trim_bench(tmp, label, make, n):
    """The product's path: trim on with a spill dir (the CLI default)."""
    key = {"project_key": "p", "session_id": "s"}
    path, store = make_store(tmp, "trim" + label, n, make)
    spill = os.path.join(tmp, f"spill-{label.split()[0]}-{n}")
    wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(trim=True, spill_dir=spill))
    loop = asyncio.new_event_loop()
    db, floor = floor_of(path)
    ours = lambda: loop.run_until_complete(wrapped.load(key))  # noqa: E731
    cold = flower.is_read_only_command.cache_clear
    *first, written = first_trim_pairs(tmp, store, label, n, floor)
    report(f"(c) trim-on load {n:>7,}, {label}: first (writes {written} spills)", *first)
    ours()   # this wrapper's spill files exist from here on
    flower.wait_spills()   # (written in a thread of their own: later loads must not race the writer)
    report("    later loads (spills exist)", *paired(ours, floor, reps(n), setup=cold, collect=True, clock=CPU), goal=1.3)

    def resume():
        loop.run_until_complete(wrapped.prepare(key, 10**12))
        return loop.run_until_complete(wrapped.load(key))
    report("    prepare() + load(), what Runtime does", *paired(resume, floor, reps(n), setup=cold, collect=True, clock=CPU), goal=1.3)
    db.close()
    store.close()
    loop.close()


def subagent_keys(store, scale, main=50_000, sub=150_000, keys=4_500):
    """A session of ``main // scale`` main entries and about ``sub // scale`` subagent entries in
    ``keys // scale`` keys, all anchor-style: nine in ten small (~19 entries), one in ten ~8x bigger
    (enough big results that old ones are trimmed). Each transcript has uuids of its own (seeded by its key)."""
    import random
    main_key = {"project_key": "p", "session_id": "s"}
    store.append_sync(main_key, anchor_transcript(main // scale))
    out, total, rng = [main_key], 0, random.Random(7)
    for k in range(keys // scale):
        key = dict(main_key, subpath=f"subagents/agent-{k:05d}")
        size = 160 if k % 10 == 0 else 10 + rng.randint(0, 18)
        entries = [dict(e, isSidechain=True) for e in anchor_transcript(size, seed=100_000 + k)]
        while entries and entries[-1].get("type") == "assistant":   # a subagent ends with its report, not
            entries.pop()                                             # with a call cut off mid-way
        entries.append({"type": "assistant", "uuid": f"end-{k}", "parentUuid": entries[-1].get("uuid"),
                        "isSidechain": True, "sessionId": "s-anchor", "message": {
                            "id": f"msg_end{k}", "role": "assistant", "model": "claude-opus-5-5",
                            "content": [{"type": "text", "text": "Report: done, see above."}]}})
        for i in range(0, len(entries), 100):
            store.append_sync(key, entries[i:i + 100])
        total += len(entries)
        out.append(key)
    return out, main // scale + total


def keys_floor(path, keys):
    db = sqlite3.connect(path)
    skeys = [flower._key_string(k) for k in keys]

    def floor():
        gc.disable()
        try:
            return [[json.loads(r[0]) for r in db.execute(SELECT, (skey,))] for skey in skeys]
        finally:
            gc.enable()
    return db, floor


def keys_loader(wrapped, keys, loop):
    async def every():
        return [await wrapped.load(key) for key in keys]
    return lambda: loop.run_until_complete(every())


def subagent_bench(tmp):
    """(d): see the module's doc."""
    loop = asyncio.new_event_loop()
    cold = flower.is_read_only_command.cache_clear
    per_entry = {}
    scales = (100, 10) if QUICK else (10, 1)
    for scale in scales:
        path = os.path.join(tmp, f"sub{scale}.db")
        store = flower.SqliteSessionStore(path)
        keys, n = subagent_keys(store, scale)
        db, floor = keys_floor(path, keys)
        label = f"{n:,} entries in {len(keys):,} keys"
        repeat = 5 if scale > 1 or QUICK else 3
        if scale == scales[-1]:
            plain = flower.PruningSessionStore(store)
            report(f"(d) load(), trim off, {label}", *paired(keys_loader(plain, keys, loop), floor, repeat,
                                                            setup=cold, collect=True, clock=CPU), goal=1.3)
        spill = os.path.join(tmp, f"spill-sub{scale}")
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(trim=True, spill_dir=spill))
        ours = keys_loader(wrapped, keys, loop)
        if scale == scales[-1]:
            written = []
            real_write = flower.write_spills
            flower.write_spills = lambda spills: (written.extend(len(t.encode("utf-8", "surrogatepass"))
                                                                 for t in spills.values()), real_write(spills))
            try:
                cold()
                gc.collect()
                start = time.perf_counter()
                ours()
                gc.collect()
                first = time.perf_counter() - start
                flower.wait_spills()   # files written in a thread of their own are counted in ``written`` too
            finally:
                flower.write_spills = real_write
            plain_dir = os.path.join(tmp, f"plain-sub{scale}")
            os.mkdir(plain_dir)
            gc.collect()
            start = time.perf_counter()
            floor()
            for i, size in enumerate(written):
                with open(os.path.join(plain_dir, f"{i}.txt"), "wb") as fh:
                    fh.write(b"x" * size)
            gc.collect()
            report(f"    trim on, first load (writes {len(written)} spills), wall", first, time.perf_counter() - start)
        else:
            ours()
        flower.wait_spills()   # the first load's files, if written in a thread: later loads find them
        t_ours, t_floor, pair = paired(ours, floor, repeat, setup=cold, collect=True, clock=CPU)
        report(f"(d) trim-on later loads, {label}", t_ours, t_floor, pair, goal=1.3)
        per_entry[scale] = (t_ours / n, t_floor / n)
        if scale == scales[-1]:
            files = len(os.listdir(spill))
            for i in range(9 * max(files, 1000)):   # other sessions' spill files: 10x as many in the folder
                with open(os.path.join(spill, f"{i:08d}-0000-4000-8000-{i:012d}-0.txt"), "wb"):
                    pass
            t2, f2, pair2 = paired(ours, floor, repeat, setup=cold, collect=True, clock=CPU)
            report(f"    the same, {len(os.listdir(spill)):,} files in the spill folder (was {files:,})", t2, f2, pair2,
                   goal=1.3)
            growth = (t2 / f2) / (t_ours / t_floor)
            print(f"    per-entry cost with 10x the spill files, relative to the floor's: {growth:.2f}x"
                  f"{'  ok' if growth <= 1.1 else '  ABOVE GOAL 1.1x'}", flush=True)
        db.close()
        store.close()
    big, small = scales[-1], scales[0]
    growth = (per_entry[big][0] / per_entry[small][0]) / (per_entry[big][1] / per_entry[small][1])
    print(f"    per-entry cost with 10x the sessions (and entries), relative to the floor's: {growth:.2f}x"
          f"{'  ok' if growth <= 1.1 else '  ABOVE GOAL 1.1x'}", flush=True)
    loop.close()


def build_log(rng, chars):
    """A build/test log of about ``chars`` characters, with the assignments such logs hold (no secret)."""
    lines, n = [], 0
    while n < chars:
        i = rng.randrange(10**6)
        line = rng.choice([
            f"gcc -O2 -Wall -c src/mod{i % 977}.c -o build/mod{i % 977}.o",
            f"tests/test_mod{i % 311}.py::test_case_{i % 53} PASSED                                 [{i % 100:3d}%]",
            f"make[2]: Entering directory '/w/build/sub{i % 17}'",
            f"CFLAGS=-O2 LDFLAGS=-L/usr/lib PATH=/usr/local/bin:/usr/bin ./configure --prefix=/opt/x{i % 9}",
            f"  File \"/w/src/mod{i % 977}.py\", line {i % 900}, in handler_{i % 41}",
            f"{{\"id\": {i}, \"name\": \"item-{i}\", \"size\": {i % 4096}, \"ok\": true}}",
            f"[{i % 24:02d}:{i % 60:02d}:{i % 60:02d}] INFO worker-{i % 8} processed batch {i} in {i % 999} ms",
        ])
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)


def big_output_session(n=10_000):
    """``n`` anchor-style entries whose Bash outputs are ~800 logs of 20-60 KB and a few of 1-5 MB."""
    import random
    rng = random.Random(44)
    entries = anchor_transcript(n, seed=44)
    results = [e for e in entries if e.get("type") == "user" and isinstance(e["message"].get("content"), list)
               and e["message"]["content"] and e["message"]["content"][0].get("type") == "tool_result"
               and not e["message"]["content"][0].get("is_error")]
    for k, entry in enumerate(rng.sample(results, min(800, len(results)))):
        text = build_log(rng, rng.choice([1_000_000, 3_000_000, 5_000_000]) if k < 4 else rng.randint(20_000, 40_000))
        entry["message"]["content"][0]["content"] = text
        entry["toolUseResult"] = {"stdout": text}
    return entries


def spill_bench(tmp):
    """(e): see the module's doc."""
    key = {"project_key": "p", "session_id": "s"}
    path = os.path.join(tmp, "bigout.db")
    store = flower.SqliteSessionStore(path)
    entries = big_output_session()
    store.append_sync(key, entries)
    del entries
    db, floor = floor_of(path)
    real_redact = flower.redact
    for label, redact in (("today's redact()", real_redact), ("redaction left out", lambda value, secrets=None: value)):
        flower.redact = redact
        try:
            whole = []
            ours, base, ratio, written = first_trim_pairs(tmp, store, f"bigout-{len(label)}", 10_000, floor, trials=3,
                                                          whole=whole)
        finally:
            flower.redact = real_redact
        report(f"(e) first trim-on load, 10K entries, big outputs ({written} spills), {label}", ours, base, ratio,
               goal=1.5)
        med = statistics.median
        report("    the same until its spill files are written", med([a for a, _ in whole]), base,
               med([a / b for a, b in whole]))
    db.close()
    store.close()
    import random
    text = build_log(random.Random(5), 5_000_000)
    response = {"stdout": text, "stderr": ""}
    counter = [0]

    def plain():
        counter[0] += 1
        os.makedirs(os.path.join(tmp, "plain-5mb"), exist_ok=True)
        with open(os.path.join(tmp, "plain-5mb", f"{counter[0]}.txt"), "w", encoding="utf-8") as fh:
            fh.write(text)

    def hook_pairs(spill_dir: str) -> tuple[list, list, list]:
        """(pointer back, file written, plain write) wall times, side by side: the hook's thread is waited
        for, untimed, before the plain write runs (it would slow that down)."""
        back, written, base = [], [], []
        for _ in range(3 if QUICK else 9):
            counter[0] += 1
            gc.collect()
            start = time.perf_counter()
            flower.spill_output(os.path.join(tmp, spill_dir, str(counter[0])), "Bash", response)
            back.append(time.perf_counter() - start)
            flower.wait_spills()
            written.append(time.perf_counter() - start)
            gc.collect()
            start = time.perf_counter()
            plain()
            base.append(time.perf_counter() - start)
        return back, written, base
    for label, redact in (("today's redact()", real_redact), ("redaction left out", lambda value, secrets=None: value)):
        flower.redact = redact
        try:
            back, written, base = hook_pairs(f"hook-{len(label)}")
        finally:
            flower.redact = real_redact
        med = statistics.median
        report(f"(e) one 5 MB tool output spilled by the write-time hook, pointer back, {label}", med(back), med(base),
               med([a / b for a, b in zip(back, base)]), goal=1.5)
        report("    the same until its file is written", med(written), med(base),
               med([a / b for a, b in zip(written, base)]))
        ratios = sorted(a / b for a, b in zip(back, base))
        print(f"    pointer back / plain write, every pair: {' '.join(f'{r:.2f}' for r in ratios)}", flush=True)

        def spilled():
            counter[0] += 1
            flower.write_spills({os.path.join(tmp, f"one-{len(label)}", f"{counter[0]}-0.txt"): text})
        flower.redact = redact
        try:
            report(f"    a load-time spill of it (write_spills), {label}", *paired(spilled, plain, 3 if QUICK else 9))
        finally:
            flower.redact = real_redact

def sdk_wake(tmp):
    """(e) the first wake of the big-output session as a delegating Runtime session makes it, through the real
    SDK and CLI: the connect (the SDK's load through the pruning store, its copy of the session, the CLI's
    start) after which its first query goes, and until the spill files are written (what a session without
    workers waits for before its first query; a delegating one's tool calls do), vs a later wake (its files
    exist), paired. Skipped without the SDK."""
    try:
        import claude_agent_sdk as sdk
    except ImportError:
        print("(e) first wake through the SDK and CLI: skipped (claude_agent_sdk is not installed)", flush=True)
        return
    import uuid
    ws, home = os.path.join(tmp, "ws"), os.path.join(tmp, "home")
    os.makedirs(ws, exist_ok=True)
    os.makedirs(home, exist_ok=True)
    store = flower.SqliteSessionStore(os.path.join(tmp, "sdkwake.db"))
    sid = str(uuid.uuid4())
    key = {"project_key": flower.project_key(ws), "session_id": sid}
    entries = big_output_session()
    for e in entries:
        if "sessionId" in e:
            e["sessionId"] = sid
    store.append_sync(key, entries)
    del entries
    env = {"HOME": home, "ANTHROPIC_API_KEY": "sk-ant-bench-" + "x" * 24, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}

    async def wake(wrapped):
        client = sdk.ClaudeSDKClient(options=sdk.ClaudeAgentOptions(
            cwd=ws, session_store=wrapped, resume=sid, session_store_flush="eager", env=env, setting_sources=[]))
        start = time.perf_counter()
        await client.connect()
        query = time.perf_counter() - start
        await asyncio.to_thread(flower.wait_spills)
        written = time.perf_counter() - start
        await client.disconnect()
        return query, written
    db = sqlite3.connect(os.path.join(tmp, "sdkwake.db"))

    def floor_and_writes(sizes, trial):
        """The issue's floor: SELECT + json.loads of the rows, then files of the spills' sizes written plainly."""
        plain = os.path.join(tmp, f"sdkwake-plain-{trial}")
        os.mkdir(plain)
        gc.collect()
        start = time.perf_counter()
        gc.disable()
        try:
            [json.loads(r[0]) for r in db.execute(SELECT, (flower._key_string(key),))]
        finally:
            gc.enable()
        for i, size in enumerate(sizes):
            with open(os.path.join(plain, f"{i}.txt"), "wb") as fh:
                fh.write(b"x" * size)
        gc.collect()
        return time.perf_counter() - start
    firsts, writtens, laters, floors = [], [], [], []
    for trial in range(2 if QUICK else 3):
        store._db.execute("DELETE FROM cut_facts")
        store._db.execute("DELETE FROM prune_marks")
        spill = os.path.join(tmp, f"sdkwake-spill-{trial}")
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(trim=True, spill_dir=spill))
        gc.collect()
        first, written = asyncio.run(wake(wrapped))
        gc.collect()
        later, _ = asyncio.run(wake(wrapped))
        firsts.append(first)
        writtens.append(written)
        laters.append(later)
        floors.append(floor_and_writes([os.path.getsize(os.path.join(spill, n)) for n in os.listdir(spill)], trial))
    med = statistics.median
    report("(e) first wake through the SDK and CLI, until its first query goes, vs a later wake (files exist)",
           med(firsts), med(laters), med([a / b for a, b in zip(firsts, laters)]))
    report("    the same until its spill files are written (a tool call waits for them)", med(writtens), med(laters),
           med([a / b for a, b in zip(writtens, laters)]))
    extra = [a - b for a, b in zip(firsts, laters)]
    report("    what the first wake's query waits beyond a later wake's, vs the floor plus plain writes", med(extra),
           med(floors), med([a / b for a, b in zip(extra, floors)]), goal=1.5)
    db.close()
    store.close()


def main():
    only = sys.argv[1:]
    if not only:   # each part in a process of its own: what one part imported is not heap for the next
        for part in ("append", "load", "trim", "subagents", "spill"):
            subprocess.run([sys.executable, os.path.abspath(__file__), part], check=True)
        return
    if "append" not in only:
        # a load does not need the SDK's summary fold that append imports: its heap would be walked by
        # every collection the timings include, on both sides, and blur the ratio of small loads
        flower._summary_fold = lambda: None
    with tempfile.TemporaryDirectory() as tmp:
        if "append" in only:
            append_bench(tmp, sized_transcript(20_000))
            append_bench(tmp, replayed_fixtures(20_000), label="real CLI shapes")
        mixes = {k: v for k, v in MIXES.items() if not os.environ.get("BENCH_MIX") or k.startswith(os.environ["BENCH_MIX"])}
        for label, make in mixes.items():
            if "load" in only:
                load_bench(tmp, label, make)
        if "trim" in only:
            for label, make in mixes.items():
                trim_bench(tmp, label, make, 50_000)
        if "subagents" in only:
            subagent_bench(tmp)
        if "spill" in only:
            spill_bench(tmp)
            sdk_wake(tmp)


if __name__ == "__main__":
    main()
