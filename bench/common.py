"""Shared helpers for the benchmarks: medians of repeated timings, ratios, a printed table.

Fairness rules (issue 16): both sides of a comparison run alternately in the same process, with the
same setup outside the timing; when one side pauses the cyclic GC, so does the floor, and both pay the
deferred collection inside their timing (``fn(); gc.collect()``). In-process work is timed in CPU time
(``time.process_time``: user + system, which a noisy neighbour on the VM does not inflate) and judged on
the median of the ratios of runs made side by side."""

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
            setup: Callable[[], object] | None = None, collect: bool = False,
            clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """Medians of ``fn`` and ``baseline``, run alternately so that drift on a noisy machine hits both.
    ``setup()`` runs untimed before every ``fn`` (e.g. clearing a cache); with ``collect`` each timing
    includes a ``gc.collect()`` right after the call (the collection a GC pause defers), for both.
    ``clock``: wall time by default; ``time.process_time`` for work done in this process alone."""
    return paired(fn, baseline, repeat, setup=setup, collect=collect, clock=clock)[:2]


def paired(fn: Callable[[], object], baseline: Callable[[], object], repeat: int = 9, *,
           setup: Callable[[], object] | None = None, collect: bool = False,
           clock: Callable[[], float] = time.perf_counter) -> tuple[float, float, float]:
    """:func:`compare`, plus the median of the ratios of each pair of runs made side by side: on a VM
    whose speed drifts by 20% within a minute, the steadier estimate of the ratio (both are printed)."""
    ours, base = [], []
    _alternate(fn, baseline, repeat, setup, collect, clock, ours, base)
    if collect:   # what the bench process already holds is not a collection either side defers
        idle = _idle_collection(clock)
        ours, base = [t - idle for t in ours], [t - idle for t in base]
    ratios = [a / b for a, b in zip(ours, base) if b]
    return statistics.median(ours), statistics.median(base), statistics.median(ratios) if ratios else float("inf")


def _idle_collection(clock: Callable[[], float]) -> float:
    """The median time of a full collection that finds nothing new: the walk over the bench's own heap
    (its imports, its transcripts), which the timings with ``collect`` subtract. (``gc.freeze`` would
    hide that heap too, but flower's GC pause then takes the slow way that respects a frozen heap.)"""
    samples = []
    for _ in range(7):
        gc.collect()
        start = clock()
        gc.collect()
        samples.append(clock() - start)
    return statistics.median(samples)


def _alternate(fn, baseline, repeat, setup, collect, clock, ours, base) -> None:
    for _ in range(repeat):
        for target, samples in ((fn, ours), (baseline, base)):
            if setup and target is fn:
                setup()
            gc.collect()
            start = clock()
            result = target()
            if collect:
                gc.collect()
            samples.append(clock() - start)
            del result


def report(name: str, value: float, baseline: float, pair: float | None = None, *, goal: float | None = None,
           width: int = 60) -> float:
    """One line: the figure, its baseline, the ratio (of the medians; and the median of the paired
    ratios, when given: the goal is judged on that one), and whether it meets the goal."""
    ratio = value / baseline if baseline else float("inf")
    judged = ratio if pair is None else pair
    verdict = "" if goal is None else ("  ok" if judged <= goal else f"  ABOVE GOAL {goal}x")
    both = "" if pair is None else f", paired {pair:5.2f}x"
    print(f"{name:<{width}} {value * 1000:9.2f} ms  baseline {baseline * 1000:9.2f} ms  ratio {ratio:5.2f}x{both}"
          f"{verdict}", flush=True)
    return judged
