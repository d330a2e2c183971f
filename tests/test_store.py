"""Session stores: SQLite store semantics, concurrency, corrupt files, project keys, conformance."""

import asyncio
import dataclasses
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
import unittest.mock

import flower
from flower import SqliteSessionStore, PruningSessionStore, FlowerError
from tests.helpers import HAVE_SDK, ROOT, exact, noted_cut_facts, true_cut_facts, wait_until

KEY = {"project_key": "proj", "session_id": "s1"}
LEAVING = (flower.FACTS_VERSION + "e%", flower.FACTS_VERSION + "d%")   # facts of rows a load may leave unread


def entry(uid, n=0, **extra):
    return {"type": "user", "uuid": uid, "n": n, **extra}


class SqliteStore(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "runs", "sessions.db")
        self.store = SqliteSessionStore(self.path)

    def tearDown(self):
        self.store.close()
        self.tmp.cleanup()

    def test_lone_surrogates_are_stored_not_lost(self):
        # an output cut inside a UTF-16 pair (the CLI counts in UTF-16) holds a lone surrogate, which SQLite
        # cannot take as text: the whole batch was refused, and after the SDK's three tries it was lost
        from tests.transcripts import Builder
        import random
        b = Builder(random.Random(2))
        b.prompt("look at \ud83d")   # the first prompt: the SDK's summary folds it in
        b.tool("Bash", {"command": "cat \udc00.txt"}, "half a pair \ud83d" * 300)
        for i in range(4):
            b.tool("Read", {"file_path": f"/w/{i}"}, "x" * 3000 + "\udfff")
            b.tool("Wr\udc00te", {}, "", kind="disallowed")   # its stored fact names the tool
        odd = dict(entry("u\ud800", 9), parentUuid="p\udc01", text="é")   # in a uuid and a parent too
        batch = b.entries + [odd]
        asyncio.run(self.store.append(KEY, batch))
        asyncio.run(self.store.append(KEY, [odd]))   # sent again: recognised by its uuid, surrogate and all
        asyncio.run(self.store.append(KEY, [entry("plain", 1, text="é")]))
        self.assertEqual(json.dumps(asyncio.run(self.store.load(KEY))), json.dumps(batch + [entry("plain", 1, text="é")]))
        stored = self.store._db.execute("SELECT payload FROM entries ORDER BY seq").fetchall()
        self.assertIn("é", stored[-1][0])   # only the batch that needs it is \u-escaped
        self.assertNotIn("é", stored[-2][0])
        for policy in (flower.PrunePolicy(), flower.PrunePolicy(trim=True, trim_keep=1, spill_dir=self.tmp.name + "/sp")):
            want = flower.prune(self.store.load_sync(KEY), policy)
            wrapped = PruningSessionStore(self.store, policy=policy)
            for _ in range(2):   # the second trim-on load finds the spill files
                self.assertEqual(json.dumps(asyncio.run(wrapped.load(KEY))), json.dumps(want[0]))
                self.assertEqual(wrapped.last_report.as_dict(), want[1].as_dict())
        if HAVE_SDK:   # the summary is folded with the SDK's own fold
            summary = asyncio.run(self.store.list_session_summaries("proj"))
            self.assertEqual([s["data"].get("first_prompt") for s in summary], ["look at \ud83d"])

    def test_integrity(self):   # the contract's extras: tests/test_store_contract.py
        asyncio.run(self.store.append(KEY, [entry("a"), entry("b")]))
        self.assertEqual(self.store.integrity(), "ok")

    def test_file_is_private(self):
        mode = stat.S_IMODE(os.stat(self.path).st_mode)
        self.assertEqual(mode & 0o077, 0, oct(mode))
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(self.path)).st_mode) & 0o077, 0)

    def test_memory_store_and_threads(self):
        import threading
        store = SqliteSessionStore(":memory:")

        def worker(n):
            for i in range(50):
                store.append_sync(KEY, [entry(f"{n}-{i}")])
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(store.load_sync(KEY)), 200)


class Concurrency(unittest.TestCase):
    def test_two_processes_append_at_once_lose_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            db = os.path.join(tmp, "sessions.db")
            SqliteSessionStore(db).close()
            code = ("import sys; sys.path.insert(0, sys.argv[1]); import flower\n"
                    "s = flower.SqliteSessionStore(sys.argv[2])\n"
                    "for i in range(300):\n"
                    "    s.append_sync({'project_key': 'p', 'session_id': 'shared'}, [{'type': 'user', 'uuid': sys.argv[3] + str(i)}])\n"
                    "print('done')\n")
            procs = [subprocess.Popen([sys.executable, "-c", code, ROOT, db, tag], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for tag in ("a", "b")]
            outs = [p.communicate(timeout=120) for p in procs]
            for p, (out, err) in zip(procs, outs):
                self.assertEqual(p.returncode, 0, err)
                self.assertNotIn("locked", err)
            store = SqliteSessionStore(db)
            loaded = store.load_sync({"project_key": "p", "session_id": "shared"})
            self.assertEqual(len(loaded), 600)
            self.assertEqual(len({e["uuid"] for e in loaded}), 600)
            store.close()


    def test_processes_creating_a_fresh_db_at_once_all_succeed(self):
        # the first open of a new file switches it to WAL and creates the schema: a write lock the
        # busy handler does not always wait for. No SDK in these processes: the first append would
        # import it for the session summary (~1 CPU-s each, 18 processes) long after the race at open
        for round_no in range(3):
            with tempfile.TemporaryDirectory() as tmp:
                db = os.path.join(tmp, "sessions.db")
                go = os.path.join(tmp, "go")   # all open the file at once: each waits, once it is ready, for this
                code = ("import os, sys, time; sys.path.insert(0, sys.argv[1]); sys.modules['claude_agent_sdk'] = None\n"
                        "import flower\n"
                        "open(sys.argv[3] + '.ready-' + sys.argv[4], 'w').close()\n"
                        "while not os.path.exists(sys.argv[3]): time.sleep(0.001)\n"
                        "s = flower.SqliteSessionStore(sys.argv[2])\n"
                        "s.append_sync({'project_key': 'p', 'session_id': sys.argv[4]}, [{'type': 'user', 'uuid': 'u'}])\n")
                procs = [subprocess.Popen([sys.executable, "-c", code, ROOT, db, go, f"s{i}"],
                                          stderr=subprocess.PIPE, text=True) for i in range(6)]
                ready = [f"{go}.ready-s{i}" for i in range(6)]
                self.assertTrue(wait_until(lambda: all(map(os.path.exists, ready)) or any(
                    p.poll() is not None for p in procs), timeout=120))
                open(go, "w").close()
                for p in procs:
                    _, err = p.communicate(timeout=120)
                    self.assertEqual(p.returncode, 0, err)
                store = SqliteSessionStore(db)
                self.assertEqual(len(store.sessions()), 6)
                store.close()


class WhereALoadRuns(unittest.TestCase):
    """A small session is loaded in the caller's thread (the hop to a worker cost more than the load);
    a big one, one whose store another thread holds or whose triggers need repair, in a worker, and a
    small one's spill files are written in a worker: the event loop waits for no thread and no disk."""

    def setUp(self):
        from tests.transcripts import sized_transcript
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.store = SqliteSessionStore(os.path.join(self.tmp.name, "s.db"))
        self.addCleanup(self.store.close)
        self.store.append_sync(KEY, sized_transcript(300))
        self.rows = len(self.store.load_sync(KEY))
        self.hops = []
        real = asyncio.to_thread

        async def counted(fn, *args):
            self.hops.append(fn)
            return await real(fn, *args)
        patcher = unittest.mock.patch.object(asyncio, "to_thread", counted)
        patcher.start()
        self.addCleanup(patcher.stop)

    def loaded(self, policy=None):
        wrapped = PruningSessionStore(self.store, policy=policy)
        want = json.dumps(flower.prune(self.store.load_sync(KEY), wrapped.policy)[0])
        self.assertEqual(json.dumps(asyncio.run(wrapped.load(KEY))), want)
        fits = asyncio.run(wrapped.prepare(KEY, 10**9))
        self.assertEqual((fits, json.dumps(asyncio.run(wrapped.load(KEY)))), (True, want))

    def test_a_session_of_at_most_quick_rows_is_loaded_without_a_worker_thread(self):
        self.store.quick_rows = self.rows
        self.loaded()
        self.loaded(flower.PrunePolicy(trim=True, trim_min_chars=200, spill_dir=os.path.join(self.tmp.name, "spill")))
        self.assertEqual([hop for hop in self.hops if hop is not flower.write_spills], [])   # files: see below
        self.assertEqual(len(self.hops), 1)   # written by the first trim-on load, found by the others
        self.assertFalse(self.store._lock._is_owned())   # released after each load

    def test_a_bigger_session_is_loaded_in_a_worker_thread(self):
        self.store.quick_rows = self.rows - 1
        self.loaded()
        self.assertEqual(len(self.hops), 2)   # the load and the prepare
        self.assertFalse(self.store._lock._is_owned())

    def test_a_small_loads_spill_files_are_written_off_the_loop_and_outside_the_stores_lock(self):
        # a first trim-on load writes a file per old big result (redacted): seconds for a few hundred
        # big rows, which the event loop must not wait for, nor another thread's append
        from tests.transcripts import big_session
        import threading
        store = SqliteSessionStore(os.path.join(self.tmp.name, "big.db"))
        self.addCleanup(store.close)
        store.append_sync(KEY, big_session(40, 3000))
        spill = os.path.join(self.tmp.name, "spill")
        seen, real = [], flower.write_spills

        def watched(spills):
            free = store._lock.acquire(blocking=False)
            if free:
                store._lock.release()
            seen.append((threading.get_ident(), free, len(spills)))
            real(spills)
        with unittest.mock.patch.object(flower, "write_spills", watched):
            self.assertTrue(asyncio.run(PruningSessionStore(store, policy=flower.PrunePolicy(
                trim=True, spill_dir=spill)).prepare(KEY, 10**9)))
        self.assertEqual(len(seen), 1)
        worker, free, written = seen[0]
        self.assertNotEqual(worker, threading.get_ident())
        self.assertTrue(free)
        self.assertEqual(self.hops, [watched])   # the spill writing only: the load ran inline
        self.assertEqual(written, len(os.listdir(spill)))
        self.assertEqual(written, 40 - flower.PrunePolicy().trim_keep)

    def test_a_store_whose_triggers_need_repair_is_loaded_in_a_worker(self):
        # the repair takes the write lock, waiting up to the busy timeout for another process's writer
        import sqlite3
        other = sqlite3.connect(self.store.path, isolation_level=None)
        self.addCleanup(other.close)
        other.execute(f"DROP TRIGGER {flower.FACTS_TRIGGER}")
        self.store.quick_rows = self.rows
        self.loaded()
        self.assertEqual(len(self.hops), 1)   # the load repairs them; the prepare after it runs inline
        self.assertTrue(SqliteSessionStore._facts_trusted(self.store._db))

    def test_two_first_trim_on_loads_of_one_session_at_once_both_write_their_spills(self):
        # each wrote its files through the same temporary name: one's rename took the other's file away
        # (FileNotFoundError out of the load)
        from tests.transcripts import big_session
        store = SqliteSessionStore(os.path.join(self.tmp.name, "big.db"))
        self.addCleanup(store.close)
        store.append_sync(KEY, big_session(300, 3000))
        store.quick_rows = 0
        for trial in range(3):
            policy = flower.PrunePolicy(trim=True, spill_dir=os.path.join(self.tmp.name, f"spill{trial}"))

            async def both():
                return await asyncio.gather(PruningSessionStore(store, policy=policy).load(KEY),
                                            PruningSessionStore(store, policy=policy).prepare(KEY, 10**9))
            loaded, fits = asyncio.run(both())
            self.assertTrue(fits)
            self.assertEqual(json.dumps(loaded), json.dumps(flower.prune(store.load_sync(KEY), policy)[0]))
            self.assertEqual(len(os.listdir(policy.spill_dir)), 300 - policy.trim_keep)

    def test_a_store_another_thread_holds_is_loaded_in_a_worker_and_the_loop_goes_on(self):
        # an append in a worker thread holds the store while it waits for another process's write lock
        # (up to the busy timeout): the loop must not wait on it
        import threading
        holding, release, told = threading.Event(), threading.Event(), []

        def hold():
            with self.store._lock:
                holding.set()
                told.append(release.wait(10))   # True: the loop ran on and released it
        holder = threading.Thread(target=hold)
        holder.start()
        holding.wait(10)

        async def meanwhile():
            load = asyncio.ensure_future(PruningSessionStore(self.store).load(KEY))
            await asyncio.sleep(0.05)
            release.set()
            return await load
        entries = asyncio.run(meanwhile())
        holder.join(10)
        self.assertEqual(told, [True])
        self.assertEqual(len(self.hops), 1)
        self.assertEqual(json.dumps(entries), json.dumps(flower.prune(self.store.load_sync(KEY))[0]))


class CorruptFile(unittest.TestCase):
    def test_non_sqlite_file_is_reported_and_left_alone(self):
        with tempfile.TemporaryDirectory() as tmp:
            db = os.path.join(tmp, "sessions.db")
            junk = b"this is not a database, but it is somebody's data\n" * 100
            with open(db, "wb") as fh:
                fh.write(junk)
            with self.assertRaises(FlowerError) as caught:
                SqliteSessionStore(db)
            self.assertIn(db, str(caught.exception))
            self.assertEqual(caught.exception.exit_code, 3)
            with open(db, "rb") as fh:
                self.assertEqual(fh.read(), junk)

    def test_directory_in_place_of_db(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "sessions.db"))
            with self.assertRaises(FlowerError):
                SqliteSessionStore(os.path.join(tmp, "sessions.db"))


