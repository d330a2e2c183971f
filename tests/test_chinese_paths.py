"""Issue 42 item 5: Chinese everywhere, English everywhere. The error paths a user reaches cheaply
(bad options, a bad --store or --state, missing psycopg, a busy workspace, damaged state files,
unusable settings, the inbox commands with nothing to say) are walked in both languages: with
FLOWER_LANG=zh no line holds an English sentence, with en no line holds Chinese. And statically:
every FlowerError (Offline, Busy, StepAbort) raised in flower.py takes its words from the text
tables, so a new English-only literal goes red here. (--help of every command: tests.test_chinese.)"""

from __future__ import annotations

import ast
import fcntl
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import flower
from tests.helpers import AS_SCRIPT, FLOWER, RUN_FLOWER, base_env

CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
ENGLISH = re.compile(r"\b[A-Za-z]{2,}(?:[ ,;:]+[A-Za-z']{2,}){2,}")   # three English words in a row
NOT_WORDS = re.compile(
    r"^flower: |python3 flower\.py|'[^']*'|\"[^\"]*\"|"   # the program, what the user typed, quoted values
    r"--[\w-]+|\b\w+:\w+\b|"                            # options, module:factory
    r"\S*/\S*|"                                          # paths, URLs
    r"\b\w+(?:, \w+){2,}|"                               # lists of names (tools, choices)
    r"(?<=[\u4e00-\u9fff])\([\x20-\x27\x2a-\x7e]*\)")   # the system's own words, quoted in a Chinese line


def english_lines(output: str) -> list[str]:
    """Lines holding an English phrase once paths, quoted values, name lists and the system's
    quoted words (SQLite's, in parentheses right after Chinese) are taken out."""
    return [line for line in output.splitlines() if ENGLISH.search(NOT_WORDS.sub(" ", line))]


HIDE_PSYCOPG = "import sys; sys.modules['psycopg'] = None"
HIDE_SDK = "import sys; sys.modules['claude_agent_sdk'] = None"
HAVE_PSYCOPG = importlib.util.find_spec("psycopg") is not None
DEAD_PG = "postgresql://nobody@127.0.0.1:1/db"


def _busy(ws):
    """Another (live) flower holds the workspace's lock, with its record written."""
    os.makedirs(os.path.join(ws, ".flower"), mode=0o700)
    fd = os.open(os.path.join(ws, ".flower", "flower.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, json.dumps({"pid": 4242, "host": "box", "path": ws, "since": "2026-01-01T00:00:00Z",
                             "what": "workspace ~/ws", "step": "work"}).encode())
    return fd


def _run_dir_is_a_file(ws):
    with open(os.path.join(ws, ".flower"), "w") as fh:
        fh.write("x")


def _lineage_is_a_dir(ws):
    os.makedirs(os.path.join(ws, ".flower", "lineage.json"))


def _store_is_a_dir(ws):
    os.makedirs(os.path.join(ws, ".flower", "sessions.db"))


def _store_is_junk(ws):
    os.makedirs(os.path.join(ws, ".flower"))
    with open(os.path.join(ws, ".flower", "sessions.db"), "wb") as fh:
        fh.write(b"junk" * 2000)


# (arguments, extra environment, code run before flower, setup of the workspace, exit code, needs)
PATHS = [
    (["status", "--store", "nocolon"], {}, None, None, 2, None),
    (["status", "--store", "no_such_module_zh42:make"], {}, None, None, 3, None),
    (["status", "--store", "json:JSONDecoder"], {}, None, None, 3, None),
    (["once", "-t", "Reed", "x"], {}, None, None, 2, None),
    (["once", "-t", "Zzzz", "x"], {}, None, None, 2, None),
    (["go", "hi"], {"ANTHROPIC_BASE_URL": "ftp://x"}, None, None, 3, None),
    (["go", "hi"], {"HTTPS_PROXY": "http://bad host"}, None, None, 3, None),
    (["go", "hi"], {"FLOWER_NO_PROBE": "maybe"}, None, None, 3, None),
    (["status", "--state", "postgresql://u@[bad"], {}, None, None, 3, "psycopg"),
    (["status", "--state", DEAD_PG], {"FLOWER_MAX_OFFLINE_WAIT": "0"}, None, None, 4, "psycopg"),
    (["go", "hi", "--state", DEAD_PG], {"FLOWER_MAX_OFFLINE_WAIT": "0"}, HIDE_SDK, None, 4, "psycopg"),
    (["status", "--state", DEAD_PG], {}, HIDE_PSYCOPG, None, 3, None),
    (["go", "hi"], {}, HIDE_SDK, _busy, 5, None),
    (["status"], {}, None, _run_dir_is_a_file, 3, None),
    (["status"], {}, None, _lineage_is_a_dir, 0, None),
    (["sessions"], {}, None, _store_is_a_dir, 3, None),
    (["sessions"], {}, None, _store_is_junk, 3, None),
    (["show", "zzz"], {}, None, None, 2, None),
    (["report", "-o", "/nonexistent-zh42/x/report.html"], {}, None, None, 3, None),
    (["answer", "123", "hi"], {}, None, None, 2, None),
    (["say", ""], {}, None, None, 2, None),
    (["ask", ""], {}, None, None, 2, None),
]


