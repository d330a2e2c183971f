"""Run the whole suite (or the modules named) and end with one plain line:
``N passed, N failed, N skipped``. Exit 0 only when nothing failed and something ran.

    python -m tests.run                      # everything, in parallel worker processes
    python -m tests.run tests.test_e2e       # one module (or module.Class, module.Class.test)
    python -m tests.run -j 1 ...             # one unit after another, in this process
    python -m tests.run --quick              # the pure tier: logic and the fake SDK, under a minute

Every unit (a test module; the classes or tests of a module in ``SPLIT``) runs in a worker process of
its own, up to ``-j`` (``FLOWER_TEST_JOBS``, default 3) at a time, the longest first: most real-tier
time is spent waiting on the CLI and the fake API, not on the CPU. A worker is forked from the runner,
which has imported what every unit imports (``PRELOAD``) once. A unit's output is printed whole
when it ends, so workers never interleave; the failures and errors with their tracebacks are in it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import glob
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import unittest
from typing import Any

from tests import pgserver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Seconds a module (or a unit) took in a full run (3 workers on an idle 2-core machine): the scheduler
# starts the longest first, so that the last to finish is a short one. A module not listed counts as
# short; a split module's units not listed share its cost. Refresh from a full run's "wall ... by unit"
# line when a module's cost changes much: a long unit listed short starts last and ends the run late.
COST = {
    # the long real-tier units
    "tests.test_e2e_driver.OneDriver.test_kill_9_at_random_points_leaves_no_orphan": 92,
    "tests.test_chaos.ChaosOneSeedPostgres": 80, "tests.test_chaos.ChaosOneSeed": 73, "tests.test_pglease": 70,
    "tests.test_inbox": 60, "tests.test_e2e_continuity": 60, "tests.test_e2e_moves": 49,
    "tests.test_inbox_postgres": 45, "tests.test_e2e_postgres": 42, "tests.test_store_contract.PostgresContract": 37,
    "tests.test_store.StoredFacts": 32, "tests.test_delegation_chaos.ChaosDelegatingSeed": 32,
    "tests.test_readme": 30, "tests.test_store_contract.SqliteContract": 29, "tests.test_postgres": 28,
    "tests.test_delegation_unwritten": 24, "tests.test_e2e_delegation": 22, "tests.test_e2e_truth": 24,
    "tests.test_e2e_stall": 22, "tests.test_report": 23, "tests.test_driver": 22, "tests.test_budget": 22,
    "tests.test_stream_ahead": 18, "tests.test_bigload": 18, "tests.test_handoff_asked": 15,
    "tests.test_no_crash": 16, "tests.test_limits": 14, "tests.test_transcript": 15, "tests.test_e2e_economy": 15,
    "tests.test_cli_contract.Validation": 15, "tests.test_handoff": 14, "tests.test_project_settings": 12,
    "tests.test_judge": 12, "tests.test_cli": 11, "tests.test_chinese": 11, "tests.test_damaged_state": 11,
    "tests.test_redaction_rules": 10, "tests.test_e2e_redaction": 9, "tests.test_e2e_redaction_shapes": 9,
    "tests.test_store_locked": 9, "tests.test_pg_insert_before": 9, "tests.test_chinese_paths": 8,
    "tests.test_backend_contract": 8, "tests.test_report_browser": 8, "tests.test_cli_contract.ExitCodes": 7,
    "tests.test_big_outputs": 6,
    # units of the split modules
    "tests.test_e2e.EndToEnd.test_04_outage_mid_turn_waits_and_resumes_without_error_noise": 22,
    "tests.test_e2e.EndToEnd.test_10_wake_sentence_empty_wake_and_new": 19,
    "tests.test_e2e.EndToEnd.test_01_fresh_run_to_achieved_then_resume_in_a_second_process": 12,
    "tests.test_e2e.EndToEnd.test_03_kill_9_before_the_first_reply": 9,
    "tests.test_e2e.EndToEnd.test_03b_kill_9_between_steps": 8,
    "tests.test_e2e_driver.OneDriver.test_kill_after_lineage_names_clarify_redoes_it_with_the_task": 10,
    "tests.test_e2e_driver.OneDriver.test_two_go_at_once_the_second_exits_5_without_a_request": 9,
    "tests.test_e2e_driver.OneDriver.test_kill_after_the_handoff_switch_redoes_the_successor_with_the_carry": 8,
    "tests.test_e2e_driver.Salvage.test_a_kill_while_the_store_is_locked_loses_no_turn": 7,
    "tests.test_delegation_chaos.WorkerTranscriptUnstored": 12, "tests.test_delegation_chaos.WorkerApiErrorLive": 9,
    "tests.test_delegation_chaos.AskedHandoffDuringAWorker": 9,
    "tests.test_e2e": 70, "tests.test_e2e_driver": 6, "tests.test_cli_contract": 24, "tests.test_store": 18,
    "tests.test_delegation_chaos": 6, "tests.test_store_contract": 6, "tests.test_chaos": 4,
    # real-tier modules that were missing (they started among the last; 18-33 s in a loaded full run)
    "tests.test_lineage_caught_up": 14, "tests.test_chaos_gate": 12, "tests.test_state_away_resume": 12,
}
DEFAULT_COST = 5

# Modules run as several units, by "class" or by "test": their tests are independent (no class or
# module fixture shared across the split) and together they would outlast the rest of the suite.
SPLIT = {"tests.test_chaos": "class", "tests.test_e2e": "test", "tests.test_e2e_driver": "test",
         "tests.test_cli_contract": "class", "tests.test_store": "class", "tests.test_delegation_chaos": "class",
         "tests.test_store_contract": "class"}

# The pure tier (``--quick``, ``make quick``): logic and the fake SDK; no real CLI, no PostgreSQL server.
QUICK = ["tests.test_util", "tests.test_resilience", "tests.test_transcript", "tests.test_notes",
         "tests.test_handoff", "tests.test_runtime", "tests.test_workflow", "tests.test_redaction",
         "tests.test_texts", "tests.test_prune_economy", "tests.test_salvage"]


class CountingResult(unittest.TextTestResult):
    """Counts successes itself: how testsRun treats class-level skips differs between Pythons."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = 0

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1