class ProjectKey(unittest.TestCase):
    def test_rule(self):
        with tempfile.TemporaryDirectory() as tmp:
            real = os.path.realpath(tmp)
            self.assertEqual(flower.project_key(tmp), "".join(c if c.isalnum() and c.isascii() else "-" for c in real))
            long_dir = os.path.join(tmp, *["a-very-long-directory-name"] * 10)
            os.makedirs(long_dir)
            key = flower.project_key(long_dir)
            sanitized = "".join(c if c.isalnum() and c.isascii() else "-" for c in os.path.realpath(long_dir))
            self.assertGreater(len(sanitized), 200)
            self.assertEqual(key[:201], sanitized[:200] + "-")
            self.assertRegex(key[201:], r"^[0-9a-z]+$")

    @unittest.skipUnless(HAVE_SDK, "claude-agent-sdk not installed: the SDK comparison runs in CI")
    def test_matches_the_sdk(self):
        import claude_agent_sdk as sdk
        with tempfile.TemporaryDirectory() as tmp:
            paths = [tmp, os.path.join(tmp, "Ünïcödé 目录"), os.path.join(tmp, "x" * 120, "y" * 120, "z" * 40)]
            for p in paths:
                os.makedirs(p, exist_ok=True)
            link = os.path.join(tmp, "link")
            os.symlink(paths[1], link)
            paths.append(link)
            for p in paths:
                saved = sys.modules.pop("claude_agent_sdk")
                try:
                    ours = flower.project_key(p)  # flower's own rule (SDK not loaded)
                finally:
                    sys.modules["claude_agent_sdk"] = saved
                self.assertEqual(ours, sdk.project_key_for_directory(p), p)
                self.assertEqual(flower.project_key(p), sdk.project_key_for_directory(p))


@unittest.skipUnless(HAVE_SDK, "claude-agent-sdk not installed: conformance runs in CI (.ci/run installs it)")
class Conformance(unittest.TestCase):
    def _run(self, factory):
        from claude_agent_sdk.testing.session_store_conformance import run_session_store_conformance
        asyncio.run(run_session_store_conformance(factory))

    def test_sqlite_store_passes_all_contracts(self):   # none skipped: see tests/test_store_contract.py
        self._run(lambda: SqliteSessionStore(":memory:"))

    def test_pruning_store_passes_all_contracts(self):
        self._run(lambda: PruningSessionStore(SqliteSessionStore(":memory:")))

    def test_summaries_are_folded(self):
        store = SqliteSessionStore(":memory:")
        asyncio.run(store.append(KEY, [{"type": "user", "uuid": "u", "timestamp": "2026-01-01T00:00:00Z",
                                        "message": {"role": "user", "content": "hello there"}}]))
        summaries = asyncio.run(store.list_session_summaries("proj"))
        self.assertEqual(len(summaries), 1)
        self.assertEqual(summaries[0]["session_id"], "s1")
        self.assertIn("hello there", json.dumps(summaries[0]["data"]))


if __name__ == "__main__":
    unittest.main()


@__import__("contextlib").contextmanager
def counting_parses():
    """Count the payloads flower parses (json.loads, and the C scanner it calls directly: on one payload,
    or on a batch of them as flower.parsed_batch joins them, which counts as each of its rows; a batch
    that fails, whose rows are then parsed alone, is counted twice: the tests that count have none)."""
    calls = []
    real_loads, real_decoder = json.loads, json.decoder.JSONDecoder

    def rows(text):
        batch = text.startswith("[") and re.search(r',("[0-9a-f]{16}"),', text)
        return text.count("," + batch.group(1) + ",") + 1 if batch else 1

    class Counting(real_decoder):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            scan = self.scan_once
            self.scan_once = lambda text, i: calls.extend([1] * rows(text)) or scan(text, i)
    # the json module itself, not flower.json: until flower first uses json that name is a stand-in,
    # which then gives way to the module (a patch on the stand-in would count nothing)
    with unittest.mock.patch.object(json, "loads", lambda s, *a, **k: calls.append(1) or real_loads(s, *a, **k)), \
            unittest.mock.patch.object(json.decoder, "JSONDecoder", Counting):
        yield calls


