"""A fake model that trusts its transcript (issue 36), for tests/fakeapi.py's ``responder``.

A real model believes the conversation it is sent: a step whose tool result says it was rejected, not
produced or interrupted (or that has no result at all) is a step still to do. This model does the same.
The job is ``steps`` numbered steps; step k is *done* only when the conversation holds a tool_use for
step k followed by a tool_result for it that reads as a success, or when a handoff document carried
into a successor's first message lists k as done (the model's own ledger, or a degraded one's "ran:"
pointer for the step's command) -- unless a judge's verdict after that says the step is missing. Otherwise the model (re)issues the
smallest step not done, as "text, then tool_use" in one answer.

The tool is a Bash command with a non-idempotent side effect: it appends ``step k <time> <pid> <tool id>``
to ``steps.log`` in the working directory, so a step done twice is a line written twice, and each line
names the tool call that wrote it.

Pure functions over request bodies; no I/O but :func:`read_step_log`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STEP_LOG = "steps.log"
DONE_MARK = "DONE-STEPS:"
MISSING_MARK = "steps missing from steps.log:"   # the judge's words (bench/chaos.py): those are not done
_STEP_CMD = re.compile(r"echo \"step (\d+) ")
_DONE_LIST = re.compile(re.escape(DONE_MARK) + r" *([0-9,\- ]*)")
_MISSING_LIST = re.compile(re.escape(MISSING_MARK) + r" *([0-9,\- ]*)")
_RAN = re.compile(r"ran: `echo \"step (\d+) ")   # a degraded handoff's "- ran: `command`" pointer
_LOG_LINE = re.compile(r"step (\d+) (\S+) (\S+) (\S+)")

# How a tool result reads (to a model that believes it). Order matters: the first pattern that matches.
OK, KILLED_SAID, NOT_PRODUCED, REJECTED, INTERRUPTED, DISK_FULL, ERROR, NO_RESULT = (
    "ok", "killed-said", "not-produced", "rejected", "interrupted", "disk-full", "error", "no-result")
_READINGS = [
    (KILLED_SAID, re.compile(r"stopped when the run was killed|may have partly run|check before doing it again", re.I)),
    (NOT_PRODUCED, re.compile(r"not produced|未产生")),
    (REJECTED, re.compile(r"rejected|doesn't want to proceed|does not want to proceed", re.I)),
    (INTERRUPTED, re.compile(r"interrupted", re.I)),
    (DISK_FULL, re.compile(r"Disk full|No space left|ENOSPC", re.I)),   # the CLI's own word on its output
    (OK, re.compile(r"\bexpired\b.*re-run if needed|tool result archived", re.I)),   # flower's prune: it ran
]


def step_command(k: int, tool_id: str, seconds: float = 0.0) -> str:
    """The Bash command of step ``k`` (its line names the tool call that wrote it); ``seconds`` > 0: the
    command goes on that long after its side effect (a kill can land between the two)."""
    wait = f" && sleep {seconds:g}" if seconds > 0 else ""
    return f'echo "step {k} $(date +%s.%N) $$ {tool_id}" >> {STEP_LOG}{wait} && echo "wrote step {k}"'



def step_of_input(tool_input: object) -> int | None:
    """The step a Bash tool_use input is for (None: not one of ours)."""
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    m = _STEP_CMD.search(command or "")
    return int(m.group(1)) if m else None


def block_text(block: dict) -> str:
    """The text of a tool_result block (its content string or text parts)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def read_result(block: dict) -> str:
    """How a trusting model reads one tool_result block: OK or why the step is not done."""
    said = block_text(block)
    for reading, rx in _READINGS:
        if rx.search(said):
            return reading
    return ERROR if block.get("is_error") else OK


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


@dataclass
class Call:
    """One tool_use of a step in a conversation, with how its result reads there."""

    tool_id: str
    step: int
    reading: str = NO_RESULT


def calls_in(messages: list[dict]) -> dict[str, Call]:
    """tool id -> Call for every step tool_use of the conversation, each with its result's reading
    (NO_RESULT when no tool_result for it follows)."""
    calls: dict[str, Call] = {}
    for message in messages:
        for block in _blocks(message):
            if block.get("type") == "tool_use" and message.get("role") == "assistant":
                step = step_of_input(block.get("input"))
                if step is not None:
                    calls[block.get("id", "")] = Call(block.get("id", ""), step)
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in calls:
                calls[block["tool_use_id"]].reading = read_result(block)
    return calls


