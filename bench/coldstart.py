"""Cold start (issue 16), medians of interleaved runs in fresh interpreters, against floors measured in the
same run with the same interpreter:

- ``python flower.py --help`` and ``python flower.py status`` (in a used workspace: sessions, lineage,
  manifest) vs the single-file floor: the interpreter + compiling flower.py + ``import re, json``. A script
  is compiled on every run, so that is the least any single-file tool of this size can cost. Goal <= 1.2x.
- ``python -m flower --help`` with its bytecode cached (an import, as an installed console script runs it)
  vs a bare ``python -c pass``. Goal <= 3x.
- For scale: ``python -S -c pass`` (no site: what a venv's site imports cost) and ``len(sys.modules)`` after
  ``-c pass``, and which heavy modules the --help and status paths load (asyncio and the SDK must not)."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

from common import QUICK, ROOT, compare, median_time, report

FLOWER = os.path.join(ROOT, "flower.py")
HEAVY = ("asyncio", "claude_agent_sdk", "sqlite3", "socket", "hashlib", "uuid", "urllib.parse", "dataclasses",
         "inspect", "typing", "shlex", "difflib", "random", "threading", "datetime", "unicodedata")


def run(args, cwd, env=None):
    subprocess.run([sys.executable, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env=env)


def used_workspace(tmp):
    ws = os.path.join(tmp, "used")
    os.makedirs(ws)
    sys.path.insert(0, ROOT)
    import flower
    paths = flower.Paths(ws, None)
    paths.prepare()
    store = flower.SqliteSessionStore(paths.run("sessions.db"))
    from tests.transcripts import replayed_fixtures
    store.append_sync({"project_key": flower.project_key(ws), "session_id": "s-1"}, replayed_fixtures(500))
    store.close()
    lineage = flower.Lineage.open(paths.run_dir, paths.workspace)
    lineage.remember("work", "s-1")
    manifest = flower.Manifest(paths.run_dir, flower.run_id())
    for i in range(50):
        manifest.put({"step": f"s{i}", "started_at": str(i), "ok": True, "cost_usd": 0.01, "num_turns": 2})
    return ws


def modules_after(args, cwd):
    # not runpy.run_path: its pkgutil imports typing, which flower itself never does
    code = ("import sys; sys.argv = ['flower.py', *sys.argv[1:]]\n"
            "try:\n    exec(compile(open(%r, encoding='utf-8').read(), %r, 'exec'), {'__name__': '__main__'})\n"
            "except SystemExit:\n    pass\n"
            "import json; sys.__stdout__.write('\\n' + json.dumps(sorted(sys.modules)))" % (FLOWER, FLOWER))
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    reps = 9 if QUICK else 21
    with tempfile.TemporaryDirectory() as tmp:
        ws = used_workspace(tmp)
        floor = ["-c", f"compile(open({FLOWER!r}, encoding='utf-8').read(), {FLOWER!r}, 'exec'); import re, json"]
        report("python flower.py --help  vs interpreter+compile+re,json",
               *compare(lambda: run([FLOWER, "--help"], tmp), lambda: run(floor, tmp), reps), goal=1.2)
        report("python flower.py status (used workspace), same floor",
               *compare(lambda: run([FLOWER, "status"], ws), lambda: run(floor, ws), reps), goal=1.2)
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        cached["PYTHONPATH"] = ROOT
        run(["-m", "flower", "--help"], tmp, cached)  # writes the bytecode cache once
        bare = lambda: run(["-c", "pass"], tmp)  # noqa: E731
        report("python -m flower --help (bytecode cached) vs -c pass",
               *compare(lambda: run(["-m", "flower", "--help"], tmp, cached), bare, reps), goal=3.0)
        nosite = median_time(lambda: run(["-S", "-c", "pass"], tmp), reps)
        base = median_time(bare, reps)
        count = subprocess.run([sys.executable, "-c", "import sys; print(len(sys.modules))"], capture_output=True,
                               text=True).stdout.strip()
        print(f"    for scale: python -c pass {base * 1000:.1f} ms ({count} modules loaded), "
              f"python -S -c pass {nosite * 1000:.1f} ms")
        source = open(FLOWER, encoding="utf-8").read()
        print(f"    compiling flower.py in process: {median_time(lambda: compile(source, FLOWER, 'exec'), reps) * 1000:.1f} ms")
        site = set(json.loads(subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(list(sys.modules)))"],
                                             capture_output=True, text=True).stdout))
        for args, cwd in ((["--help"], tmp), (["status"], ws)):
            loaded = set(modules_after(args, cwd))
            heavy = [m for m in HEAVY if m in loaded - site]
            print(f"    flower {' '.join(args)}: {len(loaded)} modules ({len(loaded - site)} beyond -c pass); "
                  f"heavy ones beyond -c pass: {', '.join(heavy) or 'none'}")
            assert "asyncio" not in loaded and "claude_agent_sdk" not in loaded, args
        if importlib.util.find_spec("claude_agent_sdk"):
            report("python -c 'import claude_agent_sdk' (for scale)",
                   median_time(lambda: run(["-c", "import claude_agent_sdk"], tmp), 5), base)


if __name__ == "__main__":
    main()