class StoredFacts(unittest.TestCase):
    """Facts stored beside each row (flower.entry_facts) make a resume cheaper, never different: what
    the store's load+prune returns is exactly prune() of the stored rows, for every shape we have."""

    @classmethod
    def setUpClass(cls):
        # an empty store made once: each test's fresh stores are copies of its file (what a new store
        # writes first, its schema, WAL mode and triggers: ~2 ms of CPU, for 600 stores)
        cls.empty = tempfile.TemporaryDirectory()
        SqliteSessionStore(os.path.join(cls.empty.name, "empty.db")).close()

    @classmethod
    def tearDownClass(cls):
        cls.empty.cleanup()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.n = 0
        self.loop = asyncio.new_event_loop()   # the pruning store's loads, one loop a test

    def tearDown(self):
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()
        flower.wait_spills()   # a big load's spill files are written in a thread, maybe still now
        self.tmp.cleanup()

    def sync(self, awaitable):
        """``awaitable`` run to its end on this test's loop."""
        return self.loop.run_until_complete(awaitable)

    def stored(self, entries, path=None):
        self.n += 1
        if path is None:
            path = os.path.join(self.tmp.name, f"s{self.n}.db")
            shutil.copyfile(os.path.join(self.empty.name, "empty.db"), path)
            os.chmod(path, 0o600)
        store = SqliteSessionStore(path)
        self.addCleanup(store.close)
        if entries:
            store.append_sync(KEY, entries)
        return store

    def assertSameAsPrune(self, store, policy, label=""):
        if policy.trim:   # loaded twice: the first load writes the spill files, the second reads rows cut
            policy = dataclasses.replace(policy, spill_dir=tempfile.mkdtemp(dir=self.tmp.name))
        want, report = flower.prune(store.load_sync(KEY), policy)
        want_exact = exact(want)   # the same keys in the same order too; encoded once
        wrapped = PruningSessionStore(store, policy=policy)
        for _ in range(2 if policy.trim else 1):
            got = self.sync(wrapped.load(KEY))
            self.assertEqual(exact(got), want_exact, label)
            self.assertEqual(wrapped.last_report.as_dict(), report.as_dict(), label)
        got, told = store.load_pruned(KEY, policy, estimate=True)   # rows left unread, read cut: the size told
        self.assertEqual(exact(got), want_exact, label)
        if told.tokens is not None:
            self.assertEqual(told.tokens, flower.estimate_tokens(got), label)
        return told.tokens

    def test_a_marker_long_enough_to_be_trimmed_itself_is_not_read_cut(self):
        # with trim_min_chars under a marker's length, a row read cut came with its marker, which _trim
        # then took for a big result and archived again ("145 chars"): the load was not prune's
        from tests.transcripts import Builder
        import random
        b = Builder(random.Random(6))
        b.prompt("read")
        for i in range(12):
            b.tool("Read", {"file_path": f"/w/{i}"}, "x" * 3000)
        store = self.stored(b.entries)
        for least in (100, 200, 1000):
            with self.subTest(trim_min_chars=least):
                self.assertSameAsPrune(store, flower.PrunePolicy(trim=True, trim_keep=0, trim_min_chars=least))

    POLICIES = (flower.PrunePolicy(), flower.PrunePolicy(keep_denials=0, keep_unavailable=0, keep_glances=0),
                flower.PrunePolicy(keep_denials=3, keep_unavailable=2), flower.PrunePolicy(drop_api_errors=False),
                flower.PrunePolicy(trim=True), flower.PrunePolicy(trim=True, trim_keep=1, trim_min_chars=1000, keep_glances=0),
                flower.PrunePolicy(trim=True, trim_keep=0, expire_glances=False, lang="zh"))

    def test_spill_files_another_policy_wrote_change_nothing(self):
        # a row is read cut only when the policy at hand trims it: a spill file that a harder policy wrote
        # (prepare's pass), or one that trimmed a glance this policy expires, changes nothing
        import random
        from tests.transcripts import Builder, anchor_transcript
        b = Builder(random.Random(3))
        b.prompt("go")
        for i in range(120):
            name, args = (("Bash", {"command": f"cat f{i}.txt"}), ("Bash", {"command": f"make t{i}"}),
                                     ("Read", {"file_path": f"/w/{i}.py"}))[i % 3]
            b.tool(name, args, "x\n" * (600 + 37 * (i % 40)))   # 1,200-4,080 chars: glances and bulk
        policies = [flower.PrunePolicy(trim=True), flower.PrunePolicy(trim=True, trim_keep=1, trim_min_chars=1000, keep_glances=0),
                    flower.PrunePolicy(trim=True, trim_min_chars=1000, expire_glances=False, trim_keep=3)]
        cut = []
        real = SqliteSessionStore._read_cut
        with unittest.mock.patch.object(SqliteSessionStore, "_read_cut", staticmethod(lambda *a: (real(*a), cut.append(1))[0])):
            for label, entries in (("mixed sizes", b.entries), ("anchor", anchor_transcript(2000))):
                store = self.stored(entries)
                for order in ((0, 1, 2, 0), (1, 0, 2, 1), (2, 0, 1, 2)):
                    spill = tempfile.mkdtemp(dir=self.tmp.name)
                    for k in order:
                        policy = dataclasses.replace(policies[k], spill_dir=spill)
                        want, report = flower.prune(store.load_sync(KEY), policy)
                        wrapped = PruningSessionStore(store, policy=policy)
                        with self.subTest(label, order=order, policy=k):
                            self.assertEqual(exact(self.sync(wrapped.load(KEY))), exact(want))
                            self.assertEqual(wrapped.last_report.as_dict(), report.as_dict())
        self.assertGreater(len(cut), 500)   # rows were read cut: the case this test is about

    def test_cut_facts_locate_the_result_and_its_side_copy_in_the_very_text_stored(self):
        from tests.transcripts import anchor_transcript, replayed_fixtures, sized_transcript
        dumps = flower._compact_json()
        big = "é\n\"\\\u2028" * 400 + "\ud800"   # escapes, non-ASCII, a lone surrogate
        def result(**extra):
            return {"type": "user", "uuid": "u-1", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": big}]}, **extra}
        crafted = [result(), result(toolUseResult={"stdout": big, "n": [1, 2.5]}),
                   {"toolUseResult": big, **result()},   # the side copy first
                   result(note=flower._CUT_TEXT), result(note=flower._CUT_SIDE, toolUseResult="x"),
                   result(toolUseResult="User rejected tool use"), result(uuid="a/b"), result(uuid=7),
                   dict(result(toolUseResult={"stdout": "\\"}), message={"role": "user", "content": [
                       {"type": "tool_result", "tool_use_id": "t", "content": big + '\\",\\"is_error\\":false}]},' + "\\"}]})]
        cut = 0
        for entry in crafted + anchor_transcript(800) + sized_transcript(800) + replayed_fixtures(400):
            text = dumps(entry)
            fact = flower.cut_fact(entry, text, dumps)
            if fact is None:
                continue
            cut += 1
            head, bar, skeleton = fact.partition("|")
            within = json.loads(skeleton)
            expected = json.loads(text)
            expected["message"]["content"][0]["content"] = ""
            if "toolUseResult" in expected:
                expected["toolUseResult"] = None
            self.assertEqual(exact(within), exact(expected))
            self.assertEqual(head + bar, f"{flower._CUT_FACT}{len(entry['message']['content'][0]['content'])}|")
            self.assertLess(len(skeleton), len(text) - len(entry["message"]["content"][0]["content"]))   # the big values are out
        self.assertEqual([flower.cut_fact(e, dumps(e), dumps) is not None for e in crafted],
                         [True, True, False, False, False, False, False, False, True])   # not with the side copy first
        self.assertGreater(cut, 50)
        scan = json.decoder.JSONDecoder().scan_once
        good = flower.cut_fact(crafted[1], dumps(crafted[1]), dumps)
        self.assertEqual(SqliteSessionStore._read_cut("u-1", "u-1", good, "M", scan)["message"]["content"][0]["content"], "M")
        for row_uuid, uid, bad in (("u-2", "u-1", good), ("u-1", "u-1", good.partition("|")[0]),
                                   ("u-1", "u-1", good[:-1]), ("u-2", "u-2", good), (None, "u-1", good),
                                   ("u-1", "u-1", good.replace('"content":""', '"content":"x"'))):
            with self.assertRaises(ValueError):   # another row, no skeleton, a damaged or foreign one (the load falls back)
                SqliteSessionStore._read_cut(row_uuid, uid, bad, "M", scan)

    def big_results(self, seed=3, n=90):
        import random
        from tests.transcripts import Builder
        b = Builder(random.Random(seed))
        b.prompt("go")
        for i in range(n):
            b.tool("Bash" if i % 2 else "Read", {"command": f"make t{i}"}, "y\n" * (600 + 41 * (i % 30)))
        return b.entries

    def cut_facts(self, store):
        return noted_cut_facts(store)

    def true_cut_facts(self, store):
        """The cut fact of every row of the session (KEY) that can have one, worked out from the row
        as it is now."""
        return true_cut_facts(store, flower._key_string(KEY))

    def test_append_notes_no_cut_facts_the_first_trim_on_load_notes_them(self):
        store = self.stored(self.big_results())
        self.assertEqual(self.cut_facts(store), {})   # results under CUT_STORED_CHARS: append pays nothing for them
        self.assertEqual(store._db.execute("SELECT count(*) FROM entries WHERE facts LIKE ?", (flower.FACTS_VERSION + "t%",)).fetchone(), (0,))
        self.sync(PruningSessionStore(store).load(KEY))   # trim off: nothing noted
        self.assertEqual(self.cut_facts(store), {})
        policy = flower.PrunePolicy(trim=True, spill_dir=tempfile.mkdtemp(dir=self.tmp.name))
        want, report = flower.prune(store.load_sync(KEY), policy)
        wrapped = PruningSessionStore(store, policy=policy)
        cut = []
        real = SqliteSessionStore._read_cut
        with unittest.mock.patch.object(SqliteSessionStore, "_read_cut", staticmethod(lambda *a: (real(*a), cut.append(1))[0])):
            for load in range(3):
                self.assertEqual(exact(self.sync(wrapped.load(KEY))), exact(want))
                self.assertEqual(wrapped.last_report.as_dict(), report.as_dict())
                noted = self.cut_facts(store)
                self.assertEqual(noted, self.true_cut_facts(store))   # every one, and each as the row tells it
                self.assertGreater(len(noted), 80)
                self.assertEqual(len(cut), load * (report.trimmed))   # the first load read every row whole

    def test_cut_facts_go_with_rows_another_writer_changes_or_deletes(self):
        import random
        import sqlite3
        rng = random.Random(21)
        policies = [flower.PrunePolicy(trim=True), flower.PrunePolicy(trim=True, trim_keep=1, trim_min_chars=1000, keep_glances=0)]
        for trial in range(30):
            store = self.stored(self.big_results(seed=trial, n=40))
            spill = tempfile.mkdtemp(dir=self.tmp.name)
            for policy in policies:
                self.sync(PruningSessionStore(store, policy=dataclasses.replace(policy, spill_dir=spill)).load(KEY))
            noted = self.cut_facts(store)
            self.assertGreater(len(noted), 20)
            other = sqlite3.connect(store.path, isolation_level=None)   # knowing nothing of flower
            self.addCleanup(other.close)
            if trial % 5 == 0:   # a writer drops a trigger too: the next load forgets every cut fact
                other.execute(f"DROP TRIGGER {rng.choice(list(flower.CUT_TRIGGERS))}")
            hows = []
            for _, seq in rng.sample(sorted(noted), rng.randint(1, 6)):
                how = rng.choice(["longer", "error", "delete", "uuid column", "payload uuid", "damage", "session"])
                hows.append(how)
                payload = other.execute("SELECT payload FROM entries WHERE seq = ?", (seq,)).fetchone()[0]
                entry = json.loads(payload)
                block = entry["message"]["content"][0]
                if how == "delete":
                    other.execute("DELETE FROM entries WHERE seq = ?", (seq,))
                    continue
                if how == "uuid column":
                    other.execute("UPDATE entries SET uuid = 'moved-' || uuid WHERE seq = ?", (seq,))
                    continue
                if how == "session":
                    other.execute("UPDATE entries SET skey = 'proj/elsewhere' WHERE seq = ?", (seq,))
                    continue
                if how == "longer":
                    block["content"] += "z" * 3000
                elif how == "error":   # an unavailable-tool error now: the steps before trim drop it
                    block.update(is_error=True, content="<tool_use_error>Error: No such tool available: X</tool_use_error>" + block["content"])
                elif how == "payload uuid":
                    entry["uuid"] = "other-" + entry["uuid"]
                text = "{\"x" if how == "damage" else json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
                other.execute("UPDATE entries SET payload = ? WHERE seq = ?", (text, seq))
            for policy in policies:
                with self.subTest(trial=trial, policy=policy):
                    self.assertSameAsPrune(store, dataclasses.replace(policy, spill_dir=spill))
                    noted, true = self.cut_facts(store), self.true_cut_facts(store)
                    self.assertEqual({k: true.get(k) for k in noted}, noted)   # none stale
                    if "damage" not in hows:   # (a damaged row: every load takes the plain path, which notes nothing)
                        self.assertEqual(noted, true)   # and every row read whole noted
            self.assertEqual({r[0] for r in other.execute(flower.SQL_TRIGGERS_KNOWN)},
                             {flower.FACTS_TRIGGER, *flower.CUT_TRIGGERS, *flower.MARK_TRIGGERS})   # back, for later writes

    def test_cut_facts_of_another_version_are_not_used_and_noted_again(self):
        store = self.stored(self.big_results())
        policy = flower.PrunePolicy(trim=True, spill_dir=tempfile.mkdtemp(dir=self.tmp.name))
        want = exact(flower.prune(store.load_sync(KEY), policy)[0])
        wrapped = PruningSessionStore(store, policy=policy)
        self.sync(wrapped.load(KEY))
        true = self.true_cut_facts(store)
        real = SqliteSessionStore._read_cut
        # of version 0; an older flower's "t" facts (where the values lay, no skeleton)
        for older in ("'0' || substr(fact, 2)", f"'{flower.FACTS_VERSION}t' || substr(fact, 3, instr(fact, '|') - 3) || ':1:2'"):
            store._db.execute(f"UPDATE cut_facts SET fact = {older}")
            self.assertNotIn(true, [self.cut_facts(store)])
            cut = []
            with unittest.mock.patch.object(SqliteSessionStore, "_read_cut", staticmethod(lambda *a: (real(*a), cut.append(1))[0])):
                self.assertEqual(exact(self.sync(wrapped.load(KEY))), want)
                self.assertEqual(cut, [], older)   # not used: each row was read whole
                self.assertEqual(self.cut_facts(store), true)   # and its fact noted anew
                self.assertEqual(exact(self.sync(wrapped.load(KEY))), want)
                self.assertEqual(len(cut), wrapped.last_report.trimmed)   # every row trimmed was read cut
                self.assertGreater(len(cut), 30)

    def test_cut_facts_naming_other_rows_or_odd_files_change_nothing(self):
        # the facts' table is flower's, but what it says of a row is checked against the row read
        store = self.stored(self.big_results())
        policy = flower.PrunePolicy(trim=True, spill_dir=tempfile.mkdtemp(dir=self.tmp.name))
        want = exact(flower.prune(store.load_sync(KEY), policy)[0])
        self.sync(PruningSessionStore(store, policy=policy).load(KEY))
        seqs = [seq for _, seq in sorted(self.cut_facts(store))]
        for name in ("..-0.txt", "7-0.txt", "x-0.txt"):
            open(os.path.join(policy.spill_dir, name), "w").close()
        store._db.execute("UPDATE cut_facts SET uuid = '..' WHERE seq = ?", (seqs[0],))
        store._db.execute("UPDATE cut_facts SET uuid = 7 WHERE seq = ?", (seqs[1],))
        store._db.execute("UPDATE cut_facts SET uuid = 'x' WHERE seq = ?", (seqs[2],))
        store._db.execute("UPDATE cut_facts SET fact = (SELECT fact FROM cut_facts WHERE seq = ?) WHERE seq = ?",
                          (seqs[4], seqs[3]))   # another row's offsets
        for _ in range(2):
            self.assertEqual(exact(self.sync(PruningSessionStore(store, policy=policy).load(KEY))), want)

    def read_cut_everywhere(self):
        """A store of big results loaded twice with a policy that reads every old result cut: (store,
        policy, its wrapper, another connection to the file, knowing nothing of flower)."""
        import sqlite3
        store = self.stored(self.big_results())
        policy = flower.PrunePolicy(trim=True, trim_keep=1, trim_min_chars=1000, expire_glances=False,
                                    spill_dir=tempfile.mkdtemp(dir=self.tmp.name))
        wrapped = PruningSessionStore(store, policy=policy)
        for _ in range(2):
            self.sync(wrapped.load(KEY))
        other = sqlite3.connect(store.path, isolation_level=None)
        self.addCleanup(other.close)
        return store, policy, wrapped, other

    def test_a_fact_that_misleads_a_load_is_forgotten_not_kept_forever(self):
        # INSERT OR REPLACE through the uuid index deletes the old row without firing delete triggers
        # (SQLite fires them then only with recursive_triggers on): its fact is left naming a seq that is
        # gone; the load that meets it falls back once, forgets the session's facts, and the next ones
        # note them again and read rows cut
        store, policy, wrapped, other = self.read_cut_everywhere()
        seq = min(seq for _, seq in self.cut_facts(store))
        other.execute("INSERT OR REPLACE INTO entries(skey, uuid, payload) SELECT skey, uuid, payload FROM entries WHERE seq=?", (seq,))
        self.assertIn((flower._key_string(KEY), seq), self.cut_facts(store))   # the orphan the test is about
        want = exact(flower.prune(store.load_sync(KEY), policy)[0])
        broken, cut = [], []
        real_fresh, real_cut = SqliteSessionStore._fresh, SqliteSessionStore._read_cut

        def fresh(*args):
            try:
                yield from real_fresh(*args)
            except flower.PlanBroken:
                broken.append(1)
                raise
        with unittest.mock.patch.object(SqliteSessionStore, "_fresh", staticmethod(fresh)), \
                unittest.mock.patch.object(SqliteSessionStore, "_read_cut", staticmethod(lambda *a: (real_cut(*a), cut.append(1))[0])):
            for load in range(3):
                cut.clear()
                self.assertEqual(exact(self.sync(wrapped.load(KEY))), want)
        self.assertEqual(len(broken), 1)   # once, not on every load
        self.assertEqual(self.cut_facts(store), self.true_cut_facts(store))
        self.assertEqual(len(cut), wrapped.last_report.trimmed)   # and rows are read cut again
        self.assertGreater(len(cut), 50)

    def test_another_entry_put_under_the_seq_of_a_row_read_cut_is_read_as_it_is(self):
        # a row read cut is not read at all, only its skeleton: an entry another writer puts in its place
        # under its seq (INSERT OR REPLACE, no trigger) leaves the old fact, which names another uuid;
        # the load falls back once, forgets the session's facts, and later ones note them again
        store, policy, wrapped, other = self.read_cut_everywhere()
        skey = flower._key_string(KEY)
        seqs = sorted(seq for _, seq in self.cut_facts(store))
        for seq in seqs[:3]:
            entry = json.loads(other.execute("SELECT payload FROM entries WHERE seq=?", (seq,)).fetchone()[0])
            entry["uuid"] = f"put-in-place-{seq}"
            entry["message"]["content"][0]["content"] = "a new text\n" * 300
            other.execute("INSERT OR REPLACE INTO entries(seq, skey, uuid, payload) VALUES (?,?,?,?)",
                          (seq, skey, entry["uuid"], json.dumps(entry, ensure_ascii=False, separators=(",", ":"))))
        self.assertIn((skey, seqs[0]), self.cut_facts(store))   # the stale fact the test is about
        want, report = flower.prune(store.load_sync(KEY), policy)
        self.assertIn("put-in-place-", json.dumps(want))
        for _ in range(3):
            self.assertEqual(exact(self.sync(wrapped.load(KEY))), exact(want))
            self.assertEqual(wrapped.last_report.as_dict(), report.as_dict())
        self.assertEqual(self.cut_facts(store), self.true_cut_facts(store))

    def test_a_trim_on_load_does_not_fetch_the_rows_it_reads_cut(self):
        # their big texts lie in overflow pages: the load query brings each one's uuid instead
        store = self.stored(self.big_results())
        policy = flower.PrunePolicy(trim=True, spill_dir=tempfile.mkdtemp(dir=self.tmp.name))
        self.sync(PruningSessionStore(store, policy=policy).load(KEY))
        plan, _, rows = store._planned_rows(flower._key_string(KEY), policy)
        rows = list(rows)
        got = {seq: payload for payload, _, _, seq in rows if seq in plan.cuts}
        self.assertGreater(len(got), 30)
        self.assertEqual(set(got), set(plan.cuts))
        self.assertEqual(got, {seq: uid for seq, (uid, _, _) in plan.cuts.items()})
        self.assertTrue(all(payload[:1] == "{" for payload, _, _, seq in rows if seq not in plan.cuts))

    def test_a_sqlite_without_json_functions_reads_no_row_cut(self):
        import sqlite3
        store = self.stored(self.big_results())
        policy = flower.PrunePolicy(trim=True, spill_dir=tempfile.mkdtemp(dir=self.tmp.name))
        want = exact(flower.prune(store.load_sync(KEY), policy)[0])
        store._json = False   # as _has_json finds on such a build
        cut = []
        real = SqliteSessionStore._read_cut
        with unittest.mock.patch.object(SqliteSessionStore, "_read_cut", staticmethod(lambda *a: (real(*a), cut.append(1))[0])):
            for _ in range(2):
                self.assertEqual(exact(self.sync(PruningSessionStore(store, policy=policy).load(KEY))), want)
        self.assertEqual((cut, self.cut_facts(store)), ([], {}))
        self.assertTrue(SqliteSessionStore._has_json(store._db))
        broken = unittest.mock.Mock()
        broken.execute.side_effect = sqlite3.OperationalError("no such table: json_each")
        self.assertFalse(SqliteSessionStore._has_json(broken))

    def test_a_row_changed_while_a_load_reads_it_gets_no_stale_cut_fact(self):
        # the load reads a snapshot: a row another writer changes meanwhile was read as it was, and a
        # cut fact worked out from that must not be noted for the row as it is now
        import sqlite3
        store = self.stored(self.big_results())
        other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)   # the load runs in a worker thread
        self.addCleanup(other.close)
        seq, payload = other.execute("SELECT seq, payload FROM entries WHERE length(payload) > 1500 "
                                     "ORDER BY seq DESC LIMIT 1").fetchone()
        changed = json.loads(payload)
        changed["message"]["content"][0]["content"] += "w" * 5000
        real, calls = flower.cut_fact, []

        def meanwhile(*args):
            if not calls:
                other.execute("UPDATE entries SET payload = ? WHERE seq = ?", (json.dumps(changed, ensure_ascii=False, separators=(",", ":")), seq))
            calls.append(1)
            return real(*args)
        policy = flower.PrunePolicy(trim=True, spill_dir=tempfile.mkdtemp(dir=self.tmp.name))
        with unittest.mock.patch.object(flower, "cut_fact", meanwhile):
            self.sync(PruningSessionStore(store, policy=policy).load(KEY))
        self.assertGreater(len(calls), 20)
        self.assertEqual(self.cut_facts(store), {})   # nothing of that snapshot is trusted
        self.sync(PruningSessionStore(store, policy=policy).load(KEY))
        self.assertEqual(self.cut_facts(store), self.true_cut_facts(store))   # the next load notes them
        self.assertIn((flower._key_string(KEY), seq), self.cut_facts(store))
        self.assertSameAsPrune(store, policy)

    def test_a_busy_or_read_only_store_loads_all_the_same_and_notes_later(self):
        import sqlite3
        store = self.stored(self.big_results())
        policy = flower.PrunePolicy(trim=True, spill_dir=tempfile.mkdtemp(dir=self.tmp.name))
        want = flower.prune(store.load_sync(KEY), policy)[0]
        wait = store._db.execute("PRAGMA busy_timeout").fetchone()[0]
        other = sqlite3.connect(store.path, isolation_level=None)
        self.addCleanup(other.close)
        other.execute("BEGIN IMMEDIATE")   # another writer holds the store
        try:
            self.assertEqual(exact(self.sync(PruningSessionStore(store, policy=policy).load(KEY))), exact(want))
        finally:
            other.execute("ROLLBACK")
        self.assertEqual(self.cut_facts(store), {})
        self.assertEqual(store._db.execute("PRAGMA busy_timeout").fetchone()[0], wait)   # as it was
        store._db.execute("PRAGMA query_only=1")   # a store it may read, not write
        self.assertEqual(exact(self.sync(PruningSessionStore(store, policy=policy).load(KEY))), exact(want))
        self.assertEqual(self.cut_facts(store), {})
        store._db.execute("PRAGMA query_only=0")
        self.sync(PruningSessionStore(store, policy=policy).load(KEY))
        self.assertEqual(self.cut_facts(store), self.true_cut_facts(store))

    def test_a_store_an_older_flower_wrote_with_cut_facts_in_its_rows(self):
        # that flower stored "t" facts in the facts column and had no cut_facts table: those facts tell
        # nothing now (the rows are read whole, once), and its rows get their facts noted here
        import sqlite3
        entries = self.big_results()
        store = self.stored(entries)
        path = store.path
        store.close()
        db = sqlite3.connect(path)
        dumps = flower._compact_json()
        rows = db.execute("SELECT seq, payload FROM entries").fetchall()
        old = [(flower.FACTS_VERSION + "t" + f[2:], seq) for f, seq in ((flower.cut_fact(json.loads(p), p, dumps), seq) for seq, p in rows) if f]
        db.executemany("UPDATE entries SET facts = ? WHERE seq = ? AND facts IS NULL", [o for o in old if o[0]])
        for name in flower.CUT_TRIGGERS:
            db.execute(f"DROP TRIGGER {name}")
        db.execute("DROP TABLE cut_facts")
        db.commit()
        db.close()
        store = self.stored([], path)
        self.assertGreater(store._db.execute("SELECT count(*) FROM entries WHERE facts LIKE ?", (flower.FACTS_VERSION + "t%",)).fetchone()[0], 80)
        for policy in self.POLICIES:
            with self.subTest(policy=policy):
                self.assertSameAsPrune(store, policy)
        self.assertEqual(self.cut_facts(store), self.true_cut_facts(store))

    def test_the_rows_a_load_plans_from_are_read_from_their_indexes_alone(self):
        # a row read from the table is read past its payload to its facts (overflow pages and all):
        # the plan's queries use covering indexes, and an older flower's indexes are replaced
        import sqlite3
        store = self.stored([entry("a")])
        path = store.path
        store.close()
        db = sqlite3.connect(path)
        for statement in flower.SQL_OLD_INDEXES:
            db.execute(statement)
        db.execute("CREATE INDEX entries_left_1 ON entries(skey, seq) WHERE facts >= '1d' AND facts < '1f'")
        db.execute("CREATE INDEX entries_cut_1 ON entries(skey, seq, uuid, facts) "
                   "WHERE facts >= '1t' AND facts < '1u'")   # an older flower's, when cut facts were in the row
        db.execute("CREATE INDEX entries_left_rows_1 ON entries(skey, seq, uuid, facts) "
                   "WHERE facts >= '1d' AND facts < '1f'")   # facts of version 1
        db.commit()
        db.close()
        store = self.stored([], path)
        names = {r[0] for r in store._db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        self.assertFalse(names & {"entries_left_1", "entries_cut_1", "entries_left_rows_1"}, names)
        for query, way in ((flower.SQL_LEFT_ROWS, "COVERING INDEX"), (flower.SQL_CUT_ROWS, "USING PRIMARY KEY")):
            plan = " ".join(str(r[-1]) for r in store._db.execute("EXPLAIN QUERY PLAN " + query, ("k",)))
            self.assertIn(way, plan, query)   # the cut facts' table is its primary key: nothing else to read

    def test_a_careful_prune_takes_no_rows_read_cut(self):
        # a uuid that is not a string makes the prune careful: the rows it let leave are not known
        # beforehand, so a plan that read rows cut does not hold
        entries = [{"type": "user", "uuid": 7, "message": {"content": "hi"}},
                   {"type": "user", "uuid": "u1", "message": {"content": [{"type": "tool_result", "tool_use_id": "t",
                                                                           "content": "[tool result archived"}]}}]
        plan = flower.LeavePlan(cuts={"u1": "[tool result archived"})
        with self.assertRaises(flower.PlanBroken):
            flower._prune(entries, flower.PrunePolicy(trim=True), plan=plan)
        entries[0]["uuid"] = "u0"
        pruned, report = flower._prune(entries, flower.PrunePolicy(trim=True), plan=plan)
        self.assertEqual(report.trimmed, 1)

    def test_big_results_prune_looks_at_before_trim_are_never_read_cut(self):
        # errors (unavailable-tool ones are dropped), halted calls (neutral text), healing entries and
        # rows whose uuid comes twice (a careful prune): the steps before trim decide on those, so a load
        # reads them whole even when a spill file for them exists
        import random
        from tests.transcripts import Builder
        policies = [flower.PrunePolicy(trim=True, trim_keep=2, keep_unavailable=0, keep_denials=0),
                    flower.PrunePolicy(trim=True, trim_keep=0, trim_min_chars=1000, keep_glances=0, keep_denials=0)]
        for trial in range(40):
            rng = random.Random(trial)
            b = Builder(rng, sid=f"s-{trial}")
            b.prompt("go")
            for i in range(30):
                if rng.random() < 0.15:
                    b.api_error(rng.randint(0, 1))
                b.tool(rng.choice(["Bash", "Read"]), {"command": f"make {i}"}, "y\n" * rng.randint(600, 3000))
            errors = [e["uuid"] for e in b.entries if e.get("isApiErrorMessage")]
            entries = []
            for e in b.entries:
                entries.append(e)
                if e["type"] != "user" or not isinstance(e["message"]["content"], list) or rng.random() < 0.5:
                    continue
                block = e["message"]["content"][0]
                twist = rng.choice(["error", "unavailable", "odd unavailable", "healed", "rejected", "interrupted",
                                    "twice", "denial twice"])
                if twist == "error":
                    block["is_error"] = True
                elif twist.endswith("unavailable"):   # an odd parent: no fact of it can be stored
                    block.update(is_error=True, content="<tool_use_error>Error: No such tool available: X " + block["content"])
                    if twist == "odd unavailable":
                        e["parentUuid"] += "\x1f"
                elif twist == "denial twice":   # an old denial with the same uuid, which no plan leaves out
                    entries.append({"type": "user", "uuid": e["uuid"], "parentUuid": e["uuid"], "toolDenialKind": "user-rejected",
                                    "permissionDecision": {"decision": "reject"}, "message": {"role": "user", "content": [
                                        {"type": "tool_result", "tool_use_id": "nowhere", "content": "no", "is_error": True}]}})
                elif twist == "healed":
                    e["flowerHealed"] = True
                elif twist == "rejected":
                    e["toolUseResult"] = "User rejected tool use"
                elif twist == "interrupted":
                    e["toolDenialKind"] = "interrupted"
                elif errors:
                    e["uuid"] = rng.choice(errors)
            store = self.stored(entries)
            spill = tempfile.mkdtemp(dir=self.tmp.name)
            for k in (1, 0, 1):   # the harder policy writes a spill file for every big result first
                policy = dataclasses.replace(policies[k], spill_dir=spill)
                want, report = flower.prune(store.load_sync(KEY), policy)
                wrapped = PruningSessionStore(store, policy=policy)
                with self.subTest(trial=trial, policy=k):
                    self.assertEqual(exact(self.sync(wrapped.load(KEY))), exact(want))
                    self.assertEqual(wrapped.last_report.as_dict(), report.as_dict())

    def test_same_as_prune_on_hostile_rows(self):
        import random
        from tests.transcripts import hostile_entry, random_transcript
        rng = random.Random(5)
        for trial in range(300):
            entries = random_transcript(trial, size=30)
            for _ in range(rng.randint(1, 8)):   # wrong shapes, and API errors with odd uuids and parents
                bad = hostile_entry(rng, rng.randint(0, 40)) if rng.random() < 0.7 else {
                    "type": "system", "subtype": "api_error", "error": {"message": "x" * rng.randint(0, 9)},
                    "uuid": rng.choice([f"e{trial}-{_}", 7, None, ["l"]]),
                    "parentUuid": rng.choice([None, "gone", 3, entries[rng.randrange(len(entries))].get("uuid")])}
                entries.insert(rng.randrange(len(entries) + 1), bad)
            store = self.stored(json.loads(json.dumps(entries)))
            for policy in self.POLICIES[:2]:
                with self.subTest(trial=trial, policy=policy):
                    self.assertSameAsPrune(store, policy, f"hostile {trial}")

    def test_rows_prune_drops_whole_are_not_parsed(self):
        # API-error rows, and old denials and unavailable-tool errors with the lone calls they answer
        from tests.transcripts import random_transcript
        entries = random_transcript(3, size=200)
        errors = sum(1 for e in entries if flower.is_api_error_entry(e))
        store = self.stored(entries)
        with counting_parses() as calls:
            pruned, report = store.load_pruned(KEY)
        self.assertGreater(errors, 3)
        self.assertGreater(report.denials_dropped, 3)
        self.assertGreater(report.unavailable_dropped, 0)
        self.assertEqual(report.dropped_errors, errors)
        self.assertEqual(len(calls), len(entries) - errors - 2 * (report.denials_dropped + report.unavailable_dropped))
        want, want_report = flower.prune(entries)
        self.assertEqual(pruned, want)
        self.assertEqual(report.as_dict(), want_report.as_dict())

    def test_calls_stored_in_an_earlier_batch_are_found(self):
        # the CLI appends in small batches: a denial's call is usually already stored
        from tests.transcripts import random_transcript
        entries = random_transcript(3, size=200)
        store = self.stored([])
        for e in entries:
            store.append_sync(KEY, [e])
        with counting_parses() as calls:
            pruned, report = store.load_pruned(KEY)
        errors = report.dropped_errors
        self.assertGreater(report.denials_dropped, 3)
        self.assertEqual(len(calls), len(entries) - errors - 2 * (report.denials_dropped + report.unavailable_dropped))
        self.assertEqual(pruned, flower.prune(entries)[0])

    def test_a_batch_looks_up_only_the_calls_it_does_not_hold(self):
        # the CLI writes a result right after its call: a batch holding both asks the store nothing
        from tests.transcripts import random_transcript
        entries = random_transcript(3, size=200)
        store = self.stored([])
        asked = []
        real = store._stored_entries
        store._stored_entries = lambda skey, uuids: asked.append(list(uuids)) or real(skey, uuids)
        store.append_sync(KEY, entries)
        self.assertEqual(asked, [])
        other = {"project_key": "proj", "session_id": "s2"}
        for e in entries:   # one row a batch: a result's call is always in an earlier batch
            store.append_sync(other, [e])
        errors = [e for e in entries if e["type"] == "user" and isinstance(e["message"]["content"], list)
                  and e["message"]["content"][0].get("is_error")]
        self.assertGreater(len(errors), 5)
        self.assertEqual(asked, [[e["parentUuid"]] for e in errors])   # each result's call, once
        self.assertEqual(store.load_pruned(other)[0], flower.prune(entries)[0])

    def test_batches_sent_again_or_reusing_uuids_store_the_facts_of_the_rows_kept(self):
        # facts are first made as if every row were new; when a row was there already, what is
        # stored must be what a store that looked every call up would hold
        import functools
        import random
        from tests.transcripts import random_transcript

        class LooksEverythingUp(SqliteSessionStore):
            def _insert_with_facts(self, skey, entries, uuids, payloads, ascii_only=False):
                facts = flower.batch_facts(entries, functools.partial(self._stored_entries, skey))
                self._db.executemany(flower.SQL_APPEND_ENTRY, list(zip([skey] * len(entries), uuids, payloads, facts)))

        def denial(u, parent, tool_id):
            return {"type": "user", "uuid": u, "parentUuid": parent, "toolDenialKind": "permission-rule",
                    "permissionDecision": {"decision": "reject"}, "message": {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": tool_id, "content": "denied", "is_error": True}]}}

        rng = random.Random(11)
        rows = "SELECT skey, uuid, payload, facts FROM entries ORDER BY seq"
        reused = 0
        for trial in range(60):
            entries = random_transcript(trial, size=60)
            batches, i = [], 0
            while i < len(entries):
                n = rng.randint(1, 12)
                batches.append(entries[i:i + n])
                i += n
                if rng.random() < 0.3:   # sent again, whole or in part, with new rows after it
                    again = json.loads(json.dumps(rng.choice(batches)[:rng.randint(1, 12)]))
                    calls = [e for e in again if e["type"] == "assistant"
                             and e["message"]["content"][0]["type"] == "tool_use"]
                    if calls and rng.random() < 0.7:   # a call sent again as another call, denied now
                        call = rng.choice(calls)
                        call["message"]["content"][0].update(id=f"re{trial}-{i}", name=rng.choice(["Write", "Bash"]))
                        again.append(denial(f"d{trial}-{i}", call["uuid"], f"re{trial}-{i}"))
                    batches.append(again + entries[i:i + rng.randint(0, 3)])
                    i += len(batches[-1]) - len(again)
                    reused += 1
            ours = self.stored([])
            reference = LooksEverythingUp(os.path.join(self.tmp.name, f"ref{trial}.db"))
            self.addCleanup(reference.close)
            for batch in batches:
                ours.append_sync(KEY, json.loads(json.dumps(batch)))
                reference.append_sync(KEY, json.loads(json.dumps(batch)))
            with self.subTest(trial=trial):
                self.assertEqual(ours._db.execute(rows).fetchall(), reference._db.execute(rows).fetchall())
                self.assertSameAsPrune(ours, flower.PrunePolicy(keep_denials=0, keep_unavailable=0))
        self.assertGreater(reused, 100)

    def test_a_batch_sent_again_takes_out_only_its_own_rows(self):
        # the rows a re-sent batch added are taken out again before they go in with their right
        # facts; nothing stored before may go with them, whatever the schema's bookkeeping says
        import sqlite3
        for damage in (None, "DELETE FROM sqlite_sequence", "UPDATE sqlite_sequence SET seq = 1"):
            store = self.stored([entry("a"), entry("b"), entry("c")])
            other = {"project_key": "proj", "session_id": "s2"}
            store.append_sync(other, [entry("x"), entry("c")])
            if damage:
                store._db.execute(damage)
            store.append_sync(KEY, [entry("c", 9), entry("d"), {"type": "queue-operation"}])
            store.append_sync(other, [entry("y")])
            with self.subTest(damage=damage):
                self.assertEqual([(e.get("uuid"), e.get("n")) for e in store.load_sync(KEY)],
                                 [("a", 0), ("b", 0), ("c", 0), ("d", 0), (None, None)])
                self.assertEqual([e["uuid"] for e in store.load_sync(other)], ["x", "c", "y"])
        path = os.path.join(self.tmp.name, "plain-seq.db")   # a table without AUTOINCREMENT still appends
        db = sqlite3.connect(path)
        db.executescript("CREATE TABLE entries (seq INTEGER PRIMARY KEY, skey TEXT NOT NULL, uuid TEXT, "
                         "payload TEXT NOT NULL);")
        db.close()
        store = self.stored([entry("a")], path)
        store.append_sync(KEY, [entry("a"), entry("b")])
        self.assertEqual([e["uuid"] for e in store.load_sync(KEY)], ["a", "b"])
        # past the largest rowid SQLite picks free seqs at random: a new row may come before old ones
        db = sqlite3.connect(path)
        db.execute("INSERT INTO entries(seq, skey, uuid, payload) VALUES (9223372036854775807, 'other', 'z', '{}')")
        db.commit()
        db.close()
        store = self.stored([], path)
        sent = [entry(f"u{i}") for i in range(40)]
        for k in range(0, 40, 2):
            store.append_sync(KEY, sent[max(0, k - 3):k + 2])   # each batch sends three rows again
        self.assertEqual(sorted(e["uuid"] for e in store.load_sync(KEY)), sorted(["a", "b"] + [e["uuid"] for e in sent]))

    def test_a_reused_tool_id_falls_back_to_the_full_prune(self):
        # a plan made from what was noted at append time would drop the wrong call when a later row
        # uses the same tool id again; the scan notices and the load starts again without the plan
        from tests.transcripts import Builder
        b = Builder(__import__("random").Random(8))
        b.prompt("write it")
        for _ in range(3):
            b.tool("Write", {"file_path": "/w/a", "content": "x"}, "", kind="denial")
        first = next(e for e in b.entries if e["type"] == "assistant")
        reused = first["message"]["content"][0]["id"]
        b.tool("Read", {"file_path": "/w/b"}, "contents of b")
        last_use = [e for e in b.entries if e["type"] == "assistant"][-1]
        last_use["message"]["content"][0]["id"] = reused
        last_result = b.entries[-1]
        last_result["message"]["content"][0]["tool_use_id"] = reused
        store = self.stored(b.entries)
        plan, _, _ = store._planned_rows(flower._key_string(KEY), flower.PrunePolicy())
        self.assertIn(reused, plan.results)   # the plan would leave out the first denial and its call
        self.assertSameAsPrune(store, flower.PrunePolicy())

    def test_what_an_adversary_found(self):
        # each made load_pruned differ from prune() before it was fixed
        def call(u, p, t, name="Write"):
            return {"type": "assistant", "uuid": u, "parentUuid": p, "message": {"id": "m" + u, "role": "assistant",
                    "model": "m", "content": [{"type": "tool_use", "id": t, "name": name, "input": {"x": 1}}]}}

        def denial(u, p, t):
            return {"type": "user", "uuid": u, "parentUuid": p, "toolDenialKind": "permission-rule",
                    "permissionDecision": {"decision": "reject"}, "message": {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": t, "content": "denied", "is_error": True}]}}
        go = {"type": "user", "uuid": "p", "parentUuid": None, "message": {"role": "user", "content": "go"}}
        error = {"type": "system", "subtype": "api_error", "uuid": "e", "parentUuid": "p", "error": {"message": "x"}}
        after = {"type": "user", "uuid": "q", "parentUuid": "d", "message": {"role": "user", "content": "x"}}
        synthetic = {"type": "assistant", "uuid": "a", "parentUuid": "p", "isApiErrorMessage": True, "message": {
            "role": "assistant", "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: x"}]}}
        cases = {   # batches, then SQL that damages the store
            "an empty tool id": ([[go, call("a", "p", ""), denial("d", "a", "")]], None),
            "the call's uuid taken by an earlier row": ([[go, call("a", "p", "t1", "Bash")],
                                                         [call("a", "p", "t2"), denial("d", "a", "t2")]], None),
            "the call sent again with another parent": ([[go, call("a", "p", "t1")],
                                                         [call("a", None, "t1"), denial("d", "a", "t1"), after]], None),
            "the call's uuid twice in one batch": ([[go, call("a", "p", "t1", "Bash"), call("a", "p", "t2"),
                                                     denial("d", "a", "t2")]], None),
            "the call's uuid taken by an API error": ([[go, synthetic], [call("a", "p", "t2"), denial("d", "a", "t2")]],
                                                      None),
            "a damaged row a plan leaves out": ([[go, call("a", "p", "t1"), denial("d", "a", "t1")]],
                                                "UPDATE entries SET payload = '{\"x' WHERE uuid = 'd'"),
            "a damaged API-error row": ([[go, error]], "UPDATE entries SET payload = 'oops' WHERE uuid = 'e'"),
            "a count in a fact that int() would take": ([[go, error]], f"UPDATE entries SET facts = '{flower.FACTS_VERSION}e-3' WHERE uuid = 'e'"),
        }
        for label, (batches, damage) in cases.items():
            store = self.stored([])
            for batch in batches:
                store.append_sync(KEY, json.loads(json.dumps(batch)))
            if damage:
                store._db.execute(damage)
            for policy in (flower.PrunePolicy(), flower.PrunePolicy(keep_denials=0)):
                with self.subTest(label, policy=policy):
                    self.assertSameAsPrune(store, policy, label)

    def test_stored_verdicts_spare_classifying_commands(self):
        from tests.transcripts import anchor_transcript
        entries = anchor_transcript(2000)
        store = self.stored(entries)
        flower.is_read_only_command.cache_clear()
        store.load_pruned(KEY)
        with_facts = flower.is_read_only_command.cache_info().misses
        store._db.execute("UPDATE entries SET facts = NULL")   # a store written before facts existed
        flower.is_read_only_command.cache_clear()
        store.load_pruned(KEY)
        without = flower.is_read_only_command.cache_info().misses
        self.assertGreater(without, 300)
        self.assertEqual(with_facts, 0)

    def test_facts_of_another_version_are_not_used(self):
        b = __import__("tests.transcripts", fromlist=["Builder"]).Builder(__import__("random").Random(2))
        b.prompt("go")
        b.tool("Bash", {"command": "rm -rf build"}, "removed", level=1000)
        for _ in range(8):
            b.tool("Bash", {"command": "ls"}, "a b c", level=1000)
        store = self.stored(b.entries)
        store._db.execute(f"UPDATE entries SET facts = '0b1' WHERE facts = '{flower.FACTS_VERSION}b0'")   # a lie, of version 0
        pruned, _ = store.load_pruned(KEY)
        sent = lambda: json.dumps([b for e in pruned for b in flower.blocks_of(e)])  # noqa: E731
        self.assertIn("removed", sent())   # the writing command's result is kept
        store._db.execute(f"UPDATE entries SET facts = '{flower.FACTS_VERSION}b1' WHERE facts = '0b1'")   # the same lie, current
        pruned, _ = store.load_pruned(KEY)
        self.assertNotIn("removed", sent())   # shows the facts are what decides

    def test_damaged_facts_or_rows_fall_back_to_the_plain_load(self):
        from tests.transcripts import random_transcript
        entries = random_transcript(4, size=120)
        v = flower.FACTS_VERSION
        for damage in (f"UPDATE entries SET facts = '{v}eXY' WHERE facts LIKE '{v}e%'",
                       f"UPDATE entries SET facts = '{v}' WHERE facts LIKE '{v}b%'",
                       "UPDATE entries SET payload = 'not json' WHERE seq = 7",
                       "UPDATE entries SET payload = '[1, 2]' WHERE seq = 9"):
            with self.subTest(damage):
                store = self.stored(entries)
                store._db.execute(damage)
                self.assertSameAsPrune(store, flower.PrunePolicy())

    def test_a_payload_changed_by_any_writer_loses_its_facts(self):
        # a load trusts rows it does not read (API errors, planned leavers) to hold what their facts say:
        # a payload changed after it was stored must not keep facts that describe the old one
        import sqlite3
        from tests.transcripts import random_transcript
        entries = random_transcript(3, size=150)
        store = self.stored(entries)
        other = sqlite3.connect(store.path)   # another writer, knowing nothing of flower
        self.addCleanup(other.close)
        with other:
            other.execute("UPDATE entries SET payload = '{\"x' WHERE facts LIKE ? OR facts LIKE ?", LEAVING)
            other.execute("UPDATE entries SET facts = facts WHERE seq = 2")   # facts alone: kept
        left = other.execute("SELECT count(*) FROM entries WHERE payload = '{\"x' AND facts IS NOT NULL").fetchone()
        self.assertEqual(left, (0,))
        self.assertGreater(other.execute("SELECT count(*) FROM entries WHERE payload = '{\"x'").fetchone()[0], 3)
        for policy in self.POLICIES:
            with self.subTest(policy=policy):
                self.assertSameAsPrune(store, policy)
        self.assertGreater(store.skipped.get(flower._key_string(KEY)), 3)   # told as unreadable, not dropped

    def test_a_store_a_flower_of_another_version_wrote_has_its_facts_worked_out_again(self):
        # version 1 told a result that is a list of blocks as "": its facts of such rows say what this
        # flower's would not, so a store it wrote (or wrote to since) has every row's facts worked out
        # again when this one opens it, its trigger and index are replaced, and loads are prune's
        import random
        import sqlite3
        from tests.transcripts import random_transcript
        listed = random_transcript(31, size=150)
        for e in listed:
            for block in flower.blocks_of(e):
                if isinstance(block, dict) and block.get("type") == "tool_result" and random.Random(e["uuid"]).random() < 0.5:
                    block["content"] = [{"type": "text", "text": block["content"] + " as a list"}]
        store = self.stored(listed)
        path = store.path
        as_appended = dict(store._db.execute("SELECT seq, facts FROM entries"))
        store.close()
        for round_trip in range(2):
            db = sqlite3.connect(path)   # as a flower of version 1 leaves it: its facts, trigger and index
            db.execute("UPDATE entries SET facts = '1' || substr(facts, 2) WHERE facts IS NOT NULL")
            if round_trip == 0:
                db.execute(f"DROP TRIGGER {flower.FACTS_TRIGGER}")
            db.execute("CREATE TRIGGER entries_facts_stale_2 AFTER UPDATE OF payload, uuid ON entries BEGIN SELECT 1; END")
            db.execute("CREATE INDEX entries_left_rows_1 ON entries(skey, seq, uuid, facts) WHERE facts >= '1d' AND facts < '1f'")
            db.commit()
            db.close()
            store = self.stored([], path)
            self.assertEqual(dict(store._db.execute("SELECT seq, facts FROM entries")), as_appended, round_trip)
            names = {r[0] for r in store._db.execute("SELECT name FROM sqlite_master")}
            self.assertIn(flower.FACTS_TRIGGER, names)
            self.assertFalse(names & {"entries_facts_stale_2", "entries_left_rows_1"}, names)
            for policy in self.POLICIES[:3]:
                with self.subTest(round_trip=round_trip, policy=policy):
                    self.assertSameAsPrune(store, policy)
            store.close()

    def test_a_store_made_before_the_trigger_sets_aside_the_facts_of_damaged_rows_once(self):
        import sqlite3
        from tests.transcripts import random_transcript
        entries = random_transcript(8, size=150)
        store = self.stored(entries)
        path = store.path
        as_stored = dict(store._db.execute("SELECT seq, facts FROM entries"))
        store.close()
        db = sqlite3.connect(path)
        db.execute(f"DROP TRIGGER {flower.FACTS_TRIGGER}")   # as an older flower left it
        db.execute("UPDATE entries SET payload = 'oops' WHERE facts LIKE ? OR facts LIKE ?", LEAVING)
        db.commit()
        damaged = db.execute("SELECT count(*) FROM entries WHERE payload = 'oops' AND facts IS NOT NULL").fetchone()[0]
        db.close()
        self.assertGreater(damaged, 3)
        store = self.stored([], path)
        self.assertEqual(store._db.execute("SELECT count(*) FROM entries WHERE payload = 'oops' "
                                           "AND facts IS NOT NULL").fetchone(), (0,))
        sound = dict(store._db.execute("SELECT seq, facts FROM entries WHERE payload != 'oops'"))
        self.assertEqual(sound, {seq: as_stored[seq] for seq in sound})   # the sound rows: what append gave
        self.assertGreater(sum(f is not None for f in sound.values()), 20)
        for policy in self.POLICIES:
            with self.subTest(policy=policy):
                self.assertSameAsPrune(store, policy)

    def test_rows_changed_or_deleted_by_another_writer_while_the_store_is_open(self):
        # the plan trusts facts of rows it leaves unread; any row it names that another writer changed
        # (a call whose facts came from its result's, a uuid another row now claims), deleted, or damaged
        # after dropping the trigger must give what prune() of the stored rows gives
        import random
        import sqlite3
        from tests.transcripts import random_transcript
        rng = random.Random(16)
        for trial in range(60):
            store = self.stored(random_transcript(100 + trial, size=120))
            other = sqlite3.connect(store.path, isolation_level=None)
            self.addCleanup(other.close)
            rows = other.execute("SELECT seq, uuid, payload, facts FROM entries").fetchall()
            named = [r for r in rows if r[3] and r[3][:2] in [flower.FACTS_VERSION + k for k in "debc"]]
            uuids = [r[1] for r in rows if r[1]]
            if trial % 3 == 0:
                other.execute(f"DROP TRIGGER {flower.FACTS_TRIGGER}")
            for seq, uid, payload, facts in rng.sample(named, min(len(named), rng.randint(1, 4))):
                entry = json.loads(payload)
                how = rng.choice(["tool id", "uuid", "delete", "damage", "uuid column"])
                if how == "delete":
                    other.execute("DELETE FROM entries WHERE seq = ?", (seq,))
                    continue
                if how == "uuid column":   # the row stays, the store's key for it moves
                    other.execute("UPDATE entries SET uuid = 'moved-' || uuid WHERE seq = ?", (seq,))
                    continue
                if how == "damage":
                    text = "{\"x"
                elif how == "uuid":
                    entry["uuid"] = rng.choice(uuids)
                    text = json.dumps(entry)
                else:
                    content = (entry.get("message") or {}).get("content")
                    for block in content if isinstance(content, list) else []:
                        if isinstance(block, dict):
                            for field in ("id", "tool_use_id"):
                                if field in block:
                                    block[field] = "moved-" + str(block[field])
                    text = json.dumps(entry)
                other.execute("UPDATE entries SET payload = ? WHERE seq = ?", (text, seq))
            for policy in self.POLICIES[:3]:
                with self.subTest(trial=trial, policy=policy):
                    self.assertSameAsPrune(store, policy)
            self.assertTrue(other.execute(flower.SQL_FACTS_TRIGGER_KNOWN).fetchone())   # back, for later writes

    def test_payloads_with_trailing_space_or_damage_after_the_object(self):
        # the fast parse reads a payload's object and must not ignore what follows it
        from tests.transcripts import random_transcript
        entries = random_transcript(9, size=60)
        store = self.stored(entries)
        store._db.execute("UPDATE entries SET payload = payload || '  ' WHERE seq % 7 = 0")
        self.assertSameAsPrune(store, flower.PrunePolicy())
        self.assertEqual(len(self.sync(PruningSessionStore(store).load(KEY))), len(flower.prune(entries)[0]))
        store._db.execute("UPDATE entries SET payload = payload || 'x' WHERE seq = 11")
        self.assertSameAsPrune(store, flower.PrunePolicy())
        self.assertEqual(store.skipped.get(flower._key_string(KEY)), 1)   # that row is left out, like load_sync does

    def test_a_store_made_before_facts_gets_the_column_and_loads_the_same(self):
        import sqlite3
        from tests.transcripts import random_transcript
        path = os.path.join(self.tmp.name, "old.db")
        db = sqlite3.connect(path)
        db.executescript("CREATE TABLE entries (seq INTEGER PRIMARY KEY AUTOINCREMENT, skey TEXT NOT NULL, "
                         "uuid TEXT, payload TEXT NOT NULL); CREATE TABLE sessions (skey TEXT PRIMARY KEY, "
                         "project_key TEXT NOT NULL, session_id TEXT NOT NULL, subpath TEXT, mtime INTEGER NOT NULL, "
                         "context INTEGER);")
        entries = random_transcript(6, size=150)
        db.executemany("INSERT INTO entries(skey, uuid, payload) VALUES (?,?,?)",
                       [("proj/s1", e.get("uuid"), json.dumps(e)) for e in entries])
        db.execute("INSERT INTO sessions VALUES ('proj/s1', 'proj', 's1', NULL, 1, NULL)")
        db.commit()
        db.close()
        store = self.stored([], path)
        self.assertIn("facts", [c[1] for c in store._db.execute("PRAGMA table_info(entries)")])
        self.assertSameAsPrune(store, flower.PrunePolicy())
        store.append_sync(KEY, random_transcript(7, size=60))   # new rows get facts, old ones stay NULL
        self.assertSameAsPrune(store, flower.PrunePolicy())
        again = SqliteSessionStore(path)   # a second open: the column is there, nothing fails
        again.close()


class BatchedParse(unittest.TestCase):
    """Rows are parsed a batch at a time as one JSON text (flower.parsed_batch: the entries of a batch
    share their key strings): what comes out is exactly what parsing each row alone gives, and a batch
    holding a row that is not one JSON object is parsed row by row, which meets that row."""

    GOOD = ['{"type":"user","uuid":"a","message":{"content":"h\\u00e9\\n\\"q\\"","n":[1,2.5,-3e4,true,null]}}',
            '{}', '{"x":NaN,"y":Infinity}', '{"deep":[[[{"a":[]}]]],"s":"\\ud83d\\ude00 \\u4e2d"}',
            '  {"spaced": 1}\n ', '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","input":{}}]}}']
    BAD = ['{not json', '[1, 2]', 'null', '"str"', '5', '', '{"a":1} and more', '{"a":1},{"b":2}', '{"a":1}]',
           '{"unterminated":"', '{"a":[1', '{"a":1}}', '"}', ']']

    def scan(self):
        return json.decoder.JSONDecoder().scan_once

    def test_a_batch_is_what_each_text_parses_to(self):
        import random
        from tests.transcripts import anchor_transcript, hostile_entry, random_transcript
        rng = random.Random(8)
        texts = [json.dumps(e, separators=(",", ":"), ensure_ascii=rng.random() < 0.5)
                 for e in anchor_transcript(300) + random_transcript(2, size=100) +
                 [hostile_entry(rng, i) for i in range(100)]] + self.GOOD
        rng.shuffle(texts)
        got = flower.parsed_batch(texts, self.scan())
        self.assertEqual(json.dumps(got), json.dumps([json.loads(t) for t in texts]))
        shared = {id(k) for entry in got for k in entry}   # what a batch is for: one string per key
        self.assertLess(len(shared), 100)
        self.assertEqual(list(flower.parsed_objects(texts)), got)

    def test_a_text_that_is_not_one_object_fails_its_batch_wherever_it_lies(self):
        good = [json.dumps({"type": "user", "uuid": f"u{i}"}) for i in range(5)]
        for bad in self.BAD:
            for at in (0, 2, 5):
                texts = good[:at] + [bad] + good[at:]
                with self.subTest(bad=bad, at=at):
                    self.assertIsNone(flower.parsed_batch(texts, self.scan()))
                    skipped = [0]
                    self.assertEqual([e["uuid"] for e in flower.parsed_objects(texts, skipped)],
                                     [f"u{i}" for i in range(5)])
                    self.assertEqual(skipped, [1])
                    with self.assertRaises(ValueError):
                        list(flower.parsed_objects(texts))
        self.assertIsNone(flower.parsed_batch(good + [b'{"bytes": 1}'], self.scan()))
        self.assertEqual(list(flower.parsed_objects(good[:1] + [b'{"bytes": 1}'])), [{"type": "user", "uuid": "u0"}, {"bytes": 1}])

    def test_damage_that_undoes_itself_still_fails_the_batch(self):
        # one text that runs on into the next (two rows made one object) and one that holds two objects:
        # the count is right, only the random string between the texts tells that the rows are not
        # what they were; a text guessing at that string does not pass either
        merge = ['{"a":[1', '{"b":2}]}']
        for split in ('{"c":3},{"d":4}', '{"c":3},"0123456789abcdef",{"d":4}', '{"c":3},"",{"d":4}'):
            for texts in (merge + [split], [split] + merge, [merge[0], split, merge[1]]):
                with self.subTest(texts=texts):
                    self.assertIsNone(flower.parsed_batch(texts, self.scan()))
                    self.assertEqual(list(flower.parsed_objects(texts, [0])), [])

    def stored_with_rows(self, tmp, entries, rows):
        """A store of ``entries`` in ``tmp`` whose row k then holds ``rows[k]`` (a text, or bytes: a BLOB),
        written past flower; ``entries`` changed to what each bytes row holds."""
        import sqlite3
        path = os.path.join(tmp, "s.db")
        store = SqliteSessionStore(path)
        self.addCleanup(store.close)
        store.append_sync(KEY, entries)
        db = sqlite3.connect(path, isolation_level=None)
        seqs = [r[0] for r in db.execute("SELECT seq FROM entries ORDER BY seq")]
        for k, payload in rows.items():
            db.execute("UPDATE entries SET payload=? WHERE seq=?", (payload, seqs[k]))
            if isinstance(payload, bytes):
                entries[k] = json.loads(payload)
        db.close()
        return store

    def test_damaged_rows_in_a_store_load_as_each_row_alone_gives(self):
        import random
        from tests.transcripts import anchor_transcript
        rng = random.Random(4)
        with tempfile.TemporaryDirectory() as tmp:
            entries = anchor_transcript(700)
            damaged = rng.sample(range(len(entries)), 40)
            blob = next(k for k in range(300, 700) if k not in damaged)   # a payload stored as bytes: read too
            rows = {k: rng.choice(self.BAD) for k in damaged}
            rows[blob] = b'{"type": "user", "uuid": "blob", "message": {"content": "from a blob"}}'
            store = self.stored_with_rows(tmp, entries, rows)
            want = [e for k, e in enumerate(entries) if k not in damaged]
            for rows in (1, 2, 3, 7, 256):
                with self.subTest(batch_rows=rows), unittest.mock.patch.object(flower, "BATCH_ROWS", rows):
                    store.skipped.clear()
                    self.assertEqual(store.load_sync(KEY), want)
                    self.assertEqual(store.skipped[flower._key_string(KEY)], 40)
                    for policy in (flower.PrunePolicy(), flower.PrunePolicy(trim=True, spill_dir=os.path.join(tmp, "sp"))):
                        got, report = store.load_pruned(KEY, policy)
                        prune_want, prune_report = flower.prune(want, policy)
                        self.assertEqual(json.dumps(got), json.dumps(prune_want))
                        self.assertEqual(report.as_dict(), prune_report.as_dict())

    def test_a_payload_stored_as_bytes_is_read_in_its_batch(self):
        from tests.transcripts import anchor_transcript
        with tempfile.TemporaryDirectory() as tmp:
            entries = anchor_transcript(600)
            store = self.stored_with_rows(tmp, entries, {k: f'{{"type": "user", "uuid": "blob{k}"}}'.encode()
                                                         for k in (5, 300, 301)})
            with unittest.mock.patch.object(store, "load_sync", side_effect=AssertionError("fell back")):
                got, report = store.load_pruned(KEY)
            self.assertEqual(json.dumps(got), json.dumps(flower.prune(entries)[0]))

    def test_a_row_nested_as_deep_as_a_parse_alone_allows_loads_in_a_batch(self):
        # the joined array is one level deeper than its rows: where that is too deep, the rows alone
        deep = next(t for d in range(1200, 0, -1)
                    for t in ['{"a":' + "[" * d + "]" * d + "}"] if self.parses_alone(t))
        texts = [deep, "{}", '{"b":1}']
        self.assertEqual(list(flower.parsed_objects(texts)), [json.loads(t) for t in texts])
        # where the batch's own level is one too many depends on the stack it is parsed on: told for sure
        real = json.decoder.JSONDecoder

        class TooDeepAsABatch(real):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                scan = self.scan_once

                def scan_once(text, i):
                    if text.startswith("["):
                        raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")
                    return scan(text, i)
                self.scan_once = scan_once
        with unittest.mock.patch.object(json.decoder, "JSONDecoder", TooDeepAsABatch):
            self.assertEqual(list(flower.parsed_objects(texts)), [json.loads(t) for t in texts])

    @staticmethod
    def parses_alone(text):
        try:
            list(flower.parsed_objects([text]))   # a batch of one is parsed alone
            return True
        except ValueError:   # too deep for the parser: a damaged row (issue 36: not a RecursionError)
            return False

    def test_rows_are_handed_on_a_batch_of_text_at_a_time_wide_or_not(self):
        for char in ("e", "é", "\U0001F916"):
            taken = []

            def rows():
                for i in range(40):
                    taken.append(i)
                    yield json.dumps({"uuid": f"u{i}", "out": char * 200_000}, ensure_ascii=False)
            with self.subTest(char=char):
                objects = flower.parsed_objects(rows())
                self.assertEqual(next(objects)["uuid"], "u0")
                self.assertLessEqual(len(taken), flower.BATCH_CHARS // 200_000 + 1)
                self.assertEqual(len(list(objects)), 39)

    def test_a_batch_holds_at_most_batch_chars_and_a_row(self):
        # never every payload at once: the joined text is bounded, whatever the rows weigh, and a long
        # row is parsed alone, not copied into it
        from tests.transcripts import sized_transcript
        entries = sized_transcript(800)
        sizes = [len(json.dumps(e, separators=(",", ":"), ensure_ascii=False)) for e in entries]
        batches, alone = [], []
        real = json.decoder.JSONDecoder

        class Watching(real):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                scan = self.scan_once
                self.scan_once = lambda text, i: (batches if text.startswith("[") else alone).append(len(text)) \
                    or scan(text, i)
        with tempfile.TemporaryDirectory() as tmp:
            store = SqliteSessionStore(os.path.join(tmp, "s.db"))
            self.addCleanup(store.close)
            store.append_sync(KEY, entries)
            with unittest.mock.patch.object(json.decoder, "JSONDecoder", Watching), \
                    unittest.mock.patch.object(flower, "BATCH_CHARS", 20_000), \
                    unittest.mock.patch.object(flower, "BATCH_ROW_CHARS", 5_000):
                got = store.load_pruned(KEY)[0]
                self.assertEqual(store.load_sync(KEY), entries)
        self.assertEqual(got, flower.prune(entries)[0])
        self.assertGreater(len(batches), 2 * sum(sizes) // 40_000 // 2)
        self.assertLessEqual(max(batches), 20_000 + 5_000 + 30 * flower.BATCH_ROWS)
        self.assertEqual(sorted(n for n in alone if n >= 5_000), sorted(2 * [n for n in sizes if n >= 5_000]))
        self.assertGreater(len(alone), 40)   # each long row, once by load_sync and once by load_pruned

    def test_rows_with_wide_characters_are_parsed_alone_in_their_place(self):
        # one emoji would make a whole joined batch a text of 4 bytes a character, slower to parse than
        # its rows one by one (real CLI shapes: 21% of rows, 86% of the bytes)
        import random
        from tests.transcripts import anchor_transcript
        rng = random.Random(2)
        entries = anchor_transcript(900)
        for k in rng.sample(range(len(entries)), 150):
            if entries[k].get("type") == "user" and isinstance(entries[k].get("message", {}).get("content"), str):
                entries[k]["message"]["content"] += rng.choice(["é", "中文", "\U0001F916", "\u2713"])
            else:
                entries[k]["note"] = rng.choice(["é", "中文", "\U0001F916", "\u2713"])
        batches = []
        real = json.decoder.JSONDecoder

        class Watching(real):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                scan = self.scan_once
                self.scan_once = lambda text, i: (text.startswith("[") and batches.append(text)) or scan(text, i)
        with tempfile.TemporaryDirectory() as tmp:
            store = SqliteSessionStore(os.path.join(tmp, "s.db"))
            self.addCleanup(store.close)
            store.append_sync(KEY, entries)
            with unittest.mock.patch.object(json.decoder, "JSONDecoder", Watching):
                self.assertEqual(store.load_sync(KEY), entries)
                got = store.load_pruned(KEY)[0]
        self.assertEqual(json.dumps(got), json.dumps(flower.prune(entries)[0]))
        self.assertGreater(len(batches), 6)
        self.assertTrue(all(text.isascii() for text in batches))

    def test_batches_of_any_size_load_as_prune_of_the_rows(self):
        # rows left unread, rows read cut and rows whose cut facts are noted, across batch ends
        from tests.transcripts import anchor_transcript, sized_transcript
        real_cut, reads = SqliteSessionStore._read_cut, {}
        for name, entries in (("anchor", anchor_transcript(1200)), ("dense", sized_transcript(600))):
            with tempfile.TemporaryDirectory() as tmp:
                store = SqliteSessionStore(os.path.join(tmp, "s.db"))
                self.addCleanup(store.close)
                store.append_sync(KEY, entries)
                for rows, chars in ((1, 1 << 20), (5, 1 << 20), (64, 1 << 20), (256, 3000)):
                    policies = (flower.PrunePolicy(), flower.PrunePolicy(trim=True, trim_keep=1, trim_min_chars=1000,
                                                                         spill_dir=os.path.join(tmp, f"sp{rows}")))
                    for policy in policies:
                        want, report = flower.prune(entries, policy)
                        with self.subTest(name, rows=rows, chars=chars, trim=policy.trim), \
                                unittest.mock.patch.object(flower, "BATCH_ROWS", rows), \
                                unittest.mock.patch.object(flower, "BATCH_CHARS", chars):
                            wrapped = PruningSessionStore(store, policy=policy)
                            for load in range(2):   # a trim-on load notes cut facts; the next reads rows cut
                                with unittest.mock.patch.object(SqliteSessionStore, "_read_cut", wraps=real_cut) as cut:
                                    self.assertEqual(json.dumps(asyncio.run(wrapped.load(KEY))), json.dumps(want))
                                self.assertEqual(wrapped.last_report.as_dict(), report.as_dict())
                                if policy.trim and load:   # the same rows at every batch size, most trimmed ones
                                    self.assertEqual(reads.setdefault(name, cut.call_count), cut.call_count)
                                    self.assertGreater(cut.call_count, report.trimmed * 0.8)
