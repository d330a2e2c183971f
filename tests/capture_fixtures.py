"""Capture real CLI transcripts as fixtures for tests/test_transcript.py.

Needs claude-agent-sdk. Runs the real bundled CLI against tests/fakeapi.py on 127.0.0.1 and writes
what the SDK mirrored to the session store into tests/fixtures/<name>.json:

    python -m tests.capture_fixtures

network_error  a tool round, then every request dropped (CLI retries, system/api_error, synthetic)
denials        five Write calls refused in default permission mode, then a text answer
interrupt      a Bash call interrupted with ClaudeSDKClient.interrupt() while it runs
killed         the Python process SIGKILLed mid-tool (eager flush), then resumed once
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import flower  # noqa: E402
from tests import fakeapi  # noqa: E402


def _entries(db: str) -> list[dict]:
    store = flower.SqliteSessionStore(db)
    rows = store.sessions()
    if not rows:
        store.close()
        return []
    out = store.load_sync({"project_key": rows[0]["project_key"], "session_id": rows[0]["session_id"]}) or []
    store.close()
    return out


async def _session(sdk, options, prompts, *, interrupt_on_tool=False):
    async with sdk.ClaudeSDKClient(options) as client:
        for prompt in prompts:
            await client.query(prompt)
            async for msg in client.receive_response():
                if interrupt_on_tool and type(msg).__name__ == "AssistantMessage" and any(
                        type(b).__name__ == "ToolUseBlock" for b in msg.content):
                    await asyncio.sleep(1.5)
                    await client.interrupt()


def capture(name: str, tmp: str, api: fakeapi.FakeAnthropic) -> list[dict]:
    import claude_agent_sdk as sdk
    ws = os.path.join(tmp, name)
    os.makedirs(ws, exist_ok=True)
    db = os.path.join(tmp, name + ".db")
    store = flower.SqliteSessionStore(db)
    common = dict(cwd=ws, session_store=store, session_store_flush="eager", setting_sources=[],
                  env={"CLAUDE_CODE_MAX_RETRIES": "2", "DISABLE_AUTO_COMPACT": "1"})
    if name == "network_error":
        api.script = [fakeapi.tool("Bash", {"command": "echo hi"}), *[fakeapi.Reply(drop=True)] * 20]
        options = sdk.ClaudeAgentOptions(allowed_tools=["Bash"], **common)
        asyncio.run(_session(sdk, options, ["run it"]))
    elif name == "denials":
        path = os.path.join(ws, "x.txt")
        api.script = [fakeapi.tool("Write", {"file_path": path, "content": f"v{i}"}) for i in range(5)] + \
                     [fakeapi.text("I was not allowed to write.")]
        options = sdk.ClaudeAgentOptions(permission_mode="default", **common)
        asyncio.run(_session(sdk, options, ["write x.txt"]))
    elif name == "interrupt":
        api.script = [fakeapi.tool("Bash", {"command": "python3 -c \"import time; time.sleep(30)\""}),
                      fakeapi.text("ok")]
        options = sdk.ClaudeAgentOptions(allowed_tools=["Bash"], **common)
        asyncio.run(_session(sdk, options, ["run the slow thing"], interrupt_on_tool=True))
    elif name == "killed":
        store.close()
        api.script = [fakeapi.tool("Bash", {"command": "python3 -c \"import time; time.sleep(20)\""}),
                      fakeapi.text("resumed fine")]
        child = subprocess.Popen([sys.executable, __file__, "--child", ws, db], env=os.environ.copy())
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(0.3)
            if os.path.exists(db) and any(b.get("type") == "tool_use" for e in _entries(db)
                                          for b in flower.blocks_of(e) if isinstance(b, dict)):
                break
        time.sleep(0.5)
        child.send_signal(signal.SIGKILL)
        child.wait()
        store = flower.SqliteSessionStore(db)
        sid = store.sessions()[0]["session_id"]
        options = sdk.ClaudeAgentOptions(resume=sid, allowed_tools=["Bash"], cwd=ws, session_store=store,
                                         session_store_flush="eager", setting_sources=[])
        asyncio.run(_session(sdk, options, ["continue"]))
    store.close()
    return _entries(db)


def child(ws: str, db: str) -> None:
    import claude_agent_sdk as sdk
    store = flower.SqliteSessionStore(db)
    options = sdk.ClaudeAgentOptions(cwd=ws, session_store=store, session_store_flush="eager", setting_sources=[],
                                     allowed_tools=["Bash"])
    asyncio.run(_session(sdk, options, ["run the slow thing"]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    names = sys.argv[1:] or ["network_error", "denials", "interrupt", "killed"]
    with tempfile.TemporaryDirectory() as tmp, fakeapi.FakeAnthropic() as api:
        os.environ.update(fakeapi.cli_env(api, tmp))
        os.environ.pop("IS_SANDBOX", None)
        for name in names:
            entries = capture(name, tmp, api)
            path = os.path.join(HERE, "fixtures", name + ".json")
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(entries, fh, indent=1, ensure_ascii=False)
            print(f"{name}: {len(entries)} entries -> {path}")


if __name__ == "__main__":
    main()
