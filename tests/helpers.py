"""What the test modules share: paths, environments and polling; the fixture of each tier (the fake
SDK's runtime factory, the real CLI against the fake API, a PostgreSQL server per module, machines on
one database); and the texts several tiers check. Test modules import from here, never from each other."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import importlib.util
import json
import marshal
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import flower
from flower import Resilience, Runtime
from tests import fakeapi, fakesdk
from tests.fakeapi import FakeAnthropic, Reply, last_user_text, text
from tests.pgserver import PgServer

# -- paths and environments --

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOWER = os.path.join(ROOT, "flower.py")
# flower.py run as __main__ from its bytecode in __pycache__ (tests.run compiles it once): a script run by
# path, as `python flower.py` or runpy.run_path, is compiled afresh each time, ~0.25 s of CPU for 450 KB,
# in every one of the suite's hundreds of flower processes. Same module, argv[0], __file__ and __main__.
_AS_MAIN = ("import importlib.util; _s = importlib.util.spec_from_file_location('__main__', {path!r}); "
            "_m = importlib.util.module_from_spec(_s); sys.modules['__main__'] = _m; _s.loader.exec_module(_m)")
AS_SCRIPT = (f"import sys; sys.argv[0] = {FLOWER!r}; sys.path[0] = {ROOT!r}; " + _AS_MAIN.format(path=FLOWER))
RUN_FLOWER = [sys.executable, "-c", AS_SCRIPT]   # `python flower.py`, without the compile
NO_SDK = ("import sys; sys.modules['claude_agent_sdk'] = None; "
          f"sys.argv = [{FLOWER!r}] + sys.argv[1:]; " + _AS_MAIN.format(path=FLOWER))


DUMMY_SDK = ("import sys, types; sys.modules['claude_agent_sdk'] = types.ModuleType('claude_agent_sdk'); "
             f"sys.argv = [{FLOWER!r}] + sys.argv[1:]; " + _AS_MAIN.format(path=FLOWER))
HAVE_SDK = importlib.util.find_spec("claude_agent_sdk") is not None
SKIP = "claude-agent-sdk not installed: the end-to-end tier runs in CI (.ci/run installs it)"


def read_text(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def load_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def read_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def manifest_rows(run_dir):
    """The manifest's rows as flower reads them (manifest.jsonl, one line per row version)."""
    import flower
    return flower.Manifest.read(run_dir)


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "FLOWER_"))}
    env.update(HOME=home, ANTHROPIC_BASE_URL=f"http://127.0.0.1:{closed_port()}", FLOWER_PROBE_TIMEOUT="1",
               PYTHONPATH=ROOT, NO_COLOR="1")
    return env


def wait_until(predicate, timeout=10.0, interval=0.02):
    """Poll ``predicate`` until it is true or ``timeout`` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def processes_in(directory: str) -> list[int]:
    """Pids of live processes whose working directory is ``directory`` (the CLI and its tools)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.path.realpath(os.readlink(f"/proc/{name}/cwd")) == os.path.realpath(directory):
                with open(f"/proc/{name}/stat") as fh:
                    if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                        found.append(int(name))
        except OSError:
            continue
    return found


