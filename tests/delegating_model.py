"""A fake coordinator and its workers that trust their transcripts (issue 39's chaos mode), for
bench/chaos.py ``--delegate``: the job of tests/trusting_model.py (steps that append a line to
``steps.log``), done the way a delegating model does it.

The coordinator never runs a step itself. It reads its own conversation: a worker's report (the Agent
call's result) lists the steps it did (``DONE-STEPS:``); a handoff document carried into its first
message does too; a judge's "missing" undoes. For the smallest step not shown done it delegates a batch
of up to ``batch`` steps with one Agent call (text, then the tool_use), naming the steps
(``WORKER-STEPS:``) and the call's own id. A result that says the worker was stopped (flower's neutral
result after a kill) makes it look at the disk first, with a read-only glance (``grep`` of steps.log):
the steps the glance shows are done. Any other result that is not a report (rejected, not produced,
interrupted, an error, none) leaves the batch not done: the coordinator delegates it again, so a false
result is a line written twice.

A worker believes its own conversation like the trusting model: it runs the smallest step of its batch
that its conversation does not show done (tests/trusting_model.py's readings), and reports the steps it
did when none is left.

Pure functions over request bodies.
"""

from __future__ import annotations

import re

from tests import trusting_model as tm

BATCH_MARK = "WORKER-STEPS:"
CALL_MARK = "agent-call "          # the Agent call's own id, in its prompt: the worker's requests name it
CHECK_MARK = "CHECK-DISK-FIRST"    # a handoff document's note: a worker was stopped, the disk not looked at
GLANCE = 'grep -o "^step [0-9]*" ' + tm.STEP_LOG + " || true"
WORKER_STOPPED, GLANCED = "worker-stopped", "glanced"
_BATCH = re.compile(re.escape(BATCH_MARK) + r" *([0-9,\- ]*)")
_CALL = re.compile(re.escape(CALL_MARK) + r"(\w+)")
_GLANCED_STEP = re.compile(r"^step (\d+)$", re.M)
# flower's neutral result for a stopped worker, in English and Chinese
# a degraded handoff document's line for a call with no report
_NO_REPORT = re.compile(r"\(no report[^\n]*check the disk")
# flower's neutral results for a worker stopped by a kill or by an API error, in English and Chinese
_STOPPED = re.compile(r"worker was stopped before it reported|worker stopped on an API error|"
                      r"工作者在汇报之前被停下|工作者在汇报之前因 API 错误停下")
AGENT_TOOLS = ("Agent", "Task")


def batch_of(text: str) -> set[int]:
    """The steps a worker's task names."""
    found: set[int] = set()
    for m in _BATCH.finditer(text):
        found |= tm.parse_steps(m.group(1))
    return found


def call_of(text: str) -> str | None:
    """The Agent call id a worker's task names (None: not one of ours)."""
    m = _CALL.search(text)
    return m.group(1) if m else None


def read_report(block: dict) -> str:
    """How the coordinator reads an Agent call's result: OK (a report), WORKER_STOPPED, or the trusting
    model's reading of why it is not done."""
    said = tm.block_text(block)
    if _STOPPED.search(said):
        return WORKER_STOPPED
    if tm.DONE_MARK in said:
        return tm.OK
    reading = tm.read_result(block)
    return tm.ERROR if reading == tm.OK else reading   # a result that is no report is no proof


def _is_glance(tool_input: object) -> bool:
    return isinstance(tool_input, dict) and tool_input.get("command") == GLANCE


