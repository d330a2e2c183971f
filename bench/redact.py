"""redact() throughput (issue 44): MB/s of this redact() and of the base branch's redact() (main, loaded
from ``git show <base>:flower.py`` into a module of its own) on the same texts, alternately in one run:

    no secret     a build/test log, a JSON API dump, source files (tests/secret_shapes.py builds them)
    stdlib        every .py file of the running Python's standard library, one text a file
    mix           CLI transcript lines with tool outputs, one secret per 10 KB

Goals: >= 5x the base on the no-secret texts, >= 3x on the mix, never below 1/1.5 of the base.
``python bench/redact.py [--base REF]`` (REF defaults to ``main``); BENCH_QUICK=1 uses smaller texts."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

from common import QUICK, ROOT, paired
import flower
from tests.secret_shapes import api_dump, build_log, source_files, transcript_mix


def load_base(ref: str):
    """flower.py as it is at ``ref``, imported as a separate module."""
    source = subprocess.run(["git", "-C", ROOT, "show", f"{ref}:flower.py"], capture_output=True, check=True).stdout
    folder = tempfile.mkdtemp(prefix="flower-bench-base-")
    path = os.path.join(folder, "flower_base.py")
    with open(path, "wb") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location("flower_base", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["flower_base"] = module
    spec.loader.exec_module(module)
    return module


def stdlib_texts(limit: int | None = None) -> list[str]:
    """The standard library's .py files in a stable order (site-packages left out)."""
    root = sysconfig.get_paths()["stdlib"]
    texts, total = [], 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "__pycache__"))
        for name in sorted(files):
            if name.endswith(".py"):
                try:
                    with open(os.path.join(folder, name), encoding="utf-8") as fh:
                        texts.append(fh.read())
                except (OSError, UnicodeDecodeError):
                    continue
                total += len(texts[-1])
                if limit and total >= limit:
                    return texts
    return texts


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="main")
    args = parser.parse_args()
    base = load_base(args.base)
    size = 1_000_000 if QUICK else 4_000_000
    corpora = [
        ("no secret: build/test log", [build_log(size)], 5.0),
        ("no secret: JSON API dump", [api_dump(size)], 5.0),
        ("no secret: source files", source_files(size // 2), 5.0),
        ("stdlib .py files", stdlib_texts(3_000_000 if QUICK else None), 1 / 1.5),
        ("mix: transcript, 1 secret / 10 KB", [transcript_mix(size)], 3.0),
    ]
    env = flower._env_secrets()
    failed = []
    print(f"redact() vs {args.base}'s redact(), CPU time, median of paired runs")
    for name, texts, goal in corpora:
        mb = sum(len(t) for t in texts) / 1e6
        ours = lambda: [flower.redact(t, env) for t in texts]         # noqa: E731
        theirs = lambda: [base.redact(t, env) for t in texts]         # noqa: E731
        reps = 3 if QUICK or mb > 10 else 5
        t_ours, t_base, ratio = paired(ours, theirs, reps, clock=time.process_time)
        speedup = 1 / ratio
        verdict = "ok" if speedup >= goal else f"BELOW GOAL {goal:.2f}x"
        print(f"{name:<36} {mb:6.1f} MB  new {mb / t_ours:7.1f} MB/s  {args.base} {mb / t_base:6.1f} MB/s  "
              f"speedup {speedup:5.2f}x  (goal >= {goal:.2f}x) {verdict}", flush=True)
        if speedup < goal:
            failed.append(name)
    if failed:
        print("below goal: " + ", ".join(failed))


if __name__ == "__main__":
    main()
