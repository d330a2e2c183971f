"""Shared helpers for the benchmarks: medians of repeated timings, ratios, a printed table.

Fairness rules (issue 16): both sides of a comparison run alternately in the same process, with the
same setup outside the timing; when one side pauses the cyclic GC, so does the floor, and both pay the
deferred collection inside their timing (``fn(); gc.collect()``)."""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

QUICK = os.environ.get("BENCH_QUICK") == "1"   # fewer repetitions and sizes while developing


def median_time(fn: Callable[[], object], repeat: int = 7, setup: Callable[[], object] | None = None) -> float:
    """Median wall time of ``fn()`` over ``repeat`` runs (``setup()`` before each, not timed)."""
    samples = []
    for _ in range(repeat):
        if setup:
            setup()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def compare(fn: Callable[[], object], baseline: Callable[[], object], repeat: int = 9, *,
            setup: Callable[[], object] | None = None, collect: bool = False) -> tuple[float, float]:
    """Medians of ``fn`` and ``baseline``, run alternately so that drift on a noisy machine hits both.
    ``setup()`` runs untimed before every ``fn`` (e.g. clearing a cache); with ``collect`` each timing
    includes a ``gc.collect()`` right after the call (the collection a GC pause defers), for both."""
    ours, base = [], []
    for _ in range(repeat):
        for target, samples in ((fn, ours), (baseline, base)):
            if setup and target is fn:
                setup()
            gc.collect()
            start = time.perf_counter()
            result = target()
            if collect:
                gc.collect()
            samples.append(time.perf_counter() - start)
            del result
    return statistics.median(ours), statistics.median(base)


def report(name: str, value: float, baseline: float, goal: float | None = None, unit: str = "s",
           width: int = 60) -> float:
    """One line: the figure, its baseline, the ratio, and whether it meets the goal."""
    ratio = value / baseline if baseline else float("inf")
    verdict = "" if goal is None else ("  ok" if ratio <= goal else f"  ABOVE GOAL {goal}x")
    print(f"{name:<{width}} {value * 1000:9.2f} ms  baseline {baseline * 1000:9.2f} ms  ratio {ratio:5.2f}x{verdict}",
          flush=True)
    return ratio
