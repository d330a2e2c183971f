"""Generators of transcripts shaped like the real CLI's (sdk-notes §c-§e), for property tests and
benchmarks. Seeded ``random`` only."""

from __future__ import annotations

import random
import uuid as _uuid

DENIAL_TEXT = "Claude requested permissions to write to /w/x.txt, but you haven't granted it yet."
INTERRUPT_TEXT = ("The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was "
                  "a file edit, the new_string was NOT written to the file). STOP what you are doing and wait for "
                  "the user to tell you how to proceed.")
KILLED_TEXT = ("[Tool call interrupted: the session ended before this call's result was recorded, so its outcome "
               "is unknown. Check whether it took effect before relying on it or running it again.]")
GLANCES = ["git status", "ls -la", "git log --oneline -5", "cat README.md", "pwd", "git diff", "wc -l x.py"]
WRITES = ["python3 build.py", "git commit -m x", "rm -rf build", "echo hi > f.txt", "sed -i s/a/b/ f"]


class Builder:
    def __init__(self, rng: random.Random, sid: str = "s-1"):
        self.rng = rng
        self.sid = sid
        self.entries: list[dict] = []
        self.parent: str | None = None
        self.n = 0

    def _uuid(self) -> str:
        self.n += 1
        return str(_uuid.UUID(int=self.rng.getrandbits(128)))

    def add(self, entry: dict, chained: bool = True) -> dict:
        if chained:
            entry["uuid"] = self._uuid()
            entry["parentUuid"] = self.parent
            self.parent = entry["uuid"]
        entry["sessionId"] = self.sid
        self.entries.append(entry)
        return entry

    def prompt(self, text: str) -> None:
        self.add({"type": "queue-operation", "operation": "enqueue", "content": text}, chained=False)
        self.add({"type": "user", "message": {"role": "user", "content": text}})
        if self.rng.random() < 0.3:
            self.add({"type": "attachment", "attachment": {"type": "date"}})

    def say(self, text: str, level: int) -> None:
        self.add({"type": "assistant", "message": {"id": "msg_" + self._uuid()[:8], "role": "assistant",
                                                   "model": "claude-opus-5-5", "content": [{"type": "text", "text": text}],
                                                   "usage": {"input_tokens": level, "cache_read_input_tokens": 0,
                                                             "cache_creation_input_tokens": 0}}})

    def tool(self, name: str, args: dict, result: str, *, kind: str = "ok", level: int = 1000,
             answered: bool = True) -> None:
        tid = "toolu_" + self._uuid()[:12]
        self.add({"type": "assistant", "message": {"id": "msg_" + self._uuid()[:8], "role": "assistant",
                                                   "model": "claude-opus-5-5",
                                                   "content": [{"type": "tool_use", "id": tid, "name": name, "input": args}],
                                                   "usage": {"input_tokens": level}}})
        if not answered:
            return
        entry = {"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tid, "content": result, "is_error": kind != "ok"}]}}
        if kind == "ok":
            entry["toolUseResult"] = {"stdout": result}
        elif kind == "denial":
            entry["message"]["content"][0]["content"] = DENIAL_TEXT
            entry.update(toolUseResult="Error: " + DENIAL_TEXT, toolDenialKind=self.rng.choice(
                ["user-rejected", "permission-rule"]), permissionDecision={"decision": "reject", "source": "config"})
        elif kind == "interrupt":
            entry["message"]["content"][0]["content"] = INTERRUPT_TEXT
            entry.update(toolUseResult="User rejected tool use", toolDenialKind="user-rejected")
        elif kind == "killed":
            entry["message"]["content"][0]["content"] = KILLED_TEXT
            entry.update(toolUseResult=KILLED_TEXT, toolDenialKind="interrupted")
        elif kind == "disallowed":
            entry["message"]["content"][0]["content"] = (f"<tool_use_error>Error: No such tool available: {name}. {name} "
                                                         "is disabled for this session, in subagents as well as "
                                                         "here.</tool_use_error>")
        self.add(entry)

    def api_error(self, retries: int) -> None:
        for i in range(retries):
            self.add({"type": "system", "subtype": "api_error", "level": "error",
                      "error": {"message": "Connection error."}, "retryAttempt": i + 1})
        self.add({"type": "assistant", "isApiErrorMessage": True, "message": {
            "id": "x", "model": "<synthetic>", "role": "assistant", "usage": {"input_tokens": 0},
            "content": [{"type": "text", "text": "API Error: Connection refused (ECONNREFUSED)"}]}})


def random_transcript(seed: int, size: int = 40) -> list[dict]:
    rng = random.Random(seed)
    b = Builder(rng, sid=f"s-{seed}")
    b.prompt("build the thing")
    level = 1000
    for _ in range(size):
        level += rng.randint(10, 500)
        r = rng.random()
        if r < 0.15:
            b.say(rng.choice(["working", "done part", "hmm"]), level)
        elif r < 0.35:
            b.tool("Bash", {"command": rng.choice(GLANCES)}, "x" * rng.choice([10, 100, 2500]), level=level)
        elif r < 0.45:
            b.tool("Bash", {"command": rng.choice(WRITES)}, "y" * rng.choice([10, 3000, 9000]), level=level)
        elif r < 0.55:
            b.tool("Write", {"file_path": "/w/x.txt", "content": "z"}, "", kind="denial", level=level)
        elif r < 0.6:
            b.tool("Bash", {"command": "python3 long.py"}, "", kind="interrupt", level=level)
        elif r < 0.63:
            b.tool("Bash", {"command": "python3 long.py"}, "", kind="killed", level=level)
        elif r < 0.7:
            b.api_error(rng.randint(0, 3))
        elif r < 0.75:
            b.prompt(rng.choice(["continue", "also do X"]))
        elif r < 0.8:
            b.add({"type": "last-prompt", "lastPrompt": "x"}, chained=False)
        elif r < 0.85:
            b.tool("Read", {"file_path": "/w/big.py"}, "r" * rng.choice([50, 2100, 5000]), level=level)
        elif r < 0.88:
            b.tool("Write", {"file_path": "/w/y"}, "", kind="disallowed", level=level)
        else:
            b.say("thinking aloud " * rng.randint(1, 5), level)
    if rng.random() < 0.3:
        b.tool("Bash", {"command": "make"}, "", answered=False, level=level)
    return b.entries


def sized_transcript(n: int) -> list[dict]:
    """Exactly ``n`` entries, made of consecutive random transcripts (for benchmarks)."""
    out, seed = [], 0
    while len(out) < n:
        out.extend(random_transcript(seed, size=200))
        seed += 1
    return out[:n]


def replayed_fixtures(n: int) -> list[dict]:
    """Exactly ``n`` entries of real CLI transcripts (tests/fixtures/*.json) replayed end to end, with
    uuids and tool ids renamed per round and each round chained to the previous one: the shape of a
    long real session (attachments, bookkeeping rows, a few errors and denials), for benchmarks."""
    import json
    import os
    import re
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    names = sorted(f for f in os.listdir(here) if f.endswith(".json"))
    raw = []
    for name in names:
        with open(os.path.join(here, name), encoding="utf-8") as fh:
            raw.append(fh.read())
    ident = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|toolu_[0-9A-Za-z]+")
    out: list[dict] = []
    last_uuid = None
    round_no = 0
    while len(out) < n:
        text = raw[round_no % len(raw)]
        text = ident.sub(lambda m, r=round_no: str(_uuid.uuid5(_uuid.NAMESPACE_OID, f"{r}:{m.group(0)}"))
                         if not m.group(0).startswith("toolu_") else f"{m.group(0)}r{r}", text)
        entries = json.loads(text)
        for entry in entries:
            if "parentUuid" in entry and entry.get("parentUuid") is None and entry.get("type") == "user":
                entry["parentUuid"] = last_uuid
        chained = [e for e in entries if isinstance(e.get("uuid"), str)]
        if chained:
            last_uuid = chained[-1]["uuid"]
        out.extend(entries)
        round_no += 1
    return out[:n]


_ANCHOR_READS = [
    "grep -n {w} src/{m}.py", "sed -n '{a},{b}p' src/{m}.py", "cat src/{m}.py | head -{a}", "ls -la build/{m}",
    "git log --oneline -{a} -- src/{m}.py", "git diff HEAD~{a} -- src/{m}.py", "rg -n '{w}' src/ | wc -l",
    "find . -name '{m}*.py' -newer build/{m}", "wc -l src/{m}.py tests/test_{m}.py", "head -{a} logs/run-{a}.log",
    "git show HEAD~{a}:src/{m}.py|grep {w}", "tail -n {a} logs/{m}.log", "diff src/{m}.py src/{m}_old.py",
    'grep -rn "{w} = " src/ --include=*.py', "stat -c %s build/{m}.o", "jq '.{w}' data/{m}.json",
]
_ANCHOR_WRITES = [
    "python3 -m pytest tests/test_{m}.py -k {w} -x -q", "cd build && make -j2 {m}", "sed -i 's/{w}/{w}2/' src/{m}.py",
    "git add src/{m}.py && git commit -m 'fix {w}'", "echo {a} > build/{m}.stamp", "npm run build -- --only {m}",
    "FOO={a} ./run.sh {m}", "mkdir -p out/{m} && cp src/{m}.py out/{m}/", "rm -f build/{m}.o # stale",
    "python3 tools/gen.py --seed {a} > data/{m}.json", "cargo test {w} 2>&1 | tail -{a}",
]


def anchor_transcript(n: int, seed: int = 11) -> list[dict]:
    """Exactly ``n`` entries shaped like a long real agent run on a big repo: thousands of distinct Bash
    commands (reads and writes, quotes, pipes, redirections, comments, ``VAR=``), short and long outputs,
    API errors with retries and ``user-rejected`` denials (for benchmarks: a cold command cache)."""
    rng = random.Random(seed)
    b = Builder(rng, sid="s-anchor")
    b.prompt("make the test suite pass")
    level = 1000
    words = ["parse", "load", "store", "retry", "cache", "index", "token", "flush", "merge", "route"]
    while len(b.entries) < n:
        level += rng.randint(10, 300)
        i = len(b.entries)
        fill = {"w": f"{rng.choice(words)}_{i % 977}", "m": f"mod{i % 1499}", "a": i % 311 + 1, "b": i % 311 + 40}
        r = rng.random()
        if r < 0.45:
            cmd = rng.choice(_ANCHOR_READS).format(**fill)
            b.tool("Bash", {"command": cmd}, "line of output\n" * rng.choice([1, 8, 40, 400]), level=level)
        elif r < 0.65:
            cmd = rng.choice(_ANCHOR_WRITES).format(**fill)
            b.tool("Bash", {"command": cmd}, "ok\n" * rng.choice([1, 30, 900]), level=level)
        elif r < 0.72:
            b.tool("Bash", {"command": rng.choice(_ANCHOR_WRITES).format(**fill)}, "", kind="denial", level=level)
        elif r < 0.77:
            b.api_error(rng.randint(0, 4))
        elif r < 0.87:
            b.tool("Read", {"file_path": f"/w/src/{fill['m']}.py"}, "code\n" * rng.choice([20, 300, 1500]), level=level)
        elif r < 0.90:
            b.tool("Edit", {"file_path": f"/w/src/{fill['m']}.py", "old_string": "a", "new_string": "b"}, "ok",
                   level=level)
        elif r < 0.96:
            b.say("looking at " + fill["m"] + " " * rng.randint(0, 40), level)
        else:
            b.prompt("continue")
    return b.entries[:n]


def hostile_entry(rng, i: int) -> dict:
    """A store row of a wrong shape: uuids, parents, ids and contents of every type JSON has."""
    pick = rng.choice
    entry = {"type": pick(["user", "assistant", "system", 5, None]),
             "uuid": pick([f"u{i}", f"u{i}", f"u{max(0, i - 1)}", 7, None, ["l"], {"d": 1}]),
             "parentUuid": pick([f"u{i - 1}", ["x"], {"a": 1}, None, "gone", 4])}
    if entry["type"] == "assistant":
        blocks = [{"type": "tool_use", "id": pick([f"t{i}", 5, None, [2]]), "name": pick(["Bash", "Read", 3]),
                   "input": pick([{"command": "ls"}, "ls", {"command": 3}, None, [1]])}, "junk",
                  {"type": "text", "text": 5}]
        entry["message"] = pick([{"role": "assistant", "id": pick(["m1", ["m"], None]),
                                  "content": pick([blocks, "str", None])}, "m", None])
    elif entry["type"] == "user":
        result = {"type": "tool_result", "tool_use_id": pick([f"t{i - 1}", [1]]), "is_error": pick([True, False]),
                  "content": pick(["x" * pick([1, 30000]), [{"type": "text", "text": "y"}], [3], None])}
        entry["message"] = {"role": "user", "content": pick([[result], "text", None, [None, 3]])}
        if rng.random() < 0.2:
            entry["toolUseResult"] = pick(["User rejected tool use", {"a": [1]}, 3])
    else:
        entry["isApiErrorMessage"] = pick([True, "yes"])
        entry["message"] = {"content": "API Error"}
    return entry


def odd_entry(rng, i: int, sid: str) -> dict:
    """A user or assistant entry with a unique uuid whose content is of every shape the API and the CLI
    allow, and some they do not: text that is not a string, thinking, images, results as lists of
    blocks, tool uses with bad ids or in a user entry, typeless blocks, bare strings and numbers."""
    pick = rng.choice

    def block() -> object:
        return pick([
            {"type": "text", "text": pick(["hi", 5, None, ["x"], "y" * 3000])},
            {"type": "thinking", "thinking": pick(["deep " * 50, 3, None])},
            {"type": "image", "source": {"type": "base64", "data": "A" * 5000}},
            {"type": "tool_use", "id": pick([f"odd{sid}-{i}", "", None, 7]), "name": pick(["Bash", "Read"]),
             "input": pick([{"command": "ls"}, None, [1, "é"]])},
            {"type": "tool_result", "tool_use_id": pick([f"odd{sid}-{i}", f"toolu_x{i}", None]), "is_error": pick([True, False]),
             "content": pick(["r" * pick([10, 2500]), [{"type": "text", "text": "t" * pick([10, 3000])}],
                              [{"type": "text", "text": "a"}, {"type": "image"}], ["raw", 3], None, 5])},
            {"type": "redacted_thinking", "data": "zz"}, {"content": "typeless " * 10}, "junk", 4,
        ])
    kind = pick(["user", "assistant"])
    content = pick([[block() for _ in range(rng.randint(0, 3))], "plain text " * rng.randint(0, 30), None, 5])
    entry = {"type": kind, "uuid": f"odd-{sid}-{i}", "parentUuid": None, "message": {"role": kind, "content": content}}
    if kind == "assistant":
        entry["message"].update(model="claude-opus-5-5", id=f"msg_odd{i}")
    return entry


def with_odd_entries(rng, entries: list[dict], sid: str, n: int) -> list[dict]:
    """``entries`` with ``n`` odd entries (see :func:`odd_entry`) put in at random, each chained after
    the entry before it (or, one in ten, with a parent that cannot be hashed); one in four times a
    tool use of the entries is used again by a copy of its entry."""
    out = list(entries)
    for k in range(n):
        at = rng.randint(0, len(out))
        entry = odd_entry(rng, k, sid)
        if rng.random() < 0.1:
            entry["parentUuid"] = ["not", "hashable"]
        elif at and isinstance(out[at - 1].get("uuid"), str):
            entry["parentUuid"] = out[at - 1]["uuid"]
        out.insert(at, entry)
    calls = [e for e in out if e.get("type") == "assistant" and "tool_use" in str(e.get("message"))]
    if calls and rng.random() < 0.25:
        again = dict(rng.choice(calls), uuid=f"again-{sid}")
        out.insert(rng.randint(0, len(out)), again)
    return out


def session_with_big_results(seed: int, big: int, sid: str = "s1") -> list[dict]:
    """A short transcript with ``big`` Bash results of 3,000-6,000 chars (too long to expire as glances)."""
    rng = random.Random(seed)
    b = Builder(rng, sid)
    b.prompt("go")
    for i in range(big):
        b.tool("Bash", {"command": f"python3 gen.py {i}"}, f"{seed}-{i} " + "y" * rng.randint(3000, 6000))
        if rng.random() < 0.5:
            b.tool("Bash", {"command": "git status"}, "clean")
        if rng.random() < 0.2:
            b.say("on it", 1000 + i)
    b.say("done", 9000)
    return b.entries


def big_session(n: int, size: int) -> list[dict]:
    """``n`` Bash results of ``size`` chars each, after one prompt."""
    b = Builder(random.Random(3))
    b.prompt("read everything")
    for i in range(n):
        b.tool("Bash", {"command": f"python3 gen.py {i}"}, f"{i:05d}" + "y" * size)
    return b.entries


def with_logs(entries: list[dict], seed: int, share: float = 0.1, lines: int = 300) -> list[dict]:
    """``entries`` with about ``share`` of their successful results made test logs of ``lines`` lines
    (and their toolUseResult copies), as bench/wake.py's. Changes ``entries`` in place."""
    rng = random.Random(seed)
    for e in entries:
        content = e.get("message", {}).get("content") if isinstance(e.get("message"), dict) else None
        if e.get("type") == "user" and isinstance(content, list) and content and \
                content[0].get("type") == "tool_result" and not content[0].get("is_error") and rng.random() < share:
            content[0]["content"] = text = "".join(f"{i} test_{rng.randint(0, 99)} PASSED\n" for i in range(lines))
            e["toolUseResult"] = {"stdout": text}
    return entries