def parse_steps(listed: str) -> set[int]:
    """'1-3,5' -> {1, 2, 3, 5}."""
    found: set[int] = set()
    for part in listed.replace(" ", "").split(","):
        if "-" in part:
            lo, _, hi = part.partition("-")
            if lo.isdigit() and hi.isdigit():
                found.update(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            found.add(int(part))
    return found


def format_steps(done: set[int]) -> str:
    """{1, 2, 3, 5} -> '1-3,5' (empty: 'none')."""
    runs: list[list[int]] = []
    for k in sorted(done):
        if runs and k == runs[-1][1] + 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs) or "none"


def user_text(messages: list[dict]) -> str:
    """The text blocks of the user's messages, joined."""
    return "\n".join(b.get("text", "") for m in messages if m.get("role") == "user"
                     for b in _blocks(m) if b.get("type") == "text")


def _said_in(text: str) -> tuple[set[int], set[int]]:
    """(steps a user text says are done, steps it says are missing)."""
    done: set[int] = set()
    for m in _DONE_LIST.finditer(text):
        done |= parse_steps(m.group(1))
    done |= {int(m.group(1)) for m in _RAN.finditer(text)}
    missing: set[int] = set()
    for m in _MISSING_LIST.finditer(text):
        missing |= parse_steps(m.group(1))
    return done, missing


def carried_done(messages: list[dict]) -> set[int]:
    """Steps a handoff document in the user's messages lists as done (a successor trusts it)."""
    done: set[int] = set()
    for message in messages:
        if message.get("role") == "user":
            done |= _said_in(user_text([message]))[0]
    return done


def done_steps(messages: list[dict]) -> set[int]:
    """Every step the conversation shows as done, reading it in order: a step call whose result reads
    OK, a carried handoff's list; a judge's "missing" undoes what came before it."""
    calls = calls_in(messages)
    done: set[int] = set()
    for message in messages:
        for block in _blocks(message):
            kind = block.get("type")
            if kind == "text" and message.get("role") == "user":
                said, missing = _said_in(block.get("text", ""))
                done = (done | said) - missing
            elif kind == "tool_result" and block.get("tool_use_id") in calls:
                call = calls[block["tool_use_id"]]
                if read_result(block) == OK:
                    done.add(call.step)
    return done


def next_step(messages: list[dict], steps: int) -> int | None:
    """The smallest step the conversation does not show as done (None: all done)."""
    done = done_steps(messages)
    return next((k for k in range(1, steps + 1) if k not in done), None)


def work_blocks(messages: list[dict], steps: int, tool_id: str, seconds: float = 0.0) -> tuple[list, int | None]:
    """The answer to a work request, as fakeapi.Reply blocks: text then a Bash tool_use for the next step
    not done, or a final text; and that step (None for the final text)."""
    k = next_step(messages, steps)
    if k is None:
        return [("text", f"All {steps} steps are done.")], None
    return [("text", f"Step {k} is not done yet; doing it now."),
            ("tool_use", "Bash", {"command": step_command(k, tool_id, seconds), "description": f"step {k}"}, tool_id)], k


def ledger_status(messages: list[dict]) -> str:
    """The Status line of the handoff document this model writes: the steps its conversation shows done."""
    return f"{DONE_MARK} {format_steps(done_steps(messages))}"


@dataclass
class LogLine:
    """One line of steps.log."""

    step: int
    t: float
    pid: str
    tool_id: str


def read_step_log(path: str) -> list[LogLine]:
    """The lines of a steps.log (malformed lines skipped)."""
    lines = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                m = _LOG_LINE.match(raw.strip())
                if m:
                    try:
                        t = float(m.group(2))
                    except ValueError:
                        t = 0.0
                    lines.append(LogLine(int(m.group(1)), t, m.group(3), m.group(4)))
    except OSError:
        pass
    return lines


def results_in(messages: list[dict]) -> list[tuple[str, str, str]]:
    """(tool id, reading, text) of every tool_result block of a conversation."""
    out = []
    for message in messages:
        for block in _blocks(message):
            if block.get("type") == "tool_result":
                out.append((block.get("tool_use_id", ""), read_result(block), block_text(block)[:200]))
    return out

