"""Issue 36 items 2 and 8, real tier: the real SDK and CLI against the fake API, all state in one
PostgreSQL database (tests/pgserver.py). Two machines never drive one workspace (a lease the holder
renews, not only the advisory lock an outage drops); a database settings problem is a setup problem
(exit 3 at once, ``doctor`` says which check fails); a database blip during any step is waited out."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import unittest
import unittest.mock

import flower
from tests.fakeapi import FakeAnthropic, text, tool
from tests.pgserver import HAVE_PG, SKIP as PG_SKIP, password_role
from tests.helpers import RUN_FLOWER, HAVE_SDK, MachinesCase, PgCase, SKIP, freeze_front, role_of, stop_shared_server

tearDownModule = stop_shared_server   # the one server PgCase started for this module


def _readable(path):
    try:
        with open(path, "rb"):
            return True
    except OSError:
        return False


class _Machines(MachinesCase, unittest.TestCase):
    """Many machines on one database, with outages."""

    def outage(self, seconds, done=None):
        """Stop the server now (like a crash), start it again after ``seconds`` (in a thread)."""
        def run():
            self.server.stop("immediate")
            time.sleep(seconds)
            self.server.start()
            if done is not None:
                done.set()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread


class SetupOrOutage(unittest.TestCase):
    """Which failed connections are settings problems (exit 3 at once) and which are outages (waited)."""

    def test_libpq_messages(self):
        head = 'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
        setup = {
            head + 'FATAL:  password authentication failed for user "flower"': "password authentication failed",
            head + 'FATAL:  no pg_hba.conf entry for host "10.0.0.2", user "x", database "y", no encryption':
                "no pg_hba.conf entry",
            head + 'FATAL:  role "nobody" does not exist': 'role "nobody" does not exist',
            head + 'FATAL:  database "nodb" does not exist': 'database "nodb" does not exist',
            head + 'fe_sendauth: no password supplied': "no password supplied",
            'connection is bad: invalid integer value "x" for connection option "port"': "invalid integer value",
            'connection is bad: invalid sslmode value: "bogus"': "invalid sslmode",
        }
        for message, reason in setup.items():
            found = flower.pg_setup_problem(message)
            self.assertIsNotNone(found, message)
            self.assertIn(reason, found)
            self.assertNotIn("FATAL", found)
        outages = [
            head + "Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?",
            head + "FATAL:  the database system is starting up",
            head + "FATAL:  the database system is shutting down",
            head + "FATAL:  sorry, too many clients already",
            'connection failed: could not translate host name "db.example" to address: Name or service not known',
            "consuming input failed: server closed the connection unexpectedly",
            'connection failed: connection to server on socket "/tmp/s/.s.PGSQL.5432" failed: No such file or directory',
        ]
        for message in outages:
            self.assertIsNone(flower.pg_setup_problem(message), message)

    def test_a_password_in_the_message_is_redacted(self):
        found = flower.pg_setup_problem('connection is bad: invalid URI query parameter "x" in '
                                        '"postgresql://u:Sup3r-secret-pw@h/db"')
        self.assertNotIn("Sup3r-secret-pw", found or "")


@unittest.skipUnless(HAVE_PG, PG_SKIP)
class Leases(PgCase):
    def test_a_holder_that_cannot_renew_stops_driving_and_goes_on_when_nobody_took_over(self):
        with unittest.mock.patch.dict(os.environ, FLOWER_LEASE_TTL="3"):
            a, b = self.machine("a"), self.machine("b")
        stopped = threading.Event()
        a.stop_driving = stopped.set
        a.lock("workspace", "workspace w").acquire("work")
        self.server.stop("immediate")
        try:   # five sixths of the lease pass unrenewed: another may take it once the database is back
            self.assertTrue(stopped.wait(60), "the holder kept driving past its lease")
        finally:
            self.server.start()
        self.assertTrue(a.ready())          # nobody took it: A renews it and goes on
        a.check_lease()
        with self.assertRaises(flower.Busy) as caught:
            b.lock("workspace", "workspace w").acquire()
        self.assertIn(f"pid {os.getpid()}", str(caught.exception))

    def test_an_outage_drops_the_advisory_lock_but_not_the_lease(self):
        with unittest.mock.patch.dict(os.environ, FLOWER_LEASE_TTL="30"):
            a, b = self.machine("a"), self.machine("b")
        stopped = threading.Event()
        a.stop_driving = stopped.set
        a.lock("workspace", "workspace w").acquire("work")
        self.server.stop("immediate")
        self.server.start()
        self.assertTrue(a.ready())                  # back: A renews its lease, takes its advisory lock again
        with self.assertRaises(flower.Busy):
            b.lock("workspace", "workspace w").acquire()
        self.server.stop("immediate")
        self.server.start()
        b.ready()                                   # first after this outage: A's advisory lock is gone,
        with self.assertRaises(flower.Busy):        # its lease is not; B waits until A's heartbeat renews it
            b.lock("workspace", "workspace w").acquire()
        self.assertFalse(stopped.is_set())
        a._beat_stop.set()                          # A freezes; the database is away past A's lease
        self.server.stop("immediate")
        self.server.start()
        self.sql("UPDATE flower.leases SET expires_at = now() - interval '1 second'")
        b.ready()
        b.lock("workspace", "workspace w").acquire()   # a lapsed lease is taken
        with self.assertRaises(flower.Busy) as caught:
            a.ready()                               # so A must stop: two never drive one workspace
        self.assertIn(f"pid {os.getpid()}", str(caught.exception))
        self.assertTrue(stopped.wait(10))           # A's driving is stopped
        before = self.sql("SELECT count(*) FROM flower.lineage")
        with self.assertRaises(flower.Busy):
            a.write({"t": "lineage", "ws": "job-1", "data": {"steps": {}}})   # and it writes nothing more
        self.assertEqual(self.sql("SELECT count(*) FROM flower.lineage"), before)
        self.assertFalse(a.spool.exists())


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, PG_SKIP)
class TwoMachines(_Machines):
    def test_a_newcomer_after_an_outage_never_drives_beside_the_live_holder(self):
        back = threading.Event()
        b_done = os.path.join(self.tmp.name, "b-done")
        # A's tool outlives the outage and B's whole run: it ends once B has ended (B refused), or after
        # 14 s (B waits for A to be done)
        wait = (f"import os, time\nend = time.time() + 14\nwhile time.time() < end and not os.path.exists({b_done!r}): "
                f"time.sleep(0.1)\nprint('A-SLEPT')")

        def tool_then_outage(body):   # A's work: a tool that outlives the outage and B's start
            self.outage(5, back)
            return tool("Bash", {"command": f"python3 -c \"{wait}\""}, say="A-RUNS-THE-TOOL")
        self.roles.work = [tool_then_outage, text("finished on A")]
        freeze_front(self.a)   # about the work step: the brief and goal as clarify and goal leave them
        a = self.spawn(self.a)
        self.assertTrue(back.wait(120), "the outage never came")
        time.sleep(0.5)
        b = self.checkout_b()
        second = self.run_flower(b, check=False, timeout=240)
        open(b_done, "w").close()
        out, err = a.communicate(timeout=240)
        self.assertEqual(a.returncode, 0, err[-3000:])          # A kept driving, its lease renewed
        self.assertIn("done", err)
        real_a, real_b = os.path.realpath(self.a), os.path.realpath(b)
        sent = [(when, json.dumps(body)) for when, body in zip(self.api.arrivals, self.api.requests)]
        from_a = [when for when, body in sent if real_a in body]
        from_b = [when for when, body in sent if real_b in body]
        self.assertTrue(from_a)
        if second.returncode == flower.EXIT_BUSY:                # B refused while A lived: not one request
            self.assertEqual(from_b, [], second.stderr)
            self.assertIn("another flower drives workspace", second.stderr)
            self.assertIn(f"pid {a.pid}", second.stderr)
        else:                                                    # or B waited until A was done
            self.assertEqual(second.returncode, 0, second.stderr[-3000:])
            self.assertGreater(min(from_b or [float("inf")]), max(from_a), second.stderr[-3000:])
        self.assertIn("A-SLEPT", json.dumps(self.stored(self.lineage()["steps"]["work"])))
        self.assertEqual(self.sql("SELECT count(*) FROM flower.leases")[0][0], 0)   # both let go


@unittest.skipUnless(HAVE_PG, PG_SKIP)
class SettingsProblems(_Machines):
    """A wrong password, database or option is exit 3 at once with one line, never an hour's wait."""

    SECRET = "right-Secret-7f3a"

    def setUp(self):
        super().setUp()
        if not hasattr(type(self), "login"):
            type(self).login = password_role(self.server, "flowerpw", self.SECRET)

    def go(self, dsn, *args):
        env = dict(self.env(self.a), FLOWER_MAX_OFFLINE_WAIT="3600")   # today's default: an hour
        return subprocess.run([*RUN_FLOWER, "--state", dsn, *args], cwd=self.a, env=env,
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    def assertSetupLine(self, p, *needles):
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        self.assertEqual(p.returncode, flower.EXIT_SETUP, p.stderr)
        self.assertEqual(len(lines), 1, p.stderr)
        for needle in needles:
            self.assertIn(needle, lines[0])
        self.assertNotIn("Traceback", p.stderr)
        self.assertEqual(self.api.requests, [])                     # nothing was paid for
        return lines[0]

    def test_the_right_login_works(self):   # the role is real: what the others refuse is only their mistake
        import psycopg
        with psycopg.connect(self.login) as conn:
            self.assertEqual(conn.execute("SELECT 1").fetchone()[0], 1)

    def test_a_wrong_password_is_exit_3_at_once_without_the_password(self):
        wrong = "wrong-Secret-9c1d"
        line = self.assertSetupLine(self.go(self.login.replace(self.SECRET, wrong), "write hello"),
                                    "password authentication failed", "flowerpw")
        self.assertNotIn(wrong, line)
        self.assertNotIn(self.SECRET, line)

    def test_a_database_that_does_not_exist_is_exit_3(self):
        self.assertSetupLine(self.go(self.login.replace("/postgres", "/no_such_db"), "write hello"),
                             'database "no_such_db" does not exist')

    def test_malformed_connection_strings_are_exit_3(self):
        port = self.server.port
        self.assertSetupLine(self.go(f"postgresql://flowerpw:{self.SECRET}@127.0.0.1:{port}/postgres?sslmode=bogus",
                                     "write hello"), "sslmode")
        self.assertSetupLine(self.go(f"postgresql://flowerpw:{self.SECRET}@127.0.0.1:{port}/postgres?nosuch=1",
                                     "write hello"), "not a valid postgresql:// connection string")

    def doctor(self, dsn):
        p = subprocess.run([*RUN_FLOWER, "doctor", "--state", dsn], cwd=self.a, env=self.env(self.a),
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        self.assertNotIn("Traceback", p.stderr)
        return p

    def test_doctor_checks_psycopg_reach_login_and_schema(self):
        import psycopg
        fresh = self.dsn.split("?")[0].rsplit("/", 1)[1]
        login = self.login.replace("/postgres", "/" + fresh)   # this test's own, empty database
        p = self.doctor(login)
        self.assertIn(f"OK   psycopg {psycopg.__version__}", p.stdout)
        self.assertIn(f"OK   state database 127.0.0.1:{self.server.port} reachable", p.stdout)
        self.assertIn(f"OK   login to postgresql://flowerpw@127.0.0.1:{self.server.port}/{fresh}", p.stdout)
        self.assertIn("OK   no flower schema yet", p.stdout)
        self.assertNotIn(self.SECRET, p.stdout + p.stderr)

        paths = flower.Paths(self.a, os.path.join(self.tmp.name, "doctor-runs"))
        paths.prepare()
        state = flower.PostgresState(paths, login, "doctor-ws")
        self.assertTrue(state.ready())   # creates the schema
        state.close()
        p = self.doctor(login)
        self.assertIn(f"OK   flower schema version {flower.PG_SCHEMA_VERSION}", p.stdout)

        p = self.doctor(login.replace(self.SECRET, "wrong-Secret-9c1d"))
        self.assertEqual(p.returncode, flower.EXIT_SETUP, p.stdout)
        failed = [ln for ln in p.stdout.splitlines() if ln.startswith("FAIL")]
        self.assertEqual(len([ln for ln in failed if "password authentication failed" in ln]), 1, p.stdout)
        self.assertNotIn("wrong-Secret-9c1d", p.stdout)
        self.assertNotIn("OK   login", p.stdout)

        import socket
        with socket.socket() as sock:   # a port nobody listens on: the reach fails, login is not tried
            sock.bind(("127.0.0.1", 0))
            free = sock.getsockname()[1]
        p = self.doctor(f"postgresql://flowerpw:x@127.0.0.1:{free}/postgres")
        self.assertIn(f"FAIL state database 127.0.0.1:{free} connection refused", p.stdout)
        self.assertNotIn("login to", p.stdout)


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, PG_SKIP)
class DatabaseBlips(_Machines):
    def test_a_holder_past_its_lease_in_an_outage_stops_its_cli_then_goes_on_in_the_same_session(self):
        back = threading.Event()

        def tool_running():
            return any(b"NEVER-MARK" in open(f"/proc/{pid}/cmdline", "rb").read()
                       for pid in os.listdir("/proc") if pid.isdigit() and _readable(f"/proc/{pid}/cmdline"))

        def outage_until_the_tool_is_stopped():   # the database stays away until the holder stopped its CLI
            self.server.stop("immediate")
            try:
                self.wait_for(tool_running, timeout=60, what="the tool running")
                self.wait_for(lambda: not tool_running(), timeout=90, what="the tool stopped")
            finally:
                self.server.start()
                back.set()

        def tool_then_outage(body):
            threading.Thread(target=outage_until_the_tool_is_stopped, daemon=True).start()
            return tool("Bash", {"command": "python3 -c \"import time; time.sleep(40); print('NEVER-MARK')\""},
                        say="LAPSE-MARK")
        self.roles.work = [tool_then_outage, text("finished after the lapse")]
        env = dict(self.env(self.a), FLOWER_LEASE_TTL="6")
        freeze_front(self.a)   # about the work step: the brief and goal as clarify and goal leave them
        p = subprocess.run([*RUN_FLOWER, "--state", self.dsn], cwd=self.a, env=env,
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        self.assertTrue(back.wait(60))
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn(flower.text("info_lease_lapsed", seconds=5), p.stderr)
        work = self.lineage()["steps"]["work"]
        stored = json.dumps(self.stored(work))
        self.assertIn("LAPSE-MARK", stored)            # the same session went on after the outage
        self.assertIn("finished after the lapse", stored)
        self.assertFalse("NEVER-MARK" in stored.replace("print('NEVER-MARK')", ""), "the tool ran to its end")
        resumed = self.roles.bodies("work")[-1]
        self.assertIn("LAPSE-MARK", FakeAnthropic.messages_text(resumed))

    def test_a_blip_while_the_goal_steps_cli_runs_is_waited_out(self):
        original = self.roles.__call__
        back = threading.Event()
        state = {}

        def goal_during_outage(body):
            if role_of(body) == "goal" and "down" not in state:
                state["down"] = time.time()
                self.outage(5, back)
                time.sleep(1)   # the goal step's CLI has its answer while the database is still away
            return original(body)
        self.api.responder = goal_during_outage
        p = self.run_flower(self.a, "write hello", check=False, timeout=300)
        self.assertIn("down", state)
        self.assertTrue(back.wait(60))
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn("done", p.stderr)
        self.assertTrue(self.lineage()["steps"].get("work"))
        self.assertIn("waiting for it", p.stderr)   # README: one line, then the wait


if __name__ == "__main__":
    unittest.main()
