"""Issue 14, the command line contract, one table per item: typos are usage errors, every option and
setting is checked before the first paid call, state in <workspace>/.flower, --json on every command,
honest exit codes, offline notices, terminal hygiene, an empty wake after "achieved" pays nothing,
Chinese, help.

The CLI runs as a subprocess: "nosdk" (no SDK importable), "fake" (tests/fake_flower.py, the fake SDK;
FAKE_LOG gets one line per model call, so "no paid call" is "no FAKE_LOG") or plain. A comment
"Catches (issue 14)" names the defect its test goes red on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock
from tests.helpers import RUN_FLOWER, NO_SDK, base_env, closed_port, load_json, manifest_rows, read_text


KEY = {"ANTHROPIC_API_KEY": "sk-test"}
FAST_OFFLINE = {"FLOWER_NO_PROBE": "0", "FLOWER_MAX_OFFLINE_WAIT": "1", "FLOWER_PROBE_INTERVAL": "0.2",
                "FLOWER_PROBE_TIMEOUT": "0.5"}
ESC = "\x1b"
PROXY_VARS = ("https_proxy", "http_proxy", "all_proxy", "no_proxy")
HOSTILE = "hi \x1b]0;pwned\x07\x1b[2J\x1b[H\x1b[31mred\x1b[0m there"   # title, clear screen, home, colour


def lines_json(data: bytes) -> list[dict]:
    """Every stdout line must parse (the assertion is the json.loads)."""
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def flower_lines(err: bytes) -> list[str]:
    return [line for line in err.decode("utf-8", "replace").splitlines() if line.startswith("flower:")]


def sha(path: str) -> str:
    import hashlib
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def decimals(value: float) -> int:
    text = repr(value)
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        self.env = {k: v for k, v in base_env(self.tmp.name).items() if k.lower() not in PROXY_VARS}
        self.log = os.path.join(self.tmp.name, "calls.jsonl")

    def tearDown(self):
        self.tmp.cleanup()

    def new_ws(self) -> str:
        self.ws = tempfile.mkdtemp(dir=self.tmp.name)
        return self.ws

    def run_cli(self, args, *, mode="fake", extra=None, stdin=b"", cwd=None, env=None, timeout=60):
        if mode == "nosdk":
            cmd = [sys.executable, "-c", NO_SDK]
        elif mode == "fake":
            cmd = [sys.executable, "-m", "tests.fake_flower"]
        else:
            cmd = RUN_FLOWER
        env = dict(env or self.env, **(extra or {}))
        return subprocess.run(cmd + list(args), cwd=cwd or self.ws, env=env, input=stdin, capture_output=True,
                              timeout=timeout)

    def calls(self) -> list[dict]:
        if not os.path.exists(self.log):
            return []
        with open(self.log, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]

    def paid(self, **extra) -> dict:
        """A fake run with credentials whose model calls go to self.log."""
        return dict(KEY, FAKE_LOG=self.log, **extra)

    def assert_one_error(self, p, code, needle):
        err = p.stderr.decode("utf-8", "replace")
        self.assertEqual(p.returncode, code, err)
        self.assertNotIn("Traceback", err)
        errors = flower_lines(p.stderr)
        self.assertEqual(len(errors), 1, err)
        self.assertIn(needle, errors[0])
        return errors[0]


# --- 1. a typo is not a paid job ---

class Typos(Base):
    def test_words_close_to_a_command_are_usage_errors_and_cost_nothing(self):
        rows = [  # argv, the suggestion the one line must make
            (["stauts"], "python3 flower.py status?"),
            (["hlep"], "python3 flower.py --help?"),
            (["sesions"], "python3 flower.py sessions?"),
            (["doctr"], "python3 flower.py doctor?"),
            (["shows"], "python3 flower.py show?"),
            (["help"], "python3 flower.py --help?"),
            (["Status"], "python3 flower.py status?"),
            (["-q", "stauts"], "python3 flower.py status?"),
            (["-w", ".", "sesions"], "python3 flower.py sessions?"),
            (["stauts", "--rounds", "2"], "python3 flower.py status?"),
        ]
        for argv, hint in rows:
            with self.subTest(argv=argv):
                ws = self.new_ws()
                p = self.run_cli(argv, extra=self.paid())
                line = self.assert_one_error(p, 2, hint)
                self.assertIn(f"python3 flower.py go {[a for a in argv if a.isalpha()][0]}", line)  # the way out
                self.assertEqual(self.calls(), [])                     # no model call
                self.assertEqual(os.listdir(ws), [])                   # nothing created
                self.assertEqual(p.stdout, b"")

    def test_json_typo_ends_with_an_error_line(self):
        p = self.run_cli(["--json", "stauts"], extra=self.paid())
        self.assertEqual(p.returncode, 2)
        last = lines_json(p.stdout)[-1]
        self.assertEqual((last["v"], last["kind"], last["data"]["exit_code"]), (1, "error", 2))
        self.assertIn("status", last["data"]["message"])

    def test_go_word_far_words_and_sentences_are_tasks(self):
        rows = [["go", "stauts"], ["go", "help"], ["refactor"], ["fix status"], ["stauts now"], ["Refactor-it"]]
        for argv in rows:
            with self.subTest(argv=argv):
                self.new_ws()
                os.path.exists(self.log) and os.unlink(self.log)
                p = self.run_cli(["--no-goal", *argv], extra=self.paid())
                self.assertEqual(p.returncode, 0, p.stderr.decode())
                first = self.calls()[0]
                self.assertEqual(first["role"], "clarify")
                self.assertIn(" ".join(a for a in argv if a != "go"), first["prompt"])


# --- 2. every option and setting is checked before the first paid call ---

class Validation(Base):
    def test_bad_options_exit_2_before_anything_is_written_or_paid(self):
        missing = os.path.join(self.tmp.name, "missing")
        rows = [  # argv, the option the one line names
            (["--rounds", "0", "x"], "--rounds"),
            (["--rounds", "-3", "x"], "--rounds"),
            (["--window", "-5", "x"], "--window"),
            (["--window", "9999", "x"], "--window"),
            (["--permission-mode", "bogus", "x"], "--permission-mode"),
            (["once", "-p", "bogus", "hi"], "--permission-mode"),
            (["once", "--permission-mode", "Plan", "hi"], "--permission-mode"),
            (["once", "-t", "Nope", "hi"], "unknown tool 'Nope'"),
            (["once", "-t", "Read,Reed", "hi"], "did you mean Read"),
            (["once", "-t", "bash(git:*)", "hi"], "unknown tool"),
            (["once", "-b", "-1", "hi"], "--budget"),
            (["once", "-b", "0", "hi"], "--budget"),
            (["once", "-b", "nan", "hi"], "--budget"),
            (["once", "-b", "inf", "hi"], "--budget"),
            (["once", "-b", "lots", "hi"], "--budget"),
            (["once", "--fork", "hi"], "--fork needs --resume"),
            ([""], "empty"),
            (["   "], "empty"),
            (["go", "\t\n "], "empty"),
            (["once", ""], "empty"),
            (["once", "  "], "empty"),
            (["-w", missing, "x"], "is not a directory"),
            (["-w", missing, "once", "hi"], "is not a directory"),
            (["-w", missing, "status"], "is not a directory"),
            (["-w", missing, "sessions"], "is not a directory"),
            (["-w", missing, "show", "abc"], "is not a directory"),
        ]
        for argv, needle in rows:
            with self.subTest(argv=argv):
                ws = self.new_ws()
                p = self.run_cli(argv, extra=self.paid())
                self.assert_one_error(p, 2, needle)
                self.assertEqual(self.calls(), [])
                self.assertEqual(os.listdir(ws), [], "created state before failing")
                self.assertFalse(os.path.exists(missing), "-w created the missing workspace")

    def test_the_edges_that_are_allowed(self):
        rows = [  # argv, what the model call must show
            (["--no-goal", "--rounds", "1", "--window", "10000", "x"], {"role": "clarify"}),
            (["--no-goal", "--permission-mode", "plan", "x"], {"role": "work", "permission_mode": "plan"}),
            (["once", "-t", "Read,mcp__srv__lookup,Bash(git:*)", "hi"],
             {"tools": ["Read", "mcp__srv__lookup", "Bash(git:*)"]}),
            (["once", "-p", "bypassPermissions", "-b", "0.01", "hi"], {"permission_mode": "bypassPermissions"}),
        ]
        for argv, want in rows:
            with self.subTest(argv=argv):
                self.new_ws()
                os.path.exists(self.log) and os.unlink(self.log)
                p = self.run_cli(argv, extra=self.paid())
                self.assertEqual(p.returncode, 0, p.stderr.decode())
                seen = [c for c in self.calls() if all(c.get(k) == v for k, v in want.items())]
                self.assertTrue(seen, self.calls())

    def test_a_blank_wake_sentence_in_a_used_directory_is_a_usage_error(self):
        p = self.run_cli(["--no-goal", "x"], extra=self.paid(FAKE_JUDGE="VERDICT: not_yet"))
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        before = len(self.calls())
        brief = read_text(os.path.join(self.ws, ".flower", "notes", "brief.md"))
        for argv, stdin in ((["   "], b""), (["-"], b"  \n\t\n")):
            with self.subTest(argv=argv):
                p = self.run_cli(argv, extra=self.paid(), stdin=stdin)
                self.assert_one_error(p, 2, "empty")
                self.assertEqual(len(self.calls()), before)
                self.assertEqual(read_text(os.path.join(self.ws, ".flower", "notes", "brief.md")), brief)

    BAD_SETTINGS = [  # variable, value
        ("FLOWER_LANG", "fr"),
        ("FLOWER_PROBE_TIMEOUT", "0"),
        ("FLOWER_PROBE_INTERVAL", "0"),
        ("FLOWER_MAX_ATTEMPTS", "0"),
        ("FLOWER_MAX_ATTEMPTS", "2.5"),
        ("FLOWER_WINDOW", "5"),
        ("FLOWER_NO_PROBE", "maybe"),
        ("FLOWER_MAX_DELAY", "nan"),
        ("FLOWER_BASE_DELAY", "-1"),
        ("FLOWER_MAX_OFFLINE_WAIT", "soon"),
        ("FLOWER_HANDOFF_TIMEOUT", "0"),
        ("ANTHROPIC_BASE_URL", "http://h:99999"),
        ("ANTHROPIC_BASE_URL", "http://[::1"),
        ("ANTHROPIC_BASE_URL", "ht!tp://x y"),
        ("ANTHROPIC_BASE_URL", "ftp://api.example.com"),
        ("HTTPS_PROXY", "http://proxy:0"),
        ("HTTPS_PROXY", "ftp://proxy:8080"),
        ("https_proxy", "http://proxy:70000"),
        ("ALL_PROXY", "::::"),
    ]

    def test_settings_problems_is_a_pure_table(self):
        import flower
        for name, value in self.BAD_SETTINGS:
            with self.subTest(name=name, value=value):
                env = {name: value}
                problems = flower.settings_problems(env)
                self.assertEqual(len(problems), 1, problems)
                self.assertTrue(problems[0].startswith(f"{name}="), problems)
                self.assertEqual(env, {name: value})                 # not changed
        good = [{}, {"FLOWER_LANG": "zh"}, {"FLOWER_LANG": "en"}, {"FLOWER_PROBE_TIMEOUT": "0.1"},
                {"FLOWER_PROBE_INTERVAL": "15"}, {"FLOWER_MAX_ATTEMPTS": "1"}, {"FLOWER_WINDOW": "10000"},
                {"FLOWER_MAX_OFFLINE_WAIT": "0"}, {"FLOWER_NO_PROBE": "1"}, {"FLOWER_NO_PROBE": "no"},
                {"FLOWER_NO_PROBE": ""}, {"FLOWER_BASE_DELAY": "0"},
                {"ANTHROPIC_BASE_URL": "https://gateway.example.com/anthropic"},
                {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080"}, {"ANTHROPIC_BASE_URL": "http://[::1]:8080"},
                {"ANTHROPIC_BASE_URL": "api.example.com"}, {"ANTHROPIC_BASE_URL": "  "},
                {"HTTPS_PROXY": "http://user:pw@proxy.corp:3128"}, {"ALL_PROXY": "socks5h://127.0.0.1:1080"},
                {"HTTPS_PROXY": "proxy.corp:3128"}, {"FLOWER_UNKNOWN_THING": "whatever"}]
        for env in good:
            with self.subTest(env=env):
                self.assertEqual(flower.settings_problems(env), [])
        several = flower.settings_problems({"FLOWER_LANG": "fr", "FLOWER_WINDOW": "5", "HTTPS_PROXY": "http://p:0"})
        self.assertEqual(len(several), 3)
        # pure: the process environment does not leak in when env is given
        with mock.patch.dict(os.environ, {"FLOWER_LANG": "fr", "FLOWER_WINDOW": "5"}):
            self.assertEqual(flower.settings_problems({}), [])
            self.assertEqual(len(flower.settings_problems()), 2)
        # a password in a proxy URL is not repeated in the line that names the problem
        line = flower.settings_problems({"HTTPS_PROXY": "http://user:s3cretpassw0rd@proxy:99999"})[0]
        self.assertNotIn("s3cretpassw0rd", line)

    def test_a_flag_setting_accepted_by_the_check_is_obeyed(self):
        # Catches (issue 14) the defect where settings_problems() accepts FLOWER_NO_PROBE case-insensitively and stripped
        # ("TRUE", "Yes", " 1"), Resilience.from_env only the exact "1"/"true"/"yes": a value that passes
        # the check is then silently ignored (the probe stays on).
        import flower
        for value in ("1", "true", "yes", "TRUE", "Yes", " 1"):
            with self.subTest(value=value):
                self.assertEqual(flower.settings_problems({"FLOWER_NO_PROBE": value}), [])
                with mock.patch.dict(os.environ, {"FLOWER_NO_PROBE": value}):
                    self.assertFalse(flower.Resilience.from_env().probe)
        for value in ("0", "false", "no", "NO", ""):
            with self.subTest(value=value):
                with mock.patch.dict(os.environ, {"FLOWER_NO_PROBE": value}):
                    self.assertTrue(flower.Resilience.from_env().probe)

    def test_bad_settings_exit_3_for_go_and_once_before_any_request(self):
        for i, (name, value) in enumerate(self.BAD_SETTINGS):
            for argv in (["x y"], ["--json", "once", "hi"]):
                with self.subTest(name=name, value=value, argv=argv):
                    ws = self.new_ws()
                    p = self.run_cli(argv, extra=self.paid(**{name: value}))
                    self.assert_one_error(p, 3, f"{name}=")
                    self.assertEqual(self.calls(), [])
                    self.assertEqual(os.listdir(ws), [], "state written before the settings were checked")
                    if "--json" in argv:
                        last = lines_json(p.stdout)[-1]
                        self.assertEqual((last["v"], last["kind"], last["data"]["exit_code"]), (1, "error", 3))
                        self.assertIn(name, last["data"]["message"])


# --- 3. state in <workspace>/.flower, never a .gitignore in someone else's directory ---

class StateDir(Base):
    def test_default_is_the_workspace_dot_flower_from_any_directory(self):
        elsewhere = os.path.join(self.tmp.name, "elsewhere")
        os.makedirs(elsewhere)
        p = self.run_cli(["-w", self.ws, "--no-goal", "x"], extra=self.paid(), cwd=elsewhere)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        state = os.path.join(self.ws, ".flower")
        for name in ("sessions.db", "lineage.json", "manifest.jsonl", "notes"):
            self.assertTrue(os.path.exists(os.path.join(state, name)), name)
        self.assertEqual(read_text(os.path.join(state, ".gitignore")), "*\n")
        self.assertEqual(os.listdir(elsewhere), [])                   # no ./runs where flower was started
        self.assertEqual(sorted(os.listdir(self.ws)), [".flower"])
        self.assertEqual(load_json(os.path.join(state, "lineage.json"))["workspace"], os.path.realpath(self.ws))

    @unittest.skipUnless(shutil.which("git"), "needs git")
    def test_a_repos_tracked_runs_dir_stays_the_users(self):
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
        subprocess.run(["git", "init", "-q"], cwd=self.ws, check=True)
        runs = os.path.join(self.ws, "runs")
        os.makedirs(runs)
        with open(os.path.join(runs, "results.csv"), "w") as fh:
            fh.write("a,b\n")
        subprocess.run(git + ["add", "runs"], cwd=self.ws, check=True)
        subprocess.run(git + ["commit", "-qm", "runs"], cwd=self.ws, check=True)
        mode = stat.S_IMODE(os.stat(runs).st_mode)
        p = self.run_cli(["-r", "runs", "--no-goal", "x"], extra=self.paid())
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertTrue(os.path.exists(os.path.join(runs, "sessions.db")))    # -r moved the run files
        self.assertFalse(os.path.exists(os.path.join(runs, ".gitignore")))
        self.assertEqual(stat.S_IMODE(os.stat(runs).st_mode), mode)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "runs"], cwd=self.ws,
                                capture_output=True, text=True, check=True).stdout
        self.assertIn("runs/manifest.jsonl", status)                          # git still sees new files
        # a directory -r names that flower creates itself does get one (status alone creates nothing)
        p = self.run_cli(["-r", "fresh/state", "status"], mode="nosdk")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.ws, "fresh")))
        p = self.run_cli(["-r", "fresh/state", "--no-goal", "y"], extra=self.paid())
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(read_text(os.path.join(self.ws, "fresh", "state", ".gitignore")), "*\n")
        self.assertFalse(os.path.exists(os.path.join(self.ws, "fresh", ".gitignore")))

    def legacy_runs(self) -> str:
        """A workspace run under the old default: ./runs holds sessions.db, lineage and manifest."""
        p = self.run_cli(["-r", "runs", "--no-goal", "x"], extra=self.paid(FAKE_JUDGE="VERDICT: not_yet"))
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".flower", "sessions.db")))
        return os.path.join(self.ws, "runs")

    def test_an_old_runs_of_this_workspace_is_still_used_with_one_line(self):
        runs = self.legacy_runs()
        work = load_json(os.path.join(runs, "lineage.json"))["steps"]["work"]
        p = self.run_cli(["status"], mode="nosdk")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr.decode().count("using flower's state in"), 1, p.stderr.decode())
        self.assertIn("mv ", p.stderr.decode())
        self.assertIn(work, p.stdout.decode())
        p = self.run_cli(["sessions"], mode="nosdk")
        self.assertIn(work, p.stdout.decode())
        before = len(self.calls())
        p = self.run_cli(["--no-goal", "carry on with y"], extra=self.paid())
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stderr.decode().count("using flower's state in"), 1)
        self.assertEqual(self.calls()[before]["resume"], work)               # continuity kept
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".flower", "sessions.db")))
        # moved by hand as the line suggests: .flower wins, no line
        for name in os.listdir(runs):
            shutil.move(os.path.join(runs, name), os.path.join(self.ws, ".flower", name))
        os.rmdir(runs)
        p = self.run_cli(["status"], mode="nosdk")
        self.assertNotIn("using flower's state in", p.stderr.decode())
        self.assertIn(work, p.stdout.decode())

    def test_the_move_suggestion_names_the_workspace_when_started_elsewhere(self):
        # Catches (issue 14, minor) the defect where with -w, ./runs is looked up in the current directory (the old default), but the
        # suggested "mv runs/* .flower/" moves it into the *current* directory's .flower, not the workspace's,
        # where flower will never look.
        elsewhere = os.path.join(self.tmp.name, "elsewhere")
        os.makedirs(elsewhere)
        p = self.run_cli(["-w", self.ws, "-r", "runs", "--no-goal", "x"], extra=self.paid(), cwd=elsewhere)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        p = self.run_cli(["-w", self.ws, "status"], mode="nosdk", cwd=elsewhere)
        line = [ln for ln in p.stderr.decode().splitlines() if "using flower's state in" in ln]
        self.assertEqual(len(line), 1, p.stderr.decode())
        self.assertIn("~/ws/.flower", line[0])   # HOME is the temp dir

    def test_an_old_runs_with_only_a_sessions_db_is_used(self):
        runs = self.legacy_runs()
        os.unlink(os.path.join(runs, "lineage.json"))
        p = self.run_cli(["sessions"], mode="nosdk")
        self.assertEqual(p.stderr.decode().count("using flower's state in"), 1, p.stderr.decode())
        self.assertEqual(len(p.stdout.decode().strip().splitlines()), 2)   # clarify and work

    def test_a_users_own_sessions_db_in_runs_is_not_taken_for_flowers(self):
        # Catches (issue 14) the defect where _paths() takes any ./runs/sessions.db as flower's old state (the lineage check is
        # skipped when there is no lineage.json), and even `status` / `sessions` then open it with
        # SqliteSessionStore, which adds flower's tables (entries, sessions, summaries) to the user's database.
        import sqlite3
        runs = os.path.join(self.ws, "runs")
        os.makedirs(runs)
        db = os.path.join(runs, "sessions.db")
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
        conn.execute("INSERT INTO users VALUES (1, 'ann')")
        conn.commit()
        conn.close()
        before = sha(db)
        for argv in (["status"], ["sessions"]):
            with self.subTest(argv=argv):
                p = self.run_cli(argv, mode="nosdk")
                self.assertEqual(p.returncode, 0, p.stderr.decode())
                self.assertEqual(sha(db), before, "flower changed the user's runs/sessions.db")
                self.assertNotIn("using flower's state in", p.stderr.decode())
        self.assertEqual(sorted(os.listdir(runs)), ["sessions.db"])

    def test_a_runs_that_is_not_this_workspaces_is_left_alone(self):
        rows = {
            "another workspace's lineage": {"lineage.json": json.dumps({"workspace": "/somewhere/else", "woke": 1,
                                                                        "steps": {"work": "abc"}})},
            "the user's own files": {"results.csv": "a,b\n", "notes.txt": "mine"},
        }
        for name, files in rows.items():
            with self.subTest(name=name):
                ws = self.new_ws()
                runs = os.path.join(ws, "runs")
                os.makedirs(runs)
                for rel, data in files.items():
                    with open(os.path.join(runs, rel), "w") as fh:
                        fh.write(data)
                p = self.run_cli(["--no-goal", "x"], extra=self.paid())
                self.assertEqual(p.returncode, 0, p.stderr.decode())
                self.assertNotIn("using flower's state in", p.stderr.decode())
                self.assertEqual(sorted(os.listdir(runs)), sorted(files))
                self.assertTrue(os.path.exists(os.path.join(ws, ".flower", "sessions.db")))


# --- 4. --json on every command ---

class JsonEverywhere(Base):
    SUMMARY = {"exit_code", "reason", "cost_usd", "steps", "sessions", "degraded", "manifest"}

    def assert_money_rounded(self, value, where="") -> int:
        """Every ``cost_usd`` in ``value`` (at any depth) is rounded to 1e-6; returns how many were seen."""
        seen = 0
        if isinstance(value, dict):
            for k, v in value.items():
                if k == "cost_usd" and isinstance(v, float):
                    self.assertEqual(v, round(v, 6), where)
                    self.assertLessEqual(decimals(v), 6, f"{where}: {v!r}")
                    seen += 1
                seen += self.assert_money_rounded(v, where)
        elif isinstance(value, list):
            for v in value:
                seen += self.assert_money_rounded(v, where)
        return seen

    def test_go_and_once_end_with_a_summary(self):
        # a price with float noise (the issue saw 0.006500000000000001): every money field must be rounded
        env = self.paid(FAKE_COST="0.006500000000000001")
        p = self.run_cli(["--json", "write md2html"], extra=env)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        events = lines_json(p.stdout)
        self.assertTrue(all(e["v"] == 1 for e in events))
        self.assertEqual(events[-1]["kind"], "summary")
        summary = events[-1]["data"]
        self.assertLessEqual(self.SUMMARY, set(summary))
        self.assertEqual((summary["exit_code"], summary["reason"], summary["degraded"]), (0, "done", []))
        self.assertEqual(summary["steps"], ["clarify", "goal", "work", "work·judge#1"])
        rows = manifest_rows(os.path.join(self.ws, ".flower"))
        self.assertEqual(summary["sessions"], sorted({r["session_id"] for r in rows}))
        self.assertEqual(summary["manifest"], os.path.join(os.path.realpath(self.ws), ".flower", "manifest.jsonl"))
        self.assertEqual(summary["cost_usd"], 0.026)
        self.assertEqual(len([e for e in events if e["kind"] == "summary"]), 1)
        self.assertGreaterEqual(sum(self.assert_money_rounded(e, e["kind"]) for e in events), 9)  # results too
        self.assertNotIn(b"worked\n", p.stdout)                          # the answer is in the events only
        # once
        p = self.run_cli(["--json", "once", "hello"], extra=env)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        events = lines_json(p.stdout)
        summary = events[-1]["data"]
        self.assertEqual(events[-1]["kind"], "summary")
        self.assertLessEqual(self.SUMMARY, set(summary))
        self.assertEqual((summary["exit_code"], summary["steps"][-1]), (0, "once"))
        self.assertEqual(summary["cost_usd"], 0.0065)
        self.assertGreaterEqual(sum(self.assert_money_rounded(e, e["kind"]) for e in events), 2)
        # a failed run: the summary says so, the exit code matches
        p = self.run_cli(["--json", "--rounds", "1", "--new", "another"],
                         extra=self.paid(FAKE_JUDGE="VERDICT: not_yet"))
        self.assertEqual(p.returncode, 1, p.stderr.decode())
        summary = lines_json(p.stdout)[-1]
        self.assertEqual((summary["kind"], summary["data"]["exit_code"]), ("summary", 1))
        self.assertTrue(summary["data"]["reason"])

    def test_status_sessions_show_doctor(self):
        p = self.run_cli(["--json", "status"], mode="nosdk")   # nothing here yet: still JSON
        self.assertEqual(p.returncode, 0, p.stderr)
        (empty,) = lines_json(p.stdout)
        self.assertEqual((empty["v"], empty["kind"], empty["steps"], empty["manifest"]), (1, "status", [], []))
        p = self.run_cli(["write md2html"], extra=self.paid(FAKE_COST="0.006500000000000001"))
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        work = load_json(os.path.join(self.ws, ".flower", "lineage.json"))["steps"]["work"]
        rows = {}
        for argv in (["status", "--json"], ["--json", "sessions"], ["sessions", "--all", "--json"],
                     ["show", work[:8], "--json"], ["doctor", "--json"]):
            p = self.run_cli(argv, mode="nosdk")
            out = lines_json(p.stdout)
            self.assertEqual(len(out), 1, argv)
            self.assertEqual(out[0]["v"], 1)
            self.assertNotIn("Traceback", p.stderr.decode())
            rows[argv[0] if argv[0] != "--json" else argv[1], "--all" in argv] = (p.returncode, out[0])
        code, status = rows["status", False]
        self.assertEqual((code, status["kind"], status["achieved"]), (0, "status", True))
        self.assertLessEqual({"workspace", "run_dir", "wake", "steps", "manifest", "sessions"}, set(status))
        self.assertEqual({s["step"]: s["session_id"] for s in status["steps"]}["work"], work)
        self.assertEqual(len(status["manifest"]), 4)
        self.assertEqual(self.assert_money_rounded(status), 4)
        code, sessions = rows["sessions", False]
        self.assertEqual((code, sessions["kind"]), (0, "sessions"))
        self.assertEqual({s["session_id"]: s["step"] for s in sessions["sessions"]}[work], "work")
        self.assertEqual(len(sessions["sessions"]), 4)
        self.assertEqual(len(rows["sessions", True][1]["sessions"]), 4)
        code, show = rows["show", False]
        self.assertEqual((code, show["kind"], show["session_id"]), (0, "show", work))
        self.assertTrue(any("worked" in json.dumps(e) for e in show["entries"]))
        self.assertIsInstance(show["pruned"], dict)
        code, doctor = rows["doctor", False]
        self.assertEqual((doctor["kind"], doctor["exit_code"], code), ("doctor", 3, 3))   # no SDK, no key
        for check in doctor["checks"]:
            self.assertEqual(set(check), {"ok", "what", "fix", "kind"})
        self.assertIn({"ok": False, "kind": "network"}, [{"ok": c["ok"], "kind": c["kind"]} for c in doctor["checks"]])

    def test_paths_survive_a_shell_that_sets_pwd(self):
        # Catches (issue 14 / redaction) the defect where every shell exports PWD (the working directory). _secret_name("PWD") is true
        # ("pwd" is a secret word), so _env_secrets() treats the cwd as a credential and redact() turns every
        # path under it into "[REDACTED]": the summary's manifest is "[REDACTED]/.flower/manifest.json", and so
        # are once's closing line and error lines. The subprocess tests miss it because they inherit the test
        # runner's PWD; here PWD is what a shell would set.
        ws = os.path.realpath(self.ws)
        p = self.run_cli(["--json", "once", "hello"], extra=self.paid(PWD=ws))
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        manifest = os.path.join(ws, ".flower", "manifest.jsonl")
        self.assertEqual(lines_json(p.stdout)[-1]["data"]["manifest"], manifest)
        self.assertIn(f"manifest {manifest}", p.stderr.decode())
        self.assertNotIn("[REDACTED]", p.stderr.decode())

    def test_show_raw_json_keeps_the_envelope(self):
        # Catches (issue 14) the defect where `show SID --raw --json` prints the stored entries one a line without the "v"/"kind"
        # envelope (cmd_show handles --raw before --json), so a CI job reading --json lines finds no "v".
        p = self.run_cli(["once", "hello"], extra=self.paid())
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        sid = manifest_rows(os.path.join(self.ws, ".flower"))[-1]["session_id"]
        p = self.run_cli(["show", sid, "--raw", "--json"], mode="nosdk")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = lines_json(p.stdout)
        self.assertTrue(all(line.get("v") == 1 for line in out), out[:2])
        self.assertEqual(len(out), 1)
        self.assertEqual((out[0]["kind"], out[0]["session_id"]), ("show", sid))

    def test_a_one_line_error_and_the_lock_end_json_with_a_last_line(self):
        rows = [  # argv, mode, exit code, kind of the last line
            (["--json", "build x"], "nosdk", 3, "error"),
            (["--json", "once", "-b", "0", "hi"], "fake", 2, "error"),
            (["--json", "show", "zzz"], "nosdk", 2, "error"),
            (["--json", "--frobnicate"], "nosdk", 2, "error"),
        ]
        for argv, mode, code, kind in rows:
            with self.subTest(argv=argv):
                p = self.run_cli(argv, mode=mode, extra=KEY)
                self.assertEqual(p.returncode, code, p.stderr.decode())
                last = lines_json(p.stdout)[-1]
                self.assertEqual((last["v"], last["kind"], last["data"]["exit_code"]), (1, kind, code))
                self.assertEqual("flower: " + last["data"]["message"], flower_lines(p.stderr)[0])
        # a second go while one drives the workspace: exit 5, a lock line naming the holder
        first = subprocess.Popen([sys.executable, "-m", "tests.fake_flower", "--no-goal", "x"], cwd=self.ws,
                                 env=dict(self.env, **self.paid(FAKE_WORK_BLOCK="1")), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 30
            while time.time() < deadline and not any(c["role"] == "work" for c in self.calls()):
                time.sleep(0.05)
            p = self.run_cli(["--json", "more"], extra=KEY)
            self.assertEqual(p.returncode, 5, p.stderr.decode())
            last = lines_json(p.stdout)[-1]
            self.assertEqual((last["kind"], last["data"]["exit_code"]), ("lock", 5))
            self.assertEqual(last["data"]["holder"]["pid"], first.pid)
        finally:
            first.send_signal(signal.SIGTERM)
            first.wait(timeout=30)


# --- 5. exit codes a CI job can use ---

def fake_claude(bin_dir: str) -> None:
    """A `claude` on PATH that answers --version, so doctor finds a CLI next to the fake SDK."""
    os.makedirs(bin_dir, exist_ok=True)
    path = os.path.join(bin_dir, "claude")
    with open(path, "w") as fh:
        fh.write("#!/bin/sh\necho '2.1.0 (Claude Code)'\n")
    os.chmod(path, 0o755)


class ExitCodes(Base):
    def test_rejected_credentials_exit_3_without_retrying(self):
        rows = [(["x"], "clarify", "401"), (["once", "hi"], "once", "401"), (["once", "hi"], "once", "403")]
        for argv, step, status in rows:
            with self.subTest(argv=argv, status=status):
                self.new_ws()
                os.path.exists(self.log) and os.unlink(self.log)
                p = self.run_cli(["--json", *argv], extra=self.paid(FAKE_STATUS=status, FLOWER_BASE_DELAY="0"))
                self.assertEqual(p.returncode, 3, p.stderr.decode())
                self.assertEqual(len(self.calls()), 1)                       # fatal: no second attempt
                row = manifest_rows(os.path.join(self.ws, ".flower"))[-1]
                self.assertEqual((row["step"], row["ok"], row["error_kind"]), (step, False, "auth"))
                self.assertEqual(lines_json(p.stdout)[-1]["data"]["exit_code"], 3)

    def test_network_down_past_the_wait_exits_4_without_a_request(self):
        for argv, step in ((["x"], "clarify"), (["once", "hi"], "once")):
            with self.subTest(argv=argv):
                self.new_ws()
                p = self.run_cli(["--json", *argv], extra=self.paid(**FAST_OFFLINE))
                self.assertEqual(p.returncode, 4, p.stderr.decode())
                self.assertEqual(self.calls(), [])                          # the pre-flight probe caught it
                row = manifest_rows(os.path.join(self.ws, ".flower"))[-1]
                self.assertEqual((row["step"], row["error_kind"]), (step, "offline"))
                events = lines_json(p.stdout)
                self.assertEqual(events[-1]["kind"], "summary")
                self.assertEqual(events[-1]["data"]["exit_code"], 4)
                offline = [e for e in events if e["kind"] == "offline"]
                self.assertTrue(offline)
                self.assertEqual(offline[0]["data"]["port"], int(self.env["ANTHROPIC_BASE_URL"].rsplit(":", 1)[1]))
                self.assertIn("is unreachable; waiting", p.stderr.decode())

    def test_doctor_exit_codes_and_what_it_names(self):
        bin_dir = os.path.join(self.tmp.name, "bin")
        fake_claude(bin_dir)
        path = bin_dir + os.pathsep + os.environ.get("PATH", "")
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        self.addCleanup(listener.close)
        up = f"http://127.0.0.1:{listener.getsockname()[1]}"
        down = closed_port()
        rows = [  # name, mode, env, exit code, texts in the report
            ("all good", "fake", dict(KEY, ANTHROPIC_BASE_URL=up), 0, ["OK   endpoint 127.0.0.1", "reachable"]),
            ("only the network: refused", "fake", dict(KEY, ANTHROPIC_BASE_URL=f"http://127.0.0.1:{down}"), 4,
             [f"FAIL endpoint 127.0.0.1:{down} connection refused", "check the network and ANTHROPIC_BASE_URL"]),
            ("only the network: DNS", "fake", dict(KEY, ANTHROPIC_BASE_URL="https://no-such-host.invalid"), 4,
             ["FAIL endpoint no-such-host.invalid:443 DNS failure"]),
            ("only the network: the proxy", "fake", dict(KEY, ANTHROPIC_BASE_URL="https://api.example.com",
                                                         HTTPS_PROXY=f"http://127.0.0.1:{down}"), 4,
             [f"FAIL proxy 127.0.0.1:{down} (from HTTPS_PROXY) connection refused", "check HTTPS_PROXY"]),
            ("proxy skipped by NO_PROXY", "fake", dict(KEY, ANTHROPIC_BASE_URL=up, NO_PROXY="127.0.0.1",
                                                       https_proxy=f"http://127.0.0.1:{down}"), 0, ["OK   endpoint"]),
            ("network and credentials", "fake", dict(ANTHROPIC_BASE_URL=f"http://127.0.0.1:{down}"), 3,
             ["FAIL no credentials", "connection refused"]),
            ("network and a setting", "fake", dict(KEY, FLOWER_LANG="fr"), 3, ["FAIL FLOWER_LANG='fr'"]),
            ("no SDK", "nosdk", dict(KEY, ANTHROPIC_BASE_URL=up), 3, ["FAIL claude-agent-sdk not installed"]),
        ]
        for name, mode, extra, code, texts in rows:
            with self.subTest(name=name):
                env = {k: v for k, v in self.env.items() if k != "ANTHROPIC_BASE_URL"}
                env.update(extra, PATH=path)
                env.setdefault("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{down}")
                p = self.run_cli(["doctor"], mode=mode, env=env)
                out = p.stdout.decode()
                self.assertEqual(p.returncode, code, out + p.stderr.decode())
                for needle in texts:
                    self.assertIn(needle, out)
                p = self.run_cli(["doctor", "--json"], mode=mode, env=env)
                (report,) = lines_json(p.stdout)
                self.assertEqual((p.returncode, report["exit_code"]), (code, code))


# --- 6. offline: a pre-flight probe, a line a minute, structured events ---

class Offline(Base):
    def wait(self, resilience, up_at, *, notify=True):
        """Run wait_online on a virtual clock; the endpoint answers from ``up_at`` seconds (None: never)."""
        import asyncio
        now = [0.0]
        lines, states = [], []

        async def probe(host, port, timeout):
            return up_at is not None and now[0] >= up_at

        async def sleep(seconds):
            now[0] += seconds
        ok = asyncio.run(resilience.wait_online(lines.append if notify else None, target=("api.example", 443),
                                                probe=probe, sleep=sleep, clock=lambda: now[0],
                                                on_state=states.append))
        return ok, lines, states

    def test_wait_online_says_when_it_goes_every_minute_and_when_it_is_back(self):
        import flower
        rows = [  # interval, max wait, up at, ok, number of "still offline" lines
            (15, 3600, 0, True, 0),
            (15, 3600, 30, True, 0),
            (15, 3600, 60, True, 0),
            (15, 3600, 150, True, 2),
            (15, 3600, 3599, True, 59),
            (15, 3600, None, False, 59),
            (7, 600, 200, True, 3),
            (30, 90, None, False, 1),
        ]
        for interval, most, up_at, ok, still in rows:
            with self.subTest(interval=interval, most=most, up_at=up_at):
                r = flower.Resilience(probe_interval=interval, max_offline_wait=most)
                got, lines, states = self.wait(r, up_at)
                self.assertEqual(got, ok)
                if up_at == 0:
                    self.assertEqual((lines, states), ([], []))          # up: not a word
                    continue
                self.assertIn("api.example:443 is unreachable; waiting for it", lines[0])
                self.assertEqual(sum(line.startswith("still offline") for line in lines), still, lines)
                self.assertEqual(sum("reachable again" in line for line in lines), 1 if ok else 0)
                self.assertEqual(len(lines), 1 + still + (1 if ok else 0))
                self.assertEqual([s["state"] for s in states], ["offline"] * (1 + still) + (["online"] if ok else []))
                said = [s["waited_s"] for s in states if s["state"] == "offline"]
                for earlier, later in zip(said, said[1:]):   # a minute apart: never faster, never a probe late
                    self.assertGreaterEqual(later - earlier, 60)
                    self.assertLess(later - earlier, 60 + interval)
                for s in states:
                    self.assertEqual((s["max_s"], s["next_probe_s"], s["host"], s["port"]),
                                     (most, interval, "api.example", 443))
        r = flower.Resilience(probe_interval=15, max_offline_wait=3600)
        _, lines, _ = self.wait(r, 200)
        self.assertEqual(lines[1], "still offline (api.example:443): 1m of 60m, next probe in 15s")
        self.assertEqual(lines[-1], "api.example:443 is reachable again after 210s")

    def test_the_runtime_probes_before_its_first_request_and_emits_events(self):
        import asyncio
        import flower
        from tests import fakesdk
        fakesdk.install()
        self.addCleanup(fakesdk.uninstall)
        fakesdk.FAKE.turns = [[("text", "done", 10)], [("text", "again", 10)]]
        probes = []

        async def probe(host, port, timeout):
            probes.append(len(fakesdk.FAKE.calls))               # how many requests went out before it
            return len(probes) >= 3
        events = []
        rt = flower.Runtime(workspace=self.ws, on_event=events.append,
                            resilience=flower.Resilience(probe_interval=0.01, max_offline_wait=30, probe=True))
        self.addCleanup(rt.close)
        with mock.patch.object(flower, "reachable", probe):
            result = asyncio.run(rt.run(flower.AgentSpec("once"), "hi"))
            second = asyncio.run(rt.run(flower.AgentSpec("once"), "more"))
        self.assertTrue(result.ok and second.ok)
        self.assertEqual(probes, [0, 0, 0])                 # three probes, all before the first request, once a run
        kinds = [e.kind for e in events]
        self.assertEqual(kinds.index("offline"), 0)
        self.assertLess(kinds.index("online"), kinds.index("text"))
        self.assertEqual(kinds.count("offline") + kinds.count("online"), 2)
        online = events[kinds.index("online")]
        self.assertEqual(set(online.data), {"state", "host", "port", "waited_s", "max_s", "next_probe_s"})
        self.assertIn('"kind": "offline"', events[0].as_json())

    def test_a_cli_run_waits_for_the_endpoint_and_carries_on(self):
        port = closed_port()
        env = dict(self.env, **self.paid(FLOWER_NO_PROBE="0", FLOWER_PROBE_INTERVAL="0.2", FLOWER_PROBE_TIMEOUT="0.5",
                                         FLOWER_MAX_OFFLINE_WAIT="30",
                                         ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}"))
        proc = subprocess.Popen([sys.executable, "-m", "tests.fake_flower", "--json", "once", "hi"], cwd=self.ws,
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        listener = None
        try:
            first = proc.stderr.readline().decode()            # the first thing said: it is waiting
            self.assertIn(f"127.0.0.1:{port} is unreachable; waiting", first)
            self.assertEqual(self.calls(), [])
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", port))
            listener.listen(16)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if listener is not None:
                listener.close()
        self.assertEqual(proc.returncode, 0, err.decode())
        self.assertIn("reachable again", err.decode())
        kinds = [e["kind"] for e in lines_json(out)]
        self.assertEqual(kinds[:2], ["offline", "online"])
        self.assertEqual(kinds[-1], "summary")
        self.assertEqual(len(self.calls()), 1)


# --- 7. the terminal ---

class Terminal(Base):
    def test_without_a_tty_the_first_sigint_stops_at_once(self):
        env = dict(self.env, **self.paid(FAKE_WORK_BLOCK="1"))
        proc = subprocess.Popen([sys.executable, "-m", "tests.fake_flower", "--no-goal", "x"], cwd=self.ws, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 30
        while time.time() < deadline and not any(c["role"] == "work" for c in self.calls()):
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=15)       # one SIGINT is enough
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            self.fail("one SIGINT without a TTY did not stop flower")
        self.assertEqual(proc.returncode, 130, err.decode())
        self.assertNotIn(b"What should I tell the agent?", err)
        self.assertNotIn(b"Traceback", err)
        row = manifest_rows(os.path.join(self.ws, ".flower"))[-1]
        self.assertEqual((row["step"], row["error"]), ("work", "interrupted"))

    def test_sanitize_table(self):
        import flower
        rows = [  # model text, what may reach the terminal
            ("plain text", "plain text"),
            ("tabs\tand\nnewlines", "tabs\tand\nnewlines"),
            ("中文 and émoji 🌸", "中文 and émoji 🌸"),
            ("\x1b[31mred\x1b[0m", "red"),
            ("\x1b[1;38;5;196mbold\x1b[m", "bold"),
            ("a\x1b[2J\x1b[Hb", "ab"),                          # clear screen, cursor home
            ("a\x1b[10A\x1b[5Cb", "ab"),                        # cursor up, right
            ("\x1b]0;pwned\x07title", "title"),                 # OSC window title (BEL)
            ("\x1b]2;pwned\x1b\\title", "title"),               # OSC window title (ST)
            ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink
            ("\x1bPq#0;2;0;0;0\x1b\\x", None),                  # DCS: no ESC may survive
            ("over\rwrite", "overwrite"),
            ("back\x08\x08space", "backspace"),
            ("bell\x07", "bell"),
            ("del\x7f", "del"),
            ("nul\x00", "nul"),
            ("\x9b31mc1", None),                                # 8-bit CSI
            ("\x1bc reset", "c reset"),                         # RIS: the ESC goes, the letter is harmless
        ]
        for raw, want in rows:
            with self.subTest(raw=raw):
                got = flower.sanitize(raw)
                if want is not None:
                    self.assertEqual(got, want)
                self.assertNotIn(ESC, got)
                self.assertFalse(set(got) & {"\x07", "\x08", "\r", "\x7f", "\x00", "\x9b"}, repr(got))
        self.assertEqual(flower.sanitize(""), "")

    def test_sanitize_removes_every_c1_control(self):
        # Catches (issue 14) the defect where sanitize() strips only 0x9b of the C1 controls; 0x90 (DCS), 0x9d (OSC), 0x9e, 0x9f
        # and 0x84/0x85/0x8d (IND/NEL/RI) pass, and some terminals act on them. Its docstring promises "control
        # characters other than newline and tab are removed".
        import flower
        import unicodedata
        controls = [chr(c) for c in range(0x80, 0xa0)]
        got = flower.sanitize("a" + "".join(controls) + "b")
        self.assertEqual([unicodedata.category(ch) for ch in got if unicodedata.category(ch) == "Cc"], [],
                         repr(got))

    def test_model_text_on_stderr_has_no_escape_sequences(self):
        p = self.run_cli(["--no-goal", "x"], extra=self.paid(FAKE_TEXT=HOSTILE))
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        err = p.stderr.decode()
        self.assertIn("hi", err)
        self.assertIn("redthere", err.replace(" ", ""))
        self.assertNotIn(ESC, err)
        self.assertNotIn("\x07", err)

    def test_sdk_log_lines_stay_off_stderr_unless_verbose(self):
        for argv, shown in ((["--no-goal", "x"], False), (["-v", "--no-goal", "x"], True),
                            (["once", "hi"], False), (["once", "-v", "hi"], True)):
            with self.subTest(argv=argv):
                self.new_ws()
                p = self.run_cli(argv, extra=self.paid(FAKE_SDK_LOG="1"))
                self.assertEqual(p.returncode, 0, p.stderr.decode())
                self.assertEqual(b"Fatal error in message reader" in p.stderr, shown, p.stderr.decode())


@unittest.skipUnless(hasattr(os, "openpty") and sys.platform != "win32", "needs a pty")
class Pty(Base):
    """A person at a terminal: colour, TERM=dumb, and what the model's text may do to the screen."""

    def spawn(self, args, env, timeout=30):
        """Run the fake flower on a pty; return (exit code, every byte the terminal got)."""
        import pty
        pid, fd = pty.fork()
        if pid == 0:   # pragma: no cover (the child)
            os.chdir(self.ws)
            os.execve(sys.executable, [sys.executable, "-m", "tests.fake_flower"] + args, env)
        buf = b""
        deadline = time.time() + timeout
        try:
            while time.time() < deadline:
                ready, _, _ = select.select([fd], [], [], 0.1)
                if ready:
                    try:
                        chunk = os.read(fd, 4096)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        break
                    buf += chunk
            else:
                os.kill(pid, signal.SIGKILL)
        finally:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status), buf

    def pty_env(self, **extra):
        env = {k: v for k, v in self.env.items() if k not in ("NO_COLOR", "TERM")}
        env.update(self.paid(), TERM="xterm-256color")
        env.update(extra)
        return env

    def test_colour_on_a_terminal_and_none_with_no_color(self):
        sgr = re.compile(rb"\x1b\[[0-9;]*m")
        code, screen = self.spawn(["--no-goal", "x"], self.pty_env())
        self.assertEqual(code, 0, screen)
        self.assertRegex(screen, sgr)                       # the control: a colour terminal gets colour
        self.new_ws()
        code, screen = self.spawn(["--no-goal", "x"], self.pty_env(NO_COLOR="1"))
        self.assertEqual(code, 0, screen)
        self.assertIn(b"== work", screen)
        self.assertIsNone(sgr.search(screen), screen)

    def test_term_dumb_gets_plain_text(self):
        # Catches (issue 14) the defect where with TERM=dumb the live status line is still drawn with "\r\x1b[K" (a dumb terminal
        # shows the escape bytes); only the colour is switched off (Reporter.color), not the status line.
        code, screen = self.spawn(["--no-goal", "x"], self.pty_env(TERM="dumb"))
        self.assertEqual(code, 0, screen)
        self.assertIn(b"== work", screen)
        self.assertNotIn(ESC.encode(), screen)

    def test_the_answer_on_a_terminal_is_sanitised(self):
        # Catches (issue 14) the defect where go and once print the final answer on stdout with redact() only: on a terminal the
        # model's escape sequences (window title, clear screen) reach it unfiltered.
        for argv in (["once", "hi"], ["--no-goal", "x"]):
            with self.subTest(argv=argv):
                self.new_ws()
                code, screen = self.spawn(argv, self.pty_env(NO_COLOR="1", FAKE_TEXT=HOSTILE))
                self.assertEqual(code, 0, screen)
                self.assertIn(b"there", screen)
                self.assertNotIn(b"\x1b]0;", screen)
                self.assertNotIn(b"\x1b[2J", screen)
                self.assertNotIn(b"\x07", screen)

    def test_show_on_a_terminal_is_sanitised(self):
        # Catches (issue 14) the defect where `show` prints stored model text (render_entries) without sanitize(); on a terminal
        # the model's escape sequences run.
        p = self.run_cli(["once", "hi"], extra=self.paid(FAKE_TEXT=HOSTILE))
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        sid = manifest_rows(os.path.join(self.ws, ".flower"))[-1]["session_id"]
        code, screen = self.spawn(["show", sid], self.pty_env(NO_COLOR="1"))
        self.assertEqual(code, 0, screen)
        self.assertIn(b"[assistant] hi", screen)
        self.assertNotIn(b"\x1b]0;", screen)
        self.assertNotIn(b"\x1b[2J", screen)

    def test_the_answer_is_never_glued_to_the_status_line(self):
        # Catches (issue 14 for go) the defect where _go_run prints the work answer while the live status line is still drawn
        # ("... · 0m00sthe answer"); cmd_once clears it first (reporter.close()), _go_run does not.
        for argv in (["once", "hi"], ["--no-goal", "x"]):
            with self.subTest(argv=argv):
                self.new_ws()
                code, screen = self.spawn(argv, self.pty_env(NO_COLOR="1", FAKE_TEXT="THE-ANSWER"))
                self.assertEqual(code, 0, screen)
                at = screen.rfind(b"THE-ANSWER")
                self.assertGreater(at, 0, screen)
                before = screen[:at]
                self.assertTrue(before.endswith(b"\n") or before.endswith(b"\r\x1b[K"), before[-80:])


