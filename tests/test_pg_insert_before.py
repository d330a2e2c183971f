"""Recovered entries land where they belong in the PostgreSQL store too (issue 36, item 6).

Entries the store missed and the CLI's transcript held are put back by ``insert_before_sync``. Where a
store appends them after newer rows instead, the real CLI, resumed from the transcript the SDK writes
out of the store, does not reliably follow the parent links to the newest entry: it weighs the last
entries in file order, and the history it sends may end early (a model that trusts it redoes work)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import unittest

import flower
from tests.helpers import E2ECase, HAVE_SDK, PgCase, SKIP, StepModel, WithPostgres, stop_shared_server
from tests.pgserver import HAVE_PG, SKIP as SKIP_PG


tearDownModule = stop_shared_server   # the one server PgCase started for this module


def _says(entry: dict, pattern: str) -> bool:
    return any(re.search(pattern, flower.block_text(b)) for b in flower.blocks_of(entry) if isinstance(b, dict))


def chain_of(entries: list[dict]) -> list[str]:
    """The uuids of ``entries`` in order (the entries of the chain)."""
    return [e["uuid"] for e in entries if e.get("uuid")]


def moved_to_the_end(entries: list[dict], first: int, last: int) -> tuple[list[dict], list[dict]]:
    """``entries`` with those of steps ``first``..``last`` (answer to result) taken out and put after all
    the others, as a store that appends recovered entries leaves them; and the entries moved."""
    start = next(i for i, e in enumerate(entries) if _says(e, rf"doing step {first}\b"))
    end = next(i for i, e in enumerate(entries) if _says(e, rf"STEP-{last}-OK")) + 1
    return entries[:start] + entries[end:] + entries[start:end], entries[start:end]


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, SKIP_PG)
class RecoveredOrderPostgres(WithPostgres, E2ECase, unittest.TestCase):
    """The recovery path on PostgreSQL with the real CLI: what a failed write left out of the middle
    of a session and ``insert_before_sync`` put back is where the resumed CLI looks for it. (Stored
    after the newer rows instead, the resumed CLI dropped the final answer from the history in 2 of 3
    runs, and with a second leaf it took the last one in file order and step 4 was done again.)"""

    def spec(self):
        return flower.AgentSpec("work", instructions="You do the work.", tools=["Bash"], allowed_tools=["Bash"])

    def _state(self, run_dir: str):
        state = flower.PostgresState(flower.Paths(self.ws, run_dir), self.dsn, "job-1")
        self.assertTrue(state.ready())
        self.addCleanup(state.close)
        return state

    def test_entries_a_write_missed_are_put_back_before_the_newer_ones_and_the_resume_sees_them_all(self):
        model = StepModel(self.ws, steps=4)
        self.api.responder = model
        run_dir = os.path.join(self.tmp.name, "run")
        rt = self._runtime(run_dir=run_dir, state=self._state(run_dir))
        first = asyncio.run(rt.run(self.spec(), "do the four steps", lineage_key="work"))
        self.assertTrue(first.ok, first.error)
        key = {"project_key": rt.project_key, "session_id": first.session_id}
        stored = rt.raw_store.load_sync(key)
        _, missed = moved_to_the_end(stored, 2, 3)
        # the CLI also stores entries outside the chain, with no uuid (e.g. its last-prompt record):
        # only the chain's order is what the resume reads
        missed = [e for e in missed if e.get("uuid")]
        after = next(e for e in stored[stored.index(missed[-1]) + 1:] if e.get("uuid"))
        self.sql_delete([e["uuid"] for e in missed])                    # the writes that failed
        rt.raw_store.insert_before_sync(key, missed, after["uuid"])       # what salvage stores for them
        self.assertEqual(chain_of(rt.raw_store.load_sync(key)), chain_of(stored))
        rt.close()
        woken = self.resume_steps(self.spec(), first.session_id, run_dir=run_dir, state=self._state(run_dir))
        woke = json.dumps(woken.get("messages", []))
        self.assertEqual(re.findall(r"doing step \d|all 4 steps done", woke),
                         ["doing step 1", "doing step 2", "doing step 3", "doing step 4", "all 4 steps done"])
        self.assertEqual(model.lines(), ["step-1", "step-2", "step-3", "step-4"])

    def sql_delete(self, uuids: list[str]) -> None:
        import psycopg
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM flower.entries WHERE uuid = ANY(%s)", (uuids,))


def rows(n: int) -> list[dict]:
    return [{"type": "user", "uuid": f"u{k}", "parentUuid": f"u{k - 1}" if k else None} for k in range(n)]


@unittest.skipUnless(HAVE_PG, SKIP_PG)
class PostgresInsertBefore(PgCase):
    KEY = {"project_key": "p", "session_id": "s"}

    def test_recovered_entries_go_before_the_newer_rows_in_one_write(self):
        a = self.machine()
        store = a.session_store()
        entries = rows(8)
        store.append_sync(self.KEY, entries[:3] + entries[6:] + [{"type": "last-prompt"}])
        store.insert_before_sync(self.KEY, entries[3:6], "u6")
        self.assertEqual(store.load_sync(self.KEY), entries + [{"type": "last-prompt"}])
        self.assertEqual(self.machine("b").session_store().load_sync(self.KEY), entries + [{"type": "last-prompt"}])
        self.assertEqual([s["entries"] for s in store.sessions()], [9])

    def test_an_insert_spooled_during_an_outage_lands_in_its_place_when_written(self):
        a = self.machine()
        store = a.session_store()
        entries = rows(6)
        store.append_sync(self.KEY, entries[:2] + entries[4:])
        self.server.stop("immediate")
        try:
            store.insert_before_sync(self.KEY, entries[2:4], "u4")   # no error: kept locally
            self.assertTrue(os.path.exists(a.spool.path))
        finally:
            self.server.start()
        self.assertTrue(a.ready())
        self.assertFalse(os.path.exists(a.spool.path))
        self.assertEqual(store.load_sync(self.KEY), entries)


if __name__ == "__main__":
    unittest.main()