def run_here(names: list[str], stream=None) -> dict:
    """Run the named tests in this process; the tally as a dict."""
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.loadTestsFromName(name) for name in names)
    verbosity = 2 if os.environ.get("VERBOSE") else 1
    runner = unittest.TextTestRunner(stream=stream or sys.stderr, verbosity=verbosity, buffer=False,
                                     resultclass=CountingResult)
    result = runner.run(suite)
    return {"passed": result.passed,
            "failed": len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses),
            "skipped": len(result.skipped),
            "reasons": sorted({reason for _, reason in result.skipped})}


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of the children it waited for (flower, its CLI,
    servers): on a 2-core machine the suite's wall time is at least the sum of these over 2."""
    import resource
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def compile_once() -> None:
    """Byte-compile flower.py and tests/ into their ``__pycache__`` (git ignores it): every worker and
    many of their children import them, and with PYTHONDONTWRITEBYTECODE set (as here and in CI) each
    compiled the 450 KB of flower.py again (~0.25 s CPU). A stale cache is never used: Python checks
    the source's size and time."""
    import compileall
    compileall.compile_file(os.path.join(ROOT, "flower.py"), quiet=2)
    compileall.compile_dir(os.path.join(ROOT, "tests"), maxlevels=0, quiet=2)


# What the workers import, imported once by the runner before it forks them: flower and the shared
# scaffolding are ~0.4 s of CPU a process, the SDK over 1 s more (its MCP models) wherever a unit touches
# it (a SQLite append folds the SDK's session summary), and a run has 130-odd workers. The SDK is
# imported as a unit would import it; a unit that must not have it (``NO_SDK``) runs flower in a
# process of its own, as before.
PRELOAD = ("flower", "tests.helpers", "claude_agent_sdk")