# --- 8. a wake with nothing new after "achieved" pays nothing ---

class EmptyWake(Base):
    def test_table(self):
        p = self.run_cli(["write md2html"], extra=self.paid())
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        n = len(self.calls())
        rows = [  # argv, stdin, exit code, new model calls?, "nothing new" said?
            ([], b"", 0, False, True),
            (["-q"], b"", 0, False, True),
            (["--json"], b"", 0, False, True),
            (["--rounds", "1"], b"", 0, False, True),
            (["also handle tables"], b"", 0, True, False),
            ([], b"", 0, False, True),                  # achieved again after the new sentence
            (["-"], b"and lists\n", 0, True, False),
            (["--new", "another task"], b"", 0, True, False),
        ]
        for argv, stdin, code, paid, said in rows:
            with self.subTest(argv=argv):
                p = self.run_cli(argv, extra=self.paid(), stdin=stdin)
                err = p.stderr.decode()
                self.assertEqual(p.returncode, code, err)
                self.assertEqual(len(self.calls()) > n, paid, err)
                self.assertEqual(err.count("nothing new was said"), 1 if said else 0, err)
                if argv == ["-q"]:
                    self.assertEqual(err.splitlines()[0], "the goal was achieved and nothing new was said: nothing to "
                                                          "do (say something new, or --new)")
                if argv == ["--json"]:
                    summary = lines_json(p.stdout)[-1]
                    self.assertEqual((summary["kind"], summary["data"]["exit_code"], summary["data"]["cost_usd"]),
                                     ("summary", 0, 0))
                    self.assertEqual(summary["data"]["reason"], "nothing new")
                if argv and argv[0] == "also handle tables":
                    work = [c for c in self.calls()[n:] if c["role"] == "work"]
                    self.assertIn("also handle tables", work[0]["prompt"])
                n = len(self.calls())

    def test_not_achieved_still_carries_on(self):
        p = self.run_cli(["--rounds", "1", "write md2html"], extra=self.paid(FAKE_JUDGE="VERDICT: not_yet"))
        self.assertEqual(p.returncode, 1, p.stderr.decode())
        n = len(self.calls())
        p = self.run_cli(["--rounds", "1"], extra=self.paid(FAKE_JUDGE="VERDICT: not_yet"))
        self.assertGreater(len(self.calls()), n)
        self.assertNotIn(b"nothing new was said", p.stderr)


