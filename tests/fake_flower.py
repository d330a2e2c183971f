"""Run flower's CLI with the fake SDK, for subprocess and pty tests that must not need the real one.

    python -m tests.fake_flower [flower args...]

The fake model answers by role (from the system prompt). Environment knobs:
    FAKE_WORK_BLOCK=1   the first work turn blocks until interrupted (for Ctrl-C tests)
    FAKE_CLARIFY_BLOCK=1  the first clarify turn blocks (for kill tests)
    FAKE_JUDGE=...      the judge's reply (default "VERDICT: achieved")
    FAKE_LOG=path       append one JSON line per model call: role, prompt, resume, tools, permission mode
    FAKE_TEXT=...       the work agent's reply (default "worked"; may hold escape sequences)
    FAKE_STATUS=401     every call ends in an API error with this HTTP status (e.g. rejected credentials)
    FAKE_COST=0.0013    cost of each model call in USD (default 0.01)
    FAKE_SDK_LOG=1      every call logs an error through the SDK's logger, as the real SDK does
"""

from __future__ import annotations

import json
import logging
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# the fake model talks to no network, so flower's pre-flight probe has nothing to find
os.environ.setdefault("FLOWER_NO_PROBE", "1")

from tests import fakesdk  # noqa: E402
from tests.fakesdk import FAKE, agent_role  # noqa: E402

BRIEF = ("## Goal\nmd2html script\n## Acceptance\nprints html\n## Bounds\nstdlib only\n"
         "## Unknowns and assumptions\nassumed UTF-8 input")
GOAL = "# Goal\nmd2html works\n\n# Checks\n- `python md2html.py t.md` prints <h1>"
state = {"blocked": False}


def brain(prompt, options, loaded):
    system = options.system_prompt if isinstance(options.system_prompt, str) else \
        (options.system_prompt or {}).get("append", "")
    if agent_role(system) == "clarify":
        role, actions = "clarify", [("text", BRIEF, 1000)]
        if os.environ.get("FAKE_CLARIFY_BLOCK") and not state.get("clarify_blocked"):
            state["clarify_blocked"] = True
            actions = [("block", "never")]
    elif agent_role(system) == "goal":
        role, actions = "goal", [("text", GOAL, 1000)]
    elif agent_role(system) == "judge":
        role, actions = "judge", [("text", os.environ.get("FAKE_JUDGE", "VERDICT: achieved"), 1000)]
    else:
        role, actions = "work", [("text", os.environ.get("FAKE_TEXT", "worked"), 1000)]
        if os.environ.get("FAKE_WORK_BLOCK") and not state["blocked"]:
            state["blocked"] = True
            actions = [("tool", "Bash", {"command": "make"}, "built", 1000), ("block", "never")]
    if os.environ.get("FAKE_STATUS"):
        status = int(os.environ["FAKE_STATUS"])
        actions = [("error", f"Failed to authenticate. API Error: {status} invalid x-api-key", status, "api_error")]
    if os.environ.get("FAKE_SDK_LOG"):
        logging.getLogger("claude_agent_sdk._internal.query").error("Fatal error in message reader: fake")
    if os.environ.get("FAKE_LOG"):
        with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"role": role, "prompt": prompt, "resume": options.resume,
                                 "session_id": options.session_id, "tools": options.allowed_tools,
                                 "permission_mode": options.permission_mode}) + "\n")
    return actions


def main() -> int:
    fakesdk.install()
    FAKE.turns = [brain] * 200
    if os.environ.get("FAKE_COST"):
        FAKE.cost_per_call = float(os.environ["FAKE_COST"])
    import flower
    return flower.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
