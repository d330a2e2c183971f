"""Damaged state is said, not guessed around (issue 36, item 7), core tier: subprocess runs of the CLI on
the fake SDK (tests/fake_flower.py) over a sessions.db damaged the ways a disk damages it: a row whose
bytes are no longer UTF-8 (integrity_check still says ok), a row that is no longer JSON, and a page
SQLite itself calls malformed. A resume says how many entries it skipped (a line, the --json event, the
degraded count), ``doctor`` decodes every row it vouches for, and a malformed file is one line and exit
3, never a retry."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import unittest
import unittest.mock

import flower
from flower import AgentSpec
from tests.fakesdk import FAKE
from tests.helpers import RUN_FLOWER, FakeRuntime, base_env



class Damaged(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.db = os.path.join(self.ws, ".flower", "sessions.db")
        self.env = base_env(self.tmp.name)
        self.env.update(ANTHROPIC_API_KEY="sk-test-not-a-real-key-000", FLOWER_BASE_DELAY="0", FLOWER_MAX_DELAY="0")

    def tearDown(self):
        self.tmp.cleanup()

    def fake(self, *args, **env):
        return subprocess.run([sys.executable, "-m", "tests.fake_flower", *args], cwd=self.ws,
                              env={**self.env, **env}, capture_output=True, timeout=120)

    def flower(self, *args):
        return subprocess.run([*RUN_FLOWER, *args], cwd=self.ws, env=self.env, capture_output=True,
                              timeout=120)

    def first_run(self):
        p = self.fake("write md2html")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.ws, ".flower", "lineage.json")) as fh:
            return json.load(fh)["steps"]["work"]

    def damage_row(self, sid, payload):
        """Replace the first stored row of ``sid`` with ``payload`` (SQL text: raw bytes land as they are)."""
        db = sqlite3.connect(self.db)
        seq = db.execute("SELECT seq FROM entries WHERE skey LIKE ? ORDER BY seq LIMIT 1", (f"%/{sid}",)).fetchone()[0]
        db.execute(f"UPDATE entries SET payload = {payload} WHERE seq=?", (seq,))
        db.commit()
        db.close()

    def damage_table(self, table="entries"):
        """Overwrite the header of ``table``'s root page: SQLite then calls the file malformed."""
        db = sqlite3.connect(self.db)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (table,)).fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
        db.close()
        with open(self.db, "r+b") as fh:
            fh.seek((root - 1) * size)
            fh.write(b"\xff\xff\xff\xff")

    def work_rows(self):
        return [r for r in flower.Manifest.read(os.path.join(self.ws, ".flower")) if r["step"] == "work"]

    # -- rows that are no longer entries --

    def test_a_resume_over_a_row_that_is_not_utf8_skips_it_and_says_so(self):
        sid = self.first_run()
        self.damage_row(sid, "CAST(X'7b2261223a22ff227d' AS TEXT)")   # {"a":"<0xff>"}
        p = self.fake("--json", "more please")
        self.assertEqual(p.returncode, 0, p.stderr)
        err = p.stderr.decode()
        self.assertNotIn("retry", err)
        self.assertIn(flower.text("info_skipped_rows", n=1, sid=sid), err)
        self.assertEqual(self.work_rows()[-1]["attempts"], 1)
        events = [json.loads(line) for line in p.stdout.decode().splitlines() if line.startswith("{")]
        told = [e for e in events if e.get("kind") == "info" and e.get("data", {}).get("skipped")]
        self.assertEqual([(e["data"]["skipped"], e["session_id"]) for e in told], [(1, sid)])
        summary = [e for e in events if e.get("kind") == "summary"][-1]
        self.assertTrue(any(sid in line for line in summary["data"]["degraded"]), summary)

    def test_doctor_decodes_every_row(self):
        sid = self.first_run()
        p = self.flower("doctor")
        self.assertIn(b"none damaged", p.stdout)
        self.damage_row(sid, "CAST(X'7b2261223a22ff227d' AS TEXT)")
        p = self.flower("doctor")
        out = p.stdout.decode()
        self.assertIn(flower.text("dr_integrity", verdict="ok"), out)   # SQLite's own check passes...
        damaged = [line for line in out.splitlines() if "damaged" in line]
        self.assertEqual(len(damaged), 1, out)                          # ...and doctor still finds the row
        self.assertTrue(damaged[0].startswith("FAIL"))
        self.assertIn(f"{sid}: 1", damaged[0])
        self.assertEqual(p.returncode, flower.EXIT_SETUP)
        db = sqlite3.connect(self.db)
        seq = db.execute("SELECT seq FROM entries WHERE skey LIKE ? ORDER BY seq DESC LIMIT 1",
                         (f"%/{sid}",)).fetchone()[0]
        db.execute("UPDATE entries SET payload='[\"not an object\"]' WHERE seq=?", (seq,))
        db.commit()
        db.close()
        p = self.flower("--json", "doctor")
        checks = json.loads(p.stdout)["checks"]
        self.assertIn(f"{sid}: 2", [c["what"] for c in checks if not c["ok"]][-1])

    def test_store_damaged_rows_counts_per_session(self):
        store = flower.SqliteSessionStore(os.path.join(self.tmp.name, "s.db"))
        for sid in ("a", "b"):
            store.append_sync({"project_key": "p", "session_id": sid},
                              [{"type": "user", "uuid": f"{sid}{i}"} for i in range(3)])
        store._db.execute("UPDATE entries SET payload='{' WHERE uuid='b1'")
        store._db.execute("UPDATE entries SET payload=CAST(X'ff' AS TEXT) WHERE uuid='b2'")
        self.assertEqual(store.damaged_rows(), (6, {"b": 2}))
        self.assertEqual([e["uuid"] for e in store.load_sync({"project_key": "p", "session_id": "b"})], ["b0"])
        self.assertEqual(store.skipped["p/b"], 2)
        store.close()

    # -- a file SQLite calls malformed --

    def test_a_malformed_database_is_one_line_and_exit_3_never_retried(self):
        self.first_run()
        self.damage_table()
        p = self.fake("more please")
        err = p.stderr.decode()
        self.assertEqual(p.returncode, flower.EXIT_SETUP, err)
        self.assertNotIn("retry", err)
        self.assertNotIn("unexpected", err)
        lines = [line for line in err.splitlines() if line.startswith("flower:")]
        self.assertEqual(len(lines), 1, err)
        self.assertIn("database disk image is malformed", lines[0])
        self.assertIn("move it aside", lines[0])

    def test_doctor_says_a_malformed_database_without_crashing(self):
        self.first_run()
        self.damage_table()
        p = self.flower("doctor")
        self.assertNotIn(b"unexpected", p.stderr)
        self.assertEqual(p.returncode, flower.EXIT_SETUP)
        self.assertIn(b"FAIL sessions.db integrity", p.stdout)

    def test_a_damage_met_outside_a_turn_is_exit_3(self):
        for error in (sqlite3.DatabaseError("database disk image is malformed"),
                      RuntimeError("SessionStore.load() failed during resume materialization: file is not a database")):
            with self.subTest(error=str(error)):
                with unittest.mock.patch.dict(flower.COMMANDS, {"status": unittest.mock.Mock(side_effect=error)}):
                    self.assertEqual(flower.main(["status"]), flower.EXIT_SETUP)
        self.assertIsNone(flower.store_damage(sqlite3.OperationalError("database is locked")))