def coordinator_view(messages: list[dict]) -> tuple[set[int], bool, dict[str, tuple[set[int], str]]]:
    """What the coordinator's conversation shows: (steps done, whether it must glance at the disk first,
    Agent call id -> (its batch, how its result reads)). Read in order: a glance clears the need, a
    stopped worker, a carried CHECK_MARK and a carried call with no report set it; a judge's "missing" undoes what came before."""
    done: set[int] = set()
    must_glance = False
    calls: dict[str, tuple[set[int], str]] = {}
    glances: set[str] = set()
    for message in messages:
        role = message.get("role")
        for block in tm._blocks(message):
            kind = block.get("type")
            if kind == "text" and role == "system":   # a hook's added context
                must_glance = must_glance or bool(_STOPPED.search(block.get("text", "")))
            elif kind == "text" and role == "user":
                said, missing = tm._said_in(block.get("text", ""))
                done = (done | said) - missing
                said_text = block.get("text", "")
                must_glance = must_glance or CHECK_MARK in said_text or bool(_STOPPED.search(said_text)) \
                    or bool(_NO_REPORT.search(said_text))
            elif kind == "tool_use" and role == "assistant":
                if block.get("name") in AGENT_TOOLS:
                    calls[block.get("id", "")] = (batch_of(str((block.get("input") or {}).get("prompt", ""))),
                                                  tm.NO_RESULT)
                elif _is_glance(block.get("input")):
                    glances.add(block.get("id", ""))
            elif kind == "tool_result" and block.get("tool_use_id") in calls:
                batch, _ = calls[block["tool_use_id"]]
                reading = read_report(block)
                calls[block["tool_use_id"]] = (batch, reading)
                if reading == tm.OK:
                    done |= tm._said_in(tm.block_text(block))[0]
                elif reading == WORKER_STOPPED:
                    must_glance = True
            elif kind == "tool_result" and block.get("tool_use_id") in glances:
                if tm.read_result(block) == tm.OK and not block.get("is_error"):
                    done |= {int(k) for k in _GLANCED_STEP.findall(tm.block_text(block))}
                    must_glance = False
    return done, must_glance, calls


def coordinator_blocks(messages: list[dict], steps: int, tool_id: str, batch: int = 5) -> tuple[list, set[int]]:
    """The coordinator's answer as fakeapi.Reply blocks, and the steps it delegates ({} for a glance or
    the final text)."""
    done, must_glance, _ = coordinator_view(messages)
    if must_glance:
        return [("text", "A worker was stopped; checking steps.log first."),
                ("tool_use", "Bash", {"command": GLANCE, "description": "which steps are in steps.log"},
                 tool_id)], set()
    todo = [k for k in range(1, steps + 1) if k not in done]
    if not todo:
        return [("text", f"All {steps} steps are done.")], set()
    mine = set(todo[:batch])
    listed = tm.format_steps(mine)
    prompt = (f"Run steps {listed}, each with its own Bash command, in order. {BATCH_MARK} {listed} "
              f"({CALL_MARK}{tool_id})")
    return [("text", f"Steps {listed} are not done yet; delegating them."),
            ("tool_use", "Agent", {"description": f"steps {listed}", "prompt": prompt, "subagent_type": "worker"},
             tool_id)], mine


def ledger_status(messages: list[dict]) -> str:
    """The Status line of the coordinator's handoff document: the steps its conversation shows done,
    and CHECK_MARK when a stopped worker's work is not looked at yet."""
    done, must_glance, _ = coordinator_view(messages)
    return f"{tm.DONE_MARK} {tm.format_steps(done)}" + (f" ({CHECK_MARK}: a worker was stopped)" if must_glance else "")


def worker_task(messages: list[dict]) -> str:
    """The worker's task: its first user message's text."""
    for message in messages:
        if message.get("role") == "user":
            said = tm.user_text([message])
            if said:
                return said
    return ""


def worker_blocks(messages: list[dict], tool_id: str, seconds: float = 0.0) -> tuple[list, int | None]:
    """A worker's answer: the smallest step of its batch its conversation does not show done (text, then
    the Bash tool_use), or its report; and that step (None for the report)."""
    mine = batch_of(worker_task(messages))
    done = tm.done_steps(messages) & mine
    left = sorted(mine - done)
    if not left:
        return [("text", f"Conclusion: done. {tm.DONE_MARK} {tm.format_steps(done)}. Evidence: steps.log.")], None
    k = left[0]
    return [("text", f"Step {k} is not done yet; doing it now."),
            ("tool_use", "Bash", {"command": tm.step_command(k, tool_id, seconds), "description": f"step {k}"},
             tool_id)], k
