"""The suite's runner (tests/run.py) forks a worker per unit and ends it with ``os._exit``: the worker runs
its own exit handlers first, as a fresh interpreter would (a module's PostgreSQL server registers its
close there: skipped, every ``make test`` left one running), and none of the runner's."""

import atexit
import json
import os
import shutil
import sys
import tempfile
import unittest

from tests import run

PROBE = '''import atexit, os, unittest


class Probe(unittest.TestCase):
    def test_registers_an_exit_handler(self):
        atexit.register(lambda: open(os.environ["FLOWER_EXIT_PROBE"] + ".worker", "w").close())
'''


class WorkerExit(unittest.TestCase):
    def test_a_forked_worker_runs_its_own_exit_handlers_and_not_the_runners(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        with open(os.path.join(tmp, "flower_exit_probe.py"), "w") as fh:
            fh.write(PROBE)
        sys.path.insert(0, tmp)
        self.addCleanup(sys.path.remove, tmp)
        mark = os.path.join(tmp, "mark")
        os.environ["FLOWER_EXIT_PROBE"] = mark
        self.addCleanup(os.environ.pop, "FLOWER_EXIT_PROBE", None)

        def runners_own():
            open(mark + ".runner", "w").close()
        atexit.register(runners_own)
        self.addCleanup(atexit.unregister, runners_own)
        result = os.path.join(tmp, "tally.json")
        with open(os.path.join(tmp, "out.log"), "w") as output:
            worker = run.fork_worker(result, "flower_exit_probe", output)
            self.assertEqual(worker.wait(120), 0)
        with open(result) as fh:
            self.assertEqual(json.load(fh)["passed"], 1)
        self.assertTrue(os.path.exists(mark + ".worker"))
        self.assertFalse(os.path.exists(mark + ".runner"))


if __name__ == "__main__":
    unittest.main()
