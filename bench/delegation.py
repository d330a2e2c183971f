"""Delegation against a single worker (issue 39, "How it is measured"): one long fake job, the same
in both modes, through the real SDK and CLI against tests/fakeapi.py. A model-like responder makes
``--calls`` hands-on tool calls (default 200) with output sizes like real transcripts' (mostly small,
some of a few KB, a few of tens of KB). In single mode the main thread makes them all; in coordinator
mode it delegates them to workers, ten calls a worker. Each answer reports the request's real size as
its usage, so the water level, the handoffs and the input tokens are what the CLI really sent.

Printed per mode: the main thread's context at the end, at its peak and per turn, handoffs (flower's own
"done" events) per 100 tool calls, total input tokens sent (main thread and workers; a cost proxy) and
chars spilled at write time. The job runs twice per mode: at the default window (``--window``, 200K: the
context comparison) and at a small one (``--small-window``, 40K), where the same job fills a single
worker's window several times (the handoff comparison). Goals (ratios measured in the same run): the
coordinator's main-thread context at the end (the issue's measure) and at its peak <= 1/5 of the single
worker's, >= 3x fewer handoffs with the single worker handing off >= 6 times, total input tokens not
above the single worker's. Needs claude-agent-sdk.

    python bench/delegation.py [--calls N] [--window N] [--small-window N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import threading

from common import ROOT  # noqa: F401 (puts the repository on sys.path)
import flower
from tests import fakeapi
from tests.fakeapi import FakeAnthropic, Reply, text, tool, last_user_text

SIZES = [120, 300, 800, 2_000, 150, 6_000, 400, 1_200, 25_000, 250]   # chars of a call's output, cycled
WINDOW = 200_000
SMALL_WINDOW = 40_000   # the same job fills a single worker's window of this size several times
LEDGER = ("## Status\nworking through the calls\n## Decisions\nnone\n## Dead ends\n(none)\n"
          "## Next step\nRun `ls out` and continue with the next call\n## Pointers\n- out/")


def tokens(body: dict) -> int:
    return len(json.dumps(body, ensure_ascii=False)) // 4


class Job:
    """The responder: ``calls`` Bash calls in all, made by the main thread (single) or by workers of
    ten calls each (coordinator); a ledger for every handoff ritual."""

    def __init__(self, calls: int, delegate: bool):
        self.calls, self.delegate = calls, delegate
        self.made = 0
        self.worker_left = 0
        self.main_tokens: list[int] = []
        self.input_tokens = 0
        self.handoffs = 0
        self.lock = threading.Lock()

    def command(self) -> dict:
        size = SIZES[self.made % len(SIZES)]
        self.made += 1
        return {"command": f"python3 -c \"print(('r{self.made} ' + 'x' * 70 + chr(10)) * {max(1, size // 76)})\""}

    def __call__(self, body: dict) -> Reply:
        with self.lock:
            used = tokens(body)
            self.input_tokens += used
            usage = {"input_tokens": used}
            system = json.dumps(body.get("system", ""), ensure_ascii=False)
            asked = last_user_text(body)
            if flower.text("handoff_prompt")[:40] in asked or flower.text("handoff_fix")[:40] in asked:
                self.handoffs += 1
                return text(LEDGER, **usage)
            if flower.text("worker_instructions")[:30] in system:
                if self.worker_left > 0 and self.made < self.calls:
                    self.worker_left -= 1
                    return tool("Bash", self.command(), **usage)
                return text(f"Done: ran my calls, outputs in the workbench (r{self.made}).", **usage)
            self.main_tokens.append(used)
            if self.made >= self.calls:
                return text("all calls made", **usage)
            if self.delegate:
                self.worker_left = 10
                return tool("Agent", {"description": "ten calls", "prompt": "Run the next ten calls.",
                                      "subagent_type": "worker"}, **usage)
            return tool("Bash", self.command(), **usage)


def run_mode(calls: int, delegate: bool, window: int = WINDOW) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        ws = os.path.join(tmp, "ws")
        os.makedirs(ws)
        api = FakeAnthropic().start()
        saved = dict(os.environ)
        try:
            os.environ.update(fakeapi.cli_env(api, tmp))
            job = Job(calls, delegate)
            api.responder = job
            rt = flower.Runtime(workspace=ws, handoff=flower.HandoffPolicy(window=window))
            if delegate:
                spec = flower.coordinator(rt.paths, instructions="You do the work.")
            else:
                spec = flower.AgentSpec("work", instructions="You do the work.", preset=True,
                                        tools=flower.WORKER_TOOLS, allowed_tools=flower.WORKER_TOOLS)
            prompt = "Make the calls." + (flower.workbench_prompt(rt.paths) if delegate else "")
            done = []
            result = asyncio.run(rt.run(spec, prompt, on_event=lambda e: done.append(1) if e.kind == "handoff"
                                        and (e.data or {}).get("phase") == "done" else None))
            rt.close()
            spill = os.path.join(ws, ".flower", "spill")
            spilled = sum(os.path.getsize(os.path.join(spill, n)) for n in os.listdir(spill)) \
                if os.path.isdir(spill) else 0
        finally:
            os.environ.clear()
            os.environ.update(saved)
            api.stop()
    main = job.main_tokens or [0]
    return {"ok": result.ok, "calls": job.made, "context_end": main[-1], "peak": max(main),
            "mean": sum(main) // len(main),
            "handoffs": len(done), "rituals": job.handoffs, "per100": 100 * len(done) / max(1, job.made),
            "input_tokens": job.input_tokens, "spilled": spilled}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--window", type=int, default=WINDOW, help=f"the context window (default {WINDOW})")
    parser.add_argument("--small-window", type=int, default=SMALL_WINDOW,
                        help=f"the window of the handoff comparison (default {SMALL_WINDOW})")
    args = parser.parse_args()
    calls = args.calls
    rows = []
    for window in (args.window, args.small_window):
        rows.append((window, run_mode(calls, delegate=False, window=window), run_mode(calls, delegate=True, window=window)))
    for window, single, coord in rows:
        for name, r in (("single", single), ("coordinator", coord)):
            print(f"window {window:>7} {name:12} ok={r['ok']} calls={r['calls']} main-thread context: "
                  f"end={r['context_end']:>7} peak={r['peak']:>7} mean per turn={r['mean']:>7} tokens; "
                  f"handoffs={r['handoffs']} ({r['per100']:.2f}/100 calls) input tokens={r['input_tokens']:>9} "
                  f"spilled={r['spilled']} chars")
    (_, single, coord), (small, s_single, s_coord) = rows
    ratio = coord["peak"] / max(1, single["peak"])
    end = coord["context_end"] / max(1, single["context_end"])
    mean = coord["mean"] / max(1, single["mean"])
    cost = coord["input_tokens"] / max(1, single["input_tokens"])
    s_cost = s_coord["input_tokens"] / max(1, s_single["input_tokens"])
    fewer = s_single["handoffs"] / s_coord["handoffs"] if s_coord["handoffs"] else float("inf")
    print(f"window {args.window}: main-thread context at the end coordinator/single = {end:.3f} (the issue's "
          f"measure, goal <= 0.2)")
    print(f"window {args.window}: peak main-thread context coordinator/single = {ratio:.3f}, mean per turn "
          f"{mean:.3f} (goal <= 0.2; the end alone says little once the single worker has handed over); "
          f"input tokens coordinator/single = {cost:.2f} (goal <= 1)")
    print(f"window {small}: handoffs single {s_single['handoffs']} vs coordinator {s_coord['handoffs']}: "
          f"{fewer:.1f}x fewer (goal >= 3x, the single worker handing off >= 6 times); input tokens "
          f"coordinator/single = {s_cost:.2f} (goal <= 1)")


if __name__ == "__main__":
    main()
