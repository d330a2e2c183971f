"""A small fake ``claude_agent_sdk`` for the core tier: scripted turns, no CLI, no network.

Install with ``fakesdk.install()`` (puts the module in ``sys.modules``); script turns with
``FAKE.turns`` (a list consumed one per ``client.query()``; each item is a list of actions or a
callable ``(prompt, options, loaded) -> actions``). Actions:

    ("text", "hello", level)                 assistant text; level = context tokens of that call
    ("tool", "Bash", {"command": ...}, "result text", level)   tool_use, then its tool_result
    ("error", "API Error: ...", status, terminal_reason)       an error result (synthetic entry too)
    ("raise", exception)                     the client raises mid-turn
    ("block", asyncio_event_name)            wait until the test sets FAKE.events[name] (or interrupt)
    ("system", subtype, data)                a SystemMessage (e.g. the SDK's "mirror_error")

Like the real client: messages are mirrored to ``options.session_store`` as transcript entries
(eager), ``resume`` loads from the store (what ``load()`` returns is what the "model" sees, kept in
``FAKE.loaded``), ``total_cost_usd`` is cumulative per connection, and ``interrupt()`` ends the
turn with ``terminal_reason="aborted_tools"``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import types
import uuid
from dataclasses import dataclass, field
from typing import Any


# --- message and block types (the fields flower reads) ---

@dataclass
class TextBlock:
    text: str


@dataclass
class ThinkingBlock:
    thinking: str
    signature: str = ""


@dataclass
class ToolUseBlock:
    id: str
    name: str
    input: dict


@dataclass
class ToolResultBlock:
    tool_use_id: str
    content: Any = None
    is_error: bool | None = None


@dataclass
class AssistantMessage:
    content: list
    model: str
    parent_tool_use_id: str | None = None
    error: str | None = None
    usage: dict | None = None
    message_id: str | None = None
    session_id: str | None = None
    uuid: str | None = None          # the real SDK's: the uuid of its transcript entry
    stop_reason: str | None = None


@dataclass
class UserMessage:
    content: Any
    uuid: str | None = None
    parent_tool_use_id: str | None = None


@dataclass
class SystemMessage:
    subtype: str
    data: dict


@dataclass
class ResultMessage:
    subtype: str
    duration_ms: int
    duration_api_ms: int
    is_error: bool
    num_turns: int
    session_id: str
    total_cost_usd: float | None = None
    result: str | None = None
    model_usage: dict | None = None
    errors: list | None = None
    api_error_status: int | None = None
    terminal_reason: str | None = None


@dataclass
class ClaudeAgentOptions:
    tools: Any = None
    allowed_tools: list = field(default_factory=list)
    disallowed_tools: list = field(default_factory=list)
    system_prompt: Any = None
    mcp_servers: Any = field(default_factory=dict)
    permission_mode: str | None = None
    resume: str | None = None
    session_id: str | None = None
    fork_session: bool = False
    max_turns: int | None = None
    max_budget_usd: float | None = None
    model: str | None = None
    cwd: str | None = None
    env: dict = field(default_factory=dict)
    stderr: Any = None
    setting_sources: Any = None
    session_store: Any = None
    session_store_flush: str = "batched"
    cli_path: Any = None
    hooks: Any = None
    agents: Any = None


@dataclass
class HookMatcher:
    matcher: Any = None
    hooks: list = field(default_factory=list)
    timeout: Any = None


class ProcessError(Exception):
    pass


def tool(name, description, schema):
    def wrap(fn):
        return {"name": name, "fn": fn}
    return wrap


def create_sdk_mcp_server(name, version="1", tools=None):
    return {"name": name, "tools": tools or []}


# --- the scripted world ---

class World:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.turns: list = []
        self.calls: list[dict] = []        # one per query(): options, prompt
        self.loaded: list = []             # what load() returned on each resume
        self.events: dict[str, asyncio.Event] = {}
        self.cost_per_call = 0.01
        self.model = "claude-sonnet-4-5"
        self.context_window = 200_000
        self.connections = 0
        self.interrupts = 0
        self.hook_stops = 0                # turns a PostToolBatch hook ended (continue_ False)

    def next_turn(self, prompt: str, options: ClaudeAgentOptions, loaded: list | None) -> list:
        if not self.turns:
            return [("text", "ok", 1000)]
        item = self.turns.pop(0)
        return item(prompt, options, loaded) if callable(item) else item


FAKE = World()


def _project_key(path: str) -> str:
    import flower  # the store key rule under test is flower's own
    return flower.project_key(path)


class ClaudeSDKClient:
    def __init__(self, options: ClaudeAgentOptions | None = None):
        self.options = options or ClaudeAgentOptions()
        self._queue: asyncio.Queue | None = None
        self._interrupted = False
        self._cost = 0.0
        self._parent: str | None = None
        self._sid: str | None = None
        self._loaded: list | None = None
        self._task: asyncio.Task | None = None

    async def connect(self) -> None:
        FAKE.connections += 1
        o = self.options
        store = o.session_store
        key_base = _project_key(o.cwd or ".")
        if o.resume:
            loaded = await store.load({"project_key": key_base, "session_id": o.resume}) if store else None
            if not loaded:
                raise ProcessError(f"No conversation found with session ID: {o.resume}")
            self._loaded = loaded
            FAKE.loaded.append(loaded)
            self._sid = o.session_id if o.fork_session else o.resume
            last = [e for e in loaded if isinstance(e.get("uuid"), str)]
            self._parent = last[-1]["uuid"] if last else None
            if o.fork_session:  # the fork gets a copy of the history under its own id
                await store.append({"project_key": key_base, "session_id": self._sid},
                                   [dict(e, sessionId=self._sid) for e in loaded])
        else:
            self._sid = o.session_id or str(uuid.uuid4())
        self._key = {"project_key": key_base, "session_id": self._sid}

    async def _mirror(self, entry: dict) -> None:
        entry.setdefault("uuid", str(uuid.uuid4()))
        entry["parentUuid"] = self._parent
        entry["sessionId"] = self._sid
        self._parent = entry["uuid"]
        if self.options.session_store is not None:
            await self.options.session_store.append(self._key, [entry])

    async def query(self, prompt: str, session_id: str = "default") -> None:
        FAKE.calls.append({"options": self.options, "prompt": prompt, "session_id": self._sid,
                           "loaded": self._loaded})
        self._interrupted = False
        self._queue = asyncio.Queue()
        actions = FAKE.next_turn(prompt, self.options, self._loaded)
        self._task = asyncio.ensure_future(self._play(prompt, actions))

    async def _play(self, prompt: str, actions: list) -> None:
        q = self._queue
        assert q is not None
        try:
            await q.put(SystemMessage("init", {"session_id": self._sid, "model": FAKE.model}))
            await self._mirror({"type": "user", "message": {"role": "user", "content": prompt}})
            turns = 0
            last_text = ""
            for action in actions:
                if self._interrupted:
                    break
                kind = action[0]
                if kind == "text":
                    turns += 1
                    self._cost += FAKE.cost_per_call
                    usage = {"input_tokens": action[2], "cache_read_input_tokens": 0,
                             "cache_creation_input_tokens": 0, "output_tokens": 1}
                    mid = "msg_" + uuid.uuid4().hex[:8]
                    await self._mirror({"type": "assistant", "message": {
                        "id": mid, "role": "assistant", "model": FAKE.model, "usage": usage,
                        "content": [{"type": "text", "text": action[1]}]}})
                    last_text = action[1]
                    await q.put(AssistantMessage([TextBlock(action[1])], FAKE.model, usage=usage, message_id=mid))
                elif kind == "tool":
                    turns += 1
                    self._cost += FAKE.cost_per_call
                    _, name, args, result_text, level = action
                    usage = {"input_tokens": level, "output_tokens": 1}
                    tid = "toolu_" + uuid.uuid4().hex[:12]
                    mid = "msg_" + uuid.uuid4().hex[:8]
                    await self._mirror({"type": "assistant", "message": {
                        "id": mid, "role": "assistant", "model": FAKE.model, "usage": usage,
                        "content": [{"type": "tool_use", "id": tid, "name": name, "input": args}]}})
                    await q.put(AssistantMessage([ToolUseBlock(tid, name, args)], FAKE.model, usage=usage,
                                                 message_id=mid))
                    await asyncio.sleep(0)
                    await self._mirror({"type": "user", "toolUseResult": {"stdout": result_text},
                                        "message": {"role": "user", "content": [
                                            {"type": "tool_result", "tool_use_id": tid, "content": result_text,
                                             "is_error": False}]}})
                    await q.put(UserMessage([ToolResultBlock(tid, result_text, False)]))
                    if await self._batch_stops([{"tool_name": name, "tool_input": args, "tool_use_id": tid,
                                                 "tool_response": result_text}]):
                        FAKE.hook_stops += 1
                        await q.put(ResultMessage("success", 1, 1, False, turns, self._sid, self._cost, None,
                                                  None, None, None, "hook_stopped"))
                        return
                elif kind == "block":
                    event = FAKE.events.setdefault(action[1], asyncio.Event())
                    while not event.is_set() and not self._interrupted:
                        await asyncio.sleep(0.005)
                elif kind == "raise":
                    raise action[1]
                elif kind == "system":
                    await q.put(SystemMessage(action[1], dict(action[2])))
                elif kind == "error":
                    _, message, status, reason = action
                    await self._mirror({"type": "system", "subtype": "api_error", "level": "error",
                                        "error": {"message": message}})
                    await self._mirror({"type": "assistant", "isApiErrorMessage": True, "message": {
                        "id": "x", "role": "assistant", "model": "<synthetic>", "usage": {"input_tokens": 0},
                        "content": [{"type": "text", "text": message}]}})
                    await q.put(AssistantMessage([TextBlock(message)], "<synthetic>", error="server_error"))
                    await q.put(ResultMessage("success", 1, 1, True, turns, self._sid, self._cost, message,
                                              None, [], status, reason))
                    return
            if self._interrupted:
                await self._mirror({"type": "user", "message": {"role": "user", "content": [
                    {"type": "text", "text": "[Request interrupted by user for tool use]"}]}})
                await q.put(ResultMessage("error_during_execution", 1, 1, True, turns, self._sid, self._cost,
                                          None, None, ["interrupted"], None, "aborted_tools"))
                return
            await q.put(ResultMessage("success", 1, 1, False, turns, self._sid, self._cost, last_text,
                                      {FAKE.model: {"contextWindow": FAKE.context_window}}, None, None,
                                      "completed"))
        except Exception as exc:  # surfaced from receive_response, like a dying CLI
            await q.put(exc)

    async def _batch_stops(self, calls: list) -> bool:
        """Run the PostToolBatch hooks after a tool call, as the CLI does; True when one stops the turn."""
        stop = False
        for matcher in (self.options.hooks or {}).get("PostToolBatch", []):
            for hook in matcher.hooks:
                answer = await hook({"hook_event_name": "PostToolBatch", "session_id": self._sid,
                                     "tool_calls": calls}, None, {})
                stop = stop or (answer or {}).get("continue_") is False
        return stop

    async def receive_response(self):
        assert self._queue is not None
        while True:
            item = await self._queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if isinstance(item, ResultMessage):
                return

    async def interrupt(self) -> None:
        FAKE.interrupts += 1
        self._interrupted = True

    async def disconnect(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


class FakeWorkspace:
    """unittest mixin: the fake SDK installed, a temporary workspace ``self.ws`` and ``self.run_dir``."""

    def setUp(self) -> None:
        import tempfile
        install()
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        self.run_dir = os.path.join(self.tmp.name, "runs")
        os.makedirs(self.ws)

    def tearDown(self) -> None:
        uninstall()
        self.tmp.cleanup()


_saved: list = []


def install() -> types.ModuleType:
    """Register this module as ``claude_agent_sdk`` (tests only); ``uninstall()`` restores."""
    module = sys.modules[__name__]
    _saved.append(sys.modules.get("claude_agent_sdk"))
    sys.modules["claude_agent_sdk"] = module
    FAKE.reset()
    return module


def uninstall() -> None:
    previous = _saved.pop() if _saved else None
    if previous is None:
        sys.modules.pop("claude_agent_sdk", None)
    else:
        sys.modules["claude_agent_sdk"] = previous


def agent_role(system: str) -> str | None:
    """Which starter-flow agent a system prompt belongs to (clarify, goal, judge, work), in any language."""
    import flower
    for role in ("clarify", "goal", "judge", "work"):
        if any(flower.text(f"{role}_instructions", lang)[:24] in system for lang in flower.TEXTS):
            return role
    return None


MD2HTML_BRIEF = ("## Goal\nmd2html script\n## Acceptance\nprints html\n## Bounds\nstdlib only\n"
                 "## Unknowns and assumptions\nassumed UTF-8 input")
MD2HTML_GOAL = "# Goal\nmd2html works\n\n# Checks\n- `python md2html.py t.md` prints <h1>\n- code blocks get <pre>"


class Brain:
    """Answers by role (read from the system prompt), records every call."""

    def __init__(self, verdicts=("VERDICT: achieved",), goal=MD2HTML_GOAL):
        self.verdicts = list(verdicts)
        self.goal = goal
        self.roles = []

    def __call__(self, prompt, options, loaded):
        system = options.system_prompt if isinstance(options.system_prompt, str) else \
            (options.system_prompt or {}).get("append", "")
        if agent_role(system) == "clarify":
            role, answer = "clarify", MD2HTML_BRIEF
        elif agent_role(system) == "goal":
            role, answer = "goal", self.goal
        elif agent_role(system) == "judge":
            role, answer = "judge", self.verdicts.pop(0) if self.verdicts else "VERDICT: achieved"
        else:
            role, answer = "work", "worked"
        self.roles.append(role)
        return [("text", answer, 1000)]
