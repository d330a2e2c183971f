"""A session store's writers wait for each other, never give up: no slow work (the SDK's first import)
inside the write lock, BUSY that SQLite returns without waiting tried again, a lock that outlasts the
busy timeout said in one line."""

import asyncio
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import types
import unittest
import unittest.mock

import flower
from flower import SqliteSessionStore
from tests.helpers import ROOT

KEY = {"project_key": "p", "session_id": "s"}

# A stand-in for the SDK whose import takes longer than the children's busy timeout, as the real
# one's does on a loaded machine
SLOW_SDK = """import time
time.sleep(float(__import__("os").environ["SLOW_SDK_SECONDS"]))

def fold_session_summary(prev, key, entries):
    return {"session_id": key["session_id"], "n": (prev or {}).get("n", 0) + len(entries)}
"""

# Each child: import flower, say it is ready, wait for the go file, open the fresh store and append
CHILD = """import os, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import flower
open(sys.argv[4] + ".ready", "w").close()
while not os.path.exists(sys.argv[5]):
    time.sleep(0.01)
store = flower.SqliteSessionStore(sys.argv[3], busy_timeout=float(os.environ["BUSY_SECONDS"]))
store.append_sync({"project_key": "p", "session_id": os.path.basename(sys.argv[4])}, [{"type": "user", "uuid": "u"}])
store.close()
"""


def _locked(path: str) -> bool:
    """Whether another connection holds the write lock of the store at ``path`` now."""
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        probe.close()


class NoImportUnderTheWriteLock(unittest.TestCase):
    def test_the_first_append_imports_the_sdk_before_it_takes_the_write_lock(self):
        with tempfile.TemporaryDirectory() as tmp:
            db = os.path.join(tmp, "sessions.db")
            store = SqliteSessionStore(db)
            self.addCleanup(store.close)
            seen = []
            fake = types.SimpleNamespace(fold_session_summary=lambda prev, key, entries: {"n": len(entries)})

            def import_module(name, *args):
                seen.append((name, _locked(db)))
                return fake
            with unittest.mock.patch.dict(sys.modules), unittest.mock.patch.object(flower, "_FOLD", []), \
                    unittest.mock.patch.object(flower.importlib, "import_module", import_module):
                sys.modules.pop(flower._SDK_MODULE, None)   # a process that has not imported the SDK yet
                store.append_sync(KEY, [{"type": "user", "uuid": "u1"}])
            self.assertEqual(seen, [(flower._SDK_MODULE, False)])
            self.assertEqual(len(store.load_sync(KEY)), 1)
            with store._lock:
                self.assertIsNotNone(store._db.execute(flower.SQL_SUMMARY, ("p", "s")).fetchone())


class FreshStoreManyProcesses(unittest.TestCase):
    def test_processes_whose_sdk_import_is_slow_all_append_to_a_fresh_store(self):
        # each child's first append imports an SDK slower than its busy timeout: inside the write lock,
        # every other child would give up on it
        n = 6
        with tempfile.TemporaryDirectory() as tmp:
            sdk = os.path.join(tmp, "sdk")
            os.makedirs(os.path.join(sdk, flower._SDK_MODULE))
            with open(os.path.join(sdk, flower._SDK_MODULE, "__init__.py"), "w") as fh:
                fh.write(SLOW_SDK)
            db, go = os.path.join(tmp, "sessions.db"), os.path.join(tmp, "go")
            env = dict(os.environ, SLOW_SDK_SECONDS="6", BUSY_SECONDS="3")
            procs = [subprocess.Popen([sys.executable, "-c", CHILD, sdk, ROOT, db, os.path.join(tmp, f"s{i}"), go],
                                      stderr=subprocess.PIPE, text=True, env=env) for i in range(n)]
            try:
                deadline = time.monotonic() + 300
                while not all(os.path.exists(os.path.join(tmp, f"s{i}.ready")) for i in range(n)):
                    self.assertTrue(all(p.poll() is None for p in procs), "a child died before the start")
                    self.assertLess(time.monotonic(), deadline, "children never got ready")
                    time.sleep(0.05)
                open(go, "w").close()   # all at once, on a store that does not exist yet
                errs = [p.communicate(timeout=300)[1] for p in procs]
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
            for p, err in zip(procs, errs):
                self.assertEqual((p.returncode, err), (0, ""))
            store = SqliteSessionStore(db)
            self.addCleanup(store.close)
            self.assertEqual(sorted(s["session_id"] for s in store.sessions()), [f"s{i}" for i in range(n)])
            with store._lock:
                self.assertEqual(store._db.execute("SELECT COUNT(*) FROM summaries").fetchone()[0], n)


class _InstantBusy:
    """A connection whose first ``times`` BEGIN IMMEDIATE say "database is locked" without waiting."""

    def __init__(self, db: sqlite3.Connection, times: int):
        self.db, self.times = db, times

    def execute(self, sql, *args):
        if sql == "BEGIN IMMEDIATE" and self.times:
            self.times -= 1
            raise sqlite3.OperationalError("database is locked")
        return self.db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.db, name)


class BusyNotWaitedFor(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.db = os.path.join(tmp.name, "sessions.db")
        self.store = SqliteSessionStore(self.db, busy_timeout=5)
        self.addCleanup(self.store.close)

    def test_a_busy_that_came_back_at_once_is_tried_again(self):
        real = self.store._db
        self.store.append_sync({"project_key": "p", "session_id": "other"}, [{"type": "user", "uuid": "x"}])
        busy = self.store._db = _InstantBusy(real, 3)
        try:
            self.store.append_sync(KEY, [{"type": "user", "uuid": "u1"}])
            busy.times = 3
            self.store.insert_before_sync(KEY, [{"type": "user", "uuid": "u0"}], "u1")
            busy.times = 3
            asyncio.run(self.store.delete({"project_key": "p", "session_id": "other"}))
        finally:
            self.store._db = real
        self.assertEqual(busy.times, 0)
        self.assertEqual([e["uuid"] for e in self.store.load_sync(KEY)], ["u0", "u1"])
        self.assertIsNone(self.store.load_sync({"project_key": "p", "session_id": "other"}))

    def test_a_lock_held_past_the_busy_timeout_is_one_line_naming_the_store(self):
        self.store.busy_timeout = 0.3
        self.store._db.execute("PRAGMA busy_timeout=300")
        holder = sqlite3.connect(self.db, isolation_level=None)
        self.addCleanup(holder.close)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            with self.assertRaises(sqlite3.OperationalError) as caught:
                self.store.append_sync(KEY, [{"type": "user", "uuid": "u1"}])
        finally:
            holder.execute("ROLLBACK")
        message = str(caught.exception)
        self.assertNotIn("\n", message)
        self.assertIn(self.db, message)
        self.assertRegex(message, "locked.*nothing was written")
        self.assertIsNone(self.store.load_sync(KEY))
        self.store.append_sync(KEY, [{"type": "user", "uuid": "u1"}])   # the lock gone, the store works
        self.assertEqual(len(self.store.load_sync(KEY)), 1)


if __name__ == "__main__":
    unittest.main()
