"""README.md cannot drift from the program: every fenced example is either run here (shell examples
against the fake API in tests/fakeapi.py, Python examples exec'd) or listed below with the reason it
cannot run offline. A new block that is neither makes this test fail. Also: fences are balanced and no
example text renders as a heading of the README."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unittest

from tests import fakeapi
from tests.fakeapi import FakeAnthropic, text
from tests.helpers import RUN_FLOWER, HAVE_SDK, ROOT, Roles, SKIP

README = os.path.join(ROOT, "README.md")
FENCE = re.compile(r"^(\s*)```(.*)$")

# Blocks, by their first line, that are not run, and why.
NOT_RUN = {
    "jobs:": "a GitHub Actions workflow: it needs a runner, secrets and a PostgreSQL server",
    "<workspace>/.flower/": "a listing of files, not a command (test_tour checks the files exist)",
    "...": "an excerpt of a run's output (test_tour compares it with a real run's output)",
    "make test": "runs this very suite (and the benchmarks): the tests cannot run themselves",
}
# Shell lines (by prefix) that are not run inside a block that is otherwise run, and why.
LINES_NOT_RUN = {
    "python3 -m venv": "creates a venv: the test already runs in one",
    "pip install": "needs the package index (network)",
    "make test": "runs this very suite",
    "# ...": "a comment standing for a kill, which tests/test_e2e.py does for real",
    "python3 flower.py --state postgresql://": "needs a PostgreSQL server at db.example.com "
                                               "(tests/test_e2e_postgres.py runs --state against a real one)",
    "FLOWER_STATE=postgresql://": "needs a PostgreSQL server (see the line above)",
}
# Headings that are flower's note sections: outside a fence they would render as the README's own.
NOTE_HEADINGS = {"goal", "acceptance", "bounds", "unknowns and assumptions", "checks", "status",
                 "decisions", "dead ends", "next step", "pointers"}


def blocks(markdown: str) -> list[tuple[str, list[str]]]:
    """The fenced blocks of ``markdown`` as (info string, lines); raises on an unclosed fence."""
    found, current, info = [], None, ""
    for number, line in enumerate(markdown.splitlines(), 1):
        match = FENCE.match(line)
        if current is None and match:
            current, info = [], match.group(2).strip()
        elif current is not None and match and not match.group(2).strip():
            found.append((info, current))
            current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        raise AssertionError(f"README.md: a fence opened ({info!r}) is never closed")
    return found


def outside_fences(markdown: str) -> list[str]:
    lines, inside = [], False
    for line in markdown.splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            lines.append(line)
    return lines


def command_of(line: str) -> str:
    """A shell line without its trailing comment (two spaces or more, then ``#``)."""
    return re.split(r"\s{2,}#", line, maxsplit=1)[0].strip()


def read_readme() -> str:
    with open(README, encoding="utf-8") as fh:
        return fh.read()


def first_line(lines: list[str]) -> str:
    return next((line.strip() for line in lines if line.strip()), "")


def classify_block(info: str, lines: list[str]) -> str:
    """``python``, ``shell`` (each line run or listed), or a NOT_RUN key; ``""`` for an unlisted block."""
    head = first_line(lines)
    for key in NOT_RUN:
        if head.startswith(key):
            return key
    if info == "python":
        return "python"
    if info in ("", "sh", "bash", "shell", "console") and all(
            command_of(line) == "" or command_of(line).startswith("python3 flower.py")
            or any(line.strip().startswith(p) for p in LINES_NOT_RUN) for line in lines):
        return "shell"
    return ""


def shell_lines(lines: list[str]) -> list[str]:
    """The ``python3 flower.py`` lines of a shell block that are run (the others are listed)."""
    return [command_of(line) for line in lines
            if command_of(line).startswith("python3 flower.py")
            and not any(line.strip().startswith(p) for p in LINES_NOT_RUN)]


class Rendering(unittest.TestCase):
    def test_fences_balanced_and_every_block_run_or_listed(self):
        found = blocks(read_readme())
        self.assertGreater(len(found), 5)
        unlisted = [first_line(lines) for info, lines in found if not classify_block(info, lines)]
        self.assertEqual(unlisted, [], "README blocks neither run by tests/test_readme.py nor listed in "
                                       "its NOT_RUN/LINES_NOT_RUN with a reason")
        used = {classify_block(info, lines) for info, lines in found}
        self.assertEqual(set(NOT_RUN) - used, set(), "NOT_RUN lists blocks the README no longer has")

    def test_no_example_text_renders_as_a_heading(self):
        for line in outside_fences(read_readme()):
            match = re.match(r"#{1,6}\s+(.*)", line)
            if match:
                self.assertNotIn(match.group(1).strip().lower(), NOTE_HEADINGS,
                                 f"{line!r} renders as a README heading: fence the example")
        self.assertFalse(any(line.startswith("    ") and line.strip().startswith(("python3 ", "pip "))
                             for line in outside_fences(read_readme())), "an unfenced (indented) command")

    def test_an_unlisted_block_fails(self):
        self.assertEqual(classify_block("sh", ["rm -rf build"]), "")
        self.assertEqual(classify_block("yaml", ["steps:"]), "")
        self.assertEqual(classify_block("sh", ["python3 flower.py status", "pip install x"]), "shell")
        self.assertRaises(AssertionError, blocks, "a\n```sh\npython3 flower.py\n")


class PythonExamples(unittest.TestCase):
    def test_pure_examples_give_the_values_their_comments_show(self):
        pure = [lines for info, lines in blocks(read_readme()) if info == "python"
                and "Runtime(" not in "\n".join(lines)]
        self.assertTrue(pure, "the README's pure-pieces example is gone")
        checked = 0
        for lines in pure:
            namespace: dict = {}
            for line in lines:
                code, _, comment = line.partition("  #")
                code, comment = code.strip(), comment.strip()
                if not code:
                    continue
                if comment[:1] in ("'", '"') or comment in ("True", "False"):
                    self.assertEqual(repr(eval(code, namespace)), comment, line)
                    checked += 1
                else:
                    exec(code, namespace)
        self.assertGreaterEqual(checked, 3)


@unittest.skipUnless(HAVE_SDK, SKIP)
class ShellExamples(unittest.TestCase):
    """The shell blocks' ``python3 flower.py`` lines, in order, in one workspace against the fake API."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.api = FakeAnthropic().start()
        self.api.responder = Roles(work=[text("Wrote hello.txt.")] + [text("done")] * 10)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "FLOWER_"))}
        self.env.update(fakeapi.cli_env(self.api, self.tmp.name))
        self.env.update(FLOWER_PROBE_INTERVAL="0.5", FLOWER_BASE_DELAY="0.2", FLOWER_MAX_DELAY="1",
                        FLOWER_MAX_OFFLINE_WAIT="60", NO_COLOR="1", PYTHONPATH=ROOT)

    def tearDown(self):
        self.api.stop()
        self.tmp.cleanup()

    def run_line(self, line: str) -> subprocess.CompletedProcess:
        words = shlex.split(line)
        out = None
        if ">" in words:
            out = words[words.index(">") + 1]
            words = words[:words.index(">")]
        self.assertEqual(words[:2], ["python3", "flower.py"], line)
        p = subprocess.run([*RUN_FLOWER, *words[2:]], cwd=self.ws, env=self.env, capture_output=True,
                           text=True, timeout=300, stdin=subprocess.DEVNULL)
        if out:
            with open(os.path.join(self.ws, out), "w", encoding="utf-8") as fh:
                fh.write(p.stdout)
        return p

    def test_tour_setup_and_first_screen(self):
        found = blocks(read_readme())
        shell = [shell_lines(lines) for info, lines in found if classify_block(info, lines) == "shell"]
        tour = next(lines for lines in shell if lines and lines[0].startswith('python3 flower.py "write'))
        # The tour, as the README tells it: each line exits 0.
        results = []
        for line in tour:
            before = len(self.api.requests)
            p = self.run_line(line)
            self.assertEqual(p.returncode, 0, f"{line}\n{p.stderr[-3000:]}")
            results.append((line, p, len(self.api.requests) - before))
        first, again = results[0][1], results[1]
        # "nothing new after the judge said achieved: nothing to do, nothing paid, exit 0."
        self.assertEqual(again[0], "python3 flower.py")
        self.assertEqual(again[2], 0, "a wake with nothing new after achieved paid a call")
        self.assertIn("nothing to do", again[1].stderr)
        # The output excerpt (after its "...") is the end of a real run's output, costs and paths free.
        excerpt = next(lines for info, lines in found if first_line(lines) == "...")
        patterns = []
        for line in excerpt[1:]:
            pattern = re.escape(line)
            pattern = re.sub(r"\\\$0\\\.\d+", r"\\$[0-9.]+", pattern)
            pattern = re.sub(r"\d+\\ turns?", r"\\d+\\ turns?", pattern)
            patterns.append(pattern.replace(re.escape("~/proj/.flower/manifest.jsonl"), r"\S*manifest\.jsonl"))
        self.assertRegex(first.stderr + first.stdout, "\n".join(patterns) + "\n$",
                         "the README's output excerpt is not how a real run ends")
        # The wake sentence was added to the brief.
        with open(os.path.join(self.ws, ".flower", "notes", "brief.md"), encoding="utf-8") as fh:
            self.assertIn("also say bye", fh.read())
        # --json: one JSON event a line, ending with the summary.
        with open(os.path.join(self.ws, "events.jsonl"), encoding="utf-8") as fh:
            events = [json.loads(line) for line in fh]
        self.assertEqual(events[-1]["kind"], "summary")
        self.assertTrue(all(event["v"] == 1 for event in events))
        # The Files listing names what a run leaves.
        for name in ("sessions.db", "manifest.jsonl", "lineage.json", "notes/brief.md", "notes/goal.md"):
            self.assertTrue(os.path.exists(os.path.join(self.ws, ".flower", name)), name)
        # Every other runnable line of the README (set up, first screen) exits 0 here too.
        for lines in shell:
            if lines is tour:
                continue
            for line in lines:
                p = self.run_line(line)
                self.assertEqual(p.returncode, 0, f"{line}\n{p.stderr[-3000:]}")

    def test_python_api_example(self):
        block = next(lines for info, lines in blocks(read_readme())
                     if info == "python" and "Runtime(" in "\n".join(lines))
        with open(os.path.join(self.ws, "seed.txt"), "w", encoding="utf-8") as fh:
            fh.write("tulip\n")
        code = "\n".join(block)
        runs = [subprocess.run([sys.executable, "-c", code], cwd=self.ws, env=self.env, capture_output=True,
                               text=True, timeout=300, stdin=subprocess.DEVNULL) for _ in range(2)]
        for p in runs:
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        first, second = (p.stdout.splitlines() for p in runs)
        # "1 {'word': '<session id>'}; run again: 2, same id"
        woke1, sessions1 = first[0].split(" ", 1)
        woke2, sessions2 = second[0].split(" ", 1)
        self.assertEqual((woke1, woke2), ("1", "2"))
        self.assertEqual(sessions1, sessions2)
        self.assertEqual(set(ast.literal_eval(sessions1)), {"word"})
        state = ast.literal_eval(first[1])
        self.assertTrue({"waking", "brief", "goal", "checks", "woke", "steps", "achieved"} <= set(state))


if __name__ == "__main__":
    unittest.main()