# --- 9. Chinese, and go's answer on stdout ---

class Chinese(Base):
    def test_sessions_doctor_once_show_status_in_chinese(self):
        p = self.run_cli(["sessions", "--lang", "zh"], mode="nosdk")
        self.assertEqual(p.stdout.decode().strip(), "还没有存储的会话")
        p = self.run_cli(["doctor"], mode="nosdk", extra={"FLOWER_LANG": "zh"})
        out = p.stdout.decode()
        for needle in ("没有安装 claude-agent-sdk", "没有凭据", "设置无误", "连接被拒绝",
                       "状态目录"):
            self.assertIn(needle, out)
        self.assertNotIn("not installed", out)
        p = self.run_cli(["--lang", "zh", "once", "你好"], extra=self.paid())
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        closing = p.stderr.decode().strip().splitlines()[-1]
        self.assertRegex(closing, r"^会话 [0-9a-f-]{36} · \$0\.0100 · 清单 ")
        self.assertIn("1 轮", p.stderr.decode())
        p = self.run_cli(["sessions", "--lang", "zh"], mode="nosdk")
        self.assertRegex(p.stdout.decode(), r"\d+ 条")
        self.assertNotIn("entries", p.stdout.decode())
        p = self.run_cli(["show", "zzz", "--lang", "zh"], mode="nosdk")
        self.assert_one_error(p, 2, "没有以 'zzz' 开头的会话")
        p = self.run_cli(["status", "--lang", "zh"], mode="nosdk")
        self.assertIn("工作区", p.stdout.decode())

    def test_go_prints_the_work_answer_on_stdout(self):
        p = self.run_cli(["write md2html"], extra=self.paid(FAKE_TEXT="the final answer\nline two"))
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode(), "the final answer\nline two\n")
        self.assertIn("== clarify", p.stderr.decode())
        self.assertNotIn(b"==", p.stdout)
        p = self.run_cli(["--no-goal", "--new", "x"], extra=self.paid(FAKE_TEXT="no goal either"))
        self.assertEqual(p.stdout.decode(), "no goal either\n")