class ErrorPaths(unittest.TestCase):
    """Each path in Chinese and in English: the same exit code, each language alone."""

    def run_path(self, args, lang, extra, before, setup):
        with tempfile.TemporaryDirectory() as tmp:
            ws = os.path.join(tmp, "ws")
            os.makedirs(ws)
            held = setup(ws) if setup else None
            env = dict(base_env(tmp), ANTHROPIC_API_KEY="sk-test", FLOWER_LANG=lang, COLUMNS="100", **extra)
            cmd = RUN_FLOWER if before is None else [sys.executable, "-c", f"{before}; {AS_SCRIPT}"]
            try:
                p = subprocess.run(cmd + args, cwd=ws, env=env, capture_output=True, stdin=subprocess.DEVNULL,
                                   timeout=120)
            finally:
                if held is not None:
                    os.close(held)
            return p.returncode, p.stdout.decode("utf-8") + p.stderr.decode("utf-8")

    def test_every_path_in_chinese_and_in_english(self):
        for args, extra, before, setup, expected, needs in PATHS:
            with self.subTest(args=args, extra=extra, setup=setup and setup.__name__):
                if needs == "psycopg" and not HAVE_PSYCOPG:
                    continue
                code, zh = self.run_path(args, "zh", extra, before, setup)
                self.assertEqual(code, expected, zh)
                self.assertTrue(CJK.search(zh), zh)
                self.assertEqual(english_lines(zh), [], zh)
                self.assertNotIn("Traceback", zh)
                code, en = self.run_path(args, "en", extra, before, setup)
                self.assertEqual(code, expected, en)
                self.assertFalse(CJK.search(en), en)
                self.assertTrue(english_lines(en) or re.search(r"\b[a-z]{2,} [a-z]{2,}\b", en), en)

    def test_the_checker_sees_english(self):
        self.assertEqual(english_lines("flower: 另一个 flower 正在驱动工作区 ~/ws(pid 1);请等它结束"), [])
        self.assertEqual(english_lines("flower: ~/x/sessions.db 不是可用的会话库(file is not a database)"), [])
        self.assertTrue(english_lines("flower: the state database x is unreachable"))
        self.assertTrue(english_lines("flower: 状态数据库 (wait for it or stop it first)"))


RAISERS = {"FlowerError", "Offline", "Busy", "StepAbort"}
SAYERS = {"print", "say", "notify", "warn"}
TABLE = {"text", "said", "t"}   # t: text with the language bound (functools.partial)


def _name(func):
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def own_words(message: ast.AST) -> list[str]:
    """The words in a message expression that do not come from the text tables: string literals
    outside text()/said() calls (subscripts, ``.get`` keys and JSON lines aside: data, not words), and a
    message that is only ``str(something)`` (an exception's or a library's own English)."""
    found = []
    if isinstance(message, ast.Call) and _name(message.func) == "str":
        found.append(ast.unparse(message))

    def visit(node):
        if isinstance(node, ast.Call) and _name(node.func) in TABLE:
            return
        if isinstance(node, ast.Call) and _name(node.func) == "get":   # data.get("key", ...)
            node = ast.Tuple(elts=node.args[1:] + [node.func], ctx=ast.Load())
        if isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Call) and _name(node.func) in ("dumps", "Event"):   # a JSON line, for programs
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.search(r"[A-Za-z]{2,}", re.sub(r"\bflower\b|\bctx\b", "", node.value)):
                found.append(node.value)
        for child in ast.iter_child_nodes(node):
            visit(child)
    visit(message)
    return found


