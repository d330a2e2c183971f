"""Shared helpers for the benchmarks: medians of repeated timings, ratios, a printed table."""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


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


def compare(fn: Callable[[], object], baseline: Callable[[], object], repeat: int = 9) -> tuple[float, float]:
    """Medians of ``fn`` and ``baseline``, run alternately so that drift on a noisy machine hits both."""
    ours, base = [], []
    for _ in range(repeat):
        for target, samples in ((fn, ours), (baseline, base)):
            start = time.perf_counter()
            target()
            samples.append(time.perf_counter() - start)
    return statistics.median(ours), statistics.median(base)


def report(name: str, value: float, baseline: float, goal: float | None = None, unit: str = "s") -> None:
    """One line: the figure, its baseline, the ratio, and whether it meets the goal."""
    ratio = value / baseline if baseline else float("inf")
    verdict = "" if goal is None else ("  ok" if ratio <= goal else f"  ABOVE GOAL {goal}x")
    print(f"{name:<52} {value * 1000:9.2f} ms  baseline {baseline * 1000:9.2f} ms  ratio {ratio:5.2f}x{verdict}")
