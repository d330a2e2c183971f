"""The lock line names the holder's own host and workspace path (issue 40, item 5): a second ``go``
refused with exit 5, and ``status`` while a flower drives, for the local lock and for PostgreSQL."""

import os
import socket
import subprocess
import sys
import tempfile
import unittest

import flower
from tests.helpers import NO_SDK, ROOT, PgCase, base_env
from tests.pgserver import HAVE_PG, SKIP as PG_SKIP

LOCAL_HOLDER = ("import sys, time, flower\n"
                "paths = flower.Paths(sys.argv[1]); paths.prepare()\n"
                "flower.LocalState(paths).lock('workspace', 'workspace w').acquire('work')\n"
                "print('held', flush=True); time.sleep(600)\n")

PG_HOLDER = ("import sys, time, flower\n"
             "paths = flower.Paths(sys.argv[1], sys.argv[1] + '/runs'); paths.prepare()\n"
             "state = flower.PostgresState(paths, sys.argv[2], 'job-1')\n"
             "state.lock('workspace', 'workspace w').acquire('work')\n"
             "print('held', flush=True); time.sleep(600)\n")


def start_holder(case, script, *args):
    """A separate process that holds the workspace lock; killed at cleanup."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=ROOT))
    case.addCleanup(lambda: (proc.kill(), proc.wait(), proc.stdout.close()))
    case.assertEqual(proc.stdout.readline().strip(), "held")
    return proc


class LocalLockLine(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.ws = os.path.realpath(os.path.join(self.tmp.name, "ws"))
        os.makedirs(self.ws)
        self.env = base_env(os.path.join(self.tmp.name, "home"))

    def cli(self, *args):
        return subprocess.run([sys.executable, "-c", NO_SDK, *args], cwd=self.ws, env=self.env, text=True,
                              capture_output=True, timeout=60, stdin=subprocess.DEVNULL)

    def test_refused_go_names_the_holders_host_and_path(self):
        holder = start_holder(self, LOCAL_HOLDER, self.ws)
        p = self.cli("go", "x")
        self.assertEqual(p.returncode, flower.EXIT_BUSY, p.stderr)
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("flower:")]
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn(f"pid {holder.pid} on {socket.gethostname()} in {self.ws},", lines[0])
        self.assertIn("step work", lines[0])

    def test_the_record_and_the_driver_carry_the_path(self):
        holder = start_holder(self, LOCAL_HOLDER, self.ws)
        backend = flower.LocalState(flower.Paths(self.ws))
        driver = backend.driver()
        self.assertEqual((driver["pid"], driver["host"], driver["path"]),
                         (holder.pid, socket.gethostname(), self.ws))
        data = {"wake": {"waking": False}, "driver": driver}
        line = dict(flower._driver_pairs(data, "en"))["st_driver"]
        self.assertIn(f"pid {holder.pid} on {socket.gethostname()} in {self.ws},", line)
        self.assertIn(self.ws, dict(flower._driver_pairs(data, "zh"))["st_driver"])

    def test_a_record_without_a_path_still_reads(self):
        lock = flower.DriverLock(os.path.join(self.ws, "x.lock"), "workspace w")
        line = lock.busy_line({"pid": 7, "host": "h", "since": "s"})
        self.assertIn("pid 7 on h, since s", line)
        data = {"wake": {"waking": False}, "driver": {"pid": 7, "host": "h", "since": "s"}}
        self.assertIn("pid 7 on h, since s", dict(flower._driver_pairs(data, "en"))["st_driver"])


@unittest.skipUnless(HAVE_PG, PG_SKIP)
class PgLockLine(PgCase):
    def test_refusal_and_driver_name_the_holders_own_path(self):
        a = self.machine("a")
        holder = start_holder(self, PG_HOLDER, a.paths.workspace, self.dsn)
        b = self.machine("b")
        self.assertNotEqual(a.paths.workspace, b.paths.workspace)
        with self.assertRaises(flower.Busy) as caught:
            b.lock("workspace", "workspace w").acquire()
        self.assertIn(f"pid {holder.pid} on {socket.gethostname()} in {a.paths.workspace},",
                      str(caught.exception))
        driver = b.driver()
        self.assertEqual((driver["pid"], driver["path"]), (holder.pid, a.paths.workspace))
        line = dict(flower._driver_pairs({"wake": {"waking": False}, "driver": driver}, "en"))["st_driver"]
        self.assertIn(f"in {a.paths.workspace},", line)


if __name__ == "__main__":
    unittest.main()
