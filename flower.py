#!/usr/bin/env python3
"""flower.py -- keep a long agent job going with Claude, across kills, outages and full contexts.

Run ``python3 flower.py "build X"`` in a directory. Kill it, reboot, lose the network; run it again
and it carries on where it stopped: the same sessions, no lost work, no error noise in the model's
context.

One file, standard library only at import time.  ``claude_agent_sdk`` is imported lazily, inside the
functions that really run an agent, so ``--help``, ``status``, ``doctor``, the session store, the
prune pipeline, the probe and every pure function work without it.

Sections, low layers first:

    text tables (en/zh) -> utilities -> redaction -> process guard -> resilience -> usage limits
    -> transcript logic (pure) -> stored facts -> notes (pure parsers) -> session stores -> lineage and
    manifest -> handoff -> journal -> state backends (the interface, local files) -> PostgreSQL state
    -> deferred spill -> delegation -> project settings -> job budget -> workspace snapshots -> stream record -> agent
    runtime -> judge sandbox -> workflow -> report -> job continuity -> inbox -> CLI
"""

from __future__ import annotations

# asyncio is imported inside the functions that need it: it costs more than everything else here
# together, and --help, status and the pure logic never touch it. So are the modules below that only
# some paths need (each is a stand-in that imports the module on first use and then replaces itself),
# and typing: annotations are never evaluated here (postponed), so its names are imported for type
# checkers only.
import _thread
import argparse
import contextlib
import errno
import functools
import gc
import importlib
import os
import re
import stat
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # names used only in (postponed) annotations: importing typing would cost start-up time
    from typing import Any, Awaitable, Callable, Collection, Iterable, Iterator, Sequence


class _OnFirstUse:
    """A module imported when one of its attributes is first looked up (``--help`` and ``status`` do
    not pay for ``socket``, ``uuid``, ``hashlib``, ``sqlite3``... they never touch)."""

    def __init__(self, alias: str, name: str):
        self._alias, self._name = alias, name

    def __getattr__(self, attr: str):
        importlib.import_module(self._name)
        module = sys.modules[self._name.split(".")[0] if self._alias != self._name else self._name]
        globals()[self._alias] = module
        return getattr(module, attr)


class _LazyPattern:
    """A regular expression compiled on first use (about 0.2 ms each: ``--help`` needs none of them).
    After that, its methods are plain attributes of this object: no cost per call."""

    def __init__(self, pattern: str, flags: int = 0):
        self._args = (pattern, flags)

    def __getattr__(self, attr: str):
        compiled = re.compile(*self._args)
        for name in ("match", "fullmatch", "search", "sub", "subn", "findall", "finditer", "split", "pattern",
                     "flags", "groups", "groupindex"):
            setattr(self, name, getattr(compiled, name))
        return getattr(compiled, attr)


_lazy_re = _LazyPattern


class _FieldSpec:
    """What :func:`field` was given, until its record is made."""

    def __init__(self, kwargs: dict):
        self.kwargs = kwargs


def field(**kwargs: Any) -> Any:
    """``dataclasses.field`` for a :func:`record` (made together with the record)."""
    return _FieldSpec(kwargs)


def record(cls: type) -> type:
    """``@dataclass``, applied to ``cls`` in place when it is first instantiated. Importing dataclasses
    (it pulls in inspect, ast, dis) and building flower's records costs ~12 ms, a tenth of a cold start
    that ``--help`` and ``status`` never need. Until then the class has only its class attributes."""

    def new(klass: type, *args: Any, **kwargs: Any) -> Any:
        if cls not in _MADE_RECORDS:
            _make_record(cls)
        return object.__new__(klass)   # then Python calls the __init__ that dataclass() made

    cls.__new__ = staticmethod(new)  # type: ignore[assignment]
    return cls


def _make_record(cls: type) -> None:
    # __new__ is the hook, not __init__: a thread that comes in while the class is being made waits
    # here instead of meeting a class without its __init__ (and a __new__ set later cannot be deleted)
    with _RECORD_LOCK:
        if cls in _MADE_RECORDS:
            return
        for name, value in list(cls.__dict__.items()):
            if isinstance(value, _FieldSpec):
                setattr(cls, name, dataclasses.field(**value.kwargs))
        dataclasses.dataclass(cls)
        _MADE_RECORDS.add(cls)


_MADE_RECORDS: set = set()
_RECORD_LOCK = _thread.allocate_lock()


_dt = _OnFirstUse("_dt", "datetime")
dataclasses = _OnFirstUse("dataclasses", "dataclasses")
hashlib = _OnFirstUse("hashlib", "hashlib")
json = _OnFirstUse("json", "json")
random = _OnFirstUse("random", "random")
shlex = _OnFirstUse("shlex", "shlex")
signal = _OnFirstUse("signal", "signal")
socket = _OnFirstUse("socket", "socket")
sqlite3 = _OnFirstUse("sqlite3", "sqlite3")
threading = _OnFirstUse("threading", "threading")
unicodedata = _OnFirstUse("unicodedata", "unicodedata")
urllib = _OnFirstUse("urllib", "urllib.parse")
uuid = _OnFirstUse("uuid", "uuid")

try:  # advisory locks; absent on Windows, where the lock degrades to a no-op
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__version__ = "0.1.0"

__all__ = [
    # utilities
    "FlowerError", "atomic_write", "FileLock", "DriverLock", "Busy", "safe_name", "redact", "redact_obj",
    "read_json",
    # process guard
    "cli_guard", "reap_orphans",
    # resilience
    "endpoint", "reachable", "classify", "Resilience", "cli_env_defaults", "settings_problems",
    # transcript logic
    "PrunePolicy", "PruneReport", "prune", "relink", "is_read_only_command", "entry_context",
    # notes
    "Brief", "Goal", "Verdict", "Ledger",
    # stores
    "project_key", "SqliteSessionStore", "PruningSessionStore", "load_store_factory", "SessionStoreContract",
    # state backends
    "StateBackend", "LocalState", "PostgresState", "PostgresSessionStore", "workspace_identity",
    "normalize_remote",
    # lineage and manifest
    "Lineage", "Manifest", "run_id", "wake_state",
    # handoff
    "HandoffPolicy", "WindowBook", "degraded_ledger", "assemble_carry", "Carry", "slim_transcript",
    "ledger_generation",
    # runtime
    "AgentSpec", "StepResult", "Event", "Runtime",
    # workflow
    "Step", "Workflow", "StepAbort", "starter_flow",
    # cli
    "main", "__version__",
]


# --- Text tables: every user-facing string and prompt, in English and Chinese ---

TEXTS: dict[str, dict[str, str]] = {
    "en": {
        "resume_prompt": (
            "The last round was interrupted before it finished. Look at what is already on disk and "
            "continue from where it stopped; do not start over."
        ),
        "interrupted_result": "[The previous round was interrupted here; this tool result was not produced.]",
        "killed_result": (
            "[This command was stopped when the run was killed; it may have partly run: check before doing it again.]"
        ),
        "expired_result": "[result of `{cmd}` expired {n} turns ago; re-run if needed]",
        "trimmed_result": "[tool result archived: {n} chars, full text in {path}; Read it if needed]",
        "human_interrupt": (
            "[The human interrupted the last round; a tool result marked as interrupted is expected.] "
        ),
        "human_continue": "Continue.",
        "brief_file": "brief.md",
        "goal_file": "goal.md",
        "handoff_file": "handoff-{step}.md",
        "handoff_prompt": (
            "Your context window is nearly full; a fresh session will take over this work with no memory "
            "of this conversation. Write a handoff document for it now. Reply with markdown only, using "
            "exactly these five headings:\n\n"
            "## Status\nWhat is being done right now, and how far it got.\n\n"
            "## Decisions\nWhat is settled, each with its reason.\n\n"
            "## Dead ends\nWhat was tried and failed, with why. Write (none) if nothing.\n\n"
            "## Next step\nThe first executable step for your successor: a path or a command.\n\n"
            "## Pointers\nFiles, commands and where things are: pointers, not contents.\n\n"
            "Do not call tools. Do not write a title. Keep it under 6000 characters."
        ),
        "handoff_fix": (
            "Your handoff document has these problems: {problems}. Reply again with the whole document, "
            "fixed, under the same five headings. Successes belong under Decisions or Status, finished "
            "items under Status; Next step names a path or a command. Do not call tools."
        ),
        "handoff_stop": (
            "flower: the context window is nearly full, so this round stops here, after the tool calls above "
            "ran and their results were recorded; a handoff follows."
        ),
        "carry_head": (
            "You take over unfinished work from an earlier session whose context was full. You have no "
            "memory of it; what it handed over is below. The material is layered: take what you need, do "
            "not read everything. Start from 'Next step'. Before trying an approach, check 'Dead ends'. "
            "Read the full transcript only if the rest is not enough."
        ),
        "carry_nav": "Where things are",
        "carry_thread": "Recent thread",
        "carry_trimmed_marker": "[... {n} more lines trimmed; full text in {path}]",
        "carry_closing": "Trimmed: {trimmed}. Left out: {dropped}. Full text: {path}.",
        "degraded_title": "[degraded: {why}]",
        "wake_continue_question": (
            "Continue? Enter = carry on; or say something new; /new = start a new task (Ctrl-C to quit)"
        ),
        "wake_new_question": "What should be done? One sentence is enough (Ctrl-C to quit)",
        "interrupt_question": "Interrupted. What should I tell the agent? (Enter = just continue; Ctrl-C again quits)",
        "clarify_resume": "Continue the unfinished clarification; do not start over.",
        "work_resume": (
            "Continue the work toward the goal from where it stopped. Look at what is already on disk; "
            "do not start over."
        ),
        "clarify_instructions": (
            "You clarify a task before any work starts. Ask the human only questions whose answer changes the "
            "approach, one at a time, with the ask tool. When no human is available, assume and record each "
            "assumption. Do not write files. Finish with the brief in exactly four sections:\n"
            "## Goal\n## Acceptance\n## Bounds\n## Unknowns and assumptions"),
        "goal_instructions": (
            "You turn a brief into a goal that a judge can check on the spot. The judge can read the files "
            "and run commands (build, run, test) in a throwaway copy of this directory; it cannot change files, "
            "ask anyone or wait for anything. Reply with exactly:\n"
            "# Goal\n<one statement>\n\n# Checks\n- <check the judge can do here, e.g. a command and its "
            "expected output, or a file and what it must contain>\n...\nMark a check that cannot be verified "
            "here as `[cannot verify here: why]`. Do not write files."),
        "work_instructions": (
            "You do the work described by the brief and the goal, in the working directory. Keep going until "
            "every check of the goal passes. Write code and files to disk; the judge reads only the disk."),
        "judge_instructions": (
            "You judge finished work against a goal. You did not do the work and owe it nothing. Inspect the "
            "files and run each check's command with Bash: your commands run in a throwaway copy of the "
            "directory, and you cannot edit files. Judge by what the commands print, not by reading code "
            "alone. End your reply with exactly one line `VERDICT: achieved`, `VERDICT: not_yet` "
            "or `VERDICT: unreachable`. When not achieved, list the failed checks under `## Failed checks` and "
            "why under `## Reasons`."),
        "clarify_prompt": "Task: {task}\n\n{who}\n\nWrite the brief.",
        "clarify_human": "A human is available through the ask tool.",
        "clarify_no_human": "No human is available: assume, and record each assumption.",
        "brief_lacks": "the brief lacks: {missing}",
        "brief_fix": "{reason}. Reply again with the whole brief under the four headings.",
        "goal_prompt": "The brief:\n\n{brief}\n\nWrite the goal.",
        "goal_lacks": "the goal needs a '# Goal' statement and a '# Checks' list",
        "goal_fix": "{reason}. Reply again in exactly that form.",
        "work_prompt_brief": "The brief ({path}):\n\n{brief}\n\n",
        "work_prompt_goal": "The goal ({path}):\n\n{goal}\n\n",
        "work_prompt_end": "Do the work.",
        "judge_prompt": "The goal:\n\n{goal}\nJudge the work in this directory.",
        "judge_label": "judge",
        "judge_failed": "the judge could not finish: {error}",
        "work_again": ("A judge checked the work against the goal: not achieved yet.\n\nFailed checks:\n{failed}\n\n"
                       "Reasons:\n{reason}\n\nFix these, then stop."),
        "not_listed": "- (not listed)",
        "verdict_achieved": "achieved",
        "verdict_not_yet": "not achieved yet",
        "verdict_unreachable": "unreachable",
        "ui_verdict_failed": " · failed: {n}",
        "dr_python_fix": "use Python 3.10 or newer",
        "dr_sdk_missing": "claude-agent-sdk not installed (in this interpreter)",
        "dr_cli_missing": "Claude Code CLI not found",
        "dr_cli_broken": "Claude Code CLI {path} does not run ({error})",
        "dr_cli_fix": "reinstall claude-agent-sdk (it bundles the CLI)",
        "dr_credentials": "credentials {name} {masked}",
        "dr_no_credentials": "no credentials",
        "dr_credentials_fix": "set ANTHROPIC_API_KEY or log in with the claude CLI",
        "dr_settings_ok": "settings ok",
        "dr_settings_fix": "fix or unset it",
        "dr_endpoint": "endpoint {host}:{port}",
        "dr_proxy": "proxy {host}:{port} (from {var})",
        "dr_proxy_fix": "check {var} and the proxy itself",
        "dr_network_fix": "check the network and ANTHROPIC_BASE_URL",
        "dr_reachable": "reachable",
        "dr_dns_failure": "DNS failure",
        "dr_connection_refused": "connection refused",
        "dr_timed_out": "timed out",
        "dr_unreachable": "unreachable",
        "dr_run_dir": "run dir {path} writable",
        "dr_run_dir_broken": "run dir: {error}",
        "dr_run_dir_fix": "choose a writable --run-dir",
        "dr_integrity": "sessions.db integrity {verdict}",
        "dr_aside_fix": "move the file aside",
        "dr_rows_ok": "sessions.db rows: {n} decoded, none damaged",
        "dr_rows_damaged": "sessions.db rows: {n} of {total} damaged and skipped on resume ({where})",
        "dr_rows_unread": "sessions.db rows cannot be read ({error})",
        "dr_rows_fix": "a resume of those sessions lacks those entries; move sessions.db aside to start them fresh",
        "dr_psycopg": "psycopg {version}",
        "dr_psycopg_missing": "psycopg 3 not installed (--state postgresql://... needs it)",
        "dr_db_reach": "state database {host}:{port} {verdict}",
        "dr_db_reach_fix": "check the host and port in --state / FLOWER_STATE and that the server runs",
        "dr_db_login": "login to {where} accepted",
        "dr_db_login_fix": "check the user, password and database name in --state / FLOWER_STATE",
        "dr_db_schema": "flower schema version {version} (this flower.py knows up to {known})",
        "dr_db_schema_none": "no flower schema yet (created on first use)",
        "dr_db_schema_fix": "use a newer flower.py",
        "dr_db_skipped": "state database: {check} not checked ({why})",
        "info_lease_lapsed": "the lock could not be renewed for {seconds}s (the state database is away): "
                             "the CLI is stopped until the database is back, then this run goes on",
        "info_lease_wait": "{what} is leased to pid {pid} on {host}, whose connection is gone; waiting up to "
                           "{seconds}s for it to renew (then this run stops) or to lapse",
        "added_on_wake": "Added on wake",
        "wake_addendum": "The human adds: {words}",
        "ui_continues": "<- continues earlier session · wake #{woke}",
        "ui_context": " · context {context}",
        "ui_retry": "retry: attempt {attempt} in {delay}s ({kind})",
        "ui_near": "context {context} of {window}: handoff soon",
        "ui_writing": "handoff: the session writes its handoff document",
        "ui_handoff_done": "handoff #{generation} -> fresh session {sid}{degraded}; {path}",
        "ui_words": "continuing with your words",
        "ui_error": "error ({kind}): {message}",
        "ui_result": "{step}: {status} · ${cost:.4f} · {turns} · attempts {attempts}",
        "n_turns": "{n} turns",
        "n_turn": "{n} turn",
        "st_workspace": "workspace",
        "st_workspace_id": "workspace id",
        "st_state": "state",
        "st_run_dir": "run dir",
        "st_brief": "brief",
        "st_goal": "goal",
        "st_woke": "woke",
        "st_step": "step",
        "st_handoff": "handoff",
        "st_sessions": "sessions",
        "st_last_steps": "last steps:",
        "st_confirmed": "confirmed",
        "st_none": "none",
        "st_checks": "{n} checks",
        "st_times": "{n} time(s)",
        "st_context": "context {context}",
        "st_generation": "generation {n}, {path}",
        "st_stored": "{n} stored for this workspace",
        "st_achieved": "achieved (the judge said so; a wake with nothing new pays nothing)",
        "st_no_sessions": "no sessions stored yet",
        "st_entries": "{n} entries",
        "st_ambiguous": "{n} sessions start with {sid!r}; give more of the id",
        "st_no_match": "no stored session starts with {sid!r} ({prog} sessions --all lists them)",
        "st_pruned": "-- pruned for resume: {parts}",
        "st_problem": "problem",
        "st_lineage_unreadable": "{path} cannot be read (not JSON, or not a regular file); the next run sets it aside and starts fresh",
        "st_lineage_shape": "{path} has the wrong shape; the next run sets it aside and starts fresh",
        "ui_nothing_new": "the goal was achieved and nothing new was said: nothing to do (say something new, or --new)",
        "ui_ok": "ok",
        "ui_failed": "failed: {error}",
        "ui_done": "done · total ${cost:.4f} · manifest {path}",
        "ui_once": "session {sid} · ${cost:.4f} · manifest {path}",
        "ui_total": "total ${cost:.4f} · manifest {path}",
        "ui_banner": "<- resuming in {path}  {parts}",
        "ui_brief_confirmed": "brief confirmed",
        "ui_goal_checks": "goal {n} checks",
        "ui_work_context": "work context {context}",
        "ui_wake": "wake #{n}",
        "ui_archived": "archived {n} file(s) into {path}",
        "ui_nothing_to_do": 'nothing to do here yet: {prog} "what should be done"',
        "ui_task_carried": "carrying on with the task given before: {task}",
        "info_set_aside": "{path} was unreadable; set aside as {moved}",
        "info_offline": "{host}:{port} is unreachable; waiting for it (up to {seconds}s)",
        "info_online": "{host}:{port} is reachable again after {seconds}s",
        "info_still_offline": "still offline ({host}:{port}): {waited} of {of}, next probe in {next}s",
        "info_other_workspace": "lineage in {path} belongs to {workspace}; starting fresh here",
        "info_sessions_gone": "sessions of {steps} are no longer stored; those steps start fresh",
        "info_redo": "the sessions of {steps} never reached the store; starting them again with the same input",
        "info_not_stored": "session {sid} is not in the store; starting fresh",
        "info_not_resumable": "session {sid} could not be resumed; starting fresh",
        "info_mirror_error": "the session store could not save part of this session: {error}",
        "info_legacy_runs": "using flower's state in {path} (the old default); to move it: mv {path}/* {dest}/",
        "info_recovered": "recovered {n} entries of session {sid} that the store had missed",
        "info_write_failed": "could not write {path} ({error}); the work goes on, continuity is degraded",
        "info_skipped_rows": "{n} unreadable stored entr(y/ies) of session {sid} skipped",
        "info_cli_quiet": "no message from the CLI for {waited} ({why}); a stall is given up after {bound}",
        "cli_model": "waiting for the model's answer",
        "cli_tool": "a tool is running",
        "cli_stopped": "the CLI process {pid} is stopped; kill -CONT {pid} resumes it",
        "store_damaged": ("{path} is damaged ({error}); nothing was retried: move it aside (its sessions then start "
                          "fresh) or restore it from a backup; {prog} doctor checks it"),
        "info_answers_unstored": ("{n} of {total} answer(s) of session {sid} never reached the session store "
                                  "(the CLI could not write its transcript: is {path} full or read-only?); "
                                  "a later run cannot continue them"),
        "setup_dir_unusable": ("{path} cannot take the Claude Code CLI's {what} ({why}); free some space there "
                               "or set {var} to a writable directory (nothing was sent)"),
        "setup_what_transcripts": "transcripts",
        "setup_what_copies": "copies of resumed sessions",
        "setup_low_space": "only {kb} KB free",
        "ui_degraded": "continuity degraded: {n} problem(s), see above",
        "info_answer_lost": "the final answer could not be printed on stdout (closed or full); the manifest keeps its first 4000 characters",
        "info_unverifiable": "{n} check(s) cannot be verified here",
        "unreachable_question": "The judge says the goal is unreachable: {reason}",
        "choice_accept": "accept the work as it is: the step passes",
        "choice_amend": "amend the goal",
        "choice_keep_working": "keep working: the judge is wrong",
        "choice_stop": "stop",
        "amend_question": "The amended goal, in one sentence:",
        "goal_amended": "The human amended the goal: {goal}",
        "judge_is_wrong": (
            "The judge said the goal is unreachable ({reason}). The human says the judge is wrong: the goal "
            "can be reached. Keep working toward it."
        ),
        "unreachable_stopped": "stopped: the judge says the goal is unreachable and the human chose to stop",
        "moved_prompt": (
            "This workspace is now at {new}. Earlier messages of this conversation refer to {old}: that "
            "path is not this machine's, use {new} instead."
        ),
        "info_notes_restored": "{n} note(s) restored from {where}",
        "info_state_unreadable": "the {what} in {where} was unreadable; ignored",
        "ui_spooled": "{n} transcript entr(y/ies) only in the local spool {path}; the next run writes them",
        "rp_title": "flower report",
        "rp_timeline": "Timeline",
        "rp_water": "Context level per answer",
        "rp_cost": "Cost per step and cumulative",
        "rp_tools": "Tool calls per step",
        "rp_goal": "Goal and checks",
        "rp_brief": "Brief",
        "rp_status": "status",
        "rp_running": "running",
        "rp_finished": "finished",
        "rp_total_cost": "cost",
        "rp_steps": "steps",
        "rp_sessions": "sessions",
        "rp_turns": "answers",
        "rp_handoffs": "handoffs",
        "rp_runs": "runs",
        "rp_generated": "made",
        "rp_ok": "step done",
        "rp_failed": "step failed",
        "rp_killed": "step killed",
        "rp_mark_handoff": "handoff",
        "rp_mark_wake": "wake",
        "rp_mark_outage": "outage",
        "rp_mark_wait": "wait",
        "rp_mark_kill": "kill",
        "rp_mark_rescue": "rescue",
        "rp_mark_degraded": "degraded",
        "rp_mark_verdict": "verdict",
        "rp_threshold": "handoff threshold",
        "rp_window": "context window",
        "rp_none": "(none recorded)",
        "rp_step": "step",
        "rp_tool_calls": "tool calls",
        "rp_top_tools": "most used",
        "rp_worker_calls": "workers' calls",
        "rp_saved": "prune, trim, spill saved",
        "rp_verdict": "last verdict",
        "rp_wrote": "report written to {path}",
        "rp_cannot_write": "cannot write the report to {path}: {error}",
        "coordinator_instructions": (
            "You coordinate; workers do the hands-on work. Plan, then delegate each concrete piece (writing, "
            "editing, running commands that change things, long investigations) to a worker with the Agent "
            "tool, subagent_type 'worker', one self-contained task per call with the paths and facts it needs. "
            "Keep your own context small: read workers' short reports, glance with Read, Glob, Grep and "
            "read-only Bash only to decide. Reuse what the workbench index lists."),
        "worker_description": "Does one self-contained piece of hands-on work and reports briefly.",
        "worker_instructions": (
            "You are a worker. Do the one task you are given, completely, in the working directory. Then "
            "reply in at most about 30 lines: the conclusion; the evidence (what you ran or read, and what it "
            "showed); the outputs (paths of files you wrote); what is unverified. Leave long outputs in files "
            "in the workbench and report only their paths."),
        "delegate_denied": (
            "flower: the coordinator does not change things itself; delegate this to a worker (Agent tool, "
            "subagent_type 'worker'). Denied here: {tool}"),
        "spilled_output": (
            "[output of {n} chars saved to {path}; Read it (offset/limit for parts) if needed. "
            "Its first {k} chars:]\n{head}"),
        "workbench_rules": (
            "Workbench ({root}): keep reusable scripts in scripts/, results and long outputs in artifacts/, "
            "findings in notes/; start each file with a `# desc: one line` (or a first comment) saying what "
            "it is; reuse what INDEX.md lists before writing anew; report paths, not long contents."),
        "workbench_prompt": "\n\nThe workbench (reusable scripts, artifacts, notes):\n\n{index}\n",
        "worker_stopped": (
            "[The worker was stopped before it reported (the run was killed). Check the workbench and the "
            "disk for what it did before delegating the rest again.]"),
        # judge sandbox (issue 42)
        "judge_write_refused": "the judge checks the work and may not change it ({tool} refused)",
        "judge_no_copy": "the judge has no copy of the workspace to run commands in",
        "judge_path_refused": ("the judge's commands run in a copy of the workspace; use relative paths, "
                               "not the workspace's own path"),
        # project settings (issue 42)
        "settings_bad": "--settings {value!r} is not one of {choices}",
        "settings_project": ("project (read: {files}, and CLAUDE.md of parent folders); flower's own rules win where "
                             "they clash: tools per role, hooks, compaction off"),
        "settings_none": "none (--settings none: CLAUDE.md and project settings are not read)",
        "settings_no_files": "none found",
        "st_settings": "settings",
        # usage limits (issue 42)
        "info_limit_wait": "usage limit reached: waiting until it resets, {left} left; the same session goes on then",
        "limit_past_bound": "a usage limit resets in {waited}, past FLOWER_MAX_LIMIT_WAIT ({of})",
        # wake with a new goal (issue 42)
        "wake_new_goal": "\n\nThe goal was re-derived for this ({path}); work until every check passes:\n\n{goal}",
        # small things (issue 42)
        "ui_continuing": "continuing",
        "info_recovered_one": "recovered 1 entry of session {sid} that the store had missed",
        "ui_new_without_task": '--new needs the new task: {prog} --new "what should be done" (nothing was archived)',
        # Chinese everywhere (issue 42)
        "step_clarify": "clarify",
        "step_goal": "goal",
        "step_work": "work",
        "st_mark_ok": "ok",
        "st_mark_err": "ERR",
        "dr_mark_ok": "OK",
        "dr_mark_fail": "FAIL",
        "ui_not_a_command": "{word!r} is not a command; did you mean: {prog} {hint}? (for a one-word task: {prog} go {word})",
        "ui_usage_error": "{message} (see: {prog} --help)",
        "ap_unrecognized": "unrecognized arguments: {what}",
        "ap_invalid_choice": "argument {arg}: invalid choice: {what} (choose from {choices})",
        "ap_expected_one": "argument {arg}: expected one argument",
        "ap_invalid_value": "argument {arg}: invalid value: {what}",
        "ap_argument": "argument {arg}: {what}",
        "ap_required": "the following arguments are required: {what}",
        "ap_whole_number": "argument {arg}: must be a whole number, got {what}",
        "ap_at_least": "argument {arg}: must be at least {low}, got {what}",
        "ap_budget": "argument {arg}: the budget must be a number of USD above 0, got {what}",
        "ui_same_words": "the same words as before: carrying on (nothing added to the brief)",
        "budget_reached": ("the job's budget is spent: ${spent:.4f} of ${cap:.4f}; run again with a higher "
                           "--max-cost to continue"),
        "st_spend": "spent",
        "st_spend_of": "${spent:.4f} of a ${cap:.4f} budget",
        "st_spend_only": "${spent:.4f} (no budget)",
        "snapshot_too_big": ("the workspace snapshot is over {limit} MB (FLOWER_SNAPSHOT_MAX): not taken, another "
                             "machine would not get these files"),
        "snapshot_restore_failed": "the workspace snapshot could not be restored: {error}",
        "snapshot_restored": "restored {n} file(s) from the snapshot of {at} on {host}",
        "snapshot_aside": "changes of the snapshot that would overwrite local edits were set aside in {path}",
        "snapshot_restored_prompt": ("flower restored {n} file(s) this job had changed on {host} (snapshot of "
                                     "{at}): {names}. They are on disk now; do not write them again."),
        "st_driver": "driven by",
        "st_driver_now": "pid {pid} on {host}, since {since}, step {step}",
        "st_driver_none": "no flower now",
        "st_goal_text": "goal is",
        "snapshot_aside_prompt": ("Some of the job's earlier changes were not applied over local edits; they "
                                  "are set aside in {path} (changes.patch and files/)."),
        "disk_full": ("disk full: {path} cannot take what flower writes there (no space left on device); "
                      "free some space there"),
        "info_from_stream": ("stored {n} message(s) of session {sid} that the CLI streamed but never recorded "
                             "(it was stopped or could not write its transcript)"),
        "mail_heading": "Mail received",
        "mail_context": (
            "[mail {id}] The human wrote this while you worked ({when}). It interrupts nothing: finish what "
            "you are doing as you see fit, and take it into account from now on. It is also appended to the "
            "brief.\n\n{words}"
        ),
        "ui_mail": "mail {id} handed to the work agent: {words}",
        "ui_mail_posted": "mail {id} left in {path}: the running work agent gets it at its next tool boundary (or the next run does)",
        "ui_mail_empty": "nothing to say: give the words as an argument, or '-' to read them from stdin",
        "ui_mail_typed": "mail {id} queued: the work agent gets it at its next tool boundary",
        "ui_question": "? [{id}] {question}\n  answer here, or from any shell: {prog} answer {id} \"...\" (waits {wait})",
        "ui_question_timeout": "question {id}: no answer within {wait}; the agent chooses and records its assumption",
        "ask_timeout": (
            "No answer came within {wait}. Choose what seems most reasonable yourself and go on; record the "
            "assumption and why you made it under \"Unknowns and assumptions\" in the brief ({path})."
        ),
        "ask_nobody": (
            "No human can answer here (no terminal, a CI job). Choose what seems most reasonable yourself and go "
            "on; record the assumption and why you made it under \"Unknowns and assumptions\" in the brief ({path})."
        ),
        "qa_title": "Questions and answers",
        "ui_heartbeat_tool": "{step} · still running {tool} · {waited}",
        "ui_heartbeat_model": "{step} · still waiting for the model · {waited}",
        "side_instructions": (
            "You answer a person's side question about the work in this conversation. You are a read-only fork: "
            "the work goes on elsewhere. Do not change anything; Read, Glob and Grep are yours if you need to look."
        ),
        "side_prompt": (
            "A side question from the person. You are a read-only fork of this conversation: the work goes on "
            "elsewhere. Answer briefly from what you know and what you can Read, change nothing, then stop; do "
            "not continue the work.\n\nThe question: {question}"
        ),
        "ui_side_cost": "side question answered from a fork of work session {sid} · ${cost:.4f} · kept in {path} as its own step",
        "ui_side_none": "no work session in this workspace yet: nothing to ask about",
        "ui_side_empty": "no side question given",
        "ui_side_started": "side question asked: its answer follows when it comes (the work goes on)",
        "ui_answered": "answer to {id} left: the agent gets it now",
        "ui_answer_empty": "no answer given: give the words as an argument, or '-' to read them from stdin",
        "ui_no_question": "no question {id} waits for an answer in this workspace (waiting: {open})",
        "st_driver_now_at": "pid {pid} on {host} in {path}, since {since}, step {step}",
        "info_handoff_asked": "handoff asked for: the work step hands over at its next boundary",
        "ui_handoff_posted": "handoff asked for ({path}): the running work step hands over at its next boundary (or the next run starts it from a carry)",
        "hp_help": "show this help message and exit",
        "hp_version": "show program's version number and exit",
        "hp_workspace": "the agents' working directory; it must exist (default .)",
        "hp_run_dir": "where the run files go (sessions.db, lineage, manifest); default <workspace>/.flower",
        "hp_verbose": "show every text and tool call (and SDK logs)",
        "hp_quiet": "only errors and the closing line",
        "hp_json": "JSON lines on stdout for CI (human text on stderr)",
        "hp_lang": "language of prompts, notes and messages (default FLOWER_LANG or en)",
        "hp_store": "use your own SessionStore (a factory called with no arguments) instead of sessions.db",
        "hp_state": "keep all state in one PostgreSQL database, for many machines (default FLOWER_STATE, else the local files; needs psycopg)",
        "hp_workspace_id": "the workspace's identity in --state (default FLOWER_WORKSPACE_ID, else git remote#branch[:subdir], else the path)",
        "hp_settings": "project: the agents read the workspace's CLAUDE.md and project/local settings (default, FLOWER_SETTINGS); none: isolated",
        "hp_go_ask": "what should be done; in a used directory: something to add ('-' reads it from stdin)",
        "hp_go_new": "archive lineage, brief and goal; start a new task",
        "hp_go_rounds": "judge rounds for the work step, at least 1 (default 3)",
        "hp_go_no_trim": "do not archive old big tool results on resume",
        "hp_go_no_handoff": "never hand over to a fresh session",
        "hp_go_window": "context window in tokens (at least {min_window})",
        "hp_go_no_goal": "no goal step and no judge",
        "hp_go_permission_mode": "permission mode of the worker (default acceptEdits)",
        "hp_go_model": "model for every agent",
        "hp_go_no_delegate": "one worker does everything, no coordinator and workers (also FLOWER_NO_DELEGATE=1)",
        "hp_go_worker_model": "model of the workers (default: the coordinator's)",
        "hp_go_no_snapshot": "take no workspace snapshots (the files then do not travel with the state)",
        "hp_go_max_cost": "the whole job's budget in USD, across runs and machines (default {max_cost_env}, else the one given before); spent: exit {exit_budget}, a higher one continues",
        "hp_once_prompt": "the prompt ('-' reads it from stdin)",
        "hp_once_tools": "comma-separated tools, available and auto-approved (default Read,Glob,Grep)",
        "hp_once_permission_mode": "permission mode (default default)",
        "hp_once_budget": "budget cap in USD (> 0)",
        "hp_once_resume": "continue this session (a unique id prefix)",
        "hp_once_fork": "with --resume: branch into a new session",
        "hp_once_model": "model of the session",
        "hp_sessions_all": "every workspace, not just this one",
        "hp_show_sid": "session id (a unique prefix is enough)",
        "hp_show_raw": "every entry exactly as stored (one JSON object a line)",
        "hp_report_output": "where to write the page (default: report.html in the run dir)",
        "hp_say_words": "what the running work agent should hear ('-' reads it from stdin)",
        "hp_answer_id": "the question's id, as shown when it was asked",
        "hp_answer_words": "the answer ('-' reads it from stdin)",
        "hp_ask_question": "a side question about the work ('-' reads it from stdin)",
        "hp_ask_model": "model of the side question",
        "hp_cmd_go": "run the job (the default command): clarify -> goal -> work, judged",
        "hp_cmd_once": "one ad-hoc session (no lineage)",
        "hp_cmd_status": "wake state, last steps, sessions (no SDK needed)",
        "hp_cmd_doctor": "check Python, SDK, CLI, credentials, settings, network, state",
        "hp_cmd_sessions": "list stored sessions",
        "hp_cmd_show": "a session as the model would be sent it on resume (pruned)",
        "hp_cmd_report": "one self-contained HTML page of the job: timeline, context, cost, tools, goal",
        "hp_cmd_say": "leave words for the running work agent: it gets them at its next tool boundary",
        "hp_cmd_answer": "answer a question an agent asked (ID as shown with it)",
        "hp_cmd_ask": "a side question, answered from a read-only fork of the work session (running or not)",
        "hp_cmd_handoff": "make the running work step hand over to a fresh session at its next boundary",
        "hp_handoff": "on a wake, start the work step from a carry instead of resuming its session",
        "hp_description": "Keep a long agent job going with Claude. Run it again in the same directory and it carries on.",
        "hp_usage": "{prog} [\"what should be done\"]        (= go)\n       {prog} COMMAND [options] ...      (COMMAND --help for its options)",
        "hp_commands": "commands (COMMAND --help for its options):",
        "hp_exit_codes": "exit codes: 0 done · 1 a step failed · 2 usage error · 3 setup problem or credentials rejected · 4 network down past the wait · 5 another flower drives this workspace · 6 a usage limit resets past FLOWER_MAX_LIMIT_WAIT · 7 the job's budget spent · 130 interrupted · 128+N stopped by signal N",
        "hp_usage_prefix": "usage: ",
        "hp_positionals": "positional arguments",
        "hp_optionals": "options",
        "hp_global_options": "global options (every command)",
        "er_workspace_not_dir": "workspace {path} is not a directory",
        "er_empty": "{what} is empty{hint}",
        "er_empty_task_hint": ": say what should be done, or give no argument to carry on",
        "er_what_the_task": "the task",
        "er_what_the_question": "the question",
        "er_what_the_prompt": "the prompt",
        "er_what_the_answer": "the answer",
        "er_what_the_words": "the words",
        "er_what_an_argument": "an argument",
        "er_stdin_too_large": "{what} from stdin is larger than {kb} KB; put it in a file in the workspace and refer to it",
        "er_stdin_not_utf8": "{what} from stdin is not valid UTF-8",
        "er_not_utf8": "{what} is not valid UTF-8",
        "er_too_large": "{what} is larger than {kb} KB; put it in a file in the workspace and refer to it",
        "er_nul_byte": "{what} contains a NUL byte",
        "er_no_sdk": "claude-agent-sdk is not installed (pip install claude-agent-sdk); status, doctor and the store work without it",
        "er_no_credentials": "no credentials: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN), or log in with the claude CLI",
        "er_workspace_id": "--workspace-id must be a non-empty line of at most 1000 characters",
        "er_state_spec": "--state expects a postgresql://... connection string (or nothing: the local files)",
        "er_fork_needs_resume": "--fork needs --resume SID",
        "er_no_unique_session": "no unique stored session starts with {prefix} in this workspace",
        "er_run_dir_not_dir": "run dir {path} is not a directory",
        "er_setting_whole": "{setting} must be a whole number >= {low}",
        "er_setting_number": "{setting} must be a number >= {low}",
        "er_setting_one_of": "{setting} must be one of {allowed}",
        "er_settings_more": " (and {n} more: {prog} doctor)",
        "er_not_a_directory": "{path} exists and is not a directory",
        "er_cannot_create_dir": "cannot create directory {path}: {error}",
        "er_lock_unwritable": "{path} cannot be written: read-only or permission denied ({error})",
        "er_json_is_dir": "{path} is a directory, expected a JSON file",
        "er_cannot_read": "cannot read {path}: {error}",
        "er_sqlite_is_dir": "{path} is a directory, expected a SQLite file",
        "er_store_unwritable": "{path} cannot be written: read-only or permission denied ({error}); it was left untouched",
        "er_store_busy": "{path} is busy or locked ({error}); it was left untouched",
        "er_store_unusable": "{path} is not a usable session store ({error}); it was left untouched: move it aside or use another --run-dir",
        "er_store_unreadable": "{path} cannot be read: read-only or permission denied ({error})",
        "er_store_spec": "--store expects module:factory, got {spec}",
        "er_store_factory": "--store {spec}: {kind}: {error}",
        "er_store_not_a_store": "--store {spec}: the factory did not return a SessionStore (append/load)",
        "er_cannot_write_in": "cannot write in {path}: {error}",
        "er_no_psycopg": "--state postgresql://... needs psycopg 3: pip install \"psycopg[binary]\"",
        "er_state_conninfo": "--state: not a valid postgresql:// connection string",
        "er_db_refused_connection": "the state database {where} refused the connection: {problem}; check --state / {var}",
        "er_db_unreachable_detail": "the state database {where} is unreachable: {detail}",
        "er_db_unreachable": "the state database {where} is unreachable",
        "er_db_refused": "the state database refused it: {kind}: {error}",
        "er_db_schema_newer": "the state database holds flower schema version {found}; this flower.py knows up to {known}: use a newer flower.py",
        "er_usd_above_zero": "{where} must be a number of USD above 0, got {got}",
        "er_permission_mode": "permission mode {mode} is not one of {allowed}",
        "er_spec_budget": "budget {budget} must be a positive number of USD",
        "er_spec_max_turns": "max turns {n} must be at least 1",
        "er_bypass_as_root": "bypassPermissions is refused by the CLI when running as root (set IS_SANDBOX=1 inside a sandbox)",
        "er_sdk_missing": "claude-agent-sdk is not installed: pip install claude-agent-sdk",
        "er_step_name": "invalid step name {name}",
        "er_step_on_fail": "step {name}: on_fail must be one of {allowed}",
        "er_network_down_db": "network down past {seconds}s (database {host}:{port})",
        "er_interrupted": "interrupted",
        "er_stopped_by_signal": "stopped by signal {signum}",
        "er_unexpected": "unexpected {kind}: {error}",
        "er_once_failed": "once failed: {error}",
        "er_judge_unreachable": "the judge says the goal is unreachable: {reason}",
        "busy_line": "another flower drives {what} ({who}); wait for it or stop it first",
        "busy_session": "another flower drives session {sid} (pid {pid}, its CLI pid {cli}); wait for it or stop it first",
        "busy_nobody_named": "its holder left no record and cannot be named",
        "busy_pid": "pid {pid}",
        "busy_host": " on {host}",
        "busy_path": " in {path}",
        "busy_since": ", since {since}",
        "busy_since_unknown": ", start time unknown",
        "busy_step": ", step {step}",
        "lock_what_workspace": "workspace {name}",
        "lock_what_step": "step {name}",
        "er_url_unusable": "{name}={url} is not a usable URL ({error})",
        "er_url_want": "{name}={url} is not a usable URL (want {schemes}://host[:port])",
        "er_url_port": "{name}={url}: port {port} is out of range",
        "warn_not_a_number": "ignoring {name}={raw}: not a non-negative number",
        "ap_unknown_tool_close": "argument {arg}: unknown tool {what}; did you mean {close}?",
        "ap_unknown_tool": "argument {arg}: unknown tool {what}; known: {known}",
        "ui_resume_pruned": "resume: pruned {what}",
        "os_EACCES": "Permission denied",
        "os_EPERM": "Operation not permitted",
        "os_EROFS": "Read-only file system",
        "os_ENOENT": "No such file or directory",
        "os_ENOTDIR": "Not a directory",
        "os_EISDIR": "Is a directory",
        "os_EEXIST": "File exists",
        "os_ELOOP": "Too many levels of symbolic links",
        "os_ENAMETOOLONG": "File name too long",
        "os_EIO": "Input/output error",
        "os_EDQUOT": "Disk quota exceeded",
        "er_step_failed": "{label} failed: {error}",
        "er_store_no_module": "--store {spec}: ModuleNotFoundError: no module named {module}",
        "target_database": "database {host}",
        "er_background": "background error",
        "er_network_down": "network down past {seconds}s ({target})",
        "er_stalled": "stream stalled: no message from the CLI for {seconds}s",
        "er_handoff_timed_out": "the handoff document timed out after {seconds}s",
        "er_handoff_failed": "the handoff document failed: {why}",
        "er_handoff_failed_kind": "the handoff document failed ({kind})",
        "er_generation_cap": "generation cap reached ({n} handoffs in one step)",
        "er_degraded_twice": "two degraded handoffs in a row: window {window}, threshold {at}, level {level}; the threshold is probably below this step's floor (raise --window or FLOWER_WINDOW)",
        # a worker the CLI ended on an API error (issue 39, bench/chaos.py --delegate)
        "worker_api_error": (
            "[flower: the worker stopped on an API error before it reported; it may have done part of its "
            "task. Check the workbench and the disk for what it did before delegating the rest again.]"),
    },
    "zh": {
        "resume_prompt": "上一轮在完成之前被中断了。先看看磁盘上已经有什么,从中断处继续,不要从头开始。",
        "interrupted_result": "[上一轮在此处被中断,该工具结果未产生]",
        "killed_result": "[这条命令在运行被终止时被停下;它可能已部分执行:再做之前先检查]",
        "expired_result": "[`{cmd}` 的结果已在 {n} 轮前过期;需要时请重新运行]",
        "trimmed_result": "[工具结果已归档:{n} 字符,全文在 {path};需要时请读取]",
        "human_interrupt": "[人类中断了上一轮;出现标记为中断的工具结果是正常的。] ",
        "human_continue": "继续。",
        "brief_file": "需求.md",
        "goal_file": "目标.md",
        "handoff_file": "交接-{step}.md",
        "handoff_prompt": (
            "你的上下文窗口快满了;一个全新的会话将接手这项工作,它不记得这段对话。现在为它写一份交接文档。"
            "只回复 markdown,恰好使用以下五个标题:\n\n"
            "## 现在在做什么\n正在做的事,进展到哪里。\n\n"
            "## 已经定下的\n已确定的决定,各附理由。\n\n"
            "## 走不通的路\n试过但失败的方法及原因;没有就写 (无)。\n\n"
            "## 下一步\n接手者可直接执行的第一步:一个路径或一条命令。\n\n"
            "## 现场\n文件、命令、东西在哪里:给指针,不给内容。\n\n"
            "不要调用工具。不要写标题。少于 6000 字符。"
        ),
        "handoff_fix": (
            "你的交接文档有这些问题:{problems}。请用同样的五个标题重新回复完整的文档,改正这些问题。"
            "成功的做法放在「已经定下的」或「现在在做什么」,已完成的事放在「现在在做什么」;"
            "「下一步」写一个路径或一条命令。不要调用工具。"
        ),
        "handoff_stop": "flower:上下文窗口快满了,本轮在上面的工具调用执行完、结果已记录之后停在这里;接下来是交接。",
        "carry_head": (
            "你接手一项未完成的工作,之前的会话上下文已满。你不记得它;它交接的材料在下面。材料已分层,"
            "请按需取用而非通读。从「下一步」开始。尝试某个方法前,先查「走不通的路」。"
            "只有在其余材料不足以推进时才读完整转写。"
        ),
        "carry_nav": "东西在哪里",
        "carry_thread": "近期线程",
        "carry_trimmed_marker": "[... 另有 {n} 行已截去;全文在 {path}]",
        "carry_closing": "已截短:{trimmed}。未放入:{dropped}。全文:{path}。",
        "degraded_title": "[降级:{why}]",
        "wake_continue_question": "接着上次? 直接回车 = 接着做;也可以说点新的;/new = 重开一件事(Ctrl-C 退出)",
        "wake_new_question": "要做什么? 一句话就够,回车开始(Ctrl-C 退出)",
        "interrupt_question": "已中断。要告诉 agent 什么?(回车 = 直接继续;再按 Ctrl-C 退出)",
        "clarify_resume": "继续刚才没有完成的需求澄清,不要从头开始。",
        "work_resume": "从中断处继续朝目标推进。先看看磁盘上已经有什么,不要从头开始。",
        "clarify_instructions": (
            "你在任何工作开始之前澄清任务。只问那些答案会改变做法的问题,一次一个,用 ask 工具问人类。"
            "没有人类可问时,自行假设并记下每个假设。不要写文件。最后给出需求,恰好分四节:\n"
            "## 目标\n## 验收标准\n## 边界\n## 未知与假设"),
        "goal_instructions": (
            "你把需求变成一个判定者能当场检查的目标。回复恰好是:\n"
            "判定者可以读文件,并在这个目录的一次性副本里运行命令(构建、运行、测试);它不能改文件、不能问人、不能等待。\n"
            "# 目标\n<一句话>\n\n# 检查\n- <判定者在这里能做的检查,例如一条命令及其预期输出,或一个文件及其必须包含的内容>\n"
            "...\n在这里无法验证的检查标记为 `[cannot verify here: 原因]`。不要写文件。"),
        "work_instructions": (
            "你在工作目录里完成需求和目标所描述的工作。一直做到目标的每条检查都通过。把代码和文件写到磁盘上;"
            "判定者只看磁盘。"),
        "judge_instructions": (
            "你对照目标评判已完成的工作。工作不是你做的,你不欠它什么。检查文件,并用 Bash 运行每条检查的命令:"
            "你的命令在这个目录的一次性副本里运行,你不能编辑文件。依据命令的输出评判,不要只读代码。"
            "回复的最后恰好一行 `VERDICT: achieved`、`VERDICT: not_yet` 或 `VERDICT: unreachable`(这一行保持英文)。"
            "未达成时,在 `## Failed checks` 下列出未通过的检查,在 `## Reasons` 下写明原因。"),
        "clarify_prompt": "任务:{task}\n\n{who}\n\n写出需求。",
        "clarify_human": "可以通过 ask 工具问人类。",
        "clarify_no_human": "没有人类可问:自行假设,并记下每个假设。",
        "brief_lacks": "需求缺少:{missing}",
        "brief_fix": "{reason}。请按四个标题重新回复完整的需求。",
        "goal_prompt": "需求:\n\n{brief}\n\n写出目标。",
        "goal_lacks": "目标需要一个「# 目标」陈述和一个「# 检查」列表",
        "goal_fix": "{reason}。请严格按那个格式重新回复。",
        "work_prompt_brief": "需求({path}):\n\n{brief}\n\n",
        "work_prompt_goal": "目标({path}):\n\n{goal}\n\n",
        "work_prompt_end": "开始干活。",
        "judge_prompt": "目标:\n\n{goal}\n评判这个目录里的工作。",
        "judge_label": "判定",
        "judge_failed": "判定者没能完成:{error}",
        "work_again": ("判定者对照目标检查了工作:尚未达成。\n\n未通过的检查:\n{failed}\n\n"
                       "原因:\n{reason}\n\n修好这些,然后停下。"),
        "not_listed": "- (未列出)",
        "verdict_achieved": "已达成",
        "verdict_not_yet": "尚未达成",
        "verdict_unreachable": "无法达成",
        "ui_verdict_failed": " · 未通过:{n}",
        "dr_python_fix": "请用 Python 3.10 或更新的版本",
        "dr_sdk_missing": "没有安装 claude-agent-sdk(在当前解释器里)",
        "dr_cli_missing": "找不到 Claude Code CLI",
        "dr_cli_broken": "Claude Code CLI {path} 无法运行({error})",
        "dr_cli_fix": "重装 claude-agent-sdk(它自带 CLI)",
        "dr_credentials": "凭据 {name} {masked}",
        "dr_no_credentials": "没有凭据",
        "dr_credentials_fix": "设置 ANTHROPIC_API_KEY,或用 claude CLI 登录",
        "dr_settings_ok": "设置无误",
        "dr_settings_fix": "改正或取消这个设置",
        "dr_endpoint": "接口 {host}:{port}",
        "dr_proxy": "代理 {host}:{port}(来自 {var})",
        "dr_proxy_fix": "检查 {var} 和代理本身",
        "dr_network_fix": "检查网络和 ANTHROPIC_BASE_URL",
        "dr_reachable": "可以连通",
        "dr_dns_failure": "域名解析失败",
        "dr_connection_refused": "连接被拒绝",
        "dr_timed_out": "连接超时",
        "dr_unreachable": "连不上",
        "dr_run_dir": "状态目录 {path} 可写",
        "dr_run_dir_broken": "状态目录:{error}",
        "dr_run_dir_fix": "换一个可写的 --run-dir",
        "dr_integrity": "sessions.db 完整性 {verdict}",
        "dr_aside_fix": "把这个文件挪到一边",
        "dr_rows_ok": "sessions.db 记录:解码 {n} 条,没有损坏",
        "dr_rows_damaged": "sessions.db 记录:{total} 条中 {n} 条已损坏,续接时会跳过({where})",
        "dr_rows_unread": "sessions.db 的记录无法读取({error})",
        "dr_rows_fix": "续接这些会话时会缺少这些记录;把 sessions.db 挪到一边可让它们从头开始",
        "dr_psycopg": "psycopg {version} 已安装",
        "dr_psycopg_missing": "没有安装 psycopg 3(--state postgresql://... 需要它)",
        "dr_db_reach": "状态数据库 {host}:{port} {verdict}",
        "dr_db_reach_fix": "检查 --state / FLOWER_STATE 里的主机和端口,以及数据库服务是否在运行",
        "dr_db_login": "以 {where} 登录成功",
        "dr_db_login_fix": "检查 --state / FLOWER_STATE 里的用户名、密码和数据库名",
        "dr_db_schema": "flower 表结构版本 {version}(本 flower.py 最高认识 {known})",
        "dr_db_schema_none": "还没有 flower 表结构(首次使用时创建)",
        "dr_db_schema_fix": "换用更新的 flower.py",
        "dr_db_skipped": "状态数据库:未检查{check}({why})",
        "info_lease_lapsed": "已有 {seconds} 秒无法续约锁(状态数据库连不上):先停下 CLI,数据库恢复后本次运行继续",
        "info_lease_wait": "{what} 的租约属于 {host} 上的 pid {pid},它的连接已断;最多等待 {seconds} 秒,"
                           "看它续约(那样本次运行停止)还是过期",
        "added_on_wake": "唤醒时补充",
        "wake_addendum": "人类补充:{words}",
        "ui_continues": "<- 接上次 · 第 {woke} 次唤醒",
        "ui_context": " · 上下文 {context}",
        "ui_retry": "重试:第 {attempt} 次,{delay} 秒后({kind})",
        "ui_near": "上下文 {context} / {window}:即将交接",
        "ui_writing": "交接:旧会话正在写交接文档",
        "ui_handoff_done": "第 {generation} 次交接 -> 新会话 {sid}{degraded};{path}",
        "ui_words": "带着你的话继续",
        "ui_error": "错误({kind}):{message}",
        "ui_result": "{step}:{status} · ${cost:.4f} · {turns} · 第 {attempts} 次尝试",
        "n_turns": "{n} 轮",
        "n_turn": "{n} 轮",
        "st_workspace": "工作区",
        "st_workspace_id": "工作区标识",
        "st_state": "状态库",
        "st_run_dir": "状态目录",
        "st_brief": "需求",
        "st_goal": "目标",
        "st_woke": "唤醒",
        "st_step": "步骤",
        "st_handoff": "交接",
        "st_sessions": "会话",
        "st_last_steps": "最近的步骤:",
        "st_confirmed": "已确认",
        "st_none": "无",
        "st_checks": "{n} 条检查",
        "st_times": "{n} 次",
        "st_context": "上下文 {context}",
        "st_generation": "第 {n} 代,{path}",
        "st_stored": "本工作区存有 {n} 个",
        "st_achieved": "已达成(判定如此;没有新内容的唤醒不再花钱)",
        "st_no_sessions": "还没有存储的会话",
        "st_entries": "{n} 条",
        "st_ambiguous": "有 {n} 个会话以 {sid!r} 开头;请多给几位",
        "st_no_match": "没有以 {sid!r} 开头的会话({prog} sessions --all 可列出全部)",
        "st_pruned": "-- 续接时的精简:{parts}",
        "st_problem": "问题",
        "st_lineage_unreadable": "{path} 无法读取(不是 JSON,或不是普通文件);下次运行会把它移到一边并从头开始",
        "st_lineage_shape": "{path} 的结构不对;下次运行会把它移到一边并从头开始",
        "ui_nothing_new": "目标已达成,也没有新的内容:无事可做(说点新的,或用 --new)",
        "ui_ok": "完成",
        "ui_failed": "失败:{error}",
        "ui_done": "完成 · 共 ${cost:.4f} · 清单 {path}",
        "ui_once": "会话 {sid} · ${cost:.4f} · 清单 {path}",
        "ui_total": "共 ${cost:.4f} · 清单 {path}",
        "ui_banner": "<- 在 {path} 接上上次  {parts}",
        "ui_brief_confirmed": "需求已确认",
        "ui_goal_checks": "目标 {n} 条",
        "ui_work_context": "干活上下文 {context}",
        "ui_wake": "第 {n} 次唤醒",
        "ui_archived": "已归档 {n} 个文件到 {path}",
        "ui_nothing_to_do": '这里还没有任务:{prog} "要做什么"',
        "ui_task_carried": "接着做上次给的任务:{task}",
        "info_set_aside": "{path} 无法读取;已移到 {moved}",
        "info_offline": "{host}:{port} 连不上;等待恢复(最多 {seconds} 秒)",
        "info_online": "{host}:{port} 在 {seconds} 秒后恢复",
        "info_still_offline": "仍然离线({host}:{port}):已等 {waited},最多 {of},{next} 秒后再探测",
        "info_other_workspace": "{path} 里的接续记录属于 {workspace};这里从头开始",
        "info_sessions_gone": "{steps} 的会话已不在存储中;这些步骤从头开始",
        "info_redo": "{steps} 的会话没有进入存储;用同样的输入重新开始",
        "info_not_stored": "会话 {sid} 不在存储中;从头开始",
        "info_not_resumable": "会话 {sid} 无法接上;从头开始",
        "info_mirror_error": "会话存储没能保存这次会话的一部分:{error}",
        "info_legacy_runs": "沿用 {path} 里的 flower 状态(旧的默认位置);要迁移:mv {path}/* {dest}/",
        "info_recovered": "找回了会话 {sid} 里存储漏掉的 {n} 条记录",
        "info_write_failed": "无法写入 {path}({error});工作继续,接续能力受损",
        "info_skipped_rows": "会话 {sid} 有 {n} 条无法读取的存储记录,已跳过",
        "info_cli_quiet": "CLI 已 {waited} 没有消息({why});超过 {bound} 视为卡住",
        "cli_model": "在等模型的回答",
        "cli_tool": "有工具正在运行",
        "cli_stopped": "CLI 进程 {pid} 已被暂停;kill -CONT {pid} 可让它继续",
        "store_damaged": "{path} 已损坏({error});没有重试:把它移到一边(其中的会话将从头开始)或从备份恢复;{prog} doctor 可以检查它",
        "info_answers_unstored": ("会话 {sid} 的 {total} 条回答中有 {n} 条没有进入会话存储"
                                  "(CLI 写不了它的会话记录:{path} 是否已满或只读?);以后的运行无法接上它们"),
        "setup_dir_unusable": "{path} 无法写入 Claude Code CLI 的{what}({why});请在那里腾出空间,或把 {var} 设为可写的目录(未发送任何请求)",
        "setup_what_transcripts": "会话记录",
        "setup_what_copies": "续接会话的副本",
        "setup_low_space": "只剩 {kb} KB",
        "ui_degraded": "接续能力受损:{n} 个问题,见上文",
        "info_answer_lost": "最终回答无法输出到标准输出(已关闭或已满);清单里保存了它的前 4000 个字符",
        "info_unverifiable": "{n} 条检查在这里无法验证",
        "unreachable_question": "判定者认为目标无法达成:{reason}",
        "choice_accept": "按现状接受这份工作:这一步通过",
        "choice_amend": "修改目标",
        "choice_keep_working": "继续干:判定者判错了",
        "choice_stop": "停止",
        "amend_question": "修改后的目标(一句话):",
        "goal_amended": "人类修改了目标:{goal}",
        "judge_is_wrong": "判定者认为目标无法达成({reason})。人类认为判定者判错了:目标可以达成。继续朝它推进。",
        "unreachable_stopped": "已停止:判定者认为目标无法达成,人类选择停止",
        "moved_prompt": "这个工作区现在位于 {new}。本对话中较早的消息提到的 {old} 不是这台机器上的路径,请改用 {new}。",
        "info_notes_restored": "从 {where} 恢复了 {n} 份笔记",
        "info_state_unreadable": "{where} 中的 {what} 无法读取;已忽略",
        "ui_spooled": "{n} 条会话记录只在本地暂存 {path} 中;下次运行会写入",
        "rp_title": "flower 报告",
        "rp_timeline": "时间线",
        "rp_water": "每次回答后的上下文水位",
        "rp_cost": "每步费用与累计费用",
        "rp_tools": "每步的工具调用",
        "rp_goal": "目标与检查",
        "rp_brief": "任务简报",
        "rp_status": "状态",
        "rp_running": "运行中",
        "rp_finished": "已结束",
        "rp_total_cost": "费用",
        "rp_steps": "步骤",
        "rp_sessions": "会话",
        "rp_turns": "回答",
        "rp_handoffs": "交接",
        "rp_runs": "运行次数",
        "rp_generated": "生成于",
        "rp_ok": "步骤完成",
        "rp_failed": "步骤失败",
        "rp_killed": "步骤被终止",
        "rp_mark_handoff": "交接",
        "rp_mark_wake": "唤醒",
        "rp_mark_outage": "断网",
        "rp_mark_wait": "等待",
        "rp_mark_kill": "终止",
        "rp_mark_rescue": "恢复",
        "rp_mark_degraded": "接续受损",
        "rp_mark_verdict": "判定",
        "rp_threshold": "交接阈值",
        "rp_window": "上下文窗口",
        "rp_none": "(没有记录)",
        "rp_step": "步骤",
        "rp_tool_calls": "工具调用",
        "rp_top_tools": "最常用",
        "rp_worker_calls": "工作者的调用",
        "rp_saved": "修剪、截断、外存节省",
        "rp_verdict": "最近判定",
        "rp_wrote": "报告已写入 {path}",
        "rp_cannot_write": "无法把报告写入 {path}:{error}",
        "coordinator_instructions": (
            "你负责协调;动手的工作交给工作者。先做计划,再用 Agent 工具(subagent_type 'worker')把每一块具体工作"
            "(写文件、改文件、运行会改变东西的命令、长时间的调查)交给工作者,每次一个自成一体的任务,附上它需要的路径和事实。"
            "保持你自己的上下文精简:读工作者的简短报告,只为做决定才用 Read、Glob、Grep 和只读的 Bash 看一眼。"
            "工作台索引里列出的东西先复用。"),
        "worker_description": "完成一块自成一体的动手工作,并简短汇报。",
        "worker_instructions": (
            "你是工作者。在工作目录中把交给你的这一个任务完整做完。然后用最多约 30 行回复:结论;证据(你运行或读了什么,"
            "结果如何);产出(你写的文件路径);哪些尚未验证。长输出留在工作台的文件里,只汇报路径。"),
        "delegate_denied": "flower:协调者不亲自改动东西;请把这件事交给工作者(Agent 工具,subagent_type 'worker')。此处被拒绝:{tool}",
        "spilled_output": "[{n} 字符的输出已保存到 {path};需要时请读取(可用 offset/limit 分段)。前 {k} 个字符:]\n{head}",
        "workbench_rules": (
            "工作台({root}):可复用的脚本放在 scripts/,结果和长输出放在 artifacts/,发现写在 notes/;每个文件以一行 "
            "`# desc: 一句话` (或第一行注释)说明它是什么;新写之前先复用 INDEX.md 中列出的;汇报路径,不要贴长内容。"),
        "workbench_prompt": "\n\n工作台(可复用的脚本、产物、笔记):\n\n{index}\n",
        "worker_stopped": "[工作者在汇报之前被停下了(运行被终止)。再次分派剩下的工作之前,先检查工作台和磁盘上它已做了什么。]",
        # judge sandbox (issue 42)
        "judge_write_refused": "判定者只检查工作,不能改动它(已拒绝 {tool})",
        "judge_no_copy": "判定者没有可运行命令的工作区副本",
        "judge_path_refused": "判定者的命令在工作区的副本里运行;请用相对路径,不要用工作区本身的路径",
        # project settings (issue 42)
        "settings_bad": "--settings {value!r} 不是 {choices} 之一",
        "settings_project": "项目(读取:{files},以及上级目录的 CLAUDE.md);冲突时以 flower 自己的规则为准:各角色的工具、钩子、关闭自动压缩",
        "settings_none": "不读取(--settings none:不读 CLAUDE.md 和项目设置)",
        "settings_no_files": "未找到",
        "st_settings": "设置",
        # usage limits (issue 42)
        "info_limit_wait": "已达到用量上限:等待重置,还剩 {left};之后同一个会话继续",
        "limit_past_bound": "用量上限在 {waited} 后才重置,超过了 FLOWER_MAX_LIMIT_WAIT({of})",
        # wake with a new goal (issue 42)
        "wake_new_goal": "\n\n目标已据此重新推导({path});一直做到每条检查都通过:\n\n{goal}",
        # small things (issue 42)
        "ui_continuing": "继续",
        "info_recovered_one": "找回了会话 {sid} 里存储漏掉的 1 条记录",
        "ui_new_without_task": '--new 需要新任务:{prog} --new "要做什么"(什么都没有归档)',
        # Chinese everywhere (issue 42)
        "step_clarify": "澄清",
        "step_goal": "目标",
        "step_work": "工作",
        "st_mark_ok": "成功",
        "st_mark_err": "失败",
        "dr_mark_ok": "正常",
        "dr_mark_fail": "失败",
        "ui_not_a_command": "{word!r} 不是命令;你是想运行 {prog} {hint} 吗?(一个词的任务请用:{prog} go {word})",
        "ui_usage_error": "用法错误:{message}(见 {prog} --help)",
        "ap_unrecognized": "无法识别的参数:{what}",
        "ap_invalid_choice": "参数 {arg}:无效的选项 {what}(可选:{choices})",
        "ap_expected_one": "参数 {arg}:需要一个值",
        "ap_invalid_value": "参数 {arg}:无效的值 {what}",
        "ap_argument": "参数 {arg}:{what}",
        "ap_required": "缺少必需的参数:{what}",
        "ap_whole_number": "参数 {arg}:必须是整数,得到的是 {what}",
        "ap_at_least": "参数 {arg}:至少为 {low},得到的是 {what}",
        "ap_budget": "参数 {arg}:预算必须是大于 0 的美元数,得到的是 {what}",
        "ui_same_words": "与上次相同的话:接着做(需求不追加内容)",
        "budget_reached": "任务的预算已用完:${spent:.4f} / ${cap:.4f};用更高的 --max-cost 再运行即可继续",
        "st_spend": "花费",
        "st_spend_of": "${spent:.4f} / 预算 ${cap:.4f}",
        "st_spend_only": "${spent:.4f}(无预算)",
        "snapshot_too_big": "工作区快照超过 {limit} MB(FLOWER_SNAPSHOT_MAX):未保存,别的机器拿不到这些文件",
        "snapshot_restore_failed": "工作区快照无法恢复:{error}",
        "snapshot_restored": "从 {host} 上 {at} 的快照恢复了 {n} 个文件",
        "snapshot_aside": "快照中会覆盖本地修改的部分已另存到 {path}",
        "snapshot_restored_prompt": "flower 恢复了本任务在 {host} 上改过的 {n} 个文件({at} 的快照):{names}。它们已在磁盘上,不要再写一遍。",
        "st_driver": "驱动者",
        "st_driver_now": "{host} 上的 pid {pid},自 {since},步骤 {step}",
        "st_driver_none": "当前没有 flower 在运行",
        "st_goal_text": "目标内容",
        "snapshot_aside_prompt": "本任务早先的部分修改没有覆盖本地修改,已另存到 {path}(changes.patch 和 files/)。",
        "disk_full": ("磁盘已满:{path} 写不下 flower 要写的内容(No space left on device);"
                      "请在那里腾出空间"),
        "info_from_stream": ("存入了会话 {sid} 中 CLI 已经流式发出但没有记下的 {n} 条消息"
                             "(它被停下了,或写不了会话记录)"),
        "mail_heading": "收到的消息",
        "mail_context": (
            "[mail {id}] 人类在你工作时写了这段话({when})。它不打断任何事:按你的判断完成手头的事,从现在起把它考虑进去。"
            "它也已追加到简报里。\n\n{words}"
        ),
        "ui_mail": "消息 {id} 已交给工作代理:{words}",
        "ui_mail_posted": "消息 {id} 已放入 {path}:正在运行的工作代理会在下一个工具边界收到它(或由下次运行收到)",
        "ui_mail_empty": "没有要说的话:把话作为参数给出,或用 '-' 从标准输入读取",
        "ui_mail_typed": "消息 {id} 已排队:工作代理会在下一个工具边界收到它",
        "ui_question": "? [{id}] {question}\n  在这里回答,或在任何终端运行:{prog} answer {id} \"...\"(等待 {wait})",
        "ui_question_timeout": "问题 {id}:{wait} 内没有回答;代理自行选择并记下它的假设",
        "ask_timeout": "{wait} 内没有收到回答。自己选择看起来最合理的做法并继续;把这个假设及理由记在简报({path})的“未知与假设”下。",
        "ask_nobody": "这里没有人能回答(没有终端,CI 任务)。自己选择看起来最合理的做法并继续;把这个假设及理由记在简报({path})的“未知与假设”下。",
        "qa_title": "问题与回答",
        "ui_heartbeat_tool": "{step} · 仍在运行 {tool} · {waited}",
        "ui_heartbeat_model": "{step} · 仍在等模型回答 · {waited}",
        "side_instructions": "你回答一个人关于这次对话中工作的旁路问题。你是只读的分叉:工作在别处继续。不要改动任何东西;需要查看时可以用 Read、Glob 和 Grep。",
        "side_prompt": "这个人的一个旁路问题。你是这次对话的只读分叉:工作在别处继续。根据你知道的和能 Read 到的简短回答,不要改动任何东西,然后停止;不要继续工作。\n\n问题:{question}",
        "ui_side_cost": "旁路问题已由工作会话 {sid} 的分叉回答 · ${cost:.4f} · 作为单独的一步记在 {path}",
        "ui_side_none": "这个工作区还没有工作会话:没什么可问的",
        "ui_side_empty": "没有给出旁路问题",
        "ui_side_started": "旁路问题已提出:回答到了就会显示(工作继续)",
        "ui_answered": "已留下对 {id} 的回答:代理现在就会收到",
        "ui_answer_empty": "没有给出回答:把话作为参数给出,或用 '-' 从标准输入读取",
        "ui_no_question": "这个工作区里没有等待回答的问题 {id}(正在等待的:{open})",
        "st_driver_now_at": "{host} 上 {path} 中的 pid {pid},自 {since},步骤 {step}",
        "info_handoff_asked": "已请求交接:工作步骤会在下一个边界交接",
        "ui_handoff_posted": "已请求交接({path}):正在运行的工作步骤会在下一个边界交接(或由下次运行从交接内容开始)",
        "hp_help": "显示这份帮助后退出",
        "hp_version": "显示程序的版本号后退出",
        "hp_workspace": "代理的工作目录;它必须已经存在(默认 .)",
        "hp_run_dir": "运行文件(会话库、谱系、清单)放在哪里;默认 <workspace>/.flower",
        "hp_verbose": "显示每段文字和每次工具调用(以及 SDK 日志)",
        "hp_quiet": "只显示错误和最后一行",
        "hp_json": "在标准输出上给 CI 输出 JSON 行(给人看的文字在标准错误上)",
        "hp_lang": "提示、笔记和消息的语言(默认 FLOWER_LANG,否则 en)",
        "hp_store": "用你自己的 SessionStore(一个不带参数调用的工厂)代替 sessions.db",
        "hp_state": "把全部状态放在一个 PostgreSQL 数据库里,供多台机器使用(默认 FLOWER_STATE,否则用本地文件;需要 psycopg)",
        "hp_workspace_id": "工作区在 --state 里的标识(默认 FLOWER_WORKSPACE_ID,否则 git 远端#分支[:子目录],否则路径)",
        "hp_settings": "project:代理读取工作区的 CLAUDE.md 和项目/本地设置(默认,FLOWER_SETTINGS);none:隔离",
        "hp_go_ask": "要做什么;在用过的目录里:要补充的话('-' 从标准输入读取)",
        "hp_go_new": "归档谱系、简报和目标;开始一个新任务",
        "hp_go_rounds": "工作步骤的评判轮数,至少 1(默认 3)",
        "hp_go_no_trim": "续接时不归档旧的大工具结果",
        "hp_go_no_handoff": "从不交接给新的会话",
        "hp_go_window": "上下文窗口的词元数(至少 {min_window})",
        "hp_go_no_goal": "没有目标步骤,也没有评判",
        "hp_go_permission_mode": "工作者的权限模式(默认 acceptEdits)",
        "hp_go_model": "所有代理使用的模型",
        "hp_go_no_delegate": "一个工作者做完所有事,没有协调者和多个工作者(也可用 FLOWER_NO_DELEGATE=1)",
        "hp_go_worker_model": "工作者的模型(默认:与协调者相同)",
        "hp_go_no_snapshot": "不做工作区快照(文件就不随状态一起迁移)",
        "hp_go_max_cost": "整个任务的预算(美元),跨多次运行和多台机器(默认 {max_cost_env},否则沿用之前给的);花完:退出码 {exit_budget},给更高的预算就继续",
        "hp_once_prompt": "提示('-' 从标准输入读取)",
        "hp_once_tools": "逗号分隔的工具,可用且自动批准(默认 Read,Glob,Grep)",
        "hp_once_permission_mode": "权限模式(默认 default)",
        "hp_once_budget": "预算上限,单位美元(> 0)",
        "hp_once_resume": "继续这个会话(唯一的 id 前缀即可)",
        "hp_once_fork": "与 --resume 一起用:分叉成一个新会话",
        "hp_once_model": "会话的模型",
        "hp_sessions_all": "所有工作区,而不只是这一个",
        "hp_show_sid": "会话 id(唯一的前缀即可)",
        "hp_show_raw": "每一条都按存储的原样输出(每行一个 JSON 对象)",
        "hp_report_output": "页面写到哪里(默认:运行目录里的 report.html)",
        "hp_say_words": "正在运行的工作代理应当听到的话('-' 从标准输入读取)",
        "hp_answer_id": "问题的 id,即提问时显示的那个",
        "hp_answer_words": "回答('-' 从标准输入读取)",
        "hp_ask_question": "关于这项工作的旁路问题('-' 从标准输入读取)",
        "hp_ask_model": "旁路问题的模型",
        "hp_cmd_go": "运行任务(默认命令):澄清 -> 目标 -> 工作,并经评判",
        "hp_cmd_once": "一次临时会话(没有谱系)",
        "hp_cmd_status": "唤醒状态、最近的步骤、会话(不需要 SDK)",
        "hp_cmd_doctor": "检查 Python、SDK、CLI、凭据、设置、网络、状态",
        "hp_cmd_sessions": "列出存储的会话",
        "hp_cmd_show": "续接时模型会收到的会话样子(已修剪)",
        "hp_cmd_report": "任务的一个自包含 HTML 页面:时间线、上下文、花费、工具、目标",
        "hp_cmd_say": "给正在运行的工作代理留话:它在下一个工具边界收到",
        "hp_cmd_answer": "回答代理提出的问题(ID 与问题一同显示)",
        "hp_cmd_ask": "旁路问题,由工作会话的只读分叉回答(无论工作是否在运行)",
        "hp_cmd_handoff": "让正在运行的工作步骤在下一个边界交接给一个新会话",
        "hp_handoff": "唤醒时,工作步骤从交接内容开始,而不是恢复原来的会话",
        "hp_description": "让一项长时间的代理任务与 Claude 一起持续进行。在同一目录再次运行,它就接着做。",
        "hp_usage": "{prog} [\"要做什么\"]        (= go)\n       {prog} COMMAND [选项] ...      (COMMAND --help 查看它的选项)",
        "hp_commands": "命令(COMMAND --help 查看它的选项):",
        "hp_exit_codes": "退出码:0 完成 · 1 某一步失败 · 2 用法错误 · 3 配置问题或凭据被拒 · 4 网络中断超过等待时间 · 5 另一个 flower 正在驱动这个工作区 · 6 用量限制的重置时间超过 FLOWER_MAX_LIMIT_WAIT · 7 任务预算已花完 · 130 被中断 · 128+N 被信号 N 停止",
        "hp_usage_prefix": "用法:",
        "hp_positionals": "位置参数",
        "hp_optionals": "选项",
        "hp_global_options": "全局选项(每个命令都有)",
        "er_workspace_not_dir": "工作区 {path} 不是一个目录",
        "er_empty": "{what}是空的{hint}",
        "er_empty_task_hint": ":说明要做什么,或者不带参数以继续",
        "er_what_the_task": "任务",
        "er_what_the_question": "问题",
        "er_what_the_prompt": "提示",
        "er_what_the_answer": "回答",
        "er_what_the_words": "留言",
        "er_what_an_argument": "参数",
        "er_stdin_too_large": "从标准输入读到的{what}超过 {kb} KB;请把它放进工作区里的文件,再引用那个文件",
        "er_stdin_not_utf8": "从标准输入读到的{what}不是有效的 UTF-8",
        "er_not_utf8": "{what}不是有效的 UTF-8",
        "er_too_large": "{what}超过 {kb} KB;请把它放进工作区里的文件,再引用那个文件",
        "er_nul_byte": "{what}含有 NUL 字节",
        "er_no_sdk": "没有安装 claude-agent-sdk(用 'pip install claude-agent-sdk' 安装);status、doctor 和会话库不需要它",
        "er_no_credentials": "没有凭据:请设置 ANTHROPIC_API_KEY(或 ANTHROPIC_AUTH_TOKEN),或用 claude 命令行登录",
        "er_workspace_id": "--workspace-id 必须是非空的一行,最多 1000 个字符",
        "er_state_spec": "--state 需要一个 postgresql://... 连接串(或者不给:用本地文件)",
        "er_fork_needs_resume": "--fork 需要与 --resume SID 一起用",
        "er_no_unique_session": "这个工作区里没有唯一一个以 {prefix} 开头的已存会话",
        "er_run_dir_not_dir": "运行目录 {path} 不是一个目录",
        "er_setting_whole": "{setting} 必须是 >= {low} 的整数",
        "er_setting_number": "{setting} 必须是 >= {low} 的数",
        "er_setting_one_of": "{setting} 必须是以下之一:{allowed}",
        "er_settings_more": "(还有 {n} 个:{prog} doctor)",
        "er_not_a_directory": "{path} 已经存在,但不是目录",
        "er_cannot_create_dir": "无法创建目录 {path}:{error}",
        "er_lock_unwritable": "{path} 无法写入:只读或没有权限({error})",
        "er_json_is_dir": "{path} 是一个目录,这里应当是 JSON 文件",
        "er_cannot_read": "无法读取 {path}:{error}",
        "er_sqlite_is_dir": "{path} 是一个目录,这里应当是 SQLite 文件",
        "er_store_unwritable": "{path} 无法写入:只读或没有权限({error});它原样未动",
        "er_store_busy": "{path} 正忙或已被锁定({error});它原样未动",
        "er_store_unusable": "{path} 不是可用的会话库({error});它原样未动:把它移到一边,或换一个 --run-dir",
        "er_store_unreadable": "{path} 无法读取:只读或没有权限({error})",
        "er_store_spec": "--store 需要 module:factory 的形式,得到的是 {spec}",
        "er_store_factory": "--store {spec}:工厂函数出错,{kind}:{error}",
        "er_store_not_a_store": "--store {spec}:工厂函数返回的不是 SessionStore(需要 append/load)",
        "er_cannot_write_in": "无法在 {path} 中写入:{error}",
        "er_no_psycopg": "--state postgresql://... 需要 psycopg 3:pip install \"psycopg[binary]\"",
        "er_state_conninfo": "--state:不是有效的 postgresql:// 连接串",
        "er_db_refused_connection": "状态数据库 {where} 拒绝了连接:{problem};请检查 --state / {var}",
        "er_db_unreachable_detail": "连不上状态数据库 {where}:{detail}",
        "er_db_unreachable": "连不上状态数据库 {where}",
        "er_db_refused": "状态数据库拒绝了这个操作:{kind}:{error}",
        "er_db_schema_newer": "状态数据库里 flower 的表结构版本是 {found};这个 flower.py 只认识到 {known}:请换用更新的 flower.py",
        "er_usd_above_zero": "{where} 必须是大于 0 的美元数,得到的是 {got}",
        "er_permission_mode": "权限模式 {mode} 不是以下之一:{allowed}",
        "er_spec_budget": "预算 {budget} 必须是正的美元数",
        "er_spec_max_turns": "最大轮数 {n} 至少为 1",
        "er_bypass_as_root": "以 root 身份运行时,CLI 拒绝 bypassPermissions(在沙箱里请设置 IS_SANDBOX=1)",
        "er_sdk_missing": "没有安装 claude-agent-sdk:pip install claude-agent-sdk",
        "er_step_name": "无效的步骤名 {name}",
        "er_step_on_fail": "步骤 {name}:on_fail 必须是以下之一:{allowed}",
        "er_network_down_db": "网络中断超过了 {seconds} 秒(数据库 {host}:{port})",
        "er_interrupted": "已中断",
        "er_stopped_by_signal": "被信号 {signum} 停止",
        "er_unexpected": "意外的错误 {kind}:{error}",
        "er_once_failed": "once 失败:{error}",
        "er_judge_unreachable": "评判认为目标无法达成:{reason}",
        "busy_line": "另一个 flower 正在驱动{what}({who});请等它结束,或先停掉它",
        "busy_session": "另一个 flower 正在驱动会话 {sid}(pid {pid},它的 CLI 的 pid {cli});请等它结束,或先停掉它",
        "busy_nobody_named": "持有者没有留下记录,无法指明是谁",
        "busy_pid": "进程 {pid}",
        "busy_host": ",在 {host} 上",
        "busy_path": ",位于 {path}",
        "busy_since": ",自 {since} 起",
        "busy_since_unknown": ",开始时间不明",
        "busy_step": ",步骤 {step}",
        "lock_what_workspace": "工作区 {name}",
        "lock_what_step": "步骤 {name}",
        "er_url_unusable": "{name}={url} 不是可用的 URL({error})",
        "er_url_want": "{name}={url} 不是可用的 URL(应为 {schemes}://host[:port])",
        "er_url_port": "{name}={url}:端口 {port} 超出范围",
        "warn_not_a_number": "忽略 {name}={raw}:不是非负数",
        "ap_unknown_tool_close": "参数 {arg}:未知的工具 {what};你是想用 {close} 吗?",
        "ap_unknown_tool": "参数 {arg}:未知的工具 {what};已知的工具:{known}",
        "ui_resume_pruned": "续接:已修剪 {what}",
        "os_EACCES": "没有权限",
        "os_EPERM": "不允许的操作",
        "os_EROFS": "只读文件系统",
        "os_ENOENT": "没有这个文件或目录",
        "os_ENOTDIR": "不是目录",
        "os_EISDIR": "是一个目录",
        "os_EEXIST": "文件已存在",
        "os_ELOOP": "符号链接的层数过多",
        "os_ENAMETOOLONG": "文件名太长",
        "os_EIO": "输入/输出错误",
        "os_EDQUOT": "超出了磁盘配额",
        "er_step_failed": "{label} 失败:{error}",
        "er_store_no_module": "--store {spec}:找不到模块 {module}(ModuleNotFoundError)",
        "target_database": "数据库 {host}",
        "er_background": "后台错误",
        "er_network_down": "网络中断超过了 {seconds} 秒({target})",
        "er_stalled": "数据流卡住了:CLI 已有 {seconds} 秒没有消息",
        "er_handoff_timed_out": "交接文档在 {seconds} 秒后超时",
        "er_handoff_failed": "交接文档失败了:{why}",
        "er_handoff_failed_kind": "交接文档失败了({kind})",
        "er_generation_cap": "达到了交接代数的上限(一个步骤里交接了 {n} 次)",
        "er_degraded_twice": "连续两次降级交接:窗口 {window},阈值 {at},水位 {level};阈值多半低于这个步骤的底线(请调高 --window 或 FLOWER_WINDOW)",
        "worker_api_error": "[flower:工作者在汇报之前因 API 错误停下了;它可能已做了部分任务。再次分派剩下的工作之前,先检查工作台和磁盘上它已做了什么。]",
    },
}


def text(key: str, lang: str = "en", **fmt: Any) -> str:
    """Return the user-facing string ``key`` in ``lang`` (falling back to English), formatted (a
    :class:`Said` field in ``lang`` too)."""
    table = TEXTS.get(lang) or TEXTS["en"]
    template = table.get(key, TEXTS["en"][key])
    return template.format(**{k: in_lang(v, lang) for k, v in fmt.items()}) if fmt else template


class Said(str):
    """A line from the text tables whose language is chosen later: it reads as the English line, and
    ``in_lang`` says it in another. An error raised where no language is known carries one; the
    command line says it in the user's language."""

    def __new__(cls, render: Callable[[str], str]) -> "Said":
        line = super().__new__(cls, render("en"))
        line.render = render
        return line

    def in_lang(self, lang: str) -> str:
        """This line in ``lang``."""
        return self.render(lang)

    def __copy__(self) -> "Said":
        return self

    def __deepcopy__(self, memo: dict) -> "Said":
        return self

    def __reduce__(self) -> tuple:
        return str, (str(self),)   # pickled, it is the English line


def said(key: str, **fmt: Any) -> Said:
    """``text(key, lang, **fmt)`` for a ``lang`` chosen when the line is shown; a field that is itself
    :class:`Said` is said in the same language."""
    return Said(lambda lang: text(key, lang, **fmt))


def in_lang(value: Any, lang: str) -> Any:
    """``value`` said in ``lang`` when it is :class:`Said`, else ``value`` itself."""
    return value.in_lang(lang) if isinstance(value, Said) else value


# --- Utilities: errors, atomic write, file lock, safe names, redaction, JSON state ---

EXIT_OK, EXIT_STEP_FAILED, EXIT_USAGE, EXIT_SETUP, EXIT_OFFLINE, EXIT_BUSY, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 5, 130
EXIT_BUDGET = 7   # the job's budget (--max-cost) is spent; a higher one continues it


class FlowerError(Exception):
    """An error with a one-line message for the user and the exit code it maps to."""

    def __init__(self, message: str, exit_code: int = EXIT_SETUP):
        super().__init__(message)
        self.exit_code = exit_code

    def said(self, lang: str) -> str:
        """The message in ``lang`` (one from the text tables is said in it; any other as it is)."""
        return str(in_lang(self.args[0], lang)) if self.args else ""


def ensure_private_dir(path: str) -> str:
    """Create ``path`` (and parents) with mode 0700 if missing; raise FlowerError if it is a file."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise FlowerError(said("er_not_a_directory", path=path), EXIT_SETUP)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise FlowerError(said("er_cannot_create_dir", path=path, error=os_reason(exc)), EXIT_SETUP) from None
    return path


def atomic_write(path: str, data: str | bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` atomically: unique temp file in the same dir, fsync, os.replace.

    A crash at any point leaves either the old file or the new one, never half of either.
    """
    directory = os.path.dirname(os.path.abspath(path))
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not exc.filename:
            raise named_error(exc, path) from exc
        raise


def named_error(exc: OSError, path: str) -> OSError:
    """``exc`` naming ``path`` when it names no file (a failed ``write()`` or ``fsync()`` does not), so
    the line that reports it can say where the disk was full."""
    if exc.filename or exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), path)


def os_error_line(exc: OSError, lang: str = "en", where: str | None = None) -> str:
    """One line for an OS error: a full disk says so and names the directory flower was writing
    (the error's file's, else ``where``); any other error is its text and its file."""
    path = exc.filename or where
    if exc.errno == errno.ENOSPC:
        directory = str(path) if path and os.path.isdir(path) else os.path.dirname(str(path or "")) or "?"
        return text("disk_full", lang, path=directory)
    return f"{in_lang(os_reason(exc), lang)}{': ' + str(path) if path else ''}"


def os_reason(exc: OSError) -> str:
    """The system's reason for ``exc`` (``Permission denied``), said in the user's language when the
    text tables know its errno."""
    key = f"os_{errno.errorcode.get(exc.errno or 0, '')}"
    return said(key) if key in TEXTS["en"] else str(exc.strerror or exc)


def append_lines(path: str, data: bytes, mode: int = 0o600) -> None:
    """Append whole lines to ``path`` in one write, then fsync. When the file's last line was torn (a
    crash mid-write) the new lines start on a line of their own, so only the torn one is lost."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, mode)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    except OSError as exc:
        raise named_error(exc, path) from None
    finally:
        os.close(fd)


class FileLock:
    """Advisory inter-process lock on ``path`` (created 0600), for read-modify-write of JSON files.

    Re-entrant within one thread of one process is *not* supported; keep critical sections short.
    """

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._thread_lock = threading.Lock()

    def __enter__(self) -> "FileLock":
        self._thread_lock.acquire()
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            if fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._fd is not None:
                if fcntl is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
        finally:
            self._fd = None
            self._thread_lock.release()


def flock_holder(path: str) -> int | None:
    """The pid of a process holding a ``flock`` on ``path``, from /proc/locks (None elsewhere, or when
    none is found)."""
    try:
        info = os.stat(path)
        with open("/proc/locks", "rb") as fh:
            table = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        if "FLOCK" in fields and "->" not in fields:   # "->": a process waiting for the lock
            at = fields.index("FLOCK")
            if len(fields) > at + 4 and fields[at + 4] == device and fields[at + 3].isdigit():
                return int(fields[at + 3])
    return None


class StepAbort(Exception):
    """Raised by a gate or a step to stop the workflow with a message (exit code 1)."""


class Offline(FlowerError):
    """The state database cannot be reached right now (exit code 4 when it stays away)."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_OFFLINE)


class Busy(FlowerError):
    """Another live flower holds the lock of this workspace (or step); exit code 5."""

    def __init__(self, message: str, holder: dict):
        super().__init__(message, EXIT_BUSY)
        self.holder = holder


def lock_what(what: str) -> str:
    """What a lock guards (``workspace ~/x``, ``step work``), said in the reader's language."""
    head, _, name = what.partition(" ")
    key = f"lock_what_{head}"
    return said(key, name=name) if name and key in TEXTS["en"] else what


def holder_words(holder: dict, lang: str) -> str:
    """A lock's holder as far as it is known (pid, host, path, since, step), in ``lang``."""
    if holder.get("pid") is None:
        return text("busy_nobody_named", lang)
    parts = [text("busy_pid", lang, pid=holder["pid"])]
    parts += [text(f"busy_{field}", lang, **{field: holder[field]}) for field in ("host", "path", "since")
              if holder.get(field)]
    parts += [] if holder.get("since") else [text("busy_since_unknown", lang)]
    parts += [text("busy_step", lang, step=holder["step"])] if holder.get("step") else []
    return "".join(parts)


class DriverLock:
    """One driver at a time: an exclusive, non-blocking ``flock`` held for as long as the holder lives.

    The kernel drops the lock when the holder's process dies, however it dies, so a stale lock never
    needs cleaning up. The file holds the holder's description (pid, host, its own workspace path,
    since, what, step) for the one line a second flower prints. The descriptor is not inherited by
    child processes, so the CLI child can never keep the lock alive.
    """

    def __init__(self, path: str, what: str, workspace: str = ""):
        self.path = path
        self.what = what
        self.workspace = workspace
        self._fd: int | None = None
        self.info: dict = {}

    def acquire(self, step: str = "") -> "DriverLock":
        """Take the lock or raise :class:`Busy` naming the holder."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            raise FlowerError(said("er_lock_unwritable", path=self.path, error=os_reason(exc)),
                              EXIT_SETUP) from None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                holder = self.holder()
                raise Busy(self.busy_line(holder), holder) from None
        self._fd = fd
        self.info = {"pid": os.getpid(), "host": socket.gethostname(), "path": self.workspace, "since": iso_now(),
                     "what": self.what, "step": step}
        self._write()
        return self

    def set_step(self, step: str) -> None:
        """Say which step the holder is in now (shown to a second flower)."""
        if self._fd is not None and self.info.get("step") != step:
            self.info["step"] = step
            self._write()

    def _write(self) -> None:
        with contextlib.suppress(OSError):
            data = json.dumps(self.info).encode("utf-8")
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)

    def holder(self) -> dict:
        """The current holder's description: what it wrote (read again for a moment while it is empty: a
        holder writes it just after taking the lock), else the pid the kernel names (Linux), else {}."""
        deadline = time.monotonic() + 0.3
        while True:
            value = _peek_json(self.path)
            if isinstance(value, dict) and value.get("pid") is not None:
                return value
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        pid = flock_holder(self.path)
        return {"pid": pid, "host": socket.gethostname()} if pid is not None else {}

    def busy_line(self, holder: dict) -> Said:
        """The one line a second flower prints: the holder as far as it is known, the rest in words."""
        return said("busy_line", what=lock_what(self.what), who=Said(lambda lang: holder_words(holder, lang)))

    def release(self) -> None:
        """Let go (idempotent); the kernel does the same when the process dies."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "DriverLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


_SAFE_ASCII = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
# CJK Extension A, Unified Ideographs, Compatibility Ideographs. Compared, not a regex: a character
# class over these ranges takes about 3 ms to compile, a tenth of what ``status`` does besides.
_SAFE_RANGES = (("\u3400", "\u4dbf"), ("\u4e00", "\u9fff"), ("\uf900", "\ufaff"))


def _safe_char(ch: str) -> bool:
    return ch in _SAFE_ASCII or any(low <= ch <= high for low, high in _SAFE_RANGES)


def safe_name(name: str) -> str:
    """Turn ``name`` into a file-name component: letters, digits, ``-_.`` and CJK kept, the rest
    replaced by ``_``; a short hash is added whenever anything was replaced or shortened, so two
    different names never collide. Never returns ``""``, ``.`` or ``..``.
    """
    kept = "".join(ch if _safe_char(ch) else "_" for ch in name)
    changed = kept != name or len(kept) > 80 or kept.strip(".") == ""
    kept = kept[:80].lstrip(".") or "step"
    if changed:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        kept = f"{kept}-{digest}"
    return kept


def _tilde(path: str) -> str:
    """``path`` with the home directory shown as ``~`` (for messages)."""
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if home != "/" and (path == home or path.startswith(home + os.sep)) else path


def program_name(argv0: str | None = None) -> str:
    """How the user invoked flower, for usage lines and suggestions: ``flower`` from the installed
    command, ``python3 flower.py`` when the file is run (``argv0`` defaults to ``sys.argv[0]``). Any
    other caller (a test runner, a program calling ``main``) gets ``python3 flower.py``."""
    base = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    if re.fullmatch(r"flower[\w-]*", base):
        return base
    return "python3 flower.py"


def _human_tokens(n: int | None) -> str:
    if not n:
        return "0"
    return f"{n / 1_000_000:.2f}M" if n >= 1_000_000 else f"{n / 1000:.1f}K" if n >= 1000 else str(n)


def _lang(args: argparse.Namespace) -> str:
    lang = args.lang or os.environ.get("FLOWER_LANG", "en") or "en"
    return lang if lang in TEXTS else "en"


MAX_PROMPT_BYTES = 256 * 1024


_CONTROL = _lazy_re(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def sanitize(value: str) -> str:
    """Model text made safe for a terminal: escape sequences (cursor moves, colours, window titles)
    and control characters other than newline and tab are removed."""
    return _CONTROL.sub("", value) if value else value


# --- Redaction: one rule for every place text leaves flower's memory ---
#
# One rule for every boundary where text leaves flower's memory: prompts flower writes, notes, handoff
# documents, retired transcripts, spill files, manifest rows, events, terminal and error lines. Values
# are redacted *before* they are encoded (strings inside a structure, then json.dumps), so a JSON line
# always parses and an escape like ``\n`` never hides a secret from a word boundary.
#
# Three kinds of rule, in this order: the literal values of credential variables; key blocks that span
# lines (PEM, PGP, PuTTY); token shapes and word rules (names, headers, flags, URLs), each of which only
# ever looks at one line. Speed: every pattern starts with a literal (the regex engine jumps from one
# occurrence to the next instead of trying every position); the word rules are tried only where their
# words occur (found once per text), the assignment rule only where the regex engine finds a marker in a
# name that an operator or a flag's value follows; on a long text the shape rules run only on the lines
# that hold a token-like run a shape may begin (a byte scan of an ASCII image), and a word (or a marker
# pattern) is not looked for where a rare letter of it or a shorter word it holds is missing (see
# _GatedPlaces). _redact_reference() runs every rule over the whole text, at every place of its words,
# and the tests check that redact() gives the same output.

REDACTED = "[REDACTED]"
# a token starts after a non-token character, or right after a JSON escape such as ``\n``
_START = r"(?:(?<![A-Za-z0-9_\-])|(?<=\\[nrt]))"
_TOK = r"[A-Za-z0-9_\-]"
_WB = r"(?:\b|(?<=\\[nrt]))"
# a quoted value at any depth of JSON escaping: "v", \"v\", \\\"v\\\" ...
_ESCAPED_QUOTED = r"\\+\"[^\"\n]*?\\+\""


def _ascii_re(pattern: str, flags: int = 0) -> _LazyPattern:
    """Redaction patterns are ASCII: ``\\s``/``\\d``/``\\b`` and case folding never reach beyond it,
    which is what lets the prefilter scan an ASCII image of the text."""
    return _lazy_re(pattern, flags | re.ASCII)


# (kind, prefixes, pattern): token shapes recognised without a name. A pattern begins with one of its
# prefixes (so the regex engine jumps from one to the next), a match counts only where a token starts
# (_token_start), and the token-like run it begins is 20+ characters long, so the prefilter's scan for
# such runs (_shape_run) finds every one.
_SHAPES = [
    ("anthropic/openai", ("sk-",), _ascii_re(r"sk-(?:ant-|proj-|svcacct-|admin-)?" + _TOK + "{16,}")),
    ("stripe", ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "pk_live_", "pk_test_"),
     _ascii_re(r"[srp]k_(?:live|test)_[A-Za-z0-9]{12,}")),
    ("github", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
     _ascii_re(r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("gitlab", ("glpat-", "glrt-", "gldt-", "glptt-", "glft-", "glimt-", "glcbt-", "glsoat-"),
     _ascii_re(r"gl(?:pat|rt|dt|ptt|ft|imt|cbt|soat)-" + _TOK + "{20,}")),
    ("npm", ("npm_",), _ascii_re(r"npm_[A-Za-z0-9]{30,}")),
    ("aws key id", ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA"),
     _ascii_re(r"A(?:KIA|SIA|GPA|IDA|ROA|NPA|NVA|IPA)[A-Z0-9]{16}(?![A-Za-z0-9])")),
    ("slack token", ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xapp-"),
     _ascii_re(r"x(?:ox[abposr]|app)-[A-Za-z0-9\-]{15,}")),
    ("google api key", ("AIza",), _ascii_re(r"AIza" + _TOK + "{30,}")),
    ("google oauth access token", ("ya29.",), _ascii_re(r"ya29\." + _TOK + "{20,}")),
    ("google oauth client secret", ("GOCSPX-",), _ascii_re(r"GOCSPX-" + _TOK + "{20,}")),
    ("jwt", ("eyJ",), _ascii_re(r"eyJ" + _TOK + r"{17,}\." + _TOK + r"{8,}\." + _TOK + "{8,}")),
    ("hugging face", ("hf_", "api_org_"), _ascii_re(r"(?:hf|api_org)_[A-Za-z0-9]{30,}")),
    ("sendgrid", ("SG.",), _ascii_re(r"SG\." + _TOK + r"{20,}\." + _TOK + "{20,}")),
    ("digitalocean", ("dop_v1_", "doo_v1_", "dor_v1_"), _ascii_re(r"do[opr]_v1_[a-f0-9]{64}")),
    ("databricks", ("dapi",), _ascii_re(r"dapi[a-f0-9]{32}(?:-[0-9]+)?")),
    ("mailgun", ("key-",), _ascii_re(r"key-[a-f0-9]{32}")),
    ("shopify", ("shpat_", "shpss_", "shpca_", "shppa_"), _ascii_re(r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}")),
    ("heroku", ("HRKU-",), _ascii_re(r"HRKU-" + _TOK + "{20,}")),
    ("atlassian", ("ATATT",), _ascii_re(r"ATATT" + _TOK + r"{20,}[A-Za-z0-9_\-=]*")),
    ("pypi", ("pypi-AgE",), _ascii_re(r"pypi-AgE" + _TOK + "{30,}")),
    ("terraform", (".atlasv1.",), _ascii_re(r"\.atlasv1\." + _TOK + "{40,}")),
    ("vault", ("hvs.", "hvb.", "hvr."), _ascii_re(r"hv[sbr]\." + _TOK + "{24,}")),
    ("linear", ("lin_api_", "lin_oauth_"), _ascii_re(r"lin_(?:api|oauth)_[A-Za-z0-9]{32,}")),
    ("notion", ("secret_", "ntn_"), _ascii_re(r"(?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{40,})(?![A-Za-z0-9])")),
    ("age", ("AGE-SECRET-KEY-1",), _ascii_re(r"AGE-SECRET-KEY-1[0-9A-Z]{50,}")),
    ("square", ("sq0atp-", "sq0csp-", "sq0idp-", "EAAA"),
     _ascii_re(r"(?:sq0(?:atp|csp|idp)-" + _TOK + "{20,}|EAAA" + _TOK + "{56,})")),
    # the first part is a user id (17-20 digits) in base64, which starts with one of these
    ("discord bot", ("MT", "Mj", "Mz", "ND", "NT", "Nj", "Nz", "OD", "OT"),
     _ascii_re(r"(?:M[Tjz]|N[DTjz]|O[DT])" + _TOK + r"{22,26}\." + _TOK + r"{6}\." + _TOK + "{27,}")),
    ("telegram bot", (":AA",), _ascii_re(r"[0-9]{8,10}:AA" + _TOK + r"{33}(?!" + _TOK + ")")),
]
_RUN_PREFIXES = ("sk-", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "pk_live_", "pk_test_", "ghp_", "gho_",
                 "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "glrt-", "gldt-", "glptt-", "glft-", "glimt-",
                 "glcbt-", "glsoat-", "npm_", "AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA",
                 "xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xapp-", "AIza", "GOCSPX-", "eyJ", "hf_",
                 "api_org_", "dop_v1_", "doo_v1_", "dor_v1_", "dapi", "key-", "shpat_", "shpss_", "shpca_",
                 "shppa_", "HRKU-", "ATATT", "pypi-AgE", "lin_api_", "lin_oauth_", "secret_", "ntn_",
                 "AGE-SECRET-KEY-1", "sq0atp-", "sq0csp-", "sq0idp-", "EAAA")
_DOT_PREFIXES = ("ya29.", "SG.", "hvs.", "hvb.", "hvr.", ".atlasv1.")
_DISCORD_PREFIXES = ("MT", "Mj", "Mz", "ND", "NT", "Nj", "Nz", "OD", "OT")
_RUN_STARTS = tuple(p.encode() for p in _RUN_PREFIXES + _DISCORD_PREFIXES)
_DOT_ENDS = tuple(p.encode() for p in _DOT_PREFIXES)   # each ends with "."
_RUN_HEADS = frozenset(p[:2] for p in _RUN_STARTS)      # each prefix is 2+ characters long
_RUN = b"a" * 20
_RUN_TABLE = bytes(97 if chr(i).isascii() and (chr(i).isalnum() or chr(i) in "_-") else 32 for i in range(256))

# key material that spans lines: the block goes whole (with or without its END line, which is looked
# for within 20000 characters: a key is shorter, and a BEGIN without an END costs no scan to the end)
_BLOCKS = [
    ("PRIVATE KEY-----", _ascii_re(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]{0,20000}?-----END [A-Z0-9 ]*PRIVATE KEY-----"
        r"|(?:[ \t]*(?:\\+n|\r?\n)[ \t]*(?:(?:Proc-Type|DEK-Info):[^\n\\]*|[A-Za-z0-9+/=]{8,}(?![A-Za-z0-9+/=:\-])))*)")),
    ("PGP PRIVATE KEY BLOCK-----", _ascii_re(
        r"-----BEGIN PGP PRIVATE KEY BLOCK-----(?:[\s\S]{0,20000}?-----END PGP PRIVATE KEY BLOCK-----|"
        r"(?:[ \t]*(?:\\+n|\r?\n)(?:[ \t]*(?:\\+n|\r?\n))?[ \t]*(?:[A-Za-z\-]+:[^\n\\]*|=?[A-Za-z0-9+/=]{4,}(?![A-Za-z0-9+/=:\-])))*)")),
    ("Private-Lines:", _ascii_re(r"Private-Lines:[ \t]*[0-9]+(?:[ \t]*(?:\\+n|\r?\n)[ \t]*[A-Za-z0-9+/=]{4,}(?![A-Za-z0-9+/=:\-]))+")),
]

_AUTH_SCHEMES = ("bearer", "basic", "token", "bot", "digest", "negotiate", "ntlm", "sso-key", "apikey")
# The patterns below are matched where their first word occurs (see _anchored): none starts with a
# lookbehind or a character class, which would make the regex engine try every position of the text.
# ``Authorization: Bearer x`` (any scheme): the scheme word stays; one word after it, else it is prose
_AUTH_HEADER = _ascii_re(
    r"(?i)(authorization(\\*[\"']?)[ \t]*[:=][ \t]*(\\*[\"']?)"
    r"(?:(?:bearer|basic|token|bot|digest|negotiate|ntlm|sso-key|apikey)[ \t]+)?)([^\s\"',;\\]+)")
_BEARER = _ascii_re(r"((?i:bearer)[ \t]+)([A-Za-z0-9._~+/=\-]{16,})")
# ``scheme://user:password@host``: the password goes, the user and host stay
_URL_PASSWORD = _ascii_re(r"(://[^/\s:@\"']*:)([^/\s@\"']+)@")
_URL_KEY_USER = _ascii_re(r"(://)([0-9a-f]{32})(?=(?::[^/\s@\"']*)?@)")           # Sentry DSN's public key
_WEBHOOK_URL = _ascii_re(r"(://(?:hooks\.slack\.com/(?:services|workflows|triggers)/|(?:[a-z]+\.)?discord(?:app)?"
                         r"\.com/api/webhooks/[0-9]+/))([A-Za-z0-9_/\-]{8,})")
_COOKIE_HEADER = _ascii_re(r"(?i)(cookie\\*[\"']?[ \t]*:[ \t]*\\*[\"']?)([^\n\"'\\]+)")
_COOKIE_PAIR = _ascii_re(r"([A-Za-z0-9_.!#$%&'*+^`|~\-]+=)([^;,\s]+)")
_COOKIE_ATTRS = frozenset({"path", "domain", "expires", "max-age", "samesite", "secure", "httponly", "priority",
                           "version", "comment", "partitioned"})
_USER_FLAG = _ascii_re(r"((?:-u |--user[ =])\\*[\"']?[^\s:\"'\\]+:)([^\s\"'\\]+)")
_MYSQL_FLAG = _ascii_re(r"((?i:mysql(?:dump|admin|import|sh|check|slap)?)\b[^\n]*?[ \t]-p)"
                        r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'\\]+)")
_NETRC = _ascii_re(r"(password[ \t]+)([^\s\\\"']+)(?=[ \t]*(?:$|\\|[\"',;]|[ \t]\w))", re.M)
_NETRC_BEFORE = _ascii_re(r"(?:.*(?:\\+n|^))?[ \t]*$|.*" + _WB + r"(?:machine|default)\b.*[ \t]$")
_SIG_PARAM = _ascii_re(r"(?i)(sig=)([^&\s\"'#\\]+)")
# ``KEY = value`` / ``KEY: value`` / ``"KEY": "value"`` / ``\"key\": \"value\"`` / ``--key value``,
# matched at the start of a name that holds one of _NAME_MARKERS (see _redact_assignments)
_ASSIGNMENT = _ascii_re(
    r"(\\*[\"']?)(--?)?([A-Za-z_][A-Za-z0-9_.\-]{0,80})\1"
    r"([ \t]*(?:=(?!=)|:(?![=:]))[ \t]*|(?(2)[ \t]+(?![\-\s])|(?!)))"
    r"(" + _ESCAPED_QUOTED + r"|\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|(?:[^\s\"',;&}\])\\]|\\(?![nrt\"\\]))+)?")
_NAME_TABLE = bytes(97 if chr(i).isascii() and (chr(i).isalnum() or chr(i) in "_.-") else 32 for i in range(256))
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
# every secret name holds one of these (lowercase): where none occurs, no assignment rule can apply
_NAME_MARKERS = ("passw", "passphrase", "pwd", "token", "secret", "key", "cred", "auth", "dsn", "jwt", "webhook",
                 "connection", "signature")
# In the lowercase image, a marker in a name that an operator follows (after the quote that closes the
# name), or, when the marker is not where the name starts (a flag's starts with its dashes), a space and
# a value. ``key`` and ``signature`` name a secret only after another part (``api_key``, ``amz_signature``),
# so a name that starts with them (``key=len``, ``keys=6``) is not looked at. One pattern for the markers
# that share a head: one scan of the text finds them all.
_NAMED = r"[a-z0-9_.\-]*\\*[\"']?"


def _marker_pattern(head: str, rests: str, starts: bool) -> _LazyPattern:
    """``head`` then one of ``rests`` (``|``-separated, or nothing), as _MARKER_ASSIGNED says; the
    head comes first, so the regex engine jumps from one place of it to the next. A match is the head
    alone (the rest is looked ahead at): what follows it, up to a flag's value, may hold the next name's
    marker (``x_token_a token=v``), which a match that took it in would hide."""
    rest = f"(?:{rests})" if rests else ""
    inside = f"(?<=[a-z0-9_.\\-]{head}){rest}{_NAMED}(?:[ \\t]*[=:]|[ \\t]+[^\\-\\s])"
    return _ascii_re(f"{head}(?={inside}|{rest}{_NAMED}[ \\t]*[=:])" if starts else f"{head}(?={inside})")


_MARKER_RESTS = (("pass", "w|phrase"), ("pwd", ""), ("token", ""), ("secret", ""), ("key", ""), ("cred", ""),
                 ("auth", ""), ("dsn", ""), ("jwt", ""), ("webhook", ""), ("connection", ""), ("signature", ""))
_MARKER_ASSIGNED = [_marker_pattern(head, rests, head not in ("key", "signature")) for head, rests in _MARKER_RESTS]
_SECRET_WORDS = frozenset({"password", "passwd", "pwd", "passphrase", "token", "secret", "apikey", "credential",
                           "credentials", "auth", "authorization", "authtoken", "dsn", "jwt", "webhook",
                           "connectionstring"})
# a part that ends in one of these is a secret word too (``PGPASSWORD``, ``csrftoken``, ``AccountKey``)
_SECRET_ENDINGS = ("password", "passwd", "passphrase", "token", "secret", "apikey", "accesskey", "secretkey",
                   "privatekey", "accountkey", "authkey", "clientkey", "storagekey")
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"),
                           ("auth", "key"), ("signing", "key"), ("encryption", "key"), ("master", "key"),
                           ("account", "key"), ("client", "key"), ("storage", "key"), ("connection", "string"),
                           ("amz", "signature")})
_NOT_SECRET_LAST = frozenset({"count", "counts", "len", "length", "size", "limit", "max", "min", "type", "kind",
                              "name", "names", "id", "ids", "path", "file", "dir", "url", "env", "var", "header",
                              "ttl", "expiry", "expires", "timeout", "policy", "hint", "prompt", "field", "label",
                              "sock", "socket", "method", "methods", "mode", "provider", "backend", "scheme",
                              "endpoint", "host", "port", "realm", "user", "username", "handler", "handlers",
                              "plugin", "enabled", "required", "algorithm", "issuer", "audience", "format",
                              "version", "headers", "class", "module", "uri", "location", "info", "hdr"})
_NAME_PARTS = _ascii_re(r"[_.\-]+|(?<=[a-z0-9])(?=[A-Z])")
_PLAIN_VALUE = _ascii_re(r"(?i)[-+]?\d+(?:[.,]\d+)*|true|false|null|none|nil|yes|no|\**|x+|\.{3}|"
                         r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^>]*>|\{\{.*\}\}|\{[A-Za-z0-9_.]*\}|"
                         r"%[sdr]|%\([A-Za-z_]+\)[sdr]|0x[0-9a-f]+|\[REDACTED\]?")
# code, not a value: a call or subscript (``os.environ[``, ``getpass.getpass(``), an attribute path,
# a command substitution
_EXPRESSION = _ascii_re(r"[(\[{].*|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*[(\[].*|"
                        r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\$\(.*|`.*")
_IDENTIFIER = _ascii_re(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED = _ascii_re(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_QUOTE = _ascii_re(r"\\*[\"']")
_NOT_SPACE = _ascii_re(r"[^\s\"'\\]*")
_PROSE_AFTER = ",;}])#\"'\\&"
_CREDENTIAL_CHARS = _ascii_re(r"[A-Za-z0-9+/=_\-.~!@#$%^:]+")


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    """Whether ``name`` names a secret. The rule: split the name into its parts (at ``_``, ``-``,
    ``.`` and camelCase humps); it is a secret name when one part is a whole secret word (password,
    passwd, pwd, passphrase, token, secret, apikey, credential(s), auth, authorization, dsn, jwt,
    webhook) or ends in password, token, secret, apikey, accesskey, ... (``PGPASSWORD``),
    or two adjacent parts are a secret pair (api/access/private/secret/auth/signing/encryption/master/
    account/client/storage key, connection string, amz signature), and the last part does not say the value is about
    the secret rather than the secret itself (``token_count``, ``password_file``, ``api_key_id``,
    ``auth_method``: count, file, id, path, method, user, ...; ``webhook_url`` is the secret itself).
    So ``token``, ``auth_token``, ``GITHUB_TOKEN``, ``db_password``, ``client_secret``, ``api-key``,
    ``apiKey``, ``SENTRY_DSN``, ``DOCKER_AUTH_CONFIG`` and ``X-Amz-Signature`` are secret names; ``tokenizer``, ``tokens``,
    ``secretary``, ``passwordless``, ``author`` and ``keyboard`` are not (a part must *be* the word)."""
    parts = [p.lower() for p in _NAME_PARTS.split(name) if p]
    if not parts:
        return False
    if parts[-2:] == ["webhook", "url"]:
        return True
    if parts[-1] in _NOT_SECRET_LAST:
        return False
    if any(p in _SECRET_WORDS or p.endswith(_SECRET_ENDINGS) for p in parts):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(parts, parts[1:]))


@functools.lru_cache(maxsize=4096)
def _only_auth(name: str) -> bool:
    """Whether ``auth`` is all that makes ``name`` a secret name (``AUTH``, ``smtp_auth``)."""
    parts = [p.lower() for p in _NAME_PARTS.split(name) if p]
    return "auth" in parts and not _secret_name("_".join(p for p in parts if p != "auth"))


def _could_be_secret(value: str) -> bool:
    """Values that cannot be secrets stay: empty, numbers, booleans, null, placeholders, masks."""
    value = value.strip()
    return bool(value) and not value.startswith(("<", "${", "{{")) and not _PLAIN_VALUE.fullmatch(value)


def _credential_like(value: str) -> bool:
    """A bare word that looks like a credential rather than a word or a variable: 6+ characters of the
    kinds credentials use, mixing letters and digits (or 20+ of them with no ``_``, unlike a name)."""
    return len(value) >= 6 and bool(_CREDENTIAL_CHARS.fullmatch(value)) and (
        (len(value) >= 20 and "_" not in value)
        or (any(map(str.isdigit, value)) and any(map(str.isalpha, value))))


def _variable(value: str) -> bool:
    """A name with no digit in it (``t``, ``password``, ``PlainToken``, ``DEFAULT_TOKEN``): in code, a
    variable; in a document, a placeholder or a word."""
    return bool(_IDENTIFIER.fullmatch(value)) and not any(map(str.isdigit, value))


def _line_rest(text: str, at: int) -> str:
    end = text.find("\n", at)
    return text[at:] if end < 0 else text[at:end]


def _expression(value: str) -> bool:
    """Code rather than a value: a call or subscript, an attribute path (``os.environ``,
    ``settings.API_KEY``; not ``s.<long random part>``), a command substitution."""
    if not _EXPRESSION.fullmatch(value):
        return False
    return not (_DOTTED.fullmatch(value) and any(len(p) >= 16 and any(map(str.isdigit, p))
                                                 for p in value.split(".")))


def _connection_string(name: str) -> bool:
    parts = [p.lower() for p in _NAME_PARTS.split(name) if p]
    return "connectionstring" in parts or ("connection", "string") in zip(parts, parts[1:])


def _literal_value(m: re.Match) -> tuple[int, int] | None:
    """Where the literal assigned by an ``_ASSIGNMENT`` match is (the span to replace), or None when the
    name is not a secret name or the value is code (a call, a subscript, an attribute, a variable, an
    operand), a placeholder, documentation or prose."""
    quote, dashes, name, sep, value = m.group(1, 2, 3, 4, 5)
    if not value or not _secret_name(name):
        return None
    q = ""
    if value[0] in "\"'\\":
        found = _QUOTE.match(value)
        if found and value.endswith(found.group()) and len(value) >= 2 * len(found.group()):
            q = found.group()
    flag = not sep.strip()
    spaced = not flag and sep != sep.strip()
    if not q and not flag and (quote or len(value) < 4 or (spaced and _variable(value))):
        return None   # ``{"password": password}``, ``token = t``, ``password: str``: code
    if _only_auth(name) and not (len(value) >= 14 and _credential_like(value.strip("\\\"'"))):
        return None   # ``AUTH=CRAM-MD5`` names a mechanism; docker's ``"auth": "<base64>"`` is a credential
    start, end = m.start(5), m.end(5)
    inner = value[len(q):len(value) - len(q)] if q else value
    if flag:   # ``--password X``: a flag's next word, when it is a literal
        ok = _could_be_secret(inner) and (q or _credential_like(value)) and not _expression(value)
        return (start + len(q), end - len(q)) if ok else None
    if sep[0] in " \t" and ":" in sep:
        return None   # ``signature : Signature`` documents a parameter
    if spaced:   # ``key: value`` / ``key = value``: a document's line ends there, code's goes on
        rest = _line_rest(m.string, end).strip()
        if rest and rest[0] not in _PROSE_AFTER and not _credential_like(inner):
            return None
    if q:
        return (start + len(q), end - len(q)) if _could_be_secret(inner) and len(inner) >= 4 else None
    if quote or len(value) < 4 or not _could_be_secret(value) or _expression(value):
        return None
    if _connection_string(name):   # ``Host=db;Password=x``: the whole string, not its first field
        end = start + len(_NOT_SPACE.match(m.string, start).group())
    if _variable(value) and (spaced or m.string[end:end + 1] in (",", ")") or "." in name):
        return None   # ``token = t``, ``f(password=pw)``, ``c.token=t``, ``password: str``
    if spaced and not _credential_like(value):
        return None
    return start, end


def _spans_sub(text: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return text
    out, last = [], 0
    for a, b in spans:
        out += (text[last:a], REDACTED)
        last = b
    out.append(text[last:])
    return "".join(out)


def _secret_name_at(text: str, start: int, end: int) -> int:
    """Where the match of the name ``text[start:end]`` starts (with the quote, escaped or not, that
    opens it), or -1 when it is not a secret name (a flag's dashes and a JSON escape before it are not
    part of it)."""
    name = text[start:end]
    if name[0] in "-nrt":
        if start and text[start - 1] == "\\" and name[0] != "-":
            start, name = start + 1, name[1:]   # ``\npassword``: the JSON escape is not part of the name
        name = name[2:] if name.startswith("--") else name[1:] if name.startswith("-") else name
    if not _secret_name(name):
        return -1
    if start and text[start - 1] in "\"'":
        start -= 1
        while start and text[start - 1] == "\\":
            start -= 1
    return start


def _marker_hits(places: _Places) -> list[int]:
    """Every occurrence of a name marker."""
    return [at for word in _NAME_MARKERS for at in places.of(word)]


def _assigned_marker_hits(places: _Places) -> list[int]:
    """The occurrences of name markers that :data:`_ASSIGNMENT` may match from: in a name that an
    operator follows, or in a flag. Found by the regex engine, so a marker in prose (``the key
    lookup``, ``author``) costs no Python step."""
    low, may_hold = places.low, getattr(places, "may_hold", None)
    return [m.start() for (head, _), pattern in zip(_MARKER_RESTS, _MARKER_ASSIGNED)
            if may_hold is None or may_hold(head) for m in pattern.finditer(low)]


def _redact_assignments(places: _Places, hits: Callable[[_Places], list[int]] = _marker_hits) -> str:
    """The literal of every assignment to a secret name: names are found from their markers (every
    secret name holds one), then matched where they start, so nothing before them can hide them.
    ``hits``: where to look for names (every marker, or only where an assignment may follow)."""
    text, seen, found, ats = places.text, set(), [], hits(places)
    if not ats:
        return text
    names = text.encode("ascii", "replace").translate(_NAME_TABLE)   # name characters ``a``, others spaces
    for at in ats:
        start = names.rfind(b" ", 0, at) + 1
        if start in seen:
            continue
        seen.add(start)
        end = names.find(b" ", at)
        end = len(text) if end < 0 else end
        # most names are plain words (``key``, ``author``): one cached look decides them
        if text[start] in "-nrt" or _secret_name(text[start:end]):
            start = _secret_name_at(text, start, end)
            if start >= 0:
                found.append(start)
    spans, last = [], 0
    for start in sorted(found):
        if start < last:
            continue   # inside a value already redacted
        m = _ASSIGNMENT.match(text, start)
        if m is None and text[start] in "\\\"'":
            m = _ASSIGNMENT.match(text, start + len(_QUOTE.match(text, start).group()))   # ``'password=x'``
        span = _literal_value(m) if m else None
        if span:
            spans.append(span)
            last = span[1]
    return _spans_sub(text, spans)


def _netrc_entry(m: re.Match) -> str | None:
    """``machine h login u password p`` and a ``password p`` line of a .netrc."""
    line_start = m.string.rfind("\n", 0, m.start()) + 1
    if _credential_like(m.group(2)) and _NETRC_BEFORE.fullmatch(m.string[line_start:m.start()]):
        return m.group(1) + REDACTED
    return None


def _ascii_lower(text: str) -> str:
    """``text`` in lowercase, ASCII letters only, so that every offset stays that of ``text``."""
    return text.lower() if text.isascii() else text.encode("ascii", "replace").lower().decode("ascii")


def _word_start(text: str, at: int) -> bool:
    """Whether a word starts at ``text[at]`` (as ``\b`` would say, and also right after ``\n``)."""
    if not at or text[at - 1] not in _WORD_CHARS:
        return True
    return text[at - 1] in "nrt" and at >= 2 and text[at - 2] == "\\"


@functools.lru_cache(maxsize=None)
def _word_re(word: str) -> re.Pattern:
    return re.compile(re.escape(word))


class _Places:
    """Where words occur in a text (in its lowercase ASCII image unless asked by case), each word
    looked for once however many rules ask."""

    def __init__(self, text: str):
        self.text, self.low, self._found = text, _ascii_lower(text), {}

    def of(self, word: str, case: bool = False) -> list[int]:
        """The offsets where ``word`` occurs, in order."""
        found = self._found.get((word, case))
        if found is None:
            hay = self.text if case else self.low
            if len(word) < 8:   # the regex engine finds a short word faster than str.find
                found = [m.start() for m in _word_re(word).finditer(hay)]
            else:
                found, at = [], hay.find(word)
                while at >= 0:
                    found.append(at)
                    at = hay.find(word, at + len(word))
            self._found[(word, case)] = found
        return found


# Letters about as rare as any in logs, code and prose: a word with one of them that a text lacks cannot
# occur in it, and looking for one character costs next to nothing (memchr), unlike looking for a word.
# (None of them is a letter of REDACTED, which a rule may put into the text: see _GatedPlaces.)
_RARE_LETTERS = "jqzxvkwbgy"
# a shorter word that every occurrence of the key holds: where it does not occur, neither does the key,
# and one scan that says so serves every rule that needs one of them
_GATES = {"authorization": "auth", "sig=": "sig", "signature": "sig", "password": "pass", "passphrase": "pass",
          "-u ": "-u", "--user": "-u"}
_GATED_AT = 16384   # from this length, ruling words out costs less than the scans it saves
_GATE_WORDS = frozenset(_GATES.values())


@functools.lru_cache(maxsize=None)
def _proofs(word: str) -> tuple[str, ...]:
    """What :meth:`_GatedPlaces.may_hold` looks for, cheapest first: the rare letters of ``word``, the
    shorter word of :data:`_GATES` it holds (or the word itself when it is such a word: one scan then
    serves all that need it). Another word is not looked for twice: its own scan says it is missing."""
    gate = _GATES.get(word, word if word in _GATE_WORDS else None)
    return (*(c for c in _RARE_LETTERS if c in word), *((gate,) if gate else ()))


class _GatedPlaces(_Places):
    """:class:`_Places` for a long text, which first rules out the words the text cannot hold (see
    :meth:`may_hold`): a word it rules out is not looked for, nor is a marker pattern tried."""

    def __init__(self, text: str, before: _GatedPlaces | None = None):
        super().__init__(text)
        # A rule only puts ``[REDACTED]`` in place of a part of its match, and no word looked for here
        # can span a bracket: a word the text before it lacked, the text after it lacks too (a word it
        # held may be gone: then it is looked for and not found, as without this check).
        self._lacking: dict[str, bool] = {} if before is None else before._lacking

    def _lacks(self, part: str) -> bool:
        """Whether ``part`` (lowercase) is missing from the lowercase image (found once a text)."""
        lacking = self._lacking.get(part)
        if lacking is None:
            lacking = self._lacking[part] = (part not in self.low if len(part) == 1
                                             else _word_re(part).search(self.low) is None)
        return lacking

    def may_hold(self, word: str) -> bool:
        """False when ``word`` (lowercase) does not occur in the lowercase image: a rare letter of it, or
        the shorter word of :data:`_GATES` it holds (see :func:`_proofs`), is missing."""
        lacking = self._lacking.get(word)
        if lacking is not None:
            return not lacking
        return not any(map(self._lacks, _proofs(word)))

    def of(self, word: str, case: bool = False) -> list[int]:
        """:meth:`_Places.of`; none without a scan where :meth:`may_hold` rules the word out (a word
        of the text holds its lowercase in the lowercase image)."""
        if (word, case) not in self._found and not self.may_hold(word.lower()):
            self._found[(word, case)] = []
        return super().of(word, case)


def _anchored(words: tuple[str, ...], pattern: _LazyPattern, replace: Callable[[re.Match], str | None],
              start: Callable[[str, int], bool] | None = _word_start, case: bool = False) -> Callable[[_Places], str]:
    """A rule that tries ``pattern`` only where one of ``words`` occurs (in the lowercase image unless
    ``case``) and ``start`` accepts the place; ``replace(m)`` is the new text of a match, or None to
    leave it. Its cost follows the words' occurrences, not the length of the text."""
    def rule(places: _Places) -> str:
        text = places.text
        hits = places.of(words[0], case) if len(words) == 1 else sorted(
            {at for word in words for at in places.of(word, case)})
        out, last = [], 0
        for at in hits:
            if at < last or (start is not None and not start(text, at)):
                continue
            m = pattern.match(text, at)
            new = replace(m) if m else None
            if new is not None:
                out += (text[last:at], new)
                last = m.end()
        return "".join(out) + text[last:] if out else text
    return rule


def _subbed(word: str, pattern: _LazyPattern, replace: Callable[[re.Match], str | None],
            needs: str = "") -> Callable[[_Places], str]:
    """The rule ``_anchored((word,), pattern, replace, None, case=True)`` for a pattern that starts
    with ``word`` and whose matches hold no other place of it: where the word is frequent, the regex
    engine goes from one place to the next itself, with no Python step where a match fails, and not
    at all when the text lacks ``needs`` (a character every match holds)."""
    anchored = _anchored((word,), pattern, replace, None, case=True)

    def rule(places: _Places) -> str:
        text, changed = places.text, False
        if len(places.of(word, True)) < 64:
            return anchored(places)   # its places are known already: no scan of the text
        if needs and needs not in text:
            return text

        def found(m: re.Match) -> str:
            nonlocal changed
            new = replace(m)
            if new is None:
                return m.group(0)
            changed = True
            return new
        out = pattern.sub(found, text)
        return out if changed else text
    return rule


def _token_start(text: str, at: int) -> bool:
    """Whether a token starts at ``text[at]``: after a character that cannot be in one, or after a JSON
    escape such as ``\n``."""
    if not at or text[at - 1] not in _TOKEN_CHARS:
        return True
    return text[at - 1] in "nrt" and at >= 2 and text[at - 2] == "\\"


def _sub_shape(kind: str, pattern: _LazyPattern) -> Callable[[str], str]:
    def found(m: re.Match) -> str:
        at = m.start()
        if kind == "terraform" or _token_start(m.string, at) or (
                kind == "telegram bot" and m.string[at - 3:at] == "bot"):
            return REDACTED
        return m.group(0)
    return lambda text: pattern.sub(found, text)


def _auth_header(m: re.Match) -> str | None:
    value, opened = m.group(4), m.group(3)
    if opened:
        ok = m.string.startswith(opened, m.end())
    elif m.group(1).rstrip().lower().endswith(_AUTH_SCHEMES):
        ok = True   # ``Basic <credential>``: a scheme and one word are never prose
    else:
        rest = _line_rest(m.string, m.end()).strip()
        ok = not rest or rest[0] in _PROSE_AFTER
    if not ok or not _could_be_secret(value) or _expression(value) or (_variable(value) and len(value) < 16):
        return None
    return m.group(1) + REDACTED


def _cookies(m: re.Match) -> str:
    def pair(p: re.Match) -> str:
        name = p.group(1)[:-1].lower()
        return p.group(0) if name in _COOKIE_ATTRS or not _credential_like(p.group(2)) else p.group(1) + REDACTED
    return m.group(1) + _COOKIE_PAIR.sub(pair, m.group(2))


def _second(check: Callable[[str], bool] = _could_be_secret, after: str = "") -> Callable[[re.Match], str | None]:
    """Replace a match's second group (the first stays) when ``check`` says it is a secret."""
    return lambda m: m.group(1) + REDACTED + after if check(m.group(2).strip("\"'")) else None


# (kind, markers, rule): the rules that look at one line at a time, in the order they run. A rule runs
# on a line only when one of its markers occurs in it: the shapes' prefixes as they are, the other
# rules' markers in the line in lowercase. Every match of a rule holds one of its markers.
_SHAPE_RULES = [(kind, prefixes, _sub_shape(kind, pattern)) for kind, prefixes, pattern in _SHAPES]
# (kind, rule(places)): the rules for names, headers, flags and URLs, in the order they
# run; each finds its own words, so it costs next to nothing where they do not occur
_PLAIN_WORD_RULES = [
    ("webhook url", _anchored(("://",), _WEBHOOK_URL, _second(lambda v: True), None, case=True)),
    ("sentry dsn", _anchored(("://",), _URL_KEY_USER, _second(lambda v: True), None, case=True)),
    ("authorization header", _anchored(("authorization",), _AUTH_HEADER, _auth_header)),
    ("bearer", _anchored(("bearer",), _BEARER, _second(lambda v: True))),
    ("url password", _anchored(("://",), _URL_PASSWORD, _second(after="@"), None, case=True)),
    ("cookie header", _anchored(("cookie",), _COOKIE_HEADER, _cookies)),
    ("user flag", _anchored(("-u ", "--user"), _USER_FLAG, _second(lambda v: _could_be_secret(v) and not _variable(v)),
                            _token_start, case=True)),
    ("mysql -p", _anchored(("mysql",), _MYSQL_FLAG, _second())),
    (".netrc password", _anchored(("password",), _NETRC, _netrc_entry, case=True)),
    ("sig= parameter", _anchored(("sig=",), _SIG_PARAM, _second(), _token_start)),
    ("assignment or flag", _redact_assignments),
]
# what redact() runs: the same rules, with no Python step where a word occurs but cannot match
# (_redact_reference() runs the plain ones, and the tests check that both give the same output)
_WORD_RULES = [
    ("webhook url", _subbed("://", _WEBHOOK_URL, _second(lambda v: True))),
    ("sentry dsn", _subbed("://", _URL_KEY_USER, _second(lambda v: True), needs="@")),
    *_PLAIN_WORD_RULES[2:4],
    ("url password", _subbed("://", _URL_PASSWORD, _second(after="@"), needs="@")),
    *_PLAIN_WORD_RULES[5:-1],
    ("assignment or flag", functools.partial(_redact_assignments, hits=_assigned_marker_hits)),
]
_SMALL = 2048   # below this, looking for token-like runs costs more than looking for every prefix


def _env_secrets() -> list[str]:
    """Literal values of this process's credentials: the Anthropic variables and every variable whose
    name is a secret name (``GITHUB_TOKEN``, ``DB_PASSWORD``, ``PGPASSWORD``, ``SENTRY_DSN``, ...), when
    long enough to be one."""
    always = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
    return [v for k, v in os.environ.items()
            if len(v) >= 8 and k not in ("PWD", "OLDPWD") and (k in always or _secret_name(k))]


def _redact_env_and_blocks(value: str, env_secrets: list[str] | None) -> str:
    out = value
    for secret in _env_secrets() if env_secrets is None else env_secrets:
        if secret in out:
            out = out.replace(secret, REDACTED)
    for marker, pattern in _BLOCKS:
        if marker in out:
            out = pattern.sub(marker + " " + REDACTED if marker == "Private-Lines:" else REDACTED, out)
    return out


def _redact_shapes(text: str) -> str:
    """The shape rules, each only where one of its prefixes occurs."""
    for _, prefixes, rule in _SHAPE_RULES:
        for prefix in prefixes:
            if prefix in text:
                text = rule(text)
                break
    return text


def _redact_words(text: str) -> str:
    places = _GatedPlaces(text) if len(text) >= _GATED_AT else _Places(text)
    for _, rule in _WORD_RULES:
        new = rule(places)
        if new is not places.text:
            places = _GatedPlaces(new, places) if isinstance(places, _GatedPlaces) else _Places(new)
    return places.text


def _shape_run(text: str, start: int, end: int) -> bool:
    """Whether the token-like run ``text[start:end]`` (20+ characters) may begin one of _SHAPES."""
    word = text[start:end]
    if word.startswith(_RUN_PREFIXES) or text[start - 9 if start > 9 else 0:start].endswith(_DOT_PREFIXES):
        return True
    escaped = start and text[start - 1] == "\\"
    if escaped and word[1:].startswith(_RUN_PREFIXES):
        return True
    if text[start - 1:start] == ":" and text[start - 2:start - 1].isdigit():
        return True                                                                      # telegram
    return text[end:end + 1] == "." and (word.startswith(_DISCORD_PREFIXES)
                                         or (escaped and word[1:].startswith(_DISCORD_PREFIXES)))


def _shape_lines(text: str) -> dict[int, int]:
    """Start -> end of every line of ``text`` that holds a token-like run of 20+ characters which may
    begin a shape (found with byte scans of an ASCII image of the text): a cheap superset of the
    lines the shape rules change."""
    image = text.encode("ascii", "replace")   # one byte per character: offsets are the text's
    n, lines = len(image), {}
    runs = image.translate(_RUN_TABLE)
    at = runs.find(_RUN)
    while at >= 0:
        end = runs.find(b" ", at)
        end = n if end < 0 else end
        before = image[at - 1:at]
        if ((image[at:at + 2] in _RUN_HEADS and image.startswith(_RUN_STARTS, at))
                or (before == b"." and image.endswith(_DOT_ENDS, 0, at)) or before == b"\\"
                or (before == b":" and image.startswith(b"AA", at))) and _shape_run(text, at, end):
            line_end = image.find(b"\n", end)
            lines[image.rfind(b"\n", 0, at) + 1] = n if line_end < 0 else line_end
        at = runs.find(_RUN, end)
    return lines


def redact(value: str, env_secrets: list[str] | None = None) -> str:
    """Replace every credential in ``value`` with ``[REDACTED]``; everything else is left as it is.

    Redacted: the literal values of credential environment variables (see :func:`_env_secrets`);
    tokens of a known shape (Anthropic/OpenAI, Stripe, GitHub, GitLab, npm, AWS key ids, Slack, Google
    API keys and OAuth tokens, JWTs, Hugging Face, SendGrid, DigitalOcean, Databricks, Mailgun, Shopify,
    Heroku, Atlassian, PyPI, Terraform, Vault, Linear, Notion, age, Square, Discord and Telegram bots);
    PEM and PGP private key blocks and PuTTY private lines; Slack/Discord webhook URLs and Sentry DSN keys;
    the credential of ``Authorization:`` headers and of a bare ``Bearer <token>``; cookie values of
    ``Cookie:``/``Set-Cookie:``; the password of ``scheme://user:password@host``, ``curl -u user:pw``,
    ``mysql -pPW``, ``.netrc`` and ``sig=`` query parameters; the literal assigned to a secret name
    (``KEY=v``, ``key: v``, ``"key": "v"``, ``--key v``, anywhere in a line; see :func:`_secret_name`)
    unless it cannot be a secret (a number, true/false/null, empty, a placeholder) or is code (a call, a
    subscript, an attribute, a variable). Not redacted: secrets of a shape not listed here that are not
    assigned to a secret name. ``env_secrets``: what :func:`_env_secrets` returned, for a caller that
    redacts many texts at once.
    """
    if not value:
        return value
    out = _redact_env_and_blocks(value, env_secrets)
    if len(out) < _SMALL:
        return _redact_words(_redact_shapes(out))
    lines = _shape_lines(out)
    if lines:
        pieces, last = [], 0
        for start in sorted(lines):
            pieces += (out[last:start], _redact_shapes(out[start:lines[start]]))
            last = lines[start]
        pieces.append(out[last:])
        out = "".join(pieces)
    return _redact_words(out)


def _redact_reference(value: str, env_secrets: list[str] | None = None) -> str:
    """What :func:`redact` must return, the slow and simple way: every rule over the whole text."""
    if not value:
        return value
    out = _redact_env_and_blocks(value, env_secrets)
    for _, _, rule in _SHAPE_RULES:
        out = rule(out)
    for _, rule in _PLAIN_WORD_RULES:
        out = rule(_Places(out))
    return out


def redact_obj(value: Any, env_secrets: list[str] | None = None) -> Any:
    """:func:`redact` every string inside a JSON-like structure (before it is encoded); a string
    value under a secret-named key is redacted whole unless it cannot be a secret. The environment's
    credentials are read once for the whole structure."""
    if env_secrets is None and not isinstance(value, str):
        env_secrets = _env_secrets()
    if isinstance(value, str):
        return redact(value, env_secrets)
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(k, str) and isinstance(v, str) and _secret_name(k)
                    and _could_be_secret(v) else redact_obj(v, env_secrets)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_obj(v, env_secrets) for v in value]
    return value


def timestamp(now: float | None = None) -> str:
    """Local ``YYYYmmdd-HHMMSS`` for file names."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))


def iso_now() -> str:
    """The current UTC time as ISO 8601 with seconds."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def transcript_now() -> str:
    """The current UTC time as the CLI stamps transcript entries (milliseconds, ``Z``): an entry
    flower writes sorts among the CLI's own where the CLI orders by time."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def set_aside(path: str) -> str:
    """Move an unreadable file to ``<path>.corrupt-<ts>[-n]`` (never overwriting) and return the new path."""
    base = f"{path}.corrupt-{timestamp()}"
    target, n = base, 1
    while os.path.exists(target):
        n += 1
        target = f"{base}-{n}"
    os.replace(path, target)
    return target


class NotRegularFile(OSError):
    """A FIFO, device or socket where flower expects a regular file: reading it could block forever."""


def open_regular(path: str, mode: str = "rb", **kwargs: Any) -> Any:
    """``open(path, mode)`` for reading, but only a regular file: the open itself never blocks (a FIFO
    in place of a state file or a note waits for a writer that never comes), and anything else raises
    :class:`NotRegularFile` (a directory: IsADirectoryError)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        kind = os.fstat(fd).st_mode
        if stat.S_ISDIR(kind):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if not stat.S_ISREG(kind):
            raise NotRegularFile(errno.EINVAL, "not a regular file", path)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def json_value(raw: str | bytes) -> Any:
    """``json.loads``, with a text nested too deep for the parser (RecursionError) as a ValueError:
    a damaged file like any other."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def read_json(path: str, default: Any, *, expect: type | None = None,
              valid: Callable[[Any], bool] | None = None,
              notify: Callable[[str], None] | None = None, lang: str = "en") -> Any:
    """Read a JSON state file. Missing -> ``default``. Unparsable (or nested too deep), of the wrong
    type, rejected by ``valid`` (the shape check: field types, not just syntax), or not a regular file
    (a FIFO) -> the file is set aside as ``<name>.corrupt-<ts>``, ``notify`` is told once, and
    ``default`` is returned.
    """
    try:
        with open_regular(path) as fh:
            raw = fh.read()
    except FileNotFoundError:
        return default
    except IsADirectoryError:
        raise FlowerError(said("er_json_is_dir", path=path), EXIT_SETUP) from None
    except NotRegularFile:
        raw = None
    except OSError as exc:
        raise FlowerError(said("er_cannot_read", path=path, error=os_reason(exc)), EXIT_SETUP) from None
    try:
        if raw is None:
            raise ValueError("not a regular file")
        value = json_value(raw.decode("utf-8"))
        if expect is not None and not isinstance(value, expect):
            raise ValueError(f"expected {expect.__name__}")
        if valid is not None and not valid(value):
            raise ValueError("wrong shape")
        return value
    except (ValueError, UnicodeDecodeError):
        moved = set_aside(path)
        if notify:
            notify(text("info_set_aside", lang, path=path, moved=moved))
        return default


def _peek_json(path: str) -> Any:
    """A JSON file's value without side effects (None when missing or unreadable)."""
    try:
        with open_regular(path, "r", encoding="utf-8") as fh:
            return json_value(fh.read())
    except (OSError, ValueError):
        return None


def _read_text(path: str) -> str | None:
    """A text file's content without side effects (None when missing, not a regular file, or not UTF-8)."""
    try:
        with open_regular(path, "r", encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def check_text_file(path: str, notify: Callable[[str], None] | None = None, lang: str = "en") -> bool:
    """False (after setting the file aside, with one info line) when ``path`` exists but is not UTF-8
    text in a regular file: a note flower cannot read is kept for the human, never read as missing and
    overwritten."""
    try:
        with open_regular(path) as fh:
            fh.read().decode("utf-8")
        return True
    except FileNotFoundError:
        return True
    except (OSError, UnicodeDecodeError):
        with contextlib.suppress(OSError):
            moved = set_aside(path)
            if notify:
                notify(text("info_set_aside", lang, path=path, moved=moved))
        return False


def write_json(path: str, value: Any) -> None:
    """Atomically write ``value`` as pretty JSON (UTF-8, mode 0600)."""
    atomic_write(path, json.dumps(value, ensure_ascii=False, indent=1) + "\n")


def env_number(name: str, default: float, warn: Callable[[str], None] | None = None) -> float:
    """A positive number from the environment, or ``default`` (with a warning) when unset or invalid."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
        if value < 0 or value != value or value == float("inf"):
            raise ValueError
        return value
    except ValueError:
        if warn:
            warn(said("warn_not_a_number", name=name, raw=repr(raw)))
        return default


# --- Process guard: the CLI child never outlives flower, a re-run stops a predecessor's CLI ---
#
# The SDK spawns the CLI as a plain child. When flower is killed with SIGKILL that child is re-parented
# to init and carries on: more tool runs and API requests that no store records, and a re-run then
# drives the same session twice. flower therefore points ``cli_path`` at a tiny guard script that
# puts the CLI in a process group of its own and stops that whole group the moment flower dies
# (a parent-death signal on Linux, a 0.2 s parent check everywhere). Stopping is SIGTERM first: the
# CLI then writes the entries it still holds in memory to its transcript (it writes about 0.1 s
# behind; a re-run recovers them from there) and sends no new request; the group is SIGKILLed after
# a grace whatever happened. The grace is short when flower is dead (``CLI_ORPHAN_GRACE``): with
# nobody reading its output the CLI lingers in its shutdown (up to 2 s), and a retry its own backoff
# had scheduled before the kill could go out meanwhile; a quarter second is enough for the writing
# and leaves that window small. The guard leaves a record in ``<run_dir>/live/`` so that a re-run can
# find and stop a guard that somehow survived.

CLI_GRACE = 2.0          # a CLI that flower stops itself (SIGTERM, Ctrl-C) exits in ~0.03 s; a killed tool ~1.3 s
CLI_ORPHAN_GRACE = 0.25  # a dead flower's CLI: its transcript is written well within this

CLI_GUARD_SCRIPT = r"""
import ctypes, json, os, signal, sys, time
real, record_dir = os.environ.pop("FLOWER_REAL_CLI"), os.environ.pop("FLOWER_LIVE_DIR", "")
expected = os.environ.pop("FLOWER_PARENT_PID", "")
try:
    grace = float(os.environ.pop("FLOWER_CLI_GRACE", "0.25"))
except ValueError:
    grace = 0.25
parent, me = (int(expected) if expected.isdigit() else os.getppid()), os.getpid()
if os.getppid() != parent:  # flower died before this guard even started
    os._exit(137)
record = os.path.join(record_dir, "%d.json" % me) if record_dir else ""

def forget():
    try:
        if record:
            os.unlink(record)
    except OSError:
        pass

def on_death_signal(signum):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signum, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass

stopping = []

def tool_groups(cli):  # the process groups the CLI runs its tools in (a Bash call gets one of its own)
    groups = set()
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return groups
    for name in names:
        try:
            with open("/proc/%s/stat" % name) as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == cli:
                groups.add(int(fields[2]))
        except (OSError, IndexError, ValueError):
            pass
    groups.discard(os.getpgid(0))
    return groups

def stop_group():  # SIGTERM: the CLI writes its transcript and exits; the whole group dies after the grace
    if stopping:
        return
    stopping.append(1)
    tools = tool_groups(child)  # read now: once the CLI is gone its tools belong to init
    try:
        os.kill(child, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            if os.waitpid(child, os.WNOHANG)[0]:
                break
        except OSError:
            break
        time.sleep(0.01)
    forget()  # kept until now: a re-run's reaper waits for this CLI instead of killing it mid-write
    for group in tools:  # a tool must not run on after its flower: nobody would record what it did
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    os.killpg(0, signal.SIGKILL)

def on_parent_death(*_):
    if os.getppid() != parent:
        stop_group()

os.setpgid(0, 0)
child = os.fork()
if child == 0:
    on_death_signal(signal.SIGTERM)   # the guard itself killed: the CLI still writes what it holds
    if os.getppid() != me:
        os._exit(137)
    os.execv(real, [real] + sys.argv[1:])
signal.signal(signal.SIGUSR1, on_parent_death)
def forward(signum, _):
    try:
        os.kill(child, signum)
    except OSError:
        pass

for forwarded in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(forwarded, forward)
on_death_signal(signal.SIGUSR1)
on_parent_death()
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
if record:
    try:
        with open(record + ".tmp", "w") as fh:  # atomically: a reaper must never see half a record
            json.dump({"pid": me, "parent": parent, "cli": child, "argv": sys.argv[1:]}, fh)
        os.replace(record + ".tmp", record)
    except OSError:
        record = ""
status = 0
while True:
    done, status = os.waitpid(child, os.WNOHANG)
    if done:
        break
    on_parent_death()
    time.sleep(0.2)
forget()
code = os.waitstatus_to_exitcode(status)
os._exit(128 - code if code < 0 else code)
"""


def find_cli(sdk: Any) -> str | None:
    """The CLI the SDK would start: the one bundled in its wheel, else ``claude`` on PATH."""
    import shutil
    bundled = os.path.join(os.path.dirname(getattr(sdk, "__file__", None) or "."), "_bundled", "claude")
    return bundled if os.path.isfile(bundled) else shutil.which("claude")


def cli_guard(run_dir: str, real_cli: str | None) -> tuple[str, dict[str, str]] | None:
    """``(guard path, env)`` for ``ClaudeAgentOptions(cli_path=..., env=...)``, or None where the
    guard cannot work (no POSIX fork/killpg, no real CLI, an interpreter path a shebang cannot hold)."""
    if os.name != "posix" or not real_cli or not os.path.isfile(real_cli) or " " in sys.executable:
        return None
    path = os.path.join(run_dir, "cli-guard.py")
    body = f"#!{sys.executable} -SE\n{CLI_GUARD_SCRIPT.lstrip()}"
    try:
        if _read_text(path) != body:
            atomic_write(path, body, mode=0o700)
        live = ensure_private_dir(os.path.join(run_dir, "live"))
    except (OSError, FlowerError):
        return None
    return path, {"FLOWER_REAL_CLI": real_cli, "FLOWER_LIVE_DIR": live, "FLOWER_PARENT_PID": str(os.getpid()),
                  "FLOWER_CLI_GRACE": str(CLI_ORPHAN_GRACE)}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    """The command line of a live process ("" when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        pass
    import subprocess
    try:
        return subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _live_records(run_dir: str) -> list[tuple[str, Any]]:
    """(path, parsed value or None) of every guard record in ``run_dir``'s ``live`` folder; empty when
    the folder cannot be listed."""
    live = os.path.join(run_dir, "live")
    try:
        names = [n for n in os.listdir(live) if n.endswith(".json")]
    except OSError:
        return []
    return [(os.path.join(live, name), _peek_json(os.path.join(live, name))) for name in names]


def live_driver(run_dir: str, session_id: str) -> dict | None:
    """The record of a guard that another live flower runs for ``session_id`` (None when there is none)."""
    for _, record in _live_records(run_dir):
        if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
            continue
        parent = record.get("parent")
        if (isinstance(parent, int) and parent not in (1, os.getpid()) and _pid_alive(parent)
                and _pid_alive(record["pid"]) and any(session_id in str(a) for a in record.get("argv") or [])):
            return record
    return None


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie nobody reaped yet counts as gone)."""
    if not _pid_alive(pid):
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def tool_groups(pid: int) -> set[int]:
    """The process groups of ``pid``'s children other than its own (the CLI runs each Bash call in a
    group of its own); empty where /proc cannot tell."""
    groups = {group for _, group in _children(pid)}
    with contextlib.suppress(OSError):
        groups.discard(os.getpgid(pid))
    return groups


def _children(pid: int) -> list[tuple[int, int]]:
    """(pid, process group) of each live child of ``pid``; empty where /proc cannot tell."""
    found: list[tuple[int, int]] = []
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return found
    for name in names:
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append((int(name), int(fields[2])))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _stop_guards(guards: list[tuple[int, int]], grace: float) -> list[int]:
    """Stop ``(guard pid, CLI pid)`` pairs: SIGTERM to each CLI, so that it writes what it still holds
    to its transcript and exits, then SIGKILL of each guard's whole group, and of the groups its tools
    run in, once all CLIs are gone or ``grace`` seconds have passed. Blocking. Returns the guard pids."""
    tools = {group for _, cli in guards for group in tool_groups(cli)}   # before the CLI is gone
    for _, cli in guards:
        with contextlib.suppress(OSError):
            os.kill(cli, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while guards and time.monotonic() < deadline and not all(_gone(cli) for _, cli in guards):
        time.sleep(0.01)
    for group in tools | {guard for guard, _ in guards}:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    return [guard for guard, _ in guards]


def _guard_pair(record: dict) -> tuple[int, int]:
    cli = record.get("cli")
    return record["pid"], cli if isinstance(cli, int) and cli > 1 else record["pid"]


def stop_own_clis(run_dir: str, grace: float = CLI_GRACE) -> list[int]:
    """Stop every guarded CLI this process started: on SIGTERM or a quitting Ctrl-C the CLI must stop
    at once, not run tools and paid calls that nobody records while the SDK waits for it to exit.
    The CLI gets SIGTERM (it writes its transcript, which the runtime then takes into the store),
    its group SIGKILL after ``grace`` seconds. Blocking. Returns the pids stopped."""
    script = os.path.join(run_dir, "cli-guard.py")
    guards = []
    for path, record in _live_records(run_dir):
        if not isinstance(record, dict) or record.get("parent") != os.getpid() or not isinstance(record.get("pid"), int):
            continue
        if script in _cmdline(record["pid"]):
            guards.append(_guard_pair(record))
        with contextlib.suppress(OSError):
            os.unlink(path)
    # a guard whose record could not be written (the run dir was full) is still this process's child:
    # stopped through the guard, which passes SIGTERM on to its CLI
    known = {guard for guard, _ in guards}
    guards += [(pid, pid) for pid, _ in _children(os.getpid()) if pid not in known and script in _cmdline(pid)]
    return _stop_guards(guards, grace)


def own_cli_stopped(run_dir: str) -> int | None:
    """The pid of a CLI this process started that is stopped (SIGSTOP, a debugger), else None."""
    for _, record in _live_records(run_dir):
        if isinstance(record, dict) and record.get("parent") == os.getpid() and isinstance(record.get("pid"), int):
            cli = _guard_pair(record)[1]
            try:
                with open(f"/proc/{cli}/stat", "rb") as fh:
                    if fh.read().rsplit(b")", 1)[-1].split()[0] in (b"T", b"t"):
                        return cli
            except (OSError, IndexError):
                continue
    return None


def reap_orphans(run_dir: str, session_ids: Iterable[str] = (), grace: float = CLI_ORPHAN_GRACE) -> list[int]:
    """Stop guarded CLIs left behind by a dead flower: every record in ``<run_dir>/live`` whose flower
    is gone, or that drives one of ``session_ids``. A pid is stopped only when its command line still
    proves it is that guard (the guard path and the record's own arguments): never a reused pid.
    Stopping is :func:`stop_own_clis`'s, so a CLI still writing its transcript after its flower was
    killed finishes that first and a salvage after this sees everything. Returns the pids stopped."""
    wanted = set(session_ids)
    guards, done = [], []
    for path, record in _live_records(run_dir):
        if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
            with contextlib.suppress(OSError):
                os.unlink(path)
            continue
        pid, argv = record["pid"], [str(a) for a in record.get("argv") or []]
        parent = record.get("parent")
        ours = any(sid in a for sid in wanted for a in argv)
        orphaned = not (isinstance(parent, int) and _pid_alive(parent) and parent != 1)
        if not _pid_alive(pid):
            with contextlib.suppress(OSError):
                os.unlink(path)
            continue
        if not orphaned and parent != os.getpid():
            continue  # another live flower's CLI is never ours to stop (live_driver() reports it)
        if not (ours or orphaned):
            continue
        command = _cmdline(pid)
        if os.path.join(run_dir, "cli-guard.py") not in command or " ".join(argv) not in command:
            continue
        guards.append(_guard_pair(record))
        done.append(path)
    stopped = _stop_guards(guards, grace)
    for path in done:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return stopped


# --- Resilience: endpoint, probe, classify, backoff, waiting out an outage ---

DEFAULT_BASE_URL = "https://api.anthropic.com"


def _no_proxy_matches(host: str, no_proxy: str) -> bool:
    """True when ``host`` is excluded from proxying by a NO_PROXY value (exact, suffix, ``*``)."""
    host = host.lower().strip("[]")
    for item in no_proxy.replace(" ", "").split(","):
        item = item.lower()
        if not item:
            continue
        if item == "*":
            return True
        item = item.split(":")[0] if item.count(":") == 1 else item
        bare = item.lstrip("*").lstrip(".")
        if host == bare or host.endswith("." + bare):
            return True
    return False


def _host_port(url: str, default_scheme: str = "https") -> tuple[str, int]:
    if "://" not in url:
        url = f"{default_scheme}://{url}"
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 80 if parts.scheme == "http" else 443
    return host, port


def probe_target(env: dict[str, str] | None = None) -> tuple[str, int, str | None]:
    """``(host, port, proxy variable or None)``: the first network hop and, when it is a proxy, the
    variable that named it."""
    env = os.environ if env is None else env
    base = (env.get("ANTHROPIC_BASE_URL") or "").strip() or DEFAULT_BASE_URL
    host, port = _host_port(base)
    proxy_var = next((k for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
                      if (env.get(k) or "").strip()), None)
    no_proxy = env.get("NO_PROXY") or env.get("no_proxy") or ""
    if proxy_var and not _no_proxy_matches(host, no_proxy):
        return (*_host_port(env[proxy_var].strip(), default_scheme="http"), proxy_var)
    return host, port, None


def endpoint(env: dict[str, str] | None = None) -> tuple[str, int]:
    """The first network hop to probe: host and port of ``ANTHROPIC_BASE_URL`` (default
    api.anthropic.com:443), or of the HTTPS proxy when one is configured and the host is not in
    ``NO_PROXY`` (behind a proxy, the proxy is what must be reachable).
    """
    host, port, _ = probe_target(env)
    return host, port


def diagnose(host: str, port: int, timeout: float = 5.0) -> str:
    """What a DNS+TCP probe of ``host:port`` meets, in words: ``reachable``, ``DNS failure``,
    ``connection refused``, ``timed out`` or ``unreachable (<reason>)``. Blocking; for ``doctor``."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return "DNS failure"
    verdict = "unreachable"
    for family, socktype, proto, _, addr in infos:
        try:
            with socket.socket(family, socktype, proto) as sock:
                sock.settimeout(timeout)
                sock.connect(addr)
                return "reachable"
        except ConnectionRefusedError:
            verdict = "connection refused"
        except (socket.timeout, TimeoutError):
            verdict = "timed out"
        except OSError as exc:
            verdict = f"unreachable ({exc.strerror or exc})"
    return verdict


async def reachable(host: str, port: int, timeout: float = 5.0) -> bool:
    """DNS + TCP connect to ``host:port`` within ``timeout`` seconds; nothing is sent.

    Any failure (no DNS, refused, timeout, ...) is False. Runs in the event loop without blocking it.
    """
    import asyncio
    loop = asyncio.get_running_loop()

    async def attempt() -> bool:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        last: Exception | None = None
        for family, socktype, proto, _, addr in infos:
            try:
                _, writer = await asyncio.open_connection(addr[0], addr[1], family=family, proto=proto)
            except OSError as exc:
                last = exc
                continue
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return True
        if last:
            raise last
        return False

    try:
        return await asyncio.wait_for(attempt(), timeout)
    except Exception:
        return False


FATAL, TRANSIENT, OVERFLOW, UNKNOWN = "fatal", "transient", "overflow", "unknown"
DISK_FULL = "disk-full"   # a local disk (the CLI's config dir, the temp dir, the run dir) has no room
AUTH, OFFLINE = "auth", "offline"  # how a step ended, beyond classify(): credentials rejected, network gone

_OVERFLOW_TEXT = _lazy_re(r"(?i)prompt is too long|context (?:window|length) exceeded|too many tokens")
_FATAL_TEXT = _lazy_re(
    r"(?i)invalid api key|authentication|failed to authenticate|\b401\b|\b403\b|permission_error|"
    r"does not have permission|credit balance|billing|there's an issue with the selected model|"
    r"model.*(?:may not exist|not found)|not_found_error|maximum number of turns|maximum budget|"
    r"request too large|invalid_request_error|\bAPI Error: 400\b|no conversation found|"
    r"cannot be used with root|not logged in|please run /login|organization has been disabled|"
    r"error: (?:unknown )?option|argument '[^'\n]*' is invalid|invalid permission mode"
)
_DISK_FULL_TEXT = _lazy_re(r"(?i)no space left on device|\bENOSPC\b|\[Errno 28\]|database or disk is full|"
                           r"^disk full\b")
_TRANSIENT_TEXT = _lazy_re(
    r"(?i)connection|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|"
    r"socket hang up|timed? ?out|overloaded|\b529\b|\b5\d\d\b|rate limit|\b429\b|\b408\b|\b409\b|"
    r"server-side issue|temporar|try again|network|fetch failed|service unavailable|bad gateway|"
    r"internal server error|stream (?:idle|stalled)|unable to connect"
)


def classify(message: str | None, *, status: int | None = None, terminal_reason: str | None = None) -> str:
    """Classify a failure as ``"fatal"``, ``"transient"``, ``"overflow"``, ``"disk-full"`` or ``"unknown"``.

    Structured fields decide first (``terminal_reason``, then the HTTP ``status``); the text is read
    only when they say nothing, with overflow and fatal patterns checked before transient ones (a
    401 text can mention "connection"; waiting on it would wait forever).
    """
    if terminal_reason in ("prompt_too_long", "blocking_limit"):
        return OVERFLOW
    if terminal_reason in ("max_turns", "budget_exhausted", "image_error"):
        return FATAL
    body = message or ""
    if status is not None:
        if status in (400, 413) and _OVERFLOW_TEXT.search(body):
            return OVERFLOW
        if status in (400, 401, 402, 403, 404, 413, 422):
            return FATAL
        if status in (408, 409, 429, 529) or 500 <= status < 600:
            return TRANSIENT
    if _OVERFLOW_TEXT.search(body):
        return OVERFLOW
    if _DISK_FULL_TEXT.search(body):
        return DISK_FULL
    if _FATAL_TEXT.search(body):
        return FATAL
    if _TRANSIENT_TEXT.search(body):
        return TRANSIENT
    return UNKNOWN


_AUTH_TEXT = _lazy_re(r"(?i)invalid api key|authentication|failed to authenticate|\b401\b|\b403\b|"
                        r"permission_error|not logged in|please run /login|invalid x-api-key|"
                        r"organization has been disabled")


def is_auth_failure(message: str | None, *, status: int | None = None) -> bool:
    """Whether a failure means the credentials were rejected (HTTP 401/403 or the CLI's words for it)."""
    return status in (401, 403) or bool(_AUTH_TEXT.search(message or ""))


def cli_env_defaults(env: dict[str, str] | None = None) -> dict[str, str]:
    """Environment defaults flower gives the CLI unless the user already set them: few CLI-side
    retries (flower's probe loop waits out outages better than ~3 minutes of blind retries) and an
    idle timeout for stalled streams (which otherwise hang forever)."""
    env = os.environ if env is None else env
    out = {}
    for name, value in (("CLAUDE_CODE_MAX_RETRIES", "2"), ("CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS", "120000")):
        if name not in env:
            out[name] = value
    return out


_NUMBER_SETTINGS = {  # name -> (lowest allowed value, whole number?)
    "FLOWER_MAX_ATTEMPTS": (1, True), "FLOWER_BASE_DELAY": (0, False), "FLOWER_MAX_DELAY": (0, False),
    "FLOWER_PROBE_INTERVAL": (0.1, False), "FLOWER_PROBE_TIMEOUT": (0.1, False),
    "FLOWER_MAX_OFFLINE_WAIT": (0, False), "FLOWER_WINDOW": (10_000, True), "FLOWER_HANDOFF_TIMEOUT": (1, False),
    "FLOWER_STALL_TIMEOUT": (1, False),
    "FLOWER_MAX_LIMIT_WAIT": (0, False),
    "FLOWER_LEASE_TTL": (1, False),
}


def _url_problem(name: str, url: str, schemes: tuple[str, ...]) -> str | None:
    if "://" not in url:
        url = f"{schemes[0]}://{url}"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return said("er_url_unusable", name=name, url=repr(redact(url)), error=exc)
    if parts.scheme not in schemes or not re.fullmatch(r"[A-Za-z0-9._\-]+|[0-9a-fA-F:.]+", parts.hostname or ""):
        return said("er_url_want", name=name, url=repr(redact(url)), schemes="/".join(schemes))
    if port is not None and not 0 < port < 65536:
        return said("er_url_port", name=name, url=repr(redact(url)), port=port)
    return None


def settings_problems(env: dict[str, str] | None = None, lang: str = "en") -> list[str]:
    """Every FLOWER_* setting, ANTHROPIC_BASE_URL and proxy that is set but unusable, one line each
    naming the setting and what is allowed (pure: reads only ``env``)."""
    env = os.environ if env is None else env
    problems = []
    for name, (low, whole) in _NUMBER_SETTINGS.items():
        raw = (env.get(name) or "").strip()
        if not raw:
            continue
        try:
            value = int(raw) if whole else float(raw)
            ok = value >= low and value == value and value != float("inf")
        except ValueError:
            ok = False
        if not ok:
            problems.append(text("er_setting_whole" if whole else "er_setting_number", lang, setting=f"{name}={raw!r}", low=low))
    flags = {"FLOWER_NO_PROBE": ("", "0", "1", "true", "false", "yes", "no")}
    for name, allowed in flags.items():
        if (env.get(name) or "").strip().lower() not in allowed:
            problems.append(text("er_setting_one_of", lang, setting=f"{name}={env[name]!r}", allowed="0, 1, true, false, yes, no"))
    lang_said, lang = lang, (env.get("FLOWER_LANG") or "").strip()
    if lang and lang not in TEXTS:
        problems.append(text("er_setting_one_of", lang_said, setting=f"FLOWER_LANG={lang!r}", allowed=", ".join(TEXTS)))
    if (env.get("ANTHROPIC_BASE_URL") or "").strip():
        problems.append(_url_problem("ANTHROPIC_BASE_URL", env["ANTHROPIC_BASE_URL"].strip(), ("https", "http")))
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        if (env.get(name) or "").strip():
            problems.append(_url_problem(name, env[name].strip(), ("http", "https", "socks5", "socks5h")))
    return [in_lang(p, lang) for p in problems if p]


PROGRESS_ANSWERS = 2   # a failed connection with this many answers of the model made progress
# How long a batch hook waits for the stream to show the batch's calls (it comes right after them):
# past it, the hook decides on the level it knows
BATCH_SHOWN_WAIT = 10.0


@record
class Resilience:
    """Retry policy: how often, how long to back off, and how long to wait for the network.
    ``max_attempts`` counts failed connections in a row: one in which the model answered at least
    ``PROGRESS_ANSWERS`` times (a tool round trip at least) starts the count again."""

    max_attempts: int = 6
    base_delay: float = 4.0
    max_delay: float = 120.0
    probe_timeout: float = 5.0
    probe_interval: float = 15.0
    max_offline_wait: float = 3600.0
    # silence of the CLI after which a turn with no tool running is a stall: above the CLI's own idle
    # timeout and its retries, and above the minutes one long answer block can take to arrive whole
    stall_timeout: float = 1200.0
    retry_unknown: bool = True
    probe: bool = True

    @classmethod
    def from_env(cls, warn: Callable[[str], None] | None = None) -> "Resilience":
        """Defaults overridden by ``FLOWER_MAX_ATTEMPTS``, ``FLOWER_BASE_DELAY``, ``FLOWER_MAX_DELAY``,
        ``FLOWER_PROBE_INTERVAL``, ``FLOWER_PROBE_TIMEOUT``, ``FLOWER_MAX_OFFLINE_WAIT``, ``FLOWER_STALL_TIMEOUT``,
        ``FLOWER_NO_PROBE``."""
        d = cls()
        return cls(
            max_attempts=max(1, int(env_number("FLOWER_MAX_ATTEMPTS", d.max_attempts, warn))),
            base_delay=env_number("FLOWER_BASE_DELAY", d.base_delay, warn),
            max_delay=env_number("FLOWER_MAX_DELAY", d.max_delay, warn),
            probe_timeout=max(0.1, env_number("FLOWER_PROBE_TIMEOUT", d.probe_timeout, warn)),
            probe_interval=max(0.1, env_number("FLOWER_PROBE_INTERVAL", d.probe_interval, warn)),
            max_offline_wait=env_number("FLOWER_MAX_OFFLINE_WAIT", d.max_offline_wait, warn),
            stall_timeout=max(1.0, env_number("FLOWER_STALL_TIMEOUT", d.stall_timeout, warn)),
            probe=(os.environ.get("FLOWER_NO_PROBE") or "").strip().lower() not in ("1", "true", "yes"),
        )

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Backoff before attempt ``attempt + 1``: ``min(base * 2**(attempt-1), max)`` with +-25% jitter."""
        nominal = min(self.base_delay * 2 ** max(0, attempt - 1), self.max_delay)
        return nominal * (rng or random).uniform(0.75, 1.25)

    def should_retry(self, kind: str) -> bool:
        """Whether a failure of this kind is worth another attempt."""
        # a disk filled by something passing (a temp file, a log) frees up: worth the bounded retries
        return kind in (TRANSIENT, DISK_FULL) or (kind == UNKNOWN and self.retry_unknown)

    async def wait_online(self, notify: Callable[[str], None] | None = None, *,
                          target: tuple[str, int] | None = None,
                          probe: Callable[[str, int, float], Awaitable[bool]] | None = None,
                          sleep: Callable[[float], Awaitable[None]] | None = None,
                          clock: Callable[[], float] | None = None, lang: str = "en",
                          on_state: Callable[[dict], None] | None = None) -> bool:
        """Wait until the endpoint answers a DNS+TCP probe. Returns True when online, False after
        ``max_offline_wait`` seconds. While it waits nobody is left in silence: ``notify`` gets one
        line when the endpoint goes down, one a minute while it stays down ("still offline: 3m of
        60m, next probe in 15s") and one when it is back; ``on_state`` gets the same moments as data
        (``state`` offline/online, host, port, waited_s, max_s, next_probe_s). ``probe``, ``sleep`` and
        ``clock`` are injectable for tests."""
        import asyncio
        if not self.probe:
            return True
        host, port = target or endpoint()
        probe = probe or reachable
        sleep = sleep or asyncio.sleep
        clock = clock or time.monotonic
        start = clock()
        if await probe(host, port, self.probe_timeout):
            return True

        def tell(state: str, key: str) -> None:
            waited = int(clock() - start)
            facts = {"state": state, "host": host, "port": port, "waited_s": waited,
                     "max_s": int(self.max_offline_wait), "next_probe_s": round(self.probe_interval, 1)}
            if on_state:
                on_state(facts)
            if notify:
                notify(text(key, lang, host=host, port=port, seconds=waited if state == "online" else facts["max_s"],
                            waited=_minutes(waited), of=_minutes(facts["max_s"]), next=int(self.probe_interval)))
        tell("offline", "info_offline")
        said = start
        while clock() - start < self.max_offline_wait:
            await sleep(min(self.probe_interval, max(0.0, self.max_offline_wait - (clock() - start))))
            if await probe(host, port, self.probe_timeout):
                tell("online", "info_online")
                return True
            if clock() - said >= 60 and clock() - start < self.max_offline_wait:
                said = clock()
                tell("offline", "info_still_offline")
        return False


def _minutes(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds >= 60 else f"{seconds}s"


# --- Usage limits: a limit that says when it resets is waited out, then the same session goes on ---

LIMIT = "limit"   # how a step ended: a usage limit resets later than FLOWER_MAX_LIMIT_WAIT
EXIT_LIMIT = 6
MAX_LIMIT_WAIT = 6 * 3600.0
_LIMIT_TEXT = _lazy_re(r"(?i)usage limit|limit reached|rate.?limit|quota|limit (?:will )?resets?|\b429\b")
_RESET_EPOCH = _lazy_re(r"(?i)limit reached\|(\d{10})\b")
_RESET_ISO = _lazy_re(r"(?i)resets?\s+(?:at\s+)?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)")
_RESET_CLOCK = _lazy_re(r"(?i)resets?\s+(?:at\s+)?(\d{1,2})(?::(\d\d))?(?::(\d\d))?\s*(am|pm)?(?![\d-])")
_RETRY_AFTER = _lazy_re(r"(?i)(?:retry[- ]after|try again in)\D{0,5}(\d+(?:\.\d+)?)\s*(h(?:ours?)?|m(?:in(?:utes?)?)?|s(?:ec(?:onds?)?)?)?\b")


def _reset_at(message: str, now: float) -> float | None:
    """The epoch second at which a limit named in ``message`` resets (an epoch after ``limit reached|``,
    an ISO time, or a clock time ``resets at 3pm``/``resets 15:30`` taken as local, the next such)."""
    import datetime as dt
    if m := _RESET_EPOCH.search(message):
        return float(m.group(1))
    if m := _RESET_ISO.search(message):
        try:
            when = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00").replace(" ", "T"))
        except ValueError:
            return None
        return when.timestamp() if when.tzinfo else time.mktime(when.timetuple())
    if m := _RESET_CLOCK.search(message):
        hour, minute, second, half = int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0), (m.group(4) or "").lower()
        hour = hour % 12 + (12 if half == "pm" else 0) if half else hour
        if hour > 23 or minute > 59 or second > 59:
            return None
        today = dt.datetime.fromtimestamp(now).replace(hour=hour, minute=minute, second=second, microsecond=0)
        at = today.timestamp()
        return at if at > now else at + 86400
    return None


def limit_wait(message: str | None, *, now: float) -> float | None:
    """Seconds to wait when a failure is a usage limit that says when it resets, or a retry-after of a
    minute or more (pure; None otherwise: a shorter wait is the ordinary backoff's)."""
    body = message or ""
    if not _LIMIT_TEXT.search(body):
        return None
    at = _reset_at(body, now)
    if at is not None:
        return max(0.0, at - now)
    if m := _RETRY_AFTER.search(body):
        unit = (m.group(2) or "s")[0].lower()
        seconds = float(m.group(1)) * {"h": 3600, "m": 60}.get(unit, 1)
        return seconds if seconds >= 60 else None
    return None


async def wait_out_limit(seconds: float, *, sleep: Callable[[float], Awaitable[None]],
                         tell: Callable[[float], None]) -> None:
    """Sleep ``seconds`` in steps of at most a minute, telling the time left before each step."""
    left = seconds
    while left > 0:
        tell(left)
        step = min(60.0, left)
        await sleep(step)
        left -= step


# --- Transcript logic (pure): entries, water level, read-only commands, the prune pipeline ---
#
# A transcript is a list of JSON objects ("entries") as the CLI writes them (sdk-notes §c): user,
# assistant, attachment and system entries chained by ``parentUuid``; bookkeeping entries without a
# ``uuid``. Every function here is pure: same input, same output, input never mutated.

# -- entries: text, API errors, water level, size estimates --

SYNTHETIC_MODEL = "<synthetic>"
_API_ERROR_TEXT = _lazy_re(
    r"^(?:API Error|Request timed out|Prompt is too long|Invalid API key|Credit balance is too low|"
    r"Failed to authenticate|There's an issue with the selected model|Request too large)"
)


def blocks_of(entry: dict) -> list:
    """The content blocks of an entry's message (a string content counts as one text block)."""
    message = entry.get("message")
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def block_text(block: Any) -> str:
    """The plain text of a content block, a tool_result's content, or a string."""
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    if block.get("type") == "text":
        return str(block.get("text", ""))
    if block.get("type") == "tool_result" or block.get("type") is None and "content" in block:
        return _content_text(block.get("content"))   # a string, or a list of blocks (a subagent's report)
    return ""


def _content_text(content: Any) -> str:
    """The text of a result's content: a string, or the strings and text blocks of a list. Nothing
    deeper: the API takes no results within results, and a row nested a few hundred levels deep must
    not exhaust the stack."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_leaf_text(b) for b in content if isinstance(b, (dict, str)))
    return _leaf_text(content)


def _leaf_text(block: Any) -> str:
    """A string, or the text of a text block ("" for anything else)."""
    if isinstance(block, str):
        return block
    return str(block.get("text", "")) if isinstance(block, dict) and block.get("type") == "text" else ""


def entry_text(entry: dict) -> str:
    """All text blocks of an entry joined (tool results excluded)."""
    return "\n".join(str(b.get("text", "")) for b in blocks_of(entry)
                     if isinstance(b, dict) and b.get("type") == "text")


def is_api_error_entry(entry: dict) -> bool:
    """True for the harness's synthetic error entries: ``system/api_error`` rows and synthetic
    assistant rows carrying an API error text (``isApiErrorMessage`` or ``model == "<synthetic>"``)."""
    kind = entry.get("type")
    if kind == "system":
        return entry.get("subtype") == "api_error"
    if kind != "assistant":
        return False
    if entry.get("isApiErrorMessage") is True:
        return True
    message = entry.get("message") if isinstance(entry.get("message"), dict) else {}
    return message.get("model") == SYNTHETIC_MODEL and bool(_API_ERROR_TEXT.match(entry_text(entry).strip()))


def is_main_assistant(entry: dict) -> bool:
    """A real (non-synthetic) assistant entry of the main thread."""
    if entry.get("type") != "assistant" or entry.get("isSidechain"):
        return False
    message = entry.get("message")
    return isinstance(message, dict) and message.get("model") != SYNTHETIC_MODEL


def usage_level(usage: dict | None) -> int:
    """Context tokens of one API call: input + cache_read + cache_creation."""
    if not isinstance(usage, dict):
        return 0
    total = 0
    for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        value = usage.get(key)
        if isinstance(value, (int, float)):
            total += int(value)
    return total


def entry_context(entries: Iterable[dict]) -> int | None:
    """The context level of a transcript: usage of its last non-synthetic main-thread assistant entry
    (with a usage). Looks from the end (a batch's last call is usually its last entry or close)."""
    for entry in reversed(entries if isinstance(entries, (list, tuple)) else list(entries)):
        if is_main_assistant(entry):
            value = usage_level(entry["message"].get("usage"))
            if value:
                return value
    return None


def estimate_tokens(entries: list[dict]) -> int:
    """A conservative token estimate of what a transcript sends (text, tool inputs and results at
    about 3.5 characters a token, an image at its most): errs on the side of a handoff, never an
    overflow. (:func:`prune` can tell it for what it returns without this walk: ``estimate=True``.)"""
    chars = 0
    inputs = []
    for entry in entries:
        kind = entry.get("type")
        if kind != "user" and kind != "assistant":
            continue
        message = entry.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if content.__class__ is str:
            chars += len(content)
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    kind = block.get("type")
                    if kind == "tool_use":
                        inputs.append(block.get("input"))
                    elif kind == "tool_result" or kind == "text":
                        said = block.get("content" if kind == "tool_result" else "text")
                        chars += len(said) if said.__class__ is str else _rich_chars(block)
                    else:
                        chars += _other_chars(block)
        elif isinstance(content, str):
            chars += len(content)
    return _tokens(chars, inputs)


def _tokens(chars: int, inputs: list) -> int:
    """:func:`estimate_tokens` of ``chars`` characters of text and these tool inputs (the JSON text of
    each, from one encoding of all: "[" + ", ".join(...) + "]")."""
    chars += len(_json_text(inputs)) - 2 * len(inputs) if inputs else 0
    return int(chars / 3.5)


# An image costs at most about 1,600 tokens (the API scales it to ~1.15 megapixels; pixels / 750),
# whatever its base64 text weighs: counted as that many tokens' characters.
_IMAGE_CHARS = 1_600 * 7 // 2


def _rich_chars(block: dict) -> int:
    """What a text or tool_result block whose text is not a plain string weighs: its text, and every
    image in it (a subagent's report and a read image come as lists of blocks)."""
    content = block.get("content") if block.get("type") == "tool_result" else None
    images = sum(1 for b in content if isinstance(b, dict) and b.get("type") == "image") \
        if isinstance(content, list) else 0
    return len(block_text(block)) + images * _IMAGE_CHARS


def _other_chars(block: dict) -> int:
    """What a block that is neither text, a tool use nor a result weighs (thinking, an image)."""
    return _IMAGE_CHARS if block.get("type") == "image" else len(str(block.get("thinking", "")))


AGENT_TOOLS = ("Agent", "Task")   # the subagent tool ("Task" in older CLIs)


def _delegate_marks() -> tuple[str, ...]:
    return tuple(table["delegate_denied"].split("{")[0] for table in TEXTS.values())


def is_delegation_rule(entry: dict) -> bool:
    """True for a tool result that is flower's own delegation denial: an instruction that prune keeps
    (it is not a permission denial that teaches helplessness)."""
    marks = _delegate_marks()
    return any(mark in block_text(block) for block in blocks_of(entry) for mark in marks)


def _is_denial(entry: dict) -> bool:
    return (entry.get("toolDenialKind") in ("permission-rule", "user-rejected")
            and isinstance(entry.get("permissionDecision"), dict) and not is_delegation_rule(entry))


def _is_interrupt(entry: dict) -> bool:
    if entry.get("toolDenialKind") == "interrupted":
        return True
    return entry.get("toolUseResult") == "User rejected tool use" and "permissionDecision" not in entry


# -- read-only commands: results of these are "glances" that go stale --

_READ_ONLY_PROGRAMS = {
    "ls", "pwd", "cat", "head", "tail", "wc", "file", "stat", "du", "df", "which", "whoami", "date",
    "echo", "tree", "grep", "egrep", "fgrep", "rg", "uniq", "diff", "cmp", "basename", "dirname",
    "realpath", "readlink", "id", "uname", "hostname", "nl", "less", "more", "type", "true", "test",
    "sort", "sed", "find", "jq", "ps", "free", "uptime",
}
_GIT_READ_ONLY = {"status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "describe",
                  "shortlog", "reflog", "ls-tree", "cat-file", "grep", "branch", "remote", "tag", "stash",
                  "config"}
_FIND_WRITERS = {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}


def _sed_field_end(script: str, i: int, delim: str) -> int:
    """Index just past the unescaped ``delim`` that closes the field starting at ``i`` (-1: none)."""
    while i < len(script):
        if script[i] == "\\":
            i += 2
            continue
        if script[i] == delim:
            return i + 1
        i += 1
    return -1


def _sed_script_read_only(script: str) -> bool:
    """True when a sed script only prints: no ``w``/``W``/``e`` command, no ``s///w`` or ``s///e``.
    Anything it does not recognise counts as writing."""
    i, n = 0, len(script)
    while 0 <= i < n:
        ch = script[i]
        if ch in " \t\n;{}!,$~+0123456789" or ch in "pPdDnNgGhHxlLqQzF=":
            i += 1  # separators, numeric addresses and the commands that only print or edit the buffer
        elif ch in "/\\":  # a regex address: /re/ or \cREc, then its I/M modifiers
            i = _sed_field_end(script, i + 1, "/") if ch == "/" else \
                (_sed_field_end(script, i + 2, script[i + 1]) if i + 1 < n else -1)
            while 0 < i < n and script[i] in "IM":
                i += 1
        elif ch in "sy" and i + 1 < n:
            delim = script[i + 1]
            i = _sed_field_end(script, i + 2, delim)
            i = _sed_field_end(script, i, delim) if i > 0 else -1
            start = i
            while 0 < i < n and script[i].isalnum():
                i += 1
            if ch == "s" and i > 0 and set(script[start:i]) & {"w", "e"}:
                return False  # s///w FILE writes; s///e runs the pattern space as a command
        elif ch in "aicrRbtT:#":  # text, a file to read, a label or a comment: up to the end of the line
            end = script.find("\n", i)
            i = n if end < 0 else end
        else:
            return False
    return i >= 0


def _reads_only(args: list[str], flags: frozenset, valued: frozenset,
                operands: Callable[[list[str], list[str]], bool]) -> bool:
    """True when every flag in ``args`` is one that keeps the program read-only (``valued`` ones take
    a value: ``--f=v``, ``--f v``, ``-fv`` or ``-f v``) and ``operands(operands, values)`` agrees."""
    ops: list[str] = []
    values: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            ops += args[i + 1:]
            break
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            if name in valued:
                if "=" not in arg:
                    i += 1
                values.append(arg.split("=", 1)[1] if "=" in arg else (args[i] if i < len(args) else ""))
            elif arg not in flags:
                return False
        elif arg.startswith("-") and arg != "-":
            for j, letter in enumerate(arg[1:], 2):
                if "-" + letter in valued:
                    if j == len(arg):
                        i += 1
                    values.append(arg[j:] if j < len(arg) else (args[i] if i < len(args) else ""))
                    break
                if "-" + letter not in flags:
                    return False
        else:
            ops.append(arg)
        i += 1
    return operands(ops, values)


def _forms(flags: str, valued: str = "",
           operands: Callable[[list[str], list[str]], bool] = lambda ops, values: True) -> tuple:
    return frozenset(flags.split()), frozenset(valued.split()), operands


# Programs that have writing forms, with the flags that keep them read-only (an allow-list: a flag
# missing here makes the command count as writing, so its result is kept rather than expired).
_READ_ONLY_FORMS = {
    "sed": _forms("-n --quiet --silent -E -r --regexp-extended -s --separate -z --null-data -u "
                  "--unbuffered --posix --debug", "-e --expression -l --line-length",
                  lambda ops, values: bool(values or ops) and
                  all(_sed_script_read_only(x) for x in (values or ops[:1]))),
    "sort": _forms("-b -d -f -g -i -M -h -n -R -r -V -c -C -m -s -u -z --ignore-leading-blanks "
                   "--dictionary-order --ignore-case --general-numeric-sort --ignore-nonprinting "
                   "--month-sort --human-numeric-sort --numeric-sort --random-sort --reverse "
                   "--version-sort --check --merge --stable --unique --zero-terminated",
                   "-k --key -t --field-separator -S --buffer-size -T --temporary-directory --parallel "
                   "--sort --random-source"),
    "uniq": _forms("-c -d -D -u -i -z --count --repeated --all-repeated --unique --ignore-case "
                   "--zero-terminated", "-f --skip-fields -s --skip-chars -w --check-chars",
                   lambda ops, values: len(ops) <= 1),  # uniq IN OUT writes OUT
    "tree": _forms("-a -d -l -f -x -R -i -q -N -Q -p -u -g -s -h -D -F -v -t -c -U -r -n -C -A -S "
                   "--si --du --prune --noreport --dirsfirst --inodes --device --matchdirs "
                   "--ignore-case --gitignore -J -X", "-L -P -I -T -H --charset --filelimit --timefmt"),
    "date": _forms("-u --utc --universal -R --rfc-email -I --iso-8601",
                   "-d --date -r --reference --rfc-3339",
                   lambda ops, values: all(o.startswith("+") for o in ops)),  # date MMDDhhmm sets the clock
    "hostname": _forms("-f --fqdn --long -s --short -i --ip-address -I --all-ip-addresses -d --domain "
                       "-a --alias -A --all-fqdns -y --yp --nis", "",
                       lambda ops, values: not ops),  # hostname NAME sets it
}


def _git_read_only(args: list[str]) -> bool:
    i = 0
    while i < len(args) and args[i].startswith("-"):  # global options such as -C dir, --no-pager
        if args[i] in ("-C", "-c"):
            if args[i] == "-c":
                return False
            i += 1
        i += 1
    if i >= len(args):
        return False
    sub, rest = args[i], args[i + 1:]
    if sub not in _GIT_READ_ONLY:
        return False
    positional = [a for a in rest if not a.startswith("-")]
    flags = [a for a in rest if a.startswith("-")]
    if sub == "branch":
        listing = {"-a", "-r", "-v", "-vv", "--all", "--remotes", "--list", "-l", "--show-current",
                   "--verbose", "--merged", "--no-merged", "--contains"}
        return all(f in listing for f in flags) and (not positional or "--list" in flags or "-l" in flags)
    if sub == "remote":
        return (not positional or positional[:1] in (["show"], ["get-url"])) and all(f in ("-v", "--verbose") for f in flags)
    if sub == "tag":
        return not positional or "-l" in flags or "--list" in flags
    if sub == "stash":
        return positional[:1] in (["list"], ["show"])
    if sub == "config":
        return any(f in ("--get", "--list", "-l", "--get-all", "--get-regexp") for f in flags)
    if sub == "reflog":  # its default is show; expire and delete rewrite the reflog
        return positional[:1] in ([], ["show"], ["exists"])
    if sub in ("diff", "log", "show") and any(f == "--output" or f.startswith("--output=") for f in flags):
        return False
    if sub == "grep" and any(f.startswith("--open-files") or (f[1:2] != "-" and "O" in f) for f in flags):
        return False  # -O<pager> runs a program on the matching files
    return True


def _program_name(word: str) -> str:
    """``os.path.basename(word)``, without its function calls where paths are POSIX (once per word of
    thousands of distinct commands on a cold resume)."""
    return word[word.rfind("/") + 1:] if os.sep == "/" and not os.altsep else os.path.basename(word)


def _segment_read_only(argv: list[str]) -> bool:
    if not argv:
        return False
    program = _program_name(argv[0])
    args = argv[1:]
    if program == "git":
        return _git_read_only(args)
    if program not in _READ_ONLY_PROGRAMS:
        return False
    if program in _READ_ONLY_FORMS:
        return _reads_only(args, *_READ_ONLY_FORMS[program])
    if program == "find":
        return not any(a in _FIND_WRITERS for a in args)
    return True


# Exactly what shlex (posix, punctuation_chars, whitespace_split) makes of a command without backslashes
# or comments: runs of its punctuation characters, and words (unquoted runs and '...' / "..." parts).
_SHELL_TOKEN = _lazy_re(r"""[();<>|&]+|(?:[^ \t\r\n'"();<>|&]+|'[^']*'|"[^"]*")+""")
# Every quote closed: runs without quotes, each quoted part followed by one (no nested repetition, so
# an unclosed quote fails in linear time).
_QUOTES_CLOSED = _lazy_re(r"""[^'"]*(?:(?:'[^']*'|"[^"]*")[^'"]*)*""")
_QUOTED = _lazy_re(r"'([^']*)'|\"([^\"]*)\"")
# A first word shlex would return unchanged: no quote, escape, comment, punctuation or "=" in it or right
# after it.
_FIRST_WORD = _lazy_re(r"""[ \t\r]*([^ \t\r\n'"\\#();<>|&=]+)(?=[ \t\r\n();<>|&]|\Z)""")
_VAR_ASSIGNMENT = _lazy_re(r"[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECTION = _lazy_re(r"[|;()]*[<>&][<>&|;()]*")
_PUNCTUATION = frozenset("<>&|;()")


def shell_words(cmd: str) -> list[str] | None:
    """The words shlex (posix, punctuation_chars, whitespace_split) makes of ``cmd``, by regex; None
    when ``cmd`` has a backslash or a ``#`` (escapes and comments: ask shlex) or an unclosed quote."""
    if "\\" in cmd or "#" in cmd:
        return None
    if "'" not in cmd and '"' not in cmd:
        return _SHELL_TOKEN.findall(cmd)
    if not _QUOTES_CLOSED.fullmatch(cmd):
        return None
    return [_unquoted(token) if "'" in token or '"' in token else token for token in _SHELL_TOKEN.findall(cmd)]


def _unquoted(word: str) -> str:
    """A word of unquoted runs and '...' / "..." parts, quotes removed (a part holds no quote of its own
    kind, and an unquoted run holds none: with one kind of quote only, removing it is exact)."""
    if '"' not in word:
        return word.replace("'", "")
    if "'" not in word:
        return word.replace('"', "")
    return _QUOTED.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), word)


def is_read_only_command(cmd: str) -> bool:
    """True when the shell command only looks at things: every part of a pipeline or ``&&``/``;``
    chain is a known read-only program (git only in its reading forms). Substitution, redirection,
    ``env``-style wrappers, writing git forms, ``sed -i`` and ``sort -o`` are not read-only."""
    return isinstance(cmd, str) and _read_only(cmd)


@functools.lru_cache(maxsize=16384)
def _read_only(cmd: str) -> bool:
    """:func:`is_read_only_command`, fast where it can be: a first word that names no read-only
    program settles it without parsing, and :func:`shell_words` splits most commands instead of
    shlex (both exact: tests compare them with the full parse)."""
    first = _FIRST_WORD.match(cmd)
    if first is not None:
        program = _program_name(first.group(1))
        if program != "git" and program not in _READ_ONLY_PROGRAMS:
            return False
    return _read_only_parsed(cmd, shell_words(cmd))


def _read_only_parsed(cmd: str, tokens: list[str] | None = None) -> bool:
    """The full check; ``tokens`` are the shell words when already known (else shlex splits ``cmd``)."""
    if not cmd.strip():
        return False
    if "$(" in cmd or "`" in cmd or "<(" in cmd or ">(" in cmd or "\n" in cmd:
        return False
    if tokens is None:
        try:
            lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError:
            return False
    segment: list[str] = []
    for token in tokens:
        if token == "|" or token == "||" or token == "&&" or token == ";":
            if not _segment_read_only(segment):
                return False
            segment = []
        elif token[:1] in _PUNCTUATION and _REDIRECTION.fullmatch(token):
            return False  # redirections and background jobs
        elif not segment and "=" in token and _VAR_ASSIGNMENT.match(token):
            return False  # VAR=value cmd
        else:
            segment.append(token)
    return _segment_read_only(segment)


is_read_only_command.cache_clear = _read_only.cache_clear   # type: ignore[attr-defined]
is_read_only_command.cache_info = _read_only.cache_info     # type: ignore[attr-defined]


# -- the prune pipeline: policy, report, the passes over a transcript --

@record
class PrunePolicy:
    """What ``prune`` does to a transcript before a resumed model sees it."""

    keep_denials: int = 1
    keep_unavailable: int = 1
    drop_api_errors: bool = True
    neutralize_interrupts: bool = True
    expire_glances: bool = True
    keep_glances: int = 6
    glance_max_chars: int = 2000
    trim: bool = False
    trim_keep: int = 20
    trim_min_chars: int = 2000
    spill_dir: str | None = None
    lang: str = "en"
    # When what this policy leaves is estimated at more than ``budget`` tokens, the last steps (glances,
    # trim) take ``fallback`` instead, in the same prune (see PruningSessionStore.prepare); it must trim at
    # least what this one trims: rows a load reads cut for this policy are taken as trimmed by it too
    budget: int | None = None
    fallback: PrunePolicy | None = None
    # A store reads a row cut by its cut fact even where its spill file is not written yet, and counts
    # it in the report's ``unspilled`` (prepare's deciding pass: a session that does not fit writes none)
    cut_unwritten: bool = False
    # Prepare's deciding pass: a session over ``budget`` whatever the last steps leave is pruned no further
    # than its scan (see _prune), and a store that can (``outline_load``) keeps the outline of such a
    # session for the handoff that reads it next (see OutlineTaker)
    deciding: bool = False


@record
class PruneReport:
    """What one ``prune`` run changed (all counts), plus the spill files trim wants written."""

    dropped_errors: int = 0
    denials_dropped: int = 0
    unavailable_dropped: int = 0
    interrupts: int = 0
    expired: int = 0
    trimmed: int = 0
    healed: int = 0
    chars_saved: int = 0
    spills: dict[str, str] = field(default_factory=dict)
    tokens: int | None = None   # estimate_tokens() of what the prune returned, when asked for and known
    unspilled: int = 0          # results read cut whose spill file is not written (PrunePolicy.cut_unwritten)

    def as_dict(self) -> dict:
        """The counts, for events and logs (without the spill texts, the estimate and ``unspilled``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("spills", "tokens", "unspilled")}


def _survivors(drop_uuids: set, parent_of: dict) -> Callable[[str | None], str | None]:
    """uid -> its nearest ancestor not in ``drop_uuids`` (None when there is none; loop-safe, memoised)."""
    resolved: dict[str, str | None] = {}

    def survivor(uid: str | None) -> str | None:
        chain = []
        while uid.__class__ is str and uid in drop_uuids:   # only string uuids ever leave
            if uid in resolved:
                uid = resolved[uid]
                break
            resolved[uid] = None   # met again before it is resolved: a loop, no surviving ancestor
            chain.append(uid)
            uid = parent_of.get(uid)
        for dropped in chain:
            resolved[dropped] = uid
        return uid
    return survivor


def relink(entries: list[dict], drop_uuids: set, parents: dict | None = None) -> list[dict]:
    """Remove the entries whose ``uuid`` is in ``drop_uuids`` and point every survivor whose
    ``parentUuid`` names a removed entry at its nearest surviving ancestor (loop-safe).
    Entries without a uuid are kept untouched. ``parents`` (uuid -> parentUuid) may describe
    entries already left out of ``entries``. Returns a new list; changed entries are copies."""
    parent_of = parents if parents is not None else \
        {e["uuid"]: e.get("parentUuid") for e in entries if isinstance(e.get("uuid"), str)}
    survivor = _survivors(drop_uuids, parent_of)
    out = []
    for entry in entries:
        uid = entry.get("uuid")
        if isinstance(uid, str) and uid in drop_uuids:
            continue
        parent = entry.get("parentUuid")
        if isinstance(parent, str) and parent in drop_uuids:
            entry = dict(entry)
            entry["parentUuid"] = survivor(parent)
        out.append(entry)
    return out


def _replace_result(entry: dict, index: int, new_content: str, *, is_error: bool | None = None) -> dict:
    """Copy of ``entry`` whose block ``index`` (a tool_result) gets ``new_content``."""
    entry = dict(entry)
    message = dict(entry["message"])
    content = list(message["content"])
    block = dict(content[index])
    block["content"] = new_content
    if is_error is not None:
        block["is_error"] = is_error
    content[index] = block
    message["content"] = content
    entry["message"] = message
    return entry


_TRIM_PREFIXES = tuple(table["trimmed_result"].split("{")[0] for table in TEXTS.values())


@contextlib.contextmanager
def _gc_paused() -> Any:
    """Pause the cyclic GC while building large acyclic structures (prune, load): otherwise it walks
    the growing heap again and again for nothing, and the cost per entry grows with the transcript.
    Nested pauses are one pause (only the outermost re-enables).

    What the pause made is then filed with the old objects (``freeze`` + ``unfreeze`` is two list
    splices, and resets the young count): else the first allocation after ``enable`` runs a young
    collection that walks every object the pause made, and the next full collection walks them all
    again. Long-lived data is what the old generation is for; the full collection still sees it. Not
    when someone else froze objects (``unfreeze`` would thaw theirs too)."""
    was_enabled = gc.isenabled()
    frozen = gc.get_freeze_count()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if not frozen:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def prune(entries: list[dict], policy: PrunePolicy | None = None) -> tuple[list[dict], PruneReport]:
    """What a resumed model should be sent: ``entries`` with error noise removed and old bulk
    shortened, as a new list. Deterministic, idempotent, linear time; the input is not mutated.

    Steps: drop API-error entries; keep only the newest ``keep_denials`` permission denials;
    neutral text for interrupted tool results; expire old results of read-only commands; trim old
    huge tool results into spill files (returned in the report, written by the caller); re-link
    ``parentUuid`` past dropped entries; heal tool_uses that have no result.
    """
    with _gc_paused():
        return _prune(entries, policy or PrunePolicy())


class _Pruning:
    """The working state of one prune: the entry list being rewritten and what one scan of it found.
    Later steps look only at what the scan indexed, never at every entry again."""

    __slots__ = ("policy", "own", "report", "work", "pars", "parents", "drop", "gone", "results", "uses", "errors",
                 "call_at", "call_ids", "call_uids", "bash", "empty", "halted", "healed", "careful", "marks", "dropped", "planned",
                 "chars", "extra", "recount")

    def __init__(self, policy: PrunePolicy, own: bool = False):
        self.policy = policy
        self.own = own                                      # the entries are ours: change them in place
        self.report = PruneReport()
        self.work: list[dict] = []                          # the surviving entries, rewritten in place
        self.pars: list = []                                # the parentUuid each entry of ``work`` came with
        self.parents: dict[str, Any] = {}                   # uuid -> parentUuid of the entries that leave (of all
                                                            # entries when careful)
        self.drop: set = set()                              # uuids leaving the chain
        self.gone: list[int] = []                           # entries of ``work`` leaving the chain
        self.results: list[tuple] = []                      # (entry, block index, block, tool_use_id), in order
        self.uses: dict[str, tuple[int, dict, bool]] = {}   # tool_use id -> (entry, block, its only block)
        self.errors: list[tuple] = []                       # the tool_results with is_error: (entry, block
                                                            # index, block, whether the entry is a denial)
        self.call_at: list[int] = []                        # main-thread assistant entries: their positions,
        self.call_ids: list = []                            # the API calls they came from (message id), and
        self.call_uids: list = []                           # their uuids
        self.bash: dict[str, tuple] = {}                    # tool_use id -> (entry, command or None), for
                                                            # Bash calls
        self.empty: list[int] = []                          # user/assistant entries with an empty content list
        self.halted: set = set()                            # entries with results that may be interrupted calls
        self.healed: set = set()                            # flower's own healing entries
        self.careful = False                                # a uuid twice or not a string: check uuids everywhere
        self.marks: dict[int, str] | None = None            # entry -> the stored verdict of its Bash call (valid
                                                            # while ``work`` holds every entry the prune was given)
        self.planned = False                                # old results a store left out (plan_leavers)
        self.dropped: list[tuple] = []                      # API-error entries the scan dropped: (len(work) then,
                                                            # uuid, parentUuid), for a careful re-link
        self.chars = 0                                      # what estimate_tokens counts of ``work`` but for
        self.extra: list = []                               # ``results`` and ``uses``; the inputs of the tool
        self.recount = False                                # uses not in ``uses``; whether only a walk can tell

    def set_result(self, k: int, new_content: str, is_error: bool | None = None) -> dict:
        """Row ``k`` of ``results`` gets ``new_content`` (its entry copied unless the entries are ours);
        returns the entry."""
        i, j, block, tool_id = self.results[k]
        if self.own:
            block["content"] = new_content
            if is_error is not None:
                block["is_error"] = is_error
            return self.work[i]
        self.work[i] = entry = _replace_result(self.work[i], j, new_content, is_error=is_error)
        self.results[k] = (i, j, entry["message"]["content"][j], tool_id)
        return entry

    def set_content(self, i: int, content: list) -> dict:
        """Entry ``i`` gets a message with ``content`` (a copy unless the entries are ours); returns it."""
        entry = self.work[i]
        if self.own:
            entry["message"]["content"] = content
            return entry
        self.work[i] = entry = _with_content(entry, content)
        return entry


class PlanBroken(ValueError):
    """A row the plan did not expect names one of its tool ids: load again without the plan."""


@record
class LeavePlan:
    """What :func:`plan_leavers` decided: rows not to read, and what watches the plan during the scan."""

    skip: set = field(default_factory=set)             # uuids of the rows that leave unread
    left: list = field(default_factory=list)           # (uuid, parentUuid, chars, what) for _prune
    results: set = field(default_factory=set)          # tool ids no result in the scan may name
    uses: dict = field(default_factory=dict)           # tool id -> the only row that may use it (None: none)
    cuts: dict = field(default_factory=dict)           # seq -> (uuid, fact, trim marker) of a row read cut (plan_cuts)
    cut_saved: int = 0                                 # what those markers save
    noted: dict | None = None                          # seq -> (uuid, fact) of rows with a cut fact (None: note none)
    unspilled: int = 0                                 # rows read cut whose spill file is not written


def _prune(entries: Iterable[dict], policy: PrunePolicy, consume: bool = False, left: Iterable[tuple] = (),
           marks: dict[int, str] | None = None, plan: LeavePlan | None = None,
           estimate: bool = False) -> tuple[list[dict], PruneReport]:
    """:func:`prune`; ``consume``: the entries are the caller's to give away (fresh from a load): they
    are changed in place instead of copied, and a list of them is emptied (what leaves is freed early).
    ``entries`` may be an iterator that parses them a batch at a time: each is then indexed while it is
    still fresh in the CPU cache. ``left`` and ``marks`` are what stored facts told (see :func:`entry_facts`):
    (uuid, parentUuid, chars, what) of rows the store left out of ``entries`` (what: "error", "denial",
    "unavailable" or "use"; the result is as if they had been there; read once the entries are), and
    the stored verdicts of lone Bash calls
    (position in ``entries`` -> "1" read-only or "0"). With a ``plan`` (:func:`plan_leavers`) a row
    naming one of the tool ids it left out raises :class:`PlanBroken`, as does any entry with the uuid
    of a row in ``left``. ``estimate``: the report's ``tokens`` is :func:`estimate_tokens` of what it
    returns, told from what the scan counted (None where only a walk can tell). With a ``deciding``
    policy, where the scan alone counts more than its budget: [] and that count as ``tokens`` (over the
    budget whatever the fallback's steps would leave), no entry changed."""
    st = _drop_api_errors(entries, policy, consume, left, marks, plan)
    if consume and isinstance(entries, list):
        entries.clear()
    if policy.deciding and _over_anyway_at(st, policy, consume):   # it will not fit: prepare wants no more
        st.report.tokens = _tokens(st.chars, [])
        return [], st.report
    _drop_old_results(st)
    # from here on entries are only replaced, never removed: (i, j) positions stay valid, and a step
    # that replaces a block puts the new one in its row of ``results``
    if policy.neutralize_interrupts:
        _neutralize_interrupts(st)
    if _over_anyway_at(st, policy, consume):
        st.policy = policy = policy.fallback
        late = _late_steps(st, policy)
    else:
        late = _late_steps(st, policy)
        if policy.fallback is not None and policy.budget is not None:
            tokens = _estimate(st, late)
            if tokens is not None and tokens > policy.budget:   # decided here: the fallback's steps instead
                st.policy = policy = policy.fallback
                late = _late_steps(st, policy)
    _expire(st, late[0])
    _trim(st, late[1])
    out = _relink_and_heal(st)
    if estimate:
        st.report.tokens = _estimate(st)
    return out, st.report


# -- prune steps: API errors, old results and uses, interrupts, stale glances --

def _late_steps(st: _Pruning, policy: PrunePolicy) -> tuple[list[tuple[int, str, str]], list[tuple]]:
    """What steps 4 and 5 would change with ``policy``, before they change it: the glances that expire
    ((k, text now, marker), newest first) and the results trimmed ((k, full text, spill path, marker))."""
    expiries = _expiries(st, _stale_glances(st, policy), policy) if policy.expire_glances else []
    trims = _trims(st, policy, {k: marker for k, _, marker in expiries}) if policy.trim else []
    return expiries, trims


def _estimate(st: _Pruning, late: tuple[list, list] | None = None) -> int | None:
    """:func:`estimate_tokens` of what the prune returns: what the scan counted of the entries kept,
    plus the results and the indexed tool uses as the steps left them, plus the healing entries. None
    where entries may have left unseen (careful) or a tool use is not indexed once (an id twice).
    With ``late`` (see :func:`_late_steps`), before those steps and the healing are done: as if they were."""
    if st.careful or st.recount:
        return None
    healed = st.report.healed if late is None else sum(map(len, _orphans(st).values()))
    chars = st.chars + healed * len(text("killed_result", st.policy.lang))
    for _, _, block, _ in st.results:
        said = block.get("content")
        chars += len(said) if said.__class__ is str else _rich_chars(block)
    if late:
        final = {k: marker for k, _, marker in late[0]}
        final.update((k, marker) for k, _, _, marker in late[1])
        for k, marker in final.items():
            block = st.results[k][2]
            said = block.get("content")
            chars += len(marker) - (len(said) if said.__class__ is str else _rich_chars(block))
    inputs = [use[1].get("input") for use in st.uses.values()]
    inputs += st.extra
    try:
        return _tokens(chars, inputs)
    except (TypeError, ValueError, RecursionError):   # not JSON (prune's own callers): the walk raises it
        return None


def _over_anyway(st: _Pruning, budget: int) -> bool:
    """Whether what the scan counted besides the results and tool inputs is over ``budget`` already:
    then :func:`_estimate` is over it whatever the late steps leave (they only shorten results, and
    the results, inputs and healing entries only add), and a prune with a fallback takes the fallback's
    steps without working out its own first (a huge session that will not fit). Only where
    :func:`_estimate` tells a size (not careful, every use indexed once) and for entries parsed from
    JSON (``consume``: their inputs encode again)."""
    return not (st.careful or st.recount) and _tokens(st.chars, []) > budget


def _over_anyway_at(st: _Pruning, policy: PrunePolicy, consume: bool) -> bool:
    """Whether a prune with ``policy`` takes its fallback's steps at once (see :func:`_over_anyway`)."""
    return policy.fallback is not None and policy.budget is not None and consume and _over_anyway(st, policy.budget)


def _size(done: tuple[list[dict], PruneReport]) -> int:
    """The token estimate of what a prune returned (entries, report): as it told it, else by a walk."""
    return estimate_tokens(done[0]) if done[1].tokens is None else done[1].tokens


_REJECTED = "User rejected tool use"


def _drop_api_errors(entries: Iterable[dict], policy: PrunePolicy, own: bool = False, left: Iterable[tuple] = (),
                     marks: dict[int, str] | None = None, plan: LeavePlan | None = None) -> _Pruning:
    """Step 1: API-error entries leave (one without a uuid is outside the chain: just left out). The
    same pass indexes what the later steps need (tool results and uses, errors, API calls, parents).
    ``left``, ``marks`` and ``plan``: what stored facts told (see :func:`_prune`)."""
    st = _Pruning(policy, own)
    watched_uses = plan.uses if plan else None
    watched_results = plan.results if plan else None
    work, pars, results, errors, uses, bash, empty = st.work, st.pars, st.results, st.errors, st.uses, st.bash, st.empty
    call_at, call_ids, call_uids = st.call_at, st.call_ids, st.call_uids
    drop_errors = policy.drop_api_errors
    uids = []   # every string uuid: a set of them tells whether one comes twice (cheaper than a map of all)
    st.marks = marks
    counted = 0   # what estimate_tokens counts of the entries kept, but for results and indexed tool uses
    extra = st.extra   # the inputs of the tool uses not indexed in ``uses``
    indexed = 0        # tool uses indexed (more than ``uses`` holds: an id came twice)
    for entry in entries:
        get = entry.get
        uid = get("uuid")
        parent = get("parentUuid")
        if uid.__class__ is str:
            uids.append(uid)
        elif uid is not None:
            st.careful = True
        kind = get("type")
        if kind == "assistant":
            message = get("message")
            is_message = isinstance(message, dict)
            model = message.get("model") if is_message else None
            if drop_errors and (get("isApiErrorMessage") is True or model == SYNTHETIC_MODEL) and \
                    is_api_error_entry(entry):
                _drop_error(st, entry, uid, parent)
                continue
            if is_message:
                i = len(work)
                content = message.get("content")
                if isinstance(content, list):
                    if not content:
                        empty.append(i)
                    alone = len(content) == 1
                    for block in content:   # tool uses: the last use of an id decides
                        if not isinstance(block, dict):
                            continue
                        btype = block.get("type")
                        if btype == "tool_use":
                            tool_id = block.get("id")
                            if tool_id and tool_id.__class__ is str:   # a bad row stays as it is
                                if watched_uses and tool_id in watched_uses and watched_uses[tool_id] != uid:
                                    raise PlanBroken(tool_id)
                                uses[tool_id] = (i, block, alone)
                                indexed += 1
                                if block.get("name") == "Bash":   # its command, read while the row is at hand
                                    args = block.get("input")
                                    command = args.get("command") if isinstance(args, dict) else None
                                    bash[tool_id] = (i, command if isinstance(command, str) else None)
                                elif bash:
                                    bash.pop(tool_id, None)
                            else:
                                extra.append(block.get("input"))
                        elif btype == "text":
                            said = block.get("text")
                            counted += len(said) if said.__class__ is str else _rich_chars(block)
                        elif btype == "tool_result":   # in an assistant entry: no step looks at it
                            said = block.get("content")
                            counted += len(said) if said.__class__ is str else _rich_chars(block)
                        else:
                            counted += _other_chars(block)
                elif content.__class__ is str:
                    counted += len(content)
                if model != SYNTHETIC_MODEL and not get("isSidechain"):
                    call = message.get("id") or uid
                    call_at.append(i)
                    call_ids.append(call if call.__class__ is str else i)   # a bad id: a call of its own
                    call_uids.append(uid)
        elif kind == "user":
            message = get("message")
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                i = len(work)
                if not content:
                    empty.append(i)
                found = len(results)
                for j, block in enumerate(content):
                    if not isinstance(block, dict):
                        continue
                    btype = block.get("type")
                    if btype == "tool_result":   # counted once the steps are done with it
                        tool_id = block.get("tool_use_id")
                        if watched_results and tool_id.__class__ is str and tool_id in watched_results:
                            raise PlanBroken(tool_id)
                        results.append((i, j, block, tool_id if tool_id.__class__ is str else None))
                        if block.get("is_error"):
                            errors.append((i, j, block, _is_denial(entry)))   # while the entry is at hand
                    elif btype == "text":
                        said = block.get("text")
                        counted += len(said) if said.__class__ is str else _rich_chars(block)
                    elif btype == "tool_use":   # in a user entry: no step looks at it
                        extra.append(block.get("input"))
                    else:
                        counted += _other_chars(block)
                if found != len(results):
                    if get("toolUseResult") == _REJECTED or get("toolDenialKind") == "interrupted":
                        st.halted.add(i)
                    if get("flowerHealed"):
                        st.healed.add(i)
            elif content.__class__ is str:
                counted += len(content)
        elif kind == "system" and drop_errors and get("subtype") == "api_error":
            _drop_error(st, entry, uid, parent)
            continue
        work.append(entry)
        pars.append(parent)
    st.chars = counted
    st.recount = indexed != len(uses)
    gone = []   # the uuids of the rows left out
    for uid, parent, chars, what in left:
        gone.append(uid)
        if what == "error":
            _drop_error(st, None, uid, parent, chars)
            continue
        st.report.chars_saved += chars
        if what != "use":
            st.planned = True
            if what == "denial":
                st.report.denials_dropped += 1
            else:
                st.report.unavailable_dropped += 1
        if uid.__class__ is str:
            st.drop.add(uid)
            st.parents[uid] = parent
    seen = set(uids)
    if gone and not seen.isdisjoint(gone):   # which of the two comes last (names the parent) is not known
        raise PlanBroken("a row read has the uuid of a row left unread")
    if st.careful or len(seen) != len(uids):   # a uuid twice: the last entry with it names its parent
        st.careful = True
        st.parents = _all_parents(st)
    if plan is not None and plan.cuts:   # rows read cut: trimmed already, as _trim would have
        if st.careful:   # where entries may leave the chain unseen, the plan may be wrong
            raise PlanBroken("rows read cut in a careful prune")
        st.report.trimmed += len(plan.cuts)
        st.report.chars_saved += plan.cut_saved
        st.report.unspilled = plan.unspilled
    return st


def _all_parents(st: _Pruning) -> dict[str, Any]:
    """uuid -> parentUuid of every entry the scan met, in their order (the last entry with a uuid names
    its parent), then of the rows the store left out (their uuids are unique)."""
    parents: dict[str, Any] = {}
    dropped, d = st.dropped, 0
    for k, entry in enumerate(st.work):
        while d < len(dropped) and dropped[d][0] <= k:
            _, uid, parent = dropped[d]
            d += 1
            if isinstance(uid, str):
                parents[uid] = parent
        uid = entry.get("uuid")
        if isinstance(uid, str):
            parents[uid] = st.pars[k]
    for _, uid, parent in dropped[d:]:
        if isinstance(uid, str):
            parents[uid] = parent
    for uid, parent in st.parents.items():
        parents.setdefault(uid, parent)
    return parents


def _drop_error(st: _Pruning, entry: dict | None, uid: Any, parent: Any, chars: int = 0) -> None:
    """An API-error entry leaves (``entry`` None: a row the store left out, which saves ``chars``)."""
    st.report.dropped_errors += 1
    if entry is None:
        st.report.chars_saved += chars
    else:
        st.report.chars_saved += ("message" in entry and len(entry_text(entry))) or len(str(entry.get("error", "")))
        st.dropped.append((len(st.work), uid, parent))
        st.marks = None   # positions in ``work`` are no longer those of the entries the marks were made for
    if uid.__class__ is str:
        st.drop.add(uid)
        st.parents[uid] = parent


def _leaving(drop: set, uid: Any) -> bool:
    """Whether the entry with ``uid`` leaves the chain (only string uuids ever do: a row with a bad
    uuid stays as it is, and must not crash the resume)."""
    return uid.__class__ is str and uid in drop


_UNAVAILABLE = "No such tool available:"
_JSON_ENCODERS: dict = {}


def _compact_json() -> Callable[[Any], str]:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` as one reusable encoder."""
    return _JSON_ENCODERS.get(",") or _encoder(",", ":")


def _json_text(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)`` without building an encoder on every call."""
    return (_JSON_ENCODERS.get(", ") or _encoder(", ", ": "))(value)


def _encoder(item_sep: str, key_sep: str) -> Callable[[Any], str]:
    """``json.JSONEncoder(ensure_ascii=False, separators=(item_sep, key_sep)).encode``, made once.
    That method builds json's C encoder anew on every call (about 2 us of the 4 us that dumping a
    small entry costs, paid for every row a store appends); here it is built once, without the check for
    circular containers (what is encoded comes from JSON: a cycle would raise RecursionError, not
    ValueError). Where the C encoder is missing or does not give the same text, the method itself."""
    plain = json.JSONEncoder(ensure_ascii=False, separators=(item_sep, key_sep))
    encode = plain.encode
    try:
        from json.encoder import c_make_encoder, encode_basestring
        made = c_make_encoder(None, plain.default, encode_basestring, None, key_sep, item_sep, False, False, True)
        probe = {"a": [1, -2.5, None, True, "é\n\"", float("inf")], "": {"b": []}}
        if "".join(made(probe, 0)) == encode(probe):
            def encode(value: Any) -> str:
                return "".join(made(value, 0))
    except Exception:   # no C encoder (another Python), or one called differently: the plain method
        pass
    _JSON_ENCODERS[item_sep] = encode
    return encode


def _old_results(st: _Pruning) -> list[tuple[int, int, dict]]:
    """The error results step 2 removes: all permission denials but the newest ``keep_denials``, and
    all unavailable-tool errors but the newest ``keep_unavailable`` per tool (counted in the report)."""
    uses = st.uses
    denials, unavailable = [], {}
    for i, j, b, denial in st.errors:
        if denial:
            denials.append((i, j, b))
        elif _UNAVAILABLE in block_text(b):
            use = uses.get(b.get("tool_use_id"))
            unavailable.setdefault(use[1].get("name") if use else "", []).append((i, j, b))
    old = denials[:max(0, len(denials) - max(0, st.policy.keep_denials))]
    keep = max(0, st.policy.keep_unavailable)
    stale_unavailable = [r for rows in unavailable.values() for r in rows[:max(0, len(rows) - keep)]]
    st.report.denials_dropped += len(old)
    st.report.unavailable_dropped += len(stale_unavailable)
    return old + stale_unavailable


def _drop_old_results(st: _Pruning) -> None:
    """Step 2: results that teach helplessness go, but the newest (see :func:`_old_results`). The
    tool_use and its tool_result both leave; an entry left empty leaves the chain."""
    old = _old_results(st)
    if not old and not st.planned:
        return
    work = st.work
    drop_result = {(i, j) for i, j, _ in old}
    changed = sorted({i for i, _, _ in old})
    fresh: dict[int, list] = {}
    for i in changed:
        content = work[i]["message"]["content"]
        if len(content) == 1:   # the usual case: its one block goes
            st.report.chars_saved += len(block_text(content[0]))
            kept = []
        else:
            st.report.chars_saved += sum(len(block_text(b)) for j, b in enumerate(content) if (i, j) in drop_result)
            kept = [b for j, b in enumerate(content) if (i, j) not in drop_result]
        if _leaves(st, i, kept):
            continue
        st.set_content(i, kept).pop("toolUseResult", None)
        fresh[i] = [(i, j, b, tid if (tid := b.get("tool_use_id")).__class__ is str else None)   # as the scan
                    for j, b in enumerate(kept) if isinstance(b, dict) and b.get("type") == "tool_result"]
    _drop_old_uses(st, {b.get("tool_use_id") for _, _, b in old})
    for k in st.empty:   # an entry that came with no content leaves the chain too
        _leaves(st, k, work[k]["message"]["content"])
    # re-index only the entries that changed; every other (i, j) position is still valid
    redone = set(changed)
    results: list[tuple] = []
    for r in st.results:   # in (i, j) order, as before; each changed entry's results in place of its old ones
        if r[0] not in redone:
            results.append(r)
        elif r[0] in fresh:
            results += fresh.pop(r[0])
    st.results = results


def _is_use(block: Any, tool_id: str) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use" and block.get("id") == tool_id


def _drop_old_uses(st: _Pruning, tool_ids: set) -> None:
    """The tool_use blocks of the removed results leave their assistant entries."""
    work, by_entry, inputs, lone = st.work, {}, [], []
    for tool_id in tool_ids:
        if tool_id in st.uses:
            k, block, alone = st.uses.pop(tool_id)
            st.bash.pop(tool_id, None)
            inputs.append(block.get("input", ""))
            if alone:   # the entry's only block: it is left empty (no need to look at it again)
                lone.append(k)
            else:
                by_entry.setdefault(k, []).append(tool_id)
    # what the inputs weighed: the JSON text of each, from one encoding of all ("[" + ", ".join(...) + "]")
    st.report.chars_saved += len(_json_text(inputs)) - 2 * len(inputs) if inputs else 0
    for k, ids in by_entry.items():
        content = work[k]["message"]["content"]
        for tool_id in ids:
            content = [b for b in content if not _is_use(b, tool_id)]
        if not _leaves(st, k, content):
            st.set_content(k, content)
    for k in lone:
        if not _leaves(st, k, []):
            st.set_content(k, [])


def _leaves(st: _Pruning, i: int, content: list) -> bool:
    """True (and entry ``i`` is marked to leave the chain) when ``content`` is empty and the entry has a
    uuid. Such an entry is not copied: nothing of it is sent."""
    uid = st.work[i].get("uuid")
    if content or not isinstance(uid, str):
        return False
    st.drop.add(uid)
    st.gone.append(i)
    if not st.careful:
        st.parents[uid] = st.pars[i]
    return True


def _with_content(entry: dict, content: list) -> dict:
    """Copy of ``entry`` whose message has ``content``."""
    entry = dict(entry)
    message = dict(entry["message"])
    message["content"] = content
    entry["message"] = message
    return entry


def _neutralize_interrupts(st: _Pruning) -> None:
    """Step 3: the result of an interrupted call gets a neutral text, not an error. A call the human
    stopped says it was interrupted; one that the end of a run cut off (the CLI's own note for a call
    left without result, or a kill's exit code that no answer of the model followed) says it was
    stopped by the kill and may have partly run: a model that trusts its history looks before it
    does the step again."""
    killed = _killed_results(st)
    if not st.halted and not killed:
        return
    texts = {key: text(key, st.policy.lang) for key in ("interrupted_result", "killed_result")}
    work, results, halted = st.work, st.results, st.halted
    last, interrupted = -1, False
    for k, (i, j, block, tool_id) in enumerate(results):
        if i not in halted and k not in killed:
            continue
        if i != last:
            interrupted, last = i in halted and _is_interrupt(work[i]), i
        if not interrupted and k not in killed:
            continue
        cut_off = k in killed or work[i].get("toolDenialKind") == "interrupted"
        neutral = texts["killed_result" if cut_off else "interrupted_result"]
        if block_text(block) != neutral:
            st.report.chars_saved += len(block_text(block)) - len(neutral)
            entry = st.set_result(k, neutral, is_error=False)
            if isinstance(entry.get("toolUseResult"), str):
                entry["toolUseResult"] = neutral
            st.report.interrupts += 1


_KILL_EXIT = _lazy_re(r"Exit code (137|143)\b")   # SIGKILL, SIGTERM: how a call stopped with its CLI ends


def _killed_results(st: _Pruning) -> set[int]:
    """Rows of ``results`` that a kill's exit code ended and that no answer of the model followed
    before the next prompt (the run ended there): the calls stopped with flower."""
    import bisect
    errors = [(i, j) for i, j, block, _ in st.errors if _KILL_EXIT.match(block_text(block))]
    if not errors:
        return set()
    found = set()
    rows = {(i, j): k for k, (i, j, _, _) in enumerate(st.results)}
    for i, j in errors:
        answer = bisect.bisect_right(st.call_at, i)
        end = st.call_at[answer] if answer < len(st.call_at) else len(st.work)
        if (i, j) in rows and (end == len(st.work) or any(_is_prompt(entry) for entry in st.work[i + 1:end])):
            found.add(rows[(i, j)])
    return found


def _is_prompt(entry: dict) -> bool:
    """Whether an entry is a user prompt (text from the user, not tool results)."""
    if entry.get("type") != "user" or not isinstance(entry.get("message"), dict):
        return False
    content = entry["message"].get("content")
    return isinstance(content, str) or isinstance(content, list) and not any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _stale_glances(st: _Pruning, policy: PrunePolicy) -> list[tuple[int, str, str]]:
    """Step 4, what it finds: results of read-only shell commands older than the newest ``keep_glances``
    expire (only short ones: a big one is the trim step's business): (k, command, text now), newest first.
    Walks newest to oldest: past the newest ``keep_glances`` glances, a result that could not expire anyway
    (too long, already trimmed) is not classified at all."""
    work, bash, drop, healed, careful = st.work, st.bash, st.drop, st.healed, st.careful
    keep, limit, marks = policy.keep_glances, policy.glance_max_chars, st.marks or {}
    kept = 0
    stale = []   # newest first
    results = st.results
    for k in range(len(results) - 1, -1, -1):
        i, j, block, tool_id = results[k]
        use = bash.get(tool_id)
        if use is None or i in healed or careful and _leaving(drop, work[i].get("uuid")):
            continue
        now = None
        if kept >= keep:
            now = block.get("content")
            if now.__class__ is not str:
                now = block_text(block)
            if len(now) > limit or now.startswith(_TRIM_PREFIXES):
                continue
        at, command = use
        if command is None:
            continue
        verdict = marks.get(at)   # as stored with the call's entry (its one block)
        if verdict == "1" if verdict is not None else _read_only(command):
            if now is None:
                kept += 1
            else:
                stale.append((k, command, now))
    return stale


def _expiries(st: _Pruning, stale: list[tuple[int, str, str]], policy: PrunePolicy) -> list[tuple[int, str, str]]:
    """(k, text now, marker) of the stale glances (newest first): a marker says how many turns ago they expired."""
    if not stale:
        return []
    template = text("expired_result", policy.lang).format
    return [(k, now, template(cmd=command if len(command) <= 80 else command[:77] + "...", n=turns))
            for (k, command, now), turns in zip(stale, _turns_after(st, [st.results[k][0] for k, _, _ in stale]))]


def _expire(st: _Pruning, expiries: list[tuple[int, str, str]]) -> None:
    """Step 4: the stale glances get their markers (see :func:`_expiries`)."""
    if not expiries:
        return
    results, own = st.results, st.own
    expired = saved = 0
    for k, now, marker in expiries:
        if now != marker:
            expired += 1
            saved += len(now) - len(marker)
            if own:
                results[k][2]["content"] = marker
            else:
                st.set_result(k, marker)
    st.report.expired += expired
    st.report.chars_saved += saved


def _turns_after(st: _Pruning, positions: list[int]) -> list[int]:
    """For each entry position (newest first): how many distinct API calls of the chain come after it.
    One walk back over the calls (a bisect over their positions measured no faster: the walk's steps
    are few and cheap)."""
    at, ids, drop, uids = st.call_at, st.call_ids, st.drop, st.call_uids
    c, seen, out = len(at) - 1, set(), []
    for i in positions:
        while c >= 0 and at[c] > i:
            uid = uids[c]
            if uid.__class__ is not str or uid not in drop:   # only string uuids ever leave
                seen.add(ids[c])
            c -= 1
        out.append(len(seen))
    return out


# -- trims: long results to spill files --

def spill_name(entry: dict, index: int, full: str) -> str:
    """The spill file of a trimmed result: named by its entry's uuid and block index (stable, and no
    hashing of 100 KB on every load); a hash only for an entry without a uuid."""
    return _uuid_spill_name(entry.get("uuid"), index) or \
        hashlib.sha256(full.encode("utf-8", "surrogatepass")).hexdigest()[:16] + ".txt"


def _uuid_spill_name(uid: Any, index: int) -> str | None:
    """The spill file name of block ``index`` of the entry with ``uid``, when a uuid can name it."""
    return f"{uid}-{index}.txt" if isinstance(uid, str) and _SPILL_UUID.fullmatch(uid) else None


_SPILL_UUID = _lazy_re(r"[A-Za-z0-9-]{1,80}")


def _trims(st: _Pruning, policy: PrunePolicy, replaced: dict[int, str]) -> list[tuple[int, str, str, str]]:
    """Step 5, what it finds: old huge tool results, as (k, full text, spill path, marker), ``replaced``
    telling the results step 4 gives a new text (k -> it)."""
    if len(st.results) <= policy.trim_keep:   # the newest trim_keep big results stay: none can be old
        return []
    work, drop, healed, careful = st.work, st.drop, st.healed, st.careful
    least = policy.trim_min_chars
    big = []
    for k, (i, j, block, _) in enumerate(st.results):
        if careful and _leaving(drop, work[i].get("uuid")) or i in healed:
            continue
        now = replaced.get(k) if replaced and k in replaced else block.get("content")
        if now.__class__ is not str:
            if not _text_only(now):   # an image in it would not come back from a spill file
                continue
            now = block_text(block)
        if len(now) >= least:
            big.append((k, now))
    folder = os.path.join(policy.spill_dir or ".flower/spill", "")   # + a file name: os.path.join of the two
    template = text("trimmed_result", policy.lang)
    trims = []
    for k, full in big[:max(0, len(big) - policy.trim_keep)]:
        i, j = st.results[k][:2]
        path = folder + spill_name(work[i], j, full)
        trims.append((k, full, path, template.format(n=len(full), path=path)))
    return trims


def _trim(st: _Pruning, trims: list[tuple[int, str, str, str]]) -> None:
    """Step 5: the old huge tool results (see :func:`_trims`) move to spill files (returned in the report,
    written by the caller); the entry keeps a pointer and loses the CLI's side copy (``toolUseResult``)."""
    spills, saved = st.report.spills, 0
    for k, full, path, marker in trims:
        spills[path] = full
        saved += len(full) - len(marker)
        st.set_result(k, marker).pop("toolUseResult", None)
    st.report.trimmed += len(trims)
    st.report.chars_saved += saved


def _text_only(content: Any) -> bool:
    """Whether a result's content is all text (a string, or a list of strings and text blocks)."""
    return not isinstance(content, list) or all(b.__class__ is str or isinstance(b, dict) and b.get("type") == "text"
                                                for b in content)


# -- links: orphans relinked, ids healed --

@functools.lru_cache(maxsize=4096)
def _heal_id(tool_use_id: Any) -> str:
    """The uuid of the healing entry of ``tool_use_id`` (a uuid5: the same on every load; cached, as
    every load of a session heals the same calls again)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "flower-heal:" + str(tool_use_id)))


def _orphans(st: _Pruning) -> dict[str, list[dict]]:
    """uuid of a surviving entry -> its tool_use blocks that have no result anywhere."""
    uses = st.uses
    unanswered = uses.keys() - {row[3] for row in st.results}   # usually few: only they are looked at
    orphans: dict[str, list[dict]] = {}
    work, drop = st.work, st.drop
    for tool_id in [t for t in uses if t in unanswered] if unanswered else ():   # in the order of the uses
        i, block, _ = uses[tool_id]
        if isinstance(work[i].get("uuid"), str) and work[i]["uuid"] not in drop:
            orphans.setdefault(work[i]["uuid"], []).append(block)
    return orphans


def _relink_and_heal(st: _Pruning) -> list[dict]:
    """Steps 6 and 7: re-link ``parentUuid`` past dropped entries, and give every tool_use without a
    result a neutral one, chained right after it (what pointed at its entry now points at the last
    healing entry). Only the entries that change are looked at; the runs between them are copied as
    slices."""
    orphans = _orphans(st)
    work, drop = st.work, st.drop
    if not drop and not orphans:
        return work
    repoint = {uid: _heal_id(blocks[-1]["id"]) for uid, blocks in orphans.items()}
    hits = drop | repoint.keys() if repoint else drop
    healed = st.report.healed
    try:
        moved = [k for k, parent in enumerate(st.pars) if parent in hits]
        if st.careful:   # a uuid may stand for several entries: find them all
            gone = [k for k, entry in enumerate(work) if entry.get("uuid") in drop]
            heal_at = [k for k, entry in enumerate(work) if entry.get("uuid") in orphans]
        else:
            gone = st.gone
            heal_at = [st.uses[blocks[0]["id"]][0] for blocks in orphans.values()]
        _repoint(st, moved, repoint)
        return _spliced(st, set(gone), set(heal_at), orphans)
    except TypeError:   # an unhashable uuid or parentUuid somewhere: the careful way
        st.report.healed = healed
    return _relinked_carefully(st, orphans, repoint)


def _repoint(st: _Pruning, moved: list[int], repoint: dict) -> None:
    """The entries at ``moved`` point at their nearest surviving ancestor, or at the last healing entry
    of the orphan they followed."""
    work, drop = st.work, st.drop
    survivor = _survivors(drop, st.parents)
    heal_ids = set(repoint.values())
    for k in moved:
        entry = work[k]
        uid, parent = entry.get("uuid"), entry.get("parentUuid")
        target = survivor(parent) if parent in drop and isinstance(parent, str) else parent
        if target in repoint and uid not in heal_ids:
            target = repoint[target]
        if target is not parent:
            if not st.own:
                work[k] = entry = dict(entry)
            entry["parentUuid"] = target


def _spliced(st: _Pruning, gone: set, heal_at: set, orphans: dict) -> list[dict]:
    """``work`` without the ``gone`` entries, with healing entries after those at ``heal_at``."""
    work = st.work
    if not gone and not heal_at:
        return work
    neutral = text("killed_result", st.policy.lang)
    out: list[dict] = []
    start = 0
    for k in sorted(gone | heal_at):
        out += work[start:k]
        start = k + 1
        if k not in gone:
            entry = work[k]
            out.append(entry)
            _heal_after(out, entry, entry["uuid"], orphans[entry["uuid"]], neutral, st.report)
    out += work[start:]
    return out


def _relinked_carefully(st: _Pruning, orphans: dict, repoint: dict) -> list[dict]:
    """:func:`_relink_and_heal` one entry at a time, for uuids or parents that cannot be hashed."""
    work, drop = st.work, st.drop
    survivor = _survivors(drop, st.parents)
    heal_ids = set(repoint.values())
    neutral = text("killed_result", st.policy.lang)
    out = []
    for entry in work:
        uid = entry.get("uuid")
        if drop and isinstance(uid, str) and uid in drop:
            continue
        parent = entry.get("parentUuid")
        target = survivor(parent) if drop and isinstance(parent, str) and parent in drop else parent
        if repoint and isinstance(target, str) and target in repoint and not (isinstance(uid, str) and uid in heal_ids):
            target = repoint[target]
        if target is not parent:
            entry = dict(entry)
            entry["parentUuid"] = target
        out.append(entry)
        if orphans and isinstance(uid, str) and uid in orphans:
            _heal_after(out, entry, uid, orphans[uid], neutral, st.report)
    return out


def _healed_text(block: dict, neutral: str) -> str:
    """The neutral result of a call left without one; a stopped worker's says where to look."""
    if block.get("name") not in AGENT_TOOLS:
        return neutral
    lang = next((lang for lang, table in TEXTS.items() if table["killed_result"] == neutral), "en")
    return text("worker_stopped", lang)


def _heal_after(out: list[dict], entry: dict, uid: str, blocks: list[dict], neutral: str, report: PruneReport) -> None:
    """Append a neutral tool_result entry for each tool_use block of ``entry``, chained after it."""
    for block in blocks:
        heal = _heal_id(block["id"])
        out.append({"type": "user", "uuid": heal, "parentUuid": uid,
                    "isSidechain": bool(entry.get("isSidechain")), "sessionId": entry.get("sessionId"),
                    "message": {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": block["id"], "content": _healed_text(block, neutral),
                         "is_error": False}]},
                    "flowerHealed": True})
        uid = heal
        report.healed += 1


# --- Stored facts: what prune needs to know of an entry, worked out once when it is stored ---
#
# A cold resume of a long run meets thousands of distinct shell commands (about 4 us each to classify)
# and thousands of API-error rows it would parse only to drop them. ``entry_facts`` tells, when a row is
# stored, what a later prune would otherwise work out again; a store keeps it beside the row. The
# result of a prune is exactly the same with or without facts (tests compare the two on every shape
# they have). A fact is FACTS_VERSION, a kind letter and its data:
#   e<chars>[|<parentUuid>]   an API-error entry: prune drops it (a store need not even read it)
#   b<1 or 0>                 an entry whose one block is a Bash call: whether its command is read-only
#   c                         an entry whose one block is another tool call
#   d<Leaver fields>          an entry whose one block is a denial or an unavailable-tool error: that
#                             result and its call as the store knew them (see fact_leaver)
# Rows with facts b, c or d may be rows a plan leaves out (see plan_leavers): a store reads their uuids.
# (The "t" facts of big results, which a trim-on load reads cut, are kept apart: see cut_fact.)
# Bump FACTS_VERSION whenever what a fact says changes meaning (is_api_error_entry, the read-only
# rules, what a result's text is): tests/test_transcript.py keeps a digest of the facts of a corpus that
# says when. Facts of another version are not used; a store opened by a flower of another version has
# every row's facts worked out again, once (see FACTS_TRIGGER). Version 2: a result that is a list of
# blocks has its text (version 1 took it for "").
FACTS_VERSION = "2"


def entry_facts(entry: dict) -> str | None:
    """The facts stored beside ``entry`` (see above), or None when a prune needs nothing of it."""
    return batch_facts([entry])[0]


def batch_facts(entries: list[dict], stored: Callable[[list[str]], dict[str, dict]] | None = None, *,
                batch_first: bool = False) -> list[str | None]:
    """The facts of each entry of a batch a store appends. The fact of a denial or unavailable-tool
    error tells its call too, when the entry it follows is that call (the CLI writes a result right
    after its call) as the store will hold it: ``stored(uuids)`` gives the entries already stored under
    those uuids (a row appended again is ignored: the first one stays), else the batch's first entry
    with the uuid. With ``batch_first`` the batch's own entries are taken as they are and only the
    calls it does not hold are looked up: right when every row of the batch is new, which the store
    checks as it inserts them. Runs on every append: the common rows take few steps."""
    facts: list[str | None] = [None] * len(entries)
    pending = []   # (position, entry, block) of the lone error results: their calls are looked up at once
    for n, entry in enumerate(entries):
        kind = entry.get("type")
        if kind == "assistant":
            message = entry.get("message")
            if message.__class__ is dict:
                if (entry.get("isApiErrorMessage") is True or message.get("model") == SYNTHETIC_MODEL) and \
                        is_api_error_entry(entry):
                    facts[n] = _error_fact(entry)
                else:
                    content = message.get("content")
                    if content.__class__ is list and len(content) == 1:
                        facts[n] = _call_fact(content[0])
            elif entry.get("isApiErrorMessage") is True:
                facts[n] = _error_fact(entry)
        elif kind == "user":
            message = entry.get("message")
            content = message.get("content") if message.__class__ is dict else None
            block = content[0] if content.__class__ is list and len(content) == 1 else None
            if block.__class__ is dict and block.get("is_error") and block.get("type") == "tool_result":
                pending.append((n, entry, block))
        elif kind == "system" and entry.get("subtype") == "api_error":
            facts[n] = _error_fact(entry)
    if pending:
        calls = _calls_as_stored(entries, [e.get("parentUuid") for _, e, _ in pending], stored, batch_first)
        for n, entry, block in pending:
            parent = entry.get("parentUuid")
            facts[n] = _result_fact(entry, block, calls.get(parent) if parent.__class__ is str else None)
    return facts


def refreshed_facts(rows: list[tuple]) -> list[tuple[str | None, int]]:
    """(facts, seq) for each row (seq, uuid, payload, facts) of one stored session whose facts are not
    those :func:`batch_facts` gives its payload now, every call looked up by its uuid column as an
    append does. A row that holds no JSON object, or whose uuid column is not its entry's, has none."""
    entries, seqs, by_uuid = [], [], {}
    for seq, uid, payload, _ in rows:
        try:
            entry = json.loads(payload)
        except (ValueError, TypeError):
            entry = None
        if uid is not None:
            by_uuid[uid] = entry
        own = entry.get("uuid") if isinstance(entry, dict) else None
        if isinstance(entry, dict) and uid == (own if isinstance(own, str) else None):
            entries.append(entry)
            seqs.append(seq)
    try:
        facts = dict(zip(seqs, batch_facts(entries, lambda uuids: {u: by_uuid[u] for u in uuids if u in by_uuid})))
    except Exception:   # rows no append would have stored: without facts, a load parses and judges them all
        facts = {}
    return [(facts.get(seq), seq) for seq, _, _, old in rows if facts.get(seq) != old]


def _calls_as_stored(entries: list[dict], uuids: list, stored: Callable[[list[str]], dict[str, dict]] | None,
                     batch_first: bool = False) -> dict:
    """uuid -> the entry a store holds under it once ``entries`` are appended (of ``uuids``); with
    ``batch_first``, the batch's own entry where it has one (see :func:`batch_facts`)."""
    wanted = {u for u in uuids if u.__class__ is str}
    rows: dict[str, dict] = {}
    for entry in entries:
        uid = entry.get("uuid")
        if uid.__class__ is str and uid in wanted and uid not in rows:
            rows[uid] = entry
    ask = wanted.difference(rows) if batch_first else wanted
    if stored is not None and ask:
        rows.update(stored(sorted(ask)))
    return rows


def _error_fact(entry: dict) -> str | None:
    uid, parent = entry.get("uuid"), entry.get("parentUuid")
    if not (uid is None or isinstance(uid, str)) or not (parent is None or isinstance(parent, str)):
        return None   # a row the scan must see (such a uuid makes the whole prune careful)
    chars = ("message" in entry and len(entry_text(entry))) or len(str(entry.get("error", "")))
    return f"{FACTS_VERSION}e{chars}" + ("" if parent is None else "|" + parent)


_CALL_FACT, _READ_FACT, _WRITE_FACT = FACTS_VERSION + "c", FACTS_VERSION + "b1", FACTS_VERSION + "b0"


def _call_fact(block: Any) -> str | None:
    """The fact of an assistant entry whose one block is ``block``: "b" for a Bash call with a tool id
    and a command (with its read-only verdict), "c" for another call."""
    if block.__class__ is not dict or block.get("type") != "tool_use":
        return None
    if block.get("name") != "Bash":
        return _CALL_FACT
    tool_id, args = block.get("id"), block.get("input")
    command = args.get("command") if isinstance(args, dict) else None
    if not (isinstance(command, str) and isinstance(tool_id, str) and tool_id):
        return _CALL_FACT
    return _READ_FACT if _read_only(command) else _WRITE_FACT


def left_row(uid: Any, facts: str) -> tuple[str | None, str | None, int, str]:
    """(uuid, parentUuid, chars, "error") of an API-error row a store left out unparsed, from its uuid
    and facts. Raises ValueError on facts that do not parse."""
    chars, bar, parent = facts[2:].partition("|")
    return uid if isinstance(uid, str) else None, parent if bar else None, _count(chars), "error"


# Old denials and unavailable-tool errors leave with the calls they answer; a store that notes each such
# result when it is stored (with the lone tool_use row of its call, when it saw it) can plan the drop
# before it reads anything: neither row is read. The scan then watches their tool ids: any other row
# naming one (a reused id: the plan would differ from prune's own) stops the load, which starts again
# without the plan.
@record
class Leaver:
    """A denial ("d") or unavailable-tool error ("u") result, as a store noted it."""

    uuid: str
    kind: str
    tool_id: str
    chars: int                       # what dropping the result saves
    parent: str | None               # the result row's parentUuid (the result is the row's only block)
    use_uuid: str | None = None      # the row of its call (the entry the result follows), when known
    use_lone: bool = False           # the call is that row's only block (the row leaves whole)
    use_chars: int = 0               # what dropping the call saves
    use_parent: str | None = None
    name: str | None = None          # the tool's name, when known


def plan_leavers(leavers: Iterable[Leaver], policy: PrunePolicy) -> LeavePlan:
    """The rows :func:`prune` with ``policy`` would drop whole as old denials or unavailable-tool errors
    with their calls: all but the newest ``keep_denials`` denials and the newest ``keep_unavailable``
    unavailable errors per tool, when the result and its call are lone rows. Planning from a subset of
    the results is safe (a result older than ``keep`` of them is older than ``keep`` of all); if a
    name is missing the unavailable errors are left to prune."""
    leavers = list(leavers)
    denials = [r for r in leavers if r.kind == "d"]
    old = denials[:max(0, len(denials) - max(0, policy.keep_denials))]
    plan = LeavePlan()
    unavailable = [r for r in leavers if r.kind == "u"]
    if unavailable and all(r.name is not None for r in unavailable):
        groups: dict[str, list[Leaver]] = {}
        for r in unavailable:
            groups.setdefault(r.name, []).append(r)
            plan.uses[r.tool_id] = r.use_uuid   # the grouping holds only if no other row uses the id
        keep = max(0, policy.keep_unavailable)
        old += [r for rows in groups.values() for r in rows[:max(0, len(rows) - keep)]]
    for r in old:
        if not r.use_lone or r.use_uuid is None or r.tool_id in plan.results:
            continue
        plan.skip.update((r.uuid, r.use_uuid))
        plan.results.add(r.tool_id)
        plan.uses[r.tool_id] = None
        plan.left += [(r.uuid, r.parent, r.chars, "denial" if r.kind == "d" else "unavailable"),
                      (r.use_uuid, r.use_parent, r.use_chars, "use")]
    return plan


def _result_fact(entry: dict, block: dict, call: dict | None) -> str | None:
    """The ``d`` fact of a user entry whose one block is the error result ``block``, when it is a
    denial or an unavailable-tool error and every field can be told in a fact; with its ``call`` when
    that entry made it (see :func:`fact_leaver` for the fields)."""
    uid, parent, tool_id = entry.get("uuid"), entry.get("parentUuid"), block.get("tool_use_id")
    if not (_plain(uid) and _plain(tool_id) and (parent is None or _plain(parent))):
        return None
    said = block_text(block)
    kind = "d" if _is_denial(entry) else "u" if _UNAVAILABLE in said else None
    if kind is None:
        return None
    fields = [kind, str(len(said)), tool_id, _opt(parent)]
    use = _use_of(call, tool_id)
    if use is None:
        fields += ("n", "0", "0", "n", "n")
    else:
        block, lone = use
        fields += ("s" + call["uuid"], "1" if lone else "0",
                   str(len(_json_text(block.get("input", "")))),   # what _drop_old_uses counts for it
                   _opt(call.get("parentUuid")), "s" + block["name"])
    return _LEAVER_FACT + FACT_SEP.join(fields)


def _use_of(call: Any, tool_id: str) -> tuple[dict, bool] | None:
    """The one tool_use block of ``call`` with ``tool_id``, and whether it is the call's only block;
    None when there is none or more than one, when a fact cannot hold its name or parent, or when
    ``call`` is an API-error entry (it is dropped, so its call does not count)."""
    message = call.get("message") if isinstance(call, dict) and call.get("type") == "assistant" else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return None
    if len(content) == 1:   # the common case, without a scan
        use = content if _is_use(content[0], tool_id) else []
    else:
        use = [b for b in content if _is_use(b, tool_id)]
    if len(use) != 1:
        return None
    name, use_parent = use[0].get("name"), call.get("parentUuid")
    if not (_plain(name) and (use_parent is None or _plain(use_parent))):
        return None
    if (call.get("isApiErrorMessage") is True or message.get("model") == SYNTHETIC_MODEL) and is_api_error_entry(call):
        return None
    return use[0], len(content) == 1


def _plain(value: Any) -> bool:
    """A non-empty string a fact can hold (prune ignores a call with an empty id)."""
    return isinstance(value, str) and value != "" and FACT_SEP not in value


def _count(text: str) -> int:
    """A count written in a fact: ASCII digits only (``int`` would take "-3", "1_0" or " 5")."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"bad count {text!r} in a fact")
    return int(text)


FACT_SEP = "\x1f"
_LEAVER_FACT = FACTS_VERSION + "d"


def _opt(value: str | None) -> str:
    """An optional string field of a fact: "n" for None, else "s" and the string."""
    return "n" if value is None else "s" + value


def fact_leaver(uid: str, fact: str) -> Leaver:
    """The Leaver a ``d`` fact tells (see :func:`_result_fact`), ``uid`` being its row's uuid: kind,
    chars, tool id, parent, then the call's uuid, whether it is the call's only block, its chars, its
    parent and the tool's name, joined by FACT_SEP (ValueError when it does not parse)."""
    kind, chars, tool_id, parent, use_uuid, use_lone, use_chars, use_parent, name = fact[2:].split(FACT_SEP)
    if kind not in ("d", "u") or use_lone not in ("0", "1") or not tool_id or not isinstance(uid, str):
        raise ValueError(f"bad fact {fact!r}")
    return Leaver(uid, kind, tool_id, _count(chars), _fact_opt(parent), _fact_opt(use_uuid), use_lone == "1",
                  _count(use_chars), _fact_opt(use_parent), _fact_opt(name))


def _fact_opt(value: str) -> str | None:
    """An optional field of a fact (see :func:`_opt`); ValueError when it is neither."""
    if value == "n":
        return None
    if value[:1] != "s":
        raise ValueError(f"bad fact field {value!r}")
    return value[1:]


# A big tool result a trim-on load replaces by a pointer to its spill file need not be read once that
# file exists: its "s" fact tells its length and holds its skeleton, the stored JSON text without the
# result's text and the CLI's side copy of it (toolUseResult), usually a few hundred of its bytes; the
# load parses the skeleton instead of the row (whose payload it does not even fetch) and puts the marker
# in. Only results the steps before trim never change get the fact (not errors, not halted calls, not
# healing entries), and a load cuts only a row that at least ``trim_keep`` newer big results of that
# kind follow: it is old whatever the other rows are.
# The first trim-on load that reads such a row whole notes its fact (a store keeps it beside the row,
# gone when the row changes), but for the results of CUT_STORED_CHARS or more, whose facts the store
# notes as it appends them: the first wake of a session too big to resume then decides without parsing
# them (most of its bytes). Noting a fact costs about what parsing 16K characters of the row does, and
# the row's text and its side copy are parsed on every wake that reads it whole: from there it pays.
_CUT_FACT = FACTS_VERSION + "s"   # (an older flower's "t" facts told only where the values lay: noted again)
CUT_MIN_CHARS = 1000                     # the smallest trim_min_chars flower trims with (prepare's pass)
CUT_STORED_CHARS = 16384
_CUT_TEXT, _CUT_SIDE = "\ue000flower-cut-text\ue000", "\ue000flower-cut-side\ue000"   # placeholders
_CUT_TEXT_JSON, _CUT_SIDE_JSON = f'"{_CUT_TEXT}"', f'"{_CUT_SIDE}"'   # as an encoder with ensure_ascii=False writes them


def _cut_block(entry: dict) -> dict | None:
    """The tool_result block a trim could cut unread: the one block of a user entry with a uuid a
    spill file is named by, not an error, its text at least CUT_MIN_CHARS long, in an entry that is
    neither a halted call nor a healing entry (the steps before trim look at those)."""
    if entry.get("type") != "user":
        return None
    message, uid = entry.get("message"), entry.get("uuid")
    content = message.get("content") if message.__class__ is dict else None
    if content.__class__ is not list or len(content) != 1 or uid.__class__ is not str:
        return None
    block = content[0]
    if block.__class__ is not dict or block.get("type") != "tool_result" or block.get("is_error"):
        return None
    said = block.get("content")
    if said.__class__ is not str or len(said) < CUT_MIN_CHARS or entry.get("flowerHealed") or \
            entry.get("toolUseResult") == _REJECTED or entry.get("toolDenialKind") == "interrupted":
        return None
    return block if _uuid_spill_name(uid, 0) else None


def cut_fact(entry: dict, text: str, dumps: Callable[[Any], str], block: dict | None = None) -> str | None:
    """The cut fact of ``text``, the stored JSON text of ``entry``, when a trim could cut the entry's
    result unread (see :func:`_cut_block`) and ``text`` is what ``dumps`` makes of the entry's shape:
    ``<version>s<chars>|<skeleton>``, the skeleton being ``text`` with the result's text replaced by ""
    and toolUseResult (which must come after it) by null. Where the two values lie is found from the
    entry's shape without them (the big values are not encoded again): what comes before the first and
    after the last is known, and the piece between the two starts right after the only unescaped quote
    that can close the first (a JSON string holds no other). ``block``: what :func:`_cut_block` found in
    ``entry``, when the caller looked already."""
    block = _cut_block(entry) if block is None else block
    if block is None:
        return None
    skeleton = dict(entry)
    skeleton["message"] = dict(entry["message"], content=[dict(block, content=_CUT_TEXT)])
    side = "toolUseResult" in entry
    if side:
        skeleton["toolUseResult"] = _CUT_SIDE
    shape = dumps(skeleton)
    at = shape.find(_CUT_TEXT_JSON)
    to = shape.find(_CUT_SIDE_JSON) if side else at
    if at < 0 or to < at or shape.find(_CUT_TEXT_JSON, at + 1) >= 0 or side and shape.find(_CUT_SIDE_JSON, to + 1) >= 0:
        return None   # the side copy first, an entry that holds a placeholder itself, another encoder
    tail = shape[to + len(_CUT_SIDE_JSON if side else _CUT_TEXT_JSON):]
    if not (text.startswith(shape[:at]) and text.endswith(tail)):
        return None
    end, fact = len(text) - len(tail), f"{_CUT_FACT}{len(block['content'])}|{text[:at]}\"\""
    if not side:
        return fact + text[end:]
    middle = shape[at + len(_CUT_TEXT_JSON):to]
    b = text.find(middle, at + 2)
    if b < 0 or text[b - 1] != '"' or _escaped(text, b - 1) or b + len(middle) > end:
        return None
    return fact + middle + "null" + text[end:]


def _escaped(text: str, i: int) -> bool:
    """Whether the character at ``i`` follows an odd number of backslashes."""
    k = i - 1
    while k >= 0 and text[k] == "\\":
        k -= 1
    return (i - 1 - k) % 2 == 1


def plan_cuts(plan: LeavePlan, rows: Iterable[tuple[int, Any, str]], policy: PrunePolicy,
              present: Collection[str] | Callable[[list[str]], Collection[str] | None] | None) -> None:
    """Which rows with cut facts (``rows``: (seq, uuid, fact), oldest first) a load with ``policy``
    reads cut, into ``plan``: those :func:`_trim` would trim for sure, whose spill file is among
    ``present`` (the names in the spill dir, or a function that tells which of the names it is given are
    there: asked once, only for the rows that would be cut). A result is sure to be big at trim time when
    it is at least ``trim_min_chars`` long and too long to expire as a glance; one that ``trim_keep`` such
    results follow is old (the other results can only add to those). ValueError on a fact that does
    not parse. With ``policy.cut_unwritten`` a row is read cut whether its file is there or not, and
    ``plan.unspilled`` counts those whose file is not."""
    unwritten = policy.cut_unwritten
    if not policy.trim or not (present or unwritten):
        return
    least = max(policy.trim_min_chars, policy.glance_max_chars + 1 if policy.expire_glances else 0)
    longest = min(policy.trim_min_chars, policy.fallback.trim_min_chars) if policy.fallback else policy.trim_min_chars
    folder = os.path.join(policy.spill_dir or ".flower/spill", "")
    template, keep, cuts, saved = text("trimmed_result", policy.lang).format, policy.trim_keep, plan.cuts, 0
    newer = 0   # sure-big results after the row at hand
    old = []
    for seq, uid, fact in reversed(list(rows)):
        chars = _count(fact[2:].partition("|")[0])
        if chars < least:
            continue
        if newer >= keep and uid.__class__ is str:
            old.append((seq, uid, fact, chars, uid + "-0.txt"))   # the spill name of a uuid (a plain name)
        newer += 1
    if old and callable(present):
        present = present([name for *_, name in old])
    missing = 0
    for seq, uid, fact, chars, name in old if present or unwritten else ():
        written = bool(present) and name in present
        if written or unwritten:
            marker = template(n=chars, path=folder + name)
            if len(marker) < longest:   # else _trim would take the marker for a big result
                cuts[seq] = (uid, fact, marker)
                saved += chars - len(marker)
                missing += not written
    plan.cut_saved += saved
    plan.unspilled += missing


# --- Notes (pure): markdown sections, brief, goal, verdict, handoff ledger ---

_HEADING = _lazy_re(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = _lazy_re(r"^[ \t]*(```|~~~)")
_PLACEHOLDERS = _lazy_re(r"(?i)^\s*(?:todo|tbd|n/?a|same as above|同上|待定|无内容|\.\.\.|…)\s*\.?\s*$")


_NUMBERING = _lazy_re(r"^\s*(?:\d+[.)]|[-*])\s*")
_SPACES = _lazy_re(r"\s+")


def _norm_heading(title: str) -> str:
    title = _NUMBERING.sub("", title)
    title = title.strip().strip("*_`").strip().rstrip(":：").strip()
    return _SPACES.sub(" ", title.lower())


def parse_sections(markdown: str, aliases: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """Split markdown at real headings (outside code fences) whose normalised text is a key of
    ``aliases``; return ({canonical: body}, first level-1 title or None). Other headings stay in the
    body of the section they belong to. Repeated sections are joined."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    title = None
    fence: str | None = None
    for line in markdown.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        match = _FENCE.match(line)
        if match:
            fence = None if fence == match.group(1) else (fence or match.group(1))
        heading = None if fence or match else _HEADING.match(line)
        if heading:
            key = aliases.get(_norm_heading(heading.group(2)))
            if key:
                current = key
                sections.setdefault(key, [])
                continue
            if len(heading.group(1)) == 1 and title is None and current is None:
                title = heading.group(2).strip()
                continue
        if current is not None:
            sections[current].append(line)
    return {k: "\n".join(v).strip("\n").rstrip() for k, v in sections.items()}, title


def _alias_table(pairs: dict[str, Iterable[str]]) -> dict[str, str]:
    # aliases are written as _norm_heading gives them (a test checks): none is normalised at import
    return {alias: key for key, names in pairs.items() for alias in names}


def _is_empty(body: str | None) -> bool:
    return not body or not body.strip() or bool(_PLACEHOLDERS.match(body)) or body.strip() == "(unfilled)"


LEDGER_KEYS = ("status", "decisions", "dead_ends", "next_step", "pointers")
LEDGER_HEADINGS = {
    "en": {"status": "Status", "decisions": "Decisions", "dead_ends": "Dead ends",
           "next_step": "Next step", "pointers": "Pointers"},
    "zh": {"status": "现在在做什么", "decisions": "已经定下的", "dead_ends": "走不通的路",
           "next_step": "下一步", "pointers": "现场"},
}
_LEDGER_ALIASES = _alias_table({
    "status": ["status", "current status", "task status", "state", "what is being done", "progress",
               "现在在做什么", "任务状态", "状态", "进展"],
    "decisions": ["decisions", "settled", "decided", "decisions made", "已经定下的", "已定决策", "决定", "决策"],
    "dead_ends": ["dead ends", "dead-ends", "dead end", "tried and failed", "failed attempts",
                  "what did not work", "what didn't work", "走不通的路", "已试方案与失败原因", "失败的尝试"],
    "next_step": ["next step", "next steps", "next", "下一步", "进度与下一步", "接下来"],
    "pointers": ["pointers", "where things are", "references", "files", "现场", "指针", "位置"],
})
LEDGER_MAX_CHARS = 8000
# something a successor can execute: code in backticks, a path, a file name, or a command line
_EXECUTABLE = _lazy_re(
    r"`[^`\n]+`|(?:^|\s)\$ \S|[\w.~-]*/[\w.-]+|\b[\w-]{2,}\.[A-Za-z][A-Za-z0-9]{0,5}\b|"
    r"(?<![\w-])(?:make|python3?|pytest|pip|uv|npm|npx|yarn|pnpm|node|git|cargo|go|bash|sh|ruff|mypy|tox|"
    r"docker|curl|ls|cat|grep|rg|sed|cd)\s+\S", re.IGNORECASE | re.MULTILINE)
# seed 2's mixed sections: what worked filed under failures, finished items filed under next
_WORKED = _lazy_re(r"(?i)\b(?:works|worked|succeeded|solved|fixed it|now passes)\b|成功|解决了|已修复|可行")
_FAILED = _lazy_re(r"(?i)n't\b|\b(?:fail\w*|not|error\w*|broke\w*|abandon\w*|dropped|wrong)\b|"
                     r"失败|不行|没用|报错|放弃|不通")
_DONE = _lazy_re(r"(?i)\[x\]|✅|✓|✔|\((?:done|completed|finished)\)|^\s*(?:[-*]\s*)?(?:done|completed)\b|"
                   r"已完成|已经完成|（完成）")


@record
class Ledger:
    """A handoff document: five sections written by the retiring session (or built mechanically
    from its transcript when that failed, then ``degraded`` says why)."""

    sections: dict[str, str] = field(default_factory=dict)
    degraded: str | None = None

    @classmethod
    def parse(cls, markdown: str) -> "Ledger":
        """Read the five sections from real markdown headings, English or Chinese (aliases too).
        Any title the model wrote is ignored: the writer owns the title."""
        sections, _ = parse_sections(markdown or "", _LEDGER_ALIASES)
        return cls({k: redact(v) for k, v in sections.items() if k in LEDGER_KEYS})

    def get(self, key: str) -> str:
        """The body of one section ("" when absent)."""
        return self.sections.get(key, "")

    def problems(self, *, soft: bool = True) -> list[str]:
        """Why this ledger is not good enough to hand over ([] when it is). Soft problems (a Next
        step with nothing executable, mixed sections) are worth one request to fix and are then
        accepted; ``soft=False`` gives only the hard ones, which make a handoff degraded."""
        issues = self._soft_problems() if soft else []
        for key in ("status", "next_step"):
            if _is_empty(self.sections.get(key)):
                issues.append(f"{LEDGER_HEADINGS['en'][key]} is empty")
        for key, body in self.sections.items():
            if body and any(_PLACEHOLDERS.match(line) for line in body.splitlines() if line.strip()):
                issues.append(f"{LEDGER_HEADINGS['en'][key]} holds a placeholder")
        size = sum(len(v) for v in self.sections.values())
        if size > LEDGER_MAX_CHARS:
            issues.append(f"too long ({size} > {LEDGER_MAX_CHARS} chars)")
        return issues

    def _soft_problems(self) -> list[str]:
        issues = []
        next_step, dead_ends = self.get("next_step"), self.get("dead_ends")
        if next_step.strip() and not _EXECUTABLE.search(next_step):
            issues.append("Next step names nothing executable (a path or a command)")
        worked = [line.strip() for line in dead_ends.splitlines() if _WORKED.search(line) and not _FAILED.search(line)]
        if worked:
            issues.append(f"Dead ends holds what worked: {worked[0][:80]}")
        done = [line.strip() for line in next_step.splitlines() if _DONE.search(line)]
        if done:
            issues.append(f"Next step holds finished items: {done[0][:80]}")
        return issues

    def render(self, step: str, generation: int, lang: str = "en") -> str:
        """The handoff document as markdown, with a title owned by flower (step, generation)."""
        heads = LEDGER_HEADINGS.get(lang, LEDGER_HEADINGS["en"])
        title = f"# Handoff: {step} · generation {generation}" if lang != "zh" else \
            f"# 交接:{step} · 第 {generation} 代"
        lines = [title]
        if self.degraded:
            lines.append("")
            lines.append(text("degraded_title", lang, why=self.degraded))
        for key in LEDGER_KEYS:
            lines += ["", f"## {heads[key]}", self.sections.get(key, "").strip() or "(none)"]
        return redact("\n".join(lines).rstrip() + "\n")


_GENERATION = _lazy_re(r"(?:generation|第) (\d+)")


def ledger_generation(document: str | None) -> int:
    """The generation number in a rendered handoff document's title (0 when there is none)."""
    match = _GENERATION.search((document or "").split("\n", 1)[0])
    return int(match.group(1)) if match else 0


BRIEF_KEYS = ("goal", "acceptance", "bounds", "unknowns")
BRIEF_HEADINGS = {
    "en": {"goal": "Goal", "acceptance": "Acceptance", "bounds": "Bounds",
           "unknowns": "Unknowns and assumptions"},
    "zh": {"goal": "目标", "acceptance": "验收标准", "bounds": "边界", "unknowns": "未知与假设"},
}
_BRIEF_ALIASES = _alias_table({
    "goal": ["goal", "goals", "objective", "目标"],
    "acceptance": ["acceptance", "acceptance criteria", "done when", "验收标准", "验收"],
    "bounds": ["bounds", "scope", "constraints", "out of scope", "边界", "范围", "约束"],
    "unknowns": ["unknowns and assumptions", "unknowns", "assumptions", "open questions",
                 "未知与假设", "假设", "未知"],
})


def brief_sections(markdown: str) -> dict[str, str]:
    """The brief's four sections found in ``markdown`` (real headings, en/zh, aliases)."""
    sections, _ = parse_sections(markdown or "", _BRIEF_ALIASES)
    return {k: v for k, v in sections.items() if k in BRIEF_KEYS}


def brief_complete(sections: dict[str, str]) -> bool:
    """All four sections present and filled."""
    return all(not _is_empty(sections.get(k)) for k in BRIEF_KEYS)


@record
class Brief:
    """The clarified task: Goal / Acceptance / Bounds / Unknowns and assumptions."""

    sections: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, markdown: str) -> "Brief":
        """Read the four sections from real markdown headings (en/zh, aliases)."""
        return cls(brief_sections(markdown))

    @property
    def complete(self) -> bool:
        """All four sections present and filled: clarify can be skipped."""
        return brief_complete(self.sections)

    def render(self, lang: str = "en") -> str:
        """The brief as markdown; missing sections are marked ``(unfilled)``."""
        heads = BRIEF_HEADINGS.get(lang, BRIEF_HEADINGS["en"])
        parts = [f"## {heads[k]}\n{self.sections.get(k, '').strip() or '(unfilled)'}" for k in BRIEF_KEYS]
        return redact("\n\n".join(parts) + "\n")


_GOAL_ALIASES = _alias_table({"statement": ["goal", "目标"], "checks": ["checks", "check list", "检查", "检查项"]})
_LIST_ITEM = _lazy_re(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?(.+)$")
UNVERIFIABLE = _lazy_re(r"\[cannot verify here[^\]]*\]|\[此处无法验证[^\]]*\]", re.IGNORECASE)


def goal_parts(markdown: str) -> tuple[str, list[str]]:
    """``(statement, checks)``: the text under ``# Goal`` and the list items under ``# Checks``."""
    sections, _ = parse_sections(markdown or "", _GOAL_ALIASES)
    checks = [m.group(1).strip() for line in sections.get("checks", "").splitlines()
              if (m := _LIST_ITEM.match(line))]
    return sections.get("statement", "").strip(), checks


def goal_complete(statement: str, checks: list[str]) -> bool:
    """A statement and at least one check."""
    return bool(statement) and not _is_empty(statement) and bool(checks)


@record
class Goal:
    """The frozen goal: one statement and a list of checks, each verifiable on the spot (or marked
    ``[cannot verify here: why]``)."""

    statement: str = ""
    checks: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, markdown: str) -> "Goal":
        """Read ``# Goal`` and the list items under ``# Checks``."""
        return cls(*goal_parts(markdown))

    @property
    def complete(self) -> bool:
        """A statement and at least one check: the goal step can be skipped."""
        return goal_complete(self.statement, self.checks)

    @property
    def unverifiable(self) -> list[str]:
        """Checks the goal setter marked as not verifiable here."""
        return [c for c in self.checks if UNVERIFIABLE.search(c)]

    def render(self, lang: str = "en") -> str:
        """The goal as markdown."""
        goal, checks = ("Goal", "Checks") if lang != "zh" else ("目标", "检查")
        items = "\n".join(f"- {c}" for c in self.checks)
        return redact(f"# {goal}\n{self.statement}\n\n# {checks}\n{items}\n")


_VERDICT_LINE = _lazy_re(r"^\s*\**VERDICT\**\s*:\s*\**\s*(achieved|not_yet|unreachable)\s*\**\s*$")
_VERDICT_ALIASES = _alias_table({"failed": ["failed checks", "failed", "未通过的检查", "未通过"],
                                 "reasons": ["reasons", "reason", "why", "理由", "原因"]})


@record
class Verdict:
    """The judge's decision. Anything but exactly one clean ``VERDICT:`` line is not achieved."""

    status: str = "not_yet"
    reason: str = ""
    failed_checks: list[str] = field(default_factory=list)
    clean: bool = False

    @property
    def achieved(self) -> bool:
        """True only for a clean ``VERDICT: achieved`` with no failed checks listed."""
        return self.clean and self.status == "achieved" and not self.failed_checks

    @classmethod
    def parse(cls, reply: str) -> "Verdict":
        """Parse the judge's reply (fail closed: missing, repeated or conflicting lines = not_yet)."""
        reply = reply or ""
        found = []
        fence = False
        for line in reply.replace("\r\n", "\n").split("\n"):
            if _FENCE.match(line):
                fence = not fence
                continue
            match = None if fence else _VERDICT_LINE.match(line)
            if match:
                found.append(match.group(1))
        sections, _ = parse_sections(reply, _VERDICT_ALIASES)
        failed = [m.group(1).strip() for line in sections.get("failed", "").splitlines()
                  if (m := _LIST_ITEM.match(line)) and not _is_empty(m.group(1))]
        reason = sections.get("reasons", "").strip() or _VERDICT_LINE.sub("", reply).strip()
        if len(set(found)) != 1:
            why = "no VERDICT line" if not found else "conflicting VERDICT lines"
            return cls("not_yet", f"{why}; reply was: {reply.strip()[:500]}", failed, clean=False)
        status = found[0]
        if status == "achieved" and failed:
            status = "not_yet"
        return cls(status, redact(reason), failed, clean=True)


# --- Session stores: the store contract, project keys, SQLite store, pruning wrapper, user factories ---

_SDK_MODULE = "claude_agent_sdk"


def _sdk_if_loaded() -> Any:
    """The SDK module if this process already imported it (never pays the import here)."""
    return sys.modules.get(_SDK_MODULE)


def _djb2_base36(value: str) -> str:
    h = 0
    for ch in value:
        h = ((h << 5) - h + ord(ch)) & 0xFFFFFFFF
    if h >= 0x80000000:
        h -= 0x100000000
    h = abs(h)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while h:
        h, rem = divmod(h, 36)
        out = digits[rem] + out
    return out or "0"


def _nfc(value: str) -> str:
    # ASCII is already NFC: most paths never load unicodedata
    return value if value.isascii() else unicodedata.normalize("NFC", value)


def project_key(path: str) -> str:
    """The SDK's ``project_key`` for a directory: realpath, NFC, every char outside ``[A-Za-z0-9]``
    becomes ``-``; longer than 200 -> cut to 200 plus ``-<djb2 base36>``. When the SDK is loaded in
    this process its own function is used, so the two can never drift."""
    sdk = _sdk_if_loaded()
    if sdk is not None and hasattr(sdk, "project_key_for_directory"):
        return sdk.project_key_for_directory(path)
    try:
        resolved = _nfc(os.path.realpath(path))
    except OSError:
        resolved = _nfc(path)
    sanitized = re.sub(r"[^a-zA-Z0-9]", "-", resolved)
    if len(sanitized) <= 200:
        return sanitized
    return f"{sanitized[:200]}-{_djb2_base36(resolved)}"


def _key_string(key: dict) -> str:
    parts = [key["project_key"], key["session_id"]]
    if key.get("subpath"):
        parts.append(key["subpath"])
    return "/".join(parts)


BATCH_ROWS = 256            # rows parsed together (see parsed_batch), handed on together: at most
BATCH_CHARS = 1 << 20       # this many, and the row that reaches this much text is the last
BATCH_ROW_CHARS = 1 << 16   # a longer row is parsed alone: sharing its keys saves nothing worth a copy


def parsed_batch(texts: list[str], scan: Callable) -> list[dict] | None:
    """The JSON objects ``texts`` hold, parsed as one JSON text by ``scan`` (a JSON scanner's
    ``scan_once``), or None when some text does not hold exactly one object (the caller then parses
    them one by one, and meets the damaged one).

    Why one text: the scanner shares the keys of one document, so the entries of a batch share one
    string per key (each entry's ~20 keys are otherwise strings of their own): 10-15% less time than
    parsing row by row, and less memory. For ASCII texts only (:func:`parsed_objects`): one wide
    character would make the whole joined text wide, and its parse slower than the texts' one by one.
    (Each batch fresh in the CPU's caches: 1 MB of text is a few MB of objects, which prune indexes next.)
    Why it is exact: the texts go into one array with a random string between each two, a value no
    text can hold but by a 2**-64 chance. Only if each text is one value does the array hold a value,
    the random string, a value, ... in that order."""
    nonce = os.urandom(8).hex()
    try:
        joined = "[" + f',"{nonce}",'.join(texts) + "]"
        values, end = scan(joined, 0)
    except (StopIteration, ValueError, TypeError, RecursionError):   # TypeError: a text that is not a
        return None   # str; RecursionError: the array is one level deeper than its texts
    entries = values[::2]
    n = len(texts)
    if end != len(joined) or len(values) != 2 * n - 1 or values[1::2].count(nonce) != n - 1 or \
            list(map(type, entries)).count(dict) != n:
        return None
    return entries


def parsed_objects(texts: Iterable[Any], bad: list[int] | None = None) -> Iterator[dict]:
    """The JSON objects of ``texts``, in order (see :func:`parsed_batches`)."""
    for batch in parsed_batches(texts, bad):
        yield from batch


def parsed_batches(texts: Iterable[Any], bad: list[int] | None = None,
                   scan: Callable | None = None) -> Iterator[list[dict]]:
    """The JSON objects of ``texts``, in order, a list a batch (at most BATCH_ROWS, BATCH_CHARS): its
    ASCII texts parsed as one (:func:`parsed_batch`), the others alone in their place; a dict among
    them (an entry parsed already) passes in its place. A text that holds no object raises ValueError,
    or with ``bad`` is skipped and counted in ``bad[0]``. ``scan``: a JSON scanner's ``scan_once`` the
    caller has already (else one is made)."""
    scan = scan or json.decoder.JSONDecoder().scan_once
    slots: list = []
    batch: list[str] = []
    chars = 0
    for text in texts:
        if text.__class__ is str and len(text) < BATCH_ROW_CHARS and text.isascii():
            batch.append(text)
            chars += len(text)
        elif text.__class__ is not dict:
            chars += len(text) if isinstance(text, (str, bytes)) else 0
            text = parsed_alone(text, scan, bad)
        slots.append(text)
        if len(slots) >= BATCH_ROWS or chars >= BATCH_CHARS:
            yield filled_slots(slots, batch, scan, bad)
            slots, batch, chars = [], [], 0
    yield filled_slots(slots, batch, scan, bad)


def filled_slots(slots: list, batch: list[str], scan: Callable, bad: list[int] | None = None) -> list:
    """``slots`` (objects, and texts to parse: those of ``batch``, in order) with each text replaced
    by its object: the batch parsed as one, else one by one (:func:`parsed_alone`; a text skipped
    with ``bad`` leaves its slot None, and the Nones are left out)."""
    if not batch:
        return [slot for slot in slots if slot is not None]
    values = parsed_batch(batch, scan) if len(batch) > 1 else None
    if values is None:
        values = [parsed_alone(text, scan, bad) for text in batch]
    at = iter(values).__next__
    return [slot for slot in (at() if slot.__class__ is str else slot for slot in slots) if slot is not None]


def parsed_alone(text: Any, scan: Callable, bad: list[int] | None = None) -> dict | None:
    """The object ``text`` holds, by ``scan`` where it reads the whole text (sparing json.loads' Python
    wrapper), else by json.loads (e.g. white space around it, or bytes). A text that holds something
    else or nothing raises ValueError, or with ``bad`` is counted in ``bad[0]`` and gives None."""
    try:
        try:
            entry, end = scan(text, 0)
        except (StopIteration, TypeError):
            entry, end = None, -1
        if end != len(text):
            entry = json.loads(text)
    except (ValueError, TypeError, RecursionError):   # RecursionError: nested too deep to parse
        entry = None
    if entry.__class__ is dict:
        return entry
    if bad is None:
        raise ValueError("not a JSON object")
    bad[0] += 1
    return None


_FOLD: list = []  # [fold_session_summary or None], looked up once per process


def _summary_fold() -> Callable[[dict | None, dict, list[dict]], dict] | None:
    """The SDK's ``fold_session_summary`` when the SDK is importable, else None (no summaries)."""
    sdk = sys.modules.get(_SDK_MODULE)
    if sdk is not None:  # loaded (possibly a test double): ask it every time
        return getattr(sdk, "fold_session_summary", None)
    if not _FOLD:
        try:
            _FOLD.append(getattr(importlib.import_module(_SDK_MODULE), "fold_session_summary", None))
        except Exception:
            _FOLD.append(None)
    return _FOLD[0]


def _fold_summary(prev: dict | None, key: dict, entries: list[dict]) -> dict | None:
    """The summary ``prev`` with ``entries`` folded in by the SDK, or None without the SDK."""
    fold = _summary_fold()
    return fold(prev, key, entries) if fold else None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    skey TEXT NOT NULL,
    uuid TEXT,
    facts TEXT,
    payload TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS entries_uuid ON entries(skey, uuid) WHERE uuid IS NOT NULL;
CREATE INDEX IF NOT EXISTS entries_key ON entries(skey, seq);
CREATE TABLE IF NOT EXISTS cut_facts (
    skey TEXT NOT NULL,
    seq INTEGER NOT NULL,
    uuid TEXT NOT NULL,
    fact TEXT NOT NULL,
    PRIMARY KEY (skey, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS prune_marks (
    skey TEXT PRIMARY KEY,
    policy TEXT NOT NULL,
    rows INTEGER NOT NULL,
    last INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (
    skey TEXT PRIMARY KEY,
    project_key TEXT NOT NULL,
    session_id TEXT NOT NULL,
    subpath TEXT,
    mtime INTEGER NOT NULL,
    context INTEGER
);
CREATE INDEX IF NOT EXISTS sessions_project ON sessions(project_key, session_id);
CREATE TABLE IF NOT EXISTS summaries (
    project_key TEXT NOT NULL,
    session_id TEXT NOT NULL,
    mtime INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (project_key, session_id)
);
"""
# A store made before the facts column gets it (its old rows stay NULL: parsed and judged on load)
SQL_ENTRY_COLUMNS = "PRAGMA table_info(entries)"
SQL_ADD_FACTS = "ALTER TABLE entries ADD COLUMN facts TEXT"
SQL_APPEND_ENTRY = "INSERT OR IGNORE INTO entries(skey, uuid, payload, facts) VALUES (?,?,?,?)"
# The newest n rows of a session: those a batch just added, inside its transaction (with AUTOINCREMENT a
# new row's seq is above every seq the table ever held, and the write lock is held)
SQL_DELETE_NEWEST = "DELETE FROM entries WHERE seq IN (SELECT seq FROM entries WHERE skey=? ORDER BY seq DESC LIMIT ?)"
SQL_ENTRIES_TABLE = "SELECT sql FROM sqlite_master WHERE type='table' AND name='entries'"
# A session touched by a batch, its mtime later than every other session's (listing order)
SQL_TOUCH_SESSION = ("INSERT INTO sessions(skey, project_key, session_id, subpath, mtime, context) "
                     "VALUES (?1, ?2, ?3, ?4, max(?5, COALESCE((SELECT MAX(mtime) FROM sessions), 0) + 1), ?6) "
                     "ON CONFLICT(skey) DO UPDATE SET mtime=excluded.mtime, "
                     "context=COALESCE(excluded.context, sessions.context) RETURNING mtime")
SQL_SUMMARY = "SELECT data FROM summaries WHERE project_key=? AND session_id=?"
SQL_PUT_SUMMARY = "INSERT OR REPLACE INTO summaries(project_key, session_id, mtime, data) VALUES (?,?,?,?)"
SQL_SESSION_KNOWN = "SELECT 1 FROM sessions WHERE skey=?"
SQL_ENTRIES_BY_UUID = "SELECT uuid, CAST(payload AS BLOB) FROM entries WHERE skey=? AND uuid IN ({marks})"
# A session's rows from one on (an insert before it takes them out and puts them back after)
SQL_SEQ_OF_UUID = "SELECT seq FROM entries WHERE skey=? AND uuid=?"
SQL_ROWS_FROM = "SELECT uuid, payload FROM entries WHERE skey=? AND seq>=? ORDER BY seq"
SQL_DELETE_FROM = "DELETE FROM entries WHERE skey=? AND seq>=?"
SQL_LOAD_PAYLOADS = "SELECT payload FROM entries WHERE skey=? ORDER BY seq"
SQL_LOAD_BLOBS = "SELECT CAST(payload AS BLOB) FROM entries WHERE skey=? ORDER BY seq"   # bytes: never a decode error
SQL_ALL_BLOBS = ("SELECT s.project_key, s.session_id, s.subpath, CAST(e.payload AS BLOB) FROM entries e "
                 "JOIN sessions s ON s.skey = e.skey ORDER BY e.skey, e.seq")
# A row past the first ?2 of a session (none: the session is small); walks ?2 entries of the index only
SQL_ROW_PAST = "SELECT 1 FROM entries WHERE skey=?1 ORDER BY seq LIMIT 1 OFFSET ?2"
# Facts describe the payload they were stored with: a payload or uuid changed by any writer (a hand
# edit, a repair tool) loses them, so its row is parsed and judged again (the facts column itself is
# flower's: what a writer puts there is believed). That is what lets a load trust a row
# it does not read (an API error, a planned leaver) to hold what its facts say, without checking it.
FACTS_TRIGGER = f"entries_facts_stale_v{FACTS_VERSION}"   # named by the version its facts are of
SQL_FACTS_TRIGGER_KNOWN = f"SELECT 1 FROM sqlite_master WHERE type='trigger' AND name='{FACTS_TRIGGER}'"
SQL_FACTS_TRIGGER = (f"CREATE TRIGGER IF NOT EXISTS {FACTS_TRIGGER} AFTER UPDATE OF payload, uuid ON entries "
                     f"WHEN NEW.facts IS NOT NULL BEGIN UPDATE entries SET facts = NULL WHERE seq = NEW.seq; END")
# Older flowers' (on payload only; then on payload and uuid, for facts of version 1): a store that has
# one was written by such a flower since, with facts of its own version
OLD_FACTS_TRIGGERS = ("entries_facts_stale", "entries_facts_stale_2")
# The cut facts of big results (see plan_cuts) are noted by the load that first reads their rows whole
# (the biggest's by the append that stores them: CUT_STORED_CHARS), in a table of their own (an update
# of the row would rewrite its payload): a row changed or deleted by any writer takes its cut fact with
# it. Not a row another writer replaces (INSERT OR REPLACE fires no delete trigger unless that writer
# turned recursive_triggers on): a fact that then misleads a load (its seq gone, or another uuid under
# it) makes it fall back and forget the session's facts; one put back under the same seq and uuid is
# believed, as what a writer puts in the facts column is (a trigger on every insert to rule that out
# would cost each append 1-4%).
CUT_TRIGGERS = {
    "cut_facts_stale_1": "AFTER UPDATE OF payload, uuid, skey, seq ON entries",
    "cut_facts_gone_1": "AFTER DELETE ON entries",
}
SQL_CUT_TRIGGER = ("CREATE TRIGGER IF NOT EXISTS {name} {when} BEGIN "
                   "DELETE FROM cut_facts WHERE skey = OLD.skey AND seq = OLD.seq; END")
# A key whose trim-on load left every row as it was is marked with the policy (see prune_mark), its row
# count and its last seq: a later load with that policy reads its payloads and nothing else. A row
# changed or deleted by any writer takes the mark with it; a row added changes the count and the last seq
# (a row replaced by its uuid, too: it gets a new seq).
MARK_TRIGGERS = {
    "prune_marks_stale_1": "AFTER UPDATE OF payload, uuid, skey, seq ON entries",
    "prune_marks_gone_1": "AFTER DELETE ON entries",
}
SQL_MARK_TRIGGER = "CREATE TRIGGER IF NOT EXISTS {name} {when} BEGIN DELETE FROM prune_marks WHERE skey = OLD.skey; END"
SQL_FORGET_MARKS = "DELETE FROM prune_marks"
SQL_MARKS_TABLE = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='prune_marks'"
SQL_TRIGGERS_KNOWN = (f"SELECT name FROM sqlite_master WHERE type='trigger' AND name IN "
                      f"({', '.join(repr(n) for n in (FACTS_TRIGGER, *CUT_TRIGGERS, *MARK_TRIGGERS, *OLD_FACTS_TRIGGERS))})")
SQL_DROP_TRIGGER = "DROP TRIGGER IF EXISTS {name}"
SQL_FORGET_CUTS = "DELETE FROM cut_facts"
SQL_FORGET_SESSION_CUTS = "DELETE FROM cut_facts WHERE skey=?"
_CUT_ROWS = (f"SELECT 1, seq, uuid, fact FROM cut_facts WHERE skey=?1 AND fact >= '{_CUT_FACT}' "
             f"AND fact < '{FACTS_VERSION}t'")   # of another version or kind: noted again, replaced
SQL_CUT_ROWS = _CUT_ROWS + " ORDER BY seq"
SQL_NOTE_CUT = "INSERT OR REPLACE INTO cut_facts(skey, seq, uuid, fact) VALUES (?,?,?,?)"
SQL_NOTE_STORED_CUT = ("INSERT OR REPLACE INTO cut_facts(skey, seq, uuid, fact) "
                       "SELECT skey, seq, uuid, ?3 FROM entries WHERE skey=?1 AND uuid=?2")
SQL_DATA_VERSION = "PRAGMA data_version"
# The schema cookie: any writer's CREATE or DROP (a trigger's too) changes it; a connection that saw this
# flower's triggers under a cookie need not look for them again while it holds
_SCHEMA_COOKIE = "(SELECT schema_version FROM pragma_schema_version)"
SQL_SCHEMA_VERSION = f"SELECT {_SCHEMA_COOKIE}"
# What a trim-on load asks first, in one statement: whether the session is known, data_version, the cookie
SQL_LOAD_HEAD = (f"SELECT (SELECT 1 FROM sessions WHERE skey=?1), (SELECT data_version FROM pragma_data_version), "
                 f"{_SCHEMA_COOKIE}")
# SQL_ROW_PAST and the cookie, then what SQL_LOAD_HEAD asks first (the load that follows under the same
# hold of the lock need not ask again: one statement a small key, not two)
SQL_SMALL_HEAD = (f"SELECT ({SQL_ROW_PAST}), {_SCHEMA_COOKIE}, (SELECT 1 FROM sessions WHERE skey=?1), "
                  f"(SELECT data_version FROM pragma_data_version)")
# Both, with the mark of the session while it holds (a store opened read-only may lack the table)
_MARK_OF = ("(SELECT policy FROM prune_marks WHERE skey=?1 AND rows=(SELECT count(*) FROM entries WHERE skey=?1) "
            "AND last=(SELECT max(seq) FROM entries WHERE skey=?1))")
SQL_LOAD_HEAD_MARKED = SQL_LOAD_HEAD + f", {_MARK_OF}"
SQL_SMALL_HEAD_MARKED = SQL_SMALL_HEAD + f", {_MARK_OF}"
# The payloads of a session marked with the policy ?2 that still holds the rows it was marked with (in
# the same statement: what it reads is what the mark was checked against); none when it does not
SQL_LOAD_MARKED = ("SELECT payload FROM entries WHERE skey=?1 AND EXISTS (SELECT 1 FROM prune_marks WHERE "
                   "skey=?1 AND policy=?2 AND rows=(SELECT count(*) FROM entries WHERE skey=?1) AND "
                   "last=(SELECT max(seq) FROM entries WHERE skey=?1)) ORDER BY seq")
# The mark of a session that holds ?3 rows (those the load read: else another writer added some)
SQL_MARK = ("INSERT OR REPLACE INTO prune_marks(skey, policy, rows, last) SELECT ?1, ?2, count(*), max(seq) "
            "FROM entries WHERE skey=?1 HAVING count(*) = ?3")
# Once, when a store gets the trigger (made before it, or another writer dropped it): every row's facts
# are worked out again from the row as it is now, a session at a time
SQL_FACT_SESSIONS = "SELECT DISTINCT skey FROM entries"
SQL_FACT_ROWS = "SELECT seq, uuid, payload, facts FROM entries WHERE skey=? ORDER BY seq"
SQL_SET_FACTS = "UPDATE entries SET facts=? WHERE seq=?"
# The rows a load may leave unread, by their own index: lone denials and unavailable-tool errors (facts
# "<version>d...", see plan_leavers) and API errors ("<version>e...", prune drops them)
_LEFT = f"facts >= '{FACTS_VERSION}d' AND facts < '{FACTS_VERSION}f'"
# Both indexes hold the uuid and facts they are read for: else each row read from the table would be
# read past its payload (the facts column comes after it), a big one's overflow pages and all
SQL_LEFT_INDEX = (f"CREATE INDEX IF NOT EXISTS entries_left_rows_{FACTS_VERSION} ON entries(skey, seq, uuid, facts) "
                  f"WHERE {_LEFT}")
SQL_OLD_INDEXES = ("DROP INDEX IF EXISTS entries_leavers_1",   # older flowers': the d rows only,
                   "DROP INDEX IF EXISTS entries_left_1",      # then without uuid and facts,
                   "DROP INDEX IF EXISTS entries_cut_1",       # and its cut facts in the row;
                   "DROP INDEX IF EXISTS entries_left_rows_1")   # facts of version 1
_LEFT_ROWS = f"SELECT 0, seq, uuid, facts FROM entries WHERE skey=?1 AND {_LEFT}"
SQL_LEFT_ROWS = _LEFT_ROWS + " ORDER BY seq"
# A trim-on load's plan in one statement: the rows of SQL_LEFT_ROWS (0, seq, uuid, facts) and those of
# SQL_CUT_ROWS (1, seq, uuid, fact), merged in seq order (each comes in it by its own index)
SQL_PLAN_ROWS = f"{_LEFT_ROWS} UNION ALL {_CUT_ROWS} ORDER BY 2"
# (payload, facts, uuid, seq) of every other row; the uuid only where a plan may leave the row out (facts
# b, c, d: a lone call, or a denial the plan keeps), the seq only where a trim-on load may read the row
# cut or note its cut fact (no facts of this version; an older flower kept "t" facts in the row, which
# tell nothing here). Each column a row brings costs (about 0.15 us a row for a seq), hence NULLs.
_LOAD_ROWS = (f"SELECT {{payload}}, facts, CASE WHEN facts >= '{FACTS_VERSION}b' THEN uuid END, {{seq}} "
              f"FROM entries WHERE skey=?1 AND (facts IS NULL OR facts < '{FACTS_VERSION}e' "
              f"OR facts >= '{FACTS_VERSION}f') ORDER BY seq")
SQL_LOAD_WITH_FACTS = _LOAD_ROWS.format(payload="payload", seq="NULL")
# A trim-on load also tells the seqs of the rows it reads cut (?2, a JSON array): those bring their uuid
# in place of their payload, which SQLite then never reads (a row's big text lies in overflow pages)
_NOTABLE_SEQ = f"CASE WHEN facts IS NULL OR facts >= '{FACTS_VERSION}t' THEN seq END"
SQL_LOAD_TRIMMING = _LOAD_ROWS.format(
    payload="CASE WHEN facts IS NULL AND seq IN (SELECT value FROM json_each(?2)) THEN uuid ELSE payload END",
    seq=_NOTABLE_SEQ)
# The same when no row is read cut (most keys): without the json_each lookup, a fifth of a small key's SELECT
SQL_LOAD_UNCUT = _LOAD_ROWS.format(payload="payload", seq=_NOTABLE_SEQ)
# Every row, but those with a cut fact (and the uuid it was noted of) bring their uuid and fact, not their payload
SQL_LOAD_OUTLINE = (f"SELECT CASE WHEN c.fact IS NULL THEN e.payload ELSE e.uuid END, c.fact FROM entries e "
                    f"LEFT JOIN cut_facts c ON c.skey = e.skey AND c.seq = e.seq AND c.uuid = e.uuid "
                    f"AND c.fact >= '{_CUT_FACT}' AND c.fact < '{FACTS_VERSION}t' WHERE e.skey=? ORDER BY e.seq")
SQL_SESSION_CONTEXT = "SELECT context FROM sessions WHERE skey=?"
# A deciding pass (PrunePolicy.deciding) that takes the outline reads the API-error rows too: for it alone
_LOAD_FILTER = f" AND (facts IS NULL OR facts < '{FACTS_VERSION}e' OR facts >= '{FACTS_VERSION}f')"
SQL_OUTLINING = {sql: sql.replace(_LOAD_FILTER, "") for sql in (SQL_LOAD_UNCUT, SQL_LOAD_TRIMMING)}
SQL_JSON_EACH = "SELECT value FROM json_each('[1]')"   # fails where SQLite was built without JSON
# Every payload, with the Bash verdicts only (for a prune that keeps API errors)
SQL_LOAD_KEEPING_ERRORS = (f"SELECT payload, CASE WHEN facts >= '{FACTS_VERSION}b' AND facts < '{FACTS_VERSION}c' "
                           f"THEN facts END, NULL, NULL FROM entries WHERE skey=? ORDER BY seq")


def left_only(entries: list[dict], left: Iterable[tuple]) -> tuple[list[dict], PruneReport]:
    """What :func:`_prune` makes of ``entries`` when all it does is what ``left`` (as for it) tells: the
    rows a store left unread leave, and what pointed at them points at their nearest ancestor left."""
    report = PruneReport()
    drop, parents = set(), {}
    for uid, parent, chars, what in left:   # counted as _drop_api_errors counts them
        report.chars_saved += chars
        if what == "error":
            report.dropped_errors += 1
        elif what == "denial":
            report.denials_dropped += 1
        elif what != "use":
            report.unavailable_dropped += 1
        if uid.__class__ is str:
            drop.add(uid)
            parents[uid] = parent
    return (relink(entries, drop, parents) if drop else entries), report


def only_left(report: PruneReport, left: list[tuple]) -> bool:
    """Whether the prune that made ``report`` changed only what ``left`` tells (see :func:`left_only`):
    nothing else dropped, cut, trimmed, expired, neutralized or healed (each counts; a re-link follows
    only a drop)."""
    told = left_only([], left)[1]
    return not (report.interrupts or report.expired or report.trimmed or report.healed or report.spills or
                report.unspilled) and report.dropped_errors == told.dropped_errors and \
        report.denials_dropped == told.denials_dropped and report.unavailable_dropped == told.unavailable_dropped \
        and report.chars_saved == told.chars_saved


_PRUNE_MARKS: dict[str, str | None] = {}   # repr of a policy -> its mark
_LAST_MARK: list = []                        # the policy last asked about, a copy of it, its mark


def prune_mark(policy: PrunePolicy) -> str | None:
    """What a session a prune with ``policy`` leaves as it is gets marked with (see MARK_TRIGGERS): a
    digest of the policy, the facts' version and this flower's own source (another flower may prune
    otherwise); None where the source cannot be read (no mark then). One where the prune changes only
    what the rows left unread tell (see :func:`left_only`) ends in LEFT_MARK."""
    last = _LAST_MARK
    if last and last[0] is policy and last[1] == policy:   # the policy of the last load, as it was then
        return last[2]
    said = repr(policy)
    if said not in _PRUNE_MARKS:
        try:
            with open(__file__, "rb") as fh:
                source = fh.read()
        except (OSError, NameError):
            _PRUNE_MARKS[said] = None
        else:
            _PRUNE_MARKS[said] = hashlib.sha256(source + f"\0{FACTS_VERSION}\0{said}".encode()).hexdigest()[:32]
    if policy.fallback is None:   # (a copy shares its fallback: one changed in place would not show)
        _LAST_MARK[:] = (policy, dataclasses.replace(policy), _PRUNE_MARKS[said])
    return _PRUNE_MARKS[said]


LEFT_MARK = "|left"


def _encodable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (a lone surrogate cannot: SQLite and PostgreSQL refuse it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _storable_json(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)``, or \\u-escaped where that text holds a lone surrogate
    (a summary folds the first prompt in: a session would otherwise fail it on every later batch)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if _encodable(text) else json.dumps(value)


def _storable_uuid(uid: str | None) -> str | None:
    """A uuid as a store's uuid column can hold it: as it is, or \\u-escaped where it holds a lone
    surrogate (the same uuid always gives the same text, so a batch sent again is still recognised)."""
    return uid if uid is None or _encodable(uid) else json.dumps(uid)[1:-1]


def _entry_rows(entries: list[dict], ascii_only: bool = False) -> tuple[list, list]:
    """``(uuids, payloads)`` of a batch, as both stores write it: each entry as compact JSON, exactly as
    appended. ``ascii_only`` (for a batch holding a lone surrogate, which no store takes as text): the
    JSON \\u-escaped, the same values, and the uuids as :func:`_storable_uuid` tells."""
    uuids = [uid if isinstance(uid := e.get("uuid"), str) else None for e in entries]
    if ascii_only:
        return [_storable_uuid(uid) for uid in uuids], [json.dumps(e, separators=(",", ":")) for e in entries]
    dumps = _compact_json()
    return uuids, [dumps(e) for e in entries]


def _writable(path: str) -> bool:
    """Whether ``path`` and its directory (where SQLite puts its -wal and -shm files) can be written."""
    return os.access(path, os.W_OK) and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)


_BUSY_DB = _lazy_re(r"(?i)database is locked|database table is locked|busy")
_DAMAGED_DB = _lazy_re(r"(?i)database disk image is malformed|file is not a database")


def store_damage(error: BaseException | str | None) -> str | None:
    """SQLite's words when ``error`` (or what caused it: the SDK wraps a store's failure) says the
    database file itself is damaged, a fault no retry can mend; None otherwise."""
    seen = 0
    while error is not None and seen < 10:
        found = _DAMAGED_DB.search(str(error))
        if found:
            return found.group(0)
        if isinstance(error, str):
            return None
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def utf8_or_none(blob: Any) -> str | None:
    """A stored payload's bytes as text, or None where they are not UTF-8 (a damaged page)."""
    try:
        return blob.decode("utf-8")
    except (UnicodeDecodeError, AttributeError):
        return None


def _parsed_or_empty(payload: str) -> dict:
    """A stored row's entry, or {} for one that does not parse to an object (it is kept as it is)."""
    try:
        entry = json.loads(payload)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}


def _rollback(db: sqlite3.Connection) -> None:
    """Undo the open transaction, if there is one: SQLite has already rolled back a transaction that a
    full disk or an I/O error broke, and a ROLLBACK then would raise "no transaction is active" in
    place of the real error."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


SDK_REQUIRED = ("append", "load")
SDK_OPTIONAL = frozenset({"list_sessions", "list_session_summaries", "delete", "list_subkeys"})


class SessionStoreContract:
    """The session store flower works with, written down once.

    Required, as the SDK's ``SessionStore`` protocol says: ``async append(key, entries)`` stores a
    batch after those before it, idempotent on ``uuid`` (entries without one are always appended);
    ``async load(key)`` gives every entry of ``key`` in append order, each as it was appended, and None
    for a key never written; a key with a ``subpath`` is a session of its own. ``skipped`` maps a
    session key (``project/session``) to the unreadable rows its last load skipped (the runtime pops
    and reports them); ``path`` is the file the store keeps, when it is one file.

    Optional, declared by the flags below and never found out by looking for methods: a store that
    declares nothing is a plain SDK store, and flower uses only its ``append`` and ``load`` (through
    the default methods here) and the SDK's optional methods ``sdk_optional`` names. A store that
    declares a flag overrides the methods it speaks for:

    - ``threaded_load``: ``load()`` is ``load_sync()`` run in a worker thread, so flower may run
      ``load_pruned``, and ``small_held``'s quick loads, in place of awaiting ``load()``. A subclass that
      overrides ``load`` without declaring it anew does not have it.
    - ``pruned_load``: ``load_pruned()`` is the store's own, cheaper than pruning a load (stored facts,
      rows streamed into the prune), and returns exactly what the default returns.
    - ``outline_load``: ``load_outline()`` leaves out the text of the big results it knows cut (blocking,
      run in a worker thread); without it a handoff awaits ``load()``.
    - ``catalog``: ``sessions()``, ``find_session()`` and ``last_context()`` answer from the store's own
      index; without it no session is listed and no context is told (a load is not worth it there).
    - ``sdk_optional``: which of :data:`SDK_OPTIONAL` (``list_sessions``, ``list_session_summaries``,
      ``delete``, ``list_subkeys``) the store implements.

    Whatever a store declares, its ``load_pruned(key, policy)`` equals ``_prune`` of ``load_sync(key)``
    and its blocking twins equal the protocol's methods: ``tests/test_store_contract.py`` holds every
    store to this."""

    CAPABILITIES = ("threaded_load", "pruned_load", "outline_load", "catalog", "sdk_optional")
    threaded_load = False
    pruned_load = False
    outline_load = False
    catalog = False
    sdk_optional: frozenset = frozenset()
    path: str | None = None

    def __init__(self) -> None:
        self.skipped: dict[str, int] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "load" in cls.__dict__ and "threaded_load" not in cls.__dict__:
            cls.threaded_load = False   # its own load, not load_sync, is what it serves

    async def append(self, key: dict, entries: list[dict]) -> None:
        """Store a batch of transcript entries (SDK protocol; required)."""
        raise NotImplementedError

    async def load(self, key: dict) -> list[dict] | None:
        """Every entry of ``key`` in append order, None when never written (SDK protocol; required)."""
        raise NotImplementedError

    def append_sync(self, key: dict, entries: list[dict]) -> None:
        """:meth:`append`, blocking."""
        _run_sync(self.append(key, entries))

    def load_sync(self, key: dict) -> list[dict] | None:
        """:meth:`load`, blocking."""
        return _run_sync(self.load(key))

    def insert_before_sync(self, key: dict, entries: list[dict], before: str) -> None:
        """Store ``entries`` just before the stored entry whose uuid is ``before``; by default after all
        of them. A store that can should put them in place: the CLI resumes from the last leaf in file
        order, so older entries stored last can end its history early. Blocking."""
        self.append_sync(key, entries)

    def known_uuids(self, key: dict) -> set:
        """The uuids stored under ``key``. Blocking."""
        return {e.get("uuid") for e in self.load_sync(key) or [] if isinstance(e.get("uuid"), str)}

    def load_pruned(self, key: dict, policy: PrunePolicy | None = None,
                    estimate: bool = False) -> tuple[list[dict], PruneReport] | None:
        """``_prune`` of the session with ``policy`` (None when never written; ``estimate``: as for
        :func:`_prune`): a store may get there cheaper, never elsewhere. Blocking. The entries are not
        pruned in place here: a plain store's load may hand out a list it keeps."""
        entries = self.load_sync(key)
        return None if entries is None else _prune(entries, policy or PrunePolicy(), estimate=estimate)

    def load_outline(self, key: dict) -> list[dict] | None:
        """The entries a handoff reads (see ``outline_load``); by default :meth:`load_sync`'s. Blocking."""
        return self.load_sync(key)

    @contextlib.contextmanager
    def small_held(self, key: dict) -> Iterator[bool]:
        """Whether a load of ``key`` may run in the caller's thread (the event loop's), with what it
        needs held until the block ends; by default never (see ``threaded_load``)."""
        yield False

    def has_session(self, project_key: str, session_id: str) -> bool:
        """Whether the main transcript of the session holds an entry. Blocking."""
        return bool(self.load_sync({"project_key": project_key, "session_id": session_id}))

    def last_context(self, project_key: str, session_id: str) -> int | None:
        """Context tokens of the session's last real main-thread assistant entry (None if unknown). Blocking."""
        return entry_context(self.load_sync({"project_key": project_key, "session_id": session_id}) or [])

    def sessions(self, project_key: str | None = None) -> list[dict]:
        """Main sessions (newest first): project_key, session_id, mtime, entries, context (see ``catalog``)."""
        return []

    def find_session(self, session_id_prefix: str) -> list[dict]:
        """Main sessions whose id starts with ``session_id_prefix`` (any project)."""
        return [s for s in self.sessions() if s["session_id"].startswith(session_id_prefix)]

    def close(self) -> None:
        """Let go of what the store holds (idempotent)."""


def _methods_of(store: Any, names: Iterable[str]) -> frozenset:
    """Which of ``names`` are methods of ``store``: how the SDK tells what a plain store implements,
    asked once, when flower takes the store in (:func:`contract_store`)."""
    return frozenset(name for name in names if callable(getattr(store, name, None)))


class PlainSessionStore(SessionStoreContract):
    """A store that declares nothing (any object with the SDK's ``append`` and ``load``, e.g. a user's
    ``--store``) under the contract: no capability but the SDK's optional methods it has, which are
    passed on, and its ``close``, called where it has one."""

    def __init__(self, store: Any):
        super().__init__()
        self.store = store
        has = _methods_of(store, (*SDK_OPTIONAL, "close"))
        self.sdk_optional = has & SDK_OPTIONAL
        self._closes = "close" in has

    async def append(self, key: dict, entries: list[dict]) -> None:
        """The store's own append."""
        await self.store.append(key, entries)

    async def load(self, key: dict) -> list[dict] | None:
        """The store's own load."""
        return await self.store.load(key)

    async def list_sessions(self, project_key: str) -> list[dict]:
        """The store's own (SDK protocol)."""
        return await self.store.list_sessions(project_key)

    async def list_session_summaries(self, project_key: str) -> list[dict]:
        """The store's own (SDK protocol)."""
        return await self.store.list_session_summaries(project_key)

    async def delete(self, key: dict) -> None:
        """The store's own (SDK protocol)."""
        await self.store.delete(key)

    async def list_subkeys(self, key: dict) -> list[str]:
        """The store's own (SDK protocol)."""
        return await self.store.list_subkeys(key)

    def close(self) -> None:
        """The store's own close, where it has one."""
        if self._closes:
            self.store.close()


def contract_store(store: Any) -> SessionStoreContract:
    """``store`` under the contract: as it is when it declares its capabilities (a
    :class:`SessionStoreContract`), else as a plain SDK store (:class:`PlainSessionStore`)."""
    return store if isinstance(store, SessionStoreContract) else PlainSessionStore(store)


class OutlineTaker:
    """The outline of a session (what :meth:`SqliteSessionStore.load_outline` reads: every row, those with a
    cut fact with "" as their result's text and without toolUseResult) taken from a deciding pass of
    prepare (``PrunePolicy.deciding``) as it reads the rows: the handoff that follows a session that does
    not fit need not read it again. The pass reads every row (:data:`SQL_OUTLINING`); :meth:`rows` sets
    aside the texts of those the prune is not given, :meth:`taken` the entries it is, which are the
    outline's where the prune stopped after its scan (it changed none of them)."""

    __slots__ = ("skip", "places", "entries")

    def __init__(self, plan: LeavePlan):
        self.skip = plan.skip
        self.places: list = []    # per row: its seq (None: it has none) or [its text], a row the prune is not given
        self.entries: list[dict] = []   # the entries the prune is given, in order

    @classmethod
    def of(cls, plan: LeavePlan) -> "OutlineTaker | None":
        """A taker for the pass of a trim-on ``plan`` (one that notes cut facts); None for another."""
        return cls(plan) if plan.noted is not None else None

    def rows(self, rows: Iterable[tuple]) -> Iterator[tuple]:
        """The rows of :data:`SQL_OUTLINING` (as :meth:`SqliteSessionStore._fresh` takes them) but the
        API-error rows; those and the rows the plan leaves unread noted with their texts."""
        version, skip, places = FACTS_VERSION, self.skip, self.places
        for row in rows:
            facts = row[1]
            if facts is not None and facts[:1] == version and (facts[1] == "e" or skip and row[2] in skip):
                places.append([row[0]])
                if facts[1] == "e":
                    continue
            else:
                places.append(row[3])
            yield row

    def taken(self, entries: Iterable[dict]) -> Iterator[dict]:
        """``entries``, each kept as it passes."""
        keep = self.entries.append
        for entry in entries:
            keep(entry)
            yield entry

    def outline(self, noted: dict, found: list[tuple], done: tuple[list[dict], PruneReport],
                policy: PrunePolicy) -> list[dict] | None:
        """The outline, once the pass that found the cut facts ``found`` ((seq, uuid, fact), noted now)
        besides those of ``noted`` (seq -> (uuid, fact)) made ``done``: a row with a fact of its uuid read
        from the fact, as :meth:`SqliteSessionStore.load_outline` reads it. None unless the prune stopped
        after its scan, over the budget ([] returned: see :func:`_prune`), or where a row set aside or a
        fact does not read (where that reads the rows whole: the handoff reads them then)."""
        tokens = done[1].tokens
        if done[0] or tokens is None or policy.budget is None or tokens <= policy.budget:
            return None
        if len(self.entries) != sum(place.__class__ is not list for place in self.places):
            return None   # (the pass stopped early)
        bad = [0]
        aside = list(parsed_objects((place[0] for place in self.places if place.__class__ is list), bad))
        if bad[0]:
            return None
        # a fact found now is of an entry read whole, and unchanged: cut in place, its fact not parsed
        fresh = {seq: uid for seq, uid, _ in found}
        read, scan = SqliteSessionStore._read_cut, json.decoder.JSONDecoder().scan_once
        out, given, put = [], iter(self.entries), iter(aside)
        try:
            for place in self.places:
                if place.__class__ is list:
                    out.append(next(put))
                    continue
                entry = next(given)
                uid = fresh.get(place)
                if uid is not None:
                    if uid == entry.get("uuid"):   # (SQL_LOAD_OUTLINE joins on the uuid)
                        entry["message"]["content"][0]["content"] = ""
                        entry.pop("toolUseResult", None)
                else:
                    uid, fact = noted.get(place) or (None, None)
                    if uid is not None and uid == entry.get("uuid"):
                        entry = read(uid, uid, fact, "", scan)
                out.append(entry)
        except PlanBroken:
            return None
        return out


class SqliteSessionStore(SessionStoreContract):
    """The SDK ``SessionStore`` protocol on one SQLite file (WAL), plus sync extras for flower.

    Every entry is kept exactly as appended (idempotent on ``uuid``, call order kept). Safe from
    several threads (one connection behind a lock) and several processes (WAL, busy timeout).
    ``":memory:"`` works for tests.
    """

    threaded_load = pruned_load = outline_load = catalog = True   # declared (see SessionStoreContract)
    sdk_optional = SDK_OPTIONAL

    # A session of at most this many rows is loaded in the caller's thread (see small_held): with rows
    # of ordinary size such a load pauses the event loop for about 15 ms (0.15 s for 2,000 rows of
    # 60 KB), and the hop to a worker thread and back cost 0.2-0.35 of a 1,000-row load's own time (CPU,
    # measured through the SDK's path: the worker meets the rows in another core's cold cache)
    quick_rows = 2000

    def __init__(self, path: str, *, busy_timeout: float = 30.0, reader: bool = False):
        """``reader``: a store that cannot be written (a read-only run dir, no permission) is opened
        read-only instead of refused (``status``, ``sessions``, ``show``)."""
        self.path = path
        self.busy_timeout = busy_timeout
        self.skipped: dict[str, int] = {}  # session key -> unreadable rows skipped by the last load
        self._lock = threading.RLock()
        self._outline: tuple[str, tuple, list[dict]] | None = None   # see _keep_outline
        if path != ":memory:":
            directory = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(directory):
                ensure_private_dir(directory)
            if os.path.isdir(path):
                raise FlowerError(said("er_sqlite_is_dir", path=path), EXIT_SETUP)
            if not os.path.exists(path):
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        deadline = time.monotonic() + busy_timeout
        while True:
            try:
                self._db = self._connect(path, busy_timeout)
                break
            except sqlite3.OperationalError as exc:
                # WAL setup and schema creation need a write lock the busy handler does not always
                # wait for: another process opening the same file at this instant. Wait it out.
                busy = "locked" in str(exc) or "busy" in str(exc)
                if busy and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                if not busy and not _writable(path):
                    if reader:
                        self._db = self._connect_read_only(path, busy_timeout)
                        break
                    raise FlowerError(said("er_store_unwritable", path=path, error=exc),
                                      EXIT_SETUP) from None
                raise FlowerError(said("er_store_busy", path=path, error=exc), EXIT_SETUP) from None
            except sqlite3.DatabaseError as exc:
                raise FlowerError(said("er_store_unusable", path=path, error=exc),
                                  EXIT_SETUP) from None
        # A table made without AUTOINCREMENT (by hand) may give a new row a lower seq than an old one
        # (past the largest rowid, SQLite picks free ones at random): its batches take the careful way
        schema = self._db.execute(SQL_ENTRIES_TABLE).fetchone()
        self._rising = bool(schema) and "AUTOINCREMENT" in schema[0].upper()
        self._json = self._has_json(self._db)   # without SQLite's JSON functions no row is read cut
        self._trusted_cookie: int | None = None   # the schema cookie this flower's triggers were last seen under
        self._held_head: tuple | None = None   # (session key, SQL_LOAD_HEAD's answer) asked by small_held
        self._marks = self._db.execute(SQL_MARKS_TABLE).fetchone() is not None   # see MARK_TRIGGERS

    @staticmethod
    def _has_json(db: sqlite3.Connection) -> bool:
        """Whether this SQLite has ``json_each`` (built in since 3.38; an older or trimmed build may not)."""
        try:
            db.execute(SQL_JSON_EACH).fetchall()
            return True
        except sqlite3.OperationalError:
            return False

    @staticmethod
    def _connect_read_only(path: str, busy_timeout: float) -> sqlite3.Connection:
        """A connection that never writes: ``mode=ro`` (it reads a WAL file's newer rows), else, where
        even that needs a write (no ``-shm`` file in a read-only directory), ``immutable=1``."""
        uri = "file:" + urllib.parse.quote(os.path.abspath(path))
        for flags in ("?mode=ro", "?immutable=1"):
            try:
                db = sqlite3.connect(uri + flags, uri=True, timeout=busy_timeout, check_same_thread=False,
                                     isolation_level=None)
                db.execute(SQL_ENTRIES_TABLE).fetchone()
                return db
            except sqlite3.OperationalError as exc:
                error = exc
        raise FlowerError(said("er_store_unreadable", path=path, error=error), EXIT_SETUP)

    @staticmethod
    def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
        db = sqlite3.connect(path, timeout=busy_timeout, check_same_thread=False, isolation_level=None)
        try:
            db.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            if path != ":memory:":
                if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            if "facts" not in [column[1] for column in db.execute(SQL_ENTRY_COLUMNS)]:
                try:
                    db.execute(SQL_ADD_FACTS)
                except sqlite3.OperationalError as exc:   # another process added it first
                    if "duplicate column" not in str(exc):
                        raise
            SqliteSessionStore._trust_facts(db)
            db.execute(SQL_LEFT_INDEX)
            for statement in SQL_OLD_INDEXES:
                db.execute(statement)
        except BaseException:
            db.close()
            raise
        return db

    @staticmethod
    def _trust_facts(db: sqlite3.Connection) -> None:
        """Give the store the triggers that clear a row's facts and its cut fact when the row changes. A
        store without the first (made before it, by a flower of another FACTS_VERSION, or a writer
        dropped it), or with an older flower's, first has every row's facts worked out again
        (:func:`refreshed_facts`), one without the others forgets its cut facts (the
        next trim-on load notes them again): whatever was done to the rows meanwhile, facts then tell them."""
        if SqliteSessionStore._facts_trusted(db):
            return
        wanted = {FACTS_TRIGGER, *CUT_TRIGGERS, *MARK_TRIGGERS}
        db.execute("BEGIN IMMEDIATE")
        try:
            known = {name for (name,) in db.execute(SQL_TRIGGERS_KNOWN)}   # as now, not as before the lock
            if FACTS_TRIGGER not in known or known - wanted:   # an older flower wrote facts of its own since
                for (skey,) in db.execute(SQL_FACT_SESSIONS).fetchall():
                    db.executemany(SQL_SET_FACTS, refreshed_facts(db.execute(SQL_FACT_ROWS, (skey,)).fetchall()))
                for name in OLD_FACTS_TRIGGERS:
                    db.execute(SQL_DROP_TRIGGER.format(name=name))
                db.execute(SQL_FACTS_TRIGGER)
            if not known.issuperset(CUT_TRIGGERS):
                db.execute(SQL_FORGET_CUTS)
                for name, when in CUT_TRIGGERS.items():
                    db.execute(SQL_CUT_TRIGGER.format(name=name, when=when))
            if not known.issuperset(MARK_TRIGGERS):
                db.execute(SQL_FORGET_MARKS)
                for name, when in MARK_TRIGGERS.items():
                    db.execute(SQL_MARK_TRIGGER.format(name=name, when=when))
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise

    def _trusted_under(self, cookie: int) -> bool:
        """Whether the store has exactly this flower's triggers, its schema cookie being ``cookie``: asked
        of sqlite_master only when the cookie is not the one they were last seen under (a trigger dropped
        by any connection, this one too, changes the cookie)."""
        if cookie == self._trusted_cookie:
            return True
        if not self._facts_trusted(self._db):
            return False
        self._trusted_cookie = cookie
        return True

    def _ensure_trusted(self, cookie: int) -> None:
        """:meth:`_trust_facts`, unless the triggers were seen under ``cookie`` already."""
        if not self._trusted_under(cookie):
            self._trust_facts(self._db)
            self._trusted_under(self._db.execute(SQL_SCHEMA_VERSION).fetchone()[0])

    @staticmethod
    def _facts_trusted(db: sqlite3.Connection) -> bool:
        """Whether the store has exactly this flower's triggers (else :meth:`_trust_facts` must write)."""
        return {name for (name,) in db.execute(SQL_TRIGGERS_KNOWN)} == {FACTS_TRIGGER, *CUT_TRIGGERS, *MARK_TRIGGERS}

    def _begin_immediate(self) -> None:
        """``BEGIN IMMEDIATE`` (nothing else of the transaction has run yet), tried again with backoff
        where SQLite says busy sooner than its busy timeout (a lock its busy handler does not wait
        for), until that timeout is spent. A store still locked then: one line that names it."""
        start, pause = time.monotonic(), 0.01
        while True:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                waited = time.monotonic() - start
                if not _BUSY_DB.search(str(exc)):
                    raise
                if waited + pause >= self.busy_timeout:
                    raise sqlite3.OperationalError(f"{self.path} stayed locked by another connection for "
                                                   f"{waited:.0f} s ({exc}); nothing was written") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    # -- sync core (also used by the async protocol methods) --

    def append_sync(self, key: dict, entries: list[dict]) -> None:
        """Append entries under ``key`` in one transaction (duplicates by uuid are ignored)."""
        if not entries:
            return
        try:
            self._append(key, entries, ascii_only=False)
        except UnicodeEncodeError:   # a lone surrogate (an output cut inside a UTF-16 pair): SQLite takes no
            self._append(key, entries, ascii_only=True)   # such text; the batch \u-escaped is the same JSON

    def _append(self, key: dict, entries: list[dict], ascii_only: bool) -> None:
        """:meth:`append_sync`; ``ascii_only``: the rows as :func:`_entry_rows` writes such a batch, and a
        fact that cannot be encoded left out."""
        skey = _key_string(key)
        uuids, payloads = _entry_rows(entries, ascii_only)
        context = entry_context(entries) if not key.get("subpath") else None
        # Looked up before the write lock: the first lookup imports the SDK, which takes seconds on a
        # loaded machine, and every other writer of the store would wait that long
        fold = _summary_fold() if not key.get("subpath") else None
        with self._lock:
            self._begin_immediate()
            try:   # facts inside the transaction: they describe the rows as this batch leaves them
                self._insert_with_facts(skey, entries, uuids, payloads, ascii_only)
                mtime = self._db.execute(SQL_TOUCH_SESSION, (skey, key["project_key"], key["session_id"],
                                                             key.get("subpath"), int(time.time() * 1000),
                                                             context)).fetchone()[0]
                if fold is not None:
                    self._fold_summary(key, entries, mtime, fold)
                self._db.execute("COMMIT")
            except BaseException:
                _rollback(self._db)
                raise

    def insert_before_sync(self, key: dict, entries: list[dict], before: str) -> None:
        """Put ``entries`` just before the stored entry whose uuid is ``before`` (at the end when there is
        none), in one transaction: the rows from that entry on are taken out and put back after them,
        as they were. For what a failed write left out of the middle of a session (duplicates by uuid
        are ignored, as by an append)."""
        if not entries:
            return
        try:
            self._insert_before(key, entries, before, ascii_only=False)
        except UnicodeEncodeError:
            self._insert_before(key, entries, before, ascii_only=True)

    def _insert_before(self, key: dict, entries: list[dict], before: str, ascii_only: bool) -> None:
        skey = _key_string(key)
        uuids, payloads = _entry_rows(entries, ascii_only)
        with self._lock:
            self._begin_immediate()
            try:
                row = self._db.execute(SQL_SEQ_OF_UUID, (skey, before)).fetchone()
                if row is not None:
                    later = self._db.execute(SQL_ROWS_FROM, (skey, row[0])).fetchall()
                    self._db.execute(SQL_DELETE_FROM, (skey, row[0]))
                    self._insert_with_facts(skey, entries + [_parsed_or_empty(payload) for _, payload in later],
                                            uuids + [uid for uid, _ in later],
                                            payloads + [payload for _, payload in later], ascii_only)
                self._db.execute("COMMIT")
            except BaseException:
                _rollback(self._db)
                raise
        if row is None:   # nothing to put them before: they are the session's newest
            self._append(key, entries, ascii_only)

    def _fold_summary(self, key: dict, entries: list[dict], mtime: int, fold: Callable) -> None:
        """Fold a batch into its session's summary with ``fold`` (the SDK's, see :func:`_summary_fold`),
        inside the caller's transaction."""
        names = (key["project_key"], key["session_id"])
        row = self._db.execute(SQL_SUMMARY, names).fetchone()
        try:
            prev = json.loads(row[0]) if row else None
        except ValueError:
            prev = None  # a damaged summary is folded anew, never a reason to lose the batch
        folded = fold(prev, {"project_key": names[0], "session_id": names[1]}, entries)
        if folded is not None:
            folded = dict(folded, mtime=mtime)
            self._db.execute(SQL_PUT_SUMMARY, (*names, mtime, _storable_json(folded)))

    def _insert_with_facts(self, skey: str, entries: list[dict], uuids: list, payloads: Sequence[str],
                           ascii_only: bool = False) -> None:
        """Insert the batch's rows with their facts, inside the caller's transaction. Facts are first
        worked out as if every row were new (the batch's own calls as they are, only the others
        looked up); when the insert shows that a row was stored already (a batch sent again, a reused
        uuid: the first row stays), the rows it added are taken out again and inserted with every
        call looked up. The rows a batch added are the session's newest, as many as the insert counts;
        where seqs need not rise, a SAVEPOINT undoes the insert instead (it costs its statement journal
        on every batch, hence not always)."""
        def insert(facts: list[str | None]) -> int:
            if ascii_only:   # a fact that holds a lone surrogate: the row is judged when it is loaded
                facts = [fact if fact is None or _encodable(fact) else None for fact in facts]
            return self._db.executemany(SQL_APPEND_ENTRY, [(skey, uid, payload, fact) for uid, payload, fact
                                                           in zip(uuids, payloads, facts)]).rowcount
        stored = functools.partial(self._stored_entries, skey)
        if not self._rising:
            self._db.execute("SAVEPOINT batch")
        added = insert(batch_facts(entries, stored, batch_first=True))
        if added < len(entries):
            if not self._rising:
                self._db.execute("ROLLBACK TO batch")
            elif added:
                self._db.execute(SQL_DELETE_NEWEST, (skey, added))
            insert(batch_facts(entries, stored))
        elif self._json and not ascii_only:
            self._note_stored_cuts(skey, entries, uuids, payloads)
        if not self._rising:
            self._db.execute("RELEASE batch")

    def _note_stored_cuts(self, skey: str, entries: list[dict], uuids: list, payloads: Sequence[str]) -> None:
        """Note the cut facts of the batch's results of CUT_STORED_CHARS or more, each row stored as
        ``uuids`` and ``payloads`` say (every row of the batch new: the caller's insert added them all),
        inside the caller's transaction. A row is found by its uuid column: one that does not hold its
        entry's uuid (a row put back by an insert before it, renamed since) gets no fact, nor lends it."""
        found, dumps = [], _compact_json()
        for n in [n for n, payload in enumerate(payloads) if len(payload) >= CUT_STORED_CHARS]:
            entry = entries[n]
            block = _cut_block(entry) if uuids[n] == entry.get("uuid") else None
            if block is not None and len(block["content"]) >= CUT_STORED_CHARS:
                fact = cut_fact(entry, payloads[n], dumps, block)
                if fact is not None:
                    found.append((skey, entry["uuid"], fact))
        if found:
            self._db.executemany(SQL_NOTE_STORED_CUT, found)

    def _stored_entries(self, skey: str, uuids: list[str]) -> dict[str, Any]:
        """uuid -> the entry stored under it (None for a row that does not parse), of ``uuids``."""
        found: dict[str, Any] = {}
        with self._lock:
            for start in range(0, len(uuids), 500):
                chunk = uuids[start:start + 500]
                sql = SQL_ENTRIES_BY_UUID.format(marks=",".join("?" * len(chunk)))
                for uid, payload in self._db.execute(sql, (skey, *chunk)):
                    try:
                        found[uid] = json.loads(payload)
                    except (ValueError, RecursionError):   # not UTF-8 (a damaged page), not JSON, too deep
                        found[uid] = None
        return found

    def load_sync(self, key: dict) -> list[dict] | None:
        """All entries under ``key`` in append order, or None when the key was never written."""
        skey = _key_string(key)
        with self._lock:
            if not self._db.execute(SQL_SESSION_KNOWN, (skey,)).fetchone():
                return None
            # a row that holds no object is skipped and counted (the stored row stays as it is: the rest
            # of the session still loads, and a retry would meet the same row again)
            bad = [0]
            try:
                rows = self._db.execute(SQL_LOAD_PAYLOADS, (skey,))
                with _gc_paused():
                    entries = list(parsed_objects((payload for (payload,) in rows), bad))
            except sqlite3.OperationalError as exc:   # a row whose text is not UTF-8 (a damaged page)
                if "decode" not in str(exc):
                    raise
                bad = [0]
                rows = self._db.execute(SQL_LOAD_BLOBS, (skey,))
                with _gc_paused():
                    entries = list(parsed_objects((utf8_or_none(blob) for (blob,) in rows), bad))
            self.skipped[skey] = bad[0]
            return entries

    def damaged_rows(self) -> tuple[int, dict[str, int]]:
        """Every stored row decoded as a load would: (rows read, {session id (``/subpath``): rows that
        hold no JSON object}), what ``doctor`` reports beside SQLite's own integrity check."""
        damaged: dict[str, int] = {}
        total = 0
        scan = json.decoder.JSONDecoder().scan_once
        with self._lock:
            for project, sid, subpath, blob in self._db.execute(SQL_ALL_BLOBS):
                total += 1
                bad = [0]
                parsed_alone(utf8_or_none(blob), scan, bad)
                if bad[0]:
                    name = sid + (f"/{subpath}" if subpath else "")
                    damaged[name] = damaged.get(name, 0) + 1
        return total, damaged

    def load_outline(self, key: dict) -> list[dict] | None:
        """:meth:`load_sync`, but the big tool results whose cut facts a trim-on load (or the append) noted
        come with "" as their text and without their side copy (toolUseResult), parsed from the fact's
        skeleton: their rows are not even fetched. What a handoff reads: its ledger, thread and slim
        transcript never look at a result's text (and a huge session that does not fit has just had its cut
        facts noted)."""
        skey = _key_string(key)
        scan = json.decoder.JSONDecoder().scan_once
        with self._lock:
            kept, self._outline = self._outline, None
            if kept is not None and kept[0] == skey and kept[1] == self._stamp():
                self.skipped[skey] = 0
                return kept[2]
            if not self._db.execute(SQL_SESSION_KNOWN, (skey,)).fetchone():
                return None
            bad = [0]
            try:
                rows = self._db.execute(SQL_LOAD_OUTLINE, (skey,))
                with _gc_paused():
                    entries = list(parsed_objects((payload if fact is None else self._read_cut(payload, payload, fact, "", scan)
                                                   for payload, fact in rows), bad))
            except (ValueError, sqlite3.OperationalError):   # a fact that does not tell its row: read them all
                return self.load_sync(key)
            self.skipped[skey] = bad[0]
            return entries

    def _keep_outline(self, skey: str, version: int, outline: list[dict] | None) -> None:
        """Keep the ``outline`` of ``skey`` that a deciding pass took (see :class:`OutlineTaker`) for the next
        :meth:`load_outline`, while no other connection has written since the pass began (``version``, its
        data_version) and this one writes nothing more (:meth:`_stamp`). One outline at most, given once;
        any other load lets it go. The caller holds the lock."""
        if outline is not None and self._db.execute(SQL_DATA_VERSION).fetchone()[0] == version:
            self._outline = (skey, self._stamp(), outline)

    def _stamp(self) -> tuple[int, int]:
        """What changes when any connection writes the store: data_version (the others') and this one's
        total_changes."""
        return self._db.execute(SQL_DATA_VERSION).fetchone()[0], self._db.total_changes

    @contextlib.contextmanager
    def small_held(self, key: dict) -> Iterator[bool]:
        """True, with the store's lock held until the block ends, when the session of ``key`` has at
        most ``quick_rows`` rows, no other thread holds the store and its triggers need no repair: a
        load the caller's thread (the event loop's) can run without waiting on another thread or on
        another process's write lock (but for noting cut facts, which waits 0.1 s at most). False,
        holding nothing, otherwise: a bigger load, or one that may wait, belongs in a worker thread."""
        small = False
        if self._lock.acquire(blocking=False):
            try:
                skey = _key_string(key)
                past, cookie, known, version, *marked = self._db.execute(
                    SQL_SMALL_HEAD_MARKED if self._marks else SQL_SMALL_HEAD, (skey, self.quick_rows)).fetchone()
                small = past is None and self._trusted_under(cookie)
                if small:
                    self._held_head = (skey, (known, version, cookie, *marked))
            except sqlite3.Error:
                pass
            finally:
                if not small:
                    self._lock.release()
        try:
            yield small
        finally:
            if small:
                self._held_head = None
                self._lock.release()

    def _load_head(self, skey: str) -> tuple:
        """SQL_LOAD_HEAD's answer for ``skey`` (the caller holds the lock): what :meth:`small_held` asked
        already while it holds the lock for that key, else asked now."""
        held = self._held_head
        if held is not None and held[0] == skey:
            self._held_head = None
            return held[1]
        return self._db.execute(SQL_LOAD_HEAD_MARKED if self._marks else SQL_LOAD_HEAD, (skey,)).fetchone()

    def load_pruned(self, key: dict, policy: PrunePolicy | None = None,
                    estimate: bool = False) -> tuple[list[dict], PruneReport] | None:
        """``_prune`` of the session with ``policy`` (None when the key was never written), fed a batch of
        rows at a time: each entry is indexed soon after it is parsed, while it is fresh in the CPU cache; the
        API-error rows are not even read, lone Bash calls come with their stored verdicts, and old
        big results whose spill files exist are read without their text (see :func:`plan_cuts`); a
        trim-on load notes the cut facts of the big results it read whole. A damaged row or fact: the
        plain load (which skips damaged rows), then the prune. ``estimate``: as for :func:`_prune`."""
        policy = policy or PrunePolicy()
        skey = _key_string(key)
        with self._lock:
            self._outline = None
            known, version, cookie, *marked = self._load_head(skey)
            if not known:
                return None
            marks: dict[int, str] = {}
            plan = None
            with _gc_paused():
                try:
                    self._ensure_trusted(cookie)   # another connection may have dropped a trigger since
                    digest = prune_mark(policy) if self._marks and not estimate else None
                    mark = marked[0] if marked and digest else None
                    if mark is not None and mark == digest:
                        done = self._marked_load(skey, mark)
                        if done is not None:
                            return done
                    outlining = self._outlining(skey, policy)
                    plan, left, rows = self._planned_rows(skey, policy, outlining)
                    found: list[tuple] = []
                    taker = OutlineTaker.of(plan) if outlining and plan is not None else None
                    fresh = self._fresh(taker.rows(rows) if taker else rows, marks, plan, found)
                    fresh = taker.taken(fresh) if taker else fresh
                    if mark is not None and left and mark == digest + LEFT_MARK and not (plan and plan.cuts):
                        done = self._left_load(list(fresh), left, version, lambda entries: _prune(
                            entries, policy, True, left, marks, plan))
                    else:
                        done = _prune(fresh, policy, True, left, marks, plan, estimate)
                except (ValueError, TypeError, IndexError, sqlite3.OperationalError):
                    if plan is not None and plan.cuts:   # e.g. a row another writer replaced under its fact
                        self._best_effort(lambda db: db.execute(SQL_FORGET_SESSION_CUTS, (skey,)))
                else:
                    mark = digest and not (plan and plan.cuts) and only_left(done[1], left) and \
                        digest + (LEFT_MARK if left else "")
                    if mark and marked and mark == marked[0]:   # marked so already
                        mark = None
                    wrote = (found or mark) and self._best_effort(lambda db: self._note_cuts(
                        db, skey, found, version, mark, len(done[0]) + len(left)))
                    if taker and (wrote or not found):
                        self._keep_outline(skey, version, taker.outline(plan.noted, found, done, policy))
                    return done
        entries = self.load_sync(key)
        return None if entries is None else _prune(entries, policy, True, estimate=estimate)

    def _outlining(self, skey: str, policy: PrunePolicy) -> bool:
        """Whether a pass with ``policy`` takes the outline (see :class:`OutlineTaker`): prepare's deciding
        pass, of a session whose last context (the catalog's) is unknown or over the budget (one under it
        most likely fits: it is spared what taking the outline costs). The caller holds the lock."""
        if not policy.deciding or policy.budget is None:
            return False
        row = self._db.execute(SQL_SESSION_CONTEXT, (skey,)).fetchone()
        return not (row and row[0] and row[0] <= policy.budget)

    def _planned_rows(self, skey: str, policy: PrunePolicy,
                      outlining: bool = False) -> tuple[LeavePlan | None, list, Any]:
        """The plan of what leaves unread and what is read cut (None: no plan), what leaves (``left`` of
        :func:`_prune`) and the rows to read (with ``outlining``, a trim-on plan's rows are those of
        :data:`SQL_OUTLINING`: see :class:`OutlineTaker`)."""
        if not policy.drop_api_errors:
            return None, [], self._db.execute(SQL_LOAD_KEEPING_ERRORS, (skey,))
        leavers, errors, cuts = [], [], []
        trimming = policy.trim and self._json
        for cut, seq, uid, facts in self._db.execute(SQL_PLAN_ROWS if trimming else SQL_LEFT_ROWS, (skey,)):
            if cut:
                cuts.append((seq, uid, facts))
            elif facts[1] == "e":
                errors.append(left_row(uid, facts))
            else:
                leavers.append(fact_leaver(uid, facts))
        plan = plan_leavers(leavers, policy) if leavers else None
        left = plan.left + errors if plan else errors
        if not trimming:
            return plan, left, self._db.execute(SQL_LOAD_WITH_FACTS, (skey,))
        plan = plan or LeavePlan()
        plan.noted = {seq: (uid, fact) for seq, uid, fact in cuts}
        if cuts:
            if policy.cut_unwritten and not outlining:   # most likely fits (see _outlining): read whole where
                policy = dataclasses.replace(policy, cut_unwritten=False)   # a file is missing, written once
            plan_cuts(plan, cuts, policy, functools.partial(present_names, policy.spill_dir or ".flower/spill"))
        variant = SQL_OUTLINING if outlining else {}
        if not plan.cuts:
            return plan, left, self._db.execute(variant.get(SQL_LOAD_UNCUT, SQL_LOAD_UNCUT), (skey,))
        return plan, left, self._db.execute(variant.get(SQL_LOAD_TRIMMING, SQL_LOAD_TRIMMING),
                                            (skey, _json_text(list(plan.cuts))))

    @staticmethod
    def _fresh(rows: Iterable[tuple], marks: dict, plan: LeavePlan | None, found: list) -> Iterator[dict]:
        """The entries of rows of SQL_LOAD_WITH_FACTS, SQL_LOAD_UNCUT or SQL_LOAD_TRIMMING, in order, parsed
        a batch at a time (:func:`parsed_objects`; a batch fresh in the CPU cache while prune indexes it), but for the
        rows ``plan`` leaves unread, and those it reads cut (from their facts' skeletons); Bash verdicts
        go to ``marks`` (see :func:`_prune`), and (seq, uuid, fact) of the big results read whole
        without a noted cut fact to ``found``, when the plan notes them. Raises ValueError at a row
        that holds no JSON object, and PlanBroken when not every row the plan leaves out or cuts came
        as the plan knew it (changed, deleted)."""
        version, scan = FACTS_VERSION, json.decoder.JSONDecoder().scan_once
        skip = plan.skip if plan else None
        cuts = plan.cuts if plan else None
        noted = plan.noted if plan else None
        unread = cut = 0
        notes: list = []   # (position, seq, payload) of the big results to note (None once noted)

        def texts() -> Iterator[Any]:
            nonlocal unread, cut
            n = 0
            for payload, facts, uid, seq in rows:
                if facts is not None and facts[:1] == version:
                    if skip and uid in skip:
                        unread += 1
                        continue
                    if facts[1] == "b":
                        marks[n] = facts[2]
                if seq is not None and cuts and seq in cuts:   # the payload column holds the row's uuid
                    payload = SqliteSessionStore._read_cut(payload, *cuts[seq], scan)   # an entry: passed on
                    cut += 1
                elif seq is not None and noted is not None and len(payload) > CUT_MIN_CHARS and seq not in noted:
                    notes.append((n, seq, payload))
                n += 1
                yield payload
        first = noting = 0   # the position of a batch's first entry; the next of ``notes``
        for batch in parsed_batches(texts(), scan=scan):
            while noting < len(notes) and notes[noting][0] < first + len(batch):   # before prune changes it
                at, seq, payload = notes[noting]
                notes[noting] = None   # its payload is kept no longer than its batch
                noting += 1
                entry = batch[at - first]
                fact = cut_fact(entry, payload, _compact_json())
                if fact is not None:
                    found.append((seq, entry["uuid"], fact))
            first += len(batch)
            yield from batch
        # A changed row of the plan lost its facts (the trigger: a call, whose facts the plan took from its
        # result's), so it came without its uuid and was read, while the plan counts it gone
        if skip and unread != len(skip):
            raise PlanBroken("a row the plan leaves unread changed")
        if cuts and cut != len(cuts):
            raise PlanBroken("a row the plan reads cut changed")

    @staticmethod
    def _read_cut(row_uuid: Any, uid: str, fact: str, marker: str, scan: Callable) -> dict:
        """The entry of a row read cut (see :func:`plan_cuts`), its result being ``marker`` and without
        toolUseResult, as :func:`_trim` leaves it: the skeleton of its fact parsed by ``scan`` (a JSON
        scanner's ``scan_once``, as in :meth:`_fresh`). PlanBroken when the row (whose uuid column is
        ``row_uuid``) is not the one the fact was noted of, or the skeleton not what a fact holds."""
        text = fact.partition("|")[2]
        if row_uuid != uid:   # another entry put in its place under its seq
            raise PlanBroken("a row read cut is not the row its fact tells")
        try:
            entry, end = scan(text, 0)
        except StopIteration:
            raise PlanBroken("a row read cut is not JSON") from None
        if end != len(text):
            entry = json.loads(text)
        message = entry.get("message") if entry.__class__ is dict and entry.get("uuid") == uid else None
        content = message.get("content") if message.__class__ is dict else None
        block = content[0] if content.__class__ is list and len(content) == 1 else None
        if block.__class__ is not dict or block.get("content") != "" or block.get("type") != "tool_result" or \
                entry.pop("toolUseResult", None) is not None:
            raise PlanBroken("a row read cut is not what its fact told")
        block["content"] = marker
        return entry

    @staticmethod
    def _note_cuts(db: sqlite3.Connection, skey: str, found: list[tuple], version: int, mark: str | None = None,
                   rows: int = 0) -> None:
        """Keep the cut facts a load ``found`` (see :meth:`_fresh`), and the session's ``mark`` (see
        MARK_TRIGGERS) when it holds the ``rows`` the load returned, unless another connection wrote since
        the load began (``version``: its data_version), which may have changed those rows."""
        if db.execute(SQL_DATA_VERSION).fetchone()[0] == version:
            db.executemany(SQL_NOTE_CUT, [(skey, seq, uid, fact) for seq, uid, fact in found])
            if mark:
                db.execute(SQL_MARK, (skey, mark, rows))

    def _marked_load(self, skey: str, marked: str) -> tuple[list[dict], PruneReport] | None:
        """The session of ``skey`` as a prune with the policy of its mark (``marked``) leaves it, where the
        mark says that is every row as it is: its payloads, parsed. None where the mark no longer holds,
        or a row does not parse (the caller prunes; with the GC paused)."""
        try:
            entries = list(parsed_objects(p for (p,) in self._db.execute(SQL_LOAD_MARKED, (skey, marked))))
        except (ValueError, sqlite3.OperationalError):   # a row that is not UTF-8 or not JSON: the slow way
            return None
        return (entries, PruneReport()) if entries else None

    def _left_load(self, entries: list[dict], left: list[tuple], version: int,
                   prune: Callable[[list[dict]], tuple[list[dict], PruneReport]]) -> tuple[list[dict], PruneReport]:
        """The ``entries`` read of a session whose mark says a prune changes only what ``left`` tells
        (see :func:`left_only`), as that prune leaves them: while the rows are those the head of the
        load saw (no other connection wrote since: ``version``, its data_version), else by ``prune``."""
        if self._db.execute(SQL_DATA_VERSION).fetchone()[0] == version:
            return left_only(entries, left)
        return prune(entries)

    def _best_effort(self, write: Callable[[sqlite3.Connection], Any]) -> bool:
        """``write(db)`` in a transaction of its own, for what a load keeps of what it learned (cut facts
        found, or forgotten when they misled it): a store busy for more than a moment, or read-only, is
        left as it is (a later load tries again). False when nothing was written."""
        db = self._db
        wait = db.execute("PRAGMA busy_timeout").fetchone()[0]
        db.execute("PRAGMA busy_timeout=100")
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return False
        finally:
            db.execute(f"PRAGMA busy_timeout={int(wait)}")
        try:
            write(db)
            db.execute("COMMIT")
            return True
        except BaseException as exc:   # never a transaction left open, whatever stopped it
            _rollback(db)
            if not isinstance(exc, sqlite3.OperationalError):
                raise
            return False

    # -- the SDK SessionStore protocol --

    async def append(self, key: dict, entries: list[dict]) -> None:
        """Mirror a batch of transcript entries (SDK protocol)."""
        import asyncio
        await asyncio.to_thread(self.append_sync, key, entries)

    async def load(self, key: dict) -> list[dict] | None:
        """Load a whole session for resume (SDK protocol)."""
        import asyncio
        return await asyncio.to_thread(self.load_sync, key)

    async def list_sessions(self, project_key: str) -> list[dict]:
        """Main sessions of a project with their mtimes in epoch ms (SDK protocol)."""
        with self._lock:
            rows = self._db.execute("SELECT session_id, mtime FROM sessions WHERE project_key=? AND "
                                    "subpath IS NULL", (project_key,)).fetchall()
        return [{"session_id": sid, "mtime": mtime} for sid, mtime in rows]

    async def list_session_summaries(self, project_key: str) -> list[dict]:
        """The folded summaries of a project's sessions (SDK protocol)."""
        with self._lock:
            rows = self._db.execute("SELECT data FROM summaries WHERE project_key=?", (project_key,)).fetchall()
        out = []
        for (data,) in rows:   # a damaged summary is left out, never a reason to fail the listing
            with contextlib.suppress(ValueError, TypeError):
                out.append(json.loads(data))
        return out

    async def delete(self, key: dict) -> None:
        """Delete a session; a main key takes its subpaths with it (SDK protocol)."""
        skey = _key_string(key)
        with self._lock:
            self._begin_immediate()
            try:
                if key.get("subpath"):
                    targets = [skey]
                else:
                    targets = [skey] + [r[0] for r in self._db.execute(
                        "SELECT skey FROM sessions WHERE project_key=? AND session_id=? AND subpath IS NOT NULL",
                        (key["project_key"], key["session_id"]))]
                    self._db.execute("DELETE FROM summaries WHERE project_key=? AND session_id=?",
                                     (key["project_key"], key["session_id"]))
                for target in targets:
                    self._db.execute("DELETE FROM entries WHERE skey=?", (target,))
                    self._db.execute("DELETE FROM sessions WHERE skey=?", (target,))
                self._db.execute("COMMIT")
            except BaseException:
                _rollback(self._db)
                raise

    async def list_subkeys(self, key: dict) -> list[str]:
        """Subpaths stored under a session, e.g. ``subagents/agent-x`` (SDK protocol)."""
        with self._lock:
            rows = self._db.execute("SELECT subpath FROM sessions WHERE project_key=? AND session_id=? AND "
                                    "subpath IS NOT NULL", (key["project_key"], key["session_id"])).fetchall()
        return [r[0] for r in rows]

    # -- sync extras --

    def known_uuids(self, key: dict) -> set:
        """The uuids stored under ``key`` (no payload is parsed)."""
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT uuid FROM entries WHERE skey=? AND uuid IS NOT NULL",
                                                   (_key_string(key),))}

    def has_session(self, project_key: str, session_id: str) -> bool:
        """True when the main transcript of this session holds at least one entry."""
        with self._lock:
            row = self._db.execute("SELECT 1 FROM entries WHERE skey=? LIMIT 1",
                                   (f"{project_key}/{session_id}",)).fetchone()
        return row is not None

    def last_context(self, project_key: str, session_id: str) -> int | None:
        """Context tokens of the session's last real main-thread assistant entry (None if unknown)."""
        with self._lock:
            row = self._db.execute(SQL_SESSION_CONTEXT, (f"{project_key}/{session_id}",)).fetchone()
        return row[0] if row and row[0] else None

    def sessions(self, project_key: str | None = None) -> list[dict]:
        """Main sessions (newest first): project_key, session_id, mtime, entries, context."""
        query = ("SELECT s.project_key, s.session_id, s.mtime, s.context, "
                 "(SELECT COUNT(*) FROM entries e WHERE e.skey = s.skey) FROM sessions s WHERE s.subpath IS NULL")
        args: tuple = ()
        if project_key:
            query += " AND s.project_key=?"
            args = (project_key,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY s.mtime DESC", args).fetchall()
        return [{"project_key": p, "session_id": s, "mtime": m, "context": c, "entries": n}
                for p, s, m, c, n in rows]

    def integrity(self) -> str:
        """``PRAGMA integrity_check`` ("ok" when healthy)."""
        with self._lock:
            return "; ".join(r[0] for r in self._db.execute("PRAGMA integrity_check").fetchall())

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._outline = None
            with contextlib.suppress(Exception):
                self._db.close()


class PruningSessionStore:
    """Wraps any SessionStore and changes only what ``load()`` returns (what a resumed model is
    sent), through :func:`prune`. Stored rows are never modified; ``last_report`` tells what the
    last load changed. The SDK's store: what it may do with ``inner`` (taken in under the contract,
    see :func:`contract_store`) the inner store's declared capabilities say."""

    def __init__(self, inner: Any, *, policy: PrunePolicy | None = None):
        self.inner = contract_store(inner)
        self.policy = policy or PrunePolicy()
        self.last_report: PruneReport | None = None
        self._prepared: dict[str, list[dict]] = {}
        self.on_append: Callable[[dict, list[dict]], None] | None = None   # told of every stored batch

    async def append(self, key: dict, entries: list[dict]) -> None:
        """Delegate to the inner store; once it took them, tell ``on_append``."""
        await self.inner.append(key, entries)
        if self.on_append is not None:
            with contextlib.suppress(Exception):
                self.on_append(key, entries)

    async def load(self, key: dict) -> list[dict] | None:
        """The inner store's entries, pruned (or what :meth:`prepare` made to fit, once); trimmed
        results are written to spill files first."""
        prepared = self._prepared.pop(_key_string(key), None)
        if prepared is not None:
            return prepared
        done = await self._with_pruner(key, lambda pruned, keep: keep(pruned(self.policy)))
        return None if done is None else done[0]

    async def _with_pruner(self, key: dict, body: Callable[[Callable[..., tuple[list[dict], PruneReport] | None],
                                                            Callable[[Any], Any]], Any]) -> Any:
        """``body(pruned, keep)``, where ``pruned(policy, estimate=False)`` is the session of ``key`` pruned
        with ``policy`` and its report (None when the store has no such key; with ``estimate``, the report
        tells its size, as :func:`_prune` does) and ``keep(done)`` has the spill files of such a result
        written (see :meth:`_kept`; a result not kept writes none), loading and pruning under one GC pause: in the store's
        worker thread when the store loads in one (the SQLite and PostgreSQL stores), so that the
        cyclic GC neither walks the growing heap nor runs a deferred collection between the load and
        the prune; in the caller's thread for a session the store says is small (``small_held``), whose
        spill files are then written in a worker thread, after the store is let go."""
        if self.inner.threaded_load:
            import asyncio

            def work(spills: dict | None = None) -> Any:
                with _gc_paused():
                    return body(lambda policy, estimate=False: self.inner.load_pruned(key, policy, estimate),
                                lambda done: self._kept(done, spills))
            spills: dict[str, str] = {}
            with self.inner.small_held(key) as small:
                if small:
                    done = work(spills)
            if small:   # the files are the disk's business: not on the loop, not under the store's lock
                if spills and not write_spills_later(spills):
                    await asyncio.to_thread(write_spills, spills)
                return done
            return await asyncio.to_thread(work)
        entries = await self.inner.load(key)

        def pruned(policy: PrunePolicy, estimate: bool = False) -> tuple[list[dict], PruneReport] | None:
            if entries is None:
                return None
            with _gc_paused():   # another store's list: it may keep it (never emptied here)
                return _prune(entries, policy, estimate=estimate)
        return body(pruned, self._kept)

    def _kept(self, done: tuple[list[dict], PruneReport] | None,
              spills: dict[str, str] | None = None) -> tuple[list[dict], PruneReport] | None:
        """The pruned entries and their report, once the spill files their trimmed results want are
        written (or added to ``spills``, for the caller to write before it returns them)."""
        if done is None:
            return None
        report = done[1]
        if spills is None:
            if not write_spills_later(report.spills):
                write_spills(report.spills)
        else:
            spills.update(report.spills)
        report.spills = {}   # written or handed on: no texts kept (a 2,000 x 100 KB session held 150 MB here)
        self.last_report = report
        return done

    async def prepare(self, key: dict, max_tokens: int) -> bool:
        """Make the next ``load(key)`` fit under ``max_tokens`` (estimated): when the pruned session is
        bigger, trim harder (every older big result, then every older glance). True when it fits;
        False means a resume would send an overflowing request (the caller hands off instead: no spill
        file is written and nothing is kept for the next load, which prunes afresh).

        One load and one prune decide: the prune tells the size its last steps would leave before it
        takes them, and takes the harder ones instead when that is too big (see ``PrunePolicy.budget``).
        Old big results with a cut fact are read cut even where their spill file is not written, in a
        session whose last context (the catalog's) is unknown or over ``max_tokens`` (one that does not
        fit writes none, and a wake reads no big result of it that it cut: the store notes the facts of
        the biggest as it appends them); only such a session that fits after all is loaded again,
        whole, to write those files. Only where its scan cannot tell the size (uuids or tool ids
        twice) is the result walked, and the session loaded again to be trimmed harder."""
        harder = self.harder_policy()
        policy = dataclasses.replace(self.policy, budget=max_tokens, fallback=harder, cut_unwritten=True, deciding=True)

        def fit(pruned: Callable[..., tuple[list[dict], PruneReport] | None],
                keep: Callable[[Any], Any]) -> tuple[list[dict], bool] | None:
            done = pruned(policy, True)
            if done is None:
                return None
            if done[1].tokens is None and estimate_tokens(done[0]) > max_tokens:
                done = pruned(harder, True) or done
            if _size(done) > max_tokens:
                done[1].spills = {}
                self.last_report = done[1]
                return [], False
            if done[1].unspilled:   # it fits: the results read cut unwritten are read whole, for their files
                done = pruned(dataclasses.replace(policy, cut_unwritten=False), True) or done
            return keep(done)[0], True
        done = await self._with_pruner(key, fit)
        if done is None:
            return True
        if done[1]:
            self._prepared[_key_string(key)] = done[0]
        return done[1]

    def harder_policy(self) -> PrunePolicy:
        """How :meth:`prepare` trims a session that does not fit: every older big result (of 1,000 chars
        or more; all but the newest), every older glance, and never less than this store's policy trims."""
        return dataclasses.replace(self.policy, trim=True, trim_keep=min(1, self.policy.trim_keep),
                                   trim_min_chars=min(1000, self.policy.trim_min_chars), keep_glances=0,
                                   spill_dir=self.policy.spill_dir or ".flower/spill", budget=None, fallback=None)

    async def load_raw(self, key: dict) -> list[dict] | None:
        """The entries exactly as stored."""
        return await self.inner.load(key)

    async def load_outline(self, key: dict) -> list[dict] | None:
        """The entries as stored, where the inner store can leave out the text of big tool results
        (``outline_load``: "" in its place, no side copy), else exactly as stored: for a handoff."""
        if self.inner.outline_load:
            import asyncio
            return await asyncio.to_thread(self.inner.load_outline, key)
        return await self.inner.load(key)

    async def list_sessions(self, project_key: str) -> list[dict]:
        """Delegate to the inner store."""
        return await self.inner.list_sessions(project_key)

    async def list_session_summaries(self, project_key: str) -> list[dict]:
        """Delegate to the inner store."""
        return await self.inner.list_session_summaries(project_key)

    async def delete(self, key: dict) -> None:
        """Delegate to the inner store (a no-op when it cannot delete)."""
        if "delete" in self.inner.sdk_optional:
            with contextlib.suppress(NotImplementedError):
                await self.inner.delete(key)

    async def list_subkeys(self, key: dict) -> list[str]:
        """Delegate to the inner store ([] when it cannot list)."""
        if "list_subkeys" not in self.inner.sdk_optional:
            return []
        try:
            return await self.inner.list_subkeys(key)
        except NotImplementedError:
            return []

    def has_session(self, project_key: str, session_id: str) -> bool:
        """Whether the session exists (the inner store's answer: from its index, or a load)."""
        return self.inner.has_session(project_key, session_id)

    def last_context(self, project_key: str, session_id: str) -> int | None:
        """Last context level of a session (the inner store's answer: from its index, or a load)."""
        return self.inner.last_context(project_key, session_id)

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()


def write_spills(spills: dict[str, str]) -> None:
    """Write each trimmed result once (redacted), never again on later loads. No fsync: a spill file
    can always be rebuilt from the store, so it is not worth a disk flush per file on the resume path."""
    made: set = set()
    present: dict[str, Collection[str] | None] = {}
    wanted: dict[str, list[str]] = {}
    places = [(path, full, *_spill_place(path)) for path, full in spills.items()]
    for _, _, directory, name in places:
        wanted.setdefault(directory, []).append(name)
    secrets = _env_secrets()   # once, not per file: reading os.environ is most of a small file's redact
    for group in _same_texts(places):
        clean = twin = None
        for path, full, directory, name in group:
            if directory not in present:
                present[directory] = present_names(directory, wanted.get(directory, ()))
            names = present[directory]
            if (name in names) if names is not None else os.path.exists(path):
                continue
            if directory not in made:
                ensure_private_dir(directory)
                made.add(directory)
            if clean is None:
                clean = redact(full, secrets)
            _write_spill_file(path, clean, twin)
            twin = twin or path


def _write_spill_file(path: str, clean: str, twin: str | None = None) -> None:
    """One spill file: a hard link to ``twin``, a spill file of the same text written just before (a tool
    result and its toolUseResult copy: the bytes are not written twice, and a link costs far less than a
    file), else, or where the file system cannot link, written to a temp file of its own (0600), then
    renamed into place."""
    if twin is not None:
        try:
            os.link(twin, path)
            return
        except OSError:
            pass
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"   # two loads of a session may write at once
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as fh:
        fh.write(clean)
    os.replace(tmp, path)


SPILL_LOAD_DEFER_AT = 1 << 20   # from this many chars in all, a load's spill files are written in a thread
SPILL_LOAD_WAIT = 0.05   # the load's caller goes first: a redaction holds the interpreter lock in long stretches
_SPILL_WRITERS: dict[str, Any] = {}   # path -> the thread writing it, while it runs (see wait_spills)


def write_spills_later(spills: dict[str, str]) -> bool:
    """Start :func:`write_spills` in a thread of its own when the texts are long (SPILL_LOAD_DEFER_AT
    chars in all: redacting 30 MB takes a second, which the load that found them need not wait for; a
    pointer names only its file); False, doing nothing, for shorter ones. Until a file is written, its
    path is among ``_SPILL_WRITERS``: a Runtime's session waits for them before its first query, or, if
    it delegates, before each tool call (:func:`spill_waits`); ``wait_spills()`` waits for them. A file
    not written (a failed write, the process killed) is not there, and the next load writes it."""
    if sum(map(len, spills.values())) < SPILL_LOAD_DEFER_AT:
        return False
    spill_writer("flower-load-spill", list(spills), SPILL_LOAD_WAIT, lambda: write_spills(spills))
    return True


def spill_writer(name: str, paths: list[str], pause: float, write: Callable[[], None]) -> None:
    """Run ``write`` in a thread of its own once its caller has gone first for ``pause`` seconds (a
    redaction holds the interpreter lock in long stretches), cut short by :func:`wait_spills`; ``paths``
    are in ``_SPILL_WRITERS`` until it ends. A write that fails (OSError) leaves its file absent: a Read
    of its pointer says so, and the next load writes it."""
    def run() -> None:
        try:
            hurry.wait(pause)
            write()
        except OSError:
            pass
        finally:
            for path in paths:
                if _SPILL_WRITERS.get(path) is writer:
                    del _SPILL_WRITERS[path]
    writer = threading.Thread(target=run, name=name, daemon=False)
    writer.hurry = hurry = threading.Event()   # see wait_spills
    for path in paths:
        _SPILL_WRITERS[path] = writer
    writer.start()


def _same_texts(places: list[tuple[str, str, str, str]]) -> list[list[tuple[str, str, str, str]]]:
    """``places`` (path, text, folder, name) in groups of equal texts, in their order: a tool result
    and its ``toolUseResult`` copy hold the same text, which is then redacted once, not twice (and each
    redacted text is let go once its group is written)."""
    groups: dict[tuple, list[list[tuple[str, str, str, str]]]] = {}
    out = []
    for place in places:
        full = place[1]
        similar = groups.setdefault((len(full), full[:64], full[-64:]), [])
        for group in similar:
            if group[0][1] == full:
                group.append(place)
                break
        else:
            similar.append([place])
            out.append(similar[-1])
    return out


def _spill_place(path: str) -> tuple[str, str]:
    """(folder, name) of a spill file's path."""
    if os.altsep and os.altsep in path:
        directory, name = os.path.split(path)
    else:   # os.path.split costs half of a load that finds every file present
        directory, sep, name = path.rpartition(os.sep)
        directory = directory or sep
    return directory or ".", name


# What a spill folder holds, listed once per process and kept while the folder's stamp (device, inode,
# mtime, ctime) stays the same: any file made, removed or renamed in it changes its mtime and ctime. Every
# load of a session with subagents looks up its own spill names: listing the whole shared folder each
# time made the loads grow with sessions x files. A listing is kept only when the folder was last changed
# SPILL_SETTLED seconds or more before it began: a change in the same tick of a coarse file clock would
# leave the stamp as it was. Until then (and after this process writes files, which change the stamp too:
# another process may have removed one meanwhile) a lookup lists again, or stats just the names it is
# asked about when that is cheaper. Only presence is ever taken from a kept listing, and only while the
# stamp holds; a name it does not hold is looked for again.
SPILL_SETTLED = 2.0
_SPILL_LISTINGS: dict[str, tuple[tuple, frozenset]] = {}   # folder -> (its stamp when listed, the names)


def _folder_stamp(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def present_names(directory: str, wanted: Collection[str]) -> Collection[str] | None:
    """Names in ``directory`` for which ``os.path.exists`` holds: all of them, or at least those of
    ``wanted`` that do (a resume meets thousands of spill files); empty when the folder does not exist,
    None when it cannot be listed. From the folder's kept listing while its stamp holds (see
    SPILL_SETTLED), else from one listing, or a stat of each wanted name where the folder is known to
    hold many more names than that."""
    folder = os.path.abspath(directory)
    try:
        stamp = _folder_stamp(os.stat(folder))
    except FileNotFoundError:
        return set()
    except OSError:
        return None
    kept = _SPILL_LISTINGS.get(folder)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    if not wanted:
        return set()
    if kept is not None and 4 * len(wanted) < len(kept[1]):   # a stat costs about 4 names listed
        return {name for name in wanted if os.path.exists(os.path.join(folder, name))}
    began = time.time()
    names, plain = _existing_names(folder)
    if names is None:
        return None
    try:
        after = os.stat(folder)
    except OSError:
        return names
    if plain and _folder_stamp(after) == stamp and after.st_mtime <= began - SPILL_SETTLED:
        _SPILL_LISTINGS[folder] = (stamp, frozenset(names))
    else:   # not to be kept, but its size tells what the next lookup should do
        _SPILL_LISTINGS[folder] = ((), frozenset(names))
    return names


def _existing_names(directory: str) -> tuple[set | None, bool]:
    """The names in ``directory`` for which ``os.path.exists`` holds, in one listing instead of a stat
    per file (empty when it does not exist, None when it cannot be listed), and whether none of them is a
    symbolic link (whose target may go without the folder's stamp changing)."""
    plain = True
    try:
        with os.scandir(directory) as listing:
            names = set()
            for e in listing:
                if e.is_symlink():
                    plain = False
                    if not os.path.exists(e.path):
                        continue
                names.add(e.name)
            return names, plain
    except FileNotFoundError:
        return set(), True
    except OSError:
        return None, False


def _run_sync(awaitable: Any) -> Any:
    """Run a coroutine to completion from sync code, even when a loop is running in this thread."""
    import asyncio
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)
    result: dict = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(awaitable)
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc

    worker = threading.Thread(target=target)
    worker.start()
    worker.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


def cli_transcripts(project_key_: str, session_id: str, env: dict[str, str] | None = None) -> list[str]:
    """The CLI's own transcript files of a session, oldest first: the one in its config dir and those
    in ``claude-resume-*`` temp dirs that a killed run left behind (the SDK materialises a resumed
    session there and the CLI goes on writing into it), in a flower's own temp dir or, from older
    flowers, straight in the system's."""
    import glob
    import tempfile
    env = os.environ if env is None else env
    config = env.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    name = f"{session_id}.jsonl"
    found = [os.path.join(config, "projects", project_key_, name)]
    for owner in ("", "flower-*"):
        found += glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), owner, "claude-resume-*", "projects",
                                        glob.escape(project_key_), glob.escape(name)))
    existing = [p for p in found if os.path.isfile(p)]
    return sorted(existing, key=lambda p: os.stat(p).st_mtime_ns)


_OWN_TEMP: list[str] = []   # this process's temp dir, made on first use
_TEMP_OWNER = _lazy_re(r"flower-(\d+)-[^/]*")


def own_tempdir() -> str:
    """This process's own directory (0700) in the system's temp dir, where the SDK puts the copy of a
    session it resumes (the transcript the CLI goes on writing, and a copy of the credentials): the
    copy is then known by its owner, and no other flower removes it while that owner lives."""
    import glob
    import tempfile
    base = tempfile.gettempdir()
    if not _OWN_TEMP or os.path.dirname(_OWN_TEMP[0]) != base or not os.path.isdir(_OWN_TEMP[0]):
        for old in glob.glob(os.path.join(glob.escape(base), "flower-*")):   # killed flowers' dirs, once empty
            owner = _TEMP_OWNER.fullmatch(os.path.basename(old))
            if owner and not _pid_alive(int(owner.group(1))):
                with contextlib.suppress(OSError):
                    os.rmdir(old)   # a copy still in one is a later salvage's to take
        _OWN_TEMP[:] = [tempfile.mkdtemp(prefix=f"flower-{os.getpid()}-", dir=base)]
    return _OWN_TEMP[0]


@contextlib.contextmanager
def resume_copies_in(directory: str) -> Iterator[None]:
    """Make the SDK's ``tempfile.mkdtemp()`` (its copy of a resumed session) land in ``directory``."""
    import tempfile
    saved = tempfile.tempdir
    tempfile.tempdir = directory
    try:
        yield
    finally:
        tempfile.tempdir = saved


def copy_owner_alive(copy_dir: str) -> bool:
    """Whether a resume copy (``.../flower-<pid>-*/claude-resume-*``) belongs to another live process:
    then it is that process's to use and remove, never another flower's. A copy straight in the
    system's temp dir (an older flower's) has no known owner."""
    match = _TEMP_OWNER.fullmatch(os.path.basename(os.path.dirname(copy_dir)))
    return match is not None and int(match.group(1)) != os.getpid() and _pid_alive(int(match.group(1)))


CLI_MIN_FREE = 8 << 20   # bytes a directory the CLI writes must have free before a run starts
CLI_LINE_ROOM = 1 << 20  # bytes free below which the CLI is taken as unable to write its transcript
CLI_WRITE_GRACE = 2.0    # seconds a CLI with room has to write what it streamed (it drains every 0.1 s)


def cli_config_dir(env: dict[str, str] | None = None) -> str:
    """Where the CLI writes its own transcripts (``CLAUDE_CONFIG_DIR``, else ``~/.claude``)."""
    env = os.environ if env is None else env
    return env.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")


def dir_problem(path: str, min_free: int = CLI_MIN_FREE, lang: str = "en") -> str | None:
    """Why ``path`` (or, while it does not exist, the directory it would be made in) cannot take what
    the CLI writes: less than ``min_free`` bytes free, or a small write fails. None when it can."""
    import shutil
    import tempfile
    where = os.path.abspath(path)
    while not os.path.isdir(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    try:
        free = shutil.disk_usage(where).free
        if free < min_free:
            return text("setup_low_space", lang, kb=free // 1024)
        fd, probe = tempfile.mkstemp(prefix=".flower-probe-", dir=where)
    except OSError as exc:
        return in_lang(os_reason(exc), lang)
    try:
        os.write(fd, b"\0" * 4096)
    except OSError as exc:
        return in_lang(os_reason(exc), lang)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return None


def cli_dirs_problem(lang: str = "en") -> str | None:
    """The one line that stops a run before its first request when the CLI could not keep what it is
    paid for: its config dir (its transcripts, which the store mirrors) or the temp dir (the copy of
    a resumed session) full or not writable. None when both can take it."""
    import tempfile
    for path, what, var in ((cli_config_dir(), "setup_what_transcripts", "CLAUDE_CONFIG_DIR"),
                            (tempfile.gettempdir(), "setup_what_copies", "TMPDIR")):
        why = dir_problem(path, lang=lang)
        if why is not None:
            return text("setup_dir_unusable", lang, path=path, what=text(what, lang), why=why, var=var)
    return None


_UUID_KEY = _lazy_re(r'"uuid":\s*"([^"]+)"')


def keep_transcripts(paths: Iterable[str]) -> None:
    """Keep the transcripts among ``paths`` that lie in a resume's temp copy (the SDK deletes it on
    disconnect) in a ``claude-resume-kept-*`` dir beside it, where :func:`cli_transcripts` finds them
    (a hard link: no room needed on a full disk; a copy elsewhere). Only the transcript, not the
    credentials the copy also holds. Best effort."""
    import shutil
    for path in paths:
        head, _, tail = path.partition(os.sep + "projects" + os.sep)
        if not tail or not os.path.basename(head).startswith("claude-resume-") or \
                os.path.basename(head).startswith("claude-resume-kept-"):
            continue
        kept = os.path.join(os.path.dirname(head), f"claude-resume-kept-{uuid.uuid4().hex[:12]}", "projects", tail)
        with contextlib.suppress(OSError, FlowerError):
            ensure_private_dir(os.path.dirname(kept))
            try:
                os.link(path, kept)
            except OSError:
                shutil.copyfile(path, kept)


def missing_entries(lines: Iterable[str], known: set) -> list[dict]:
    """What a CLI transcript holds beyond the store, in its order (see :func:`missing_runs`)."""
    return [entry for run, _ in missing_runs(lines, known) for entry in run]


def missing_runs(lines: Iterable[str], known: set) -> list[tuple[list[dict], str | None]]:
    """The entries of a CLI transcript that the store lacks, as runs of consecutive ones, each with
    the uuid of the stored entry that follows it in the transcript (None after the last one): a write
    that failed leaves a hole in the middle of a session, a kill its end. Bookkeeping entries without
    a uuid and flower's own healed stand-ins (a resume's materialised copy holds those) are not
    entries to recover; a line whose uuid the store knows is not parsed. Lines that do not parse are
    skipped."""
    runs: list[tuple[list[dict], str | None]] = []
    run: list[dict] = []
    for line in lines:
        ids = _UUID_KEY.findall(line)
        uid = ids[-1] if ids and ids[-1] in known else None
        if uid is None:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("uuid"), str) or entry.get("flowerHealed"):
                continue
            if entry["uuid"] not in known:
                run.append(entry)
                continue
            uid = entry["uuid"]
        if run:
            runs.append((run, uid))
            run = []
    if run:
        runs.append((run, None))
    return runs


def chained(run: list[dict], known: set) -> list[dict]:
    """The entries of a recovered ``run`` whose parent is in ``known`` (stored, or a stand-in the
    prune makes again), recovered before them, or none: an entry whose parent the CLI never wrote
    (its disk was full) would leave the session's newest leaf on a broken chain, and the CLI then
    resumes from an older leaf, dropping every turn after it."""
    have, out = set(known), []
    for entry in run:
        parent = entry.get("parentUuid")
        if parent is None or parent in have:
            out.append(entry)
            have.add(entry["uuid"])
    return out


def load_store_factory(spec: str) -> Any:
    """Build a user's SessionStore from ``module:factory`` (e.g. ``mystores:make_pg``). The factory
    is called with no arguments. Errors become one-line FlowerErrors (exit 3)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise FlowerError(said("er_store_spec", spec=repr(spec)), EXIT_USAGE)
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attr)
        store = factory()
    except ModuleNotFoundError as exc:
        raise FlowerError(said("er_store_no_module", spec=spec, module=exc.name), EXIT_SETUP) from None
    except Exception as exc:
        raise FlowerError(said("er_store_factory", spec=spec, kind=type(exc).__name__, error=exc), EXIT_SETUP) from None
    if len(_methods_of(store, SDK_REQUIRED)) < len(SDK_REQUIRED):
        raise FlowerError(said("er_store_not_a_store", spec=spec), EXIT_SETUP)
    return contract_store(store)


# --- Lineage and manifest: which step used which session; a row for every step ---

class Paths:
    """Where flower keeps things, for one workspace and run_dir (SPEC §2, §13): by default every
    piece of state lives in ``<workspace>/.flower``; ``run_dir`` (``-r``) moves the run files
    (sessions.db, lineage, manifest, window book, transcripts) elsewhere. (A plain class, not a
    record: ``status`` needs it, and records cost a cold start their making.)"""

    def __init__(self, workspace: str, run_dir: str | None = None, lang: str = "en"):
        self.workspace = os.path.realpath(workspace)
        self.run_dir = os.path.abspath(run_dir) if run_dir else os.path.join(self.workspace, ".flower")
        self.lang = lang

    def __repr__(self) -> str:
        return f"Paths(workspace={self.workspace!r}, run_dir={self.run_dir!r}, lang={self.lang!r})"

    def run(self, name: str) -> str:
        """A file in run_dir."""
        return os.path.join(self.run_dir, name)

    @property
    def flower_dir(self) -> str:
        """``<workspace>/.flower``."""
        return os.path.join(self.workspace, ".flower")

    @property
    def notes_dir(self) -> str:
        """``<workspace>/.flower/notes``."""
        return os.path.join(self.flower_dir, "notes")

    def note(self, key: str, **fmt: Any) -> str:
        """A note file by text-table key, preferring an existing file in the other language."""
        mine = os.path.join(self.notes_dir, text(key, self.lang, **fmt))
        if os.path.exists(mine):
            return mine
        for lang in TEXTS:
            other = os.path.join(self.notes_dir, text(key, lang, **fmt))
            if os.path.exists(other):
                return other
        return mine

    @property
    def brief(self) -> str:
        """The frozen brief."""
        return self.note("brief_file")

    @property
    def goal(self) -> str:
        """The frozen goal."""
        return self.note("goal_file")

    def handoff(self, step: str) -> str:
        """The current handoff document of a step."""
        return self.note("handoff_file", step=safe_name(step))

    @property
    def spill_dir(self) -> str:
        """Where trimmed tool results are spilled."""
        return os.path.join(self.flower_dir, "spill")

    @property
    def workbench_dir(self) -> str:
        """The workbench flower owns: ``scripts``, ``artifacts``, ``notes`` and their ``INDEX.md``."""
        return os.path.join(self.flower_dir, "workbench")

    @property
    def workbench_index(self) -> str:
        """The workbench's index."""
        return os.path.join(self.workbench_dir, "INDEX.md")

    def transcript(self, session_id: str) -> str:
        """The slim transcript of a retired session."""
        return os.path.join(self.run_dir, "transcripts", f"{safe_name(session_id)}.md")

    def prepare(self) -> None:
        """Create run_dir and .flower (0700). A ``.gitignore`` (``*``) goes only into a directory
        flower creates itself: a user's existing directory (``-r runs`` in a repo that tracks
        ``runs/``) is never given one."""
        created = [d for d in dict.fromkeys((self.run_dir, self.flower_dir)) if not os.path.isdir(d)]
        for directory in (self.run_dir, self.flower_dir, self.notes_dir):
            ensure_private_dir(directory)
        for directory in created:
            ignore = os.path.join(directory, ".gitignore")
            if not os.path.exists(ignore):
                try:
                    atomic_write(ignore, "*\n", mode=0o644)
                except OSError as exc:
                    raise FlowerError(said("er_cannot_write_in", path=directory, error=os_reason(exc)), EXIT_SETUP) from None


def _valid_lineage(data: Any) -> bool:
    """The shape of lineage.json: workspace str, woke int, steps {str: str}, starts {str: start record}."""
    if not isinstance(data, dict) or not isinstance(data.get("workspace", ""), str):
        return False
    if not isinstance(data.get("woke", 0), int) or isinstance(data.get("woke", 0), bool):
        return False
    if not isinstance(data.get("achieved", ""), (str, type(None))):
        return False
    steps, starts = data.get("steps", {}), data.get("starts", {})
    if not isinstance(steps, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in steps.items()):
        return False
    return isinstance(starts, dict) and all(
        isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("session_id"), str)
        and isinstance(v.get("prompt"), str) for k, v in starts.items())


def task_of(data: dict) -> str | None:
    """The written-ahead task of a lineage's data (None when there is none, or it is of the wrong shape)."""
    task = data.get("task")
    words = task.get("text") if isinstance(task, dict) else None
    return words if isinstance(words, str) and words.strip() else None


def wake_of(data: dict) -> dict | None:
    """The pending wake of a lineage's data: ``{"sentences", "goal", "at"}``, the sentences the work
    step has not been sent yet and whether the goal is still to be re-derived (None when nothing is
    pending, or it is of the wrong shape)."""
    wake = data.get("wake")
    if not isinstance(wake, dict):
        return None
    said = wake.get("sentences")
    sentences = [s for s in said if isinstance(s, str) and s.strip()] if isinstance(said, list) else []
    goal = wake.get("goal") is True
    if not sentences and not goal:
        return None
    return {"sentences": sentences, "goal": goal, "at": wake.get("at") if isinstance(wake.get("at"), str) else ""}


class Lineage:
    """``lineage.json``: step -> session id, guarded by the workspace path and by the store, plus the
    write-ahead *start record* of each step (the session id and the exact input it was started with).

    Any mismatch (other workspace, unreadable or wrong-shaped file, session no longer stored) means a
    fresh start, never an error; a session that never reached the store is started again with the
    input of its start record (:meth:`redo_prompt`). Writes re-read the file under a lock and change
    only their own key.
    """

    def __init__(self, path: str | None, workspace: str, steps: dict[str, str], woke: int,
                 starts: dict[str, dict] | None = None, gone: dict[str, str] | None = None,
                 where: str | None = None):
        self.path = path                    # the file (None when a backend keeps it elsewhere)
        self.where = where or path or ""    # where it lives, for messages
        self.workspace = workspace
        self.steps = steps
        self.woke = woke
        self.starts = starts or {}
        self.gone = gone or {}
        self.achieved: str | None = None  # the work session a judge last said achieved of
        self.moved_from: str | None = None  # the workspace's earlier path, when a backend can tell
        self.task: str | None = None        # a fresh start's task, written before anything else
        self.wake: dict | None = None       # a wake not yet carried through (see wake_of)
        self.due: dict[str, Callable[[dict], None]] = {}   # step -> its record a failed write still owes
        self._lock = FileLock(os.path.join(os.path.dirname(path), ".lock")) if path else None

    @classmethod
    def open(cls, run_dir: str, workspace: str, *, has_session: Callable[[str], bool] | None = None,
             notify: Callable[[str], None] | None = None, lang: str = "en") -> "Lineage":
        """Load the lineage of ``workspace`` from ``run_dir`` (steps whose session is gone move to
        ``gone``, where :meth:`redo_prompt` finds them)."""
        path = os.path.join(run_dir, "lineage.json")
        workspace = os.path.realpath(workspace)
        data = read_json(path, {}, expect=dict, valid=_valid_lineage, notify=notify, lang=lang)
        if data and data.get("workspace") != workspace:
            if notify:
                notify(text("info_other_workspace", lang, path=path, workspace=repr(data.get("workspace"))))
            data = {}
        lineage = cls(path, workspace, *cls.resolve(data, has_session, notify, lang))
        lineage.achieved = data.get("achieved")
        lineage.task, lineage.wake = task_of(data), wake_of(data)
        return lineage

    @staticmethod
    def peek(paths: Paths) -> dict:
        """``lineage.json`` of ``paths`` without side effects, when it is valid and belongs to this
        workspace ({} otherwise)."""
        data = _peek_json(paths.run("lineage.json"))
        return data if _valid_lineage(data) and data.get("workspace") == paths.workspace else {}

    @staticmethod
    def resolve(data: dict, has_session: Callable[[str], bool] | None, notify: Callable[[str], None] | None,
                lang: str) -> tuple[dict, int, dict, dict]:
        """``(steps, woke, starts, gone)`` of lineage ``data``: steps whose session is no longer
        stored move to ``gone`` (a redo when the start record names that session), with one line."""
        steps = dict(data.get("steps") or {})
        gone: dict[str, str] = {}
        if has_session is not None:
            gone = {k: sid for k, sid in steps.items() if not has_session(sid)}
            for k in gone:
                steps.pop(k)
            redo = [k for k, sid in gone.items() if (data.get("starts") or {}).get(k, {}).get("session_id") == sid]
            lost = [k for k in gone if k not in redo]
            if redo and notify:
                notify(text("info_redo", lang, steps=", ".join(redo)))
            if lost and notify:
                notify(text("info_sessions_gone", lang, steps=", ".join(lost)))
        return steps, data.get("woke", 0), dict(data.get("starts") or {}), gone

    def mark_achieved(self, session_id: str | None) -> None:
        """Remember that the judge said achieved of this work session (None: forget it)."""
        self._update(lambda d: d.__setitem__("achieved", session_id))

    @property
    def done(self) -> bool:
        """Whether the current work session is the one a judge said achieved of."""
        return bool(self.achieved) and self.achieved == self.steps.get("work")

    def _update(self, change: Callable[[dict], None]) -> None:
        with self._lock:
            try:
                data = read_json(self.path, {}, expect=dict, valid=_valid_lineage)
            except FlowerError:
                data = {}
            if data.get("workspace") != self.workspace:
                data = {"workspace": self.workspace, "woke": self.woke, "steps": {}, "starts": {}}
            data.setdefault("steps", {})
            data.setdefault("starts", {})
            self._owed(data)
            change(data)
            write_json(self.path, {"workspace": self.workspace, "woke": data.get("woke", 0),
                                   "steps": data["steps"], "starts": data["starts"],
                                   "achieved": data.get("achieved"), "task": data.get("task"),
                                   "wake": data.get("wake"), "budget": data.get("budget")})
            self.due = {}
            self.achieved = data.get("achieved")
            self.task, self.wake = task_of(data), wake_of(data)
            self.steps = dict(data["steps"])
            self.starts = dict(data["starts"])
            self.woke = data.get("woke", 0)

    def remember(self, step: str, session_id: str, prompt: str | None = None) -> None:
        """Record ``step -> session_id`` now (before the CLI starts); other keys are left alone. With
        ``prompt`` (a fresh session) the start record keeps exactly what the session is started with.
        A write that fails (a full disk) leaves the record due: every later write, and :meth:`catch_up`,
        writes it first; this process drives ``session_id`` meanwhile, never the session it replaced."""
        def change(data: dict) -> None:
            data["steps"][step] = session_id
            if prompt is not None:
                data["starts"][step] = {"session_id": session_id, "prompt": redact(prompt), "at": iso_now()}
        self.due[step] = change
        self.steps[step] = session_id
        self._update(lambda data: None)

    def catch_up(self) -> None:
        """Write the records a failed write still owes the file (nothing when none is due)."""
        if self.due:
            self._update(lambda data: None)

    def _owed(self, data: dict) -> None:
        for change in list(self.due.values()):
            change(data)

    def remember_task(self, task: str) -> None:
        """Write ahead a fresh start's task, before anything heavy is imported or paid: after a kill
        before the first step's start record, the next run carries on with it."""
        self._update(lambda d: d.__setitem__("task", {"text": redact(task), "at": iso_now()}))

    def add_wake(self, sentence: str) -> None:
        """Write ahead a wake sentence, before it is appended to the brief: it stays pending until the
        work step's session holds it, and the goal until it is re-derived (:meth:`settle_wake`). An
        achieved verdict is forgotten: there is new work."""
        def change(data: dict) -> None:
            wake = wake_of(data) or {"sentences": [], "at": iso_now()}
            if redact(sentence) not in wake["sentences"]:
                wake["sentences"].append(redact(sentence))
            wake["goal"] = True
            data["wake"], data["achieved"] = wake, None
        self._update(change)

    def set_budget(self, usd: float) -> None:
        """Keep the job's budget (``--max-cost``): every later run, on any machine, holds to it."""
        self._update(lambda d: d.__setitem__("budget", usd))

    def settle_wake(self, *, goal: bool = False, sentences: bool = False) -> None:
        """The goal was re-derived (``goal``), the work step's session holds the sentences (``sentences``)."""
        def change(data: dict) -> None:
            wake = wake_of(data)
            if wake is not None:
                wake["goal"] = wake["goal"] and not goal
                wake["sentences"] = [] if sentences else wake["sentences"]
            data["wake"] = wake_of({"wake": wake})
        if self.wake is not None:
            self._update(change)

    def redo_prompt(self, step: str) -> str | None:
        """The input a step's last fresh session was started with, when that session never reached
        the store (so the step must start again with the same input); None otherwise."""
        record = self.starts.get(step) or {}
        sid = self.gone.get(step)
        return record.get("prompt") if sid and record.get("session_id") == sid else None

    def bump(self) -> int:
        """Count one more wake (once per process that runs a workflow); returns the new count."""
        self._update(lambda d: d.__setitem__("woke", int(d.get("woke") or 0) + 1))
        return self.woke

    def archive(self, into: str, extra: Iterable[str] = ()) -> list[str]:
        """Move lineage.json and ``extra`` files (brief, goal) into ``into`` and reset steps and
        woke. Returns the archived paths. sessions.db is not touched (it is the archive)."""
        moved = []
        with self._lock:
            ensure_private_dir(into)
            for path in [self.path, *extra]:
                if path and os.path.exists(path):
                    target = os.path.join(into, os.path.basename(path))
                    os.replace(path, target)
                    moved.append(target)
            self.steps, self.woke, self.starts, self.gone, self.due = {}, 0, {}, {}, {}
            self.task = self.wake = None
        return moved


def archive_dir(notes_dir: str, now: float | None = None) -> str:
    """A fresh ``notes/archive/<YYYYmmdd-HHMMSS[-n]>`` path that does not exist yet."""
    base = os.path.join(notes_dir, "archive", timestamp(now))
    target, n = base, 1
    while os.path.exists(target):
        n += 1
        target = f"{base}-{n}"
    return target


def run_id(now: float | None = None) -> str:
    """A process mark for manifest rows: ``YYYYmmdd-HHMMSS-<6 hex>``."""
    return f"{timestamp(now)}-{uuid.uuid4().hex[:6]}"


_ROW_TYPES: dict[str, tuple] = {
    "step": (str,), "session_id": (str, type(None)), "ok": (bool,), "cost_usd": (int, float),
    "num_turns": (int,), "text": (str,), "error": (str, type(None)), "started_at": (str,), "ended_at": (str,),
    "attempts": (int,), "errors": (list,), "retired": (list,), "resumed": (bool,),
    "context": (int, type(None)), "generations": (int,), "duration_s": (int, float), "run": (str,),
    "error_kind": (str, type(None)),
}


def _valid_row(row: Any) -> bool:
    """A manifest row: an object whose known fields have their types (unknown fields are kept)."""
    return isinstance(row, dict) and isinstance(row.get("step"), str) and all(
        isinstance(row[k], types) and not (types[0] is not bool and type(row[k]) is bool)
        for k, types in _ROW_TYPES.items() if k in row)


def latest_rows(rows: Iterable[dict]) -> list[dict]:
    """Manifest row versions -> the newest version of each (run, step, started_at), in the order the
    rows first appeared (a row is re-appended, never updated, when its step goes on)."""
    order: dict[tuple, dict] = {}
    for row in rows:
        order[(row.get("run"), row.get("step"), row.get("started_at"))] = row
    return list(order.values())


class Manifest:
    """``manifest.jsonl`` in run_dir: one JSON object per line, one line per version of a step's row,
    shared by every process. A put appends a line (under the lock, one write), so it costs the same
    at 100,000 rows as at one; a later line for the same (run, step, started_at) supersedes an earlier
    one (the row keeps its first place), as in the PostgreSQL backend. A line that cannot be read or
    has the wrong shape is skipped. An older flower's ``manifest.json`` (a JSON array) is still read,
    and moved into ``manifest.jsonl`` once, by the first put (a corrupt one is set aside)."""

    FILE = "manifest.jsonl"
    LEGACY = "manifest.json"

    def __init__(self, run_dir: str, run: str, notify: Callable[[str], None] | None = None, lang: str = "en"):
        self.run_dir = run_dir
        self.path: str | None = os.path.join(run_dir, self.FILE)   # None when a backend keeps it elsewhere
        self.where = self.path                                       # where it lives, for messages
        self.run = run
        self.notify = notify
        self.lang = lang
        self.rows: list[dict] = []       # this run's rows, newest version of each
        self._unwritten: list[dict] = []
        self._lock = FileLock(os.path.join(run_dir, ".lock"))

    def _row_line(self, row: dict) -> str:
        ordered = {"run": self.run, **{k: v for k, v in row.items() if k != "run"}}
        return json.dumps(ordered, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"

    def put(self, row: dict) -> None:
        """Add or replace (by ``step``+``started_at``) one of this run's rows: append its new version."""
        self._remember(row)
        self._unwritten.append(row)
        self.flush()

    def _remember(self, row: dict) -> None:
        key = (row.get("step"), row.get("started_at"))
        for i, existing in enumerate(self.rows):
            if (existing.get("step"), existing.get("started_at")) == key:
                self.rows[i] = row
                break
        else:
            self.rows.append(row)

    def flush(self) -> None:
        """Append the row versions not written yet (one write under the lock; an older
        ``manifest.json`` is moved in first)."""
        if not self._unwritten:
            return
        data = "".join(self._row_line(r) for r in self._unwritten).encode("utf-8", "surrogatepass")
        with self._lock:
            legacy = os.path.join(self.run_dir, self.LEGACY)
            if os.path.exists(legacy):
                self._migrate(legacy)
            append_lines(self.path, data)
        self._unwritten = []

    def _migrate(self, legacy: str) -> None:
        """Move an older flower's ``manifest.json`` rows in front of ``manifest.jsonl`` (once; a file
        that cannot be read, or holds wrong-shaped rows, is set aside with one line, the good rows kept)."""
        try:
            with open_regular(legacy, "r", encoding="utf-8") as fh:
                raw = fh.read()
            rows = json_value(raw) if raw.strip() else []
            if not isinstance(rows, list):
                raise ValueError
        except (OSError, UnicodeDecodeError, ValueError):
            rows = None
        good = [r for r in rows if _valid_row(r)] if rows is not None else []
        if rows is None or len(good) < len(rows):
            moved = set_aside(legacy)
            if self.notify:
                self.notify(text("info_set_aside", self.lang, path=legacy, moved=moved))
        lines = "".join(json.dumps({"run": r.get("run", ""), **{k: v for k, v in r.items() if k != "run"}},
                                   ensure_ascii=False, separators=(",", ":"), default=str) + "\n" for r in good)
        try:
            with open(self.path, "r", encoding="utf-8", errors="surrogateescape") as fh:
                newer = fh.read()
        except FileNotFoundError:
            newer = ""
        if newer and not newer.endswith("\n"):
            newer += "\n"
        atomic_write(self.path, (lines + newer).encode("utf-8", "surrogateescape"))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(legacy)

    @staticmethod
    def _parse(lines: Iterable[str]) -> list[dict]:
        """The well-formed rows among ``lines`` (others are skipped)."""
        rows = []
        for line in lines:
            if line.strip():
                with contextlib.suppress(ValueError):
                    row = json_value(line)
                    if _valid_row(row):
                        rows.append(row)
        return rows

    @staticmethod
    def read(run_dir: str) -> list[dict]:
        """All well-formed rows, the newest version of each, oldest first (no side effects: an
        unreadable file reads as [], a wrong-shaped row or line is left out)."""
        legacy = _peek_json(os.path.join(run_dir, Manifest.LEGACY))
        versions = [r for r in legacy if _valid_row(r)] if isinstance(legacy, list) else []
        try:
            with open_regular(os.path.join(run_dir, Manifest.FILE), "r", encoding="utf-8", errors="replace") as fh:
                versions += Manifest._parse(fh)
        except OSError:
            pass
        return latest_rows(versions)

    @staticmethod
    def tail(run_dir: str, n: int) -> list[dict]:
        """The last ``n`` rows, reading only the end of the file (what ``status`` shows): the newest
        version of each row, in the order the rows first appear in the part read. Falls back to
        :meth:`read` while an older ``manifest.json`` has not been moved in yet."""
        if os.path.exists(os.path.join(run_dir, Manifest.LEGACY)):
            return Manifest.read(run_dir)[-n:]
        try:
            fh = open_regular(os.path.join(run_dir, Manifest.FILE))
        except OSError:
            return []
        with fh:
            end = fh.seek(0, os.SEEK_END)
            start, chunk, rows = end, 1 << 14, []
            while start > 0:
                start = max(0, start - chunk)
                fh.seek(start)
                lines = fh.read(end - start).split(b"\n")
                if start > 0:
                    lines = lines[1:]   # maybe the end of a line that begins before the part read
                rows = latest_rows(Manifest._parse(ln.decode("utf-8", "replace") for ln in lines))
                if len(rows) > n:
                    break
                chunk *= 4
        return rows[-n:]


def wake_state(workspace: str = ".", run_dir: str | None = None, state: Any = None) -> dict:
    """What a wake in ``workspace`` would pick up, without side effects:
    ``{"waking", "brief", "goal", "checks", "woke", "steps"}`` (the lineage from ``state``, a
    StateBackend, when given; else from run_dir)."""
    paths = Paths(workspace, run_dir)
    data = state.peek_lineage() if state is not None else Lineage.peek(paths)
    steps = dict(data.get("steps") or {})
    brief_text = _read_text(paths.brief)
    goal_text = _read_text(paths.goal)
    statement, checks = goal_parts(goal_text or "")
    brief_done = brief_complete(brief_sections(brief_text or ""))
    return {
        "waking": bool(steps) or brief_done,
        "brief": brief_done,
        "goal": goal_complete(statement, checks),
        "checks": len(checks),
        "woke": data.get("woke", 0) if isinstance(data.get("woke"), int) else 0,
        "steps": steps,
        "achieved": bool(data.get("achieved")) and data.get("achieved") == steps.get("work"),
    }


def lineage_problems(paths: Paths, lang: str = "en") -> list[str]:
    """What is wrong with ``lineage.json``, in words (none when it is missing or sound): ``status``
    reads it without side effects, so it says what the next run will set aside or ignore."""
    path = paths.run("lineage.json")
    if not os.path.lexists(path):
        return []
    data = _peek_json(path)
    if data is None:
        return [text("st_lineage_unreadable", lang, path=_tilde(path))]
    if not _valid_lineage(data):
        return [text("st_lineage_shape", lang, path=_tilde(path))]
    if data.get("workspace") != paths.workspace:
        return [text("info_other_workspace", lang, path=_tilde(path), workspace=repr(data.get("workspace")))]
    return []


# --- Handoff: window, threshold, ledger from the transcript, the prioritised carry ---

@record
class HandoffPolicy:
    """When to hand a step over to a fresh session, and how much to carry."""

    enabled: bool = True
    window: int | None = None
    ratio: float = 0.75
    max_generations: int = 8
    budget_chars: int = 18000
    ritual_timeout: float = 180.0

    def at(self, window: int) -> int:
        """The level that triggers a handoff."""
        return int(window * self.ratio)

    def warn_at(self, window: int) -> int:
        """The level that emits the one ``near`` event of a generation."""
        return self.at(window) - window // 20


DEFAULT_WINDOW = 200_000


def model_window(model: str | None) -> int | None:
    """Context window by model name, when the name tells (``[1m]`` -> 1M; Claude 4.x sonnet/haiku
    -> 200K; 5.x models -> 1M); None when it does not."""
    if not model:
        return None
    name = model.lower()
    if "[1m]" in name:
        return 1_000_000
    if re.search(r"(?:sonnet|haiku|opus)-4|claude-3|-4-\d", name):
        return 200_000
    if re.search(r"(?:opus|sonnet|haiku)-5|-5-\d", name) or name in ("opus", "sonnet", "haiku"):
        return 1_000_000
    return None


MIN_WINDOW = 10_000   # a smaller learned or given window is not believed


def _valid_windows(data: Any) -> bool:
    """The shape of window.json: ``{"<base>|<model>": {"window": int >= MIN_WINDOW, "source": str}}`` (a
    smaller window could not hold one request: a run would hand over at every answer)."""
    return isinstance(data, dict) and all(
        isinstance(v, dict) and type(v.get("window")) is int and v["window"] >= MIN_WINDOW
        and isinstance(v.get("source", ""), str) for v in data.values())


class WindowBook:
    """``runs/window.json``: context windows learned per base URL + model (from the CLI's
    ``model_usage`` reports, lowered to the level seen at a real overflow)."""

    def __init__(self, run_dir: str, base_url: str | None = None, notify: Callable[[str], None] | None = None):
        self.path: str | None = os.path.join(run_dir, "window.json")   # None when a backend keeps it elsewhere
        self.where = self.path                                           # where it lives, for messages
        self.notify = notify
        self.base = base_url if base_url is not None else (os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL)
        self._lock = FileLock(os.path.join(run_dir, ".lock"))

    def _key(self, model: str | None) -> str:
        return f"{self.base}|{model or 'default'}"

    def get(self, model: str | None) -> int | None:
        """The learned window for ``model``, if any (one below MIN_WINDOW is not believed)."""
        data = _peek_json(self.path)
        value = data.get(self._key(model)) if isinstance(data, dict) else None
        window = value.get("window") if isinstance(value, dict) else None
        return window if type(window) is int and window >= MIN_WINDOW else None

    @staticmethod
    def rule(current: dict, window: int, source: str, lower_only: bool) -> dict | None:
        """The record to keep after learning ``window`` from ``source`` (None: keep ``current``).
        A window learned from a real overflow wins over the advertised one; an overflow only lowers."""
        if lower_only and isinstance(current.get("window"), int) and current["window"] <= window:
            return None
        if not lower_only and current.get("source") == "overflow":
            return None
        return {"window": max(int(window), MIN_WINDOW), "source": source}

    def _put(self, model: str | None, window: int, source: str, lower_only: bool) -> None:
        with self._lock:
            data = read_json(self.path, {}, expect=dict, valid=_valid_windows, notify=self.notify)
            record = self.rule(data.get(self._key(model)) or {}, window, source, lower_only)
            if record is not None:
                data[self._key(model)] = record
                write_json(self.path, data)

    def learn(self, model: str | None, window: int) -> None:
        """Record the window the CLI reported (``model_usage[m]["contextWindow"]``)."""
        if window and window > 0:
            self._put(model, window, "model_usage", lower_only=False)

    def lower(self, model: str | None, level: int) -> None:
        """A real overflow happened at ``level``: the usable window is at most that."""
        if level and level > 0:
            self._put(model, level, "overflow", lower_only=True)


def resolve_window(model: str | None, *, explicit: int | None = None, book: WindowBook | None = None,
                   warn: Callable[[str], None] | None = None) -> tuple[int, str]:
    """The context window and where it came from: --window > FLOWER_WINDOW > learned > model table
    > 200K (conservative: an early handoff costs one handoff, a late one an overflow)."""
    if explicit:
        return int(explicit), "--window"
    from_env = int(env_number("FLOWER_WINDOW", 0, warn))
    if from_env:
        return from_env, "FLOWER_WINDOW"
    learned = book.get(model) if book else None
    if learned:
        return learned, "learned"
    by_name = model_window(model)
    if by_name:
        return by_name, "model"
    return DEFAULT_WINDOW, "default"


def _tool_uses(entries: list[dict]) -> list[dict]:
    """The tool_use blocks of a transcript's assistant entries, in order."""
    uses: list[dict] = []
    for e in entries:   # (blocks_of inlined: a huge session's handoff walks every entry)
        if e.get("type") == "assistant":
            message = e.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                uses += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
    return uses


def _tool_inputs(uses: list[dict]) -> list[tuple[str, dict]]:
    return [(b.get("name", ""), b["input"] if isinstance(b.get("input"), dict) else {}) for b in uses]


def _user_prompts(entries: list[dict]) -> list[str]:
    return [said for said in map(_user_prompt, entries) if said is not None]


def _user_prompt(entry: dict) -> str | None:
    """The prompt a user entry holds: its string content, or the text of a list with no tool result
    (None when it holds none, or that text is empty)."""
    if entry.get("type") != "user" or entry.get("isMeta") or entry.get("isCompactSummary"):
        return None
    content = (entry.get("message") or {}).get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for b in content:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                return None
        return entry_text(entry) or None
    return None


_RITUAL_MARKS = tuple(table["handoff_prompt"][:40] for table in TEXTS.values())   # a ritual prompt begins so


def _is_ritual_prompt(said: str) -> bool:
    for mark in _RITUAL_MARKS:   # a huge session's handoff asks this of each of its user entries, twice
        if mark in said:
            return True
    return False


def _ritual_in(entry: dict) -> bool:
    """Whether a user entry's text holds the ritual prompt (as ``_is_ritual_prompt(entry_text(entry))``;
    block by block, since no mark holds a newline, and with no text built for a tool result)."""
    message = entry.get("message")
    content = message.get("content") if message.__class__ is dict else None
    if content.__class__ is str:
        return _is_ritual_prompt(content)
    if content.__class__ is not list:
        return False
    for b in content:
        if b.__class__ is dict and b.get("type") == "text" and _is_ritual_prompt(str(b.get("text", ""))):
            return True
    return False


def recent_thread(entries: list[dict], limit: int = 10, max_chars: int = 700) -> list[tuple[str, str]]:
    """The last ``limit`` user prompts and assistant texts of the main thread, oldest first, each
    cut to ``max_chars``; error noise, tool traffic, interrupt markers and flower's own handoff
    exchange (the ritual prompt and everything after it) left out. Walks back from the ritual prompt (or
    the end) only until it has them: a huge session's handoff reads it twice."""
    end = len(entries)
    for i, entry in enumerate(entries):
        if entry.get("type") == "user" and _ritual_in(entry):
            end = i
            break
    if limit > 0:
        items: list[tuple[str, str]] = []
        for i in range(end - 1, -1, -1):
            item = _thread_item(entries[i])
            if item is not None:
                items.append(item)
                if len(items) == limit:
                    break
        items.reverse()
    else:
        items = [item for item in map(_thread_item, entries[:end]) if item is not None][-limit:]
    return [(role, said if len(said) <= max_chars else said[:max_chars - 1] + "…") for role, said in items]


def _thread_item(entry: dict) -> tuple[str, str] | None:
    """(role, text) of an entry of the main thread's conversation (see :func:`recent_thread`), or None."""
    if entry.get("isSidechain") or is_api_error_entry(entry):
        return None
    if entry.get("type") == "assistant" and is_main_assistant(entry):
        said = entry_text(entry).strip()
        return ("assistant", said) if said else None
    if entry.get("type") == "user":
        lines = "\n".join(_user_prompts([entry])).splitlines()
        said = "\n".join(line for line in lines if not line.startswith("[Request interrupted")).strip()
        return ("user", said) if said else None
    return None


# A degraded ledger quotes the last assistant texts among this many items of the recent thread
DEGRADED_THREAD = 50


# A degraded ledger lists the shell commands that ran, newest first, up to this many characters: a
# successor that trusts its history redoes whatever the carry does not show as done
DEGRADED_RAN_CHARS = 4000


def _ran_lines(commands: list[str], budget: int = DEGRADED_RAN_CHARS) -> list[str]:
    """``- ran: `command``` lines, in the order they ran, of the newest commands that fit ``budget``
    (each cut at 200 characters; a command run again is listed once, where it last ran), after a line
    that counts the older ones left out."""
    lines: list[str] = []
    seen: set[str] = set()
    used = 0
    newest_first = list(reversed(commands))
    for n, command in enumerate(newest_first):
        line = f"- ran: `{command[:200]}`"
        if line in seen:
            continue
        if used + len(line) > budget:
            older = len({c[:200] for c in newest_first[n:]} - {l[8:-1] for l in seen})
            return [f"- ({older} earlier command(s) not listed)"] + lines[::-1]
        seen.add(line)
        lines.append(line)
        used += len(line) + 1
    return lines[::-1]


# How much of a worker's report a degraded ledger quotes after its task, and of all such lines
DELEGATED_REPORT_CHARS = 300
DELEGATED_CHARS = 4000
_REPORT_FRAME = "The report follows:"   # the CLI's preamble before a subagent's report


def _report_of(result: str) -> str:
    """A worker's report from its Agent call's result: after the CLI's frame, without its agentId and
    usage tail, on one line."""
    _, found, after = result.partition(_REPORT_FRAME)
    report = (after if found else result).split("\nagentId:", 1)[0].split("<usage>", 1)[0]
    return " ".join(report.split())


def _delegated_lines(entries: list[dict], budget: int = DELEGATED_CHARS,
                     uses: list[dict] | None = None) -> list[str]:
    """``- delegated: `task` -> report`` lines for a degraded ledger, one per Agent call of the transcript
    (newest that fit ``budget``, in order): a coordinator's work is done by its workers, so what they
    reported is what its successor must not delegate again. A call with no result says so. ``uses``:
    the transcript's tool uses (:func:`_tool_uses`), when the caller has them."""
    calls = [b for b in (_tool_uses(entries) if uses is None else uses) if b.get("name") in AGENT_TOOLS]
    if not calls:   # the results' texts are looked at only for the Agent calls' ids
        return []
    wanted = {b.get("id") for b in calls}
    results = {tool_id: (block_text(b), bool(b.get("is_error"))) for e in entries if e.get("type") == "user"
               for b in blocks_of(e) if isinstance(b, dict) and b.get("type") == "tool_result"
               and (tool_id := b.get("tool_use_id")) in wanted}
    lines = []
    for b in calls:
        args = b["input"] if isinstance(b.get("input"), dict) else {}
        task = " ".join(str(args.get("description") or args.get("prompt") or "")[:200].split())
        said, failed = results.get(b.get("id"), (None, True))
        report = _report_of(said)[:DELEGATED_REPORT_CHARS] if not failed else \
            f"(no report{': ' + ' '.join(said.split())[:120] if said else ''}; check the disk for what it did)"
        lines.append(f"- delegated: `{task}` -> {report}")
    kept, used = [], 0
    for line in reversed(lines):
        if used + len(line) > budget:
            return [f"- ({len(lines) - len(kept)} earlier delegation(s) not listed)"] + kept[::-1]
        kept.append(line)
        used += len(line) + 1
    return kept[::-1]


# How much of each section of the previous handoff document a degraded ledger carries on
EARLIER_CHARS = 3000


def _with_earlier(sections: dict[str, str], earlier: Ledger | None) -> dict[str, str]:
    """``sections`` of a degraded ledger, each followed by the same section of ``earlier`` (whole
    lines, at most :data:`EARLIER_CHARS`), under a line that says where it comes from."""
    if earlier is None:
        return sections
    out = dict(sections)
    for key in ("status", "decisions", "dead_ends", "pointers"):
        body = (earlier.get(key) or "").strip()
        if _is_empty(body) or _is_aside(body):
            continue
        kept, used = [], 0
        for line in body.splitlines():
            if used + len(line) + 1 > EARLIER_CHARS:
                break
            kept.append(line)
            used += len(line) + 1
        if kept:
            earlier_part = "From the sessions before (their handoff document):\n" + "\n".join(kept)
            out[key] = earlier_part if _is_aside(sections[key]) else f"{sections[key]}\n{earlier_part}"
    return out


def _is_aside(body: str) -> bool:
    """Whether a section's body is only a parenthesised remark (``(none)``, ``(not recorded: ...)``)."""
    body = body.strip()
    return body.startswith("(") and body.endswith(")") and "\n" not in body


def degraded_ledger(entries: list[dict], why: str, prompt: str = "", earlier: Ledger | None = None,
                    workbench: Sequence[str] = (), thread: list[tuple[str, str]] | None = None) -> Ledger:
    """A ledger built mechanically from a transcript when the ritual failed: the latest TodoWrite
    list, the last three assistant texts, files written or edited, the shell commands that ran (as many
    of the newest as fit :data:`DEGRADED_RAN_CHARS`) and the step's prompt. Marked ``degraded`` with ``why``.
    ``workbench``: pointer lines for the workbench's files, so a successor knows what already exists.
    ``earlier``: the step's previous handoff document, whose sessions this transcript does not show: its
    status, decisions, dead ends and pointers follow this session's (each cut to :data:`EARLIER_CHARS`),
    so a successor that trusts its history does not redo what the sessions before this one did.
    ``thread``: ``recent_thread(entries, limit=DEGRADED_THREAD)``, when the caller has it (the carry's
    thread is its end: a huge session's handoff looks for its ritual prompt once)."""
    tool_uses = _tool_uses(entries)
    uses = _tool_inputs(tool_uses)
    todos: list[dict] = []
    files: list[str] = []
    commands: list[str] = []
    for name, args in uses:
        if name == "TodoWrite" and isinstance(args.get("todos"), list):
            todos = [t for t in args["todos"] if isinstance(t, dict)]
        elif name in ("Write", "Edit", "MultiEdit", "NotebookEdit"):
            path = args.get("file_path") or args.get("notebook_path")
            if isinstance(path, str) and path not in files:
                files.append(path)
        elif name == "Bash" and isinstance(args.get("command"), str):
            commands.append(args["command"])
    if thread is None:
        thread = recent_thread(entries, limit=DEGRADED_THREAD)
    texts = [t for role, t in thread if role == "assistant"][-3:]
    status_lines = []
    if todos:
        status_lines += [f"- [{'x' if t.get('status') == 'completed' else ' '}] {t.get('content', '')}"
                         for t in todos]
    status_lines += [f"> {t.replace(chr(10), ' ')}" for t in texts]
    open_todo = next((t.get("content") for t in todos if t.get("status") != "completed"), None)
    short_prompt = (prompt or "").strip()
    if len(short_prompt) > 1500:
        short_prompt = short_prompt[:1500] + "…"
    next_step = (f"Continue with the first open item: {open_todo}" if open_todo else
                 "Check the files below against the task, then continue the task:\n" + short_prompt)
    pointers = [f"- edited: {p}" for p in files[-20:]] + _ran_lines(commands) + \
        _delegated_lines(entries, uses=tool_uses) + list(workbench)
    sections = {
        "status": "\n".join(status_lines) or "(the transcript holds no assistant text yet)",
        "decisions": "(not recorded: degraded handoff)",
        "dead_ends": "(none recorded)",
        "next_step": next_step,
        "pointers": "\n".join(pointers) or "(none)",
    }
    ledger = Ledger(_with_earlier(sections, earlier), degraded=why)
    ledger.sections = {k: redact(v) for k, v in ledger.sections.items()}
    return ledger


def carried_ledger(entries: list[dict]) -> Ledger | None:
    """The ledger a successor session was started with, read back from its first prompt when that is
    a carry (its recent thread, pointers to files and closing line left out); None when the session
    did not start from a carry. What its sessions before did, even when their handoff document could
    not be written."""
    first = next((said for e in entries if not e.get("isSidechain") and (said := _user_prompt(e)) is not None), None)
    if first is None or not any(first.startswith(text("carry_head", lang)) for lang in TEXTS):
        return None
    tails = {f"## {text(key, lang)}" for key in ("carry_thread", "carry_nav") for lang in TEXTS}
    lines = first.splitlines()
    end = next((i for i, line in enumerate(lines) if line.strip() in tails), len(lines))
    ledger = Ledger.parse("\n".join(lines[:end]))
    return ledger if ledger.sections else None


def same_handoff(carried: Ledger, document: Ledger) -> bool:
    """Whether ``document`` is the handoff document ``carried`` (a carry, maybe trimmed) was made from:
    each carried section, without its trim marker, begins the document's."""
    for key, body in carried.sections.items():
        lines = [line for line in body.splitlines() if not line.startswith("[... ")]
        if document.get(key).splitlines()[:len(lines)] != lines:
            return False
    return bool(carried.sections)


def slim_transcript(entries: list[dict], session_id: str) -> str:
    """A readable transcript of a retired session: user prompts and assistant texts, tool calls as
    counts. Redacted."""
    lines = [f"# Transcript of session {session_id}", ""]
    pending: dict[str, int] = {}

    def flush_tools() -> None:
        if pending:
            lines.append("_(tool calls: " + ", ".join(f"{n}×{c}" for n, c in sorted(pending.items())) + ")_")
            lines.append("")
            pending.clear()

    for entry in entries:
        kind = entry.get("type")
        if kind != "assistant" and kind != "user" or entry.get("isSidechain"):
            continue   # (an API error is an assistant's or a system entry)
        if kind == "assistant":
            if is_api_error_entry(entry):
                continue
            texts = []
            for block in blocks_of(entry):
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    pending[block.get("name", "?")] = pending.get(block.get("name", "?"), 0) + 1
                elif isinstance(block, dict) and block.get("type") == "text":
                    texts.append(str(block.get("text", "")))
            said = "\n".join(texts).strip()
            if said and is_main_assistant(entry):
                flush_tools()
                lines += ["**assistant:**", said, ""]
        elif (said := _user_prompt(entry)) is not None:
            flush_tools()
            lines += ["**user:**", said.strip(), ""]
    flush_tools()
    return redact("\n".join(lines).rstrip() + "\n")


@record
class Carry:
    """The first prompt of a successor session, and what had to be shortened or left out."""

    text: str
    trimmed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


CARRY_PRIORITY = ("next_step", "dead_ends", "status", "decisions", "pointers", "thread")


def assemble_carry(ledger: Ledger, *, nav: dict[str, str], thread: list[tuple[str, str]],
                   budget_chars: int = 18000, lang: str = "en", full_text: str | None = None) -> Carry:
    """Build the successor's first prompt. Pure: same input, same bytes.

    Head (instructions) and nav (paths) are never cut. The bulk is packed by priority: Next step >
    Dead ends > Status > Decisions > Pointers > recent thread. Over budget, the lowest-priority part
    loses whole lines first (the thread its oldest items, the others their tail), with a visible
    marker; a part left with nothing is dropped. A closing line names what was trimmed or dropped
    and where the full text is. Credentials are redacted.
    """
    heads = dict(LEDGER_HEADINGS.get(lang, LEDGER_HEADINGS["en"]))
    heads["thread"] = text("carry_thread", lang)
    full_text = full_text or next(iter(nav.values()), "")
    head = text("carry_head", lang)
    if ledger.degraded:
        head += "\n" + text("degraded_title", lang, why=ledger.degraded)
    nav_block = f"## {text('carry_nav', lang)}\n" + "\n".join(f"- {k}: {v}" for k, v in nav.items())
    bodies: dict[str, list[str]] = {}
    for key in CARRY_PRIORITY:
        if key == "thread":
            lines = [f"- {role}: {redact(said).replace(chr(10), ' ')}" for role, said in thread]
        else:
            lines = redact(ledger.get(key)).strip().splitlines()
        if any(line.strip() for line in lines):
            bodies[key] = lines
    trimmed: dict[str, int] = {}
    dropped: list[str] = []

    def part(key: str) -> str:
        lines = bodies[key]
        cut = trimmed.get(key, 0)
        marker = [text("carry_trimmed_marker", lang, n=cut, path=full_text)] if cut else []
        if key == "thread":
            return f"## {heads[key]}\n" + "\n".join(marker + lines)
        return f"## {heads[key]}\n" + "\n".join(lines + marker)

    def closing() -> str:
        names = lambda keys: ", ".join(heads[k] for k in keys) or "-"  # noqa: E731
        return text("carry_closing", lang, trimmed=names([k for k in CARRY_PRIORITY if k in trimmed]),
                    dropped=names(dropped), path=full_text)

    def assemble() -> str:
        pieces = [head] + [part(k) for k in CARRY_PRIORITY if k in bodies] + [nav_block]
        if trimmed or dropped:
            pieces.append(closing())
        return "\n\n".join(pieces) + "\n"

    result = assemble()
    for key in reversed(CARRY_PRIORITY):
        # a part may need another pass: its marker and the closing line grow as parts are cut, and
        # that growth must spill neither past the budget nor onto the next, more important part
        while len(result) > budget_chars and key in bodies:
            excess = len(result) - budget_chars
            lines = bodies[key]
            removed = 0
            saved = 0
            # remove whole lines until the excess (plus a marker of up to ~200 chars) is covered
            target = excess + len(text("carry_trimmed_marker", lang, n=99999, path=full_text)) + 1
            if not (trimmed or dropped):
                target += len(closing()) + 64  # the closing line appears with the first cut
            while lines and saved < target:
                line = lines.pop(0) if key == "thread" else lines.pop()
                saved += len(line) + 1
                removed += 1
            if any(line.strip() for line in lines):
                trimmed[key] = trimmed.get(key, 0) + removed
            else:
                del bodies[key]
                trimmed.pop(key, None)
                dropped.append(key)
            result = assemble()
    return Carry(result, [k for k in CARRY_PRIORITY if k in trimmed], dropped)


def handoff_flag(paths: "Paths") -> str:
    """``<workspace>/.flower/handoff``: present while a person asked the work step to hand over."""
    return os.path.join(paths.flower_dir, "handoff")


def ask_handoff(paths: "Paths") -> str:
    """Ask the running work step to hand over at its next boundary (the flag, atomic, 0600)."""
    ensure_private_dir(paths.flower_dir)
    flag = handoff_flag(paths)
    atomic_write(flag, f"{time.time():.0f}\n")
    return flag


# --- Journal: what the report draws, recorded cheaply as the job runs ---
#
# One compact line per answer (its context level and tool calls), per connection's cost, per handoff,
# wait, outage, kill, degraded continuity and judge verdict, written through the state backend (a
# JSONL file in run_dir, or a table): what ``report`` draws and what nothing else records.

JOURNAL_FILE = "journal.jsonl"
_JOURNAL_KINDS = frozenset(("step", "handoff", "retry", "error", "offline", "online", "resume", "result"))
_JOURNAL_FIELDS = {
    "step": ("continues", "woke"), "handoff": ("phase", "context", "window", "generation", "retired", "degraded",
                                               "carry_chars"),
    "retry": ("attempt", "kind", "delay"), "error": ("kind", "message"), "offline": ("waited_s", "host", "port"),
    "online": ("waited_s", "host", "port"), "resume": ("reason", "attempt", "pruned"),
    "result": ("ok", "cost_usd", "turns", "attempts", "error"),
}


class Journal:
    """The journal of one run: one compact JSON line per record in ``run_dir/journal.jsonl`` (0600),
    appended in one write without fsync (a killed process loses nothing the kernel took; only a
    power cut can). The first record a run writes names the machine and process that ran it."""

    def __init__(self, path: str, run: str):
        self.path = path
        self.run = run
        self._started = False

    def add(self, kind: str, step: str = "", sid: str | None = None, /, **data: Any) -> None:
        """Append one record ``{"k", "t", "r", "s", "sid", **data}`` (``t``: epoch seconds)."""
        now = round(time.time(), 3)
        records = []
        if not self._started:
            records.append({"k": "run", "t": now, "r": self.run, "host": socket.gethostname(), "pid": os.getpid()})
        record = {"k": kind, "t": now, "r": self.run, "s": step}
        if sid:
            record["sid"] = sid
        record.update(data)
        records.append(record)
        self.write("".join(json.dumps(r, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
                           for r in records))
        self._started = True

    def write(self, lines: str) -> None:
        """Append whole lines (after a torn last line, on a line of their own)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            data = lines.encode("utf-8", "surrogatepass")
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            os.write(fd, data)
        finally:
            os.close(fd)

    @staticmethod
    def parse(lines: Iterable[str]) -> list[dict]:
        """The well-formed records among ``lines``: objects with a kind and a time (others are skipped)."""
        records = []
        for line in lines:
            if not line.strip():
                continue
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict) and isinstance(value.get("k"), str) and \
                        isinstance(value.get("t"), (int, float)) and not isinstance(value.get("t"), bool):
                    records.append(value)
        return records

    @staticmethod
    def read(path: str) -> list[dict]:
        """Every well-formed record of a journal file ([] when there is none)."""
        try:
            with open_regular(path, "r", encoding="utf-8", errors="replace") as fh:
                return Journal.parse(fh)
        except OSError:
            return []


class PgJournal(Journal):
    """The journal in the database: one row per record (the run's first one with its machine line),
    spooled like every other write while the database is away."""

    def __init__(self, state: "PostgresState", run: str):
        super().__init__(state.describe("journal"), run)
        self.state = state

    def write(self, lines: str) -> None:
        """Append the lines as one row."""
        self.state.write({"t": "journal", "ws": self.state.workspace_id, "run": self.run, "lines": lines})


def _journal_fields(kind: str, data: dict) -> dict:
    """The few fields of an event's data a journal record keeps (strings cut short)."""
    fields = {}
    for name in _JOURNAL_FIELDS.get(kind, ()):
        value = data.get(name)
        if value is None:
            continue
        fields[name] = value[:300] if isinstance(value, str) else value
    return fields


def journal_event(rt: "Runtime", event: "Event") -> None:
    """Journal what the report needs of one runtime event (fail-soft; most events are not kept)."""
    with contextlib.suppress(Exception):
        kept = _journal_kept(rt, event)
        if kept is not None:
            _journal(rt, kept[0], event.step, event.session_id, redact_obj(kept[1]))


def _journal_kept(rt: "Runtime", event: "Event") -> tuple[str, dict] | None:
    """``(kind, fields)`` of the record an event becomes (None: not kept)."""
    kind, data = event.kind, event.data or {}
    if kind == "system":
        if data.get("subtype") != "turn_result":
            return None
        kind, fields = "cost", {"cost": round(float(data.get("cost_usd") or 0), 6)}
    elif kind == "info":
        if "verdict" in data:
            kind, fields = "verdict", {"verdict": str(data["verdict"]), "failed": list(data.get("failed") or [])[:20]}
        elif data.get("message") in rt.degraded:
            kind, fields = "degraded", {"message": str(data["message"])[:300]}
        else:
            return None
    elif kind in _JOURNAL_KINDS:
        fields = _journal_fields(kind, data)
    else:
        return None
    return kind, fields


def _journal(rt: "Runtime", kind: str, step: str, sid: str | None, fields: dict) -> None:
    """Add a record fail-soft: a write that fails warns once (``Runtime.soft``); nothing else of the
    journal's can ever stop a run."""
    journal = getattr(rt, "journal", None)
    if journal is not None:
        with contextlib.suppress(Exception):
            rt.soft(journal.path, lambda: journal.add(kind, step, sid, **fields))


def journal_answer(rt: "Runtime", st: Any, msg: Any) -> None:
    """Journal one answer of a main thread: the context level it left, the window, the handoff
    threshold and the tools it called; of a worker (a subagent's answer), only the tools it called
    (fail-soft)."""
    if getattr(msg, "model", None) == SYNTHETIC_MODEL:
        return
    tools = [getattr(block, "name", "") for block in getattr(msg, "content", None) or []
             if type(block).__name__ == "ToolUseBlock"]
    if getattr(msg, "parent_tool_use_id", None) is not None:
        if tools:
            _journal(rt, "wturn", st.name, st.sid, {"tools": tools})
        return
    fields: dict = {"lv": st.level, "w": st.window, "at": st.at}
    if tools:
        fields["tools"] = tools
    _journal(rt, "turn", st.name, st.sid, fields)


def journal_kill(rt: "Runtime", reason: str) -> None:
    """Journal that this process was stopped by a signal (what ``rescue`` writes down)."""
    current = rt._current
    step = current["result"].step if current else ""
    with contextlib.suppress(Exception):
        rt.journal.add("kill", step, None, reason=reason)


# --- State backends: one interface for the local files + SQLite and for PostgreSQL ---
#
# Everything flower keeps between runs goes through a StateBackend: the session store, lineage,
# manifest rows, the window book, the notes and the workspace lock. ``LocalState`` is today's files
# and SQLite in run_dir (the embedded default, zero dependencies); ``PostgresState`` (next section)
# keeps all of it in one database for users on many machines. The runtime, the workflow and the CLI
# talk to the interface only.

STATE_ENV, WORKSPACE_ID_ENV = "FLOWER_STATE", "FLOWER_WORKSPACE_ID"
_GIT_URL_SCP = _lazy_re(r"^(?:[^@/]+@)?([^:/]+):(?!//)(.+)$")   # git@host:owner/repo(.git)
_GIT_SECTION = _lazy_re(r'^\s*\[\s*remote\s+"([^"]+)"\s*\]\s*$')
_GIT_URL = _lazy_re(r"^\s*url\s*=\s*(.+?)\s*$")


def normalize_remote(url: str) -> str:
    """A git remote URL without scheme, credentials, port, trailing ``.git`` or ``/``; the host in
    lower case: ``https://u:pw@GitHub.com/a/b.git``, ``git@github.com:a/b`` and ``ssh://git@github.com:22/a/b``
    all become ``github.com/a/b``."""
    url = url.strip()
    if "://" in url:
        parsed = urllib.parse.urlsplit(url)
        host, path = (parsed.hostname or ""), parsed.path
    else:
        match = _GIT_URL_SCP.match(url)
        host, path = (match.group(1), match.group(2)) if match else ("", url)
    path = re.sub(r"/+", "/", path).strip("/")
    path = path[:-4] if path.endswith(".git") else path
    return f"{host.lower()}/{path}" if host else path


def _git_dir(start: str) -> tuple[str, str] | None:
    """``(worktree root, git dir)`` of the repository holding ``start`` (a ``.git`` file of a
    worktree or submodule is followed); None outside git."""
    here = start
    while True:
        dot = os.path.join(here, ".git")
        if os.path.isdir(dot):
            return here, dot
        if os.path.isfile(dot):
            pointer = (_read_text(dot) or "").strip()
            if pointer.startswith("gitdir:"):
                target = pointer[7:].strip()
                return here, os.path.normpath(os.path.join(here, target))
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _git_remote(git_dir: str) -> str | None:
    """The URL of remote ``origin`` (else the first remote) from the repository's config."""
    common = (_read_text(os.path.join(git_dir, "commondir")) or "").strip()
    config = _read_text(os.path.join(git_dir, common or ".", "config")) or ""
    remotes: dict[str, str] = {}
    current = None
    for line in config.splitlines():
        section = _GIT_SECTION.match(line)
        if section or line.lstrip().startswith("["):
            current = section.group(1) if section else None
            continue
        url = _GIT_URL.match(line)
        if current and url and current not in remotes:
            remotes[current] = url.group(1)
    return remotes.get("origin") or next(iter(remotes.values()), None)


def _git_branch(git_dir: str, env: dict[str, str]) -> str:
    """The checked-out branch; on a detached HEAD (CI checkouts of pull requests) the CI's branch
    name (``GITHUB_HEAD_REF``, ``GITHUB_REF_NAME``, ``CI_COMMIT_REF_NAME``, ``BRANCH_NAME``), else ``detached``."""
    head = (_read_text(os.path.join(git_dir, "HEAD")) or "").strip()
    if head.startswith("ref: refs/heads/"):
        return head[len("ref: refs/heads/"):]
    for name in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BRANCH_NAME"):
        if env.get(name):
            return env[name]
    return "detached"


def workspace_identity(path: str, env: dict[str, str] | None = None) -> str:
    """The default workspace id: ``<normalised remote>#<branch>`` plus ``:<subdirectory>`` when the
    workspace is below the repository root; the same on every runner of one job, different for
    different repositories, branches or subdirectories. Outside git (or with no remote): the
    resolved path."""
    env = os.environ if env is None else env
    resolved = os.path.realpath(path)
    found = _git_dir(resolved)
    remote = _git_remote(found[1]) if found else None
    if not found or not remote:
        return resolved
    root, git_dir = found
    ident = f"{normalize_remote(remote)}#{_git_branch(git_dir, env)}"
    sub = os.path.relpath(resolved, os.path.realpath(root)).replace(os.sep, "/")
    return ident if sub == "." else f"{ident}:{sub}"


def _sha(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:16]


SNAPSHOTS_KEPT = 3


@record
class Mail:
    """One message for the running work agent: ``id`` (its file name in the inbox, or its key in a
    remote backend), the words (redacted) and when it was sent (epoch seconds)."""

    id: str
    words: str
    sent: float


def questions_dir(paths: Paths) -> str:
    """``<workspace>/.flower/questions``: one open question each, and the answers ``answer`` leaves."""
    return os.path.join(paths.flower_dir, "questions")


class StateBackend:
    """Where flower keeps what outlives a run. Both backends implement every method; the local one
    is the reference. ``paths`` is this machine's view (the workspace and run_dir)."""

    kind = "local"

    def __init__(self, paths: Paths, workspace_id: str):
        self.paths = paths
        self.workspace_id = workspace_id

    def session_store(self, create: bool = True) -> Any:
        """The raw SessionStore (None with ``create=False`` when nothing was ever stored)."""
        raise NotImplementedError

    def lineage(self, *, has_session: Callable[[str], bool] | None = None,
                notify: Callable[[str], None] | None = None, lang: str = "en") -> Lineage:
        """This workspace's lineage, store-checked (see :meth:`Lineage.open`)."""
        raise NotImplementedError

    def peek_lineage(self) -> dict:
        """The lineage data without side effects ({} when there is none)."""
        raise NotImplementedError

    def blank_lineage(self) -> Lineage:
        """An empty lineage that writes where this backend keeps it (when the stored one cannot be
        opened now: its writes still merge with what is stored)."""
        raise NotImplementedError

    def has_lineage(self) -> bool:
        """Whether a lineage is kept at all, even one that cannot be read (``--new`` archives it)."""
        raise NotImplementedError

    def lineage_problems(self, lang: str = "en") -> list[str]:
        """What is wrong with the kept lineage, in words (none when it is missing or sound)."""
        return []

    def manifest(self, run: str, *, notify: Callable[[str], None] | None = None, lang: str = "en") -> Manifest:
        """The manifest writer of one run."""
        raise NotImplementedError

    def manifest_rows(self) -> list[dict]:
        """Every well-formed manifest row, oldest first."""
        raise NotImplementedError

    def manifest_tail(self, n: int) -> list[dict]:
        """The last ``n`` manifest rows (a backend may read less than everything)."""
        return self.manifest_rows()[-n:]

    def windows(self, *, notify: Callable[[str], None] | None = None) -> WindowBook:
        """The book of learned context windows."""
        raise NotImplementedError

    def journal(self, run: str) -> "Journal":
        """The journal writer of one run (what the report draws): ``journal.jsonl`` in run_dir."""
        return Journal(self.paths.run(JOURNAL_FILE), run)

    def journal_records(self) -> list[dict]:
        """Every journal record, oldest first."""
        return Journal.read(self.paths.run(JOURNAL_FILE))

    def lock(self, name: str, what: str) -> DriverLock:
        """A not yet acquired driver lock: ``workspace`` (one go per workspace) or ``step-<name>``."""
        raise NotImplementedError

    def sync_notes(self, notify: Callable[[str], None] | None = None) -> None:
        """Bring the workspace's notes and the backend's copies together (before a run)."""

    def notes_changed(self, paths: Iterable[str]) -> None:
        """flower wrote, moved or removed these note files: the backend takes their current state."""

    def endpoint(self) -> tuple[str, int] | None:
        """Host and port to wait for when the backend is remote (None: nothing to wait for)."""
        return None

    def put_snapshot(self, data: bytes) -> None:
        """Keep a packed workspace snapshot (the newest few are kept)."""
        raise NotImplementedError

    def latest_snapshot(self) -> bytes | None:
        """The newest packed workspace snapshot (None when there is none)."""
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether the backend can be used now (a remote one also writes what it kept locally)."""
        return True

    def pending(self) -> int:
        """Entries kept only locally because the backend could not take them (0 when none)."""
        return 0

    def describe(self, what: str = "") -> str:
        """Where ``what`` (a file name such as ``manifest.json``) lives, for messages."""
        return self.paths.run(what) if what else self.paths.run_dir

    def where(self) -> str | None:
        """The place the state is kept when it is not this machine's run_dir (a database, never its
        password), for messages; None for the local files."""
        return None

    def driven(self) -> bool:
        """Whether a flower drives this workspace now (it holds the workspace lock)."""
        return flock_holder(os.path.join(self.paths.flower_dir, "flower.lock")) is not None

    def remote_notes(self) -> dict[str, str]:
        """The notes a remote backend holds (name relative to the notes folder -> text); {} for the
        local files (they are the notes)."""
        return {}

    def driver(self) -> dict | None:
        """The flower that drives the workspace now (pid, host, since, step), None when none does."""
        path = os.path.join(self.paths.flower_dir, "flower.lock")
        pid = flock_holder(path) if os.path.exists(path) else None
        if pid is None:
            return None
        info = _peek_json(path)
        return {**(info if isinstance(info, dict) else {}), "pid": pid}

    def close(self) -> None:
        """Release connections (idempotent)."""

    # called (from any thread) when this process must stop driving at once: its lock is another's now
    stop_driving: Callable[[], None] | None = None

    def check_lease(self) -> None:
        """Raise :class:`Busy` when this process's driver lock was taken by another (remote backends)."""

    # -- talking to the running job: mail, answers to its questions, a handoff asked for --

    def mailbox(self, inbox: Any) -> Any:
        """Where mail for the running job is left and found: ``inbox`` (the :class:`Inbox` of the
        workspace's ``.flower/inbox`` files) itself; a remote backend adds the mail it keeps."""
        return inbox

    def post_question(self, qid: str, question: str) -> None:
        """Show a question of the running job to whoever may answer it (``questions/<id>.json``)."""
        folder = ensure_private_dir(questions_dir(self.paths))
        write_json(os.path.join(folder, f"{qid}.json"), {"id": qid, "question": question, "asked": iso_now()})

    def questions_waiting(self) -> list[str]:
        """The ids of the questions waiting for an answer."""
        try:
            return sorted(n[:-5] for n in os.listdir(questions_dir(self.paths)) if n.endswith(".json"))
        except OSError:
            return []

    def post_answer(self, qid: str, words: str) -> None:
        """Leave the answer to question ``qid`` (``questions/<id>.answer``, redacted)."""
        atomic_write(os.path.join(questions_dir(self.paths), f"{qid}.answer"), redact(words) + "\n")

    def answer_waiting(self, qid: str) -> str | None:
        """The answer left for question ``qid`` (None while there is none)."""
        left = _read_text(os.path.join(questions_dir(self.paths), f"{qid}.answer"))
        return left.strip() if left is not None and left.strip() else None

    def close_question(self, qid: str) -> None:
        """Forget question ``qid`` and its answer (it was answered, or it timed out)."""
        for name in (f"{qid}.json", f"{qid}.answer"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(questions_dir(self.paths), name))

    def post_handoff(self) -> str:
        """Ask the running work step to hand over (the ``handoff`` flag); returns where it was left."""
        return ask_handoff(self.paths)

    def handoff_waiting(self) -> bool:
        """Whether a handoff was asked for and not yet done."""
        return os.path.exists(handoff_flag(self.paths))

    def handoff_done(self) -> None:
        """The work step handed over: the request is done (kept until now so a crash loses nothing)."""
        with contextlib.suppress(OSError):
            os.unlink(handoff_flag(self.paths))


class LocalState(StateBackend):
    """Files and SQLite in run_dir (SPEC §2): lineage.json, manifest.json, window.json, sessions.db
    and flock-based driver locks; notes are the workspace files themselves. ``store`` or
    ``store_spec`` (``module:factory``) replace sessions.db."""

    kind = "local"

    def __init__(self, paths: Paths, *, store: Any = None, store_spec: str | None = None,
                 workspace_id: str | None = None):
        super().__init__(paths, workspace_id or paths.workspace)
        self._store = store
        self._spec = store_spec
        self._owned = False

    def session_store(self, create: bool = True) -> Any:
        """sessions.db (or the user's store)."""
        if self._store is None:
            if self._spec:
                self._store = load_store_factory(self._spec)
            else:
                db = self.paths.run("sessions.db")
                if not create and not os.path.exists(db):
                    return None
                self._store = SqliteSessionStore(db, reader=not create)
                self._owned = True
        return self._store

    def lineage(self, *, has_session: Callable[[str], bool] | None = None,
                notify: Callable[[str], None] | None = None, lang: str = "en") -> Lineage:
        """``lineage.json`` in run_dir."""
        return Lineage.open(self.paths.run_dir, self.paths.workspace, has_session=has_session,
                            notify=notify, lang=lang)

    def peek_lineage(self) -> dict:
        """``lineage.json`` when it is valid and belongs to this workspace."""
        return Lineage.peek(self.paths)

    def blank_lineage(self) -> Lineage:
        """An empty lineage over ``lineage.json`` (its writes re-read the file)."""
        return Lineage(self.paths.run("lineage.json"), os.path.realpath(self.paths.workspace), {}, 0)

    def has_lineage(self) -> bool:
        """Whether ``lineage.json`` exists (readable or not)."""
        return os.path.exists(self.paths.run("lineage.json"))

    def lineage_problems(self, lang: str = "en") -> list[str]:
        """What is wrong with ``lineage.json`` (see :func:`lineage_problems`)."""
        return lineage_problems(self.paths, lang)

    def manifest(self, run: str, *, notify: Callable[[str], None] | None = None, lang: str = "en") -> Manifest:
        """``manifest.jsonl`` in run_dir."""
        return Manifest(self.paths.run_dir, run, notify=notify, lang=lang)

    def manifest_rows(self) -> list[dict]:
        """The rows of ``manifest.jsonl`` (and of an older ``manifest.json``)."""
        return Manifest.read(self.paths.run_dir)

    def manifest_tail(self, n: int) -> list[dict]:
        """The last rows, reading only the end of ``manifest.jsonl``."""
        return Manifest.tail(self.paths.run_dir, n)

    def windows(self, *, notify: Callable[[str], None] | None = None) -> WindowBook:
        """``window.json`` in run_dir."""
        return WindowBook(self.paths.run_dir, notify=notify)

    def lock(self, name: str, what: str) -> DriverLock:
        """``flower.lock`` for the workspace, ``locks/<name>.lock`` for a step."""
        if name == "workspace":  # the workspace's own .flower/, whatever -r says: one go per workspace
            return DriverLock(os.path.join(self.paths.flower_dir, "flower.lock"), what, self.paths.workspace)
        locks = ensure_private_dir(self.paths.run("locks"))
        return DriverLock(os.path.join(locks, f"{safe_name(name)}.lock"), what, self.paths.workspace)

    def put_snapshot(self, data: bytes) -> None:
        """``snapshots/<time>-<n>.snap`` in run_dir (atomic, 0600); older than the newest few removed."""
        folder = ensure_private_dir(self.paths.run("snapshots"))
        name = f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{time.monotonic_ns():020d}.snap"
        atomic_write(os.path.join(folder, name), data)
        for old in sorted(n for n in os.listdir(folder) if n.endswith(".snap"))[:-SNAPSHOTS_KEPT]:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, old))

    def latest_snapshot(self) -> bytes | None:
        """The newest ``snapshots/*.snap`` that can be read."""
        folder = self.paths.run("snapshots")
        try:
            names = sorted((n for n in os.listdir(folder) if n.endswith(".snap")), reverse=True)
        except OSError:
            return None
        for name in names:
            with contextlib.suppress(OSError):
                with open_regular(os.path.join(folder, name), "rb") as fh:
                    return fh.read()
        return None

    def close(self) -> None:
        """Close the session store if this backend opened it."""
        if self._owned:
            with contextlib.suppress(Exception):
                self._store.close()


# --- PostgreSQL state: every piece of state in one database, for many machines (psycopg 3, lazy) ---
#
# Tables live in the schema ``flower``; every row names its workspace (``ws``), so several workspaces
# share one database. Rows are appended, never updated in place: the current lineage is the newest
# snapshot, a manifest row the newest version of (run, step, started_at), a note the newest version of
# its name (a NULL body is a deletion). Writes the database cannot take (it is down) go to a local
# spool under run_dir and are written, in order and exactly once, when it is back.

PG_SCHEMA_VERSION = 5     # 2: leases (a flower.py that knows only 1 does not renew them: it is refused); 3: journal; 4: snapshots; 5: inbox
PG_LOCK_CLASS = 0x464C57   # first key of flower's advisory locks ("FLW"); the second is hashtext(name)
PG_LEASE_TTL = 90.0        # seconds a driver's lease lasts unrenewed (FLOWER_LEASE_TTL); renewed every sixth

PG_CREATE = """
CREATE SCHEMA IF NOT EXISTS flower;
CREATE TABLE IF NOT EXISTS flower.schema_version (
    version integer NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS flower.entries (
    id bigserial PRIMARY KEY, ws text NOT NULL, pk text NOT NULL, sid text NOT NULL, sub text NOT NULL,
    uuid text, payload text NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS entries_uuid ON flower.entries (ws, pk, sid, sub, uuid) WHERE uuid IS NOT NULL;
CREATE INDEX IF NOT EXISTS entries_key ON flower.entries (ws, pk, sid, sub, id);
CREATE TABLE IF NOT EXISTS flower.batches (
    id bigserial PRIMARY KEY, ws text NOT NULL, pk text NOT NULL, sid text NOT NULL, sub text NOT NULL,
    mtime bigint NOT NULL, context bigint, summary text);
CREATE INDEX IF NOT EXISTS batches_key ON flower.batches (ws, pk, sid, sub, id);
CREATE TABLE IF NOT EXISTS flower.lineage (
    id bigserial PRIMARY KEY, ws text NOT NULL, data text NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS lineage_ws ON flower.lineage (ws, id);
CREATE TABLE IF NOT EXISTS flower.manifest (
    id bigserial PRIMARY KEY, ws text NOT NULL, run text NOT NULL, row text NOT NULL,
    at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS manifest_ws ON flower.manifest (ws, id);
CREATE TABLE IF NOT EXISTS flower.windows (
    id bigserial PRIMARY KEY, key text NOT NULL, win integer NOT NULL, source text NOT NULL,
    at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS windows_key ON flower.windows (key, id);
CREATE TABLE IF NOT EXISTS flower.notes (
    id bigserial PRIMARY KEY, ws text NOT NULL, name text NOT NULL, body text, sha text,
    at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS notes_ws ON flower.notes (ws, name, id);
CREATE TABLE IF NOT EXISTS flower.holders (
    id bigserial PRIMARY KEY, ws text NOT NULL, lock text NOT NULL, info text NOT NULL,
    at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS holders_ws ON flower.holders (ws, lock, id);
CREATE TABLE IF NOT EXISTS flower.spooled (
    spool text PRIMARY KEY, ws text NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS flower.leases (
    ws text NOT NULL, lock text NOT NULL, holder text NOT NULL, info text NOT NULL,
    expires_at timestamptz NOT NULL, PRIMARY KEY (ws, lock));
CREATE TABLE IF NOT EXISTS flower.journal (
    id bigserial PRIMARY KEY, ws text NOT NULL, run text NOT NULL, lines text NOT NULL,
    at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS journal_ws ON flower.journal (ws, id);
CREATE TABLE IF NOT EXISTS flower.snapshots (
    id bigserial PRIMARY KEY, ws text NOT NULL, body bytea NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS snapshots_ws ON flower.snapshots (ws, id);
CREATE TABLE IF NOT EXISTS flower.inbox (
    id bigserial PRIMARY KEY, ws text NOT NULL, kind text NOT NULL, key text NOT NULL, body text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE UNIQUE INDEX IF NOT EXISTS inbox_key ON flower.inbox (ws, kind, key);
"""
PG_SCHEMA_EXISTS = "SELECT to_regclass('flower.schema_version') IS NOT NULL"
PG_SCHEMA_FOUND = "SELECT max(version) FROM flower.schema_version"
PG_SCHEMA_MARK = "INSERT INTO flower.schema_version (version) VALUES (%s)"
PG_XACT_LOCK = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
PG_TRY_LOCK = "SELECT pg_try_advisory_lock(%s, hashtext(%s))"
PG_UNLOCK = "SELECT pg_advisory_unlock(%s, hashtext(%s))"
PG_BATCH_LAST = ("SELECT summary, mtime FROM flower.batches WHERE ws=%s AND pk=%s AND sid=%s AND sub=%s "
                 "ORDER BY id DESC LIMIT 1")
PG_APPEND = """
WITH batch AS (
    INSERT INTO flower.batches (ws, pk, sid, sub, mtime, context, summary)
    VALUES (%(ws)s, %(pk)s, %(sid)s, %(sub)s, %(mtime)s, %(context)s, %(summary)s))
INSERT INTO flower.entries (ws, pk, sid, sub, uuid, payload)
SELECT %(ws)s, %(pk)s, %(sid)s, %(sub)s, u, p
FROM unnest(%(uuids)b::text[], %(payloads)b::text[]) WITH ORDINALITY AS t(u, p, n) ORDER BY n
ON CONFLICT DO NOTHING
"""
PG_LOAD = "SELECT payload FROM flower.entries WHERE ws=%s AND pk=%s AND sid=%s AND sub=%s ORDER BY id"
PG_ID_OF_UUID = "SELECT id FROM flower.entries WHERE ws=%s AND pk=%s AND sid=%s AND sub=%s AND uuid=%s"
PG_TAKE_FROM = ("DELETE FROM flower.entries WHERE ws=%s AND pk=%s AND sid=%s AND sub=%s AND id>=%s "
                "RETURNING id, uuid, payload")
PG_HAS_SESSION = "SELECT EXISTS (SELECT 1 FROM flower.entries WHERE ws=%s AND pk=%s AND sid=%s AND sub='')"
PG_LIST_SESSIONS = ("SELECT sid, max(mtime) FROM flower.batches WHERE ws=%s AND pk=%s AND sub='' "
                    "GROUP BY sid ORDER BY sid")
PG_LIST_SUMMARIES = ("SELECT DISTINCT ON (sid) summary FROM flower.batches WHERE ws=%s AND pk=%s AND sub='' "
                     "ORDER BY sid, id DESC")
PG_LIST_SUBKEYS = ("SELECT DISTINCT sub FROM flower.batches WHERE ws=%s AND pk=%s AND sid=%s AND sub<>'' "
                   "ORDER BY sub")
PG_DELETE_ENTRIES = "DELETE FROM flower.entries WHERE ws=%s AND pk=%s AND sid=%s AND (sub=%s OR %s)"
PG_DELETE_BATCHES = "DELETE FROM flower.batches WHERE ws=%s AND pk=%s AND sid=%s AND (sub=%s OR %s)"
PG_LAST_CONTEXT = ("SELECT context FROM flower.batches WHERE ws=%s AND pk=%s AND sid=%s AND sub='' "
                   "AND context IS NOT NULL ORDER BY id DESC LIMIT 1")
PG_SESSIONS = """
SELECT b.pk, b.sid, max(b.mtime),
       (SELECT c.context FROM flower.batches c WHERE c.ws=b.ws AND c.pk=b.pk AND c.sid=b.sid AND c.sub=''
        AND c.context IS NOT NULL ORDER BY c.id DESC LIMIT 1),
       (SELECT count(*) FROM flower.entries e WHERE e.ws=b.ws AND e.pk=b.pk AND e.sid=b.sid AND e.sub='')
FROM flower.batches b WHERE b.ws=%s AND b.sub='' AND (b.pk=%s OR %s) GROUP BY b.ws, b.pk, b.sid
ORDER BY max(b.mtime) DESC
"""
PG_LINEAGE_LAST = "SELECT data FROM flower.lineage WHERE ws=%s ORDER BY id DESC LIMIT 1"
PG_LINEAGE_PUT = "INSERT INTO flower.lineage (ws, data) VALUES (%s, %s)"
PG_MANIFEST_PUT = "INSERT INTO flower.manifest (ws, run, row) VALUES (%s, %s, %s)"
PG_MANIFEST_ALL = "SELECT row FROM flower.manifest WHERE ws=%s ORDER BY id"
PG_WINDOW_LAST = "SELECT win, source FROM flower.windows WHERE key=%s ORDER BY id DESC LIMIT 1"
PG_WINDOW_PUT = "INSERT INTO flower.windows (key, win, source) VALUES (%s, %s, %s)"
PG_NOTES_LAST = ("SELECT DISTINCT ON (name) name, body, sha FROM flower.notes WHERE ws=%s "
                 "ORDER BY name, id DESC")
PG_NOTE_PUT = "INSERT INTO flower.notes (ws, name, body, sha) VALUES (%s, %s, %s, %s)"
PG_HOLDER_PUT = "INSERT INTO flower.holders (ws, lock, info) VALUES (%s, %s, %s)"
PG_HOLDER_LAST = "SELECT info FROM flower.holders WHERE ws=%s AND lock=%s ORDER BY id DESC LIMIT 1"
# A lease is the one row of its lock, updated in place (the only such row): taken when it lapsed (or
# its holder is known dead), renewed only by the holder that took it, deleted by that holder alone.
# Times are the database's, so the machines' clocks never matter.
PG_LEASE_TAKE = """
INSERT INTO flower.leases AS l (ws, lock, holder, info, expires_at)
VALUES (%(ws)s, %(lock)s, %(holder)s, %(info)s, clock_timestamp() + %(ttl)s * interval '1 second')
ON CONFLICT (ws, lock) DO UPDATE SET holder = EXCLUDED.holder, info = EXCLUDED.info, expires_at = EXCLUDED.expires_at
WHERE l.expires_at < clock_timestamp() OR l.holder = %(stale)s
RETURNING 1
"""
PG_LEASE_RENEW = ("UPDATE flower.leases SET expires_at = clock_timestamp() + %s * interval '1 second' "
                  "WHERE ws=%s AND lock=%s AND holder=%s RETURNING 1")
PG_LEASE_GET = ("SELECT holder, info, expires_at, extract(epoch FROM expires_at - clock_timestamp())::float8 "
                "FROM flower.leases WHERE ws=%s AND lock=%s")
PG_LEASE_DROP = "DELETE FROM flower.leases WHERE ws=%s AND lock=%s AND holder=%s"
PG_SNAPSHOT_PUT = "INSERT INTO flower.snapshots (ws, body) VALUES (%s, %s)"
PG_SNAPSHOT_LAST = "SELECT body FROM flower.snapshots WHERE ws=%s ORDER BY id DESC LIMIT 1"
PG_SNAPSHOT_PRUNE = ("DELETE FROM flower.snapshots WHERE ws=%s AND id NOT IN "
                     "(SELECT id FROM flower.snapshots WHERE ws=%s ORDER BY id DESC LIMIT %s)")
PG_SPOOL_CLAIM = "INSERT INTO flower.spooled (spool, ws) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1"
PG_JOURNAL_PUT = "INSERT INTO flower.journal (ws, run, lines) VALUES (%s, %s, %s)"
PG_JOURNAL_ALL = "SELECT lines FROM flower.journal WHERE ws=%s ORDER BY id"
# What is left for the running job from any machine: mail, a question and its answer (keyed by the
# question's id), a handoff asked for (key ''). A row is deleted once it was acted on; the first wins.
PG_INBOX_PUT = ("INSERT INTO flower.inbox (ws, kind, key, body) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (ws, kind, key) DO NOTHING")
PG_INBOX_LIST = ("SELECT key, body, extract(epoch FROM at)::float8 FROM flower.inbox WHERE ws=%s AND kind=%s "
                 "ORDER BY id")
PG_INBOX_GET = "SELECT body FROM flower.inbox WHERE ws=%s AND kind=%s AND key=%s"
PG_INBOX_DROP = "DELETE FROM flower.inbox WHERE ws=%s AND kind=%s AND key=%s"


def _psycopg() -> Any:
    """psycopg 3, imported only when the Postgres state is asked for (one line, exit 3, when missing)."""
    try:
        return importlib.import_module("psycopg")
    except ImportError:
        raise FlowerError(said("er_no_psycopg"),
                          EXIT_SETUP) from None


# what libpq says when the server (or libpq itself) refuses the settings, not the network: a rejected
# login (28P01, 28000), a database that does not exist (3D000), no CONNECT right, a malformed option.
# libpq gives no SQLSTATE for a failed connection, so its text is what there is to go by.
_PG_SETUP_FAILURE = _lazy_re(
    r"(?i)authentication failed|no pg_hba\.conf entry|role \"[^\"]*\" does not exist|database \"[^\"]*\" "
    r"does not exist|not permitted to log in|no password supplied|permission denied for database|"
    r"invalid (?:integer |boolean )?value|invalid connection option|invalid sslmode|invalid URI|"
    r"missing \"=\"|server does not support SSL")


def pg_setup_problem(message: str) -> str | None:
    """The reason, when a failed connection's message says the settings are wrong (user, password,
    database name, a malformed option), not that the database is away; None otherwise."""
    for line in message.splitlines():
        found = _PG_SETUP_FAILURE.search(line)
        if found:
            reason = re.sub(r"^.*?(?:FATAL|ERROR):\s*|^.*?connection is bad:\s*", "", line).strip()
            return redact(reason or line.strip())[:200]
    return None


def node_id() -> str:
    """This machine and pid namespace (host name, boot id, pid namespace): two processes with the same
    node id see each other's pids. Empty where the kernel does not tell (then nobody is judged dead
    by its pid)."""
    boot = _read_text("/proc/sys/kernel/random/boot_id")
    if not boot:
        return ""
    try:
        pid_ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pid_ns = 0
    return f"{socket.gethostname()}/{boot.strip()}/{pid_ns}"


def lease_stale(info: dict, node: str) -> bool:
    """Whether a lease's holder is known dead: it ran on this node and its pid is gone."""
    pid = info.get("pid")
    return bool(node) and info.get("node") == node and isinstance(pid, int) and pid != os.getpid() \
        and not _pid_alive(pid)


def _parsed_payloads(rows: Iterable[tuple], bad: list[int]) -> Iterator[dict]:
    """The entries of rows of one payload each, a batch at a time (:func:`parsed_objects`); a row that
    is not a JSON object is skipped and counted in ``bad[0]``."""
    return parsed_objects((payload for (payload,) in rows), bad)


def _and_spooled(entries: Iterable[dict], waiting: list[dict]) -> Iterator[dict]:
    """``entries``, then those of the spooled append operations ``waiting`` whose uuid is not among
    them yet (a batch may be both stored and still spooled)."""
    if not waiting:
        yield from entries
        return
    seen: set[str] = set()
    for entry in entries:
        uid = entry.get("uuid")
        if isinstance(uid, str):
            seen.add(uid)
        yield entry
    for op in waiting:
        for entry in op["entries"]:
            uid = entry.get("uuid")
            if isinstance(uid, str):
                if uid in seen:
                    continue
                seen.add(uid)
            yield entry


def _lease_info(raw: Any) -> dict:
    """A lease row's holder description ({} when unreadable)."""
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


class StateSpool:
    """Writes the database could not take, kept in order in ``run_dir/spool/state.jsonl`` (0600):
    a first line with the spool's id, then one operation per line. Every change holds a file lock,
    so processes sharing a run_dir add and drain in one order."""

    def __init__(self, path: str):
        self.path = path
        self._lock = FileLock(path + ".lock")

    def exists(self) -> bool:
        """Whether anything is waiting."""
        return os.path.exists(self.path)

    def lock(self) -> FileLock:
        """The lock every add and drain holds."""
        ensure_private_dir(os.path.dirname(self.path))
        return self._lock

    def add(self, op: dict) -> None:
        """Append one operation durably (fsync)."""
        with self.lock():
            fresh = not os.path.exists(self.path)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                with os.fdopen(fd, "ab") as fh:
                    head = json.dumps({"spool": uuid.uuid4().hex}) + "\n" if fresh else ""
                    fh.write((head + json.dumps(op, separators=(",", ":")) + "\n").encode("ascii"))
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise named_error(exc, self.path) from None

    def read(self) -> tuple[str | None, list[dict]]:
        """``(spool id, operations)`` (a torn last line of a crashed writer is left out)."""
        try:
            with open(self.path, "rb") as fh:
                lines = fh.read().decode("ascii", "replace").split("\n")
        except FileNotFoundError:
            return None, []
        ops = []
        for line in lines:
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict):
                    ops.append(value)
        head = ops.pop(0) if ops and "spool" in ops[0] else {}
        return head.get("spool") or _sha(self.path), ops

    def clear(self) -> None:
        """Forget everything (after it was written)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def entries(self, ws: str | None = None) -> int:
        """How many transcript entries are waiting (of workspace ``ws``, or all)."""
        return sum(len(op.get("entries") or []) for op in self.read()[1]
                   if op.get("t") == "entries" and (ws is None or op.get("ws") == ws))


def _note_name(notes_dir: str, path: str) -> str | None:
    """A note file's name relative to the notes directory (``/``-separated); None outside it."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(notes_dir))
    return None if rel.startswith("..") or os.path.isabs(rel) else rel.replace(os.sep, "/")


def _local_notes(notes_dir: str) -> dict[str, str]:
    """Every note file under ``notes_dir`` that flower can read -> its content hash (temp files and
    set-aside ``.corrupt-`` copies are not notes)."""
    found = {}
    for root, dirs, files in os.walk(notes_dir):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith(".") or ".corrupt-" in name:
                continue
            path = os.path.join(root, name)
            body = _read_text(path)
            rel = _note_name(notes_dir, path)
            if body is not None and rel:
                found[rel] = _sha(body)
    return found


def sync_plan(local: dict[str, str], remote: dict[str, str | None], base: dict[str, str | None]) -> dict[str, str]:
    """Which way each note goes: ``"push"`` (this workspace's copy changed since the last sync, by
    hand or a new file: it wins and is written back), ``"pull"`` (unchanged here, the database has
    another version or a deletion: restore it) or ``"same"``. Values are content hashes, None = absent."""
    plan = {}
    for name in sorted(set(local) | set(remote)):
        mine, theirs = local.get(name), remote.get(name)
        if mine == theirs:
            plan[name] = "same"
        elif mine != base.get(name):
            plan[name] = "push"
        else:
            plan[name] = "pull"
    return plan


def _pg_taken_from(cur: Any, op: dict) -> list[tuple]:
    """For an ``entries`` operation with a ``before`` uuid: the session's rows from that entry on,
    deleted inside the caller's transaction and returned in their order (id, uuid, payload), to be
    inserted again after the operation's entries. None stored with that uuid: nothing taken."""
    key = (op["ws"], op["pk"], op["sid"], op["sub"])
    row = cur.execute(PG_ID_OF_UUID, (*key, op["before"])).fetchone()
    if row is None:
        return []
    return sorted(cur.execute(PG_TAKE_FROM, (*key, row[0])).fetchall())


class PostgresState(StateBackend):
    """All of flower's state in one PostgreSQL database (``--state postgresql://...``), keyed by the
    workspace id so that any machine's checkout of the same job continues it. One connection for
    data (thread-safe behind a lock), one for the advisory locks, which the server drops with it.

    A lock is a lease (a row the holder renews every sixth of ``lease_ttl`` from a thread of its own,
    the truth across lost connections) plus the advisory lock (the fast path: a live, connected holder
    refuses a newcomer at once). Every new connection renews the leases before anything else uses
    it; a holder whose lease another took stops driving (``stop_driving``) and writes nothing more."""

    kind = "postgresql"

    def __init__(self, paths: Paths, conninfo: str, workspace_id: str, *, store_spec: str | None = None,
                 connect_timeout: float = 5.0, lease_ttl: float | None = None):
        super().__init__(paths, workspace_id)
        self.pg = _psycopg()
        try:
            self.params = self.pg.conninfo.conninfo_to_dict(conninfo)
        except self.pg.Error:
            raise FlowerError(said("er_state_conninfo"), EXIT_SETUP) from None
        self.conninfo = conninfo
        self.connect_timeout = connect_timeout
        self.lease_ttl = max(1.0, lease_ttl or env_number("FLOWER_LEASE_TTL", PG_LEASE_TTL))
        self.spool = StateSpool(os.path.join(paths.run_dir, "spool", "state.jsonl"))
        self._spec = store_spec
        self._store: Any = None
        self._conn: Any = None
        self._lock_conn: Any = None
        self._mutex = threading.RLock()
        self._held: dict[str, dict] = {}   # lock name -> the holder description this process wrote
        self._leases: dict[str, str] = {}  # lock name -> this holder's id in its lease row
        self._advisory: set[str] = set()   # lock names whose advisory lock the lock connection holds
        self._lost: Busy | None = None     # set when another took a lease of this process: nothing more is written
        self._valid_until = 0.0            # monotonic time until which no other can have taken the leases
        self._lapsed = False
        self._beat: threading.Thread | None = None
        self._beat_stop = threading.Event()
        self._schema_ok = False
        self._retry_at = 0.0
        self.notify: Callable[[str], None] | None = None

    # -- connections --

    def where(self) -> str:
        """The database, for messages: ``postgresql://user@host:port/db`` (never the password)."""
        host, port = self.endpoint()
        user = self.params.get("user") or os.environ.get("PGUSER") or ""
        db = self.params.get("dbname") or os.environ.get("PGDATABASE") or user
        return f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"

    def endpoint(self) -> tuple[str, int]:
        """Host (or socket directory) and port of the database."""
        host = (self.params.get("host") or os.environ.get("PGHOST") or "localhost").split(",")[0]
        port = str(self.params.get("port") or os.environ.get("PGPORT") or "5432").split(",")[0]
        return host, int(port) if port.isdigit() else 5432

    def describe(self, what: str = "") -> str:
        """``<database> [<what> of <workspace id>]``."""
        return f"{self.where()} [{what + ' of ' if what else ''}{self.workspace_id}]"

    def driven(self) -> bool:
        """Whether a flower drives this workspace now (its workspace lease is fresh)."""
        return (self.lease("workspace", quiet=True).get("left") or 0) > 0

    def remote_notes(self) -> dict[str, str]:
        """The notes the database holds (name relative to the notes folder -> text); {} when it cannot
        tell now."""
        try:
            rows = self._read(PG_NOTES_LAST, (self.workspace_id,))
        except FlowerError:
            return {}
        return {name: body for name, body, _ in rows if isinstance(body, str)}

    def driver(self) -> dict | None:
        """The flower that drives the workspace now (its fresh lease; the step from its lock record)."""
        lease = self.lease("workspace", quiet=True)
        if not lease or lease["left"] <= 0:
            return None
        info = dict(lease["info"])
        noted = self.lock_holder("workspace")
        if noted.get("pid") == info.get("pid") and noted.get("host") == info.get("host"):
            info["step"] = noted.get("step") or info.get("step")
        return info

    def _connect(self) -> Any:
        """A new connection; a refused login or a malformed setting is exit 3 at once (waiting would
        not help), anything else :class:`Offline`."""
        try:
            return self.pg.connect(self.conninfo, autocommit=True, application_name="flower",
                                   connect_timeout=max(1, int(self.connect_timeout)))
        except self.pg.Error as exc:
            problem = pg_setup_problem(str(exc))
            if problem:
                raise FlowerError(said("er_db_refused_connection", where=self.where(), problem=problem, var=STATE_ENV),
                                  EXIT_SETUP) from None
            self._retry_at = time.monotonic() + 1.0
            raise Offline(self._offline_line(exc)) from None

    def _offline_line(self, exc: Exception) -> str:
        detail = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        return said("er_db_unreachable_detail", where=self.where(), detail=detail[:200])

    def _connection(self) -> Any:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if time.monotonic() < self._retry_at:
            raise Offline(said("er_db_unreachable", where=self.where()))
        conn = self._connect()
        if not self._schema_ok:
            self._ensure_schema(conn)
        if self._leases:   # a new connection: the leases first, before anything of this process reaches it
            self._renew_on(conn)
        self._conn = conn
        return conn

    def _run(self, work: Callable[[Any], Any]) -> Any:
        """``work(cursor)`` in one transaction. A lost connection raises :class:`Offline`; any other
        database error a one-line FlowerError (both are what fail-soft writes catch); a process
        whose lease another took raises :class:`Busy` and writes nothing."""
        with self._mutex:
            if self._lost is not None:
                raise self._lost
            try:
                conn = self._connection()
                with conn.transaction(), conn.cursor() as cur:
                    return work(cur)
            except (self.pg.OperationalError, self.pg.InterfaceError) as exc:
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None
                self._retry_at = time.monotonic() + 1.0
                raise Offline(self._offline_line(exc)) from None
            except self.pg.Error as exc:
                raise FlowerError(said("er_db_refused", kind=type(exc).__name__, error=redact(str(exc))[:200]),
                                  EXIT_SETUP) from None

    def _ensure_schema(self, conn: Any) -> None:
        """Create the tables on first use; a schema newer than this flower knows is exit 3."""
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(PG_XACT_LOCK, (PG_LOCK_CLASS, "flower/schema"))
            found = None
            if cur.execute(PG_SCHEMA_EXISTS).fetchone()[0]:
                found = cur.execute(PG_SCHEMA_FOUND).fetchone()[0]
            if found is not None and found > PG_SCHEMA_VERSION:
                raise FlowerError(said("er_db_schema_newer", found=found, known=PG_SCHEMA_VERSION),
                                  EXIT_SETUP)
            if found != PG_SCHEMA_VERSION:
                cur.execute(PG_CREATE)
                cur.execute(PG_SCHEMA_MARK, (PG_SCHEMA_VERSION,))
        self._schema_ok = True

    def ready(self) -> bool:
        """Whether the database answers now; when it does, the locks a lost connection dropped are
        taken again and what waited in the spool is written."""
        for _ in range(2):   # a connection the server dropped is only noticed when used: then reconnect once
            self._retry_at = 0.0
            try:
                self._run(lambda cur: cur.execute("SELECT 1"))
                self._relock()
                return self.drain()
            except Offline:
                continue
        return False

    def _relock(self) -> None:
        """Renew the leases and take again the advisory locks an outage dropped; raise :class:`Busy`
        when another flower took a lease meanwhile (two must never drive at once)."""
        with self._mutex:
            if self._lost is not None:
                raise self._lost
            if self._leases:
                self._run(self._renew)
                self._advisory_again()

    def _renew_on(self, conn: Any) -> None:
        """Renew the leases on a new connection (its driver errors are the caller's)."""
        with conn.transaction(), conn.cursor() as cur:
            self._renew(cur)
        self._advisory_again()

    def _renew(self, cur: Any) -> None:
        """Renew every lease of this process. A lease another holder took (or that was deleted)
        makes this process lose them all."""
        started = time.monotonic()
        for name, holder in list(self._leases.items()):
            if cur.execute(PG_LEASE_RENEW, (self.lease_ttl, self.workspace_id, name, holder)).fetchone():
                continue
            row = cur.execute(PG_LEASE_GET, (self.workspace_id, name)).fetchone()
            self._lose(name, _lease_info(row[1]) if row else {})
        self._valid_until = started + self.lease_ttl * 5 / 6
        self._lapsed = False

    def _lose(self, name: str, holder: dict) -> None:
        """Another flower drives now: forget every lease, stop driving at once, raise :class:`Busy`."""
        what = self._held.get(name, {}).get("what", name)
        self._lost = Busy(DriverLock(name, what).busy_line(holder), holder)
        self._leases.clear()
        self._held.clear()
        self._stop_driving()
        raise self._lost

    def _stop_driving(self) -> None:
        if self.stop_driving is not None:   # in a thread: it waits for the CLI, never under the mutex
            threading.Thread(target=self.stop_driving, name="flower-stop", daemon=True).start()

    def _advisory_again(self) -> None:
        """Take again (best effort) the advisory locks of the leases held: the fast path for newcomers."""
        try:
            if self._lock_conn is not None and self._lock_conn.execute("SELECT 1") is not None and \
                    self._advisory >= set(self._leases):
                return
        except Exception:
            self._lock_conn = None
            self._advisory.clear()
        for name in set(self._leases) - self._advisory:
            with contextlib.suppress(FlowerError):
                if self._try_lock(name):
                    self._advisory.add(name)

    def check_lease(self) -> None:
        """Raise :class:`Busy` when another flower took this process's lease."""
        if self._lost is not None:
            raise self._lost

    def _heartbeat(self, stop: threading.Event) -> None:
        """Renew the leases every sixth of their life (every second while the database is away); past
        five sixths without a renewal another may take them once the database is back: stop driving."""
        wait = self.lease_ttl / 6
        while not stop.wait(wait) and self._leases:
            try:
                self._relock()
                wait = self.lease_ttl / 6
            except Exception:   # away (or refusing): renew again in a second; this thread never dies of it
                if self._lost is not None:
                    return
                wait = min(1.0, self.lease_ttl / 6)
                if not self._lapsed and time.monotonic() > self._valid_until:
                    self._lapsed = True
                    if self.notify is not None:
                        self.notify(text("info_lease_lapsed", self.paths.lang, seconds=int(self.lease_ttl * 5 / 6)))
                    self._stop_driving()

    def close(self) -> None:
        """Let go of the leases, close both connections (the server drops the advisory locks with them)."""
        self._beat_stop.set()
        with self._mutex:
            for name in list(self._leases):
                self.unlock(name)
            for conn in (self._conn, self._lock_conn):
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
            self._conn = self._lock_conn = None
            self._held.clear()
            self._advisory.clear()

    # -- writes: straight to the database, or to the spool while it is away --

    def write(self, op: dict) -> None:
        """Write one operation; when the database is away (or older ones still wait) it joins the
        spool, so nothing overtakes what was written before it."""
        with self._mutex:
            if not self.spool.exists():
                try:
                    self._run(lambda cur: self._apply(cur, op))
                    return
                except Offline:
                    pass
            self.spool.add(op)
            if time.monotonic() >= self._retry_at:
                self.drain()

    def drain(self) -> bool:
        """Write the spool in order, in one transaction, exactly once (its id is claimed in the
        same transaction). True when nothing is left waiting."""
        if not self.spool.exists():
            return True
        with self._mutex, self.spool.lock():
            spool_id, ops = self.spool.read()
            if not ops:
                self.spool.clear()
                return True

            def apply_all(cur: Any) -> None:
                if cur.execute(PG_SPOOL_CLAIM, (spool_id, self.workspace_id)).fetchone() is None:
                    return   # written before, by a process that died before it could clear the spool
                for op in ops:
                    self._apply(cur, op)
            try:
                self._run(apply_all)
            except Offline:
                return False
            self.spool.clear()
            return True

    def pending(self) -> int:
        """Transcript entries waiting in the spool."""
        return self.spool.entries() if self.spool.exists() else 0

    def _apply(self, cur: Any, op: dict) -> None:
        kind = op.get("t")
        if kind == "entries":
            self._apply_entries(cur, op)
        elif kind == "lineage":
            cur.execute(PG_LINEAGE_PUT, (op["ws"], json.dumps(op["data"], ensure_ascii=False)))
        elif kind == "manifest":
            cur.execute(PG_MANIFEST_PUT, (op["ws"], op["run"], json.dumps(op["row"], ensure_ascii=False, default=str)))
        elif kind == "window":
            cur.execute(PG_WINDOW_PUT, (op["key"], op["window"], op["source"]))
        elif kind == "note":
            cur.execute(PG_NOTE_PUT, (op["ws"], op["name"], op.get("body"), op.get("sha")))
        elif kind == "journal":
            cur.execute(PG_JOURNAL_PUT, (op["ws"], op["run"], op["lines"]))
        elif kind == "inbox_put":
            cur.execute(PG_INBOX_PUT, (op["ws"], op["what"], op["key"], op["body"]))
        elif kind == "inbox_drop":
            cur.execute(PG_INBOX_DROP, (op["ws"], op["what"], op["key"]))

    def _apply_entries(self, cur: Any, op: dict) -> None:
        """One batch: serialised per session (advisory transaction lock), summary folded, mtime
        strictly increasing, entries inserted in order and idempotent on uuid."""
        ws, pk, sid, sub, entries = op["ws"], op["pk"], op["sid"], op["sub"], op["entries"]
        cur.execute(PG_XACT_LOCK, (PG_LOCK_CLASS, f"{ws}/{pk}/{sid}/{sub}"))
        last = cur.execute(PG_BATCH_LAST, (ws, pk, sid, sub)).fetchone()
        mtime = max(int(time.time() * 1000), (last[1] + 1) if last else 0)
        summary = None
        if not sub:
            try:
                prev = json.loads(last[0]) if last and last[0] else None
            except ValueError:
                prev = None
            folded = _fold_summary(prev, {"project_key": op["key_pk"], "session_id": sid}, entries)
            if folded is not None:
                summary = _storable_json(dict(folded, mtime=mtime))
        args = {"ws": ws, "pk": pk, "sid": sid, "sub": sub, "mtime": mtime, "context": op.get("context"),
                "summary": summary}
        later = _pg_taken_from(cur, op) if op.get("before") else []
        later_uuids, later_payloads = [uid for _, uid, _ in later], [payload for _, _, payload in later]
        uuids, payloads = _entry_rows(entries)
        try:   # arrays go in binary (%b): the text format would escape every element
            cur.execute(PG_APPEND, dict(args, uuids=uuids + later_uuids, payloads=payloads + later_payloads))
        except UnicodeEncodeError:   # a lone surrogate: store that batch \u-escaped (same JSON values)
            uuids, payloads = _entry_rows(entries, ascii_only=True)
            cur.execute(PG_APPEND, dict(args, uuids=uuids + later_uuids, payloads=payloads + later_payloads))

    def _spooled(self, kind: str, **match: Any) -> list[dict]:
        """Waiting operations of one kind (and matching fields), oldest first."""
        if not self.spool.exists():
            return []
        return [op for op in self.spool.read()[1]
                if op.get("t") == kind and all(op.get(k) == v for k, v in match.items())]

    def _read(self, query: str, args: tuple) -> list[tuple]:
        return self._run(lambda cur: cur.execute(query, args).fetchall())

    # -- workspace snapshots: the newest few per workspace --

    def put_snapshot(self, data: bytes) -> None:
        """A row in ``flower.snapshots``; older than the newest few deleted (a lost connection raises
        Offline: a snapshot is not spooled, the next one is taken when the database is back)."""
        def put(cur: Any) -> None:
            cur.execute(PG_SNAPSHOT_PUT, (self.workspace_id, data))
            cur.execute(PG_SNAPSHOT_PRUNE, (self.workspace_id, self.workspace_id, SNAPSHOTS_KEPT))
        self._run(put)

    def latest_snapshot(self) -> bytes | None:
        """The newest snapshot row of this workspace."""
        rows = self._read(PG_SNAPSHOT_LAST, (self.workspace_id,))
        return bytes(rows[0][0]) if rows else None

    # -- lineage: one snapshot row per change, the newest wins --

    def lineage_latest(self) -> dict:
        """The newest lineage snapshot of this workspace ({} when none)."""
        waiting = self._spooled("lineage", ws=self.workspace_id)
        if waiting:
            return waiting[-1]["data"]
        rows = self._read(PG_LINEAGE_LAST, (self.workspace_id,))
        try:
            data = json.loads(rows[0][0]) if rows else {}
        except ValueError:
            data = {}
        return data if isinstance(data, dict) else {}

    def lineage_update(self, change: Callable[[dict], None], fallback: dict) -> dict:
        """Re-read the newest snapshot, ``change`` it and append the result (serialised per
        workspace). While the database is away the newest spooled snapshot (else ``fallback``) is
        changed and the result spooled."""
        def rmw(cur: Any) -> dict:
            cur.execute(PG_XACT_LOCK, (PG_LOCK_CLASS, f"{self.workspace_id}/lineage"))
            rows = cur.execute(PG_LINEAGE_LAST, (self.workspace_id,)).fetchall()
            try:
                data = json.loads(rows[0][0]) if rows else {}
            except ValueError:
                data = {}
            change(data if isinstance(data, dict) else {})
            cur.execute(PG_LINEAGE_PUT, (self.workspace_id, json.dumps(data, ensure_ascii=False)))
            return data
        with self._mutex:
            if not self.spool.exists():
                with contextlib.suppress(Offline):
                    return self._run(rmw)
            waiting = self._spooled("lineage", ws=self.workspace_id)
            data = json.loads(json.dumps(waiting[-1]["data"] if waiting else fallback))
            change(data)
            self.write({"t": "lineage", "ws": self.workspace_id, "data": data})
            return data

    def lineage(self, *, has_session: Callable[[str], bool] | None = None,
                notify: Callable[[str], None] | None = None, lang: str = "en") -> Lineage:
        """The workspace's lineage from the database (see :class:`PgLineage`)."""
        return PgLineage.load(self, has_session=has_session, notify=notify, lang=lang)

    def peek_lineage(self) -> dict:
        """The newest valid snapshot ({} when none or unreadable)."""
        data = self.lineage_latest()
        return data if _valid_lineage(data) else {}

    def blank_lineage(self) -> Lineage:
        """An empty lineage in the database (its writes re-read the newest snapshot)."""
        return PgLineage(self, {}, 0)

    def has_lineage(self) -> bool:
        """Whether the workspace has a lineage snapshot."""
        return bool(self.lineage_latest())

    def lineage_problems(self, lang: str = "en") -> list[str]:
        """The newest snapshot when it has the wrong shape."""
        data = self.lineage_latest()
        return [text("info_state_unreadable", lang, what="lineage", where=self.where())] \
            if data and not _valid_lineage(data) else []

    # -- manifest, windows --

    def manifest(self, run: str, *, notify: Callable[[str], None] | None = None, lang: str = "en") -> Manifest:
        """A manifest writer that appends row versions."""
        return PgManifest(self, run, notify=notify, lang=lang)

    def manifest_rows(self) -> list[dict]:
        """The newest version of every row, in first-seen order (spooled versions included)."""
        versions = []
        for (raw,) in self._read(PG_MANIFEST_ALL, (self.workspace_id,)):
            with contextlib.suppress(ValueError):
                versions.append(json.loads(raw))
        versions += [op["row"] for op in self._spooled("manifest", ws=self.workspace_id)]
        return [r for r in latest_rows(versions) if _valid_row(r)]

    def journal(self, run: str) -> Journal:
        """The journal writer of one run: a row per record."""
        return PgJournal(self, run)

    def journal_records(self) -> list[dict]:
        """Every journal record of this workspace, oldest first (spooled ones included)."""
        lines = [text for (text,) in self._read(PG_JOURNAL_ALL, (self.workspace_id,))]
        lines += [op["lines"] for op in self._spooled("journal", ws=self.workspace_id)]
        return Journal.parse(line for chunk in lines for line in chunk.split("\n"))

    def windows(self, *, notify: Callable[[str], None] | None = None) -> WindowBook:
        """Learned windows, shared by every workspace in the database (they belong to endpoint + model)."""
        return PgWindowBook(self, notify=notify)

    def window_get(self, key: str) -> dict:
        """The newest window record of ``key`` ({} when none)."""
        waiting = self._spooled("window", key=key)
        if waiting:
            return {"window": waiting[-1]["window"], "source": waiting[-1]["source"]}
        rows = self._read(PG_WINDOW_LAST, (key,))
        return {"window": rows[0][0], "source": rows[0][1]} if rows else {}

    # -- notes: the workspace files are the editable view; the database has every version --

    def note_versions(self) -> dict[str, tuple[str | None, str | None]]:
        """name -> (body, hash) of the newest version of every note (None body: deleted)."""
        found = {name: (body, sha) for name, body, sha in self._read(PG_NOTES_LAST, (self.workspace_id,))}
        for op in self._spooled("note", ws=self.workspace_id):
            found[op["name"]] = (op.get("body"), op.get("sha"))
        return found

    def _sync_base(self) -> dict:
        base = _peek_json(self.paths.run("notes-sync.json"))
        return base if isinstance(base, dict) else {}

    def _push_note(self, name: str, base: dict) -> None:
        body = _read_text(os.path.join(self.paths.notes_dir, name))
        sha = _sha(body) if body is not None else None
        self.write({"t": "note", "ws": self.workspace_id, "name": name, "body": body, "sha": sha})
        base[name] = sha

    def _pull_note(self, name: str, body: str | None) -> bool:
        path = os.path.normpath(os.path.join(self.paths.notes_dir, name))
        if _note_name(self.paths.notes_dir, path) is None:
            return False   # a name that would leave the notes directory is never written
        if body is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return True
        ensure_private_dir(os.path.dirname(path))
        atomic_write(path, body)
        return True

    def sync_notes(self, notify: Callable[[str], None] | None = None) -> None:
        """Three-way sync against the hashes of the last sync: a fresh checkout gets every note
        back; a file edited (or removed) by hand here wins and is written back; a file unchanged
        here takes the database's newer version."""
        versions = self.note_versions()
        base = self._sync_base()
        plan = sync_plan(_local_notes(self.paths.notes_dir), {n: v[1] for n, v in versions.items()}, base)
        restored = 0
        for name, way in plan.items():
            if way == "push":
                self._push_note(name, base)
            elif way == "pull" and self._pull_note(name, versions[name][0]):
                base[name] = versions[name][1]
                restored += versions[name][0] is not None
            else:
                base[name] = versions.get(name, (None, None))[1]
        write_json(self.paths.run("notes-sync.json"), base)
        if restored and notify:
            notify(text("info_notes_restored", n=restored, where=self.where()))

    def notes_changed(self, paths: Iterable[str]) -> None:
        """Append the current state of these note files (a missing file is a deletion)."""
        base = self._sync_base()
        for path in paths:
            name = _note_name(self.paths.notes_dir, path)
            if name:
                self._push_note(name, base)
        write_json(self.paths.run("notes-sync.json"), base)

    # -- the lock: a session-level advisory lock on its own connection --

    def try_lock(self, name: str, info: dict) -> bool:
        """Take lock ``name`` of this workspace (False when another flower, or this process, holds
        it) and record the holder's description."""
        return self.take(name, info) is None

    def take(self, name: str, info: dict) -> dict | None:
        """Take lock ``name``: None when taken, else why not: ``{"live": True}`` when a connected
        holder has its advisory lock, ``{"live": False, "lease": ...}`` when its lease is still fresh
        although nobody holds the advisory lock (a holder whose connection is gone, alive or not)."""
        with self._mutex:
            if self._lost is not None:
                raise self._lost
            if name in self._held or not self._try_lock(name):
                return {"live": True, "lease": self.lease(name, quiet=True)}
            holder, node = uuid.uuid4().hex, node_id()
            started = time.monotonic()

            def grab(cur: Any) -> bool:
                row = cur.execute(PG_LEASE_GET, (self.workspace_id, name)).fetchone()
                stale = row[0] if row and lease_stale(_lease_info(row[1]), node) else ""
                return cur.execute(PG_LEASE_TAKE, {
                    "ws": self.workspace_id, "lock": name, "holder": holder, "info": json.dumps(info),
                    "ttl": self.lease_ttl, "stale": stale}).fetchone() is not None
            try:
                got = self._run(grab)
            except FlowerError:
                self._unlock_advisory(name)
                raise
            if not got:
                self._unlock_advisory(name)
                return {"live": False, "lease": self.lease(name, quiet=True)}
            self._held[name], self._leases[name] = info, holder
            self._advisory.add(name)
            if len(self._leases) == 1:
                self._valid_until = started + self.lease_ttl * 5 / 6
            self.lock_note(name, info)
            if self._beat is None or not self._beat.is_alive():
                self._beat_stop = threading.Event()
                self._beat = threading.Thread(target=self._heartbeat, args=(self._beat_stop,),
                                              name="flower-lease", daemon=True)
                self._beat.start()
            return None

    def lease(self, name: str, quiet: bool = False) -> dict:
        """Lock ``name``'s lease: ``holder`` (id), ``info``, ``expires`` and ``left`` (seconds, by the
        database's clock); {} when there is none (or, ``quiet``, when the database cannot tell now)."""
        row = None
        for attempt in range(2):   # a connection the server dropped is only noticed when used: reconnect once
            try:
                row = self._run(lambda cur: cur.execute(PG_LEASE_GET, (self.workspace_id, name)).fetchone())
                break
            except Offline:
                if attempt and not quiet:
                    raise
                self._retry_at = 0.0
            except FlowerError:
                if not quiet:
                    raise
                break
        if not row:
            return {}
        return {"holder": row[0], "info": _lease_info(row[1]), "expires": row[2], "left": float(row[3] or 0)}

    def _unlock_advisory(self, name: str) -> None:
        self._advisory.discard(name)
        with contextlib.suppress(Exception):
            self._lock_conn.execute(PG_UNLOCK, (PG_LOCK_CLASS, f"{self.workspace_id}/{name}"))

    def _try_lock(self, name: str) -> bool:
        for attempt in range(2):   # a lock connection the server dropped is noticed here: reconnect once
            if self._lock_conn is None or self._lock_conn.closed or self._lock_conn.broken:
                self._lock_conn = self._connect()
            try:
                return bool(self._lock_conn.execute(PG_TRY_LOCK, (PG_LOCK_CLASS, f"{self.workspace_id}/{name}"))
                            .fetchone()[0])
            except self.pg.Error as exc:
                with contextlib.suppress(Exception):
                    self._lock_conn.close()
                self._lock_conn = None
                if attempt:
                    raise Offline(self._offline_line(exc)) from None
        return False

    def lock_note(self, name: str, info: dict) -> None:
        """Record what the holder of ``name`` is doing (best effort)."""
        with contextlib.suppress(FlowerError):
            self._run(lambda cur: cur.execute(PG_HOLDER_PUT, (self.workspace_id, name, json.dumps(info))))

    def lock_holder(self, name: str) -> dict:
        """The newest holder description of lock ``name`` ({} when unknown)."""
        try:
            rows = self._read(PG_HOLDER_LAST, (self.workspace_id, name))
            value = json.loads(rows[0][0]) if rows else {}
        except (FlowerError, ValueError):
            value = {}
        return value if isinstance(value, dict) else {}

    def unlock(self, name: str) -> None:
        """Let go of lock ``name`` (idempotent): its lease row is deleted (only if still this holder's)."""
        with self._mutex:
            self._held.pop(name, None)
            holder = self._leases.pop(name, None)
            if holder is not None and self._lost is None:
                with contextlib.suppress(FlowerError):
                    self._run(lambda cur: cur.execute(PG_LEASE_DROP, (self.workspace_id, name, holder)))
            self._unlock_advisory(name)

    def lock(self, name: str, what: str) -> DriverLock:
        """The database's lock ``name`` of this workspace."""
        return PgLock(self, name, what)

    # -- sessions --

    def session_store(self, create: bool = True) -> Any:
        """The Postgres SessionStore of this workspace (or the user's ``--store``)."""
        if self._store is None:
            self._store = load_store_factory(self._spec) if self._spec else \
                PostgresSessionStore(self, project_key(self.paths.workspace))
        return self._store

    # -- talking to the running job from any machine: rows of flower.inbox, and the local files too --

    def _leave(self, kind: str, key: str, body: str) -> None:
        """Leave a row for the running job, straight in the database (:class:`Offline` when it is
        away: a request left in this machine's spool would reach no other machine)."""
        self._run(lambda cur: cur.execute(PG_INBOX_PUT, (self.workspace_id, kind, key, body)))

    def _waiting(self, kind: str) -> list[tuple[str, str, float]]:
        """``(key, body, sent)`` of the rows of ``kind``, oldest first, less those whose deletion waits
        in the spool; [] when the database cannot tell now (the local files still speak)."""
        try:
            rows = self._read(PG_INBOX_LIST, (self.workspace_id, kind))
        except FlowerError:
            return []
        dropped = {op["key"] for op in self._spooled("inbox_drop", ws=self.workspace_id, what=kind)}
        return [(key, body, sent) for key, body, sent in rows if key not in dropped]

    def _polled(self, kind: str) -> list[tuple[str, str, float]]:
        """:meth:`_waiting` for the running job's polls (each answer, each tool batch): while the
        database is away they read nothing instead of reconnecting, which on a host that does not
        answer would hold the event loop for the connect timeout. The store's writes and
        :meth:`ready` bring the connection back."""
        if self._conn is None and self._retry_at:
            return []
        return self._waiting(kind)

    def _drop(self, kind: str, key: str) -> None:
        """Delete a row that was acted on (spooled while the database is away, like every write)."""
        with contextlib.suppress(FlowerError):
            self.write({"t": "inbox_drop", "ws": self.workspace_id, "what": kind, "key": key})

    def mailbox(self, inbox: Any) -> "PgMailbox":
        """The inbox files and the mail ``say --state`` left in the database from any machine."""
        return PgMailbox(self, inbox)

    def post_question(self, qid: str, question: str) -> None:
        """The question file, and a row so that ``answer --state`` on any machine finds it."""
        super().post_question(qid, question)
        with contextlib.suppress(FlowerError):
            self.write({"t": "inbox_put", "ws": self.workspace_id, "what": "question", "key": qid,
                        "body": json.dumps({"id": qid, "question": question, "asked": iso_now()}, ensure_ascii=False)})

    def questions_waiting(self) -> list[str]:
        """The questions of this machine's files and of the database."""
        return sorted(set(super().questions_waiting()) | {key for key, _, _ in self._waiting("question")})

    def post_answer(self, qid: str, words: str) -> None:
        """A row with the answer (redacted); the asking flower may run on another machine."""
        self._leave("answer", qid, redact(words))

    def answer_waiting(self, qid: str) -> str | None:
        """An answer file here, else the database's answer (None when neither has one)."""
        left = super().answer_waiting(qid)
        if left is not None:
            return left
        try:
            rows = self._read(PG_INBOX_GET, (self.workspace_id, "answer", qid))
        except FlowerError:
            return None
        return rows[0][0].strip() if rows and rows[0][0].strip() else None

    def close_question(self, qid: str) -> None:
        """The files and the rows of the question and its answer."""
        super().close_question(qid)
        self._drop("question", qid)
        self._drop("answer", qid)

    def post_handoff(self) -> str:
        """A handoff row: the flower that drives this workspace on any machine hands over."""
        self._leave("handoff", "", iso_now())
        return self.describe("handoff")

    def handoff_waiting(self) -> bool:
        """The flag file here, or a handoff row."""
        return super().handoff_waiting() or bool(self._polled("handoff"))

    def handoff_done(self) -> None:
        """The flag file and the row."""
        super().handoff_done()
        self._drop("handoff", "")


class PostgresSessionStore(SessionStoreContract):
    """The SDK ``SessionStore`` protocol on :class:`PostgresState`, plus flower's sync extras.

    Sessions are stored by workspace id: the SDK's ``project_key`` of this machine's workspace path
    maps to the workspace, so a session stored on machine A loads on machine B under B's path. Other
    project keys are kept as they are (the conformance suite uses several)."""

    threaded_load = pruned_load = catalog = True   # declared (see SessionStoreContract)
    sdk_optional = SDK_OPTIONAL

    def __init__(self, state: PostgresState, local_project_key: str):
        self.state = state
        self.local = local_project_key
        self.skipped: dict[str, int] = {}

    def _pk(self, project_key: str) -> str:
        return "" if project_key == self.local else project_key

    def _key(self, key: dict) -> tuple[str, str, str, str]:
        return self.state.workspace_id, self._pk(key["project_key"]), key["session_id"], key.get("subpath") or ""

    # -- sync core --

    def append_sync(self, key: dict, entries: list[dict]) -> None:
        """Append a batch (in order, idempotent on uuid); spooled locally while the database is away."""
        if not entries:
            return
        ws, pk, sid, sub = self._key(key)
        self.state.write({"t": "entries", "ws": ws, "pk": pk, "sid": sid, "sub": sub, "key_pk": key["project_key"],
                          "context": None if sub else entry_context(entries), "entries": entries})

    def insert_before_sync(self, key: dict, entries: list[dict], before: str) -> None:
        """Put ``entries`` just before the stored entry whose uuid is ``before`` (at the end when there is
        none), in one transaction: the rows from that entry on are taken out and put back after them,
        as they were (duplicates by uuid are ignored, as by an append). While the database is away the
        operation waits in the spool, in order, and is put in its place when written; until then a
        load shows its entries after the stored ones."""
        if not entries:
            return
        ws, pk, sid, sub = self._key(key)
        self.state.write({"t": "entries", "ws": ws, "pk": pk, "sid": sid, "sub": sub, "key_pk": key["project_key"],
                          "context": None, "entries": entries, "before": before})

    def load_sync(self, key: dict) -> list[dict] | None:
        """All entries of ``key`` in append order (spooled ones included), None when never written."""
        rows, waiting = self._stored(key)
        bad = [0]
        with _gc_paused():
            entries = list(_and_spooled(_parsed_payloads(rows, bad), waiting))
        self.skipped[f"{key['project_key']}/{key['session_id']}"] = bad[0]
        return entries if entries or bad[0] else None

    def load_pruned(self, key: dict, policy: PrunePolicy | None = None,
                    estimate: bool = False) -> tuple[list[dict], PruneReport] | None:
        """``_prune`` of the session with ``policy`` (None when never written), fed a batch at a time: each
        entry is indexed soon after it is parsed, while it is fresh in the CPU cache (parsing all first, then
        pruning, walks them again once they are cold). Rows are skipped and counted as by
        :meth:`load_sync`. ``estimate``: as for :func:`_prune`."""
        rows, waiting = self._stored(key)
        if not rows and not any(op["entries"] for op in waiting):   # as load_sync tells it
            self.skipped[f"{key['project_key']}/{key['session_id']}"] = 0
            return None
        bad = [0]
        with _gc_paused():
            done = _prune(_and_spooled(_parsed_payloads(rows, bad), waiting), policy or PrunePolicy(), True,
                          estimate=estimate)
        self.skipped[f"{key['project_key']}/{key['session_id']}"] = bad[0]
        return done

    def _stored(self, key: dict) -> tuple[list[tuple], list[dict]]:
        """The session's rows in the database, then its operations still waiting in the spool."""
        ws, pk, sid, sub = self._key(key)
        rows = self.state._read(PG_LOAD, (ws, pk, sid, sub))
        return rows, self.state._spooled("entries", ws=ws, pk=pk, sid=sid, sub=sub)

    # -- the SDK SessionStore protocol --

    async def append(self, key: dict, entries: list[dict]) -> None:
        """Mirror a batch of transcript entries (SDK protocol)."""
        import asyncio
        await asyncio.to_thread(self.append_sync, key, entries)

    async def load(self, key: dict) -> list[dict] | None:
        """Load a whole session for resume (SDK protocol)."""
        import asyncio
        return await asyncio.to_thread(self.load_sync, key)

    async def list_sessions(self, project_key: str) -> list[dict]:
        """Main sessions of a project with their mtimes in epoch ms (SDK protocol)."""
        rows = self.state._read(PG_LIST_SESSIONS, (self.state.workspace_id, self._pk(project_key)))
        return [{"session_id": sid, "mtime": int(mtime)} for sid, mtime in rows]

    async def list_session_summaries(self, project_key: str) -> list[dict]:
        """The folded summaries of a project's sessions (SDK protocol)."""
        rows = self.state._read(PG_LIST_SUMMARIES, (self.state.workspace_id, self._pk(project_key)))
        return [json.loads(summary) for (summary,) in rows if summary]

    async def delete(self, key: dict) -> None:
        """Delete a session; a main key takes its subpaths with it (SDK protocol)."""
        ws, pk, sid, sub = self._key(key)

        def work(cur: Any) -> None:
            cur.execute(PG_DELETE_ENTRIES, (ws, pk, sid, sub, not sub))
            cur.execute(PG_DELETE_BATCHES, (ws, pk, sid, sub, not sub))
        self.state._run(work)

    async def list_subkeys(self, key: dict) -> list[str]:
        """Subpaths stored under a session (SDK protocol)."""
        ws, pk, sid, _ = self._key(key)
        return [sub for (sub,) in self.state._read(PG_LIST_SUBKEYS, (ws, pk, sid))]

    # -- sync extras --

    def has_session(self, project_key: str, session_id: str) -> bool:
        """True when the main transcript holds at least one entry (in the database or the spool)."""
        ws, pk = self.state.workspace_id, self._pk(project_key)
        if self.state._spooled("entries", ws=ws, pk=pk, sid=session_id, sub=""):
            return True
        return bool(self.state._read(PG_HAS_SESSION, (ws, pk, session_id))[0][0])

    def last_context(self, project_key: str, session_id: str) -> int | None:
        """Context tokens of the session's last real main-thread assistant entry (None if unknown)."""
        rows = self.state._read(PG_LAST_CONTEXT, (self.state.workspace_id, self._pk(project_key), session_id))
        return int(rows[0][0]) if rows and rows[0][0] else None

    def sessions(self, project_key: str | None = None) -> list[dict]:
        """Main sessions of this workspace (newest first): project_key, session_id, mtime, entries, context."""
        pk = self._pk(project_key) if project_key else ""
        rows = self.state._read(PG_SESSIONS, (self.state.workspace_id, pk, project_key is None))
        return [{"project_key": p or self.local, "session_id": s, "mtime": int(m), "context": c, "entries": n}
                for p, s, m, c, n in rows]

    def integrity(self) -> str:
        """"ok" when the database answers."""
        self.state._run(lambda cur: cur.execute("SELECT 1"))
        return "ok"

    def close(self) -> None:
        """Nothing to do: the connection belongs to the state backend."""


class PgLineage(Lineage):
    """Lineage in the database: one snapshot per change, the newest wins. The workspace is known by
    its id, so a checkout at another path continues it; ``moved_from`` then names the old path."""

    def __init__(self, state: PostgresState, steps: dict[str, str], woke: int, starts: dict | None = None,
                 gone: dict | None = None, moved_from: str | None = None):
        super().__init__(None, state.paths.workspace, steps, woke, starts, gone, where=state.describe("lineage"))
        self.state = state
        self.moved_from = moved_from

    @classmethod
    def load(cls, state: PostgresState, *, has_session: Callable[[str], bool] | None = None,
             notify: Callable[[str], None] | None = None, lang: str = "en") -> "PgLineage":
        """The newest snapshot, store-checked like :meth:`Lineage.open`."""
        data = state.lineage_latest()
        if data and not _valid_lineage(data):
            if notify:
                notify(text("info_state_unreadable", lang, what="lineage", where=state.where()))
            data = {}
        old = data.get("workspace")
        moved = old if data.get("steps") and isinstance(old, str) and old != state.paths.workspace else None
        lineage = cls(state, *cls.resolve(data, has_session, notify, lang), moved_from=moved)
        lineage.achieved = data.get("achieved")
        lineage.task, lineage.wake = task_of(data), wake_of(data)
        return lineage

    def _update(self, change: Callable[[dict], None]) -> None:
        fallback = {"workspace": self.workspace, "woke": self.woke, "steps": dict(self.steps),
                    "starts": dict(self.starts), "achieved": self.achieved, "wake": self.wake,
                    "task": {"text": self.task} if self.task else None}

        def apply(data: dict) -> None:
            data.setdefault("steps", {})
            data.setdefault("starts", {})
            self._owed(data)
            change(data)
            data["workspace"] = self.workspace
        data = self.state.lineage_update(apply, fallback)
        self.due = {}
        self.steps, self.starts, self.woke = dict(data["steps"]), dict(data["starts"]), data.get("woke", 0)
        self.achieved = data.get("achieved")
        self.task, self.wake = task_of(data), wake_of(data)

    def archive(self, into: str, extra: Iterable[str] = ()) -> list[str]:
        """Write the current snapshot as ``lineage.json`` into ``into``, move ``extra`` there, and
        start a new, empty lineage."""
        ensure_private_dir(into)
        moved = []
        snapshot = self.state.lineage_latest()
        if snapshot:
            target = os.path.join(into, "lineage.json")
            write_json(target, snapshot)
            moved.append(target)
        for path in extra:
            if path and os.path.exists(path):
                target = os.path.join(into, os.path.basename(path))
                os.replace(path, target)
                moved.append(target)
        empty = {"workspace": self.workspace, "woke": 0, "steps": {}, "starts": {}}
        self.state.lineage_update(lambda d: (d.clear(), d.update(empty)), empty)
        self.steps, self.woke, self.starts, self.gone, self.moved_from, self.due = {}, 0, {}, {}, None, {}
        self.task = self.wake = None
        return moved


class PgManifest(Manifest):
    """Manifest rows in the database: every ``put`` appends the row's new version."""

    def __init__(self, state: PostgresState, run: str, notify: Callable[[str], None] | None = None,
                 lang: str = "en"):
        super().__init__(state.paths.run_dir, run, notify=notify, lang=lang)
        self.state = state
        self.path, self.where = None, state.describe("manifest")

    def put(self, row: dict) -> None:
        """Remember the row and append it."""
        self._remember(row)
        self.state.write({"t": "manifest", "ws": self.state.workspace_id, "run": self.run,
                          "row": {"run": self.run, **{k: v for k, v in row.items() if k != "run"}}})

    def flush(self) -> None:
        """Nothing to do: every row was written when it was put."""


class PgWindowBook(WindowBook):
    """Learned context windows in the database (appended records, the newest wins)."""

    def __init__(self, state: PostgresState, notify: Callable[[str], None] | None = None):
        super().__init__(state.paths.run_dir, notify=notify)
        self.state = state
        self.path, self.where = None, state.describe("window")

    def get(self, model: str | None) -> int | None:
        """The learned window for ``model``, if any (None when the database cannot tell now)."""
        try:
            value = self.state.window_get(self._key(model)).get("window")
        except FlowerError:
            return None
        return value if isinstance(value, int) and value >= MIN_WINDOW else None

    def _put(self, model: str | None, window: int, source: str, lower_only: bool) -> None:
        key = self._key(model)
        try:
            current = self.state.window_get(key)
        except Offline:   # what was learned (an overflow, most often) is spooled like every other write
            current = {}
        record = self.rule(current, window, source, lower_only)
        if record is not None:
            self.state.write({"t": "window", "key": key, "window": record["window"], "source": record["source"]})


class PgLock(DriverLock):
    """A driver lock across machines: a lease the holder renews plus a session-level advisory lock
    (see :class:`PostgresState`). A connected holder refuses a newcomer at once; a lease whose
    holder's connection is gone is waited out: renewed (a live holder) is :class:`Busy`, lapsed
    (or its holder known dead on this machine) is taken. Same :class:`Busy`, exit code and message
    as the local lock."""

    def __init__(self, state: PostgresState, name: str, what: str):
        super().__init__(state.describe(name), what, state.paths.workspace)
        self.state = state
        self.name = name
        self._held = False

    def acquire(self, step: str = "") -> "PgLock":
        """Take the lock or raise :class:`Busy` naming the holder (after waiting, with one line, for
        a lease whose holder lost its connection to be renewed or to lapse)."""
        info = {"pid": os.getpid(), "host": socket.gethostname(), "path": self.workspace, "since": iso_now(),
                "what": self.what, "step": step, "node": node_id()}
        first: dict = {}
        deadline = 0.0
        while True:
            refused = self.state.take(self.name, info)
            if refused is None:
                break
            lease = refused.get("lease") or {}
            renewed = bool(first) and lease.get("expires") != first.get("expires")
            if refused["live"] or not lease or renewed or (bool(first) and time.monotonic() > deadline):
                holder = lease.get("info") or self.holder()
                raise Busy(self.busy_line(holder), holder)
            if not first:
                first, deadline = lease, time.monotonic() + lease["left"] + 2.0
                if self.state.notify is not None:
                    who = lease["info"]
                    self.state.notify(text("info_lease_wait", self.state.paths.lang, what=self.what,
                                           pid=who.get("pid", "?"), host=who.get("host", "?"),
                                           seconds=int(lease["left"]) + 1))
            time.sleep(min(1.0, max(0.1, deadline - time.monotonic())))
        self._held, self.info = True, info
        return self

    def set_step(self, step: str) -> None:
        """Say which step the holder is in now."""
        if self._held and self.info.get("step") != step:
            self.info["step"] = step
            self.state.lock_note(self.name, self.info)

    def holder(self) -> dict:
        """The current holder's description."""
        return self.state.lock_holder(self.name)

    def release(self) -> None:
        """Let go (idempotent); the server does the same when the connection dies."""
        if self._held:
            self._held = False
            self.state.unlock(self.name)


class PgMailbox:
    """Mail for the running job in the database as well as in the workspace's inbox files (an
    :class:`Inbox`, passed in): ``say --state`` on any machine leaves a row, and the flower that
    drives the workspace, on any machine, finds rows and files alike; a mail's row is deleted once
    the store recorded the request that carried it, as its file is."""

    def __init__(self, state: PostgresState, inbox: Any):
        self.state = state
        self.inbox = inbox

    def post(self, words: str) -> str:
        """Leave one mail in the database; returns its id (the form of an inbox file's name)."""
        mail_id = f"{time.time_ns():019d}-{uuid.uuid4().hex[:8]}"
        self.state._leave("mail", mail_id, redact(words).strip()[:MAX_PROMPT_BYTES])
        return mail_id

    def pending(self) -> list[Mail]:
        """Every mail not yet delivered, files and rows, oldest first (rows in the database's order)."""
        rows = [Mail(key, redact(body).strip(), sent) for key, body, sent in self.state._polled("mail")]
        return sorted(self.inbox.pending() + [m for m in rows if m.words], key=lambda m: m.sent)

    def done(self, mail_id: str) -> None:
        """Forget a delivered mail: its file, its row."""
        self.inbox.done(mail_id)
        self.state._drop("mail", mail_id)


# --- Deferred spill: a huge tool output's file is redacted and written off the agent's path ---
#
# Redacting a 5 MB log costs several times writing it, and hashing it as much again: a write-time spill
# of an output that long hands the agent its pointer at once (a name of its own, the head redacted from
# the first lines alone) and redacts and writes the file in a thread of its own. Every tool call waits,
# before it runs, for the files still being written (spill_wait_hook), so a Read of one finds it whole;
# the threads are not daemons, so a process that ends normally writes its files first.

SPILL_DEFER_AT = 1 << 18   # from this many chars a write-time spill's file is written off the agent's path
SPILL_HEAD_LINES = 1 << 16   # the head is redacted from whole lines: one must end this soon after it
SPILL_DEFER_WAIT = 0.05   # the agent's path goes first: a redaction holds the interpreter lock in long stretches


def redacted_head(full: str, head: int, secrets: list[str]) -> str | None:
    """``redact(full, secrets)[:head]``, from a prefix of whole lines: after the credentials' values and
    the key blocks, every rule looks at one line at a time, so the redaction of the first lines is the
    start of the text's. None where a prefix cannot tell: a key block begins in it, a credential's value
    spans lines, or no line ends within SPILL_HEAD_LINES chars of where one is wanted."""
    if any("\n" in secret for secret in secrets):
        return None
    want = head
    while True:
        cut = full.find("\n", want, want + SPILL_HEAD_LINES)
        if cut < 0:
            return None
        prefix = full[:cut + 1]
        if any(marker in prefix for marker, _ in _BLOCKS):
            return None
        clean = redact(prefix, secrets)
        if len(clean) >= head:
            return clean[:head]
        want = cut + 1 + head - len(clean)   # what redaction took away is looked for further on


def spill_later(spill_dir: str, full: str, head: int) -> tuple[str, str] | None:
    """Start writing the redacted ``full`` to a new file of ``spill_dir`` in a thread of its own; (its
    path, its first ``head`` chars redacted), or None when the head cannot be told from the first lines
    (see :func:`redacted_head`: the caller then spills it in place)."""
    secrets = _env_secrets()
    shown = redacted_head(full, head, secrets)
    if shown is None:
        return None
    ensure_private_dir(spill_dir)
    path = os.path.join(spill_dir, uuid.uuid4().hex[:16] + ".txt")   # not the text's hash: it costs as much as a write
    spill_writer("flower-spill", [path], SPILL_DEFER_WAIT,
                 lambda: atomic_write(path, redact(full, secrets).encode("utf-8", "surrogatepass")))
    return path, shown


def wait_spills(timeout: float | None = None) -> None:
    """Wait until the spill files being written now are written. A writer that still lets its caller go
    first (SPILL_DEFER_WAIT, SPILL_LOAD_WAIT) starts at once: whoever waits here has nothing else to do."""
    writers = set(_SPILL_WRITERS.values())
    for writer in writers:
        hurry = getattr(writer, "hurry", None)
        if hurry is not None:
            hurry.set()
    for writer in writers:
        writer.join(timeout)


# How long the CLI lets the spill wait hold a tool call (the matcher's timeout; the SDK's default is 60 s).
# Past it the CLI does not run the tool and tells the model its hook did not respond (verified on the
# bundled CLI: tests/test_e2e_hook_timeout.py): far above what writing any load's files takes.
SPILL_WAIT_TIMEOUT = 3600.0


def spill_wait_hook() -> Callable[[dict, Any, Any], Awaitable[dict]]:
    """The PreToolUse hook that holds a tool call until the spill files being written are written
    (``timeout``: see SPILL_WAIT_TIMEOUT)."""
    async def wait(data: Any, tool_use_id: Any, context: Any) -> dict:
        if _SPILL_WRITERS:
            import asyncio
            await asyncio.to_thread(wait_spills)
        return {}
    wait.timeout = SPILL_WAIT_TIMEOUT
    wait.waits_for_spills = True   # see waits_for_spills
    return wait


def spill_waits(spec: Any) -> dict[str, list[tuple]]:
    """The hooks a delegating session gets (a Runtime's first hook source): each tool call, the main
    thread's or a worker's, waits for the spill files still being written (see :func:`spill_wait_hook`),
    a load's or a tool output's, so its first query need not. A session without workers gets none: it
    waits once, before its first query. A hook the CLI calls before every tool is one more call that
    fails at once when flower is killed, after which the CLI sends its next request before the guard
    stops it (a request nobody keeps); a coordinator's tools wait anyway (its rules hook)."""
    return {"PreToolUse": [(None, spill_wait_hook())]} if getattr(spec, "agents", None) else {}


def waits_for_spills(options: Any) -> bool:
    """Whether a connection's tool calls wait for the spill files being written (``options``: its
    ``ClaudeAgentOptions``, whose PreToolUse matchers hold :func:`spill_wait_hook`'s hook)."""
    return any(getattr(hook, "waits_for_spills", False)
               for matcher in (getattr(options, "hooks", None) or {}).get("PreToolUse", [])
               for hook in getattr(matcher, "hooks", []))


# --- Delegation: coordinator and workers, spill at write time, the workbench ---
#
# Verified on the real CLI (tests/test_e2e_delegation.py): a PostToolUse ``updatedToolOutput`` in the
# tool's own shape replaces a built-in tool's output before the model sees it; PreToolUse sees
# ``agent_id`` inside a subagent and can deny there with a reason; a PreToolUse ``updatedInput`` on
# Agent reaches the subagent's prompt (and ``run_in_background`` there is honoured); subagent
# transcripts reach the session store under ``subagents/agent-<id>`` subpaths. Hooks are session-wide:
# they run for the main thread and for every worker.

SPILL_AT = 4000      # a tool output this long or longer goes to a file as it is written
SPILL_HEAD = 400     # what of it stays in the context, after the pointer
SPILL_MATCHER = "Bash|Read|Grep|Glob|WebFetch"
# TodoWrite: the CLI of SDK 0.2.189 has none and leaves the name out; a CLI that has it offers it
COORDINATOR_TOOLS = ["Agent", "TodoWrite", "Read", "Glob", "Grep", "Bash"]
WORKER_TOOLS = ["Read", "Write", "Edit", "Bash", "Glob", "Grep"]
MAIN_THREAD_WRITERS = ("Write", "Edit", "NotebookEdit")
WORKER_NAME = "worker"
WORKBENCH_PARTS = ("scripts", "artifacts", "notes")
_DESC_LINE = _lazy_re(r"^\s*(?:#|//|--|;|/\*|<!--)\s*desc:\s*(.+?)\s*(?:\*/|-->)?\s*$", re.IGNORECASE)
_COMMENT_LINE = _lazy_re(r"^\s*(?:#+|//|--|;|/\*|<!--|\"\"\"|''')\s*(.*?)\s*(?:\*/|-->|\"\"\"|''')?\s*$")


@record
class WorkerAgent:
    """A worker as the SDK's ``AgentDefinition`` wants it (the SDK turns it into a dict with
    ``dataclasses.asdict``, so flower needs no SDK import to define one)."""

    description: str
    prompt: str
    tools: list[str] | None = None
    model: str | None = None


def main_thread_denial(data: Any, lang: str = "en") -> str | None:
    """Why the coordinator (the main thread: no ``agent_id`` in the hook input) may not make this call,
    or None when it may: Write, Edit, NotebookEdit and a Bash command that is not read-only belong to
    a worker."""
    if not isinstance(data, dict) or data.get("agent_id"):
        return None
    name = data.get("tool_name")
    if name == "Bash":
        command = (data.get("tool_input") or {}).get("command")
        if isinstance(command, str) and is_read_only_command(command):
            return None
    elif name not in MAIN_THREAD_WRITERS:
        return None
    return text("delegate_denied", lang, tool=name)


def spill_text(name: Any, response: Any) -> str | None:
    """The text a tool's output puts before the model, for the tools spill knows; None for another
    tool or shape (that output is left alone)."""
    if not isinstance(response, dict):
        return None
    if name == "Bash":
        out, err = response.get("stdout"), response.get("stderr")
        if isinstance(out, str) and isinstance(err, str):
            return out + ("\n" + err if err else "")
    elif name == "Read":
        file = response.get("file")
        if response.get("type") == "text" and isinstance(file, dict) and isinstance(file.get("content"), str):
            return file["content"]
    elif name in ("Grep", "Glob"):
        if isinstance(response.get("content"), str) and response["content"]:
            return response["content"]
        names = response.get("filenames")
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return "\n".join(names)
    elif name == "WebFetch" and isinstance(response.get("result"), str):
        return response["result"]
    return None


def full_output(name: Any, response: Any, limit: int = 64 << 20) -> str | None:
    """:func:`spill_text`, whole: the CLI cuts a big Bash output to 30,000 chars and keeps the whole
    of it in a file of its own (``persistedOutputPath``, in its config folder, unredacted, gone with
    a resume's temporary folder), which is read back here."""
    kept = response.get("persistedOutputPath") if isinstance(response, dict) and name == "Bash" else None
    if isinstance(kept, str) and kept:
        try:
            with open_regular(kept, "rb") as fh:
                return fh.read(limit).decode("utf-8", "replace")
        except OSError:
            pass
    return spill_text(name, response)


def with_pointer(name: str, response: dict, pointer: str) -> dict:
    """``response`` with its text replaced by ``pointer``, in the tool's own output shape (the CLI keeps
    the original output when the shape does not match)."""
    out = dict(response)
    if name == "Bash":
        out.update(stdout=pointer, stderr="")
        out.pop("persistedOutputPath", None)
        out.pop("persistedOutputSize", None)
    elif name == "Read":
        out["file"] = {**response["file"], "content": pointer, "numLines": pointer.count("\n") + 1}
    elif name in ("Grep", "Glob") and isinstance(response.get("content"), str) and response["content"]:
        out["content"] = pointer
    elif name in ("Grep", "Glob"):
        out["filenames"] = [pointer]
    else:
        out["result"] = pointer
    return out


def _under(path: Any, folder: str) -> bool:
    if not isinstance(path, str) or not path:
        return False
    real = os.path.realpath(path)
    return real == folder or real.startswith(os.path.join(folder, ""))


def spill_output(spill_dir: str, name: str, response: Any, *, lang: str = "en", at: int = SPILL_AT,
                 head: int = SPILL_HEAD) -> dict | None:
    """Spill one big tool output: its redacted text goes to ``spill_dir`` under its content hash, and
    the replacement output (a pointer plus its first ``head`` chars) is returned; None when it is small,
    of a shape spill does not know, or the file cannot be written (then load-time trim is the fallback)."""
    full = full_output(name, response)
    if full is None or len(full) < at:
        return None
    try:
        placed = spill_later(spill_dir, full, head) if len(full) >= SPILL_DEFER_AT else None
        path, shown = placed or _spill_now(spill_dir, full, head)
    except OSError:
        return None
    pointer = text("spilled_output", lang, n=len(full), path=path, k=min(head, len(shown)), head=shown)
    return with_pointer(name, response, pointer)


def _spill_now(spill_dir: str, full: str, head: int) -> tuple[str, str]:
    """Write the redacted ``full`` under its content hash; (its path, its first ``head`` chars)."""
    clean = redact(full)
    path = os.path.join(spill_dir, hashlib.sha256(clean.encode("utf-8", "surrogatepass")).hexdigest()[:16] + ".txt")
    ensure_private_dir(spill_dir)
    if not os.path.exists(path):
        atomic_write(path, clean.encode("utf-8", "surrogatepass"))
    return path, clean[:head]


def spill_hook(paths: "Paths", lang: str = "en") -> Callable[[dict, Any, Any], Awaitable[dict]]:
    """The PostToolUse hook that spills big outputs as they are written (see :func:`spill_output`); a
    Read of a spill file is never spilled again."""
    async def spill(data: dict, tool_use_id: Any, context: Any) -> dict:
        if not isinstance(data, dict):
            return {}
        name = data.get("tool_name")
        folder = os.path.realpath(paths.spill_dir)
        if name == "Read" and _under((data.get("tool_input") or {}).get("file_path"), folder):
            return {}
        replaced = spill_output(folder, name, data.get("tool_response"), lang=lang)
        if replaced is None:
            return {}
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": replaced}}
    return spill


def rules_hook(lang: str = "en") -> Callable[[dict, Any, Any], Awaitable[dict]]:
    """The PreToolUse hook that keeps the coordinator's hands off (see :func:`main_thread_denial`)."""
    async def rules(data: dict, tool_use_id: Any, context: Any) -> dict:
        why = main_thread_denial(data, lang)
        if why is None:
            return {}
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                       "permissionDecisionReason": why}}
    return rules


def agent_call_input(tool_input: Any, rules: str) -> dict:
    """An Agent call's input with the workbench rules added to its prompt (once), run in the
    foreground (a worker's result comes back inside the call, and a handoff waits for it), and given
    to the worker when it names no agent type."""
    call = dict(tool_input) if isinstance(tool_input, dict) else {}
    prompt = str(call.get("prompt") or "")
    if rules not in prompt:
        call["prompt"] = f"{prompt}\n\n{rules}" if prompt else rules
    call["run_in_background"] = False
    if not call.get("subagent_type"):
        call["subagent_type"] = WORKER_NAME   # the CLI's default type is denied to the coordinator
    return call


def agent_call_hook(paths: "Paths", lang: str = "en") -> Callable[[dict, Any, Any], Awaitable[dict]]:
    """The PreToolUse hook on Agent: every worker gets the workbench rules from flower itself."""
    async def on_agent(data: dict, tool_use_id: Any, context: Any) -> dict:
        if not isinstance(data, dict) or data.get("tool_name") not in AGENT_TOOLS:
            return {}
        rules = text("workbench_rules", lang, root=paths.workbench_dir)
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                       "updatedInput": agent_call_input(data.get("tool_input"), rules)}}
    return on_agent


WORKER_API_ERROR = "Agent terminated early due to an API error"   # the CLI's words when a worker's retries ran out


def worker_error_hook(lang: str = "en") -> Callable[[dict, Any, Any], Awaitable[dict]]:
    """PostToolUse and PostToolUseFailure on Agent: a worker the CLI ended on an API error (its own
    retries spent) comes back as that error and the worker's last words ("doing step 3 now") although
    its tools ran. The coordinator is told to look at the disk instead: a result with partial output
    is replaced by flower's neutral one; a failed call keeps the CLI's error and gets it as context."""
    async def on_result(data: dict, tool_use_id: Any, context: Any) -> dict:
        if not isinstance(data, dict) or data.get("tool_name") not in AGENT_TOOLS:
            return {}
        said = text("worker_api_error", lang)
        if data.get("hook_event_name") == "PostToolUseFailure":
            if WORKER_API_ERROR not in str(data.get("error") or ""):
                return {}
            return {"hookSpecificOutput": {"hookEventName": "PostToolUseFailure", "additionalContext": said}}
        response = data.get("tool_response")
        content = response.get("content") if isinstance(response, dict) else None
        if not (isinstance(content, list) and content and block_text(content[0]).lstrip().startswith(WORKER_API_ERROR)):
            return {}
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse",
                                       "updatedToolOutput": dict(response, content=[{"type": "text", "text": said}])}}
    return on_result


def workbench_refresh_hook(paths: "Paths") -> Callable[[dict, Any, Any], Awaitable[dict]]:
    """The PostToolUse hook on Write and Edit: a file written inside the workbench refreshes its index."""
    async def refresh(data: dict, tool_use_id: Any, context: Any) -> dict:
        path = (data.get("tool_input") or {}).get("file_path") if isinstance(data, dict) else None
        if _under(path, os.path.realpath(paths.workbench_dir)):
            try:
                refresh_workbench(paths)
            except OSError:
                pass   # the index is refreshed again before the next step
        return {}
    return refresh


def describe_file(head: str) -> str:
    """A workbench file's description: its ``# desc:`` line, else its first comment (a shebang is not
    one), else ""."""
    comment = ""
    for line in head.splitlines()[:40]:
        found = _DESC_LINE.match(line)
        if found:
            return found.group(1)[:200]
        if not comment and not line.startswith("#!"):
            found = _COMMENT_LINE.match(line)
            comment = found.group(1)[:200] if found and found.group(1) else ""
    return comment


def workbench_index(root: str, files: dict[str, str]) -> str:
    """INDEX.md of the workbench at ``root``: one line per file (``files``: path relative to the root ->
    its first KB), grouped by part. Pure."""
    lines = [f"# Workbench index ({root})"]
    for part in WORKBENCH_PARTS:
        mine = sorted(p for p in files if p.startswith(part + "/"))
        lines.append(f"\n## {part}")
        lines += [f"- {p}" + (f" — {describe_file(files[p])}" if describe_file(files[p]) else "") for p in mine] \
            or ["- (none)"]
    return "\n".join(lines) + "\n"


def _workbench_files(root: str, limit: int = 500) -> dict[str, str]:
    files: dict[str, str] = {}
    for part in WORKBENCH_PARTS:
        for folder, dirs, names in os.walk(os.path.join(root, part)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                path = os.path.join(folder, name)
                if len(files) >= limit or not os.path.isfile(path):
                    continue
                try:
                    with open(path, "rb") as fh:
                        files[os.path.relpath(path, root)] = fh.read(1024).decode("utf-8", "replace")
                except OSError:
                    continue
    return files


def refresh_workbench(paths: "Paths") -> str:
    """Make the workbench's folders (0700) and rewrite its INDEX.md when it changed; return the index."""
    root = paths.workbench_dir
    for part in WORKBENCH_PARTS:
        ensure_private_dir(os.path.join(root, part))
    index = workbench_index(root, _workbench_files(root))
    if _read_text(paths.workbench_index) != index:
        atomic_write(paths.workbench_index, index)
    return index


def workbench_prompt(paths: "Paths", lang: str = "en") -> str:
    """The workbench part of a session's first user message: its index, refreshed now."""
    try:
        index = refresh_workbench(paths)
    except OSError:
        return ""
    return text("workbench_prompt", lang, index=index.strip())


def workbench_carry(paths: "Paths", lang: str = "en") -> str:
    """The workbench part of a handoff carry ("" when this workspace has no workbench)."""
    if not os.path.isdir(paths.workbench_dir):
        return ""
    return "\n" + workbench_prompt(paths, lang)


def workbench_pointers(paths: "Paths", limit: int = 30) -> list[str]:
    """Pointer lines for a degraded ledger: the workbench's INDEX.md and its files (at most ``limit``,
    the rest counted); [] when this workspace has no workbench."""
    if not os.path.isdir(paths.workbench_dir):
        return []
    try:
        refresh_workbench(paths)
        files = sorted(_workbench_files(paths.workbench_dir))
    except (OSError, FlowerError):
        return []
    lines = [f"- workbench index: {paths.workbench_index}"]
    lines += [f"- workbench: {os.path.join(paths.workbench_dir, name)}" for name in files[:limit]]
    if len(files) > limit:
        lines.append(f"- workbench: {len(files) - limit} more files, listed in the index")
    return lines


def worker(*, lang: str = "en", model: str | None = None, tools: list[str] | None = None) -> WorkerAgent:
    """The worker: an SDK subagent with hands (Read, Write, Edit, Bash, Glob, Grep), the coordinator's
    model unless ``model``, told to report briefly and leave long outputs in the workbench."""
    return WorkerAgent(description=text("worker_description", lang), prompt=text("worker_instructions", lang),
                       tools=list(tools or WORKER_TOOLS), model=model or "inherit")


# What the CLI puts before every coordinator request that the coordinator cannot use, measured on the
# real CLI (tests/test_coordinator_context.py): the auto-memory section of the system prompt (~530
# tokens, and it tells the coordinator to Write, which the rules hook denies it), the CLI's own agent
# types in the agent listing and "fork" in the Agent tool's text (~470 tokens; a coordinator delegates
# to flower's worker, whose instructions keep reports short; a call that names no type goes to the
# worker), a "the user hasn't heard from you" reminder every few turns (flower reports progress), and
# the CLI's background tasks (~340 tokens): flower runs every Agent call in the foreground, so without
# them the Agent tool's text says what happens ("the agent's final message is returned to you as the
# tool result") instead of "subagents run in the background by default"; a worker's own background
# command was stopped when it reported anyway, and a shell's ``cmd &`` still works inside a worker.
# What it cannot cut: the session's tool list binds the workers too (a Write left out of ``tools`` is
# "disabled for this session, in subagents as well"), and the CLI frames each worker's report in a
# fixed hand-back text after the PostToolUse hooks have run.
COORDINATOR_ENV = {"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1", "CLAUDE_CODE_SILENT_TURN_REMINDER": "0",
                   "CLAUDE_CODE_FORK_SUBAGENT": "0", "CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1"}
CLI_AGENT_TYPES = ("general-purpose", "claude", "statusline-setup", "Explore", "Plan")


def coordinator_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The CLI settings of a coordinator's session (``COORDINATOR_ENV``), except those the user has
    set in ``env`` (default ``os.environ``): theirs win."""
    env = os.environ if env is None else env
    return {name: value for name, value in COORDINATOR_ENV.items() if name not in env}


def coordinator_denied_agents() -> list[str]:
    """Deny rules for the CLI's own agent types: only flower's worker is listed to the coordinator.
    They only govern spawning through Agent, which workers do not have, so no worker tool is lost."""
    return [f"Agent({name})" for name in CLI_AGENT_TYPES]


# --- Project settings: which of the workspace's own instructions and settings the agents read ---

PROJECT_SETTING_SOURCES = ["project", "local"]
SETTINGS_CHOICES = ("project", "none")
_PROJECT_FILES = {"project": ("CLAUDE.md", ".claude/CLAUDE.md", ".claude/settings.json", ".mcp.json"),
                  "local": ("CLAUDE.local.md", ".claude/settings.local.json")}


def setting_sources_for(choice: str | None) -> list[str]:
    """The CLI's ``setting_sources`` for ``--settings``: the workspace's project and local settings and
    CLAUDE.md by default (as ``claude -p`` there reads them, without the user's home: reproducible in
    CI), none for ``none``."""
    return [] if choice == "none" else list(PROJECT_SETTING_SOURCES)


def settings_choice(args: Any) -> str:
    """``--settings``, else ``FLOWER_SETTINGS``, else ``project`` (an unknown value is a usage error)."""
    choice = getattr(args, "settings", None) or os.environ.get("FLOWER_SETTINGS") or "project"
    if choice not in SETTINGS_CHOICES:
        raise FlowerError(text("settings_bad", _lang(args), value=choice[:40], choices=", ".join(SETTINGS_CHOICES)),
                          EXIT_USAGE)
    return choice


def project_settings_read(workspace: str, sources: list[str]) -> list[str]:
    """The instruction and settings files of the workspace that ``sources`` make the agents read."""
    return [name for source in sources for name in _PROJECT_FILES.get(source, ())
            if os.path.isfile(os.path.join(workspace, name))]


def settings_line(workspace: str, choice: str, lang: str) -> str:
    """What ``status`` and ``doctor`` say the agents read, and that flower's own rules win."""
    if choice == "none":
        return text("settings_none", lang)
    found = project_settings_read(workspace, setting_sources_for(choice))
    return text("settings_project", lang, files=", ".join(found) or text("settings_no_files", lang))


def _settings_option(group: Any) -> None:
    group.add_argument("--settings", default=None, choices=SETTINGS_CHOICES)


# --- Job budget: the spend of the whole job, from the manifest rows, and its cap ---

MAX_COST_ENV = "FLOWER_MAX_COST"


class BudgetStop(StepAbort):
    """The job's budget is spent: the run stops before its next call (a higher budget continues it)."""


_NUMBER_SETTINGS[MAX_COST_ENV] = (1e-9, False)   # checked with every setting, before anything is written


def job_since(data: dict) -> str:
    """When the lineage's job began (ISO time): its written-ahead task, else its earliest start record;
    "" when neither is known (then every row counts)."""
    task = data.get("task")
    times = [task.get("at")] if isinstance(task, dict) else []
    times += [s.get("at") for s in (data.get("starts") or {}).values() if isinstance(s, dict)]
    times = [t for t in times if isinstance(t, str) and t]
    return min(times) if times else ""


def job_spend(rows: Iterable[dict], since: str = "") -> float:
    """USD spent by the job: the newest version of every manifest row started since ``since``
    (rows of every run, machine, step, round, judge and handoff)."""
    return sum(float(r.get("cost_usd") or 0) for r in latest_rows(rows)
               if isinstance(r.get("cost_usd"), (int, float)) and str(r.get("started_at") or "") >= since)


def lineage_budget(data: dict) -> float | None:
    """The budget a lineage's data holds (None: none set)."""
    value = data.get("budget")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def spent_by(rt: "Runtime") -> float:
    """What the runtime's job spent so far: the backend's rows and this run's own (one not yet written)."""
    try:
        rows = [*rt.state.manifest_rows(), *rt.manifest.rows]
        return job_spend(rows, job_since(rt.state.peek_lineage()))
    except (Offline, OSError):
        return job_spend(rt.manifest.rows)


def within_budget(rt: "Runtime", spec: "AgentSpec") -> "AgentSpec":
    """``spec`` for the next call under the job's budget (``rt.max_cost``): raises BudgetStop when it is
    spent, else caps the call at what is left (the CLI stops at the end of the turn that reaches it)."""
    cap = getattr(rt, "max_cost", None)
    if cap is None:
        return spec
    spent = spent_by(rt)
    if spent >= cap:
        raise BudgetStop(text("budget_reached", rt.lang, spent=spent, cap=cap))
    left = cap - spent
    return dataclasses.replace(spec, max_budget_usd=min(spec.max_budget_usd or left, left))


def over_budget(rt: "Runtime") -> str | None:
    """The budget line when the runtime's job has spent its budget (None otherwise)."""
    cap = getattr(rt, "max_cost", None)
    spent = spent_by(rt) if cap is not None else 0.0
    return text("budget_reached", rt.lang, spent=spent, cap=cap) if cap is not None and spent >= cap else None


def parse_max_cost(raw: str | None, where: str, code: int = EXIT_USAGE) -> float | None:
    """A budget in USD from ``--max-cost`` (bad: exit 2) or FLOWER_MAX_COST (bad: ``code``, exit 3 as
    for every setting); None when not given."""
    if raw is None or not str(raw).strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (value > 0 and value != float("inf")):
        raise FlowerError(said("er_usd_above_zero", where=where, got=repr(str(raw)[:40])), code)
    return value


def job_budget(rt: "Runtime", given: float | None) -> float | None:
    """The job's budget: the one given now (kept in the lineage, so every later run and machine holds
    to it), else the one kept."""
    if given is not None:
        rt.soft(rt.lineage.path, lambda: rt.lineage.set_budget(given))
        return given
    return lineage_budget(rt.state.peek_lineage())


def budget_status(backend: StateBackend) -> dict:
    """``{"spent_usd", "max_cost_usd"}`` of the workspace's job, for ``status``."""
    data = backend.peek_lineage()
    return {"spent_usd": round(job_spend(backend.manifest_rows(), job_since(data)), 6),
            "max_cost_usd": lineage_budget(data)}


# --- Workspace snapshots: what the job changed, carried with its state ---
#
# In a git work tree a snapshot is the base commit, ``git diff --binary`` of the tracked changes and
# the untracked, not-ignored files; outside git, the files changed since the job began. Never
# ``.flower/``. Snapshots go through the state backend (locally ``<run dir>/snapshots/``, else a
# table), so a CI cache of ``.flower/`` or the database carries the work product with the session.

SNAPSHOT_VERSION = 1
SNAPSHOT_MAX_ENV, SNAPSHOT_EVERY_ENV = "FLOWER_SNAPSHOT_MAX", "FLOWER_SNAPSHOT_EVERY"
SNAPSHOT_MAX = 50 * 1024 * 1024     # bytes a snapshot may take, packed
SNAPSHOT_EVERY = 30.0               # seconds between snapshots taken after changing tool calls
CHANGING_TOOLS = "Write|Edit|MultiEdit|NotebookEdit|Bash"
_DIFF_HEAD = _lazy_re(r"(?m)^diff --git ")


@record
class Snapshot:
    """What the job changed: ``base`` commit (None outside git), the binary ``diff`` of tracked
    files, and ``files`` (path -> (mode, bytes)) untracked or, outside git, changed since the job began."""

    base: str | None
    diff: bytes
    files: dict
    at: str = ""
    host: str = ""
    workspace: str = ""
    mark: str = ""

    def names(self) -> list[str]:
        """The paths the snapshot holds (tracked ones from the diff, then the files)."""
        return [*(name for name, _ in split_diff(self.diff)), *sorted(self.files)]

    def pack(self) -> bytes:
        """The snapshot as bytes (zlib-compressed JSON; contents base64)."""
        import base64
        import zlib
        doc = {"v": SNAPSHOT_VERSION, "base": self.base, "at": self.at, "host": self.host,
               "workspace": self.workspace, "mark": self.mark, "diff": base64.b64encode(self.diff).decode("ascii"),
               "files": {p: [m, base64.b64encode(b).decode("ascii")] for p, (m, b) in sorted(self.files.items())}}
        return zlib.compress(json.dumps(doc, separators=(",", ":")).encode("utf-8"), 6)

    @classmethod
    def unpack(cls, data: bytes) -> "Snapshot | None":
        """A packed snapshot (None when it is damaged or of another version)."""
        import base64
        import binascii
        import zlib
        try:
            doc = json.loads(zlib.decompress(data))
            files = {p: (int(m), base64.b64decode(b)) for p, (m, b) in doc["files"].items()
                     if safe_relpath(p)}
            return cls(doc.get("base"), base64.b64decode(doc["diff"]), files, str(doc.get("at") or ""),
                       str(doc.get("host") or ""), str(doc.get("workspace") or ""), str(doc.get("mark") or ""))
        except (zlib.error, ValueError, KeyError, TypeError, AttributeError, binascii.Error):
            return None

    def digest(self) -> str:
        """What the snapshot holds, as a hash (equal contents, equal digest)."""
        h = hashlib.sha256(self.diff)
        for path, (mode, body) in sorted(self.files.items()):
            h.update(f"\0{path}\0{mode}\0".encode("utf-8", "surrogateescape") + hashlib.sha256(body).digest())
        return f"{self.base}:{h.hexdigest()}"


def safe_relpath(path: str) -> bool:
    """A relative path that stays inside the workspace and out of ``.flower/`` and ``.git/``."""
    parts = path.replace("\\", "/").split("/")
    return bool(path) and not path.startswith("/") and ".." not in parts and "\0" not in path \
        and parts[0] not in (".flower", ".git")


def split_diff(diff: bytes) -> list[tuple[str, bytes]]:
    """A ``git diff`` -> ``[(path, patch of that file)]`` (the path its ``b/`` side names)."""
    text_ = diff.decode("utf-8", "surrogateescape")
    starts = [m.start() for m in _DIFF_HEAD.finditer(text_)]
    pieces = []
    for i, at in enumerate(starts):
        piece = text_[at:starts[i + 1] if i + 1 < len(starts) else len(text_)]
        head = piece.split("\n", 1)[0]
        name = head.split(" b/", 1)[1] if " b/" in head else head
        pieces.append((name.strip('"'), piece.encode("utf-8", "surrogateescape")))
    return pieces


def _git(workspace: str, *args: str, data: bytes | None = None, check: bool = True) -> Any:
    """``git -C workspace args`` (an argument list, never a shell); stdout bytes, or the completed
    process with ``check=False``. Raises OSError when git cannot be run or fails."""
    import subprocess
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        done = subprocess.run(["git", "-c", "core.quotepath=off", "-C", workspace, *args], input=data,
                              capture_output=True, env=env, timeout=300)
    except subprocess.SubprocessError as exc:   # a git that hangs
        raise OSError(f"git {args[0]}: {exc}") from None
    if not check:
        return done
    if done.returncode != 0:
        raise OSError(done.stderr.decode("utf-8", "replace").strip()[:300] or f"git {args[0]} failed")
    return done.stdout


def _head_commit(git_dir: str) -> str | None:
    """HEAD's commit read from the repository's files (a loose or packed ref, or a detached HEAD);
    None when the files do not tell (then git is asked)."""
    head = (_read_text(os.path.join(git_dir, "HEAD")) or "").strip()
    if re.fullmatch(r"[0-9a-f]{40,64}", head):
        return head
    if not head.startswith("ref: "):
        return None
    ref = head[5:].strip()
    common = os.path.join(git_dir, (_read_text(os.path.join(git_dir, "commondir")) or ".").strip())
    for folder in dict.fromkeys((git_dir, common)):
        loose = (_read_text(os.path.join(folder, ref)) or "").strip()
        if re.fullmatch(r"[0-9a-f]{40,64}", loose):
            return loose
        for line in (_read_text(os.path.join(folder, "packed-refs")) or "").splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref and re.fullmatch(r"[0-9a-f]{40,64}", sha):
                return sha
    return None


def git_base(workspace: str) -> str | None:
    """The commit the work tree holding ``workspace`` is at (None outside git or before a first commit)."""
    found = _git_dir(os.path.realpath(workspace))
    if found is None:
        return None
    known = _head_commit(found[1])
    if known:
        return known
    try:
        done = _git(workspace, "rev-parse", "--verify", "-q", "HEAD", check=False)
    except OSError:
        return None
    return done.stdout.decode().strip() or None if done.returncode == 0 else None


_NOT_FLOWER = (".", ":(exclude).flower", ":(exclude,glob)**/.flower/**")


def _read_file(path: str) -> tuple[int, bytes] | None:
    """A regular file's mode bits and contents (None for anything else, or when it vanished)."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            return None
        with open(path, "rb") as fh:
            return info.st_mode & 0o777, fh.read()
    except OSError:
        return None


_SECRET_FILE = _lazy_re(r"(?:^|/)(?:\.env(?:\..*)?|\.envrc|\.netrc|\.pgpass|\.npmrc|\.pypirc|\.git-credentials|"
                        r"credentials(?:\.\w+)?|id_(?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?|.*\.(?:pem|key|p12|pfx|jks|kdbx))$",
                        re.IGNORECASE)


def credential_file(name: str) -> bool:
    """Whether a workspace file is one people keep credentials in (``.env``, a private key, ``.netrc``...):
    such a file never travels in a snapshot, whatever ``.gitignore`` says (each machine has its own)."""
    return bool(_SECRET_FILE.search(name))


def capture_snapshot(workspace: str, since: float, limit: int) -> Snapshot | None:
    """What the job changed in ``workspace`` now; None when it is more than ``limit`` bytes of files."""
    base = git_base(workspace)
    files: dict[str, tuple[int, bytes]] = {}
    total = 0
    if base is not None:
        diff = _git(workspace, "diff", "--binary", "HEAD", "--", *_NOT_FLOWER)
        listed = _git(workspace, "ls-files", "--others", "--exclude-standard", "-z", "--", *_NOT_FLOWER)
        names = [n for n in listed.decode("utf-8", "surrogateescape").split("\0") if n and safe_relpath(n)]
        total = len(diff)
    else:
        diff, names = b"", list(_changed_since(workspace, since))
    for name in names:
        found = None if credential_file(name) else _read_file(os.path.join(workspace, name))
        if found is not None:
            files[name] = found
            total += len(found[1])
            if total > limit:
                return None
    return Snapshot(base, diff, files, iso_now(), socket.gethostname(), os.path.realpath(workspace),
                    workspace_mark(workspace))


def workspace_mark(workspace: str) -> str:
    """This very workspace directory on this machine (host, device, inode): a fresh clone at the same
    path, or the same path on another runner, is another workspace."""
    try:
        info = os.stat(workspace)
    except OSError:
        return ""
    return f"{socket.gethostname()}/{info.st_dev}/{info.st_ino}"


def _changed_since(workspace: str, since: float) -> Iterator[str]:
    """Regular files below ``workspace`` modified at or after ``since`` (not ``.flower/`` or ``.git/``)."""
    for root, dirs, names in os.walk(workspace):
        dirs[:] = [d for d in dirs if d not in (".flower", ".git")]
        for name in names:
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                if os.lstat(path).st_mtime >= since and stat.S_ISREG(os.lstat(path).st_mode):
                    yield os.path.relpath(path, workspace).replace(os.sep, "/")


@record
class Restored:
    """What :func:`restore_snapshot` did: files restored, and where what did not apply was set aside."""

    restored: list = field(default_factory=list)
    aside: str | None = None
    kept: list = field(default_factory=list)


def _tracked_changes(workspace: str) -> set[str]:
    """Paths with local changes against HEAD, or untracked (not ignored), outside ``.flower/``."""
    changed = _git(workspace, "diff", "--name-only", "-z", "HEAD", "--", *_NOT_FLOWER)
    others = _git(workspace, "ls-files", "--others", "--exclude-standard", "-z", "--", *_NOT_FLOWER)
    return {n for n in (changed + b"\0" + others).decode("utf-8", "surrogateescape").split("\0") if n}


def snapshot_present(workspace: str, snap: Snapshot) -> bool:
    """Whether the workspace already holds every change of ``snap`` (then there is nothing to restore)."""
    for name, (mode, body) in snap.files.items():
        found = _read_file(os.path.join(workspace, name))
        if found is None or found[1] != body:
            return False
    if not snap.diff:
        return True
    if git_base(workspace) is None:
        return False
    return _git(workspace, "apply", "--check", "--reverse", "--binary", "-", data=snap.diff, check=False).returncode == 0


def restore_snapshot(workspace: str, snap: Snapshot, aside_dir: str) -> Restored:
    """Bring ``snap``'s changes into ``workspace`` without overwriting a local change: at the base and
    clean everything applies; otherwise each file's patch is applied (three-way when the base moved)
    where the file has no local change, and the rest is set aside in ``aside_dir`` (a patch, and the
    files). Returns what was done."""
    done = Restored()
    local = _tracked_changes(workspace) if git_base(workspace) is not None else set()
    aside_patch: list[bytes] = []
    aside_files: dict[str, bytes] = {}
    for name, patch in split_diff(snap.diff):
        if name in local or not _apply_one(workspace, name, patch):
            aside_patch.append(patch)
        else:
            done.restored.append(name)
    for name, (mode, body) in sorted(snap.files.items()):
        path = os.path.join(workspace, name)
        found = _read_file(path)
        if found is not None and found[1] == body:
            continue
        if found is not None or os.path.lexists(path):
            aside_files[name] = body
            done.kept.append(name)
            continue
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        atomic_write(path, body, mode=mode or 0o644)
        done.restored.append(name)
    if aside_patch or aside_files:
        done.aside = _set_snapshot_aside(aside_dir, b"".join(aside_patch), aside_files)
    return done


def _apply_one(workspace: str, name: str, patch: bytes) -> bool:
    """Apply one file's patch: exactly, else three-way (the index left as it was); a conflict is
    undone (the file had no local change: HEAD's version is what was there). True when applied."""
    if _git(workspace, "apply", "--binary", "-", data=patch, check=False).returncode == 0:
        return True
    merged = _git(workspace, "apply", "--3way", "--binary", "-", data=patch, check=False).returncode == 0
    if merged:
        _git(workspace, "reset", "-q", "--", name, check=False)
        return True
    _git(workspace, "checkout", "HEAD", "--", name, check=False)
    return False


def _set_snapshot_aside(aside_dir: str, patch: bytes, files: dict[str, bytes]) -> str:
    """Write what did not apply under ``aside_dir`` (0700): ``changes.patch`` and ``files/<path>``."""
    ensure_private_dir(aside_dir)
    if patch:
        atomic_write(os.path.join(aside_dir, "changes.patch"), patch)
    for name, body in files.items():
        target = os.path.join(aside_dir, "files", name)
        ensure_private_dir(os.path.dirname(target))
        atomic_write(target, body)
    return aside_dir


def listing(names: Iterable[str], most: int = 5) -> str:
    """Up to ``most`` names for a line (redacted: a credential in a file name is never shown)."""
    names = list(names)
    shown = ", ".join(redact(n) for n in names[:most])
    return shown + (f" (+{len(names) - most})" if len(names) > most else "")


class Snapshots:
    """The snapshots of one run: taken after changing tool calls (at most every FLOWER_SNAPSHOT_EVERY
    seconds), at a handoff, at a rescue and at exit, when the workspace changed; restored at start."""

    def __init__(self, rt: "Runtime", since: float):
        self.rt = rt
        self.since = since
        self.limit = int(env_number(SNAPSHOT_MAX_ENV, SNAPSHOT_MAX))
        raw = os.environ.get(SNAPSHOT_EVERY_ENV, "")
        try:
            self.every = max(0.0, float(raw)) if raw.strip() else SNAPSHOT_EVERY
        except ValueError:
            self.every = SNAPSHOT_EVERY
        self.last_digest: str | None = None
        self.last_at = 0.0
        self.dirty = False
        self.note: str | None = None      # what the model is told of a restore, once
        self._over = False

    def take(self, why: str = "turn") -> bool:
        """Take a snapshot now when the workspace changed since the last one (fail-soft)."""
        rt = self.rt
        self.dirty, self.last_at = False, time.monotonic()
        try:
            snap = capture_snapshot(rt.paths.workspace, self.since, self.limit)
        except (OSError, ValueError) as exc:
            error = OSError(str(exc))

            def fail() -> None:
                raise error
            rt.soft(rt.state.describe("snapshots"), fail)
            return False
        packed = snap.pack() if snap is not None else b""
        if snap is None or len(packed) > self.limit:
            if not self._over:
                self._over = True
                line = text("snapshot_too_big", rt.lang, limit=self.limit // (1024 * 1024))
                rt.degraded.append(line)
                rt._info(line)
            return False
        digest = snap.digest()
        if digest == self.last_digest or (self.last_digest is None and not snap.diff and not snap.files):
            return False
        if rt.soft(rt.state.describe("snapshots"), lambda: rt.state.put_snapshot(packed)):
            self.last_digest = digest
            return True
        return False

    def after_tool(self) -> None:
        """A changing tool ran: snapshot now, or once the interval has passed."""
        self.dirty = True
        if time.monotonic() - self.last_at >= self.every:
            self.take()

    def hooks(self, spec: "AgentSpec") -> dict:
        """The PostToolUse hook of a spec that can change the workspace (a hook source)."""
        async def changed(data: Any, tool_use_id: Any, context: Any) -> dict:
            import asyncio
            await asyncio.to_thread(self.after_tool)
            return {}
        return {"PostToolUse": [(CHANGING_TOOLS, changed)]}

    def on_event(self, event: "Event") -> None:
        """A handoff that is done is a moment to snapshot."""
        if event.kind == "handoff" and event.data.get("phase") == "done":
            self.take("handoff")

    def restore(self, say: Callable[[str], None]) -> None:
        """At start: bring the newest snapshot's changes into the workspace when they are missing."""
        rt = self.rt
        try:
            packed = rt.state.latest_snapshot()
        except (OSError, FlowerError):
            return
        snap = Snapshot.unpack(packed) if packed else None
        since = job_since(rt.state.peek_lineage())
        if snap is None or (since and snap.at < since):   # none, or an earlier job's
            return
        workspace = rt.paths.workspace
        if snap.mark and snap.mark == workspace_mark(workspace):
            self.last_digest = snap.digest()   # the same workspace on the same machine: never touched
            return
        try:
            if snapshot_present(workspace, snap):
                self.last_digest = snap.digest()
                return
            aside = os.path.join(rt.paths.flower_dir, "snapshot-aside", timestamp())
            done = restore_snapshot(workspace, snap, aside)
        except OSError as exc:
            rt.degraded.append(str(exc))
            say(text("snapshot_restore_failed", rt.lang, error=redact(str(exc))[:200]))
            return
        when, host = snap.at.replace("T", " ")[:16], redact(snap.host)
        if done.restored:
            say(text("snapshot_restored", rt.lang, n=len(done.restored), at=when, host=host))
        notes = [text("snapshot_restored_prompt", rt.lang, n=len(done.restored), at=when, host=host,
                      names=listing(done.restored, 20))] if done.restored else []
        if done.aside:
            say(text("snapshot_aside", rt.lang, path=_tilde(done.aside)))
            notes.append(text("snapshot_aside_prompt", rt.lang, path=done.aside))
        self.note = " ".join(notes) or None


def start_snapshots(rt: "Runtime", enabled: bool, say: Callable[[str], None]) -> None:
    """Restore the job's newest snapshot when the workspace lacks it, then take snapshots as the job
    goes (``rt.snapshots``; None with ``--no-snapshot``)."""
    rt.snapshots = None
    if not enabled:
        return
    data = rt.state.peek_lineage()
    since = job_since(data)
    try:
        began = _dt.datetime.fromisoformat(since).timestamp() if since else time.time()
    except ValueError:
        began = time.time()
    snaps = rt.snapshots = Snapshots(rt, began)
    snaps.restore(say)
    rt.hook_sources.append(lambda spec: snaps.hooks(spec) if spec.name == "work" else {})
    shown = rt.on_event
    rt.on_event = lambda event: (snaps.on_event(event), shown(event) if shown else None)


def snapshot_now(rt: "Runtime", why: str) -> None:
    """Take a snapshot at exit or rescue (when snapshots are on)."""
    snaps = getattr(rt, "snapshots", None)
    if snaps is not None:
        with contextlib.suppress(Exception):
            snaps.take(why)


def restore_note(rt: "Runtime", prompt: str) -> str:
    """``prompt`` with the restore said first, the first time a step continues after one."""
    snaps = getattr(rt, "snapshots", None)
    if snaps is None or not snaps.note:
        return prompt
    note, snaps.note = snaps.note, None
    return f"{note}\n\n{prompt}"


# --- Stream record: what the CLI streamed but never recorded, stored so no call is done twice ---


def _stream_block(block: Any) -> dict | None:
    """A transcript content block for one SDK content block (None for a thinking block: its
    signature is not on the stream, and the API refuses an unsigned one)."""
    kind = type(block).__name__
    if kind == "TextBlock":
        return {"type": "text", "text": block.text}
    if kind == "ToolUseBlock":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if kind == "ToolResultBlock":
        return {"type": "tool_result", "tool_use_id": block.tool_use_id, "content": block.content,
                "is_error": bool(block.is_error)}
    return None


def _stream_entry(msg: Any, sid: str, parent: str | None) -> dict | None:
    """The transcript entry of one streamed main-thread message, chained after ``parent``."""
    content = msg.content if isinstance(msg.content, list) else []
    blocks = [b for b in map(_stream_block, content) if b is not None]
    if not blocks:
        return None
    entry = {"parentUuid": parent, "isSidechain": False, "sessionId": sid, "uuid": msg.uuid,
             "timestamp": transcript_now(), "flowerFromStream": True}
    if type(msg).__name__ == "AssistantMessage":
        return {**entry, "type": "assistant", "message": {
            "id": msg.message_id, "type": "message", "role": "assistant", "model": msg.model, "content": blocks,
            "stop_reason": getattr(msg, "stop_reason", None), "usage": msg.usage or {}}}
    return {**entry, "type": "user", "message": {"role": "user", "content": blocks}}


def stream_entries(seen: list, sid: str, parent: str | None, known: set[str]) -> list[dict]:
    """Transcript entries for the messages of ``seen`` (the SDK's main-thread AssistantMessage and
    tool-result UserMessage objects, in stream order) whose uuid ``known`` lacks: a CLI killed, or
    unable to write its transcript, after streaming them never recorded them, and a model that
    trusts its history does again a call it does not see. They are chained in stream order after
    ``parent``, the session's newest stored entry: what the CLI recorded after the last message it
    kept (attachments, a last-prompt naming them) is on the chain the CLI resumes. Pure."""
    out: list[dict] = []
    for msg in seen:
        uid = getattr(msg, "uuid", None)
        if not isinstance(uid, str) or uid in known:
            continue
        entry = _stream_entry(msg, sid, parent)
        if entry is not None:
            out.append(entry)
            parent = uid
    return out


def newest_uuid(entries: list[dict]) -> str | None:
    """The uuid of the newest main-thread entry of a stored session (None when it has none)."""
    for entry in reversed(entries):
        if isinstance(entry.get("uuid"), str) and not entry.get("isSidechain"):
            return entry["uuid"]
    return None



def stream_ahead_path(run_dir: str, sid: str) -> str:
    """The file a step writes session ``sid``'s streamed messages to as they arrive, until the store
    holds them (see :func:`write_ahead`)."""
    return os.path.join(run_dir, "stream", safe_name(sid) + ".jsonl")


def write_ahead(path: str, msg: Any, sid: str) -> None:
    """Append the transcript entry of one streamed main-thread message to ``path`` (unchained). The
    mirror flushes only when a turn ends, and a CLI whose disk is full writes no transcript: a kill -9
    of flower before then would leave no trace of a call that ran. Fail-soft."""
    if not isinstance(getattr(msg, "uuid", None), str):
        return
    try:
        entry = _stream_entry(msg, sid, None)
        if entry is None:
            return
        line = (json.dumps(entry) + "\n").encode("utf-8")
        ensure_private_dir(os.path.dirname(path))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except (OSError, FlowerError, TypeError, ValueError, AttributeError):
        pass


def read_ahead(path: str) -> list[dict]:
    """The entries :func:`write_ahead` wrote to ``path``, in order (a torn or foreign line is skipped)."""
    text_ = _read_text(path) if os.path.isfile(path) else None
    out = []
    for line in (text_ or "").splitlines():
        with contextlib.suppress(ValueError, RecursionError):
            entry = json.loads(line)
            if isinstance(entry, dict) and isinstance(entry.get("uuid"), str):
                out.append(entry)
    return out


def holds_prompt(stored: list[dict]) -> bool:
    """Whether a stored session holds a prompt on its main thread: a user entry with text, not only
    tool results and not the CLI's own meta lines."""
    for entry in stored:
        if entry.get("type") != "user" or entry.get("isSidechain") or entry.get("isMeta"):
            continue
        content = (entry.get("message") or {}).get("content")
        if isinstance(content, str) or isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "text" for b in content):
            return True
    return False


def prompt_entry(prompt: str, sid: str) -> dict:
    """The transcript entry of the prompt a fresh session was started with, as the CLI writes it: the
    head of the chain for what the stream kept when the CLI could write none of it (HOME full). Without
    it a resume shows answers to nothing, and a model that trusts its history starts over."""
    return {"parentUuid": None, "isSidechain": False, "sessionId": sid, "uuid": str(uuid.uuid4()),
            "timestamp": transcript_now(), "flowerFromStream": True, "type": "user",
            "message": {"role": "user", "content": prompt}}


def with_lost_prompt(extra: list[dict], stored: list[dict], prompt: str | None, sid: str) -> list[dict]:
    """``extra`` (entries recovered from the stream, chained after ``stored``'s newest) headed by the
    entry of the session's start ``prompt`` when ``stored`` holds no prompt at all. Pure."""
    if not extra or prompt is None or holds_prompt(stored):
        return extra
    head = prompt_entry(prompt, sid)
    if extra[0].get("parentUuid") is None or extra[0].get("parentUuid") == newest_uuid(stored):
        return [head, dict(extra[0], parentUuid=head["uuid"])] + extra[1:]
    return extra


def ahead_entries(written: list[dict], parent: str | None, known: set[str]) -> list[dict]:
    """The written-ahead entries whose uuid ``known`` lacks, chained in order after ``parent`` (as
    :func:`stream_entries` chains them). Pure."""
    out, known = [], set(known)
    for entry in written:
        if entry["uuid"] in known:
            continue
        out.append(dict(entry, parentUuid=parent))
        parent = entry["uuid"]
        known.add(parent)
    return out


def placed_runs(streamed: list[dict], stored: list[dict]) -> list[tuple[list[dict], str | None]]:
    """Where the entries of ``streamed`` (stream order, unchained) that ``stored`` lacks go: runs of
    consecutive ones, each chained in order, with the uuid of the stored entry it goes before (None:
    after all of them). A run that a stored entry already hangs under (the CLI recorded a tool's
    result but not the call, its disk full) goes just before that entry, after the message that
    preceded it in the stream: chained after the newest stored entry it would close a loop (the
    result under the call under the result), and the CLI, mending the loop by timestamps, resumes a
    history without that turn or without the turns before it. Any other run is chained after the
    newest stored entry (see :func:`stream_entries`). Pure."""
    known = {e["uuid"] for e in stored if isinstance(e.get("uuid"), str)}
    order = [e for e in stored if isinstance(e.get("uuid"), str) and not e.get("isSidechain")]
    at = {e["uuid"]: k for k, e in enumerate(order)}
    under: dict[str, str] = {}   # uuid -> the first stored entry (file order) that names it its parent
    for entry in order:
        under.setdefault(entry.get("parentUuid"), entry["uuid"])
    newest, out = newest_uuid(stored), []

    def place(run: list[dict], before_run: str | None) -> None:
        nonlocal newest
        hung = [under[e["uuid"]] for e in run if e["uuid"] in under]
        before = min(hung, key=at.__getitem__) if hung else None
        if before is None:
            parent = newest
        elif before_run is not None:
            parent = before_run
        else:   # nothing streamed before it: the stored entry just before the one it precedes
            parent = order[at[before] - 1]["uuid"] if at[before] else None
        chained_run = ahead_entries(run, parent, set())
        out.append((chained_run, before))
        if before is None:
            newest = chained_run[-1]["uuid"]

    run: list[dict] = []
    previous = before_run = None
    for entry in streamed:
        uid = entry["uuid"]
        if uid in known:
            if run:
                place(run, before_run)
                run = []
        else:
            if not run:
                before_run = previous
            run.append(entry)
            known.add(uid)
        previous = uid
    if run:
        place(run, before_run)
    return out


# --- Agent runtime: specs, events, results, one step on the SDK with its four exits ---

@record
class AgentSpec:
    """What an agent is: its instructions, tools and limits. ``ask`` gives it an ``ask`` tool that
    reaches the human (an in-process MCP server); ``compaction=None`` lets flower manage the context
    (handoff, auto-compact off), ``"auto"`` leaves the CLI's own compaction on. ``hooks`` are SDK hooks
    of this agent, ``{event: [(matcher, hook), ...]}``; ``agents`` are the subagent definitions it may
    call (``ClaudeAgentOptions.agents``)."""

    name: str
    instructions: str = ""
    tools: list[str] | None = None
    allowed_tools: list[str] = field(default_factory=list)
    disallowed_tools: list[str] = field(default_factory=list)
    permission_mode: str = "acceptEdits"
    model: str | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    compaction: str | None = None
    setting_sources: list[str] | None = None   # None: the runtime's (the workspace's project settings)
    preset: bool = False
    ask: Callable[[str], Awaitable[str]] | None = None
    handoff: bool = True
    hooks: dict[str, list[tuple[str | None, Callable]]] = field(default_factory=dict)
    agents: dict[str, Any] | None = None


PERMISSION_MODES = ("default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto")


def _hook_timeout(hook: Callable) -> dict[str, float]:
    """The ``HookMatcher`` options of a hook that sets its own ``timeout`` (seconds): a hook that may hold
    a tool call longer than the SDK's default of 60 s, after which the CLI does not run the tool."""
    timeout = getattr(hook, "timeout", None)
    return {"timeout": timeout} if timeout else {}


def check_spec(spec: AgentSpec) -> None:
    """Reject, before any paid call, options the CLI would refuse (it would fail the same way on
    every retry): an unknown permission mode, a budget or turn limit that is not positive, and
    ``bypassPermissions`` as root outside a sandbox (the CLI refuses it there)."""
    if spec.permission_mode not in PERMISSION_MODES:
        raise FlowerError(said("er_permission_mode", mode=repr(spec.permission_mode), allowed=", ".join(PERMISSION_MODES)),
                          EXIT_USAGE)
    if spec.max_budget_usd is not None and not spec.max_budget_usd > 0:
        raise FlowerError(said("er_spec_budget", budget=spec.max_budget_usd), EXIT_USAGE)
    if spec.max_turns is not None and spec.max_turns < 1:
        raise FlowerError(said("er_spec_max_turns", n=spec.max_turns), EXIT_USAGE)
    if (spec.permission_mode == "bypassPermissions" and hasattr(os, "geteuid") and os.geteuid() == 0
            and not (os.environ.get("IS_SANDBOX") or spec.env.get("IS_SANDBOX"))):
        raise FlowerError(said("er_bypass_as_root"), EXIT_USAGE)


@record
class StepResult:
    """The outcome of one step (one manifest row)."""

    step: str
    session_id: str | None = None
    ok: bool = False
    cost_usd: float = 0.0
    num_turns: int = 0
    text: str = ""
    error: str | None = None
    started_at: str = ""
    ended_at: str = ""
    attempts: int = 1
    errors: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    resumed: bool = False
    context: int | None = None
    generations: int = 0
    error_kind: str | None = None

    @property
    def duration_s(self) -> float:
        """Wall time of the step in seconds."""
        try:
            start = _dt.datetime.fromisoformat(self.started_at)
            end = _dt.datetime.fromisoformat(self.ended_at)
            return round((end - start).total_seconds(), 3)
        except ValueError:
            return 0.0

    def row(self, run: str) -> dict:
        """The manifest row: every field plus ``duration_s`` and ``run``; text and errors redacted."""
        row = redact_obj(dataclasses.asdict(self))
        row["text"] = row["text"][:4000]
        row["errors"] = [e[:1000] for e in row["errors"]]
        row["duration_s"] = self.duration_s
        row["run"] = run
        return row


JSON_VERSION = 1  # the "v" of every --json line; bumped only when a field changes meaning or goes away


@record
class Event:
    """One thing that happened, normalised from the SDK stream (or from flower itself)."""

    kind: str
    step: str = ""
    data: dict = field(default_factory=dict)
    session_id: str | None = None
    level: int | None = None
    window: int | None = None
    ts: float = field(default_factory=time.time)

    def as_json(self) -> str:
        """One JSON line (schema version ``v``): every string redacted first, then encoded, so the line
        always parses; money fields in USD rounded to 1e-6."""
        data = redact_obj(dataclasses.asdict(self))
        for key in ("cost_usd",):
            if isinstance(data["data"].get(key), float):
                data["data"][key] = round(data["data"][key], 6)
        return json.dumps({"v": JSON_VERSION, **data}, ensure_ascii=False, default=str)


async def settle(awaitable: Awaitable[Any], timeout: float | None = None) -> bool:
    """Await a clean-up to its end, its errors ignored, even when this task is cancelled meanwhile; True
    then. A signal's stop may land during a clean-up: the caller finishes the rest, one step after
    the other, and raises it again, never swallows it (a swallowed stop let the run go on and send
    requests after SIGTERM)."""
    import asyncio
    work = asyncio.ensure_future(awaitable if timeout is None else asyncio.wait_for(awaitable, timeout))
    stopped = False
    while not work.done():   # a stop does not cut it short: the next clean-up must not run beside it
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            me = asyncio.current_task()
            stopped = stopped or not work.done() or bool(getattr(me, "cancelling", lambda: 1)())
        except BaseException:
            pass
    return stopped


@record
class _Turn:
    """What one client connection produced."""

    session_seen: str | None = None
    texts: list[str] = field(default_factory=list)
    cost: float = 0.0
    turns: int = 0
    result: Any = None
    error_text: str | None = None
    status: int | None = None
    terminal_reason: str | None = None
    exception: BaseException | None = None
    cancelled: bool = False
    answers: int = 0   # the model's own answers on the main thread (not synthetic)
    answer_ids: list[str] = field(default_factory=list)   # their uuids and the workers' (the transcript entries' own)
    stored_ids: set = field(default_factory=set)          # uuids of this session the store took meanwhile
    seen: list = field(default_factory=list)   # main-thread answers and tool results, as streamed
    mirror_failed: bool = False
    human: bool = False
    handoff: bool = False
    ritual_text: str | None = None
    ritual_error: str | None = None
    level: int = 0
    model: str | None = None
    stalled: str | None = None   # why the stall watch stopped the CLI
    stall_cancelled: bool = False   # the stall watch cancelled the reading of the turn
    crossed_in: str | None = None   # the answer (API message id) whose level crossed the threshold
    late: bool = False              # an answer came after that one: the batch stop did not hold
    keeping: Any = None             # storing streamed messages while a worker runs (a future)

    def unmirrored(self) -> list[str]:
        """The uuids of streamed main-thread messages the store has not taken."""
        return [m.uuid for m in self.seen if isinstance(getattr(m, "uuid", None), str) and m.uuid not in self.stored_ids]


class Runtime:
    """Runs agents through ``ClaudeSDKClient`` with continuity, resilience and handoff.

    ``run()`` has four exits: success; a human interrupt (the same session is resumed with the
    human's words, no attempt used); a full context (handoff to a fresh session); a retryable
    failure (wait for the network, back off, resume the same session with a neutral prompt).
    """

    def __init__(self, *, workspace: str = ".", run_dir: str | None = None, store: Any = None,
                 state: StateBackend | None = None, resilience: Resilience | None = None,
                 handoff: HandoffPolicy | None = None,
                 prune_policy: PrunePolicy | None = None, trim: bool = False, lang: str = "en",
                 model: str | None = None, on_event: Callable[[Event], None] | None = None,
                 ask_human: Callable[[], Awaitable[str | None]] | None = None,
                 sleep: Callable[[float], Awaitable[None]] | None = None,
                 notify: Callable[[str], None] | None = None):
        import asyncio
        self.paths = Paths(workspace, run_dir, lang)
        self.paths.prepare()
        self.lang = lang
        self.model = model
        self.on_event = on_event
        self.ask_human = ask_human
        self.notify = notify
        self.resilience = resilience or Resilience.from_env(warn=notify)
        self.handoff = handoff or HandoffPolicy()
        timeout = env_number("FLOWER_HANDOFF_TIMEOUT", 0, notify)
        if timeout:
            self.handoff.ritual_timeout = timeout
        # where state lives: the caller's backend, else the local files (with ``store`` for sessions)
        store = contract_store(store) if store is not None else None
        self.state = state if state is not None else LocalState(self.paths, store=store)
        self._own_state = state is None
        self.raw_store = store if store is not None else self.state.session_store()
        policy = prune_policy or PrunePolicy(lang=lang)
        if trim:
            policy.trim = True
        if not policy.spill_dir:   # also when trim is off: a session that does not fit is trimmed anyway
            policy.spill_dir = self.paths.spill_dir
        self.store = PruningSessionStore(self.raw_store, policy=policy)
        self.store.on_append = self._stored
        self._stored_hooks: list[Callable[[dict, list[dict]], None]] = []
        # each gives SDK hooks for a spec: {event: [(matcher, hook), ...]} (capabilities add theirs here)
        self.hook_sources: list[Callable[[AgentSpec], dict]] = [spill_waits]
        self.setting_sources = list(PROJECT_SETTING_SOURCES)   # for specs that do not set theirs
        self._watched: tuple[str, _Turn] | None = None   # the connection whose stored answers are counted
        self.run_id = run_id()
        self.manifest = self.state.manifest(self.run_id, notify=notify, lang=lang)
        self.windows = self.state.windows(notify=notify)
        self.journal = self.state.journal(self.run_id)
        self._sleep = sleep or asyncio.sleep
        self._lineage: Lineage | None = None
        self._human_event: asyncio.Event | None = None
        self._human_words: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._current: dict | None = None
        self.stopping = False   # rescue() ran: a signal stops this process, no request may follow
        self._stderr: list[str] = []
        self.degraded: list[str] = []  # what continuity lost in this run, one line each
        self.driver: DriverLock | None = None  # the workspace lock, when the caller holds one
        self._preflight = False
        self._warned: set[str] = set()
        self._started: dict[str, str] = {}   # session id -> the prompt this process started it with
        self.state.stop_driving = lambda: stop_own_clis(self.paths.run_dir)   # another took the lock: stop
        reap_orphans(self.paths.run_dir)

    # -- small services --

    @property
    def project_key(self) -> str:
        """The store's project key for this workspace."""
        return project_key(self.paths.workspace)

    def has_session(self, session_id: str, *, unsure: bool = False) -> bool:
        """Whether the store still holds this session (for this workspace). A session the store never
        got, but the CLI wrote to its own transcript (the store was locked, flower was killed), is
        recovered first: it continues instead of starting over. ``unsure`` is the answer while the
        state database is away (it cannot tell); any other failure is False."""
        try:
            return self._has_session(session_id)
        except Offline:
            return unsure
        except Exception:
            return False

    def _has_session(self, session_id: str) -> bool:
        if self.store.has_session(self.project_key, session_id):
            return True
        recovered = self.salvage(session_id) + self.store_ahead(session_id)
        return recovered > 0 and self.store.has_session(self.project_key, session_id)

    async def holds_session(self, session_id: str) -> bool:
        """:meth:`has_session` as the state database answers it: while the database is away it cannot
        tell a stored session from a gone one (a fresh start would do the session's work again), so it
        is waited for, like before a step; :class:`Offline` past the wait."""
        while True:
            try:
                return self._has_session(session_id)
            except Offline:
                if not await self.wait_for_state():
                    raise
            except Exception:
                return False

    def last_context(self, session_id: str) -> int | None:
        """The last known context level of a stored session."""
        try:
            return self.store.last_context(self.project_key, session_id)
        except Exception:
            return None

    @property
    def lineage(self) -> Lineage:
        """The lineage of this workspace (see :meth:`read_lineage`); while the state database is away,
        a blank one that is not kept (the next use reads it again)."""
        try:
            return self.read_lineage()
        except Offline:
            return self.state.blank_lineage()

    def read_lineage(self) -> Lineage:
        """The lineage of this workspace, read once (store-checked). :class:`Offline` while the state
        database is away, and nothing kept: a blank lineage would start every step over. Any other
        failure is said once and gives a blank one."""
        if self._lineage is None:
            blank = self.state.blank_lineage()
            opened: list[Lineage] = []
            away: list[Offline] = []

            def load() -> None:
                try:
                    opened.append(self.state.lineage(has_session=functools.partial(self.has_session, unsure=True),
                                                     notify=self._info, lang=self.lang))
                except Offline as exc:
                    away.append(exc)
            self.soft(blank.where, load)
            if away:
                raise away[0]
            self._lineage = opened[0] if opened else blank
        return self._lineage

    async def load_lineage(self) -> Lineage:
        """:meth:`read_lineage`, waiting for a state database that is away (:class:`Offline` past the wait)."""
        while True:
            try:
                return self.read_lineage()
            except Offline:
                if not await self.wait_for_state():
                    raise

    def _info(self, message: str) -> None:
        self.emit(Event("info", data={"message": message}))

    def soft(self, path: str, write: Callable[[], Any]) -> bool:
        """Run a continuity write fail-soft: a failure warns once per file (naming the real file, not
        a temp file), is remembered in ``degraded`` and never stops the work. True when it worked."""
        try:
            write()
            return True
        except (OSError, FlowerError) as exc:
            why = in_lang(os_reason(exc), self.lang) if isinstance(exc, OSError) else exc.said(self.lang)
            if path not in self._warned:
                self._warned.add(path)
                line = text("info_write_failed", self.lang, path=path, error=why)
                self.degraded.append(line)
                self._info(line)
            return False

    def emit(self, event: Event) -> None:
        """Send an event to the listener (errors in the listener never stop a run)."""
        journal_event(self, event)
        if self.on_event:
            with contextlib.suppress(Exception):
                self.on_event(event)

    @property
    def driving(self) -> str | None:
        """The session of the connection being driven now (None between connections)."""
        watched = self._watched
        return watched[0] if watched is not None else None

    def on_stored(self, hook: Callable[[dict, list[dict]], None]) -> None:
        """Call ``hook(key, entries)`` whenever the store has taken entries of a session (mirrored
        from the CLI or recovered from its transcript)."""
        self._stored_hooks.append(hook)

    def _stored(self, key: dict, entries: list[dict]) -> None:
        watched = self._watched
        if watched is not None and key.get("session_id") == watched[0]:   # its workers' transcripts too
            watched[1].stored_ids.update(e.get("uuid") for e in entries if isinstance(e, dict))
        for hook in self._stored_hooks:
            with contextlib.suppress(Exception):
                hook(key, entries)
        lineage = self._lineage
        if lineage is not None and lineage.due:   # a write went through: the record a full disk refused, now
            self.soft(lineage.where, lineage.catch_up)

    def interrupt(self, message: str | None = None) -> None:
        """Interrupt the current turn cooperatively (thread-safe). The same session is then resumed
        with ``message`` (or what ``ask_human`` returns)."""
        self._human_words = message
        loop, event = self._loop, self._human_event
        if loop is not None and event is not None:
            loop.call_soon_threadsafe(event.set)

    def record(self, result: StepResult) -> None:
        """Write (or update) this result's manifest row (fail-soft)."""
        row = result.row(self.run_id)
        self.soft(self.manifest.where, lambda: self.manifest.put(row))

    def rescue(self, reason: str = "killed-by-signal") -> None:
        """On SIGHUP/SIGTERM (or a second Ctrl-C): stop this process's CLI at once, then write the
        in-flight step with ``error=reason``; lineage is on disk (a record a full disk refused, once it can)."""
        self.stopping = True
        stop_own_clis(self.paths.run_dir)
        if self._lineage is not None and self._lineage.due:
            with contextlib.suppress(Exception):
                self._lineage.catch_up()
        journal_kill(self, reason)
        snapshot_now(self, "rescue")
        current = self._current
        if current is None:
            with contextlib.suppress(Exception):
                self.manifest.flush()
            return
        result: StepResult = current["result"]
        result.ok = False
        result.error = reason
        result.ended_at = iso_now()
        with contextlib.suppress(Exception):
            self.record(result)

    def close(self) -> None:
        """Close the store (and the state backend when the runtime opened it)."""
        with contextlib.suppress(Exception):
            self.store.close()
        if self._own_state:
            self.state.close()
        if _OWN_TEMP:
            with contextlib.suppress(OSError):
                os.rmdir(_OWN_TEMP[0])   # only when empty: no copy of a live connection is in it

    def write_note(self, path: str, body: str) -> None:
        """Write a note file (brief, goal, handoff document) and hand it to the state backend; only
        the latter is fail-soft (the file is the editable view and must be there)."""
        self._write_note(path, body)
        self.soft(path, lambda: self.state.notes_changed([path]))

    async def wait_for_state(self) -> bool:
        """Wait for a remote state backend like for the API (probe, one line, up to the offline
        wait); what it could not take meanwhile is written when it is back. True when usable."""
        import asyncio
        target = self.state.endpoint()
        if target is None:
            return True

        async def probe(host: str, port: int, timeout: float) -> bool:
            return await asyncio.to_thread(self.state.ready)
        return await self.resilience.wait_online(
            notify=lambda m: self.emit(Event("info", data={"message": m})), target=(f"database {target[0]}", target[1]),
            probe=probe, sleep=self._sleep, lang=self.lang)

    # -- options --

    def _sdk(self) -> Any:
        try:
            return importlib.import_module(_SDK_MODULE)
        except ImportError:
            raise FlowerError(said("er_sdk_missing"), EXIT_SETUP) from None

    def build_options(self, sdk: Any, spec: AgentSpec, *, session_id: str | None, resume: str | None,
                      fork: bool, manage_context: bool, connection_hooks: dict | None = None) -> Any:
        """``ClaudeAgentOptions`` for one connection: cwd, the pruning store with eager flush, a
        pre-assigned session id (fork with ``fork_session``), resume, CLI env defaults, and
        ``DISABLE_AUTO_COMPACT=1`` when flower manages the context. ``connection_hooks``: hooks bound to
        this connection's state (see :meth:`_connection_hooks`), after the spec's (where the SDK has hooks)."""
        env = {**cli_env_defaults(), **spec.env}
        if os.environ.get(STATE_ENV):
            env[STATE_ENV] = ""   # the database's connection string is flower's, not the agent's
        if manage_context and spec.compaction is None:
            env.setdefault("DISABLE_AUTO_COMPACT", "1")
        guard = cli_guard(self.paths.run_dir, find_cli(sdk))
        allowed = list(spec.allowed_tools)
        kwargs: dict[str, Any] = dict(
            cwd=self.paths.workspace, session_store=self.store, session_store_flush="eager",
            setting_sources=self.setting_sources if spec.setting_sources is None else spec.setting_sources,
            permission_mode=spec.permission_mode,
            disallowed_tools=list(spec.disallowed_tools), env=env, stderr=self._on_stderr,
        )
        if spec.tools is not None:
            kwargs["tools"] = list(spec.tools)
        model = spec.model or self.model
        if model:
            kwargs["model"] = model
        if spec.max_turns:
            kwargs["max_turns"] = spec.max_turns
        if spec.max_budget_usd:
            kwargs["max_budget_usd"] = spec.max_budget_usd
        if spec.preset:
            kwargs["system_prompt"] = {"type": "preset", "preset": "claude_code", "append": spec.instructions}
        elif spec.instructions:
            kwargs["system_prompt"] = spec.instructions
        if spec.ask is not None:
            kwargs["mcp_servers"] = {"flower": self._ask_server(sdk, spec.ask)}
            allowed.append("mcp__flower__ask")
        kwargs["allowed_tools"] = allowed
        if spec.agents:
            kwargs["agents"] = dict(spec.agents)
        hooks = self._hooks_for(spec, connection_hooks)
        if hooks and hasattr(sdk, "HookMatcher"):
            kwargs["hooks"] = {event: [sdk.HookMatcher(matcher=m, hooks=[h], **_hook_timeout(h)) for m, h in pairs]
                               for event, pairs in hooks.items()}
        if guard is not None:
            kwargs["cli_path"], kwargs["env"] = guard[0], {**env, **guard[1]}
        if resume:
            kwargs["resume"] = resume
            if fork:
                kwargs["fork_session"] = True
                kwargs["session_id"] = session_id
        else:
            kwargs["session_id"] = session_id
        return sdk.ClaudeAgentOptions(**kwargs)

    def _hooks_for(self, spec: AgentSpec, connection_hooks: dict | None = None) -> dict[str, list[tuple]]:
        """Every SDK hook of one connection, ``{event: [(matcher, hook), ...]}``: the spec's own, then
        each of ``hook_sources``' for the spec, then ``connection_hooks`` (bound to the connection)."""
        hooks: dict[str, list[tuple]] = {}
        for part in [spec.hooks, *(source(spec) for source in self.hook_sources), connection_hooks]:
            for event, pairs in (part or {}).items():
                hooks.setdefault(event, []).extend(pairs)
        return hooks

    def _connection_hooks(self, st: "_RunState", spec: AgentSpec) -> dict[str, list[tuple]]:
        """The hooks bound to one connection's state: the batch stop where flower manages the context
        (``PostToolBatch``), and the wait before a worker starts where the spec has workers
        (``PreToolUse`` on Agent)."""
        hooks: dict[str, list[tuple]] = {}
        if st.manage:
            hooks["PostToolBatch"] = [(None, self._batch_hook(st))]
        if spec.agents:
            hooks["PreToolUse"] = [("|".join(AGENT_TOOLS), self._shown_hook(st))]
        return hooks

    def _shown_hook(self, st: "_RunState") -> Callable[[dict, Any, Any], Awaitable[dict]]:
        """The ``PreToolUse`` hook on Agent: a worker starts only once flower has read the coordinator's
        call off the stream, and so written it ahead (:func:`write_ahead`). The CLI streams the call and
        mirrors the worker's transcript at once; a flower that lags behind its stream (a loaded machine)
        and is killed while the worker runs would otherwise keep neither the call nor a trace of it, and
        the resumed coordinator, which trusts its history, would delegate that work again."""
        async def before_agent(data: dict, tool_use_id: Any, context: Any) -> dict:
            call = tool_use_id or (data.get("tool_use_id") if isinstance(data, dict) else None)
            if isinstance(data, dict) and not data.get("agent_id") and isinstance(call, str):
                await st.shown([call], BATCH_SHOWN_WAIT)
            return {}
        return before_agent

    def _ask_server(self, sdk: Any, ask: Callable[[str], Awaitable[str]]) -> Any:
        async def ask_tool(args: dict) -> dict:
            question = str(args.get("question", "")).strip()
            self.emit(Event("ask", data={"question": question}))
            answer = redact(await ask(question) or "")
            return {"content": [{"type": "text", "text": answer or "(no answer; assume and record the assumption)"}]}

        tool = sdk.tool("ask", "Ask the human one question whose answer changes the approach.",
                        {"question": str})(ask_tool)
        return sdk.create_sdk_mcp_server(name="flower", version=__version__, tools=[tool])

    def _batch_hook(self, st: "_RunState") -> Callable[[dict, Any, Any], Awaitable[dict]]:
        """The ``PostToolBatch`` hook: once a turn crossed the handoff threshold, the turn ends after
        the batch of tools that was running, when every call of it ran and its result is recorded and
        before the next request. Nothing that ran is then recorded as rejected (an interrupt lands
        under a call that starts after it), and no answer is paid for that nobody reads."""
        async def after_batch(data: dict, tool_use_id: Any, context: Any) -> dict:
            st.batches += 1
            if self.lineage.due:   # before the next request: the disk may have room again
                self.soft(self.lineage.where, self.lineage.catch_up)
            if not isinstance(data, dict) or data.get("agent_id"):
                return {}   # a subagent's batch: the main thread's level decides
            calls = data.get("tool_calls") if isinstance(data.get("tool_calls"), list) else []
            await st.shown([c.get("tool_use_id") for c in calls if isinstance(c, dict)], BATCH_SHOWN_WAIT)
            if not st.stop_batches and self._handoff_asked(st):   # asked while the batch ran (a worker)
                st.stop_batches = st.asked_in_batch = True
            if not st.stop_batches:
                return {}
            return {"continue_": False, "stopReason": text("handoff_stop", self.lang)}
        return after_batch

    def _on_stderr(self, line: str) -> None:
        self._stderr.append(line.rstrip())
        del self._stderr[:-20]

    # -- one step --

    async def run(self, spec: AgentSpec, prompt: str, *, step_name: str | None = None,
                  resume: str | None = None, fork: bool = False,
                  on_event: Callable[[Event], None] | None = None,
                  lineage_key: str | None = None) -> StepResult:
        """Run ``spec`` on ``prompt`` until it succeeds or cannot go on; return the StepResult.

        ``resume`` continues a stored session (``fork`` branches it under a new id). ``lineage_key``
        names the lineage entry to keep current (None for judges and side questions: they never
        enter the lineage). Session ids are chosen here and written to lineage before the CLI starts.
        """
        import asyncio
        sdk = self._sdk()
        check_spec(spec)
        spec = within_budget(self, spec)
        if resume:
            self._refuse_if_driven(resume)
        name = step_name or spec.name
        step_lock = await self._step_lock(lineage_key, name)
        result = StepResult(step=name, started_at=iso_now())
        self._current = {"result": result}
        self._loop = asyncio.get_running_loop()
        self._human_event = asyncio.Event()
        st = self._run_state(spec, name, prompt, on_event)
        st.lineage_key = lineage_key
        try:
            await self._pick_session(st, resume, fork)
            if await self._preflight_online(st, result):
                while await self._attempt(sdk, spec, st, result):
                    pass
        finally:
            result.ended_at = iso_now()
            result.generations = st.generation
            result.session_id = st.sid
            self._current = None
            if self.lineage.due:
                self.soft(self.lineage.where, self.lineage.catch_up)
            if step_lock is not None:
                step_lock.release()
        st.emit(Event("result", session_id=st.sid, level=st.level, window=st.window,
                      data={"ok": result.ok, "cost_usd": result.cost_usd, "turns": result.num_turns,
                            "attempts": result.attempts, "error": result.error}))
        return result

    def _run_state(self, spec: AgentSpec, name: str, prompt: str,
                   on_event: Callable[[Event], None] | None) -> "_RunState":
        """The state of one ``run``: window and thresholds for the spec's model, and its ``emit``."""
        import asyncio
        model = spec.model or self.model
        window, source = resolve_window(model, explicit=self.handoff.window, book=self.windows, warn=self.notify)
        st = _RunState(name=name, window=window, at=self.handoff.at(window), warn_at=self.handoff.warn_at(window),
                       manage=self.handoff.enabled and spec.handoff, emit=lambda event: None, model=model,
                       window_source=source, call_seen=asyncio.Event(), step_prompt=prompt, prompt=prompt)

        def emit(event: Event) -> None:
            """Every event carries the step and the main thread's current water level."""
            event.step = event.step or name
            if event.level is None:
                event.level, event.window = st.level, st.window
            self.emit(event)
            if on_event:
                with contextlib.suppress(Exception):
                    on_event(event)
        st.emit = emit
        return st

    async def _pick_session(self, st: "_RunState", resume: str | None, fork: bool) -> None:
        """The session the first connection drives: ``resume`` when the store holds it (a fork of it
        under a new id), else a fresh one (said when ``resume`` was asked for but is not stored)."""
        if resume and await self.holds_session(resume):
            st.resuming, st.fork = resume, fork
            st.sid = str(uuid.uuid4()) if fork else resume
            st.level = self.last_context(resume) or 0
            return
        if resume:
            st.emit(Event("info", data={"message": text("info_not_stored", self.lang, sid=resume)}))
        st.sid, st.resuming, st.fork = str(uuid.uuid4()), None, False

    async def _preflight_online(self, st: "_RunState", result: StepResult) -> bool:
        """Before the first request of a run: wait for the network, with a line a minute."""
        if self._preflight:
            return True
        self._preflight = True
        return await self._api_online(st, result)

    async def _attempt(self, sdk: Any, spec: AgentSpec, st: "_RunState", result: StepResult) -> bool:
        """One connection of the step and what follows from it. True: go round again (``st`` says
        with which session and prompt); False: the step is over (``result`` says how)."""
        import asyncio
        if not await self._state_online(result):
            return False
        if st.resuming:
            await asyncio.to_thread(self.salvage, st.resuming)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store_ahead, st.resuming)
        if st.resuming and not st.fork and st.manage and not await self._fits(st.resuming, st):
            if not await self._handed_over(st, result, None, "the stored session does not fit the window"):
                return False
        elif st.resuming and not st.fork and st.manage and self._handoff_asked(st):
            if not await self._handed_over(st, result, None, "a handoff was asked for"):
                return False
        if st.resuming is None:
            st.start_prompt = st.prompt  # what this fresh session is started with
        turn = await self._one_connection(sdk, spec, st, result)
        self._take_turn(turn, st, result)
        st.fork, st.resuming = False, st.sid
        if turn.human:
            await self._hear_human(st)
            return True
        if turn.handoff and turn.exception is None and turn.error_text is None:
            return await self._handed_over(st, result, turn.ritual_text, turn.ritual_error)
        if turn.error_text is None and turn.exception is None:
            result.ok = True
            final = getattr(turn.result, "result", None)
            result.text = final if isinstance(final, str) and final else "\n".join(turn.texts)
            result.error = None
            return False
        return await self._after_failure(turn, st, result)

    async def _one_connection(self, sdk: Any, spec: AgentSpec, st: "_RunState", result: StepResult) -> _Turn:
        """Write the lineage ahead, build the options and drive one connection of ``st``'s session."""
        if self.stopping:   # the stop's cancel went astray (swallowed by a library): still no request
            import asyncio
            raise asyncio.CancelledError()
        self._write_ahead(st.lineage_key, st.sid, None if st.resuming else st.prompt)
        if st.lineage_key and not st.resuming:
            await self._room_for_lineage()
        result.session_id = st.sid
        options = self.build_options(sdk, spec, session_id=st.sid, resume=st.resuming, fork=st.fork,
                                     manage_context=st.manage,
                                     connection_hooks=self._connection_hooks(st, spec))
        st.batch_hook = getattr(options, "hooks", None) is not None
        if st.resuming and not st.fork:
            st.emit(Event("resume", session_id=st.sid, data={"attempt": result.attempts}))
        return await self._connect_and_drive(sdk, options, st.prompt, st)

    async def _room_for_lineage(self) -> None:
        """A fresh session whose start record a full disk refused waits for room before its first
        request, with the backoff and budget of a failed connection: killed while the lineage still
        named the session it replaces, the next run would resume that one and redo this one's work.
        Another failure, or a disk full past the budget, goes on fail-soft (each tool batch and the
        step's end try again)."""
        for attempt in range(1, self.resilience.max_attempts):
            if not self.lineage.due:
                return
            await self._sleep(self.resilience.delay(attempt))
            try:
                self.lineage.catch_up()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    return
            except FlowerError:
                return

    def _take_turn(self, turn: _Turn, st: "_RunState", result: StepResult) -> None:
        """After a connection: stop on a damaged store or a lost lease; say what the resume pruned
        and what the store skipped; add the connection's cost, turns and level to the result."""
        self._stop_if_damaged(turn)
        self.state.check_lease()   # another flower took the lock: it drives now, this one stops
        resumed = st.resuming
        if resumed and self.store.last_report is not None:
            st.emit(Event("resume", session_id=st.sid, data={"pruned": self.store.last_report.as_dict()}))
            self.store.last_report = None
        skipped = self.raw_store.skipped.pop(f"{self.project_key}/{resumed}", 0)
        if skipped:   # the model will not see those entries: it may do their work again
            line = text("info_skipped_rows", self.lang, n=skipped, sid=resumed)
            self.degraded.append(line)
            st.emit(Event("info", session_id=resumed, data={"message": line, "skipped": skipped}))
        result.cost_usd = round(result.cost_usd + turn.cost, 6)
        result.num_turns += turn.turns
        result.context = st.level or result.context

    async def _hear_human(self, st: "_RunState") -> None:
        """A human interrupt: the same session goes on with the human's words (redacted)."""
        words = self._human_words
        self._human_words = None
        if words is None and self.ask_human is not None:
            words = await self.ask_human()
        if self._human_event is not None:   # heard: cleared only now, so a Ctrl-C before a connection starts is kept
            self._human_event.clear()
        words = redact(words) if words else words
        st.prompt = text("human_interrupt", self.lang) + (words or text("human_continue", self.lang))
        st.emit(Event("resume", session_id=st.sid, data={"reason": "human", "words": words or ""}))

    async def _handed_over(self, st: "_RunState", result: StepResult, ledger_text: str | None,
                           why: str | None) -> bool:
        """Hand over to a fresh session started with the carry: True to go on, False when the step
        stops (the result says why)."""
        carry = await self._hand_over(st, result, st.step_prompt, ledger_text, why)
        if carry is None:
            return False
        if st.asked:   # handed over: the request is done (kept until now so a crash loses nothing)
            st.asked = False
            self.state.handoff_done()
        st.prompt, st.resuming = carry, None
        return True

    async def _after_failure(self, turn: _Turn, st: "_RunState", result: StepResult) -> bool:
        """A failed connection: a fresh session when the CLI lost it, a handoff on overflow, else a
        retry while the budget of failures in a row lasts. True to go round again."""
        error = turn.error_text or f"{type(turn.exception).__name__}: {turn.exception}"
        kind = classify(error, status=turn.status, terminal_reason=turn.terminal_reason)
        result.errors.append(redact(error)[:1000])
        st.emit(Event("error", session_id=st.sid, data={"kind": kind, "message": redact(error)[:500]}))
        if "No conversation found" in error and st.resuming:
            st.emit(Event("info", data={"message": text("info_not_resumable", self.lang, sid=st.sid)}))
            st.sid, st.resuming, st.level, st.prompt = str(uuid.uuid4()), None, 0, st.start_prompt or st.step_prompt
            return True
        if kind == OVERFLOW and st.manage:
            if st.level:
                self.soft(self.windows.where, lambda: self.windows.lower(st.model, st.level))
            return await self._handed_over(st, result, None, "context overflow")
        # the budget is for failures in a row: a connection in which the model answered at least
        # PROGRESS_ANSWERS times moved the work on, and an hours-long job meets many passing faults
        st.failed_in_row = 1 if turn.answers >= PROGRESS_ANSWERS else st.failed_in_row + 1
        if (waited := await self._limit_waited(error, result, st.emit)) is not None:
            if not waited:
                return False
            st.failed_in_row, kind = 0, TRANSIENT   # the limit reset: resume like after a blip
        if not self.resilience.should_retry(kind) or st.failed_in_row >= self.resilience.max_attempts:
            result.error = redact(error)[:1000]
            result.error_kind = AUTH if is_auth_failure(error, status=turn.status) else kind
            return False
        return await self._retry(kind, st, result)

    async def _retry(self, kind: str, st: "_RunState", result: StepResult) -> bool:
        """Wait out an outage (the network, then the state database) and back off, then resume the
        same session with a neutral prompt, or start it again when none of it was stored."""
        delay = self.resilience.delay(st.failed_in_row)
        st.emit(Event("retry", session_id=st.sid, data={"attempt": result.attempts + 1, "kind": kind,
                                                         "delay": round(delay, 2)}))
        if not await self._api_online(st, result):
            return False
        await self._sleep(delay)
        result.attempts += 1
        if not await self._state_online(result):   # whether the session was stored is the database's to say
            return False
        if await self.holds_session(st.sid):
            result.resumed = True
            st.prompt, st.resuming = text("resume_prompt", self.lang), st.sid
        else:  # nothing of this session was stored: start it again, same input, new id
            st.sid, st.resuming, st.prompt = str(uuid.uuid4()), None, st.start_prompt or st.step_prompt
        return True

    async def _api_online(self, st: "_RunState", result: StepResult) -> bool:
        """Wait for the API's network; past the offline wait the step ends as offline (False)."""
        if await self._wait_online(st.emit):
            return True
        host, port = endpoint()
        return self._offline(result, f"{host}:{port}")

    async def _state_online(self, result: StepResult) -> bool:
        """Wait for a remote state backend; past the offline wait the step ends as offline (False)."""
        if await self.wait_for_state():
            return True
        host, port = self.state.endpoint() or ("?", 0)
        return self._offline(result, said("target_database", host=f"{host}:{port}"))

    def _offline(self, result: StepResult, target: str) -> bool:
        result.error = said("er_network_down", seconds=int(self.resilience.max_offline_wait), target=target)
        result.error_kind = OFFLINE
        return False

    async def _limit_waited(self, error: str, result: StepResult, emit: Callable[[Event], None]) -> bool | None:
        """A usage limit that says when it resets: wait until then, a line a minute, and say True; past
        ``FLOWER_MAX_LIMIT_WAIT`` set the step's error and say False; None when it is no such limit."""
        seconds = limit_wait(error, now=time.time())
        if seconds is None:
            return None
        bound = env_number("FLOWER_MAX_LIMIT_WAIT", MAX_LIMIT_WAIT, self.notify)
        if seconds > bound:
            result.error = text("limit_past_bound", self.lang, waited=_minutes(int(seconds)), of=_minutes(int(bound)))
            result.error_kind = LIMIT
            return False

        def tell(left: float) -> None:
            emit(Event("info", data={"message": text("info_limit_wait", self.lang, left=_minutes(int(left) + 1)),
                                     "limit_wait_s": int(left)}))
        await wait_out_limit(seconds + 1, sleep=self._sleep, tell=tell)
        return True

    async def _wait_online(self, emit: Callable[[Event], None]) -> bool:
        """Wait for the network with an ``offline`` event when it goes, one a minute while it stays
        away, and an ``online`` event when it is back (the reporter turns them into lines)."""
        return await self.resilience.wait_online(
            lang=self.lang, on_state=lambda facts: emit(Event(facts["state"], data=facts)))

    def salvage(self, sid: str, *, keep_copies: bool = False) -> int:
        """Before resuming ``sid`` (or deciding it was never stored): store what the CLI wrote to its
        own transcript but the mirror never delivered (flower was killed with appends in flight, the
        store was locked, a write failed on a full disk), each run of it in its place, then remove the
        temp copies a killed resume left behind (they hold a copy of the credentials too). Returns how
        many entries were recovered (one info line says so). ``keep_copies``: the connection is still
        open (its copy is removed on disconnect); a copy the store could not take now is then kept
        for the next salvage. Blocking; safe from a worker thread."""
        import shutil
        if live_driver(self.paths.run_dir, sid) is not None:
            return 0   # another flower drives it: its transcript and its copies are not ours to touch
        key = {"project_key": self.project_key, "session_id": sid}
        files = cli_transcripts(self.project_key, sid)
        if not files:
            return 0
        recovered = 0
        try:
            known = self.raw_store.known_uuids(key)
            for path in files:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    lines = fh.readlines()
                runs = missing_runs(lines, known)
                # a parent only the transcript holds (a resume's healed stand-in, which the prune makes
                # again) is on the chain; one the CLI never wrote is not
                written = {uid for line in lines for uid in _UUID_KEY.findall(line)}
                written -= {e["uuid"] for extra, _ in runs for e in extra}
                for extra, before in runs:
                    extra = chained(extra, known | written)
                    if not extra:
                        continue
                    if before is None:
                        before = self._after_parent(key, extra[0].get("parentUuid"))
                    self._append_waiting(key, extra, before)
                    known.update(e["uuid"] for e in extra)
                    recovered += len(extra)
        except Exception:   # salvage is a bonus: a store that cannot take it now is the resume's business
            if keep_copies:   # the SDK deletes a resume's copy on disconnect: the next salvage needs it
                keep_transcripts(files)
            return recovered
        for path in files if not keep_copies else ():
            leftover = path.split(os.sep + "projects" + os.sep)[0]
            if os.path.basename(leftover).startswith("claude-resume-") and not copy_owner_alive(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
                if _TEMP_OWNER.fullmatch(os.path.basename(os.path.dirname(leftover))):
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.dirname(leftover))   # a dead flower's temp dir, once empty
        if recovered:
            self._info(text("info_recovered_one" if recovered == 1 else "info_recovered", self.lang, n=recovered,
                            sid=sid))
        return recovered

    def _after_parent(self, key: dict, parent: Any) -> str | None:
        """The stored entry that follows ``parent`` when ``parent`` is not the session's newest one:
        recovered entries that branch off there go before it. Appended, they would be the newest leaf,
        and the CLI resumes from the newest leaf in file order: the resume would take their older
        branch and leave out everything stored after it. None: append."""
        if not isinstance(parent, str):
            return None
        stored = self.raw_store.load_sync(key) or []
        if newest_uuid(stored) == parent:
            return None
        after = False
        for entry in stored:
            uid = entry.get("uuid")
            if after and isinstance(uid, str):
                return uid
            after = after or uid == parent
        return None

    def _append_waiting(self, key: dict, entries: list[dict], before: str | None = None) -> None:
        """Append, waiting out a store that is locked or busy (another process holds it): recovered
        entries must be stored before the resume, or they would land after newer ones. ``before``: the
        uuid of the stored entry they precede (put there: the CLI resumes from the last leaf in file
        order)."""
        deadline = time.monotonic() + max(60.0, self.resilience.max_offline_wait)
        while True:
            try:
                if before is not None:
                    self.raw_store.insert_before_sync(key, entries, before)
                else:
                    self.raw_store.append_sync(key, entries)
                self._stored(key, entries)
                return
            except Exception as exc:
                if not re.search(r"(?i)locked|busy", str(exc)) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _store_dir(self) -> str:
        """Where the session store writes: its file's directory, or the database it names."""
        path = self.raw_store.path
        return os.path.dirname(os.path.abspath(path)) if isinstance(path, str) else self.state.describe()

    def store_unrecorded(self, sid: str, seen: list) -> int:
        """After a turn the CLI did not finish, and the salvage of its transcript: store the streamed
        messages (``seen``) that neither the mirror nor the CLI's transcript kept, each in its place
        (:func:`placed_runs`), so a resume shows a call that ran (with its result when the stream had
        it; without, the prune says the kill stopped it). Returns how many. Blocking."""
        key = {"project_key": self.project_key, "session_id": sid}
        if not any(isinstance(getattr(m, "uuid", None), str) for m in seen):
            return 0
        return self._store_streamed(key, stream_entries(seen, sid, None, set()))

    def start_prompt(self, sid: str) -> str | None:
        """The prompt fresh session ``sid`` was started with: this process's, else the lineage's start
        record (written before the CLI started); None when neither knows it."""
        if sid in self._started:
            return self._started[sid]
        with contextlib.suppress(Exception):   # peeked: reading the lineage checks its sessions, via here
            starts = self._lineage.starts if self._lineage is not None else self.state.peek_lineage().get("starts")
            for record in (starts or {}).values():
                if isinstance(record, dict) and record.get("session_id") == sid:
                    return record.get("prompt")
        return None

    def store_ahead(self, sid: str) -> int:
        """Before resuming ``sid`` (after :meth:`salvage`): store what this machine wrote ahead of the
        stream (:func:`write_ahead`) and the store still lacks, each in its place (:func:`placed_runs`),
        then drop the file. Returns how many entries. Blocking."""
        path = stream_ahead_path(self.paths.run_dir, sid)
        written = read_ahead(path)
        if live_driver(self.paths.run_dir, sid) is not None:
            return 0   # another flower drives it: its file is its own
        n = self._store_streamed({"project_key": self.project_key, "session_id": sid}, written) if written else 0
        with contextlib.suppress(OSError):
            os.unlink(path)
        return n

    def _store_streamed(self, key: dict, streamed: list[dict]) -> int:
        """Store the entries of ``streamed`` (stream order) that the store lacks, each run in its
        place (:func:`placed_runs`); one info line says how many. Blocking."""
        sid, stored = key["session_id"], self.raw_store.load_sync(key) or []
        runs = placed_runs(streamed, stored)
        if runs:   # a fresh session the CLI wrote nothing of: headed by its start prompt
            runs[0] = (with_lost_prompt(runs[0][0], stored, self.start_prompt(sid), sid), runs[0][1])
        for run, before in runs:
            self._append_waiting(key, run, before)
        n = sum(len(run) for run, _ in runs)
        if n:
            self._info(text("info_from_stream", self.lang, n=n, sid=sid))
        return n

    async def _fits(self, sid: str, st: "_RunState") -> bool:
        """Whether the resumed session, pruned (and trimmed harder if need be), stays under the
        handoff threshold, with room for the system prompt and tools."""
        try:
            return await self.store.prepare({"project_key": self.project_key, "session_id": sid},
                                            max_tokens=int(st.at * 0.9))
        except Exception:
            return True   # the store cannot tell: the SDK's own load decides, as before

    async def _step_lock(self, lineage_key: str | None, name: str) -> DriverLock | None:
        """One driver per step: a second ``run`` of the same lineage step (in this process or any
        other) raises :class:`Busy` instead of driving the same session twice. A state database that
        is away is waited for, like before a step (:class:`Offline` past the wait)."""
        if not lineage_key:
            return None
        lock = self.state.lock(f"step-{safe_name(lineage_key)}", f"step {lineage_key}")
        while True:
            try:
                return lock.acquire(name)
            except Offline:
                if not await self.wait_for_state():
                    raise

    def _write_ahead(self, lineage_key: str | None, sid: str, start_prompt: str | None) -> None:
        """Before the CLI starts: stop any predecessor's CLI still driving ``sid``, then write the
        lineage (with the start record of a fresh session) fail-soft. Another live flower driving
        ``sid`` is Busy, never killed."""
        self._refuse_if_driven(sid)
        reap_orphans(self.paths.run_dir, [sid])
        if start_prompt is not None:
            self._started[sid] = start_prompt
        if lineage_key:
            self.soft(self.lineage.where, lambda: self.lineage.remember(lineage_key, sid, start_prompt))
        if self.driver is not None:
            self.driver.set_step(lineage_key or "")

    def _refuse_if_driven(self, sid: str) -> None:
        """Busy when another live flower's CLI drives ``sid``: checked before anything touches the
        session (a salvage, a temp copy), so a side question never harms the live run."""
        other = live_driver(self.paths.run_dir, sid)
        if other is not None:
            raise Busy(said("busy_session", sid=sid, pid=other.get('parent'), cli=other.get('pid')),
                       {"pid": other.get("parent")})

    async def _connect_and_drive(self, sdk: Any, options: Any, prompt: str, st: "_RunState") -> _Turn:
        import asyncio
        turn = _Turn()
        self._stderr = []
        assert self._human_event is not None
        st.interrupt_sent = st.stop_batches = False
        st.batches = 0
        st.calls_seen.clear()
        client = sdk.ClaudeSDKClient(options=options)
        watcher = None
        stall_watch = None
        writing: str | None = None
        self._watched = (st.sid, turn)
        try:
            writing = own_tempdir()   # the SDK writes its copy of a resumed session there
            with resume_copies_in(writing):
                await client.connect()
            writing = None
            if _SPILL_WRITERS and not waits_for_spills(options):   # the load's spill files: a tool may read one
                await asyncio.to_thread(wait_spills)
            await client.query(prompt)
            watcher = asyncio.create_task(self._watch_human(client, turn))
            st.heard, st.pending = time.monotonic(), set()
            drive = asyncio.ensure_future(self._drive(client, st, turn))
            stall_watch = asyncio.create_task(self._watch_stall(st, turn, drive))
            try:
                await drive
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if not turn.stall_cancelled or getattr(me, "cancelling", lambda: 0)():   # a real cancel
                    raise
            self._check_stored(st, turn)
            turn.handoff, st.asked_in_batch = turn.handoff or st.asked_in_batch, False
            # over the generation cap the step stops: asking for a document first would be a paid call for nothing
            if turn.handoff and not turn.human and turn.error_text is None and not turn.stalled and \
                    not self._capped(st):
                await self._ritual(client, st, turn)
        except asyncio.CancelledError:
            turn.cancelled = True
            raise
        except Exception as exc:
            turn.exception = exc
            tail = " | ".join(line for line in self._stderr[-3:] if line)
            said = os_error_line(exc, self.lang, writing) if getattr(exc, "errno", None) == errno.ENOSPC else \
                f"{type(exc).__name__}: {exc}"
            turn.error_text = said + (f" ({tail})" if tail else "")
        finally:
            if stall_watch is not None:
                stall_watch.cancel()
            if turn.stalled:   # however the stopped CLI's stream ended, the turn failed as a stall
                turn.exception = turn.exception or TimeoutError(turn.stalled)
                turn.error_text = turn.stalled
            self._watched = None
            if watcher is not None:
                watcher.cancel()
            stopped = turn.keeping is not None and await settle(turn.keeping)
            if turn.exception is not None or turn.cancelled or turn.mirror_failed or turn.unmirrored():
                # the CLI died mid-turn (killed alone, crashed, or stopped by rescue() on a signal), a
                # store write failed, or the CLI could not write its transcript (HOME full): what it wrote
                # but never mirrored is only in its temp copy, which disconnect() deletes, and what it
                # streamed but never wrote only in ``turn.seen``: take both into the store first
                stopped |= await settle(asyncio.to_thread(self.salvage, st.sid, keep_copies=True))
                stopped |= await settle(asyncio.to_thread(self._store_seen, st.sid, turn.seen))
            elif turn.result is not None:   # the mirror flushed the turn: what it lost is _check_stored's to say
                self._ahead_kept(st.sid)
            st.streamed += [(st.sid, m) for m in turn.seen if type(m).__name__ == "AssistantMessage"]
            stopped |= await settle(client.disconnect(), 15)
            if stopped:
                raise asyncio.CancelledError()
        return turn

    def _store_seen(self, sid: str, seen: list) -> None:
        """What a failed turn streamed goes into the store; then its write-ahead file is no longer needed."""
        self.store_unrecorded(sid, seen)
        self._ahead_kept(sid)

    def _ahead_kept(self, sid: str) -> None:
        """A turn of ``sid`` is over (the mirror flushed it, or its stream was stored after a failure):
        its write-ahead file goes. Only a process killed mid-turn leaves one (see :meth:`store_ahead`)."""
        with contextlib.suppress(OSError):
            os.unlink(stream_ahead_path(self.paths.run_dir, sid))

    def _stop_if_damaged(self, turn: _Turn) -> None:
        """A turn that failed because the session store's file is damaged ends the run: exit 3 with one
        line, never a retry (every retry would meet the same pages)."""
        damage = store_damage(turn.exception) or store_damage(turn.error_text)
        if damage:
            where = self.raw_store.path or self.state.describe()
            raise FlowerError(text("store_damaged", self.lang, path=where, error=damage, prog=program_name()), EXIT_SETUP)

    async def _watch_stall(self, st: "_RunState", turn: _Turn, drive: Any) -> None:
        """While the CLI says nothing: a line a minute saying so (and why, when a tool runs or the CLI
        process is stopped); past ``stall_timeout`` with no tool running, or with the CLI stopped, the
        CLI is stopped for good and the turn fails as a stalled stream (retried, resumed like any).
        ``drive`` (the task reading the turn) is cancelled if the stream does not end with the CLI."""
        import asyncio
        bound = self.resilience.stall_timeout
        notice = min(60.0, max(0.5, bound / 3))
        while True:
            await asyncio.sleep(notice)
            quiet = time.monotonic() - st.heard
            if quiet < notice:
                continue
            stopped = own_cli_stopped(self.paths.run_dir)
            if quiet >= bound and (stopped is not None or not st.pending):
                turn.stalled = said("er_stalled", seconds=int(quiet))
                if stopped is not None:   # continued, it takes the SIGTERM that follows and writes its transcript
                    with contextlib.suppress(OSError):
                        os.kill(stopped, signal.SIGCONT)
                await asyncio.to_thread(stop_own_clis, self.paths.run_dir)
                await asyncio.wait({drive}, timeout=CLI_GRACE + 1)
                if not drive.done():
                    turn.stall_cancelled = True
                    drive.cancel()
                return
            why = "cli_stopped" if stopped is not None else "cli_tool" if st.pending else "cli_model"
            line = text("info_cli_quiet", self.lang, waited=_minutes(int(quiet)), why=text(why, self.lang, pid=stopped),
                        bound=_minutes(int(bound)))
            st.emit(Event("info", session_id=st.sid, data={"message": line, "quiet_s": int(quiet),
                                                           "cli_stopped": stopped is not None}))

    def _check_stored(self, st: "_RunState", turn: _Turn) -> None:
        """Once a turn's result is in (the SDK mirrors everything before it yields the result), every
        answer the model gave must be in the store: a CLI that cannot write its transcript (its config
        dir full or read-only) mirrors nothing, and the run would end ``done`` with nothing a later run
        can continue. Said once per session, and counted as degraded continuity."""
        lost = [uid for uid in turn.answer_ids if uid not in turn.stored_ids]
        key = f"unstored:{st.sid}"
        if turn.result is None or turn.mirror_failed or not lost or key in self._warned:
            return
        self._warned.add(key)
        line = text("info_answers_unstored", self.lang, n=len(lost), total=len(turn.answer_ids), sid=st.sid,
                    path=cli_config_dir())
        self.degraded.append(line)
        st.emit(Event("info", session_id=st.sid, data={"message": line}))

    async def _watch_human(self, client: Any, turn: _Turn) -> None:
        assert self._human_event is not None
        await self._human_event.wait()
        turn.human = True
        with contextlib.suppress(Exception):
            await client.interrupt()

    async def _drive(self, client: Any, st: "_RunState", turn: _Turn, *, ritual: bool = False) -> None:
        """Consume one turn's messages: events, water level, threshold, cost, errors."""
        pending_tools: set = set()
        if not ritual:
            st.pending = pending_tools
        emit = (lambda e: None) if ritual else st.emit
        async for msg in client.receive_response():
            st.heard = time.monotonic()
            # matched by class name, not isinstance: the SDK module is imported lazily (or faked in tests)
            kind = type(msg).__name__
            results_in = False   # the message was tool results with no call left open
            if kind in ("SystemMessage", "MirrorErrorMessage"):
                self._on_system(msg, st, turn, emit)
            elif kind == "AssistantMessage":
                self._on_answer(msg, st, turn, emit, pending_tools, ritual)
            elif kind == "UserMessage":
                results_in = self._on_results(msg, st, turn, emit, pending_tools)
            elif kind == "ResultMessage":
                self._on_result(msg, st, turn, emit)
            if turn.handoff and results_in and not st.interrupt_sent and not ritual and \
                    (not st.batch_hook or turn.late and not st.batches):
                # no batch hook (or a CLI that never calls it) stopped the turn: interrupt it where no
                # call of an answer is open
                st.interrupt_sent = True
                with contextlib.suppress(Exception):
                    await client.interrupt()

    def _on_system(self, msg: Any, st: "_RunState", turn: _Turn, emit: Callable[[Event], None]) -> None:
        """A system message: the session and model at init, the CLI's own API retries, a batch the
        store missed (taken from the CLI's transcript before disconnect; a damaged store ends the run)."""
        data = getattr(msg, "data", None) or {}
        details: dict = {"subtype": msg.subtype}
        if msg.subtype == "init":
            turn.session_seen = data.get("session_id")
            turn.model = data.get("model") or turn.model
        elif msg.subtype == "api_retry":
            details.update(attempt=data.get("attempt"), error_status=data.get("error_status"),
                           error=data.get("error"))
        elif msg.subtype == "mirror_error":
            turn.mirror_failed = True
            # the store missed a batch: taken from the CLI's transcript before disconnect
            if store_damage(str(data.get("error"))):   # no later batch will fare better
                raise FlowerError(text("store_damaged", self.lang, path=getattr(self.raw_store, "path", None) or self.state.describe(),
                                       error=redact(str(data.get("error"))), prog=program_name()), EXIT_SETUP)
            error = str(data.get("error"))
            if classify(error) == DISK_FULL:   # say which disk: the store's
                error = text("disk_full", self.lang, path=self._store_dir())
            line = text("info_mirror_error", self.lang, error=redact(error))
            if line not in self.degraded:
                self.degraded.append(line)
                st.emit(Event("info", session_id=st.sid, data={"message": line}))
        emit(Event("system", session_id=st.sid, data=details))

    def _on_answer(self, msg: Any, st: "_RunState", turn: _Turn, emit: Callable[[Event], None],
                   pending_tools: set, ritual: bool) -> None:
        """An assistant message: the main thread's answers, water level and threshold; its text,
        thinking and tool calls as events (a main-thread call stays pending until its result)."""
        main = getattr(msg, "parent_tool_use_id", None) is None
        synthetic = getattr(msg, "model", None) == SYNTHETIC_MODEL
        answer = getattr(msg, "message_id", None)
        calls: list[str] = []
        if main and not synthetic:
            turn.seen.append(msg)
            write_ahead(stream_ahead_path(self.paths.run_dir, st.sid), msg, st.sid)
            turn.late = turn.late or (turn.handoff and answer != turn.crossed_in)
            turn.answers += 1
            if isinstance(getattr(msg, "uuid", None), str):
                turn.answer_ids.append(msg.uuid)
            level = usage_level(getattr(msg, "usage", None))
            if level:
                st.level = level
            turn.model = msg.model or turn.model
        elif not synthetic and isinstance(getattr(msg, "uuid", None), str):
            turn.answer_ids.append(msg.uuid)   # a worker's: its transcript must reach the store too
            self._keep_streamed(st, turn)
        for block in msg.content:
            bkind = type(block).__name__
            if bkind == "TextBlock":
                if main and not synthetic:
                    turn.texts.append(block.text)
                    emit(Event("text", session_id=st.sid, level=st.level, window=st.window,
                               data={"text": block.text}))
            elif bkind == "ThinkingBlock":
                emit(Event("thinking", session_id=st.sid, data={"text": block.thinking}))
            elif bkind == "ToolUseBlock":
                if main:
                    pending_tools.add(block.id)
                    calls.append(block.id)
                emit(Event("tool_call", session_id=st.sid, level=st.level, window=st.window,
                           data={"name": block.name, "input": _short_input(block.input), "id": block.id}))
        journal_answer(self, st, msg)
        if main and not synthetic and not ritual and st.manage:
            self._check_level(st, turn, answer)
        if calls:   # after the level: a batch hook waiting for these calls then knows it
            st.calls_seen.update(calls)
            st.call_seen.set()

    def _keep_streamed(self, st: "_RunState", turn: _Turn) -> None:
        """A worker answered, a model call after the coordinator's answer that started it: an answer of
        the main thread that is by now neither in the store nor in the CLI's own transcript is one the
        CLI could not write (HOME full). It is stored from the stream at once, in a worker thread: a
        kill -9 of flower while the worker runs would lose it, and the resumed coordinator (a model
        that trusts its history) would delegate that work again."""
        import asyncio
        missing = turn.unmirrored()
        if not missing or turn.keeping is not None and not turn.keeping.done() or self._cli_wrote(st.sid, missing):
            return
        seen = list(turn.seen)

        def keep() -> None:
            with contextlib.suppress(Exception):
                if not self._cli_writing(st.sid, missing):
                    self.store_unrecorded(st.sid, seen)
        turn.keeping = asyncio.get_running_loop().run_in_executor(None, keep)

    def _cli_writing(self, sid: str, uuids: list[str]) -> bool:
        """Whether the CLI writes ``uuids`` into its transcript of ``sid`` within ``CLI_WRITE_GRACE`` seconds.
        It drains its writes every 100 ms, so a worker's first answer can come before the
        coordinator's is on disk; storing that from the stream would say "never recorded" of what the
        CLI records a moment later. Where the CLI's transcript cannot take a line (HOME full), it
        never will: False at once, and the caller stores the stream before a kill can lose it."""
        paths = cli_transcripts(self.project_key, sid)
        where = os.path.dirname(paths[-1]) if paths else os.path.join(cli_config_dir(), "projects", self.project_key)
        if dir_problem(where, min_free=CLI_LINE_ROOM) is not None:
            return False
        deadline = time.monotonic() + CLI_WRITE_GRACE
        while not self._cli_wrote(sid, uuids):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _cli_wrote(self, sid: str, uuids: list[str]) -> bool:
        """Whether the CLI's own transcript of ``sid`` holds every one of ``uuids`` (the mirror is then
        only behind, and a salvage would find them)."""
        try:
            for path in cli_transcripts(self.project_key, sid):
                with open(path, encoding="utf-8", errors="replace") as fh:
                    body = fh.read()
                uuids = [u for u in uuids if f'"{u}"' not in body]
        except OSError:
            return False
        return not uuids

    def _on_results(self, msg: Any, st: "_RunState", turn: _Turn, emit: Callable[[Event], None],
                    pending_tools: set) -> bool:
        """A user message's tool results as events; True when it had results and no main-thread call
        is left open."""
        results_in = False
        content = msg.content if isinstance(msg.content, list) else []
        if getattr(msg, "parent_tool_use_id", None) is None:
            turn.seen.append(msg)
            write_ahead(stream_ahead_path(self.paths.run_dir, st.sid), msg, st.sid)
        for block in content:
            if type(block).__name__ == "ToolResultBlock":
                pending_tools.discard(block.tool_use_id)
                results_in = not pending_tools
                body = _content_text(block.content)
                emit(Event("tool_result", session_id=st.sid, data={
                    "id": block.tool_use_id, "is_error": bool(block.is_error),
                    "chars": len(body), "preview": body[:200]}))
        return results_in

    def _on_result(self, msg: Any, st: "_RunState", turn: _Turn, emit: Callable[[Event], None]) -> None:
        """The turn's result: turns, cost, an error (unless it is the interrupt flower sent), and the
        model's window when the CLI tells it."""
        turn.result = msg
        turn.turns += int(getattr(msg, "num_turns", 0) or 0)
        # total_cost_usd is cumulative over one client connection (verified on the real CLI)
        turn.cost = max(turn.cost, float(getattr(msg, "total_cost_usd", 0) or 0))
        reason = getattr(msg, "terminal_reason", None)
        aborted_by_us = reason in ("aborted_tools", "aborted_streaming") and (turn.handoff or turn.human)
        if getattr(msg, "is_error", False) and not aborted_by_us:
            errors = getattr(msg, "errors", None) or []
            turn.error_text = getattr(msg, "result", None) or "; ".join(map(str, errors)) or msg.subtype
            turn.status = getattr(msg, "api_error_status", None)
            turn.terminal_reason = reason
        for model_name, usage in (getattr(msg, "model_usage", None) or {}).items():
            ctx_window = usage.get("contextWindow") if isinstance(usage, dict) else None
            if isinstance(ctx_window, int) and model_name == (turn.model or model_name):
                self.soft(self.windows.where, lambda w=ctx_window: self.windows.learn(st.model, w))
        emit(Event("system", session_id=st.sid, level=st.level, window=st.window,
                   data={"subtype": "turn_result", "cost_usd": turn.cost, "is_error": bool(msg.is_error)}))

    def _check_level(self, st: "_RunState", turn: _Turn, answer: str | None = None) -> None:
        if st.level >= st.warn_at and not st.near_sent:
            st.near_sent = True
            st.emit(Event("handoff", session_id=st.sid, level=st.level, window=st.window,
                          data={"phase": "near", "context": st.level, "window": st.window, "at": st.at,
                                "window_source": st.window_source}))
        if (st.level >= st.at or self._handoff_asked(st)) and not turn.handoff:
            turn.handoff = st.stop_batches = True
            turn.crossed_in = answer

    def _handoff_asked(self, st: "_RunState") -> bool:
        """A person asked the work step to hand over (``flower.py handoff``): said once, like a crossing."""
        if st.name != "work" or st.asked or not self.state.handoff_waiting():
            return False
        st.asked = True
        st.emit(Event("handoff", session_id=st.sid, level=st.level, window=st.window,
                      data={"phase": "asked", "reason": "asked", "message": text("info_handoff_asked", self.lang)}))
        return True

    async def _ritual(self, client: Any, st: "_RunState", turn: _Turn) -> None:
        """Ask the retiring session for its handoff document on the same live client (fail-soft)."""
        import asyncio
        st.emit(Event("handoff", session_id=st.sid, level=st.level, window=st.window,
                      data={"phase": "writing", "context": st.level, "window": st.window}))
        sub = _Turn()
        docs: list[str] = []
        st.stop_batches = False   # a tool the retiring session still calls runs, and the document follows

        async def ask() -> None:
            await client.query(text("handoff_prompt", self.lang))
            await self._drive(client, st, sub, ritual=True)
            if sub.error_text:
                return
            docs.append("\n".join(sub.texts))
            first = Ledger.parse(docs[0])
            soft = first.problems()
            if not soft or first.problems(soft=False):
                return
            # soft problems: ask once to fix them, then accept (the fixed one unless it got worse)
            sub.texts.clear()
            await client.query(text("handoff_fix", self.lang, problems="; ".join(soft)))
            await self._drive(client, st, sub, ritual=True)
            fixed = "\n".join(sub.texts)
            if not sub.error_text and not Ledger.parse(fixed).problems(soft=False):
                docs.append(fixed)

        try:
            await asyncio.wait_for(ask(), self.handoff.ritual_timeout)
        except asyncio.TimeoutError:
            turn.ritual_error = said("er_handoff_timed_out", seconds=int(self.handoff.ritual_timeout))
        except Exception as exc:
            turn.ritual_error = said("er_handoff_failed", why=type(exc).__name__)
        turn.cost = max(turn.cost, sub.cost)
        turn.turns += sub.turns
        if docs:  # a document arrived; a failed or timed-out request to fix it leaves that one standing
            turn.ritual_text, turn.ritual_error = docs[-1], None
        elif turn.ritual_error is None:
            if sub.error_text:
                kind = classify(sub.error_text, status=sub.status, terminal_reason=sub.terminal_reason)
                turn.ritual_error = "context overflow" if kind == OVERFLOW else said("er_handoff_failed_kind", kind=kind)
            else:
                turn.ritual_text = "\n".join(sub.texts)

    def _write_note(self, path: str, body: str) -> None:
        ensure_private_dir(os.path.dirname(path))
        atomic_write(path, body)

    def _write_handoff(self, doc: str, body: str, step: str) -> None:
        """The new handoff document; the previous one moves to ``notes/archive/handoff/``."""
        changed = [doc]
        if os.path.exists(doc):
            previous = os.path.join(self.paths.notes_dir, "archive", "handoff",
                                    f"{safe_name(step)}-{timestamp()}-{uuid.uuid4().hex[:4]}.md")
            ensure_private_dir(os.path.dirname(previous))
            os.replace(doc, previous)
            changed.append(previous)
        self._write_note(doc, body)
        self.soft(doc, lambda: self.state.notes_changed(changed))

    def _capped(self, st: "_RunState") -> bool:
        return st.generation >= self.handoff.max_generations

    def _earlier_ledger(self, st: "_RunState") -> Ledger | None:
        """The step's previous handoff document, if it has one: what the sessions before this one did
        (in this run or an earlier one), which this session's transcript does not show."""
        previous = _read_text(self.paths.handoff(st.name))
        return Ledger.parse(previous) if previous else None

    def _with_streamed(self, st: "_RunState", entries: list[dict]) -> list[dict]:
        """The retiring session's ``entries`` and, after them, its answers the stream showed this run
        but the store does not hold (unreachable at the handoff, or the CLI could not write its
        transcript): a degraded ledger must list every call that ran, or the successor redoes it."""
        known = {e["uuid"] for e in entries if isinstance(e.get("uuid"), str)}
        seen = [m for sid, m in st.streamed if sid == st.sid]
        st.streamed = [(sid, m) for sid, m in st.streamed if sid != st.sid]
        return entries + stream_entries(seen, st.sid, newest_uuid(entries), known)

    def _carried_on(self, st: "_RunState", entries: list[dict]) -> Ledger | None:
        """What the sessions before the current one did, for its degraded ledger: the ledger it was
        started from in this run, else the one its first prompt carried (the step's document when
        that is the same, whole where the carry was trimmed), else the step's document. The document
        alone breaks the chain when a handoff could not write it (a full disk, a broken notes dir)."""
        if st.carried is not None and st.carried[0] == st.sid:
            return st.carried[1]
        document = self._earlier_ledger(st)
        carried = carried_ledger(entries)
        if carried is None or document is not None and same_handoff(carried, document):
            return document
        return carried

    async def _hand_over(self, st: "_RunState", result: StepResult, step_prompt: str,
                         ledger_text: str | None, why: str | None) -> str | None:
        """Retire the current session: write the handoff document and slim transcript, pick a fresh
        session (lineage updated by the caller's loop) and return the carry; None = stop the step."""
        if self._capped(st):
            result.error = said("er_generation_cap", n=self.handoff.max_generations)
            return None
        old = st.sid
        try:
            entries = await self.store.load_outline({"project_key": self.project_key, "session_id": old}) or []
        except Exception:  # nothing blocks the handover: the carry is built from what there is
            entries = []
        entries = self._with_streamed(st, entries)
        thread = recent_thread(entries, limit=DEGRADED_THREAD)   # the carry's is its end (limit 10)
        ledger = None
        if ledger_text:
            ledger = Ledger.parse(ledger_text)
            problems = ledger.problems(soft=False)
            if problems:
                why, ledger = "incomplete: " + "; ".join(problems), None
        if ledger is None:
            ledger = degraded_ledger(entries, why or "no handoff document", step_prompt, earlier=self._carried_on(
                st, entries), workbench=workbench_pointers(self.paths), thread=thread)
            st.degraded_in_row += 1
        else:
            st.degraded_in_row = 0
        generation = st.generation + 1
        doc = self.paths.handoff(st.name)
        # the title counts on from an earlier wake's document; the cap counts this run's handoffs
        number = max(generation, ledger_generation(_read_text(doc)) + 1)
        self.soft(doc, lambda: self._write_handoff(doc, ledger.render(st.name, number, self.lang), st.name))
        transcript = self.paths.transcript(old)
        self.soft(transcript, lambda: self._write_note(transcript, slim_transcript(entries, old)))
        result.retired.append(old)
        level = st.level
        # a floor above the threshold shows as successors that fill up at once; two degraded handoffs
        # caused by passing faults (a failed ritual, a spurious overflow) in a fresh session do not
        if st.degraded_in_row >= 2 and level >= st.at // 2:
            result.error = said("er_degraded_twice", window=st.window, at=st.at, level=level)
            return None
        # only files that exist: a document that could not be written is not a pointer to follow
        nav = {label: path for label, path in (("handoff document", doc), ("brief", self.paths.brief),
                                               ("goal", self.paths.goal)) if os.path.exists(path)}
        for i, sid in enumerate(result.retired, 1):
            if os.path.exists(self.paths.transcript(sid)):
                nav[f"transcript {i} (retired session)"] = self.paths.transcript(sid)
        carry = assemble_carry(ledger, nav=nav, thread=thread[-10:],
                               budget_chars=self.handoff.budget_chars, lang=self.lang,
                               full_text=doc if "handoff document" in nav else "-")
        st.sid = str(uuid.uuid4())
        st.carried = (st.sid, ledger)
        st.generation = generation
        st.level = 0
        st.near_sent = False
        st.emit(Event("handoff", session_id=st.sid, level=level, window=st.window, data={
            "phase": "done", "context": level, "window": st.window, "degraded": ledger.degraded, "path": doc,
            "sections": [k for k in LEDGER_KEYS if ledger.get(k)], "generation": generation,
            "retired": old, "carry_chars": len(carry.text), "trimmed": carry.trimmed, "dropped": carry.dropped}))
        return carry.text + workbench_carry(self.paths, self.lang)


@record
class _RunState:
    """Mutable state of one ``Runtime.run`` call."""

    name: str
    window: int
    at: int
    warn_at: int
    manage: bool
    emit: Callable[[Event], None]
    model: str | None = None
    window_source: str = "default"
    sid: str = ""
    level: int = 0
    near_sent: bool = False
    interrupt_sent: bool = False
    generation: int = 0
    degraded_in_row: int = 0
    failed_in_row: int = 0   # failed connections since the model last made progress
    carried: Any = None      # (session id, Ledger) the current successor session was started from
    streamed: list = field(default_factory=list)   # (session id, AssistantMessage) the stream showed this run
    start_prompt: str | None = None
    heard: float = 0.0       # time.monotonic() of the CLI's last message
    pending: Any = None      # the main thread's tool calls still running (a set, while a turn is read)
    batch_hook: bool = False      # the connection stops a turn after a batch of tools (PostToolBatch)
    batches: int = 0              # batches the hook heard of on this connection (0: the CLI may lack it)
    stop_batches: bool = False    # this turn crossed the threshold: the next batch of tools ends it
    calls_seen: set = field(default_factory=set)   # main-thread tool calls the stream has shown
    call_seen: Any = None         # asyncio.Event: set whenever ``calls_seen`` grows
    step_prompt: str = ""         # the step's own prompt (a fresh start without a start prompt uses it)
    prompt: str = ""              # what the next connection sends
    resuming: str | None = None   # the stored session the next connection resumes (None: a fresh one)
    fork: bool = False            # the next connection forks ``resuming`` under ``sid``
    lineage_key: str | None = None   # the lineage entry the step keeps current
    asked: bool = False           # this handoff was asked for (``flower.py handoff``): its flag goes after it
    asked_in_batch: bool = False  # ... while a batch of tools ran: the batch hook ended the turn for it

    async def shown(self, ids: Iterable[str], timeout: float) -> None:
        """Wait until the stream has shown every call of ``ids`` (their answer's level is then known),
        at most ``timeout`` seconds."""
        import asyncio
        wanted = set(ids)
        deadline = time.monotonic() + timeout
        while self.call_seen is not None and not wanted <= self.calls_seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self.call_seen.clear()   # no await since the check: a call shown meanwhile sets it again
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.call_seen.wait(), remaining)


def _short_input(value: Any, limit: int = 300) -> dict:
    """A tool call's input for events: always an object (``jq`` can rely on it), each long value cut."""
    if not isinstance(value, dict):
        value = {"value": value}
    raw = json.dumps(value, ensure_ascii=False, default=str)
    if len(raw) <= limit:
        return value
    each = max(40, limit // max(1, len(value)))
    return {str(k): v if len(json.dumps(v, ensure_ascii=False, default=str)) <= each
            else json.dumps(v, ensure_ascii=False, default=str)[:each] + "…" if not isinstance(v, str) else v[:each] + "…"
            for k, v in value.items()}


# --- Judge sandbox: the judge runs commands in a throwaway copy and cannot change the work ---

JUDGE_TOOLS = ["Read", "Glob", "Grep", "Bash"]
JUDGE_WRITE_TOOLS = ("Write", "Edit", "MultiEdit", "NotebookEdit")


def _pre_tool_deny(reason: str) -> dict:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


def judge_tool_decision(tool: str, tool_input: Any, copy: str | None, guarded: tuple[str, ...],
                        lang: str = "en") -> dict:
    """What the judge's PreToolUse guard answers for one call (pure): a write tool is refused; a Bash
    command runs inside ``copy`` (``cd`` prepended) and is refused when it names a ``guarded`` path
    (the real workspace) or when there is no copy; anything else is left to the tool list."""
    if tool in JUDGE_WRITE_TOOLS:
        return _pre_tool_deny(text("judge_write_refused", lang, tool=tool))
    if tool != "Bash":
        return {}
    tool_input = tool_input if isinstance(tool_input, dict) else {}
    command = str(tool_input.get("command", ""))
    if copy is None:
        return _pre_tool_deny(text("judge_no_copy", lang))
    roots = [path.rstrip("/") for path in guarded if path.rstrip("/")]
    if any(re.search(re.escape(root) + r"(?![^/\s'\"])", command) for root in roots):
        return _pre_tool_deny(text("judge_path_refused", lang))
    import shlex
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                                   "updatedInput": {**tool_input, "command": f"cd {shlex.quote(copy)} && {command}"}}}


class JudgeSandbox:
    """The judge verifies by running the goal's checks, yet must not change the work: each round copies
    the workspace (without flower's own ``.flower`` and run dir) into a temp folder, the judge's Bash
    commands run there, write tools are refused, and the copy is removed when the round ends. A copy,
    not a git worktree: the work being judged is usually uncommitted."""

    def __init__(self, paths: Paths):
        self.paths = paths
        self.copy: str | None = None

    def hooks(self) -> dict[str, list[tuple[str | None, Callable]]]:
        """The judge's SDK hooks (``AgentSpec.hooks``): one PreToolUse guard for every tool."""
        return {"PreToolUse": [(None, self.guard)]}

    async def guard(self, data: dict, tool_use_id: Any, context: Any) -> dict:
        """The PreToolUse hook (see :func:`judge_tool_decision`)."""
        data = data if isinstance(data, dict) else {}
        return judge_tool_decision(str(data.get("tool_name", "")), data.get("tool_input"), self.copy,
                                   (self.paths.workspace,), self.paths.lang)

    @contextlib.contextmanager
    def round(self) -> Any:
        """A fresh copy of the workspace for one judge round, removed afterwards (also on failure)."""
        import shutil
        import tempfile
        base = tempfile.mkdtemp(prefix="flower-judge-")
        skip = {os.path.realpath(self.paths.flower_dir), os.path.realpath(self.paths.run_dir)}

        def ignore(folder: str, names: list[str]) -> list[str]:
            return [n for n in names if os.path.realpath(os.path.join(folder, n)) in skip]
        try:
            copy = os.path.join(base, os.path.basename(self.paths.workspace) or "workspace")
            shutil.copytree(self.paths.workspace, copy, symlinks=True, ignore=ignore, ignore_dangling_symlinks=True)
            self.copy = copy
            yield copy
        finally:
            self.copy = None
            shutil.rmtree(base, ignore_errors=True)


# --- Workflow: steps, continuity across wakes, the starter flow (clarify -> goal -> work + judge) ---

async def _maybe_await(value: Any) -> Any:
    import asyncio
    return await value if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future) else value


def _resolve_prompt(prompt: Any, ctx: dict) -> str:
    return prompt(ctx) if callable(prompt) else str(prompt)


@record
class Step:
    """One agent job in a workflow.

    ``gate(ctx, result)`` (may be async) runs once per successful attempt: True/None passes,
    anything else is a rejection; ``on_reject(ctx, result, rejection)`` then returns the prompt that
    resumes the same session as ``<name>#round<N>`` (None = give up). ``resume_prompt`` is sent
    instead of ``prompt`` when the step continues a stored session. ``reduce(ctx, result)`` turns
    the result into ``ctx[name]`` (default: the final text). ``addendum`` is appended to whatever
    the step starts, resumes or redoes with (the starter flow puts a wake sentence there while the
    brief is unfinished). ``when(ctx)`` (may be async) runs the step only when true. When the step
    fails or gives up, ``on_fail`` decides: ``"stop"`` raises StepAbort, ``"continue"`` sets
    ``ctx[name] = None`` and goes on, ``"skip"`` goes on as if the step had not been due (no
    ``ctx[name]``; its name is added to ``ctx["_skipped"]``)."""

    name: str
    spec: AgentSpec
    prompt: str | Callable[[dict], str]
    resume_from: str | None = None
    fork: bool = False
    retries: int = 0
    gate: Callable[[dict, StepResult], Any] | None = None
    on_fail: str = "stop"
    when: Callable[[dict], bool] | None = None
    on_reject: Callable[[dict, StepResult, Any], Any] | None = None
    resume_prompt: str | Callable[[dict], str] | None = None
    reduce: Callable[[dict, StepResult], Any] | None = None
    addendum: str | None = None


ON_FAIL = ("stop", "continue", "skip")


class Workflow:
    """Steps run in order. With ``continuous=True`` (default) a step without ``resume_from``
    continues its same-named stored session from the lineage; ``continuous=False`` starts fresh."""

    def __init__(self, steps: list[Step], *, continuous: bool = True):
        for step in steps:
            if not step.name or "\x00" in step.name or len(step.name) > 200:
                raise FlowerError(said("er_step_name", name=repr(step.name[:40])), EXIT_USAGE)
            if step.on_fail not in ON_FAIL:
                raise FlowerError(said("er_step_on_fail", name=repr(step.name[:40]), allowed=", ".join(ON_FAIL)), EXIT_USAGE)
        self.steps = steps
        self.continuous = continuous

    async def run(self, rt: Runtime, ctx: dict | None = None) -> dict:
        """Run every step; returns the context (``_woke``, ``_sessions``, ``_results``, ``_skipped``
        and one key per step). Raises StepAbort when a step fails with ``on_fail="stop"``."""
        ctx = dict(ctx or {})
        ctx.setdefault("_sessions", {})
        ctx.setdefault("_results", {})
        ctx["_woke"] = (await rt.load_lineage()).woke + 1
        rt.soft(rt.lineage.where, rt.lineage.bump)
        for step in self.steps:
            if step.when is not None and not await _maybe_await(step.when(ctx)):
                continue
            await self._run_step(rt, step, ctx)
        return ctx

    async def _run_step(self, rt: Runtime, step: Step, ctx: dict) -> None:
        resume, fork = None, step.fork
        if step.resume_from:
            resume = ctx["_sessions"].get(step.resume_from) or rt.lineage.steps.get(step.resume_from)
        elif self.continuous and not step.fork:
            stored = rt.lineage.steps.get(step.name)
            if stored and await rt.holds_session(stored):
                resume = stored
        continuing = resume is not None and not step.resume_from
        chosen = step.resume_prompt if continuing and step.resume_prompt is not None else step.prompt
        redo = rt.lineage.redo_prompt(step.name) if self.continuous and resume is None else None
        prompt = redo if redo is not None else _resolve_prompt(chosen, ctx)
        if continuing and rt.lineage.moved_from:   # old paths in the history are not this machine's
            prompt = f"{text('moved_prompt', rt.lang, old=rt.lineage.moved_from, new=rt.paths.workspace)}\n\n{prompt}"
        prompt = restore_note(rt, prompt) if continuing else prompt
        if step.addendum:
            prompt = f"{prompt}\n\n{step.addendum}"
        rt.emit(Event("step", step=step.name, session_id=resume, data={
            "name": step.name, "continues": continuing, "woke": ctx.get("_woke"),
            "context": rt.last_context(resume) if resume else None}))
        label, retry, round_no = step.name, 0, 1
        while True:
            result = await rt.run(step.spec, prompt, step_name=label, resume=resume, fork=fork,
                                  lineage_key=step.name)
            rt.record(result)
            ctx["_sessions"][step.name] = result.session_id
            fork = False
            if not result.ok:
                if retry < step.retries:
                    retry += 1
                    label = f"{step.name}#retry{retry}"
                    resume = result.session_id if result.session_id and await rt.holds_session(result.session_id) else None
                    prompt = text("resume_prompt", rt.lang) if resume else _resolve_prompt(step.prompt, ctx)
                    continue
                if step.on_fail != "stop":
                    return _give_up(step, ctx)
                raise StepAbort(said("er_step_failed", label=label, error=result.error))
            verdict = await _maybe_await(step.gate(ctx, result)) if step.gate else True
            if verdict is True or verdict is None:
                ctx[step.name] = step.reduce(ctx, result) if step.reduce else result.text
                ctx["_results"][step.name] = result
                return
            follow = await _maybe_await(step.on_reject(ctx, result, verdict)) if step.on_reject else None
            if not follow:
                reason = getattr(verdict, "reason", None) or (verdict if isinstance(verdict, str) else "rejected")
                if step.on_fail != "stop":
                    return _give_up(step, ctx)
                raise StepAbort(f"{step.name}: {' '.join(str(reason).split())[:500]}")
            round_no += 1
            label, resume, prompt = f"{step.name}#round{round_no}", result.session_id, follow


def _give_up(step: Step, ctx: dict) -> None:
    """A failed step whose ``on_fail`` lets the workflow go on."""
    if step.on_fail == "skip":
        ctx.setdefault("_skipped", []).append(step.name)
    else:
        ctx[step.name] = None


class Human:
    """The person at the terminal, as the workflow sees them (async; None when there is nobody)."""

    async def ask(self, question: str) -> str:
        """Ask one free-text question."""
        raise NotImplementedError

    async def choose(self, question: str, options: list[str]) -> str:
        """Ask the human to pick one of ``options``."""
        raise NotImplementedError


# what the human may answer to an unreachable verdict, each saying its consequence
UNREACHABLE_CHOICES = ("choice_accept", "choice_amend", "choice_keep_working", "choice_stop")


def _brief_text(paths: Paths) -> str:
    return _read_text(paths.brief) or ""


def _wake_additions(brief: str, lang: str) -> str:
    """The "Added on wake" sections of a brief, verbatim (empty when there are none)."""
    heading = "### " + text("added_on_wake", lang)
    at = brief.find(heading)
    return brief[at:].strip() + "\n" if at >= 0 else ""


def _pending_wake(rt: Runtime, sentence: str | None) -> dict:
    """What a wake still has to carry through: the lineage's pending wake (written ahead by ``go``,
    or left by a run killed before the work step was sent it), with ``sentence`` added when the
    caller did not write it ahead. ``{"sentences": [...], "goal": re-derive the goal?}``."""
    wake = rt.lineage.wake
    if sentence and (wake is None or sentence not in wake["sentences"]):
        if rt.soft(rt.lineage.where, lambda: rt.lineage.add_wake(sentence)):
            wake = rt.lineage.wake
        else:   # not written ahead: this run still carries it
            wake = {"sentences": [*(wake["sentences"] if wake else []), sentence], "goal": True}
    return wake or {"sentences": [], "goal": False}


def _add_to_brief(rt: Runtime, sentences: list[str]) -> None:
    """Append the wake sentences the brief does not hold yet under a dated *Added on wake* heading
    (a run killed between writing one ahead and appending it left it out)."""
    brief = _brief_text(rt.paths)
    missing = [s.strip() for s in sentences if s.strip() not in brief]
    if missing:
        stamp = time.strftime("%Y-%m-%d %H:%M")
        addition = f"\n\n### {text('added_on_wake', rt.lang)} {stamp}\n" + "\n".join(missing) + "\n"
        rt.write_note(rt.paths.brief, brief.rstrip() + addition)


class _WakeWatch:
    """A store hook that settles the pending wake sentences once the work step's session holds a user
    turn with all of them (``seen``): until then a kill leaves them pending, and the next run sends
    them again."""

    def __init__(self, rt: Runtime, sentences: list[str]):
        self.rt = rt
        self.words = [s.strip() for s in sentences]
        self.seen = False

    def __call__(self, key: dict, entries: list[dict]) -> None:
        rt = self.rt
        if self.seen or key.get("subpath") or key.get("session_id") != rt.lineage.steps.get("work"):
            return
        for entry in entries:
            said = entry_text(entry) if isinstance(entry, dict) and entry.get("type") == "user" else ""
            if said and all(w in said for w in self.words):
                self.seen = True
                rt.soft(rt.lineage.where, lambda: rt.lineage.settle_wake(sentences=True))
                return


def _wake_work_prompt(sentence: str, paths: Paths, ctx: dict) -> str:
    """The work step's resume prompt on a wake with a sentence: the sentence, and the goal's new checks
    when the goal step re-derived it in this run (else the first judge round fails on unseen checks)."""
    goal = _read_text(paths.goal) or "" if ctx.get("goal") else ""
    return sentence + (text("wake_new_goal", paths.lang, path=paths.goal, goal=goal.strip()) if goal.strip() else "")


def coordinator(paths: "Paths", *, lang: str = "en", name: str = "work", instructions: str = "",
                model: str | None = None, worker_model: str | None = None,
                permission_mode: str = "acceptEdits") -> "AgentSpec":
    """The coordinator: plans, delegates to workers through Agent, glances read-only. The session's
    tools include the workers' (a session-wide tool list binds subagents too); the rules hook denies
    the main thread the ones that change things, and the spill hook keeps every big output on disk."""
    hands = list(dict.fromkeys(COORDINATOR_TOOLS + WORKER_TOOLS))
    return AgentSpec(
        name, instructions=(instructions + "\n\n" if instructions else "") + text("coordinator_instructions", lang),
        preset=True, tools=hands, allowed_tools=hands, model=model, permission_mode=permission_mode,
        env=coordinator_env(), disallowed_tools=coordinator_denied_agents(),
        agents={WORKER_NAME: worker(lang=lang, model=worker_model)},
        hooks={"PreToolUse": [(None, rules_hook(lang)), ("|".join(AGENT_TOOLS), agent_call_hook(paths, lang))],
               "PostToolUse": [(SPILL_MATCHER, spill_hook(paths, lang)), ("Write|Edit", workbench_refresh_hook(paths)),
                               ("|".join(AGENT_TOOLS), worker_error_hook(lang))],
               "PostToolUseFailure": [("|".join(AGENT_TOOLS), worker_error_hook(lang))]})


def starter_flow(ask: str | None, *, rt: Runtime, rounds: int = 3, use_goal: bool = True,
                 human: Human | None = None, wake_sentence: str | None = None,
                 model: str | None = None, permission_mode: str = "acceptEdits", delegate: bool = False,
                 worker_model: str | None = None) -> Workflow:
    """The flow behind ``python flower.py "..."``: clarify -> goal -> work, judged. With ``delegate``
    the work step is a :func:`coordinator` whose workers do the hands-on work.

    Frozen stages are skipped (a complete brief skips clarify, a complete goal skips the goal step);
    a wake sentence is appended to the brief, becomes the work step's resume prompt and makes the goal
    step re-derive the goal. The judge is a fresh session every round and never enters the lineage.
    """
    paths, lang = rt.paths, rt.lang
    ask = redact(ask) if ask else ask  # credentials never reach a prompt, not even the user's own
    brief_frozen = Brief.parse(_brief_text(paths)).complete
    wake = _pending_wake(rt, redact(wake_sentence) if wake_sentence else None)
    if wake["sentences"]:
        watch = _WakeWatch(rt, wake["sentences"])
        rt.on_stored(watch)
        if rt.lineage.steps.get("work"):   # a killed run's CLI may have written them, unmirrored
            rt.salvage(rt.lineage.steps["work"])
        if watch.seen:
            wake = {**wake, "sentences": []}
    wake_sentence = "\n\n".join(s.strip() for s in wake["sentences"]) or None
    _add_to_brief(rt, wake["sentences"])
    asker = human.ask if human is not None else None

    t = functools.partial(text, lang=lang)
    clarifier = AgentSpec("clarify", instructions=t("clarify_instructions"), tools=[], model=model,
                          permission_mode="default", ask=asker)
    goal_setter = AgentSpec("goal", instructions=t("goal_instructions"), tools=["Read", "Glob", "Grep"],
                            allowed_tools=["Read", "Glob", "Grep"], model=model, permission_mode="default")
    worker = AgentSpec("work", instructions=t("work_instructions"), preset=True,
                       tools=["Read", "Write", "Edit", "Bash", "Glob", "Grep", "TodoWrite"],
                       allowed_tools=["Read", "Write", "Edit", "Bash", "Glob", "Grep", "TodoWrite"],
                       model=model, permission_mode=permission_mode)
    if delegate:
        worker = coordinator(paths, lang=lang, instructions=t("work_instructions"), model=model,
                             worker_model=worker_model, permission_mode=permission_mode)
    sandbox = JudgeSandbox(paths)
    judge = AgentSpec("judge", instructions=t("judge_instructions"), tools=list(JUDGE_TOOLS),
                      allowed_tools=list(JUDGE_TOOLS), disallowed_tools=list(JUDGE_WRITE_TOOLS),
                      model=model, permission_mode="default", handoff=False, hooks=sandbox.hooks())

    def clarify_prompt(ctx: dict) -> str:
        return t("clarify_prompt", task=ask or "", who=t("clarify_human") if human else t("clarify_no_human"))

    def brief_gate(ctx: dict, result: StepResult) -> Any:
        brief = Brief.parse(result.text)
        if not brief.complete:
            heads = BRIEF_HEADINGS.get(lang, BRIEF_HEADINGS["en"])
            return t("brief_lacks", missing=", ".join(heads[k] for k in BRIEF_KEYS if _is_empty(brief.sections.get(k))))
        added = _wake_additions(_brief_text(paths), lang)  # sentences given while the brief was unfinished
        rt.write_note(paths.brief, brief.render(lang) + (f"\n{added}" if added else ""))
        return True

    def brief_fix(ctx: dict, result: StepResult, reason: Any) -> str | None:
        ctx["_brief_fixes"] = ctx.get("_brief_fixes", 0) + 1
        if ctx["_brief_fixes"] > 2:
            return None
        return t("brief_fix", reason=reason)

    def goal_prompt(ctx: dict) -> str:
        return t("goal_prompt", brief=_brief_text(paths))

    def goal_gate(ctx: dict, result: StepResult) -> Any:
        goal = Goal.parse(result.text)
        if not goal.complete:
            return t("goal_lacks")
        rt.write_note(paths.goal, goal.render(lang))
        rt.soft(rt.lineage.where, lambda: rt.lineage.settle_wake(goal=True))   # re-derived: no longer pending
        if goal.unverifiable:
            rt.emit(Event("info", step="goal", data={"message": text("info_unverifiable", lang, n=len(goal.unverifiable)),
                                                     "checks": goal.unverifiable}))
        return True

    def goal_fix(ctx: dict, result: StepResult, reason: Any) -> str | None:
        ctx["_goal_fixes"] = ctx.get("_goal_fixes", 0) + 1
        return None if ctx["_goal_fixes"] > 2 else t("goal_fix", reason=reason)

    def work_prompt(ctx: dict) -> str:
        goal_text = _read_text(paths.goal) or ""
        return (t("work_prompt_brief", path=paths.brief, brief=_brief_text(paths))
                + (t("work_prompt_goal", path=paths.goal, goal=goal_text) if goal_text else "") + t("work_prompt_end")
                + (workbench_prompt(paths, lang) if delegate else ""))

    async def judge_gate(ctx: dict, result: StepResult) -> Any:
        goal = Goal.parse(_read_text(paths.goal) or "")
        if not use_goal or not goal.checks:
            return True
        ctx["_judge_round"] = ctx.get("_judge_round", 0) + 1
        n = ctx["_judge_round"]
        label = f"work·{t('judge_label')}#{n}"
        rt.emit(Event("step", step=label, data={"name": label, "continues": False, "woke": ctx.get("_woke"),
                                                "context": None}))
        with sandbox.round():
            verdict_result = await rt.run(judge, t("judge_prompt", goal=goal.render(lang)), step_name=label, lineage_key=None)
        rt.record(verdict_result)
        ctx.setdefault("_judges", []).append(verdict_result.session_id)
        verdict = Verdict.parse(verdict_result.text) if verdict_result.ok else \
            Verdict("not_yet", t("judge_failed", error=verdict_result.error))
        ctx["_verdict"] = verdict
        rt.emit(Event("info", step=label, data={"verdict": verdict.status, "failed": verdict.failed_checks}))
        if verdict.achieved:
            rt.soft(rt.lineage.where, lambda: rt.lineage.mark_achieved(result.session_id))
            return True
        if verdict.status == "unreachable" and verdict.clean:
            if human is None:
                raise StepAbort(said("er_judge_unreachable", reason=verdict.reason[:400]))
            accept, amend, keep, stop = (text(k, lang) for k in UNREACHABLE_CHOICES)
            choice = await human.choose(text("unreachable_question", lang, reason=verdict.reason[:400]),
                                        [accept, amend, keep, stop])
            if choice == accept:
                return True
            if choice == amend:
                amended = redact(await human.ask(text("amend_question", lang)))
                rt.write_note(paths.goal, Goal(amended, goal.checks).render(lang))
                return Verdict("not_yet", text("goal_amended", lang, goal=amended), [], clean=True)
            if choice == keep:
                return Verdict("not_yet", text("judge_is_wrong", lang, reason=verdict.reason[:400]),
                               verdict.failed_checks, clean=True)
            raise StepAbort(text("unreachable_stopped", lang))
        return verdict

    def work_again(ctx: dict, result: StepResult, verdict: Any) -> str | None:
        ctx["_rounds_used"] = ctx.get("_rounds_used", 1) + 1
        if ctx["_rounds_used"] > max(1, rounds):
            return None
        failed = "\n".join(f"- {c}" for c in getattr(verdict, "failed_checks", [])) or t("not_listed")
        return t("work_again", failed=failed, reason=getattr(verdict, "reason", str(verdict)))

    goal_frozen = Goal.parse(_read_text(paths.goal) or "").complete
    steps = [
        Step("clarify", clarifier, clarify_prompt, resume_prompt=text("clarify_resume", lang),
             when=lambda ctx: not brief_frozen, gate=brief_gate, on_reject=brief_fix,
             addendum=text("wake_addendum", lang, words=wake_sentence.strip()) if wake_sentence else None),
    ]
    if use_goal:
        steps.append(Step("goal", goal_setter, goal_prompt, gate=goal_gate, on_reject=goal_fix,
                          when=lambda ctx: not goal_frozen or wake["goal"]))
    steps.append(Step("work", worker, work_prompt, resume_prompt=functools.partial(_wake_work_prompt, wake_sentence, paths)
                      if wake_sentence else text("work_resume", lang),
                      gate=judge_gate, on_reject=work_again))
    return Workflow(steps)


# --- Report: one self-contained HTML page of a job ---
#
# What a job did, drawn from what flower keeps: the manifest rows, the lineage, the notes, and the
# journal: one compact line per answer (its context level and tool calls), per connection's cost, per
# handoff, wait, outage, kill, degraded continuity and judge verdict, written as the job runs through
# the state backend. ``report_data`` turns them into one dict (``report --json``), ``render_report``
# into one HTML page with inline SVG and CSS: nothing is fetched from anywhere when it is opened.

# -- the data: pure, from rows, records, notes --

def _epoch(value: Any) -> float | None:
    """An ISO time (a manifest row's) as epoch seconds (None when it is not one)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = _dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    return moment.timestamp()


def _base_step(label: str) -> str:
    """``work#round2`` -> ``work``."""
    return label.split("#", 1)[0]


def _check_status(check: str, verdict: dict | None) -> str:
    """``passed``, ``failed`` or ``unknown``: a check is failed when the last verdict lists it."""
    if not verdict:
        return "unknown"
    words = check.strip().lower()
    for failed in verdict.get("failed") or []:
        other = str(failed).strip().lower()
        if other and (other in words or words in other):
            return "failed"
    return "passed" if verdict.get("verdict") == "achieved" else "unknown"


def _report_steps(rows: list[dict], records: list[dict], hosts: dict[str, str], running: bool) -> list[dict]:
    """One entry per step (a manifest row, or journal records of a step with no row yet: running,
    or killed before its row was written), with its tool calls and what prune saved."""
    steps, by_key = [], {}
    for row in rows:
        start = _epoch(row.get("started_at"))
        if start is None:
            continue
        step = {"label": row["step"], "step": _base_step(row["step"]), "run": row.get("run", ""),
                "host": hosts.get(row.get("run", ""), ""), "start": start,
                "end": _epoch(row.get("ended_at")) or start, "status": "ok" if row.get("ok") else "failed",
                "cost": float(row.get("cost_usd") or 0), "turns": int(row.get("num_turns") or 0),
                "attempts": int(row.get("attempts") or 1), "generations": int(row.get("generations") or 0),
                "error": row.get("error"), "session_id": row.get("session_id"), "tools": 0, "tool_names": {},
                "worker_tools": 0, "saved": {}}
        if row.get("error") in ("killed-by-signal", "interrupted"):
            step["status"] = "killed"
        steps.append(step)
        by_key.setdefault((step["run"], step["label"]), []).append(step)
    last_run = max(((r["t"], r["r"]) for r in records if r.get("k") == "run"), default=(0, ""))[1]
    for rec in records:
        label, run = rec.get("s"), rec.get("r", "")
        if not isinstance(label, str) or not label or rec["k"] in ("run", "kill"):
            continue
        found = by_key.get((run, label))
        step = None
        if found:
            step = next((s for s in reversed(found) if s["start"] - 1 <= rec["t"]), found[0])
        elif rec["k"] in ("turn", "step", "cost", "handoff", "retry", "error", "resume"):
            status = "running" if running and run == last_run else "killed"
            step = {"label": label, "step": _base_step(label), "run": run, "host": hosts.get(run, ""),
                    "start": rec["t"], "end": rec["t"], "status": status, "cost": 0.0, "turns": 0, "attempts": 1,
                    "generations": 0, "error": None, "session_id": rec.get("sid"), "tools": 0,
                    "tool_names": {}, "worker_tools": 0, "saved": {}, "open": True}
            steps.append(step)
            by_key[(run, label)] = [step]
        if step is None:
            continue
        step["end"] = max(step["end"], rec["t"])
        if step.get("open"):   # no row yet: what the journal tells so far (a connection's cost is cumulative)
            if rec["k"] == "cost":
                spent = step.setdefault("spent", {})
                spent[rec.get("sid")] = max(spent.get(rec.get("sid"), 0.0), float(rec.get("cost") or 0))
                step["cost"] = round(sum(spent.values()), 6)
            if rec["k"] == "turn":
                step["turns"] += 1
        if rec["k"] == "turn":
            for name in rec.get("tools") or []:
                step["tools"] += 1
                step["tool_names"][str(name)] = step["tool_names"].get(str(name), 0) + 1
        elif rec["k"] == "wturn":   # a worker's calls: counted apart (the coordinator's are "tools")
            step["worker_tools"] += len(rec.get("tools") or [])
        elif rec["k"] == "resume" and isinstance(rec.get("pruned"), dict):
            for key, value in rec["pruned"].items():
                if isinstance(value, int) and not isinstance(value, bool):
                    step["saved"][key] = step["saved"].get(key, 0) + value
    for step in steps:
        step.pop("open", None)
        step.pop("spent", None)
    steps.sort(key=lambda s: s["start"])
    return steps


def _report_sessions(records: list[dict]) -> list[dict]:
    """One entry per session that answered: its step, generation, window, threshold and one
    ``[t, level]`` point per answer."""
    sessions: dict[str, dict] = {}
    generation: dict[str, int] = {}
    for rec in records:
        if rec["k"] == "handoff" and rec.get("phase") == "done" and rec.get("sid"):
            generation[rec["sid"]] = int(rec.get("generation") or 0)
        if rec["k"] != "turn" or not isinstance(rec.get("sid"), str):
            continue
        session = sessions.get(rec["sid"])
        if session is None:
            session = sessions[rec["sid"]] = {"sid": rec["sid"], "label": rec.get("s", ""),
                                              "step": _base_step(str(rec.get("s", ""))), "points": []}
        level = rec.get("lv")
        session["points"].append([rec["t"], int(level) if isinstance(level, (int, float)) else 0])
        session["window"], session["threshold"] = rec.get("w"), rec.get("at")
    result = sorted(sessions.values(), key=lambda s: s["points"][0][0])
    for session in result:
        session["generation"] = generation.get(session["sid"], 0)
        session["start"], session["end"] = session["points"][0][0], session["points"][-1][0]
    return result


def _report_marks(records: list[dict], steps: list[dict], running: bool) -> list[dict]:
    """The timeline's marks: ``{"kind", "t", "end"?, "step", "text"}`` for wakes, handoffs, outages,
    waits, kills, rescues, degraded continuity and verdicts."""
    marks: list[dict] = []
    runs: dict[str, list[float]] = {}
    for rec in records:
        span = runs.setdefault(rec.get("r", ""), [rec["t"], rec["t"]])
        span[0], span[1] = min(span[0], rec["t"]), max(span[1], rec["t"])
    offline: dict[str, dict] = {}
    killed_runs = set()
    for rec in records:
        kind, step, run = rec["k"], str(rec.get("s") or ""), rec.get("r", "")
        if kind == "run" and rec["t"] > min(s[0] for s in runs.values()):
            marks.append({"kind": "wake", "t": rec["t"], "step": "", "text": str(rec.get("host") or "")})
        elif kind == "handoff" and rec.get("phase") == "done":
            why = f" ({rec['degraded']})" if rec.get("degraded") else ""
            marks.append({"kind": "handoff", "t": rec["t"], "step": step,
                          "text": f"{rec.get('context', '?')}/{rec.get('window', '?')}, #{rec.get('generation', '?')}{why}"})
        elif kind == "offline" and run not in offline:
            offline[run] = {"kind": "outage", "t": rec["t"], "step": step, "text": str(rec.get("host") or "")}
        elif kind == "online" and run in offline:
            mark = offline.pop(run)
            marks.append(dict(mark, end=rec["t"], text=f"{mark['text']} {rec.get('waited_s', '?')}s"))
        elif kind == "retry":
            delay = float(rec.get("delay") or 0)
            marks.append({"kind": "wait", "t": rec["t"], "end": rec["t"] + delay, "step": step,
                          "text": f"{rec.get('kind', '')} {delay:g}s"})
        elif kind == "kill":
            killed_runs.add(run)
            marks.append({"kind": "kill", "t": rec["t"], "step": step, "text": str(rec.get("reason") or "")})
        elif kind == "degraded":
            marks.append({"kind": "degraded", "t": rec["t"], "step": step, "text": str(rec.get("message") or "")})
        elif kind == "verdict":
            failed = "; ".join(map(str, rec.get("failed") or []))
            marks.append({"kind": "verdict", "t": rec["t"], "step": step, "verdict": str(rec.get("verdict")),
                          "text": f"{rec.get('verdict')}{': ' + failed if failed else ''}"})
    for run, mark in offline.items():   # still away when the run ended (or now)
        marks.append(dict(mark, end=runs.get(run, [0, mark["t"]])[1]))
    # a step whose row was never written (killed hard), or written by rescue: killed; the next run rescues
    order = sorted(runs.items(), key=lambda item: item[1][0])
    for step in steps:
        if step["status"] == "killed" and step["run"] not in killed_runs:
            killed_runs.add(step["run"])
            marks.append({"kind": "kill", "t": step["end"], "step": step["label"], "text": "no row: killed"})
    for i, (run, span) in enumerate(order[:-1]):
        if run in killed_runs:
            marks.append({"kind": "rescue", "t": order[i + 1][1][0], "step": "", "text": run})
    marks.sort(key=lambda m: m["t"])
    return marks


def report_data(rows: list[dict], records: list[dict], *, brief: str | None, goal: str | None,
                running: bool, now: float, workspace: str = "", state: str = "local") -> dict:
    """Everything the report shows, as data (``report --json``): steps, sessions with their water
    levels, timeline marks, cost per step, per machine and cumulative, the brief and the goal's
    checks with the last verdict. Pure."""
    hosts = {rec.get("r", ""): str(rec.get("host") or "") for rec in records if rec["k"] == "run"}
    steps = _report_steps(rows, records, hosts, running)
    sessions = _report_sessions(records)
    marks = _report_marks(records, steps, running)
    times = [s["start"] for s in steps] + [s["end"] for s in steps] + [r["t"] for r in records]
    start = min(times) if times else now
    end = max(times) if times else now
    if running:
        end = max(end, now)
    total, cumulative, machines = 0.0, [], {}
    for step in sorted(steps, key=lambda s: s["end"]):
        total += step["cost"]
        cumulative.append([step["end"], round(total, 6)])
        machines[step["host"] or "?"] = round(machines.get(step["host"] or "?", 0.0) + step["cost"], 6)
    verdicts = [r for r in records if r["k"] == "verdict"]
    verdict = verdicts[-1] if verdicts else None
    statement, checks = goal_parts(goal or "")
    return {
        "v": JSON_VERSION, "kind": "report", "workspace": workspace, "state": state, "generated": round(now, 3),
        "running": running, "start": start, "end": end, "runs": len(hosts) or len({s["run"] for s in steps}),
        "steps": steps, "sessions": sessions, "marks": marks,
        "cost": {"total": round(total, 6), "machines": machines, "cumulative": cumulative},
        "turns": sum(len(s["points"]) for s in sessions),
        "brief": brief or "", "goal": {
            "statement": statement, "checks": [{"text": c, "status": _check_status(c, verdict)} for c in checks],
            "verdict": verdict.get("verdict") if verdict else None,
            "failed": list(verdict.get("failed") or []) if verdict else []},
    }


# -- the page: pure, data -> HTML with inline SVG --

_REPORT_CSS = """
*{box-sizing:border-box}body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;
color:#1d2330;background:#fafbfc}main{max-width:1100px;margin:0 auto;padding:16px}
h1{font-size:22px;margin:4px 0 8px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #dde2ea}
svg{display:block;width:100%;height:auto;background:#fff;border:1px solid #e3e7ee;border-radius:6px}
svg text{font:11px system-ui,sans-serif;fill:#485163}.wrap{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;width:100%}td,th{padding:4px 8px;border-bottom:1px solid #eef0f4;
text-align:left;vertical-align:top}th{font-weight:600;color:#485163}td.n{text-align:right;white-space:nowrap}
.bar{display:inline-block;height:10px;background:#5b8def;border-radius:2px;vertical-align:middle}
.facts{display:flex;flex-wrap:wrap;gap:8px 18px;margin:6px 0 4px}.facts b{font-weight:600}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:6px 0;font-size:12px;color:#485163}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-2px;margin-right:4px}
pre{white-space:pre-wrap;word-break:break-word;background:#fff;border:1px solid #e3e7ee;border-radius:6px;
padding:10px;max-height:420px;overflow:auto}.ok{color:#1d7a3a}.bad{color:#b4232c}.unknown{color:#7a8191}
.muted{color:#7a8191}
"""

# the browser tier opens the page with #measure: where every picture lies, written into the page
_REPORT_MEASURE = (
    "if(location.hash==='#measure'){var d=document.documentElement,o=[];"
    "document.querySelectorAll('svg').forEach(function(s){var r=s.getBoundingClientRect();"
    "o.push([Math.round(r.left),Math.round(r.right),Math.round(r.height)])});"
    "var m=JSON.stringify({width:d.clientWidth,scroll:d.scrollWidth,svgs:o}),"
    "p=document.createElement('pre');p.id='measured';p.textContent=m;document.body.appendChild(p);"
    "if(parent!==window)parent.postMessage(m,'*')}")

_KIND_COLOURS = {"ok": "#4caf6d", "failed": "#d9534f", "running": "#5b8def", "killed": "#8a6d3b"}
_MARK_COLOURS = {"handoff": "#7b4fd6", "wake": "#2a9d8f", "outage": "#d9534f", "wait": "#f0ad4e",
                 "kill": "#222", "rescue": "#2a9d8f", "degraded": "#e07b00", "verdict": "#4caf6d"}
_SESSION_COLOURS = ("#5b8def", "#e07b00", "#2a9d8f", "#b04fd6", "#d9534f", "#6d8a3b", "#1f5fa8", "#c2185b")


def _esc(value: Any) -> str:
    """Text for HTML (and SVG) content and attribute values."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _clock(t: float, span: float) -> str:
    """A time-axis label (UTC): ``HH:MM`` (with seconds on short spans, the date on long ones)."""
    moment = _dt.datetime.fromtimestamp(t, _dt.timezone.utc)
    if span > 2 * 86400:
        return moment.strftime("%m-%d %H:%M")
    return moment.strftime("%H:%M:%S" if span < 600 else "%H:%M")


def _ticks(low: float, high: float, n: int = 6) -> list[float]:
    """About ``n`` round tick values between ``low`` and ``high``."""
    import math
    span = max(high - low, 1e-9)
    raw = span / n
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * step:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _time_ticks(start: float, end: float) -> list[float]:
    """Round clock times between ``start`` and ``end`` (seconds, minutes, hours or days apart)."""
    import math
    span = max(end - start, 1.0)
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400):
        if span / step <= 7:
            break
    else:
        step = 86400 * math.ceil(span / 86400 / 7)
    first = math.ceil(start / step) * step
    return [first + i * step for i in range(int((end - first) / step) + 1)]


def idle_gaps(spans: Iterable[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The long stretches with nothing going on between ``start`` and ``end`` (longer than ten minutes
    and than a tenth of the whole): a job that sleeps for hours between wakes is drawn without them."""
    merged: list[list[float]] = []
    for low, high in sorted(spans):
        if merged and low <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    least = max(600.0, (end - start) * 0.1)
    return [(merged[i][1], merged[i + 1][0]) for i in range(len(merged) - 1) if merged[i + 1][0] - merged[i][1] > least]


def time_axis(start: float, end: float, gaps: list[tuple[float, float]]) -> Callable[[float], float]:
    """``t -> position`` on an axis from 0 where each of ``gaps`` takes 3% of the whole span."""
    keep = (end - start) * 0.03

    def position(moment: float) -> float:
        value = moment - start
        for low, high in gaps:
            if moment >= high:
                value -= (high - low) - keep
            elif moment > low:
                value -= (moment - low) - keep * (moment - low) / (high - low)
        return value
    return position


def _svg_timeline(data: dict, t: Callable[[str], str]) -> str:
    """Steps (rounds, retries) as bars in one lane per step, their sessions beneath, and every mark;
    long idle gaps are cut out of the time axis (each marked)."""
    width, left, right, lane = 1000, 110, 16, 34
    start, end = data["start"], max(data["end"], data["start"] + 1)
    lanes = list(dict.fromkeys(s["step"] for s in data["steps"]))
    top = 28
    height = top + lane * max(1, len(lanes)) + 40
    spans = [(s["start"], s["end"]) for s in data["steps"] + data["sessions"]]
    spans += [(m["t"], m.get("end", m["t"])) for m in data["marks"]]
    gaps = idle_gaps(spans, start, end)
    position = time_axis(start, end, gaps)
    scale = (width - left - right) / max(position(end), 1e-9)

    def x(value: float) -> float:
        return round(left + position(value) * scale, 1)

    out = [f'<svg id="timeline" viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(t("rp_timeline"))}">']
    last = -1e9
    bounds = [start] + [b for gap in gaps for b in gap] + [end]
    for low, high in zip(bounds[::2], bounds[1::2]):
        for tick in _time_ticks(low, high) if high > low else []:
            if x(tick) - last < 70:
                continue
            last = x(tick)
            out.append(f'<line x1="{x(tick)}" y1="{top - 6}" x2="{x(tick)}" y2="{height - 22}" stroke="#eef0f4"/>'
                       f'<text x="{x(tick)}" y="{height - 8}" text-anchor="middle">{_clock(tick, end - start)}</text>')
    for low, high in gaps:
        middle = round((x(low) + x(high)) / 2, 1)
        hours = (high - low) / 3600
        out.append(f'<text data-kind="gap" x="{middle}" y="{height - 26}" text-anchor="middle" font-size="14">≈'
                   f'<title>{hours:.1f} h</title></text>')
    for i, name in enumerate(lanes):
        y = top + i * lane
        out.append(f'<text x="{left - 8}" y="{y + 15}" text-anchor="end">{_esc(name[:16])}</text>')
    lane_of = {name: top + i * lane for i, name in enumerate(lanes)}
    for step in data["steps"]:
        y = lane_of[step["step"]]
        x1, x2 = x(step["start"]), x(step["end"])
        title = (f'{step["label"]}: {step["status"]}, ${step["cost"]:.4f}, {step["turns"]} {t("rp_turns")}'
                 + (f', {step["error"]}' if step.get("error") else ""))
        out.append(f'<rect class="mark" data-kind="step" data-label="{_esc(step["label"])}" x="{x1}" y="{y + 4}" '
                   f'width="{max(2.0, round(x2 - x1, 1))}" height="14" rx="2" '
                   f'fill="{_KIND_COLOURS.get(step["status"], "#999")}"><title>{_esc(title)}</title></rect>')
    colour = {}
    for session in data["sessions"]:
        y = lane_of.get(session["step"])
        if y is None:
            continue
        fill = colour.setdefault(session["sid"], _SESSION_COLOURS[len(colour) % len(_SESSION_COLOURS)])
        x1, x2 = x(session["start"]), x(session["end"])
        out.append(f'<rect class="mark" data-kind="session" data-sid="{_esc(session["sid"])}" x="{x1}" y="{y + 21}" '
                   f'width="{max(2.0, round(x2 - x1, 1))}" height="6" fill="{fill}"><title>{_esc(session["sid"])} '
                   f'#{session["generation"]}, {len(session["points"])} {t("rp_turns")}</title></rect>')
    bottom = height - 22
    for mark in data["marks"]:
        kind, x1 = mark["kind"], x(mark["t"])
        title = f'<title>{_esc(t("rp_mark_" + kind))}: {_esc(mark.get("text", ""))}</title>'
        y = lane_of.get(_base_step(mark.get("step") or ""), top) + 11
        fill = _MARK_COLOURS[kind]
        if kind == "verdict" and mark.get("verdict") != "achieved":
            fill = "#d9534f"
        if kind in ("outage", "wait"):
            x2 = max(x(mark.get("end", mark["t"])), x1 + 2)
            out.append(f'<rect class="mark" data-kind="{kind}" x="{x1}" y="{top - 6}" width="{round(x2 - x1, 1)}" '
                       f'height="{bottom - top + 6}" fill="{fill}" fill-opacity="0.18">{title}</rect>')
        elif kind in ("wake", "rescue"):
            dash = "4 3" if kind == "wake" else "1 3"
            out.append(f'<line class="mark" data-kind="{kind}" x1="{x1}" y1="{top - 8}" x2="{x1}" y2="{bottom}" '
                       f'stroke="{fill}" stroke-width="2" stroke-dasharray="{dash}">{title}</line>')
        elif kind == "handoff":
            out.append(f'<path class="mark" data-kind="handoff" d="M{x1} {y - 7}l6 7l-6 7l-6 -7z" fill="{fill}">'
                       f'{title}</path>')
        elif kind == "kill":
            out.append(f'<path class="mark" data-kind="kill" d="M{x1 - 6} {y - 6}l12 12m0 -12l-12 12" stroke="{fill}" '
                       f'stroke-width="3">{title}</path>')
        elif kind == "degraded":
            out.append(f'<path class="mark" data-kind="degraded" d="M{x1} {top - 14}l6 10h-12z" fill="{fill}">'
                       f'{title}</path>')
        else:
            out.append(f'<circle class="mark" data-kind="{kind}" cx="{x1}" cy="{top - 12}" r="5" fill="{fill}">'
                       f'{title}</circle>')
    out.append("</svg>")
    return "".join(out)


def _svg_water(data: dict, t: Callable[[str], str]) -> str:
    """The context level after each answer, session after session (one line each), with each
    session's handoff threshold (dashed) and window (dotted)."""
    sessions = [s for s in data["sessions"] if s["points"]]
    turns = sum(len(s["points"]) for s in sessions)
    width, height, left, right, top, bottom = 1000, 300, 60, 16, 14, 40
    ceiling = max([1] + [s.get("window") or 0 for s in sessions] + [p[1] for s in sessions for p in s["points"]])
    xscale = (width - left - right) / max(1, turns - 1)
    yscale = (height - top - bottom) / ceiling

    def y(level: float) -> float:
        return round(height - bottom - level * yscale, 1)

    out = [f'<svg id="water" viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(t("rp_water"))}">']
    for tick in _ticks(0, ceiling, 5):
        out.append(f'<line x1="{left}" y1="{y(tick)}" x2="{width - right}" y2="{y(tick)}" stroke="#eef0f4"/>'
                   f'<text x="{left - 6}" y="{y(tick) + 4}" text-anchor="end">{_human_tokens(int(tick))}</text>')
    n = 0
    for i, session in enumerate(sessions):
        colour = _SESSION_COLOURS[i % len(_SESSION_COLOURS)]
        x0 = round(left + n * xscale, 1)
        x1 = round(left + (n + len(session["points"]) - 1) * xscale, 1)
        points = " ".join(f"{round(left + (n + j) * xscale, 1)},{y(level)}"
                          for j, (_, level) in enumerate(session["points"]))
        if i:
            out.append(f'<line x1="{x0}" y1="{top}" x2="{x0}" y2="{height - bottom}" stroke="#c9ced8"/>')
        for kind, level, dash in (("threshold", session.get("threshold"), "6 4"), ("window", session.get("window"), "2 3")):
            if level:
                out.append(f'<line data-kind="{kind}" x1="{x0}" y1="{y(level)}" x2="{max(x1, x0 + 2)}" y2="{y(level)}" '
                           f'stroke="{"#d9534f" if kind == "threshold" else "#485163"}" stroke-dasharray="{dash}"/>')
        out.append(f'<polyline class="level" data-sid="{_esc(session["sid"])}" data-step="{_esc(session["label"])}" '
                   f'points="{points}" fill="none" stroke="{colour}" stroke-width="1.5">'
                   f'<title>{_esc(session["label"])} {_esc(session["sid"][:8])}</title></polyline>')
        anchor = "end" if x0 > width - right - 80 else "start"
        if x1 - x0 > 60 or i == len(sessions) - 1:
            out.append(f'<text x="{x0 + 3 if anchor == "start" else width - right}" y="{height - bottom + 14}" '
                       f'text-anchor="{anchor}">{_esc(session["label"][:14])}</text>')
        n += len(session["points"])
    out.append(f'<text x="{width - right}" y="{height - 6}" text-anchor="end">{_esc(t("rp_turns"))}: {turns}</text>')
    out.append("</svg>")
    return "".join(out)


def _svg_cost(data: dict, t: Callable[[str], str]) -> tuple[str, list[str]]:
    """Cost per step (a bar each, coloured by machine) and the cumulative cost (a line); the machines."""
    steps = data["steps"]
    machines = sorted({s["host"] or "?" for s in steps})
    width, height, left, right, top, bottom = 1000, 240, 60, 60, 14, 40
    peak = max([0.0001] + [s["cost"] for s in steps])
    total = max(0.0001, data["cost"]["total"])
    slot = (width - left - right) / max(1, len(steps))
    out = [f'<svg id="cost" viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(t("rp_cost"))}">']
    for tick in _ticks(0, peak, 4):
        yy = round(height - bottom - tick / peak * (height - top - bottom), 1)
        out.append(f'<line x1="{left}" y1="{yy}" x2="{width - right}" y2="{yy}" stroke="#eef0f4"/>'
                   f'<text x="{left - 6}" y="{yy + 4}" text-anchor="end">${tick:.3g}</text>')
    line, running = [], 0.0
    for i, step in enumerate(steps):
        h = step["cost"] / peak * (height - top - bottom)
        bar = min(slot * 0.7, 48)
        xx = round(left + (i + 0.5) * slot - bar / 2, 1)
        fill = _SESSION_COLOURS[machines.index(step["host"] or "?") % len(_SESSION_COLOURS)]
        out.append(f'<rect data-kind="cost" x="{xx}" y="{round(height - bottom - h, 1)}" width="{round(bar, 1)}" '
                   f'height="{round(h, 1)}" fill="{fill}"><title>{_esc(step["label"])}: ${step["cost"]:.4f}'
                   f'{" (" + _esc(step["host"]) + ")" if step["host"] else ""}</title></rect>')
        running += step["cost"]
        line.append(f'{round(left + (i + 0.5) * slot, 1)},{round(height - bottom - running / total * (height - top - bottom), 1)}')
        if len(steps) <= 24:
            out.append(f'<text x="{round(left + (i + 0.5) * slot, 1)}" y="{height - bottom + 14}" '
                       f'text-anchor="middle">{_esc(step["label"][:10])}</text>')
    if line:
        out.append(f'<polyline data-kind="cumulative" points="{" ".join(line)}" fill="none" stroke="#222" '
                   f'stroke-width="1.5"/><text x="{width - 4}" y="{top + 10}" text-anchor="end">'
                   f'Σ ${data["cost"]["total"]:.4f}</text>')
    out.append("</svg>")
    return "".join(out), machines


def _legend(items: list[tuple[str, str]]) -> str:
    return '<div class="legend">' + "".join(f'<span><span class="sw" style="background:{c}"></span>{_esc(label)}</span>'
                                            for c, label in items) + "</div>"


def render_report(data: dict, lang: str = "en") -> str:
    """The report page: one HTML document with inline CSS and SVG (and a tiny inline script that only
    measures the pictures when the page is opened with ``#measure``); nothing external."""
    t = functools.partial(text, lang=lang)
    steps, sessions = data["steps"], data["sessions"]
    generated = _dt.datetime.fromtimestamp(data["generated"], _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    handoffs = sum(m["kind"] == "handoff" for m in data["marks"])
    facts = [(t("rp_status"), t("rp_running") if data["running"] else t("rp_finished")),
             (t("rp_total_cost"), f'${data["cost"]["total"]:.4f}'), (t("rp_steps"), str(len(steps))),
             (t("rp_sessions"), str(len(sessions))), (t("rp_turns"), str(data["turns"])),
             (t("rp_handoffs"), str(handoffs)), (t("rp_runs"), str(data["runs"])), (t("rp_generated"), generated)]
    parts = [f'<!DOCTYPE html><html lang="{"zh" if lang == "zh" else "en"}"><head><meta charset="utf-8">'
             f'<meta name="viewport" content="width=device-width,initial-scale=1">'
             f'<title>{_esc(t("rp_title"))}</title><style>{_REPORT_CSS}</style></head><body><main>'
             f'<h1>{_esc(t("rp_title"))}</h1><div class="muted">{_esc(data["workspace"])} · {_esc(data["state"])}</div>'
             '<div class="facts">' + "".join(f"<span>{_esc(k)}: <b>{_esc(v)}</b></span>" for k, v in facts) + "</div>"]
    parts.append(f'<h2>{_esc(t("rp_timeline"))}</h2>')
    parts.append(_legend([(_KIND_COLOURS["ok"], t("rp_ok")), (_KIND_COLOURS["failed"], t("rp_failed")),
                          (_KIND_COLOURS["running"], t("rp_running")), (_KIND_COLOURS["killed"], t("rp_killed"))]
                         + [(_MARK_COLOURS[k], t("rp_mark_" + k)) for k in _MARK_COLOURS]))
    parts.append(_svg_timeline(data, t))
    parts.append(f'<h2>{_esc(t("rp_water"))}</h2>')
    parts.append(_legend([("#d9534f", t("rp_threshold")), ("#485163", t("rp_window"))]))
    parts.append(_svg_water(data, t) if sessions else f'<p class="muted">{_esc(t("rp_none"))}</p>')
    parts.append(f'<h2>{_esc(t("rp_cost"))}</h2>')
    svg, machines = _svg_cost(data, t)
    if len(machines) > 1:
        parts.append(_legend([(_SESSION_COLOURS[i % len(_SESSION_COLOURS)], f'{m}: ${data["cost"]["machines"].get(m, 0):.4f}')
                              for i, m in enumerate(machines)]))
    parts.append(svg if steps else f'<p class="muted">{_esc(t("rp_none"))}</p>')
    parts.append(f'<h2>{_esc(t("rp_tools"))}</h2>')
    parts.append(_tools_table(steps, t))
    parts.append(f'<h2>{_esc(t("rp_goal"))}</h2>')
    parts.append(_goal_block(data["goal"], t))
    parts.append(f'<h2>{_esc(t("rp_brief"))}</h2>')
    parts.append(f'<pre>{_esc(data["brief"])}</pre>' if data["brief"].strip() else f'<p class="muted">{_esc(t("rp_none"))}</p>')
    parts.append(f"</main><script>{_REPORT_MEASURE}</script></body></html>\n")
    return "".join(parts)


def _tools_table(steps: list[dict], t: Callable[[str], str]) -> str:
    """Tool calls per step (a bar each, the most used tools) and what prune, trim and spill saved."""
    if not steps:
        return f'<p class="muted">{_esc(t("rp_none"))}</p>'
    peak = max([1] + [s["tools"] for s in steps])
    rows = [f'<div class="wrap"><table><tr><th>{_esc(t("rp_step"))}</th><th>{_esc(t("rp_tool_calls"))}</th>'
            f'<th>{_esc(t("rp_worker_calls"))}</th><th>{_esc(t("rp_top_tools"))}</th>'
            f'<th>{_esc(t("rp_saved"))}</th></tr>']
    for step in steps:
        top = sorted(step["tool_names"].items(), key=lambda kv: -kv[1])[:4]
        saved = step["saved"]
        said = ", ".join(f"{k} {v}" for k, v in saved.items() if v) or "-"
        workers = step.get("worker_tools", 0)
        rows.append(f'<tr><td>{_esc(step["label"])}</td><td class="n">{step["tools"]} '
                    f'<span class="bar" style="width:{round(60 * step["tools"] / peak)}px"></span></td>'
                    f'<td class="n" data-kind="worker-calls">{workers or "-"}</td>'
                    f'<td>{_esc(", ".join(f"{k} {v}" for k, v in top) or "-")}</td><td>{_esc(said)}</td></tr>')
    rows.append("</table></div>")
    return "".join(rows)


def _goal_block(goal: dict, t: Callable[[str], str]) -> str:
    """The goal statement, its checks each with its status by the last verdict, and that verdict."""
    if not goal["statement"] and not goal["checks"]:
        return f'<p class="muted">{_esc(t("rp_none"))}</p>'
    verdict = goal["verdict"]
    css = "ok" if verdict == "achieved" else "bad" if verdict else "unknown"
    out = [f'<p>{_esc(goal["statement"])}</p><p>{_esc(t("rp_verdict"))}: '
           f'<b class="{css}">{_esc(verdict or t("rp_none"))}</b></p><div class="wrap"><table>']
    marks = {"passed": "✓", "failed": "✗", "unknown": "?"}
    for check in goal["checks"]:
        status = check["status"]
        css = {"passed": "ok", "failed": "bad"}.get(status, "unknown")
        out.append(f'<tr><td class="{css}" style="width:2em">{marks[status]}</td><td>{_esc(check["text"])}</td></tr>')
    out.append("</table></div>")
    return "".join(out)


# -- thin I/O: read what the backend keeps, write the page --

def gather_report(paths: Paths, backend: StateBackend, now: float | None = None) -> dict:
    """:func:`report_data` of this workspace, read through ``backend`` (no side effects)."""
    return report_data(backend.manifest_rows(), backend.journal_records(), brief=_read_text(paths.brief),
                       goal=_read_text(paths.goal), running=backend.driven(),
                       now=time.time() if now is None else now, workspace=paths.workspace,
                       state=backend.where() or "local")


# --- Job continuity: a re-run with the same words continues ---

def _words(value: str) -> str:
    """Text compared as words: redacted (as it is stored), whitespace collapsed."""
    return " ".join(redact(value).split())


def said_before(ask: str, task: str | None, sentences: Iterable[str], brief: str, lang: str = "en") -> bool:
    """Whether ``ask`` repeats what the job was already told: its task, a pending wake sentence, or a
    sentence the brief holds under an *Added on wake* heading (a CI job runs one command every time)."""
    words = _words(ask)
    if not words:
        return False
    if task and _words(task) == words or any(_words(s) == words for s in sentences):
        return True
    added = _wake_additions(brief, lang)
    heading = "### " + text("added_on_wake", lang)
    chunks = [c.split("\n", 1)[1] if "\n" in c else "" for c in added.split(heading)]
    return any(_words(line) == words for chunk in chunks for line in [chunk, *chunk.splitlines()])


def continue_if_repeated(backend: "StateBackend", paths: "Paths", ask: str | None,
                         say: Callable[[str], None]) -> str | None:
    """``ask``, or None when it repeats what the used workspace's job was told (:func:`said_before`
    over the lineage's task and wake and the brief): the run is then a plain continue, said in one
    line unless the goal is achieved (then the closing line says there is nothing to do)."""
    if not ask:
        return ask
    data = backend.peek_lineage()
    wake = wake_of(data) or {"sentences": []}
    if not said_before(ask, task_of(data), wake["sentences"], _brief_text(paths), paths.lang):
        return ask
    steps = data.get("steps") or {}
    if not (data.get("achieved") and data.get("achieved") == steps.get("work")):
        say(text("ui_same_words", paths.lang))
    return None


def seen_from_anywhere(state: dict, backend: "StateBackend", paths: "Paths") -> dict:
    """``wake_state`` with the brief and goal of the backend when this machine has no copy of them
    (``status --state`` on a machine that never ran the job), plus the goal's statement."""
    notes = backend.remote_notes()
    brief = _read_text(paths.brief)
    goal = _read_text(paths.goal)
    if brief is None:
        brief = notes.get(os.path.basename(paths.brief))
    if goal is None:
        goal = notes.get(os.path.basename(paths.goal))
    statement, checks = goal_parts(goal or "")
    done = brief_complete(brief_sections(brief or ""))
    return {**state, "brief": done, "goal": goal_complete(statement, checks), "checks": len(checks),
            "waking": state["waking"] or done, "statement": statement.strip().splitlines()[0][:200] if
            statement.strip() else ""}


def _driver_pairs(data: dict, lang: str) -> list[tuple[str, str]]:
    """The ``goal is`` and ``driven by`` lines of ``status``."""
    pairs = [("st_goal_text", data["wake"]["statement"])] if data["wake"].get("statement") else []
    driver = data.get("driver")
    if not data["wake"]["waking"] and not driver:
        return pairs
    key = "st_driver_now_at" if driver and driver.get("path") else "st_driver_now"
    line = text(key, lang, pid=driver.get("pid"), host=driver.get("host", "?"), path=driver.get("path"),
                since=driver.get("since", "?"), step=driver.get("step") or "-") if driver else \
        text("st_driver_none", lang)
    return pairs + [("st_driver", line)]


# --- Inbox: mail, questions and side questions for a running job ---

MAIL_TAG = _lazy_re(r"\[mail ([0-9]{19}-[0-9a-f]{8}|[A-Za-z0-9._-]{1,80})\]")


def inbox_dir(paths: Paths) -> str:
    """``<workspace>/.flower/inbox``: where ``say`` writes and a person may drop a text file."""
    return os.path.join(paths.flower_dir, "inbox")


def _posted_ns(name: str, mtime_ns: int) -> int:
    """When a mail was sent: the time :meth:`Inbox.post` put in its name (read from the clock when it was
    posted, as a database mail's is), else, for a file left by hand, its mtime (which Linux takes from a
    coarser clock: up to a few ms early, enough to put a mail before one posted just before it)."""
    head = name[:19]
    return int(head) if len(name) > 20 and name[19] == "-" and head.isdigit() else mtime_ns


def _inbox_name(name: str) -> bool:
    """A file of the inbox that is mail: not hidden, not a temp file, not one set aside."""
    return not name.startswith(".") and not name.endswith((".tmp", "~")) and ".corrupt-" not in name


class Inbox:
    """Mail waiting for the work agent, one file each in ``directory`` (0700, files 0600). A mail is
    removed only once the store has recorded a request that carried it (:meth:`done`)."""

    def __init__(self, directory: str, notify: Callable[[str], None] | None = None, lang: str = "en"):
        self.directory = directory
        self.notify = notify
        self.lang = lang

    def post(self, words: str) -> str:
        """Write one mail atomically (0600); returns its id. Ids sort in the order they were sent."""
        ensure_private_dir(self.directory)
        mail_id = f"{time.time_ns():019d}-{uuid.uuid4().hex[:8]}"
        atomic_write(os.path.join(self.directory, mail_id), redact(words).strip() + "\n")
        return mail_id

    def pending(self) -> list[Mail]:
        """Every mail not yet delivered, oldest first; an unreadable file is set aside (one line)."""
        try:
            names = [n for n in os.listdir(self.directory) if _inbox_name(n)]
        except OSError:
            return []
        found: list[tuple[int, str, Mail]] = []
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                stat = os.stat(path)
                with open_regular(path) as fh:
                    words = fh.read(MAX_PROMPT_BYTES + 1).decode("utf-8")
            except FileNotFoundError:
                continue
            except (OSError, UnicodeDecodeError):
                check_text_file(path, self.notify, self.lang)
                continue
            words = redact(words).strip()
            if not words:
                continue
            sent = _posted_ns(name, stat.st_mtime_ns)
            found.append((sent, name, Mail(name, words[:MAX_PROMPT_BYTES], sent / 1e9)))
        return [mail for _, _, mail in sorted(found, key=lambda item: (item[0], item[1]))]

    def done(self, mail_id: str) -> None:
        """Forget a delivered mail."""
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.directory, mail_id))


def mail_context(mails: list[Mail], lang: str = "en") -> str:
    """What the model is sent for ``mails`` at a tool boundary: each tagged with its id (the store's
    record of the request is found by the tag) and the time it was sent."""
    return "\n\n".join(text("mail_context", lang, id=m.id, words=m.words,
                            when=time.strftime("%Y-%m-%d %H:%M", time.localtime(m.sent))) for m in mails)


def mails_recorded(entries: list[dict]) -> set[str]:
    """The ids of mail whose delivery these stored entries record (a hook's additional context)."""
    ids: set[str] = set()
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("type") != "attachment":
            continue
        attachment = entry.get("attachment")
        if isinstance(attachment, dict) and attachment.get("type") == "hook_additional_context":
            ids.update(MAIL_TAG.findall(json.dumps(attachment.get("content"), ensure_ascii=False)))
    return ids


def append_to_brief(rt: Runtime, heading: str, sentences: list[str]) -> None:
    """Append the sentences the brief does not hold yet under ``### heading <date>`` (like the
    sentences of a wake), so the goal can be re-derived from the brief on the next wake."""
    brief = _read_text(rt.paths.brief) or ""
    missing = [s.strip() for s in sentences if s.strip() and s.strip() not in brief]
    if missing:
        addition = f"\n\n### {heading} {time.strftime('%Y-%m-%d %H:%M')}\n" + "\n\n".join(missing) + "\n"
        rt.soft(rt.paths.brief, lambda: rt.write_note(rt.paths.brief, brief.rstrip() + addition))


class MailDesk:
    """Delivers the inbox to the work agent without interrupting it: at each tool boundary (the
    ``PostToolBatch`` hook) and when it would stop (the ``Stop`` hook: it then goes on), the mail
    waiting is handed over as the hook's additional context, which the CLI sends with the next
    request. A mail is appended to the brief and shown (``mail`` event) when handed over, and removed
    from the inbox only once the store recorded it; a connection that ends before that hands it over
    again, and so does the next run."""

    def __init__(self, rt: Runtime, inbox: Inbox, steps: Iterable[str] = ("work",)):
        self.rt = rt
        self.inbox = inbox
        self.mailbox = rt.state.mailbox(inbox)   # the inbox files, and the mail a remote backend keeps
        self.steps = set(steps)
        self.offered: dict[str, Mail] = {}   # handed to the current connection, not yet recorded
        self.settled: str | None = None      # the session whose stored mail left the inbox this connection
        self.lock = threading.Lock()
        self.on_side: Callable[[str], Any] | None = None   # a side question typed on the terminal
        rt.hook_sources.append(self.hooks)
        rt.on_stored(self.stored)

    def hooks(self, spec: AgentSpec) -> dict:
        """The SDK hooks for one connection (called once per connection)."""
        if spec.name not in self.steps:
            return {}
        with self.lock:
            self.offered.clear()   # what an ended connection was handed but never recorded goes again
            self.settled = None
        return {"PostToolBatch": [(None, self._hook("PostToolBatch"))], "Stop": [(None, self._hook("Stop"))]}

    def _hook(self, event: str) -> Callable[[dict, Any, Any], Awaitable[dict]]:
        async def hook(data: dict, tool_use_id: Any, context: Any) -> dict:
            if isinstance(data, dict) and data.get("agent_id"):
                return {}   # a subagent's boundary: the mail is for the main thread
            import asyncio
            sid = self.rt.driving
            if sid is not None and self.settled != sid and not await asyncio.to_thread(self.settle, sid):
                return {}
            words = self.take()
            if not words:
                return {}
            return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": words}}
        return hook

    def take(self) -> str:
        """The mail to hand over now (each once per connection), appended to the brief and shown."""
        with self.lock:
            new = [m for m in self.mailbox.pending() if m.id not in self.offered]
            for mail in new:
                self.offered[mail.id] = mail
        if not new:
            return ""
        append_to_brief(self.rt, text("mail_heading", self.rt.lang), [m.words for m in new])
        for mail in new:
            self.rt.emit(Event("mail", step="work", data={
                "id": mail.id, "words": mail.words,
                "message": text("ui_mail", self.rt.lang, id=mail.id, words=sanitize(mail.words)[:200])}))
        return mail_context(new, self.rt.lang)

    def settle(self, sid: str) -> bool:
        """Before the first mail of a connection: mail the stored session ``sid`` already records leaves
        the inbox (a run killed between the store's record and the deletion left its file behind, and
        the resumed session holds it). False when the session could not be read: nothing is handed
        over until it can."""
        with self.lock:
            waiting = {m.id for m in self.mailbox.pending()} - set(self.offered)
        if waiting:
            try:
                entries = self.rt.raw_store.load_sync({"project_key": self.rt.project_key, "session_id": sid})
            except Exception:
                return False
            for mail_id in mails_recorded(entries or []) & waiting:
                self.mailbox.done(mail_id)
        self.settled = sid
        return True

    def stored(self, key: dict, entries: list[dict]) -> None:
        """A store hook: mail whose request the store recorded leaves the inbox (also when it is
        recovered from a killed run's transcript: the session holds it, it is not sent twice)."""
        if key.get("subpath"):
            return
        for mail_id in mails_recorded(entries):
            with self.lock:
                self.offered.pop(mail_id, None)
            self.mailbox.done(mail_id)


ASK_TIMEOUT = 1800.0   # seconds a question waits for its answer (FLOWER_ASK_TIMEOUT)
ASK_POLL = 0.5         # how often an answer file is looked for


def qa_entry(qid: str, question: str, answer: str, source: str, lang: str = "en") -> str:
    """One question and its answer as a section of ``qa.md`` (redacted)."""
    stamp = time.strftime("%Y-%m-%d %H:%M")
    return redact(f"\n## {qid} · {stamp}\n\n**Q:** {question.strip()}\n\n**A** ({source}): {answer.strip()}\n")


class QuestionDesk:
    """The agents' ``ask`` tool in every mode: the question is shown (an ``ask`` event), and the first
    answer wins, typed at the terminal or left by ``answer ID`` from any shell; past the timeout, or at
    once when no human can answer, the agent is told to choose and record the assumption. Every
    question and answer goes to ``notes/qa.md``."""

    def __init__(self, rt: Runtime, *, interactive: bool, timeout: float | None = None):
        self.rt = rt
        self.interactive = interactive
        self.timeout = env_number("FLOWER_ASK_TIMEOUT", ASK_TIMEOUT, rt.notify) if timeout is None else timeout

    @property
    def nobody(self) -> bool:
        """No human can answer: the timeout is 0, or a CI job without a terminal."""
        return self.timeout <= 0 or (not self.interactive and bool(os.environ.get("CI")))

    async def ask(self, question: str) -> str:
        """Ask the human; returns the answer, or what the agent should do without one."""
        lang, question = self.rt.lang, redact(question)
        qid = uuid.uuid4().hex[:6]
        wait = _minutes(int(self.timeout))
        brief = self.rt.paths.brief
        if self.nobody:
            self._log(qid, question, "(nobody can answer here)", "flower")
            return text("ask_nobody", lang, path=brief)
        self.rt.state.post_question(qid, question)
        self.rt.emit(Event("ask", data={"id": qid, "question": question, "timeout_s": int(self.timeout),
                                        "message": text("ui_question", lang, id=qid, question=sanitize(question),
                                                        prog=program_name(), wait=wait)}))
        typed = next_line("> ") if self.interactive else None
        try:
            answer, source = await self._answer(qid, typed)
        finally:
            self.rt.state.close_question(qid)
        if answer is None:
            self._log(qid, question, f"(no answer within {wait})", "timeout")
            self.rt.emit(Event("ask", data={"id": qid, "phase": "timeout",
                                            "message": text("ui_question_timeout", lang, id=qid, wait=wait)}))
            return text("ask_timeout", lang, wait=wait, path=brief)
        answer = redact(answer)
        self._log(qid, question, answer, source)
        self.rt.emit(Event("ask", data={"id": qid, "phase": "answered", "source": source}))
        return answer

    async def _answer(self, qid: str, typed: Any) -> tuple[str | None, str]:
        """The first answer: ``typed`` at the terminal, or left by ``answer`` (the state backend keeps
        it); None past the timeout."""
        import asyncio
        deadline = time.monotonic() + self.timeout
        try:
            while time.monotonic() < deadline:
                if typed is not None and typed.done():
                    return typed.result(), "terminal"
                left = await asyncio.to_thread(self.rt.state.answer_waiting, qid)
                if left is not None:
                    return left, "answer"
                await asyncio.sleep(min(ASK_POLL, max(0.0, deadline - time.monotonic())))
            return None, "timeout"
        finally:
            if typed is not None and not typed.done():
                typed.cancel()

    def _log(self, qid: str, question: str, answer: str, source: str) -> None:
        path = os.path.join(self.rt.paths.notes_dir, "qa.md")
        body = _read_text(path) or f"# {text('qa_title', self.rt.lang)}\n"
        entry = qa_entry(qid, question, answer, source, self.rt.lang)
        self.rt.soft(path, lambda: self.rt.write_note(path, body.rstrip("\n") + "\n" + entry))


def attach_questions(flow: "Workflow", rt: Runtime, interactive: bool, steps: Iterable[str] = ("clarify", "work")) -> QuestionDesk:
    """Give the agents of ``steps`` the ``ask`` tool, answered through a :class:`QuestionDesk`."""
    desk = QuestionDesk(rt, interactive=interactive)
    for step in flow.steps:
        if step.name in steps:
            step.spec.ask = desk.ask
    return desk


SIDE_TOOLS = ["Read", "Glob", "Grep"]
SIDE_STEP = "side-question"   # its manifest rows, apart from the job's steps


class SideRuntime(Runtime):
    """A runtime for side questions: it forks the work session even while another flower drives it.
    A fork only reads the session it comes from (the SDK loads it in this process, into this
    process's own temp copy), so the live run, its copy and the lineage are left as they are."""

    side_of: str | None = None

    def _refuse_if_driven(self, sid: str) -> None:
        if sid != self.side_of:
            super()._refuse_if_driven(sid)


def side_spec(lang: str, model: str | None = None) -> AgentSpec:
    """The read-only agent that answers a side question from a fork of the work session."""
    return AgentSpec(SIDE_STEP, instructions=text("side_instructions", lang), tools=list(SIDE_TOOLS),
                     allowed_tools=list(SIDE_TOOLS), disallowed_tools=["Write", "Edit", "Bash", "NotebookEdit"],
                     permission_mode="default", handoff=False, model=model)


async def read_line(prompt: str) -> str:
    """``input()`` without blocking the event loop (daemon thread, so quitting never waits on it)."""
    import asyncio
    if _TERMINAL[0] is not None:   # one reader owns the terminal while go runs
        return await _TERMINAL[0].read(prompt)
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def worker() -> None:
        try:
            value = input(prompt)
        except (EOFError, OSError):
            value = ""
        except BaseException as exc:  # pragma: no cover
            loop.call_soon_threadsafe(lambda error=exc: future.done() or future.set_exception(error))
            return
        loop.call_soon_threadsafe(lambda: future.done() or future.set_result(value))

    threading.Thread(target=worker, daemon=True).start()
    return await future


class TerminalLines:
    """The terminal's input while ``go`` runs, read by one daemon thread: a line is the answer to the
    question being asked (:func:`read_line`), else a side question when it starts with ``?`` or
    ``？``, else mail for the work agent. Nothing typed needs Ctrl-C, and nothing is interrupted."""

    def __init__(self, on_mail: Callable[[str], None], on_side: Callable[[str], Any] | None = None,
                 stream: Any = None, expecting: Callable[[], bool] | None = None):
        import asyncio
        self.loop = asyncio.get_running_loop()
        self.on_mail, self.on_side = on_mail, on_side
        self.stream = stream or sys.stdin
        self.expecting = expecting or (lambda: False)   # a question was put and its reader is on its way
        self.waiters: list[Any] = []
        self.early: list[str] = []   # lines typed for such a question before its reader came
        self.closed = False

    def __enter__(self) -> "TerminalLines":
        _TERMINAL[0] = self
        threading.Thread(target=self._pump, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.closed = True
        _TERMINAL[0] = None

    def _pump(self) -> None:
        while not self.closed:
            try:
                line = self.stream.readline()
            except (OSError, ValueError):
                line = ""
            if not line or self.closed:
                return
            with contextlib.suppress(RuntimeError):   # the loop is closed: the run is over
                self.loop.call_soon_threadsafe(self._route, line.rstrip("\r\n"))

    def _route(self, line: str) -> None:
        while self.waiters:
            waiter = self.waiters.pop(0)
            if not waiter.done():
                waiter.set_result(line)
                return
        if self.expecting():
            self.early.append(line)
            return
        words = line.strip()
        if not words:
            return
        if words[0] in "?？" and self.on_side is not None:
            self.on_side(words[1:].strip())
        else:
            self.on_mail(words)

    async def read(self, prompt: str) -> str:
        """The next line typed (an answer), after ``prompt``."""
        return await self.answer(prompt)

    def answer(self, prompt: str) -> Any:
        """A future for the next line typed, after ``prompt``, asked for at once: a line routed after
        this call is its answer, however soon it was typed."""
        waiter = self.loop.create_future()
        if self.early:
            waiter.set_result(self.early.pop(0))
            return waiter
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(prompt)
            sys.stderr.flush()
        self.waiters.append(waiter)
        return waiter


_TERMINAL: list[TerminalLines | None] = [None]   # the router while go runs at a terminal


def next_line(prompt: str) -> Any:
    """The next line typed as an awaitable, asked for before this returns when ``go`` owns the terminal
    (call it right after showing a question, with no ``await`` between: the line typed in answer
    then finds it asked, not taken for mail)."""
    import asyncio
    if _TERMINAL[0] is not None:
        return _TERMINAL[0].answer(prompt)
    return asyncio.ensure_future(read_line(prompt))

HEARTBEAT = 60.0   # seconds of silence per line in a log (FLOWER_HEARTBEAT)
_QUIET_KINDS = ("info", "heartbeat", "offline", "online", "ask", "summary", "lock")   # not the agent's work


def heartbeat_line(step: str, tool: str | None, quiet: float, lang: str = "en") -> str:
    """``work · still running Bash · 2m`` (or waiting for the model when no tool runs)."""
    waited = _minutes(int(quiet))
    if tool:
        return text("ui_heartbeat_tool", lang, step=step, tool=tool, waited=waited)
    return text("ui_heartbeat_model", lang, step=step, waited=waited)


class Heartbeat:
    """Signs of life for a log without a terminal: after every ``period`` of silence from the agent (a
    long tool, a stalled stream, a question waiting) one ``heartbeat`` event, shown as a line unless
    the stall watch said the same in that period."""

    def __init__(self, rt: Runtime, period: float):
        self.rt = rt
        self.period = period
        self.heard = time.monotonic()
        self.said = 0.0              # when the stall watch last said the CLI is quiet
        self.step = ""
        self.tools: dict[str, str] = {}   # open tool calls: id -> name
        self.listener = rt.on_event
        rt.on_event = self.hear

    def hear(self, event: Event) -> None:
        """Every event of the run passes here on its way to the reporter."""
        if event.kind not in _QUIET_KINDS:
            self.heard = time.monotonic()
            self.step = event.step or self.step
        if event.kind == "tool_call":
            self.tools[str(event.data.get("id"))] = str(event.data.get("name"))
        elif event.kind in ("tool_result", "result"):
            self.tools.pop(str(event.data.get("id")), None) if event.kind == "tool_result" else self.tools.clear()
        elif event.kind == "info" and "quiet_s" in event.data:
            self.said = time.monotonic()
        if self.listener is not None:
            self.listener(event)

    async def beat(self) -> None:
        """Run until cancelled."""
        import asyncio
        last = 0.0
        while True:
            await asyncio.sleep(self.period / 4)
            now = time.monotonic()
            quiet = now - self.heard
            if quiet < self.period or now - last < self.period:
                continue
            last = now
            tool = next(reversed(self.tools.values()), None) if self.tools else None
            line = heartbeat_line(self.step or "flower", tool, quiet, self.rt.lang)
            data = {"quiet_s": int(quiet), "tool": tool}
            if now - self.said >= self.period:
                data["message"] = line
            self.rt.emit(Event("heartbeat", step=self.step, data=data))


def attach_inbox(rt: Runtime) -> MailDesk:
    """What ``go`` adds so a person can talk to the running job."""
    return MailDesk(rt, Inbox(inbox_dir(rt.paths), notify=rt._info, lang=rt.lang))


# --- CLI: go, once, status, doctor, sessions, show; progress, signals, exit codes ---

COMMAND_SUMMARIES = {
    "go": "run the job (the default command): clarify -> goal -> work, judged",
    "once": "one ad-hoc session (no lineage)",
    "status": "wake state, last steps, sessions (no SDK needed)",
    "doctor": "check Python, SDK, CLI, credentials, settings, network, state",
    "sessions": "list stored sessions",
    "show": "a session as the model would be sent it on resume (pruned)",
    "report": "one self-contained HTML page of the job: timeline, context, cost, tools, goal",
    "say": "leave words for the running work agent: it gets them at its next tool boundary",
    "answer": "answer a question an agent asked (ID as shown with it)",
    "ask": "a side question, answered from a read-only fork of the work session (running or not)",
    "handoff": "make the running work step hand over to a fresh session at its next boundary",
}
SUBCOMMANDS = tuple(COMMAND_SUMMARIES)


# -- terminal output: widths, progress lines, the reporter --


def n_turns(n: int, lang: str = "en") -> str:
    """``1 turn``, ``2 turns`` (``2 轮``)."""
    return text("n_turn" if n == 1 else "n_turns", lang, n=n)


def display_width(value: str) -> int:
    """Columns ``value`` takes on a terminal: East Asian wide and full-width characters take two."""
    if value.isascii():
        return len(value)
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in value)


def pad(value: str, width: int) -> str:
    """``value`` left-aligned in ``width`` terminal columns (CJK-aware)."""
    return value + " " * max(0, width - display_width(value))


def print_line(line: str, stream: Any) -> bool:
    """Print ``line`` to ``stream`` and flush; False when the stream cannot take it (a closed pipe, a
    full disk), which then writes to /dev/null from here on (nothing left buffered fails again at
    exit). What a run could print never decides how it ended."""
    try:
        print(line, file=stream, flush=True)
        return True
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
        return False


class Reporter:
    """Turns events into what a person (or a CI job) sees: a live status line on a TTY, plain lines
    otherwise, JSON lines on stdout with ``--json``. Human text goes to stderr."""

    def __init__(self, *, json_mode: bool = False, verbose: bool = False, quiet: bool = False,
                 err: Any = None, out: Any = None, tty: bool | None = None, lang: str = "en",
                 show_text: bool = True):
        self.json_mode, self.verbose, self.quiet = json_mode, verbose, quiet
        self.lang, self.show_text = lang, show_text
        self.err = err or sys.stderr
        self.out = out or sys.stdout
        self.tty = (self.err.isatty() and os.environ.get("TERM") != "dumb") if tty is None else tty
        self.color = self.tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        self.started = time.monotonic()
        self.turns = 0
        self.cost = 0.0
        self.total_cost = 0.0
        self._status_shown = False
        self._last: Event | None = None
        self.asking = False

    def _paint(self, value: str, code: str) -> str:
        return f"\033[{code}m{value}\033[0m" if self.color else value

    def say(self, message: str, *, always: bool = False) -> None:
        """One human line (suppressed by -q unless ``always``)."""
        if self.quiet and not always:
            return
        self._clear_status()
        print_line(redact(in_lang(message, self.lang)), self.err)

    def _clear_status(self) -> None:
        if self._status_shown:
            with contextlib.suppress(OSError, ValueError):
                self.err.write("\r\033[K")
            self._status_shown = False

    def tick(self) -> None:
        """Redraw the live status line (the elapsed time moves even while a tool runs for an hour)."""
        if self._last is not None and not self.asking:
            self._status(self._last)

    @contextlib.contextmanager
    def question(self) -> Any:
        """While the human types an answer, the status line stays away from their line."""
        self._clear_status()
        self.asking = True
        try:
            yield
        finally:
            self.asking = False

    def _status(self, event: Event) -> None:
        self._last = event
        if not self.tty or self.quiet or self.asking:
            return
        elapsed = int(time.monotonic() - self.started)
        ctx = ""
        if event.level and event.window:
            ctx = f" · ctx {_human_tokens(event.level)}/{_human_tokens(event.window)} " \
                  f"{100 * event.level // max(1, event.window)}%"
        line = f"{event.step} · turn {self.turns}{ctx} · ${self.total_cost + self.cost:.2f} · " \
               f"{elapsed // 60}m{elapsed % 60:02d}s"
        with contextlib.suppress(OSError, ValueError):
            self.err.write("\r\033[K" + self._paint(line, "2"))
            self.err.flush()
        self._status_shown = True

    def t(self, key: str, **fmt: Any) -> str:
        """A user-facing string in this reporter's language."""
        return text(key, self.lang, **fmt)

    def event(self, event: Event) -> None:
        """Show one event."""
        if self.json_mode:
            print_line(event.as_json(), self.out)
        kind, data = event.kind, event.data
        if kind == "summary":  # the closing line already said it in words
            return
        t = self.t
        if kind == "step":
            self.turns = 0
            note = ""
            if data.get("continues"):
                note = "  " + t("ui_continues", woke=data.get("woke"))
                if data.get("context"):
                    note += t("ui_context", context=_human_tokens(data["context"]))
            title = step_title(str(data.get("name")), self.lang)
            self.say(self._paint(f"== {title} " + "=" * max(3, 40 - display_width(title)), "1") + note)
        elif kind == "text":
            self.turns += 1
            body = sanitize(data.get("text", "")).strip()
            if self.show_text and body and not self.quiet:
                self.say(body if self.verbose else (body[:400] + ("…" if len(body) > 400 else "")))
        elif kind == "tool_call":
            self.turns += 1
            if self.verbose:
                self.say(f"  -> {data.get('name')} {sanitize(json.dumps(data.get('input'), ensure_ascii=False))[:200]}")
        elif kind == "retry":
            self.say(self._paint("  " + t("ui_retry", attempt=data.get("attempt"), delay=data.get("delay"),
                                          kind=data.get("kind")), "33"))
        elif kind == "handoff":
            phase = data.get("phase")
            if phase == "near":
                self.say("  " + t("ui_near", context=_human_tokens(data.get("context")),
                                  window=_human_tokens(data.get("window"))))
            elif phase == "asked":
                self.say("  " + t("info_handoff_asked"))
            elif phase == "writing":
                self.say("  " + t("ui_writing"))
            elif phase == "done":
                degraded = " " + t("degraded_title", why=data.get("degraded")) if data.get("degraded") else ""
                self.say("  " + t("ui_handoff_done", generation=data.get("generation"), sid=str(event.session_id)[:8],
                                  degraded=degraded, path=_tilde(str(data.get("path")))))
        elif kind == "resume":
            if data.get("pruned") and self.verbose:
                pruned = data["pruned"]
                said = ", ".join(f"{k} {v}" for k, v in pruned.items()) if isinstance(pruned, dict) else str(pruned)
                self.say("  " + t("ui_resume_pruned", what=said))
            elif data.get("reason") == "human":
                self.say("  " + t("ui_words" if data.get("words") else "ui_continuing"))
        elif kind in ("offline", "online"):
            key = "info_online" if kind == "online" else "info_offline" if not data.get("waited_s") \
                else "info_still_offline"
            waited, most = int(data.get("waited_s") or 0), int(data.get("max_s") or 0)
            self.say("  " + t(key, host=data.get("host"), port=data.get("port"),
                              seconds=waited if kind == "online" else most, waited=_minutes(waited),
                              of=_minutes(most), next=int(data.get("next_probe_s") or 0)))
        elif kind == "error":
            self.say(self._paint("  " + t("ui_error", kind=data.get("kind"), message=sanitize(str(data.get("message")))),
                                 "31"))
        elif kind == "info":
            if data.get("message"):
                self.say(f"  {data['message']}")
            elif data.get("verdict"):
                failed = t("ui_verdict_failed", n=len(data["failed"])) if data.get("failed") else ""
                self.say(f"  {step_title(event.step, self.lang)}: {t('verdict_' + data['verdict'])}{failed}")
        elif kind in ("mail", "heartbeat", "ask") and data.get("message"):
            self.say(f"  {data['message']}", always=kind == "ask")
        elif kind == "result":
            self.total_cost += float(data.get("cost_usd") or 0)
            self.cost = 0.0
            self.turns = 0
            status = t("ui_ok") if data.get("ok") else t("ui_failed", error=data.get("error"))
            self.say("  " + t("ui_result", step=step_title(event.step, self.lang), status=status, cost=float(data.get("cost_usd") or 0),
                              turns=n_turns(int(data.get("turns") or 0), self.lang), attempts=data.get("attempts")))
        elif kind == "system" and data.get("subtype") == "turn_result":
            self.cost = float(data.get("cost_usd") or 0)
        self._status(event)

    def close(self) -> None:
        """Clear the live status line."""
        self._clear_status()


# -- the parser: options, help, the command line split --


def argv_lang(argv: list[str]) -> str:
    """The language asked for on a command line not parsed yet (``--lang X``, ``--lang=X``), else
    ``FLOWER_LANG``, else English: usage errors are said before the parser knows it."""
    lang = os.environ.get("FLOWER_LANG") or "en"
    for i, token in enumerate(argv):
        if token == "--lang" and i + 1 < len(argv):
            lang = argv[i + 1]
        elif token.startswith("--lang="):
            lang = token.split("=", 1)[1]
    return lang if lang in TEXTS else "en"


_ARGPARSE_MESSAGES = (   # argparse's own words -> the text-table key that says them
    (r"unrecognized arguments: (?P<what>.*)", "ap_unrecognized"),
    (r"argument (?P<arg>\S+): invalid choice: (?P<what>.*?) \(choose from (?P<choices>.*)\)", "ap_invalid_choice"),
    (r"argument (?P<arg>\S+): expected one argument", "ap_expected_one"),
    (r"argument (?P<arg>\S+): invalid \S+ value: (?P<what>.*)", "ap_invalid_value"),
    (r"argument (?P<arg>\S+): must be a whole number, got (?P<what>.*)", "ap_whole_number"),
    (r"argument (?P<arg>\S+): must be at least (?P<low>\S+), got (?P<what>.*)", "ap_at_least"),
    (r"argument (?P<arg>\S+): the budget must be (?:a number of USD|more than 0 USD), got (?P<what>.*)", "ap_budget"),
    (r"argument (?P<arg>\S+): unknown tool (?P<what>'.*'); did you mean (?P<close>.*)\?", "ap_unknown_tool_close"),
    (r"argument (?P<arg>\S+): unknown tool (?P<what>'.*'); known: (?P<known>.*)", "ap_unknown_tool"),
    (r"argument (?P<arg>\S+): (?P<what>.*)", "ap_argument"),
    (r"the following arguments are required: (?P<what>.*)", "ap_required"),
)


def argparse_message(message: str, lang: str) -> str:
    """An argparse error in ``lang`` (argparse itself speaks English only); unknown shapes unchanged."""
    if lang == "en":
        return message
    for pattern, key in _ARGPARSE_MESSAGES:
        m = re.fullmatch(pattern, message)
        if m:
            return text(key, lang, **{k: v or "" for k, v in m.groupdict().items()})
    return message


def step_title(name: str, lang: str) -> str:
    """A step's name for a header, in ``lang``: ``work#round2`` -> ``工作#round2`` (the base name of the
    starter flow's steps is translated; a user's own step keeps its name)."""
    base, sep, rest = name.partition("#")
    head, dot, tail = base.partition("·")
    key = f"step_{head}"
    if key not in TEXTS["en"]:
        return name
    return text(key, lang) + dot + tail + sep + rest


class _ArgParser(argparse.ArgumentParser):
    usage_prefix: str | None = None

    def _get_formatter(self) -> Any:
        formatter = super()._get_formatter()
        formatter.usage_prefix = self.usage_prefix
        return formatter

    def error(self, message: str) -> Any:  # one line, exit 2, no usage dump
        lang = argv_lang(sys.argv[1:])
        raise FlowerError(text("ui_usage_error", lang, message=argparse_message(message, lang), prog=program_name()),
                          EXIT_USAGE)


KNOWN_TOOLS = frozenset({
    "Agent", "AskUserQuestion", "Bash", "BashOutput", "CronCreate", "CronDelete", "CronList", "Edit",
    "EnterPlanMode", "EnterWorktree", "ExitPlanMode", "ExitWorktree", "Glob", "Grep", "KillShell", "LS",
    "ListAgents", "Monitor", "MultiEdit", "NotebookEdit", "NotebookRead", "Read", "ReportFindings",
    "ScheduleWakeup", "SendMessage", "Skill", "Task", "TaskCreate", "TaskList", "TaskOutput", "TaskStop",
    "TaskUpdate", "TodoWrite", "ToolSearch", "WebFetch", "WebSearch", "Workflow", "Write"})


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {raw!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


def _positive_usd(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the budget must be a number of USD, got {raw!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"the budget must be more than 0 USD, got {raw}")
    return value


def parse_tools(raw: str) -> list[str]:
    """``Read,Glob,Grep`` -> a list, every name known to the CLI (``mcp__...`` names and permission
    rules such as ``Bash(git:*)`` are accepted by their base name). Raises ArgumentTypeError."""
    import difflib
    tools = [t.strip() for t in raw.split(",") if t.strip()]
    for name in tools:
        base = name.split("(", 1)[0]
        if base not in KNOWN_TOOLS and not base.startswith("mcp__"):
            close = difflib.get_close_matches(base, sorted(KNOWN_TOOLS), n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(sorted(KNOWN_TOOLS))}"
            raise argparse.ArgumentTypeError(f"unknown tool {name!r}{hint}")
    return tools


def _global_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("global options (every command)")
    group.add_argument("-w", "--workspace", default=".")
    group.add_argument("-r", "--run-dir", default=None)
    group.add_argument("-v", "--verbose", action="store_true")
    group.add_argument("-q", "--quiet", action="store_true")
    group.add_argument("--json", action="store_true")
    group.add_argument("--lang", choices=("en", "zh"), default=None)
    group.add_argument("--store", default=None, metavar="MODULE:FACTORY")
    group.add_argument("--state", default=None, metavar="postgresql://...")
    group.add_argument("--workspace-id", default=None, metavar="ID")
    _settings_option(group)


EXIT_CODES_HELP = TEXTS["en"]["hp_exit_codes"]


def _delegation_options(go: argparse.ArgumentParser) -> None:
    single = (os.environ.get("FLOWER_NO_DELEGATE") or "").strip().lower() in ("1", "true", "yes")
    go.add_argument("--no-delegate", action="store_true", default=single)
    go.add_argument("--worker-model", default=None)


def _help_width() -> int:
    """The width argparse would get from ``shutil.get_terminal_size()`` (COLUMNS, else the terminal,
    else 80; minus 2), without importing shutil: it pulls in bz2 and lzma, a tenth of ``--help``."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, sized by :func:`_help_width`."""

    usage_prefix: str | None = None   # "usage: " in the help's language; None: argparse's own

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _help_width() if width is None else width)

    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: str | None = None) -> None:
        """argparse's usage line, with the prefix in the help's language."""
        super().add_usage(usage, actions, groups, prefix or self.usage_prefix)


class _RawHelpFormatter(argparse.RawDescriptionHelpFormatter, _HelpFormatter):
    """The same, with the description and epilog kept as written (the top-level command table)."""


def _top_epilog(lang: str = "en") -> str:
    import textwrap
    width = max(_help_width(), 40)
    rows = [textwrap.fill(text(f"hp_cmd_{name}", lang), width, initial_indent=f"  {name:<10}", subsequent_indent=" " * 12)
            for name in COMMAND_SUMMARIES]
    return "\n".join([text("hp_commands", lang), *rows, "",
                      textwrap.fill(text("hp_exit_codes", lang), width, subsequent_indent="  ")])


def build_parser(only: str | None = None, lang: str = "en") -> argparse.ArgumentParser:
    """The argument parser (``go`` is the default subcommand). With ``only`` (a command name), the
    parser of that one command alone is built; with ``only=""``, none (what ``--help`` and one command
    need: less to build on every start). The top-level help lists the commands either way. Its words
    (help, summaries, usage) come from the text tables, in ``lang``."""
    prog = program_name()
    parser = _ArgParser(prog=prog, formatter_class=_RawHelpFormatter)   # its words: localize_parser
    parser.add_argument("--version", action="version", version=f"flower.py {__version__}")
    _global_options(parser)
    if only == "":
        localize_parser(parser, lang)
        return parser
    sub = parser.add_subparsers(dest="command", parser_class=_ArgParser, prog=prog,
                                help=argparse.SUPPRESS)

    def command(name: str) -> argparse.ArgumentParser:
        if only is not None and only != name:
            return _Unbuilt()
        summary = COMMAND_SUMMARIES[name]
        return sub.add_parser(name, description=summary, epilog=EXIT_CODES_HELP,
                              formatter_class=_HelpFormatter)

    go = command("go")
    go.add_argument("ask", nargs="?")
    go.add_argument("--new", action="store_true")
    go.add_argument("--rounds", type=_int_at_least(1), default=3)
    go.add_argument("--no-trim", action="store_true")
    go.add_argument("--no-handoff", action="store_true")
    go.add_argument("--window", type=_int_at_least(MIN_WINDOW), default=None)
    go.add_argument("--no-goal", action="store_true")
    go.add_argument("--permission-mode", default="acceptEdits", choices=PERMISSION_MODES)
    go.add_argument("--model", default=None)
    _delegation_options(go)
    _budget_option(go)
    _handoff_option(go)
    _global_options(go)

    once = command("once")
    once.add_argument("prompt")
    once.add_argument("-t", "--tools", type=parse_tools, default=["Read", "Glob", "Grep"])
    once.add_argument("-p", "--permission-mode", default="default", choices=PERMISSION_MODES)
    once.add_argument("-b", "--budget", type=_positive_usd, default=None)
    once.add_argument("--resume", default=None, metavar="SID")
    once.add_argument("--fork", action="store_true")
    once.add_argument("--model", default=None)
    _global_options(once)

    _global_options(command("status"))
    _global_options(command("doctor"))
    sessions = command("sessions")
    sessions.add_argument("--all", action="store_true")
    _global_options(sessions)
    show = command("show")
    show.add_argument("sid")
    show.add_argument("--raw", action="store_true")
    _global_options(show)
    _report_options(command)
    _inbox_commands(command)
    localize_parser(parser, lang)
    return parser


def _budget_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-snapshot", action="store_true")
    parser.add_argument("--max-cost", type=_positive_usd, default=None, metavar="USD")


class _Unbuilt:
    """Stands in for the parser of a command that will not be parsed: its options are not built."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to build."""

    add_argument_group = add_mutually_exclusive_group = lambda self, *a, **k: self


def localize_parser(parser: argparse.ArgumentParser, lang: str) -> None:
    """Say the help of ``parser`` and of its built commands in ``lang``: every help string, summary,
    heading and the usage line come from the text tables (``hp_CMD_DEST``, else ``hp_DEST``)."""
    values = {"min_window": MIN_WINDOW, "max_cost_env": MAX_COST_ENV, "exit_budget": EXIT_BUDGET}
    titles = {"positional arguments": "hp_positionals", "options": "hp_optionals",
              "global options (every command)": "hp_global_options"}

    def localize(one: argparse.ArgumentParser, name: str | None) -> None:
        for action in one._actions:
            for key in (f"hp_{name}_{action.dest}", f"hp_{action.dest}"):
                if action.help is not argparse.SUPPRESS and key in TEXTS["en"]:
                    action.help = text(key, lang, **values)
                    break
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    if f"hp_cmd_{sub_name}" in TEXTS["en"]:   # a command without one keeps its own words
                        sub.description = text(f"hp_cmd_{sub_name}", lang)
                    sub.epilog = text("hp_exit_codes", lang)
                    localize(sub, sub_name)
        if lang != "en":
            one.usage_prefix = text("hp_usage_prefix", lang)
            for group in one._action_groups:
                group.title = text(titles[group.title], lang) if group.title in titles else group.title
    parser.description = text("hp_description", lang)
    parser.usage = text("hp_usage", lang, prog=parser.prog)
    parser.epilog = _top_epilog(lang)
    localize(parser, None)


_TAKES_VALUE = {"-w", "--workspace", "-r", "--run-dir", "--lang", "--store", "--rounds", "--window",
                "--permission-mode", "--model", "-t", "--tools", "-p", "-b", "--budget", "--resume", "--state",
                "--workspace-id", "--settings", "--max-cost"}


def _positionals(argv: list[str]) -> int:
    """How many positional words ``argv`` holds (option values are not counted)."""
    count, i = 0, 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return count + len(argv) - i - 1
        if token.startswith("-") and token != "-":
            i += 2 if token in _TAKES_VALUE else 1
            continue
        count += 1
        i += 1
    return count


def _split_command(argv: list[str]) -> list[str]:
    """Insert ``go`` when the first positional word is not a subcommand. A lone word that is close to a
    command (``stauts``, ``sesions``) or is ``help`` is a usage error with a suggestion, never a paid
    job; ``go WORD`` stays the way to give a one-word task."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in ("-h", "--help", "--version") and i == 0:
            return argv
        if token == "--":
            break
        if token.startswith("-") and token != "-":
            i += 2 if token in _TAKES_VALUE else 1
            continue
        break
    if i < len(argv) and argv[i] in SUBCOMMANDS:
        return [argv[i]] + argv[:i] + argv[i + 1:]
    if i < len(argv) and _positionals(argv) == 1 and re.fullmatch(r"[A-Za-z][A-Za-z-]{1,20}", argv[i]):
        word = argv[i]
        import difflib
        close = difflib.get_close_matches(word.lower(), [*SUBCOMMANDS, "help"], n=1, cutoff=0.75)
        if close:
            hint = "--help" if close[0] == "help" else close[0]
            prog = program_name()
            raise FlowerError(text("ui_not_a_command", argv_lang(argv), word=word, prog=prog, hint=hint), EXIT_USAGE)
    return ["go"] + argv


# -- checks before anything is paid: settings, task text, credentials, CLI dirs --

def _check_settings() -> None:
    """Before anything is paid: an unusable setting is a setup problem (exit 3), named in one line."""
    lang = argv_lang(sys.argv[1:])
    problems = settings_problems(lang=lang)
    if problems:
        more = text("er_settings_more", lang, n=len(problems) - 1, prog=program_name()) if len(problems) > 1 else ""
        raise FlowerError(problems[0] + more, EXIT_SETUP)


def _check_task(value: str | None, what: str) -> str | None:
    """A task or wake sentence given on the command line: UTF-8, not huge, and not blank."""
    value = _check_text(value, what)
    if value is not None and not value.strip():
        lang = argv_lang(sys.argv[1:])
        hint = text("er_empty_task_hint", lang) if what == "the task" else ""
        said = text(f"er_what_{what.replace(' ', '_')}", lang) if f"er_what_{what.replace(' ', '_')}" in TEXTS["en"] else what
        raise FlowerError(text("er_empty", lang, what=said, hint=hint), EXIT_USAGE)
    return value.strip() if value is not None else None


def _check_text(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    lang = argv_lang(sys.argv[1:])
    key = f"er_what_{what.replace(' ', '_')}"
    what = text(key, lang) if key in TEXTS["en"] else what
    if value == "-":
        data = sys.stdin.buffer.read(MAX_PROMPT_BYTES + 1)
        if len(data) > MAX_PROMPT_BYTES:
            raise FlowerError(text("er_stdin_too_large", lang, what=what, kb=MAX_PROMPT_BYTES // 1024), EXIT_USAGE)
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError:
            raise FlowerError(text("er_stdin_not_utf8", lang, what=what), EXIT_USAGE) from None
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        raise FlowerError(text("er_not_utf8", lang, what=what), EXIT_USAGE) from None
    if len(encoded) > MAX_PROMPT_BYTES:
        raise FlowerError(text("er_too_large", lang, what=what, kb=MAX_PROMPT_BYTES // 1024), EXIT_USAGE)
    if "\x00" in value:
        raise FlowerError(text("er_nul_byte", lang, what=what), EXIT_USAGE)
    return value


def _credentials() -> tuple[str, str] | None:
    """Which credential the CLI will use, masked; None when there is none."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        value = os.environ.get(name, "")
        if value:
            return name, (value[:6] + "…" + value[-2:]) if len(value) > 10 else "***"
    config = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    if os.path.exists(os.path.join(config, ".credentials.json")):
        return "login", os.path.join(config, ".credentials.json")
    return None


def _quiet_closed_loop_noise() -> None:
    """A subprocess transport the SDK leaves to the garbage collector after a signal stopped the run
    complains on stderr that the event loop is closed ("Exception ignored in ...__del__"): noise, and
    a traceback the user must never see. Only that one complaint is silenced."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, RuntimeError) and "Event loop is closed" in str(unraisable.exc_value):
            return
        previous(unraisable)
    sys.unraisablehook = hook


def _quiet_sdk_logs(verbose: bool) -> None:
    """The SDK logs its own errors ("Fatal error in message reader...") to stderr through logging's
    last-resort handler; flower reports what matters itself, so they stay off the user's stderr
    unless -v."""
    import logging
    logger = logging.getLogger(_SDK_MODULE)
    if verbose:
        return
    _quiet_closed_loop_noise()
    logger.addHandler(logging.NullHandler())
    logger.propagate = False


def _fresh_start(args: argparse.Namespace, paths: Paths, ask: str | None) -> bool:
    """A task given in a directory flower has not used, with the default run dir and store: nothing
    but the SDK stands between it and its first step (other problems are said first where found)."""
    return (ask is not None and args.run_dir is None and not args.store and not args.state
            and not os.path.lexists(paths.run_dir) and os.access(paths.workspace, os.W_OK))


def _sdk_installed() -> bool:
    """Whether ``claude_agent_sdk`` can be imported, without importing it."""
    if _SDK_MODULE in sys.modules:
        return sys.modules[_SDK_MODULE] is not None
    import importlib.util
    try:
        return importlib.util.find_spec(_SDK_MODULE) is not None
    except (ImportError, ValueError):
        return False


def _require_sdk() -> Any:
    try:
        return importlib.import_module(_SDK_MODULE)
    except ImportError:
        raise FlowerError(text("er_no_sdk", argv_lang(sys.argv[1:])), EXIT_SETUP) from None


def _require_agent(lang: str) -> None:
    """What an agent run needs, cheapest check first: the SDK installed (found, not imported), the
    credentials, room for the CLI's transcripts; then the SDK imported (over a second of CPU, most of
    it its MCP models), so that a run refused for anything else is refused at once."""
    if not _sdk_installed():
        _require_sdk()
    _require_credentials()
    _require_cli_dirs(lang)
    _require_sdk()


def _require_credentials() -> None:
    if _credentials() is None:
        raise FlowerError(text("er_no_credentials", argv_lang(sys.argv[1:])), EXIT_SETUP)


def _require_cli_dirs(lang: str) -> None:
    """A setup problem (exit 3) when the CLI could not keep its transcripts (see cli_dirs_problem)."""
    problem = cli_dirs_problem(lang)
    if problem is not None:
        raise FlowerError(problem, EXIT_SETUP)


def _is_flower_db(path: str) -> bool:
    """Whether ``path`` is a sessions.db flower wrote (opened read-only: a user's own file is never touched)."""
    if not os.path.isfile(path):
        return False
    try:
        conn = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return {"entries", "sessions", "summaries"} <= tables


# -- workspace, state backend, the human at the terminal --

def _paths(args: argparse.Namespace, reporter: Reporter) -> Paths:
    """The workspace (it must exist: flower never creates the directory an agent works in) and the
    state dir. Without ``-r``, a flower ``./runs`` of the old default that belongs to this workspace is
    still used, with one line suggesting the move into ``.flower/``."""
    if not os.path.isdir(args.workspace):
        raise FlowerError(text("er_workspace_not_dir", _lang(args), path=args.workspace), EXIT_USAGE)
    run_dir = args.run_dir
    if run_dir is None:
        legacy = os.path.abspath("runs")
        workspace = os.path.realpath(args.workspace)
        lineage = _peek_json(os.path.join(legacy, "lineage.json"))
        ours = isinstance(lineage, dict) and lineage.get("workspace") == workspace
        if (ours or (lineage is None and _is_flower_db(os.path.join(legacy, "sessions.db")))) and \
                not os.path.exists(os.path.join(workspace, ".flower", "sessions.db")):
            run_dir = legacy
            reporter.say(text("info_legacy_runs", _lang(args), path=_tilde(legacy),
                              dest=_tilde(os.path.join(workspace, ".flower"))), always=True)
    return Paths(args.workspace, run_dir, _lang(args))


def _open_state(args: argparse.Namespace, paths: Paths, *, wait: bool = True,
                say: Callable[[str], None] | None = None) -> StateBackend:
    """The state backend the options ask for: ``--state``/``FLOWER_STATE`` postgresql://... (waiting
    for the database like for the API when ``wait``), else the local files."""
    spec = args.state if args.state is not None else os.environ.get(STATE_ENV, "")
    ident = args.workspace_id or os.environ.get(WORKSPACE_ID_ENV) or None
    if ident is not None and (not ident.strip() or "\x00" in ident or len(ident) > 1000):
        raise FlowerError(text("er_workspace_id", _lang(args)), EXIT_USAGE)
    if not spec or spec == "local":
        return LocalState(paths, store_spec=args.store, workspace_id=ident)
    if not spec.startswith(("postgresql://", "postgres://")):
        raise FlowerError(text("er_state_spec", _lang(args)), EXIT_USAGE)
    state = PostgresState(paths, spec, ident or workspace_identity(paths.workspace), store_spec=args.store)
    state.notify = say
    if state.ready():
        return state
    if not wait:
        raise Offline(said("er_db_unreachable", where=state.where()))
    _wait_for_database(state, paths.lang, say)
    return state


def _wait_for_database(state: StateBackend, lang: str, say: Callable[[str], None] | None) -> None:
    """Wait for the state database like for the API (one line, then a line a minute); exit 4 past
    the wait."""
    import asyncio
    resilience = Resilience.from_env(warn=say)
    host, port = state.endpoint() or ("?", 0)
    online = asyncio.run(resilience.wait_online(notify=say, target=(text("target_database", lang, host=host), port), lang=lang,
                                                probe=lambda *_: asyncio.to_thread(state.ready)))
    if not online:
        raise FlowerError(said("er_network_down_db", seconds=int(resilience.max_offline_wait), host=host, port=port),
                          EXIT_OFFLINE)


def _with_database(state: StateBackend, lang: str, say: Callable[[str], None] | None,
                   work: Callable[[], Any], attempts: int = 5) -> Any:
    """``work()``; when the state database goes away meanwhile, wait for it and do it again (a few
    times: an error the database keeps giving while it answers is not an outage)."""
    for attempt in range(attempts):
        try:
            return work()
        except Offline:
            if attempt == attempts - 1:
                raise
            _wait_for_database(state, lang, say)
    return None


class _TerminalHuman(Human):
    """The human at a TTY; reads answers in a daemon thread so Ctrl-C is never stuck behind input()."""

    def __init__(self, reporter: Reporter):
        self.reporter = reporter

    async def ask(self, question: str) -> str:
        self.reporter.say(f"? {question}", always=True)
        with self.reporter.question():
            return await read_line("> ")

    async def choose(self, question: str, options: list[str]) -> str:
        self.reporter.say(f"? {question}", always=True)
        for i, option in enumerate(options, 1):
            self.reporter.say(f"  {i}. {option}", always=True)
        with self.reporter.question():
            while True:
                answer = (await read_line("> ")).strip()
                if answer.isdigit() and 1 <= int(answer) <= len(options):
                    return options[int(answer) - 1]
                if answer in options:
                    return answer


def wake_banner(paths: Paths, state: dict, context: int | None, lang: str = "en") -> str:
    """``<- resuming in ~/proj  brief confirmed · goal 15 checks · work context 80.2K · wake #3``."""
    parts = []
    if state["brief"]:
        parts.append(text("ui_brief_confirmed", lang))
    if state["checks"]:
        parts.append(text("ui_goal_checks", lang, n=state["checks"]))
    if context:
        parts.append(text("ui_work_context", lang, context=_human_tokens(context)))
    parts.append(text("ui_wake", lang, n=state["woke"] + 1))
    return text("ui_banner", lang, path=_tilde(paths.workspace), parts=" · ".join(parts))


def _say_wake_banner(reporter: Reporter, paths: Paths, backend: StateBackend) -> None:
    """Say what a wake continues, before the wake question (it is answered knowing what goes on)."""
    with contextlib.suppress(Offline):   # the banner is not worth a wait
        state = wake_state(paths.workspace, paths.run_dir, backend)
        sid, context = (state.get("steps") or {}).get("work"), None
        if sid:
            with contextlib.suppress(Exception):
                store = backend.session_store()
                context = store.last_context(project_key(paths.workspace), sid) if store.catalog else None
        reporter.say(wake_banner(paths, state, context, paths.lang))


def _archive_task(paths: Paths, lineage: Lineage, backend: StateBackend) -> list[str]:
    target = archive_dir(paths.notes_dir)
    sources = [p for p in (paths.brief, paths.goal) if os.path.exists(p)]
    moved = lineage.archive(target, extra=sources)
    backend.notes_changed(sources + moved)
    return moved


# -- signals and the event loop --

def _quiet_loop_errors(reporter: Reporter) -> Callable[[Any, dict], None]:
    """A loop exception handler for errors nobody awaited. The SDK answers the CLI's control requests
    from tasks of its own; when the CLI is killed under one (a stop, a signal) its write fails and
    asyncio would print "Task exception was never retrieved" with two tracebacks. That is expected
    at a stop and says nothing: drop it. Anything else is one redacted line, never a traceback."""
    def handler(loop: Any, context: dict) -> None:
        exc = context.get("exception")
        if exc is not None and _sdk_stop_noise(exc):
            return
        what = f"{type(exc).__name__}: {exc}" if exc is not None else context.get("message", "")
        reporter.say(redact(f"flower: {context.get('message') or text('er_background', reporter.lang)}: {what}")[:500],
                     always=True)
    return handler


def _sdk_stop_noise(exc: BaseException) -> bool:
    """True for an error the SDK raises in its own tasks when the CLI has gone (it was stopped)."""
    for err in (exc, exc.__context__, exc.__cause__):
        if err is None:
            continue
        if type(err).__module__.startswith("claude_agent_sdk") or isinstance(err, (BrokenPipeError,
                                                                                   ConnectionResetError)):
            return True
    return False


async def _run_with_signals(rt: Runtime, reporter: Reporter, body: Callable[[], Awaitable[Any]],
                            interactive: bool) -> Any:
    """Run ``body`` with flower's signal policy: the first Ctrl-C interrupts the turn cooperatively
    and (on a TTY) asks what to tell the agent; a second Ctrl-C quits (exit 130); SIGHUP/SIGTERM
    write the manifest (rescue) and quit."""
    import asyncio
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_quiet_loop_errors(reporter))
    task = asyncio.ensure_future(body())
    state = {"interrupts": 0, "signal": None}

    def on_sigint() -> None:
        state["interrupts"] += 1
        # with nobody at a terminal to answer the question, the first Ctrl-C (or SIGINT) stops at once
        if state["interrupts"] == 1 and rt._current is not None and interactive:
            rt.interrupt(None)   # first: a line typed the moment the question shows must find it asked
            reporter.say("\n" + text("interrupt_question", rt.lang), always=True)
        else:
            state["signal"] = signal.SIGINT
            rt.rescue("interrupted")
            task.cancel()

    def on_terminate(signum: int) -> None:
        state["signal"] = signum
        rt.rescue()
        task.cancel()

    installed = []
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)
        installed.append(signal.SIGINT)
        for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if signum is not None:
                loop.add_signal_handler(signum, on_terminate, signum)
                installed.append(signum)

    async def ask_words() -> str | None:
        if not interactive:
            return None
        with reporter.question():
            words = await read_line("> ")
        state["interrupts"] = 0
        return words.strip() or None

    rt.ask_human = ask_words

    async def ticker() -> None:
        while True:
            await asyncio.sleep(1.0)
            reporter.tick()
    clock = asyncio.ensure_future(ticker()) if reporter.tty and not reporter.quiet else None
    try:
        return await task
    except asyncio.CancelledError:
        signum = state["signal"] or signal.SIGINT
        raise FlowerError(said("er_interrupted") if signum == signal.SIGINT else said("er_stopped_by_signal", signum=signum),
                          EXIT_INTERRUPTED if signum == signal.SIGINT else 128 + int(signum)) from None
    finally:
        if clock is not None:
            clock.cancel()
        for signum in installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)


def _ask_line(question: str) -> str:
    """One answer typed at the terminal (end of input counts as an empty answer)."""
    try:
        return input(question + "\n> ").strip()
    except EOFError:
        return ""


# -- go and once --

def cmd_go(args: argparse.Namespace, reporter: Reporter) -> int:
    """The main job: clarify -> goal -> work, judged; carries on in a used directory. One ``go`` per
    workspace: a second one exits at once with code 5, naming the holder."""
    ask = _check_task(args.ask, "the task")
    _check_settings()
    check_spec(AgentSpec("work", permission_mode=args.permission_mode))
    paths = _paths(args, reporter)
    if _fresh_start(args, paths, ask) and not _sdk_installed():
        _require_sdk()   # refused before .flower is made: a run that cannot start leaves nothing behind
    paths.prepare()
    say = functools.partial(reporter.say, always=True)
    backend = _open_state(args, paths, say=say)
    try:
        lock = backend.lock("workspace", f"workspace {_tilde(paths.workspace)}")
        driver = _with_database(backend, paths.lang, say, lock.acquire)
        try:
            return _go_locked(args, reporter, paths, ask, driver, backend)
        finally:
            driver.release()
    finally:
        backend.close()


def _go_locked(args: argparse.Namespace, reporter: Reporter, paths: Paths, ask: str | None,
               driver: DriverLock, backend: StateBackend) -> int:
    interactive = sys.stdin.isatty() and not args.json
    used, ask = _with_database(backend, paths.lang, functools.partial(reporter.say, always=True),
                               lambda: _go_task(args, reporter, paths, ask, interactive, backend))
    unwritten = _write_ahead_ask(backend, paths, used, ask, lambda m: reporter.say(m, always=True))
    rt = Runtime(workspace=paths.workspace, run_dir=paths.run_dir, state=backend, lang=paths.lang, model=args.model,
                 trim=not args.no_trim, handoff=HandoffPolicy(enabled=not args.no_handoff, window=args.window),
                 on_event=reporter.event, notify=lambda m: reporter.say(m, always=True))
    rt.driver = driver
    _with_database(backend, paths.lang, functools.partial(reporter.say, always=True), rt.read_lineage)
    rt.setting_sources = setting_sources_for(settings_choice(args))
    rt.max_cost = job_budget(rt, args.max_cost or parse_max_cost(os.environ.get(MAX_COST_ENV), MAX_COST_ENV, EXIT_SETUP))
    start_snapshots(rt, not args.no_snapshot, lambda m: reporter.say(m, always=True))
    for path, line in unwritten:   # said once already
        rt._warned.add(path)
        rt.degraded.append(line)
    try:
        if used and ask is None and rt.lineage.done:   # achieved, and nothing new: nothing to pay for
            reporter.say(text("ui_nothing_new", paths.lang), always=True)
            return _finish(rt, reporter, EXIT_OK, "nothing new")
        _require_agent(paths.lang)
        _quiet_sdk_logs(args.verbose)
        return _go_run(args, reporter, rt, used, ask, interactive)
    finally:
        snapshot_now(rt, "exit")
        rt.close()


def _write_ahead_ask(backend: StateBackend, paths: Paths, used: bool, ask: str | None,
                     say: Callable[[str], None]) -> list[tuple[str, str]]:
    """Record what was asked before anything heavy is imported or paid: a fresh start's task, or a
    wake sentence (pending until the work step is sent it). A kill from here on leaves it for the
    next run. Fail-soft: returns the file and line of a write that failed (continuity degraded)."""
    if not ask:
        return []
    lineage = backend.lineage(notify=say, lang=paths.lang)
    try:
        lineage.add_wake(ask) if used else lineage.remember_task(ask)
    except (OSError, FlowerError) as exc:
        line = text("info_write_failed", paths.lang, path=lineage.where,
                    error=in_lang(os_reason(exc), paths.lang) if isinstance(exc, OSError) else exc.said(paths.lang))
        say(line)
        return [(lineage.where, line)]
    return []


def _go_task(args: argparse.Namespace, reporter: Reporter, paths: Paths, ask: str | None,
             interactive: bool, backend: StateBackend) -> tuple[bool, str | None]:
    """Phase one of ``go``: notes restored and readable, ``--new`` / ``/new`` archived, the wake
    question asked. Returns (a used directory?, the task or wake sentence)."""
    lang = paths.lang

    def say(message: str) -> None:
        reporter.say(message, always=True)
    backend.sync_notes(say)   # a fresh checkout gets the notes back; a hand edit here is written back
    for note in (paths.brief, paths.goal, *(paths.handoff(step) for step in ("clarify", "goal", "work"))):
        check_text_file(note, say, lang)  # a note that is not UTF-8 is set aside, never overwritten
    backend.session_store()   # a store that cannot be opened is said before anything else

    def archive() -> None:
        # opened here only to archive it: the runtime opens the lineage itself and says what it found
        # (an unreadable file, another workspace) once; opening it here too said it twice
        moved = _archive_task(paths, backend.lineage(notify=say, lang=lang), backend)
        reporter.say(text("ui_archived", lang, n=len(moved), path=_tilde(os.path.dirname(moved[0])) if moved else "-"))
    if args.new and ask is None and not interactive:   # a usage error moves nothing
        raise FlowerError(text("ui_new_without_task", lang, prog=program_name()), EXIT_USAGE)
    used = wake_state(paths.workspace, paths.run_dir, backend)["waking"]
    if args.new and (used or backend.has_lineage()):
        archive()
        used = False
    if used:
        _say_wake_banner(reporter, paths, backend)
    ask = continue_if_repeated(backend, paths, ask, say) if used else ask   # the same command again
    task = None if used else task_of(backend.peek_lineage())   # given to a run killed before its first step
    if ask is None and interactive:
        answer = _ask_line(text("wake_continue_question" if used or task else "wake_new_question", lang))
        if answer == "/new":
            archive()
            used, task = False, None
            answer = _ask_line(text("wake_new_question", lang))
        ask = _check_text(answer.strip() or None, "the task")
        ask = f"{task}\n\n{ask}" if task and ask else ask
    if not used and not ask and task:
        say(text("ui_task_carried", lang, task=sanitize(task)[:200]))
        ask = task
    if not used and not ask:
        raise FlowerError(text("ui_nothing_to_do", lang, prog=program_name()), EXIT_USAGE)
    return used, ask


def _go_run(args: argparse.Namespace, reporter: Reporter, rt: Runtime, used: bool, ask: str | None,
            interactive: bool) -> int:
    """Phase two of ``go``: the banner, the starter flow under flower's signal policy, the closing line
    (and the work step's final answer on stdout)."""
    import asyncio
    if rt.lineage.achieved:
        rt.soft(rt.lineage.where, lambda: rt.lineage.mark_achieved(None))   # new work: judged again
    human = _TerminalHuman(reporter) if interactive else None
    desk = attach_inbox(rt)
    if args.handoff and used:
        ask_handoff(rt.paths)
    flow = starter_flow(None if used else ask, rt=rt, rounds=args.rounds, use_goal=not args.no_goal,
                        human=human, wake_sentence=ask if used else None, model=args.model,
                         permission_mode=args.permission_mode, delegate=not args.no_delegate,
                        worker_model=args.worker_model)
    attach_questions(flow, rt, interactive)
    try:
        ctx = asyncio.run(_run_with_signals(rt, reporter, lambda: listening(
            rt, reporter, desk, interactive, lambda: flow.run(rt)), interactive))
        rt.soft(rt.lineage.where, lambda: rt.lineage.settle_wake(goal=True, sentences=True))   # carried through
    except StepAbort as exc:
        message = over_budget(rt) or exc.args[0]
        reporter.say(f"flower: {in_lang(message, rt.lang)}", always=True)
        return _finish(rt, reporter, _exit_code(rt, message), message)
    work = ctx.get("_results", {}).get("work")
    if work is not None and work.text and not args.json:
        reporter.close()   # never glued to the live status line
        _print_answer(work.text, reporter)   # the answer on stdout, progress on stderr
    return _finish(rt, reporter, EXIT_OK, "done")


def _print_answer(answer: str, reporter: Reporter) -> None:
    """The final answer on stdout; one that cannot be printed (a closed pipe, a full disk) is said on
    stderr, and the run still ends as its job did."""
    answer = redact(answer)
    if not print_line(sanitize(answer) if sys.stdout.isatty() else answer, sys.stdout):
        reporter.say(text("info_answer_lost", reporter.lang), always=True)


def _exit_code(rt: Runtime, message: str) -> int:
    """A failed run's exit code: 3 when the credentials were rejected, 4 when the network stayed
    down past the wait, else 1."""
    if over_budget(rt):
        return EXIT_BUDGET
    kinds = {r.get("error_kind") for r in rt.manifest.rows if not r.get("ok")}
    if AUTH in kinds or DISK_FULL in kinds:
        return EXIT_SETUP
    if OFFLINE in kinds or "network down" in message:
        return EXIT_OFFLINE
    if LIMIT in kinds:
        return EXIT_LIMIT
    return EXIT_STEP_FAILED


def _finish(rt: Runtime, reporter: Reporter, code: int, reason: str, *, line: bool = True) -> int:
    """The closing line (and the ``summary`` event): outcome, total cost, manifest, and whether
    continuity was degraded on the way. Returns ``code``."""
    lang = rt.lang
    if rt.state.pending() and not rt.state.ready():   # never "done" with entries only in the spool unsaid
        line = text("ui_spooled", lang, n=rt.state.pending(), path=_tilde(rt.state.spool.path))
        rt.degraded.append(line)
        reporter.say(line, always=True)
    key = "ui_done" if code == EXIT_OK else "ui_total"
    closing = text(key, lang, cost=reporter.total_cost, path=rt.manifest.where) if line else ""
    if rt.degraded:
        closing += (" · " if closing else "") + text("ui_degraded", lang, n=len(rt.degraded))
    if closing:
        reporter.say(closing, always=True)
    rows = rt.manifest.rows
    reporter.event(Event("summary", data={
        "exit_code": code, "reason": redact(reason)[:500], "cost_usd": round(reporter.total_cost, 6),
        "steps": [r.get("step") for r in rows], "sessions": sorted({r.get("session_id") for r in rows
                                                                    if r.get("session_id")}),
        "degraded": list(rt.degraded), "manifest": rt.manifest.where}))
    return code


def cmd_once(args: argparse.Namespace, reporter: Reporter) -> int:
    """One ad-hoc session; no lineage; its manifest row is step ``once``."""
    import asyncio
    prompt = _check_task(args.prompt, "the prompt") or ""
    _check_settings()
    if args.fork and not args.resume:
        raise FlowerError(text("er_fork_needs_resume", _lang(args)), EXIT_USAGE)
    tools = list(args.tools)
    spec = AgentSpec("once", tools=tools, allowed_tools=tools, permission_mode=args.permission_mode,
                     max_budget_usd=args.budget, model=args.model)
    check_spec(spec)  # before anything is written or paid
    paths = _paths(args, reporter)
    paths.prepare()
    backend = _open_state(args, paths, say=lambda m: reporter.say(m, always=True))
    try:
        backend.session_store()
        _require_agent(_lang(args))
        _quiet_sdk_logs(args.verbose)
    except FlowerError:
        backend.close()
        raise
    rt = Runtime(workspace=paths.workspace, run_dir=paths.run_dir, state=backend, lang=_lang(args),
                 on_event=reporter.event, notify=lambda m: reporter.say(m, always=True))
    rt.setting_sources = setting_sources_for(settings_choice(args))
    try:
        resume = args.resume
        if resume:
            matches = [s["session_id"] for s in rt.raw_store.sessions(rt.project_key)
                       if s["session_id"].startswith(resume)] if rt.raw_store.catalog else [resume]
            if len(matches) != 1:
                raise FlowerError(text("er_no_unique_session", _lang(args), prefix=repr(resume)), EXIT_USAGE)
            resume = matches[0]
        result = asyncio.run(_run_with_signals(rt, reporter, lambda: rt.run(
            spec, prompt, step_name="once", resume=resume, fork=args.fork), sys.stdin.isatty()))
        rt.record(result)
        reporter.close()   # the answer goes on a line of its own, never glued to the status line
        if result.ok and not args.json:
            _print_answer(result.text, reporter)
        reporter.say(text("ui_once", rt.lang, sid=result.session_id, cost=result.cost_usd, path=rt.manifest.where),
                     always=True)
        if not result.ok:
            reporter.say("flower: " + text("er_once_failed", rt.lang, error=result.error), always=True)
            return _finish(rt, reporter, _exit_code(rt, result.error or ""), result.error or "failed", line=False)
        return _finish(rt, reporter, EXIT_OK, "done", line=False)
    finally:
        rt.close()
        backend.close()


# -- status --

def status_data(paths: Paths, backend: StateBackend) -> dict:
    """What ``status`` shows, as data (no side effects): wake state, steps with context and handoff
    generation, the last manifest rows, the stored sessions of this workspace, where the state is."""
    state = seen_from_anywhere(wake_state(paths.workspace, paths.run_dir, backend), backend, paths)
    rows = backend.manifest_tail(10)
    key = project_key(paths.workspace)
    store = backend.session_store(create=False)
    sessions = store.sessions(key) if store is not None else []
    steps = []
    for step, sid in state["steps"].items():
        context = store.last_context(key, sid) if store is not None and store.catalog else None
        doc = paths.handoff(step)
        steps.append({"step": step, "session_id": sid, "context": context,
                      "generation": ledger_generation(_read_text(doc)), "handoff": doc})
    return {"workspace": paths.workspace, "run_dir": paths.run_dir, "state": backend.kind,
            "where": backend.where(), "workspace_id": backend.workspace_id,
            "wake": state, "steps": steps, "manifest": rows, "sessions": sessions,
            "achieved": bool(state.get("achieved")), "problems": backend.lineage_problems(paths.lang),
            "budget": budget_status(backend), "driver": backend.driver()}


def _status_lines(data: dict, lang: str) -> list[str]:
    t = functools.partial(text, lang=lang)
    state = data["wake"]
    pairs = [("st_workspace", _tilde(data["workspace"]))]
    if data["where"]:
        pairs += [("st_state", data["where"]), ("st_workspace_id", str(data["workspace_id"]))]
    pairs += [("st_run_dir", _tilde(data["run_dir"])),
              ("st_brief", t("st_confirmed") if state["brief"] else t("st_none")),
              ("st_goal", t("st_checks", n=state["checks"]) if state["goal"] else t("st_none")),
              ("st_woke", t("st_times", n=state["woke"]))]
    for step in data["steps"]:
        context = "  " + t("st_context", context=_human_tokens(step["context"])) if step["context"] else ""
        pairs.append(("st_step", f"{step['step']}: {step['session_id']}{context}"))
        if step["generation"]:
            pairs.append(("st_handoff", f"{step['step']}: " + t("st_generation", n=step["generation"],
                                                                 path=_tilde(step["handoff"]))))
    if data["achieved"]:
        pairs.append(("st_goal", t("st_achieved")))
    if data["sessions"]:
        pairs.append(("st_sessions", t("st_stored", n=len(data["sessions"]))))
    pairs += _budget_pairs(data.get("budget"), lang) + _driver_pairs(data, lang)
    width = max(display_width(t(k)) for k, _ in pairs) + 2
    lines = [pad(t(k), width) + v for k, v in pairs]
    if not state["waking"] and not data["manifest"]:
        lines.insert(len(lines) - 4, text("ui_nothing_to_do", lang, prog=program_name()))
    lines += [pad(t("st_problem"), width) + problem for problem in data.get("problems") or []]
    if data.get("settings"):
        lines.append(pad(t("st_settings"), width) + data["settings"])
    if data["manifest"]:
        lines.append(t("st_last_steps"))
        names = [str(r.get("step", "?")) for r in data["manifest"][-8:]]
        name_width = max(display_width(n) for n in names) + 2
        for row, name in zip(data["manifest"][-8:], names):
            mark = pad(t("st_mark_ok") if row.get("ok") else t("st_mark_err"), 3)
            error = f"  {str(row.get('error'))[:60]}" if row.get("error") else ""
            turns = pad(n_turns(int(row.get("num_turns") or 0), lang), 9)
            lines.append(f"  {mark} {pad(name, name_width)}${float(row.get('cost_usd') or 0):.4f} "
                         f"{turns}{row.get('started_at', '')}{error}")
    return lines


def _budget_pairs(budget: dict | None, lang: str) -> list[tuple[str, str]]:
    """The ``spent`` line of ``status`` (none before anything was spent or budgeted)."""
    if not budget or not (budget["spent_usd"] or budget["max_cost_usd"]):
        return []
    cap = budget["max_cost_usd"]
    return [("st_spend", text("st_spend_of", lang, spent=budget["spent_usd"], cap=cap) if cap
             else text("st_spend_only", lang, spent=budget["spent_usd"]))]


def _read_state(args: argparse.Namespace, paths: Paths, read: Callable[[Paths, StateBackend], dict]) -> dict:
    """What ``read`` gathers from the state backend, opened without waiting and closed afterwards
    (``status`` and ``report``: they only read, so a run dir that is not a directory is a setup error)."""
    if os.path.exists(paths.run_dir) and not os.path.isdir(paths.run_dir):
        raise FlowerError(text("er_run_dir_not_dir", _lang(args), path=paths.run_dir), EXIT_SETUP)
    backend = _open_state(args, paths, wait=False)
    try:
        return read(paths, backend)
    finally:
        backend.close()


def cmd_status(args: argparse.Namespace, reporter: Reporter) -> int:
    """Wake state, the last manifest rows and the stored sessions; never needs the SDK."""
    paths = _paths(args, reporter)
    data = _read_state(args, paths, status_data)
    data["settings"] = settings_line(paths.workspace, settings_choice(args), paths.lang)
    if args.json:
        print(json.dumps({"v": JSON_VERSION, "kind": "status", **data}, ensure_ascii=False))
    else:
        print("\n".join(_status_lines(data, paths.lang)))
    return EXIT_OK


# -- doctor --

@record
class Check:
    """One line of ``doctor``: what was checked, whether it passed, and how to fix it."""

    ok: bool
    what: str
    fix: str = ""
    kind: str = "setup"   # "setup" (exit 3) or "network" (exit 4)


def _check_cli(sdk: Any, lang: str) -> Check:
    """The bundled Claude Code CLI (or one on PATH) and the version it reports."""
    import subprocess
    t = functools.partial(text, lang=lang)
    cli = find_cli(sdk)
    if not cli:
        return Check(False, t("dr_cli_missing"), t("dr_cli_fix"))
    try:
        answer = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=20)
        version = (answer.stdout.strip().splitlines() or ["?"])[0]
    except (OSError, subprocess.SubprocessError) as exc:
        return Check(False, t("dr_cli_broken", path=_tilde(cli), error=type(exc).__name__), t("dr_cli_fix"))
    return Check(answer.returncode == 0, f"Claude Code CLI {version} ({_tilde(cli)})", t("dr_cli_fix"))


def _doctor_setup(lang: str) -> list[Check]:
    t = functools.partial(text, lang=lang)
    checks = [Check(sys.version_info >= (3, 10), f"Python {sys.version.split()[0]}", t("dr_python_fix"))]
    try:
        sdk = importlib.import_module(_SDK_MODULE)
        checks.append(Check(True, f"claude-agent-sdk {getattr(sdk, '__version__', '?')}"))
        checks.append(_check_cli(sdk, lang))
    except ImportError:
        checks.append(Check(False, t("dr_sdk_missing"), f"{sys.executable} -m pip install claude-agent-sdk"))
    creds = _credentials()
    checks.append(Check(creds is not None, t("dr_credentials", name=creds[0], masked=creds[1]) if creds
                        else t("dr_no_credentials"), t("dr_credentials_fix")))
    problems = settings_problems()
    checks += [Check(False, problem, t("dr_settings_fix")) for problem in problems] or [Check(True, t("dr_settings_ok"))]
    return checks


def _doctor_network(lang: str) -> Check:
    t = functools.partial(text, lang=lang)
    host, port, proxy = probe_target()
    verdict = diagnose(host, port, max(0.1, env_number("FLOWER_PROBE_TIMEOUT", 5.0)))
    said = t("dr_" + verdict.split(" (")[0].replace(" ", "_").lower()) + verdict[len(verdict.split(" (")[0]):]
    where = t("dr_proxy", host=host, port=port, var=proxy) if proxy else t("dr_endpoint", host=host, port=port)
    fix = t("dr_proxy_fix", var=proxy) if proxy else t("dr_network_fix")
    return Check(verdict == "reachable", f"{where} {said}", fix, kind="network")


def _doctor_state(args: argparse.Namespace, reporter: Reporter, lang: str) -> list[Check]:
    t = functools.partial(text, lang=lang)
    paths = _paths(args, reporter)
    try:
        paths.prepare()
        probe = paths.run(f".doctor-{os.getpid()}")
        atomic_write(probe, "ok")
        os.unlink(probe)
    except (FlowerError, OSError) as exc:
        return [Check(False, t("dr_run_dir_broken", error=exc.said(lang) if isinstance(exc, FlowerError) else exc), t("dr_run_dir_fix"))]
    checks = [Check(True, t("dr_run_dir", path=_tilde(paths.run_dir)))]
    db = paths.run("sessions.db")
    if os.path.exists(db):
        try:
            store = SqliteSessionStore(db)
        except FlowerError as exc:
            return checks + [Check(False, exc.said(lang), t("dr_aside_fix"))]
        try:
            checks += _doctor_store(store, lang)
        finally:
            store.close()
    return checks


def _doctor_store(store: SqliteSessionStore, lang: str) -> list[Check]:
    """SQLite's integrity check, then every row decoded as a resume would: a row whose text is not an
    entry is named with its session (a resume skips it, and the model may redo its work)."""
    t = functools.partial(text, lang=lang)
    try:
        verdict = store.integrity()
    except sqlite3.DatabaseError as exc:
        verdict = str(exc)
    checks = [Check(verdict == "ok", t("dr_integrity", verdict=verdict), t("dr_aside_fix"))]
    try:
        total, damaged = store.damaged_rows()
    except sqlite3.DatabaseError as exc:
        return checks + [Check(False, t("dr_rows_unread", error=exc), t("dr_aside_fix"))]
    if not damaged:
        return checks + [Check(True, t("dr_rows_ok", n=total))]
    where = ", ".join(f"{sid}: {n}" for sid, n in sorted(damaged.items()))
    return checks + [Check(False, t("dr_rows_damaged", n=sum(damaged.values()), total=total, where=where),
                           t("dr_rows_fix"))]


def _database_reach(host: str, port: int) -> str:
    """:func:`diagnose` for the state database; a host that is a directory names a unix socket."""
    if host.startswith("/"):
        return "reachable" if os.path.exists(os.path.join(host, f".s.PGSQL.{port}")) else "unreachable"
    return diagnose(host, port, max(0.1, env_number("FLOWER_PROBE_TIMEOUT", 5.0)))


def _doctor_database(args: argparse.Namespace, lang: str) -> list[Check]:
    """With ``--state`` / FLOWER_STATE postgresql://...: psycopg, the server's reach, the login and
    the flower schema, a line each (login and schema only when the server is reached)."""
    t = functools.partial(text, lang=lang)
    spec = args.state if args.state is not None else os.environ.get(STATE_ENV, "")
    if not spec.startswith(("postgresql://", "postgres://")):
        return []
    try:
        pg = importlib.import_module("psycopg")
    except ImportError:
        return [Check(False, t("dr_psycopg_missing"), 'pip install "psycopg[binary]"')]
    checks = [Check(True, t("dr_psycopg", version=getattr(pg, "__version__", "?")))]
    try:
        state = PostgresState(Paths(".", None, lang), spec, "doctor")
    except FlowerError as exc:
        return checks + [Check(False, exc.said(lang), t("dr_db_login_fix"))]
    host, port = state.endpoint()
    verdict = _database_reach(host, port)
    said = t("dr_" + verdict.split(" (")[0].replace(" ", "_").lower()) + verdict[len(verdict.split(" (")[0]):]
    checks.append(Check(verdict == "reachable", t("dr_db_reach", host=host, port=port, verdict=said),
                        t("dr_db_reach_fix"), kind="network"))
    if verdict != "reachable":
        return checks
    try:
        conn = state._connect()
    except Offline as exc:
        return checks + [Check(False, exc.said(lang), t("dr_db_reach_fix"), kind="network")]
    except FlowerError as exc:
        return checks + [Check(False, exc.said(lang), t("dr_db_login_fix"))]
    checks.append(Check(True, t("dr_db_login", where=state.where())))
    try:
        with conn:
            found = conn.execute(PG_SCHEMA_FOUND).fetchone()[0] \
                if conn.execute(PG_SCHEMA_EXISTS).fetchone()[0] else None
    except pg.Error as exc:
        return checks + [Check(False, f"flower schema: {redact(str(exc)).splitlines()[0][:200]}", t("dr_db_login_fix"))]
    if found is None:
        return checks + [Check(True, t("dr_db_schema_none"))]
    return checks + [Check(found <= PG_SCHEMA_VERSION, t("dr_db_schema", version=found, known=PG_SCHEMA_VERSION),
                           t("dr_db_schema_fix"))]


def _doctor_settings(args: argparse.Namespace, lang: str) -> Check:
    """What the agents read of the workspace's own settings (a usage error when ``--settings`` is bad)."""
    workspace = os.path.realpath(args.workspace) if os.path.isdir(args.workspace) else args.workspace
    return Check(True, settings_line(workspace, settings_choice(args), lang))


def cmd_doctor(args: argparse.Namespace, reporter: Reporter) -> int:
    """Check everything a run needs, one line each. Exit 0 when all pass, 4 when only the network
    fails, 3 when anything else does."""
    lang = _lang(args)
    checks = _doctor_setup(lang) + [_doctor_network(lang)] + _doctor_state(args, reporter, lang) \
        + _doctor_database(args, lang) + [_doctor_settings(args, lang)]
    failed = [c for c in checks if not c.ok]
    code = EXIT_OK if not failed else EXIT_OFFLINE if all(c.kind == "network" for c in failed) else EXIT_SETUP
    if args.json:
        print(json.dumps({"v": JSON_VERSION, "kind": "doctor", "exit_code": code,
                          "checks": [dataclasses.asdict(c) for c in checks]}, ensure_ascii=False))
        return code
    for c in checks:
        mark = pad(text("dr_mark_ok" if c.ok else "dr_mark_fail", lang), 4)
        print(f"{mark} {c.what}" + ("" if c.ok or not c.fix else f"  -> {c.fix}"))
    return code


# -- sessions and show --

def render_entries(entries: list[dict]) -> str:
    """A transcript as plain text: who said what, tool calls and (shortened) results."""
    lines = []
    for entry in entries:
        kind = entry.get("type")
        if kind not in ("user", "assistant"):
            continue
        for block in blocks_of(entry):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                lines.append(f"[{kind}] {block['text']}")
            elif block.get("type") == "tool_use":
                lines.append(f"[tool_use {block.get('name')}] {json.dumps(block.get('input'), ensure_ascii=False)[:300]}")
            elif block.get("type") == "tool_result":
                body = block_text(block)
                lines.append(f"[tool_result{' error' if block.get('is_error') else ''}] "
                             f"{body[:500]}{'…' if len(body) > 500 else ''}")
    return redact("\n".join(lines))


def cmd_sessions(args: argparse.Namespace, reporter: Reporter) -> int:
    """List stored sessions with their size, last context and owning step."""
    paths = _paths(args, reporter)
    backend = _open_state(args, paths, wait=False)
    try:
        store = backend.session_store(create=False)
        rows = store.sessions(None if args.all else project_key(paths.workspace)) \
            if store is not None else []
        owners = {sid: step for step, sid in wake_state(paths.workspace, paths.run_dir, backend)["steps"].items()}
    finally:
        backend.close()
    for row in rows:
        row["step"] = owners.get(row["session_id"])
    if args.json:
        print(json.dumps({"v": JSON_VERSION, "kind": "sessions", "sessions": rows}, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print(text("st_no_sessions", paths.lang))
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["mtime"] / 1000))
        entries = text("st_entries", paths.lang, n=row["entries"])
        print(f"{row['session_id']}  {when}  {entries:>12}  ctx {_human_tokens(row['context']):>7}"
              + (f"  {row['step']}" if row["step"] else "") + (f"  {row['project_key']}" if args.all else ""))
    return EXIT_OK


def cmd_show(args: argparse.Namespace, reporter: Reporter) -> int:
    """Print a session as the model would be sent it (pruned), or as stored with --raw."""
    paths = _paths(args, reporter)
    lang = paths.lang
    backend = _open_state(args, paths, wait=False)
    try:
        store = backend.session_store(create=False)
        if store is None or not store.catalog:
            raise FlowerError(text("st_no_sessions", lang), EXIT_USAGE)
        matches = store.find_session(args.sid)
        if len(matches) != 1:
            key = "st_no_match" if not matches else "st_ambiguous"
            raise FlowerError(text(key, lang, n=len(matches), sid=args.sid, prog=program_name()), EXIT_USAGE)
        key = {"project_key": matches[0]["project_key"], "session_id": matches[0]["session_id"]}
        entries = store.load_sync(key) or []
    finally:
        backend.close()
    if args.raw and args.json:
        print(json.dumps({"v": JSON_VERSION, "kind": "show", "session_id": key["session_id"], "raw": True,
                          "entries": redact_obj(entries)}, ensure_ascii=False))
        return EXIT_OK
    if args.raw:
        for entry in entries:
            print(json.dumps(redact_obj(entry), ensure_ascii=False))
        return EXIT_OK
    pruned, report = prune(entries, PrunePolicy(lang=lang))
    counts = {k: v for k, v in report.as_dict().items() if isinstance(v, int) and v}
    if args.json:
        print(json.dumps({"v": JSON_VERSION, "kind": "show", "session_id": key["session_id"], "pruned": counts,
                          "entries": redact_obj(pruned)}, ensure_ascii=False))
        return EXIT_OK
    shown = render_entries(pruned)
    print(sanitize(shown) if sys.stdout.isatty() else shown)
    parts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items())
    if parts:
        print(text("st_pruned", lang, parts=parts), file=sys.stderr)
    return EXIT_OK


# -- report --

def cmd_report(args: argparse.Namespace, reporter: Reporter) -> int:
    """Write the report page (``-o``, default ``<run_dir>/report.html``) or, with ``--json``, print its data."""
    paths = _paths(args, reporter)
    data = _read_state(args, paths, gather_report)
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
        return EXIT_OK
    target = os.path.abspath(args.output or paths.run("report.html"))
    try:
        if not args.output:
            paths.prepare()
        atomic_write(target, render_report(data, paths.lang), mode=0o600)
    except OSError as exc:
        raise FlowerError(text("rp_cannot_write", paths.lang, path=target, error=in_lang(os_reason(exc), paths.lang)), EXIT_SETUP) from None
    print(text("rp_wrote", paths.lang, path=_tilde(target)))
    return EXIT_OK


def _report_options(command: Callable[[str], argparse.ArgumentParser]) -> None:
    """The ``report`` sub-command's options."""
    report = command("report")
    report.add_argument("-o", "--output", default=None, metavar="FILE")
    _global_options(report)


# -- talking to a running job: say, answer, ask --

def cmd_answer(args: argparse.Namespace, reporter: Reporter) -> int:
    """Answer a question an agent asked (from any shell); exit 2 when no such question waits."""
    lang = _lang(args)
    words = (_check_text(args.words if args.words != "-" else sys.stdin.read(), "the answer") or "").strip()
    if not words:
        raise FlowerError(text("ui_answer_empty", lang), EXIT_USAGE)
    paths = _paths(args, reporter)
    backend = _open_state(args, paths, say=lambda m: reporter.say(m, always=True))
    try:
        waiting = backend.questions_waiting()
        if args.id not in waiting:
            raise FlowerError(text("ui_no_question", lang, id=sanitize(args.id)[:40], open=", ".join(waiting) or "-"),
                              EXIT_USAGE)
        backend.post_answer(args.id, words)
    finally:
        backend.close()
    reporter.say(text("ui_answered", lang, id=args.id), always=True)
    return EXIT_OK


def cmd_ask(args: argparse.Namespace, reporter: Reporter) -> int:
    """A side question, answered from a read-only fork of the work session (running or not): no lock
    is taken; the answer goes to stdout, its cost to stderr and to the manifest as its own step."""
    import asyncio
    lang = _lang(args)
    question = _check_task(args.question, "the question")
    if not question or not question.strip():
        raise FlowerError(text("ui_side_empty", lang), EXIT_USAGE)
    _check_settings()
    paths = _paths(args, reporter)
    paths.prepare()
    backend = _open_state(args, paths, say=lambda m: reporter.say(m, always=True))
    try:
        steps = backend.peek_lineage().get("steps") or {}
        sid = steps.get("work") if isinstance(steps, dict) else None
        if not isinstance(sid, str):
            raise FlowerError(text("ui_side_none", lang), EXIT_USAGE)
        _require_agent(lang)
        _quiet_sdk_logs(args.verbose)
        reporter.show_text = False   # the answer is printed once, on stdout
        rt = SideRuntime(workspace=paths.workspace, run_dir=paths.run_dir, state=backend, lang=lang,
                         model=args.model, on_event=reporter.event, notify=lambda m: reporter.say(m, always=True))
        rt.side_of = sid
        try:
            result = asyncio.run(rt.run(side_spec(lang, args.model), text("side_prompt", lang, question=redact(question)),
                                        step_name=SIDE_STEP, resume=sid, fork=True))
            rt.record(result)
            reporter.close()
            if result.ok and not args.json:
                _print_answer(result.text, reporter)
            reporter.say(text("ui_side_cost", lang, sid=sid[:8], cost=result.cost_usd, path=_tilde(rt.manifest.path)),
                         always=True)
            if not result.ok:
                reporter.say(f"flower: {in_lang(result.error, lang)}", always=True)
                return _exit_code(rt, result.error or "")
            return EXIT_OK
        finally:
            rt.close()
    finally:
        backend.close()


def side_question_in_background(rt: Runtime, reporter: Reporter) -> Callable[[str], None]:
    """``?`` typed on the terminal: the side question runs as ``ask`` in a process of its own (its own
    temp copies, never the live run's), and its answer is printed when it comes."""
    import asyncio

    async def run(question: str) -> None:
        argv = [sys.executable, os.path.abspath(__file__), "ask", question, "-w", rt.paths.workspace,
                "-r", rt.paths.run_dir, "--lang", rt.lang]
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        for line in (out.decode("utf-8", "replace") + err.decode("utf-8", "replace")).strip().splitlines():
            reporter.say("  ? " + sanitize(line), always=True)

    running: set = set()   # held until done (a task nobody holds may be collected mid-run)

    def ask(question: str) -> None:
        if question:
            reporter.say(text("ui_side_started", rt.lang), always=True)
            task = asyncio.ensure_future(run(question))
            running.add(task)
            task.add_done_callback(running.discard)
    return ask


async def listening(rt: Runtime, reporter: Reporter, desk: MailDesk, interactive: bool,
                    body: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``body`` while lines typed on the terminal reach the job (when there is a terminal), with a
    heartbeat in a log (when there is none)."""
    import asyncio
    beat = None
    if not reporter.tty or reporter.json_mode:   # a terminal's status line ticks by itself
        period = max(0.5, env_number("FLOWER_HEARTBEAT", HEARTBEAT, rt.notify) or HEARTBEAT)
        beat = asyncio.ensure_future(Heartbeat(rt, period).beat())
    try:
        if not interactive:
            return await body()

        def mail(words: str) -> None:
            mail_id = desk.inbox.post(words)
            reporter.say(text("ui_mail_typed", rt.lang, id=mail_id), always=True)
        def interrupted() -> bool:   # Ctrl-C asked what to tell the agent: the next line is the answer
            return rt._human_event is not None and rt._human_event.is_set()
        with TerminalLines(mail, desk.on_side or side_question_in_background(rt, reporter), expecting=interrupted):
            return await body()
    finally:
        if beat is not None:
            beat.cancel()


def _say_words(args: argparse.Namespace) -> str:
    words = args.words if args.words != "-" else sys.stdin.read()
    words = (_check_text(words, "the words") or "").strip()
    if not words:
        raise FlowerError(text("ui_mail_empty", _lang(args)), EXIT_USAGE)
    return words


def cmd_say(args: argparse.Namespace, reporter: Reporter) -> int:
    """Leave words for the running work agent (or the next run): it gets them at its next tool
    boundary, without being interrupted. No lock is taken."""
    words = _say_words(args)
    paths = _paths(args, reporter)
    paths.prepare()
    inbox = Inbox(inbox_dir(paths), lang=_lang(args))
    backend = _open_state(args, paths, say=lambda m: reporter.say(m, always=True))
    try:
        mail_id = backend.mailbox(inbox).post(words)
        where = backend.where() or _tilde(inbox.directory)
    finally:
        backend.close()
    reporter.say(text("ui_mail_posted", _lang(args), id=mail_id, path=where), always=True)
    reporter.event(Event("mail", data={"id": mail_id, "phase": "posted"}))
    return EXIT_OK


def cmd_handoff(args: argparse.Namespace, reporter: Reporter) -> int:
    """Ask the running work step to hand over at its next boundary (or the next run to start it from a
    carry). No lock is taken."""
    paths = _paths(args, reporter)
    paths.prepare()
    backend = _open_state(args, paths, say=lambda m: reporter.say(m, always=True))
    try:
        where = backend.post_handoff()
    finally:
        backend.close()
    reporter.say(text("ui_handoff_posted", _lang(args), path=_tilde(where)), always=True)
    reporter.event(Event("handoff", data={"phase": "posted", "reason": "asked"}))
    return EXIT_OK


def _handoff_option(go: argparse.ArgumentParser) -> None:
    """``go --handoff``: on a wake the work step starts from a carry, not the old session."""
    go.add_argument("--handoff", action="store_true")


def _inbox_commands(command: Callable[[str], argparse.ArgumentParser]) -> None:
    """The sub-commands that talk to a running job."""
    say = command("say")
    say.add_argument("words")
    _global_options(say)
    answer = command("answer")
    answer.add_argument("id")
    answer.add_argument("words")
    _global_options(answer)
    ask = command("ask")
    ask.add_argument("question")
    ask.add_argument("--model", default=None)
    _global_options(ask)
    _global_options(command("handoff"))


# -- entry point --

COMMANDS = {"go": cmd_go, "once": cmd_once, "status": cmd_status, "doctor": cmd_doctor,
            "sessions": cmd_sessions, "show": cmd_show, "report": cmd_report, "say": cmd_say,
            "answer": cmd_answer, "ask": cmd_ask, "handoff": cmd_handoff}


def usable_std_streams() -> None:
    """Standard streams flower can always use: one that was closed when flower started (``<&-``,
    ``>&-``; Python makes it None) is /dev/null on its own descriptor (so no file flower opens later
    takes that number), and text the stream's encoding cannot show (``PYTHONIOENCODING=ascii``) is
    escaped (``\\u4e2d``, which a JSON reader reads back as the same text), never an error."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", errors="backslashreplace",
                                closefd=False))
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            if stream.errors == "strict":
                stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises, never prints a traceback)."""
    usable_std_streams()
    argv = list(sys.argv[1:] if argv is None else argv)
    reporter = Reporter(json_mode="--json" in argv, quiet="-q" in argv or "--quiet" in argv, lang=argv_lang(argv))
    try:
        for value in argv:
            _check_text(value if value != "-" else "", "an argument")
        argv = _split_command(argv)
        parser = build_parser(argv[0] if argv and argv[0] in SUBCOMMANDS else "", argv_lang(argv))
        args = parser.parse_args(argv)
        reporter = Reporter(json_mode=args.json, verbose=args.verbose, quiet=args.quiet, lang=_lang(args),
                            show_text=args.command != "once")
        for env_name, env_value in cli_env_defaults().items():
            os.environ.setdefault(env_name, env_value)
        return COMMANDS[args.command](args, reporter)
    except FlowerError as exc:
        reporter.close()
        print(f"flower: {redact(exc.said(reporter.lang))}", file=sys.stderr)
        if reporter.json_mode:   # CI reads why from stdout too: one last JSON line
            data = {"exit_code": exc.exit_code, "message": redact(exc.said(reporter.lang))}
            if isinstance(exc, Busy):
                data["holder"] = exc.holder
            print(Event("lock" if isinstance(exc, Busy) else "error", data=data).as_json(), file=reporter.out,
                  flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        reporter.close()
        print(f"flower: {text('er_interrupted', reporter.lang)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # argparse --help / --version
        return int(exc.code or 0) if isinstance(exc.code, int) else 0
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:
        print(f"flower: {os_error_line(exc, reporter.lang)}", file=sys.stderr)
        return EXIT_SETUP
    except Exception as exc:  # the last line of defence: one line, no traceback
        damage = store_damage(exc)
        if damage:   # a damaged store met outside a turn (a listing, a lookup): a setup problem, said as such
            print(f"flower: {text('store_damaged', reporter.lang, path='the session store', error=damage, prog=program_name())}",
                  file=sys.stderr)
            return EXIT_SETUP
        print(f"flower: {text('er_unexpected', reporter.lang, kind=type(exc).__name__, error=redact(str(exc))[:300])}", file=sys.stderr)
        if os.environ.get("FLOWER_DEBUG"):
            raise
        return EXIT_STEP_FAILED
    finally:
        reporter.close()


if __name__ == "__main__":
    sys.exit(main())