def english_sites(source: str, names: set[str]) -> list[str]:
    """``line: call`` for every call of ``names`` whose message has words of its own."""
    sites = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args and _name(node.func) in names:
            words = own_words(node.args[0])
            if words:
                sites.append(f"{node.lineno}: {_name(node.func)}({words[0]!r})")
    return sites


class FromTheTables(unittest.TestCase):
    def setUp(self):
        with open(FLOWER, encoding="utf-8") as fh:
            self.source = fh.read()

    def test_every_error_raised_takes_its_words_from_the_tables(self):
        self.assertEqual(english_sites(self.source, RAISERS), [])

    def test_every_line_printed_takes_its_words_from_the_tables(self):
        self.assertEqual(english_sites(self.source, SAYERS), [])

    def test_the_check_sees_a_literal(self):
        bad = ('raise FlowerError(f"cannot read {path}", 3)\nraise Busy("busy", {})\n'
               'raise FlowerError(str(data.get("error")))\nreporter.say(f"flower: once failed: {e}")\n')
        self.assertEqual(len(english_sites(bad, RAISERS | SAYERS)), 4)
        good = ('raise FlowerError(said("er_x", path=p), 3)\nraise FlowerError(text("k", lang) + more)\n'
                'print(f"flower: {text(\'k\', lang)}")\nself.say(f"  {data[\'message\']}")\n')
        self.assertEqual(english_sites(good, RAISERS | SAYERS), [])

    def test_said_is_said_in_the_language_it_is_shown_in(self):
        exc = flower.FlowerError(flower.said("er_cannot_read", path="/x", error=flower.said("os_EACCES")))
        self.assertEqual(str(exc), "cannot read /x: Permission denied")
        self.assertEqual(exc.said("zh"), "无法读取 /x:没有权限")
        self.assertEqual(flower.text("ui_failed", "zh", error=flower.said("er_interrupted")), "失败:已中断")

    def test_a_failed_step_and_a_busy_lock_said_in_chinese(self):
        import io
        err = io.StringIO()
        reporter = flower.Reporter(lang="zh", err=err, tty=False)
        reporter.event(flower.Event("result", step="work", data={"ok": False, "cost_usd": 0.0, "turns": 0, "attempts": 1,
                                                                 "error": flower.said("er_stalled", seconds=300)}))
        reporter.say(flower.said("warn_not_a_number", name="FLOWER_MAX_DELAY", raw="'x'"))
        self.assertIn("CLI 已有 300 秒没有消息", err.getvalue())
        self.assertIn("  工作:失败", err.getvalue())   # the step's name too, as in its header
        self.assertIn("忽略 FLOWER_MAX_DELAY='x':不是非负数", err.getvalue())
        self.assertEqual(english_lines(err.getvalue()), [])
        lock = flower.DriverLock("/nonexistent", "step work")
        self.assertEqual(lock.busy_line({}).in_lang("zh"), "另一个 flower 正在驱动步骤 work(持有者没有留下记录,无法指明是谁);"
                                                           "请等它结束,或先停掉它")
        self.assertEqual(str(lock.busy_line({"pid": 7})), "another flower drives step work (pid 7, start time unknown); "
                                                          "wait for it or stop it first")

    def test_every_key_in_both_tables_with_the_same_fields(self):
        import string
        en, zh = flower.TEXTS["en"], flower.TEXTS["zh"]
        self.assertEqual(set(en) - set(zh), set())
        for key in en:
            fields = [{f for _, f, _, _ in string.Formatter().parse(table[key]) if f} for table in (en, zh)]
            self.assertEqual(fields[0], fields[1], key)

    def test_the_parser_has_no_words_of_its_own(self):
        start = self.source.index("def build_parser(")
        body = self.source[start:self.source.index("\nclass _Unbuilt", start)]
        helps = re.findall(r"\bhelp=(?!argparse\.SUPPRESS)", body)
        self.assertEqual(helps, [])
        self.assertNotIn("description=\"", body)
        parser = flower.build_parser(None, "zh")
        self.assertIn("要做什么", parser.format_help())


if __name__ == "__main__":
    unittest.main()