def preload() -> None:
    """Import ``PRELOAD`` here, where the workers will be forked; what is not installed is skipped."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


class Forked:
    """A forked worker, as much of ``subprocess.Popen`` as the runner uses."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_worker(result: str, unit: str, output: Any) -> Forked:
    """Run ``unit`` in a child forked from here, its output to ``output``, its tally to ``result``."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return Forked(pid)
    code = 1
    try:   # the child: it never returns into the runner's loop
        atexit._clear()   # the runner's exit handlers are the runner's; the child runs its own (see below)
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.environ["PYTHONUNBUFFERED"] = "1"
        signal.signal(signal.SIGINT, signal.default_int_handler)
        code = main(["--worker", result, unit])
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):   # as a fresh interpreter's exit would: a module's PostgreSQL
            atexit._run_exitfuncs()             # server registered its close there (os._exit skips them)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def all_modules() -> list[str]:
    """Every ``tests/test_*.py``, as module names."""
    paths = glob.glob(os.path.join(ROOT, "tests", "test_*.py"))
    return sorted("tests." + os.path.basename(path)[:-3] for path in paths)


def tests_in(suite) -> list[unittest.TestCase]:
    """The test cases of a (nested) suite, in order."""
    found = []
    for item in suite:
        found.extend(tests_in(item) if isinstance(item, unittest.TestSuite) else [item])
    return found


def units_of(module: str) -> list[tuple[str, float]]:
    """``(unit, cost)``: the module itself, or a module in ``SPLIT`` class by class or test by test."""
    how = SPLIT.get(module)
    units = []
    if how:
        for test in tests_in(unittest.TestLoader().loadTestsFromName(module)):
            name = f"{type(test).__module__}.{type(test).__qualname__}"
            name = f"{name}.{test._testMethodName}" if how == "test" else name
            if name not in units and name.startswith(module + "."):
                units.append(name)
    units = units or [module]
    share = COST.get(module, DEFAULT_COST) / len(units)
    return [(unit, COST.get(unit, share)) for unit in units]


def schedule(units: list[tuple[str, float]]) -> list[str]:
    """Longest first (ties in name order), so that the last to finish is a short one."""
    return [unit for unit, _ in sorted(units, key=lambda uc: (-uc[1], uc[0]))]


@dataclasses.dataclass
class Worker:
    """A process running one unit: its output (stdout and stderr together) in a temp file, its tally
    written to ``result`` as JSON."""

    unit: str
    result: str
    output: Any = None
    proc: subprocess.Popen | None = None
    started: float = 0.0

    def start(self) -> "Worker":
        self.output = tempfile.TemporaryFile(mode="w+", prefix="flower-test-")
        self.started = time.monotonic()
        self.proc = fork_worker(self.result, self.unit, self.output)
        return self

    def stop(self) -> None:
        """Interrupt the unit (its servers stop at exit), killed if it does not end in 10 s."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def finish(self) -> dict:
        """Print the unit's output whole; its tally (a worker that died without one counts as failed)."""
        seconds = time.monotonic() - self.started
        self.output.seek(0)
        text = self.output.read()
        self.output.close()
        try:
            with open(self.result) as fh:
                tally = json.load(fh)
        except (OSError, ValueError):
            tally = {"passed": 0, "failed": 1, "skipped": 0, "reasons": []}
            text += f"\nworker for {self.unit} exited {self.proc.returncode} without a result\n"
        tally["unit"], tally["seconds"] = self.unit, seconds
        head = f"{tally['passed']} passed, {tally['failed']} failed, {tally['skipped']} skipped"
        cpu = f", cpu {tally['cpu']:.1f} s" if "cpu" in tally else ""
        print(f"==== {self.unit} ({seconds:.1f} s{cpu}): {head}\n{text.rstrip()}", flush=True)
        return tally


