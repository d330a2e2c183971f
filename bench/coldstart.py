"""Cold start: `python flower.py --help` and `python flower.py status` against `python -c pass`
(same interpreter, same site), medians of 15 runs. For scale: `import claude_agent_sdk` if installed."""

import importlib.util
import os
import subprocess
import sys
import tempfile

from common import ROOT, compare, median_time, report

FLOWER = os.path.join(ROOT, "flower.py")


def run(args, cwd, env=None):
    subprocess.run([sys.executable, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env=env)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bare = lambda: run(["-c", "pass"], tmp)  # noqa: E731
        report("python flower.py --help", *compare(lambda: run([FLOWER, "--help"], tmp), bare, 15), goal=1.5)
        report("python flower.py status", *compare(lambda: run([FLOWER, "status"], tmp), bare, 15), goal=1.5)
        base = median_time(bare, 15)
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        imported = ["-c", f"import sys; sys.path.insert(0, {ROOT!r}); import flower; sys.argv = ['flower', '--help']; "
                          "flower.main()"]
        run(imported, tmp, cached)  # writes the bytecode cache once
        report("flower --help as an imported module (bytecode cached)",
               median_time(lambda: run(imported, tmp, cached), 15), base)
        source = open(FLOWER, encoding="utf-8").read()
        report("  of which: compiling flower.py (in process)",
               median_time(lambda: compile(source, FLOWER, "exec"), 15), base)
        if importlib.util.find_spec("claude_agent_sdk"):
            report("python -c 'import claude_agent_sdk' (for scale)",
                   median_time(lambda: run(["-c", "import claude_agent_sdk"], tmp), 5), base)


if __name__ == "__main__":
    main()