class DamagedMidRun(FakeRuntime, unittest.TestCase):
    def test_a_mirror_that_meets_a_malformed_file_ends_the_run_at_once(self):
        import asyncio
        rt = self.runtime()
        FAKE.turns = [[("system", "mirror_error", {"error": "database disk image is malformed"}), ("text", "x", 100)],
                      [("text", "again", 100)]]
        with self.assertRaises(flower.FlowerError) as caught:
            asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work"))
        self.assertEqual(caught.exception.exit_code, flower.EXIT_SETUP)
        self.assertIn("database disk image is malformed", str(caught.exception))
        self.assertEqual(len(FAKE.calls), 1)   # never retried

    def test_a_load_that_meets_a_malformed_file_ends_the_run_at_once(self):
        import asyncio
        rt = self.runtime()
        FAKE.turns = [[("raise", RuntimeError("SessionStore.load() for session x failed during resume "
                                              "materialization: database disk image is malformed"))],
                      [("text", "again", 100)]]
        with self.assertRaises(flower.FlowerError) as caught:
            asyncio.run(rt.run(AgentSpec("work"), "x", lineage_key="work"))
        self.assertEqual(caught.exception.exit_code, flower.EXIT_SETUP)
        self.assertEqual(len(FAKE.calls), 1)


if __name__ == "__main__":
    unittest.main()