def run_parallel(units: list[str], jobs: int) -> list[dict]:
    """Run ``units`` in up to ``jobs`` worker processes, in order; their tallies as they end."""
    pending, running, tallies = list(units), [], []
    with tempfile.TemporaryDirectory(prefix="flower-test-run-") as scratch:
        try:
            while pending or running:
                while pending and len(running) < jobs:
                    unit = pending.pop(0)
                    running.append(Worker(unit, os.path.join(scratch, unit + ".json")).start())
                time.sleep(0.05)
                for worker in [w for w in running if w.proc.poll() is not None]:
                    running.remove(worker)
                    tallies.append(worker.finish())
        finally:   # Ctrl-C: no worker outlives the run; each is interrupted first, to clean up
            for worker in running:
                worker.stop()
    return tallies


def parse(argv: list[str]) -> tuple[int, bool, list[str]]:
    """``(jobs, quick, names)`` from the command line."""
    jobs, quick, names = int(os.environ.get("FLOWER_TEST_JOBS") or 3), False, []
    args = iter(argv)
    for arg in args:
        if arg == "-j":
            jobs = int(next(args))
        elif arg.startswith("-j"):
            jobs = int(arg[2:])
        elif arg == "--quick":
            quick = True
        else:
            names.append(arg)
    return max(1, jobs), quick, names


def main(argv: list[str]) -> int:
    os.chdir(ROOT)
    sys.path.insert(0, ROOT)
    if argv[:1] == ["--worker"]:   # one unit, its tally written where the parent reads it
        tally = run_here(argv[2:])
        tally["cpu"] = cpu_seconds()
        tally["pg_cpu"] = pgserver.servers_cpu()
        with open(argv[1], "w") as fh:
            json.dump(tally, fh)
        return 0
    jobs, quick, names = parse(argv)
    names = names or (QUICK if quick else all_modules())
    units = schedule([unit for name in names for unit in units_of(name)])
    started = time.monotonic()
    compile_once()
    with tempfile.TemporaryDirectory(prefix="flower-pg-template-") as template:
        os.chmod(template, 0o755)   # initdb runs as the server's own user (tests/pgserver.py)
        os.environ[pgserver.TEMPLATE_ENV] = template   # one initdb for the run: every server copies it
        if jobs == 1 or len(units) == 1:
            tallies = [run_here(units)]
        else:
            preload()
            tallies = run_parallel(units, jobs)
    if len(tallies) > 1:
        print(f"wall {time.monotonic() - started:.1f} s with {jobs} workers; by unit: " + ", ".join(
            f"{t['unit'].removeprefix('tests.')} {t['seconds']:.0f}"
            for t in sorted(tallies, key=lambda t: -t["seconds"])))
        import resource
        runner = resource.getrusage(resource.RUSAGE_SELF)   # its preload: not in any worker's cpu
        runner_cpu = runner.ru_utime + runner.ru_stime
        print(f"cpu {sum(t.get('cpu', 0.0) for t in tallies) + runner_cpu:.0f} s in all (the runner {runner_cpu:.0f}); "
              "by unit: " + ", ".join(
            f"{t['unit'].removeprefix('tests.')} {t.get('cpu', 0.0):.0f}"
            for t in sorted(tallies, key=lambda t: -t.get("cpu", 0.0))))
        servers = sorted((t for t in tallies if t.get("pg_cpu")), key=lambda t: -t["pg_cpu"])
        print(f"postgres cpu {sum(t['pg_cpu'] for t in servers):.0f} s in all (not in the cpu above: the servers "
              "are no children a unit waits for); by unit: " + ", ".join(
                  f"{t['unit'].removeprefix('tests.')} {t['pg_cpu']:.0f}" for t in servers))
    passed, failed, skipped = (sum(t[k] for t in tallies) for k in ("passed", "failed", "skipped"))
    for reason in sorted({reason for t in tallies for reason in t["reasons"]}):
        print(f"skipped: {reason}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