# --- 10. help ---

class Help(Base):
    GLOBAL = ("-w", "--workspace", "-r", "--run-dir", "-v", "--verbose", "-q", "--quiet", "--json", "--lang", "--store")

    def test_top_level_help_lists_global_options_and_exit_codes(self):
        p = self.run_cli(["--help"], mode="nosdk")
        self.assertEqual(p.returncode, 0)
        out = p.stdout.decode()
        for flag in self.GLOBAL:
            self.assertRegex(out, rf"(?m)^\s+(?:-\w(?: [A-Z_]+)?, )?{re.escape(flag)}\b")
        self.assertIn("exit codes:", out)
        for code, words in (("0", "done"), ("1", "a step failed"), ("2", "usage error"), ("3", "setup problem"),
                            ("4", "network down"), ("5", "another flower"), ("130", "interrupted")):
            self.assertRegex(out, rf"{code} {re.escape(words)}")
        for command in ("go", "once", "status", "doctor", "sessions", "show"):
            self.assertIn(command, out)

    def test_command_help_has_a_clean_usage_line(self):
        for command in ("go", "once", "status", "doctor", "sessions", "show"):
            with self.subTest(command=command):
                p = self.run_cli([command, "--help"], mode="nosdk")
                self.assertEqual(p.returncode, 0)
                out = p.stdout.decode()
                self.assertTrue(out.startswith(f"usage: python3 flower.py {command} "), out[:200])
                usage = out.split("\n\n")[0]
                self.assertNotIn("(= go)", usage)
                self.assertNotIn("COMMAND", usage)
                self.assertEqual(usage.count("python3 flower.py"), 1, usage)
                self.assertIn("--json", out)
                self.assertIn("exit codes:", out)

    def test_every_option_has_help_text(self):
        import flower
        parser = flower.build_parser()
        subparsers = next(a for a in parser._actions if a.choices and "once" in a.choices).choices
        for name, sub in [("", parser), *subparsers.items()]:
            for action in sub._actions:
                if action.option_strings and action.help is not argparse.SUPPRESS:
                    with self.subTest(command=name, option=action.option_strings):
                        self.assertTrue((action.help or "").strip())
        p = self.run_cli(["show", "--help"], mode="nosdk")
        self.assertRegex(p.stdout.decode(), r"--raw\s+\S")
        p = self.run_cli(["once", "--help"], mode="nosdk")
        self.assertRegex(p.stdout.decode(), r"--model MODEL\s+\S")

    def test_show_unknown_prefix_and_one_turn(self):
        p = self.run_cli(["once", "hi"], extra=self.paid())
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertIn("· 1 turn ·", p.stderr.decode())
        self.assertNotIn("1 turns", p.stderr.decode())
        p = self.run_cli(["show", "zzz"], mode="nosdk")
        self.assert_one_error(p, 2, "no stored session starts with 'zzz'")
        p = self.run_cli(["status"], mode="nosdk")
        self.assertRegex(p.stdout.decode(), r"ok  once\s+\$0\.0100 1 turn  ")
        self.assertNotIn("1 turns", p.stdout.decode())
        import flower
        for n, lang, want in ((0, "en", "0 turns"), (1, "en", "1 turn"), (2, "en", "2 turns"), (1, "zh", "1 轮"),
                              (5, "zh", "5 轮")):
            self.assertEqual(flower.n_turns(n, lang), want)


if __name__ == "__main__":
    unittest.main()