def load_chaos():
    """bench/chaos.py as a module."""
    spec = importlib.util.spec_from_file_location("bench_chaos", os.path.join(ROOT, "bench", "chaos.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_chaos"] = module   # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def delegating_chaos(items, *, turns, handoffs, prefix):
    """bench/chaos.py's delegating job (trusting coordinator, real SDK + CLI, fake API) under the fixed
    plan ``items``, each fault at its phase (no delay): yields (the run's result, the plan as fired).
    Its logs are kept when the body fails (an assertion: their path is in the run's result)."""
    chaos = load_chaos()
    settings = chaos.Settings(job=chaos.Job(turns=turns, handoffs=handoffs), timeout=300.0, trusting=True,
                              delegate=True)
    base_dir = tempfile.mkdtemp(prefix=prefix)
    keep = False
    try:
        plan = [dict(item, delay=0.0, restart=1.0) for item in items]
        result = chaos.Chaos(settings, 1, base_dir).run(plan)
        keep = True
        yield result, plan
        keep = False
    finally:
        if not keep:
            shutil.rmtree(base_dir, ignore_errors=True)


def forget_listings():
    """Forget the spill folders' listings flower cached (a test that adds files behind its back)."""
    flower._SPILL_LISTINGS.clear()


def synthetic_job(turns=2000, sessions=10, t0=1_800_000_000.0):
    """Manifest rows, journal records and a goal of a long job, written as flower writes them: clarify and
    goal, then ``work`` over ``sessions`` sessions (a handoff between each) and ``turns`` answers in all,
    in two runs on two machines (the first killed mid-work, the second a wake that rescues), with an
    outage, retries, a degraded handoff, tool calls, a prune on resume and a judge round per run."""
    rows, records, t = [], [], t0

    def iso(moment):
        import datetime
        return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).isoformat(timespec="seconds")

    def add(kind, step="", sid=None, /, **data):
        record = {"k": kind, "t": round(t, 3), "r": run, "s": step, **data}
        if sid:
            record["sid"] = sid
        records.append(record)

    def row(step, start, ok=True, cost=0.0, n=0, error=None, sid=None):
        rows.append({"run": run, "step": step, "session_id": sid, "ok": ok, "cost_usd": round(cost, 6),
                     "num_turns": n, "text": "", "error": error, "started_at": iso(start), "ended_at": iso(t),
                     "attempts": 1, "errors": [], "retired": [], "resumed": False, "context": None, "generations": 0,
                     "duration_s": round(t - start, 3)})

    run = "20270115-080000-aaaaaa"
    add("run", host="ci-runner-1", pid=100)
    for step in ("clarify", "goal"):
        start, sid = t, f"{step}-session"
        add("step", step, None, continues=False, woke=1)
        for level in (8_000, 12_000):
            t += 20
            add("turn", step, sid, lv=level, w=200_000, at=150_000)
        add("cost", step, sid, cost=0.05)
        row(step, start, cost=0.05, n=2, sid=step + "-session")
    per = max(1, turns // sessions)
    start, spent, n = t, 0.0, 0
    add("step", "work", None, continues=False, woke=1)
    for s in range(sessions):
        sid = f"work-session-{s:02d}"
        if s == sessions // 2:   # the first machine is killed; the second wakes and rescues
            add("kill", "work", None, reason="killed-by-signal")
            row("work", start, ok=False, cost=spent, n=n, error="killed-by-signal", sid=sid)
            t += 1800
            run = "20270115-093000-bbbbbb"
            add("run", host="ci-runner-2", pid=200)
            start, spent, n = t, 0.0, 0
            add("step", "work", None, continues=True, woke=2)
            add("resume", "work", sid, reason=None, pruned={"chars_saved": 48_000, "trimmed": 3, "expired": 5})
        for j in range(per):
            t += 30
            level = 20_000 + int(135_000 * j / per)
            tools = ["Bash"] * (j % 3) + (["Read"] if j % 4 == 0 else [])
            add("turn", "work", sid, lv=level, w=200_000, at=150_000, **({"tools": tools} if tools else {}))
            n += 1
            if j == per // 3 and s == 1:
                add("offline", "work", None, host="api.anthropic.com", port=443, waited_s=0)
                t += 240
                add("online", "work", None, host="api.anthropic.com", port=443, waited_s=240)
            if j == per // 2 and s == 2:
                add("retry", "work", sid, attempt=2, kind="transient", delay=8.0)
                t += 8
        spent += 0.4
        add("cost", "work", sid, cost=round(spent, 6))
        if s < sessions - 1:
            t += 15
            add("handoff", "work", f"work-session-{s + 1:02d}", phase="done", context=155_000, window=200_000,
                generation=s + 1, retired=sid, degraded="ritual timed out" if s == 3 else None)
            if s == 3:
                add("degraded", "work", None, message="handoff #4 degraded: ritual timed out")
    row("work", start, cost=spent, n=n, sid=f"work-session-{sessions - 1:02d}")
    judge = t
    t += 40
    add("turn", "work·judge#1", "judge-1", lv=30_000, w=200_000, at=150_000, tools=["Bash"])
    add("verdict", "work·judge#1", None, verdict="achieved", failed=[])
    row("work·judge#1", judge, cost=0.08, n=1, sid="judge-1")
    goal = "# Goal\nThe parser handles every fixture\n\n# Checks\n- `make test` passes\n- README documents it"
    return rows, records, goal


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(cwd, *args):
    """Run git in ``cwd`` with a fixed identity; its output."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          env=dict(os.environ, **GIT_ENV)).stdout


def resume_copies(sid: str) -> list[str]:
    """Every file of the SDK's temp copies of session ``sid`` (a live resume's transcript and config)."""
    found = []
    for owner in ("", "flower-*"):
        pattern = os.path.join(glob.escape(tempfile.gettempdir()), owner, "claude-resume-*", "projects", "*",
                               f"{sid}.jsonl")
        for transcript in glob.glob(pattern):
            root = transcript.split(os.sep + "projects" + os.sep)[0]
            found += [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]
    return sorted(found)


# -- texts several tiers check --

LEDGER_EN = """# Handoff ledger

## Status
Building the parser; tokenizer done.

## Decisions
- stdlib only, because the brief says so

## Dead ends
- regex parser: fails on nested lists

## Next step
Run `python -m pytest tests/test_parser.py` and fix the first failure.

## Pointers
- src/parser.py
"""


SECRETS = [
    "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "sk-proj-AbCdEfGhIjKlMnOpQrSt1234",
    "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "github_pat_11AAAAAAA0123456789abcdefghijk",
    "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "AKIAIOSFODNN7EXAMPLE",
    "xoxb-123456789012-abcdefghijkl",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
]

# the store keeps every entry exactly as the CLI wrote it (SPEC §5): tool output with a secret is
# there as it was; README says so. Everything else flower writes is checked.
RAW_STORE = ("sessions.db", "sessions.db-wal", "sessions.db-shm")


# -- the fake SDK tier --

class FakeRuntime(fakesdk.FakeWorkspace):
    """The fake SDK, a workspace, and Runtime factories that are closed in tearDown."""

    def setUp(self):
        super().setUp()
        self.rts = []
        self.events = []
        self.lines = []
        os.environ.pop("FLOWER_WINDOW", None)

    def tearDown(self):
        for rt in self.rts:
            rt.close()
        super().tearDown()

    def runtime(self, **kw):
        async def sleep(seconds):
            pass
        kw.setdefault("resilience", Resilience(probe=False, base_delay=0, max_attempts=4))
        kw.setdefault("on_event", self.events.append)
        kw.setdefault("notify", self.lines.append)
        rt = Runtime(workspace=self.ws, run_dir=self.run_dir, sleep=sleep, **kw)
        self.rts.append(rt)
        return rt

    def infos(self):
        return [e.data["message"] for e in self.events if e.kind == "info" and "message" in e.data] + self.lines

    def lineage(self):
        return read_json(os.path.join(self.run_dir, "lineage.json"))


# -- the real CLI against the fake API --

BRIEF = ("## Goal\nWrite hello.txt\n## Acceptance\nhello.txt says hi\n## Bounds\nonly that file\n"
         "## Unknowns and assumptions\nnone")


GOAL = "# Goal\nhello.txt exists\n\n# Checks\n- hello.txt contains hi"


LEDGER = ("## Status\nhalf done\n## Decisions\nkeep it small\n## Dead ends\n(none)\n"
          "## Next step\nRun `cat hello.txt` and finish NEXT-STEP-MARK\n## Pointers\n- hello.txt")


def system_of(body):
    return json.dumps(body.get("system", ""), ensure_ascii=False)


def role_of(body):
    system = system_of(body)
    if "You clarify" in system:
        return "clarify"
    if "into a goal" in system:
        return "goal"
    if "You judge" in system:
        return "judge"
    asked = last_user_text(body)
    if any(flower.text("handoff_prompt", lang)[:40] in asked for lang in ("en", "zh")):
        return "ritual"
    if "You do the work" in system:
        return "work"
    return "other"


class Roles:
    """A responder: fixed answers for clarify/goal/judge, a queue for work, a log per role."""

    def __init__(self, work=None, judge=None, ritual=None):
        self.work = list(work or [])
        self.judge = list(judge or [])
        self.ritual = list(ritual or [])
        self.log: list[tuple[str, dict]] = []
        self.lock = threading.Lock()

    def __call__(self, body):
        role = role_of(body)
        with self.lock:
            self.log.append((role, body))
            if role == "clarify":
                return text(BRIEF)
            if role == "goal":
                return text(GOAL)
            if role == "judge":
                return self.judge.pop(0) if self.judge else text("VERDICT: achieved")
            if role == "ritual":
                return self.ritual.pop(0) if self.ritual else text(LEDGER)
            if role == "work":
                item = self.work.pop(0) if self.work else text("done")
                return item(body) if callable(item) else item
            return text("ok")

    def bodies(self, role):
        return [b for r, b in self.log if r == role]


class E2ECase:
    """The real tier's fixture (mixed into a ``unittest.TestCase``): a workspace, a HOME, the fake API
    with a ``Roles`` responder, and helpers to run flower and read what it left."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.api = FakeAnthropic().start()
        self.roles = Roles()
        self.api.responder = self.roles
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "FLOWER_"))}
        self.env.update(fakeapi.cli_env(self.api, self.tmp.name))
        self.env.update(FLOWER_PROBE_INTERVAL="0.5", FLOWER_BASE_DELAY="0.2", FLOWER_MAX_DELAY="1",
                        FLOWER_MAX_OFFLINE_WAIT="120", NO_COLOR="1", PYTHONPATH=ROOT,
                        FLOWER_NO_DELEGATE="1")   # these scenarios drive a single worker; see test_e2e_delegation

    def tearDown(self):
        self.api.stop()
        if hasattr(self, "_saved_environ"):  # in-process runs borrowed the CLI environment
            os.environ.clear()
            os.environ.update(self._saved_environ)
        self.tmp.cleanup()

    # -- helpers --

    def flower(self, *args, env=None, timeout=180, check=True):
        p = subprocess.run([*RUN_FLOWER, *args], cwd=self.ws, env=dict(self.env, **(env or {})),
                           capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return p

    def spawn(self, *args, env=None):
        return subprocess.Popen([*RUN_FLOWER, *args], cwd=self.ws, env=dict(self.env, **(env or {})),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)

    def read(self, *parts):
        with open(os.path.join(self.ws, *parts), encoding="utf-8") as fh:
            return fh.read()

    def lineage(self):
        return json.loads(self.read(".flower", "lineage.json"))

    def manifest(self):
        return flower.Manifest.read(os.path.join(self.ws, ".flower"))

    def stored(self, sid):
        db = sqlite3.connect(os.path.join(self.ws, ".flower", "sessions.db"))
        try:
            rows = db.execute("SELECT payload FROM entries WHERE skey LIKE ? ORDER BY seq", (f"%/{sid}",)).fetchall()
            return [json.loads(r[0]) for r in rows]
        finally:
            db.close()

    def wait_for(self, predicate, timeout=300, what="condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        self.fail(f"timed out waiting for {what}")

    def work_row(self):
        return [r for r in self.manifest() if r["step"] == "work"][-1]

    def _outage(self, seconds):
        self.api.stop()
        time.sleep(seconds)
        self.api.restart()

    def _runtime(self, **kw):
        self._saved_environ = dict(os.environ)
        for k, v in self.env.items():
            if k.startswith(("ANTHROPIC_", "CLAUDE_", "DISABLE_", "FLOWER_")) or k in ("HOME", "IS_SANDBOX"):
                os.environ[k] = v
        return flower.Runtime(workspace=self.ws, **kw)

    def resume_steps(self, spec, session_id, **kw):
        """Resume ``session_id`` in this process once more (a ``StepModel`` job: "check the steps once
        more"); the first request the resume sent. ``kw`` goes to :meth:`_runtime`."""
        sent = len(self.api.requests)
        rt = self._runtime(**kw)
        again = asyncio.run(rt.run(spec, "check the steps once more", resume=session_id, lineage_key="work"))
        rt.close()
        self.assertTrue(again.ok, again.error)
        return self.api.requests[sent]


# -- PostgreSQL: one server per test module --

_SERVER: list[PgServer] = []




def mail_ids(body):
    """The mail tags a request carries, in order, each as often as it appears."""
    return re.findall(r"\[mail ([0-9]{19}-[0-9a-f]{8})\]", FakeAnthropic.messages_text(body))


def assert_mail_delivered(case, work, sent):
    """Each mail of ``sent`` (request index -> mail id) is in the request after the one it was sent
    during, once; the last request holds them all in order; every tool of the ten ran to its end."""
    for k, mail_id in sent.items():
        case.assertNotIn(mail_id, mail_ids(work[k]))
        case.assertEqual(mail_ids(work[k + 1]).count(mail_id), 1, k)
    case.assertEqual(mail_ids(work[-1]), [sent[k] for k in sorted(sent)])   # in order, once each
    last = FakeAnthropic.messages_text(work[-1])
    for k in range(10):
        case.assertIn(f"tool-{k}", last)                                    # no tool was interrupted
    return last

def fill(directory: str) -> str:
    """Write into ``directory`` until its file system says it is full; returns the file that fills it."""
    path = os.path.join(directory, f"fill-{len(os.listdir(directory))}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 65536)
    except OSError:
        pass
    try:
        while True:
            os.write(fd, b"x")
    except OSError:
        pass
    finally:
        os.close(fd)
    return path


def mount_small(path: str) -> str | None:
    """A 16 MB tmpfs at ``path`` (made if missing) that a test can :func:`fill`; None when mounted, else
    why not (it needs root). :func:`unmount_small` before the directory holding it is removed."""
    os.makedirs(path, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", path],
                       capture_output=True, text=True)
    return None if p.returncode == 0 else p.stderr.strip()[:200] or f"exit {p.returncode}"


def unmount_small(path: str) -> None:
    if subprocess.run(["umount", path], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", path], capture_output=True)


class SmallHome:
    """A mixin for E2ECase: HOME (where the CLI writes its transcripts) on a 16 MB tmpfs that a test can
    :func:`fill`; skipped where it cannot be mounted (it needs root)."""

    def setUp(self):
        super().setUp()
        self.home = os.path.join(self.tmp.name, "home")
        why = mount_small(self.home)
        if why:
            super().tearDown()
            self.skipTest(f"a small tmpfs for HOME cannot be mounted here (needs root): {why}")
        self.env.update(HOME=self.home, CLAUDE_CONFIG_DIR=os.path.join(self.home, ".claude"))

    def tearDown(self):
        unmount_small(self.home)
        super().tearDown()


class Filling:
    """A mixin: answers of the fake API that fill ``self.small`` (a :func:`mount_small` directory) before
    they are sent, or free it again."""

    filler = None

    def full(self, reply):
        """``reply``, with the small directory filled first: what the receiver writes now fails."""
        def answer(body):
            self.filler = fill(self.small)
            return reply
        return answer

    def freed(self, reply):
        """``reply``, with the small directory freed first."""
        def answer(body):
            if self.filler:
                os.unlink(self.filler)
                self.filler = None
            return reply
        return answer

def shared_server() -> PgServer:
    """The module's one server, started by the first class that needs it (initdb + start take seconds)."""
    if not _SERVER:
        _SERVER.append(PgServer().start())
    return _SERVER[0]


def stop_shared_server() -> None:
    """Stop the module's server (a module's ``tearDownModule``)."""
    while _SERVER:
        _SERVER.pop().close()


class WithPostgres:
    """For a real-tier case (``E2ECase``) that also needs PostgreSQL: the module's one server (see
    :func:`shared_server`; the module's ``tearDownModule`` stops it) and a fresh database per test,
    ``self.dsn``."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.server = shared_server()

    def setUp(self):
        super().setUp()
        if not self.server.running:   # a test that failed during an outage left it down
            self.server.start()
        self.dsn = self.server.database()


class StepModel:
    """A model that trusts its transcript: does ``steps`` numbered steps in order, a step being done
    when a result in the conversation says ``STEP-k-OK``. Each step appends a line to ``steps.log``
    in ``workspace``: a step done twice is a line written twice."""

    def __init__(self, workspace: str, steps: int):
        self.log = os.path.join(workspace, "steps.log")
        self.steps = steps

    def __call__(self, body: dict) -> Reply:
        done = max([0] + [int(k) for k in re.findall(r"STEP-(\d+)-OK", json.dumps(body.get("messages", [])))])
        if done >= self.steps:
            return Reply([("text", f"all {self.steps} steps done")])
        k = done + 1
        return Reply([("text", f"doing step {k}"),
                      ("tool_use", "Bash", {"command": f"echo step-{k} >> {self.log} && echo STEP-{k}-OK"})])

    def lines(self) -> list[str]:
        """The lines the steps wrote, in order."""
        with open(self.log, encoding="utf-8") as fh:
            return [line.strip() for line in fh if line.strip()]


class PgCase(unittest.TestCase):
    """One server per module, one fresh database per test."""

    @classmethod
    def setUpClass(cls):
        cls.server = shared_server()

    def setUp(self):
        if not self.server.running:   # a test that failed during an outage left it down
            self.server.start()
        self.dsn = self.server.database()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.states: list = []

    def tearDown(self):
        for state in self.states:
            state.close()

    def machine(self, name="a", ws_id="job-1", dsn=None):
        """A workspace dir of its own ("machine" ``name``) on the shared database."""
        ws = os.path.join(self.tmp.name, name, "ws")
        os.makedirs(ws, exist_ok=True)
        paths = flower.Paths(ws, os.path.join(ws, "runs"))
        paths.prepare()
        state = flower.PostgresState(paths, dsn or self.dsn, ws_id)
        self.assertTrue(state.ready())
        self.states.append(state)
        return state

    def sql(self, query, *args):
        import psycopg
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(query, args or None)
            return cur.fetchall() if cur.description else None


REMOTE = "git@github.com:acme/hello.git"


class MachinesCase:
    """Many machines on one database (mixed into a ``unittest.TestCase``): the module's server (its
    ``tearDownModule = stop_shared_server``), the fake API, machine A's checkout, machine B's fresh
    copy, flower run with ``--state``."""

    @classmethod
    def setUpClass(cls):
        cls.server = shared_server()

    def setUp(self):
        if not self.server.running:   # a test that failed during an outage left it down
            self.server.start()
        self.tmp = tempfile.TemporaryDirectory()
        self.dsn = self.server.database()
        self.api = FakeAnthropic().start()
        self.roles = Roles()
        self.api.responder = self.roles
        self.a = self.machine("a")
        with open(os.path.join(self.a, "README.md"), "w") as fh:
            fh.write("the repository\n")
        os.makedirs(os.path.join(self.a, ".git"))   # a checkout: the default workspace id is remote#branch
        with open(os.path.join(self.a, ".git", "HEAD"), "w") as fh:
            fh.write("ref: refs/heads/main\n")
        with open(os.path.join(self.a, ".git", "config"), "w") as fh:
            fh.write(f'[remote "origin"]\n\turl = {REMOTE}\n')
        self.procs = []

    def tearDown(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        self.api.stop()
        self.tmp.cleanup()

    # -- machines --

    def machine(self, name):
        ws = os.path.join(self.tmp.name, name, "src", "hello")
        os.makedirs(ws)
        os.makedirs(os.path.join(self.tmp.name, name, "home"))
        return ws

    def checkout_b(self):
        """Machine B: a fresh copy of A's repository at another path (no .flower/, no runs/)."""
        b = os.path.join(self.tmp.name, "b", "checkout", "hello")
        shutil.copytree(self.a, b, ignore=shutil.ignore_patterns(".flower", "runs"))
        os.makedirs(os.path.join(self.tmp.name, "b", "home"), exist_ok=True)
        return b

    def env(self, ws):
        home = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(ws))), "home")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "FLOWER_"))}
        env.update(fakeapi.cli_env(self.api, home))
        env.update(FLOWER_PROBE_INTERVAL="0.5", FLOWER_BASE_DELAY="0.2", FLOWER_MAX_DELAY="1",
                   FLOWER_MAX_OFFLINE_WAIT="120", NO_COLOR="1", PYTHONPATH=ROOT,
                   FLOWER_NO_DELEGATE="1")   # these scenarios drive a single worker
        return env

    def run_flower(self, ws, *args, check=True, timeout=180):
        p = subprocess.run([*RUN_FLOWER, "--state", self.dsn, *args], cwd=ws, env=self.env(ws),
                           capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return p

    def spawn(self, ws, *args):
        proc = subprocess.Popen([*RUN_FLOWER, "--state", self.dsn, *args], cwd=ws, env=self.env(ws),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    # -- the database --

    def sql(self, query, *args):
        import psycopg
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(query, args or None)
            return cur.fetchall() if cur.description else None

    def lineage(self):
        rows = self.sql("SELECT data FROM flower.lineage ORDER BY id DESC LIMIT 1")
        return json.loads(rows[0][0]) if rows else {}

    def stored(self, sid):
        return [json.loads(p) for (p,) in self.sql("SELECT payload FROM flower.entries WHERE sid=%s AND sub='' "
                                                   "ORDER BY id", sid)]

    def wait_for(self, predicate, timeout=300, what="condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if predicate():
                    return
            except Exception:
                pass
            time.sleep(0.1)
        self.fail(f"timed out waiting for {what}")

    def has_block(self, sid, kind, needle=""):
        return any(b.get("type") == kind and needle in json.dumps(b) for e in self.stored(sid)
                   for b in flower.blocks_of(e) if isinstance(b, dict))

    def kill(self, proc):
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)



def freeze_front(ws: str, lang: str = "en", goal: bool = True) -> None:
    """Leave in ``ws`` the brief (and with ``goal`` the goal) that the clarify and goal steps of a fresh
    ``go`` write from ``BRIEF`` and ``GOAL``, rendered as they render them: ``go`` then skips those frozen
    steps (two CLI start-ups) and its work step is sent the same prompt. For a scenario whose assertions
    are all about the work step (and the judge), not about how the brief and goal came to be."""
    paths = flower.Paths(ws, None)
    flower.ensure_private_dir(paths.notes_dir)
    flower.atomic_write(paths.brief, flower.Brief.parse(BRIEF).render(lang))
    if goal:
        flower.atomic_write(paths.goal, flower.Goal.parse(GOAL).render(lang))


# -- comparing what loads and prunes give --

def noted_cut_facts(store) -> dict[tuple[str, int], tuple[str, str]]:
    """(skey, seq) -> (uuid, fact) of every cut fact a SQLite store noted."""
    return {(skey, seq): (uid, fact) for skey, seq, uid, fact in store._db.execute("SELECT * FROM cut_facts")}


def true_cut_facts(store, skey: str) -> dict[tuple[str, int], tuple[str, str]]:
    """(skey, seq) -> (uuid, fact): the cut fact of every row of ``skey`` that can have one, worked out from
    the row as it is now (a row that does not parse has none)."""
    dumps, facts = flower._compact_json(), {}
    for seq, payload in store._db.execute("SELECT seq, payload FROM entries WHERE skey = ?", (skey,)):
        try:
            entry = json.loads(payload)
        except ValueError:
            continue
        fact = flower.cut_fact(entry, payload, dumps) if isinstance(entry, dict) else None
        if fact is not None:
            facts[skey, seq] = (entry["uuid"], fact)
    return facts


def exact(value) -> bytes:
    """A JSON-shaped ``value`` (dicts, lists, strings, numbers, booleans, None) as bytes. Two values give
    the same bytes only if ``json.dumps`` gives them the same text: the same values in the same order,
    each dict's keys in the same order too; and it is stricter (1 is not True, a tuple not a list). A
    quarter to a third of the CPU of ``json.dumps``, which the oracles of the store and prune tests
    spent most of their time in. marshal's version 2 writes no back-references: which objects a value
    shares changes nothing."""
    return marshal.dumps(value, 2)
