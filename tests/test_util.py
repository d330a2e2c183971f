"""Utilities: atomic write, file lock, safe names, redaction, JSON state files."""

import os
import re
import stat
import subprocess
import sys
import tempfile
import unittest

import flower
from tests.helpers import ROOT, SECRETS



class AtomicWrite(unittest.TestCase):
    def test_replaces_whole_file_private_and_leaves_no_temp(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "state.json")
            flower.atomic_write(path, "one")
            flower.atomic_write(path, "two")
            with open(path) as fh:
                self.assertEqual(fh.read(), "two")
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            self.assertEqual(os.listdir(tmp), ["state.json"])

    def test_failed_write_keeps_the_old_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "state.json")
            flower.atomic_write(path, "old")
            with self.assertRaises(TypeError):
                flower.atomic_write(path, object())  # type: ignore[arg-type]
            with open(path) as fh:
                self.assertEqual(fh.read(), "old")
            self.assertEqual(os.listdir(tmp), ["state.json"])


class Lock(unittest.TestCase):
    def test_read_modify_write_across_processes_loses_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            counter = os.path.join(tmp, "n.json")
            flower.write_json(counter, 0)
            code = ("import sys; sys.path.insert(0, sys.argv[1]); import flower, os\n"
                    "lock = flower.FileLock(os.path.join(sys.argv[2], '.lock'))\n"
                    "for _ in range(100):\n"
                    "    with lock:\n"
                    "        n = flower.read_json(sys.argv[3], 0)\n"
                    "        flower.write_json(sys.argv[3], n + 1)\n")
            procs = [subprocess.Popen([sys.executable, "-c", code, ROOT, tmp, counter]) for _ in range(3)]
            for p in procs:
                self.assertEqual(p.wait(timeout=120), 0)
            self.assertEqual(flower.read_json(counter, None), 300)


class SafeName(unittest.TestCase):
    def test_table(self):
        self.assertEqual(flower.safe_name("work"), "work")
        self.assertEqual(flower.safe_name("干活"), "干活")
        for bad in ["../x", "a/b", "..", ".", "", "x\x00y", "a" * 300, "con:x", "/etc/passwd"]:
            name = flower.safe_name(bad)
            self.assertNotIn("/", name)
            self.assertNotIn("\x00", name)
            self.assertNotIn(name, ("", ".", ".."))
            self.assertLessEqual(len(name), 100)
            self.assertFalse(name.startswith("."))
        self.assertNotEqual(flower.safe_name("a/b"), flower.safe_name("a_b"))
        self.assertNotEqual(flower.safe_name("a" * 300), flower.safe_name("a" * 301))

    def test_kept_characters_are_exactly_the_documented_set(self):
        # the documented set, as the regex it once was: every code point is kept or replaced alike
        rule = re.compile(r"[A-Za-z0-9\-_.\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
        points = [*range(0x10000), *range(0x10000, 0x110000, 97)]
        differ = [hex(c) for c in points if flower._safe_char(chr(c)) != bool(rule.fullmatch(chr(c)))]
        self.assertEqual(differ, [])
        for edge in ("\u33ff", "\u3400", "\u4dbf", "\u4dc0", "\u4dff", "\u4e00", "\u9fff", "\ua000",
                     "\uf8ff", "\uf900", "\ufaff", "\ufb00", "/", "@", "[", "`", "{"):
            self.assertEqual(flower.safe_name(f"x{edge}") == f"x{edge}", bool(rule.fullmatch(edge)), hex(ord(edge)))


class ProjectKey(unittest.TestCase):
    def test_composed_and_decomposed_names_share_one_key(self):
        # the SDK keys by the NFC form: a decomposed path (as macOS hands them out) must meet the same key
        composed, decomposed = "/tmp/caf\u00e9-\u5de5\u4f5c", "/tmp/cafe\u0301-\u5de5\u4f5c"
        self.assertEqual(flower.project_key(decomposed), flower.project_key(composed))
        self.assertEqual(flower.project_key(composed), "-tmp-caf----")
        self.assertEqual(flower.project_key("/tmp/plain ascii"), "-tmp-plain-ascii")


ASSIGNMENTS = ["password=hunter2xyz", "TOKEN: abcdef123456", "db_secret = 's3cr3t-value'", "api_key=zzz999"]


class Redact(unittest.TestCase):
    def test_corpus(self):
        for secret in SECRETS:
            out = flower.redact(f"before {secret} after")
            self.assertNotIn(secret, out)
            self.assertIn("[REDACTED]", out)
            self.assertTrue(out.startswith("before "))
        for line in ASSIGNMENTS:
            value = line.split("=")[-1].split(":")[-1].strip().strip("'")
            self.assertNotIn(value, flower.redact(line), line)

    def test_env_values(self):
        old = os.environ.get("ANTHROPIC_API_KEY")
        os.environ["ANTHROPIC_API_KEY"] = "plainvalue-without-prefix-42"
        try:
            self.assertNotIn("plainvalue-without-prefix-42", flower.redact("key is plainvalue-without-prefix-42."))
        finally:
            if old is None:
                del os.environ["ANTHROPIC_API_KEY"]
            else:
                os.environ["ANTHROPIC_API_KEY"] = old

    def test_leaves_ordinary_text(self):
        ordinary = "Run git status, then edit flower.py line 40; the token count is 12000."
        self.assertEqual(flower.redact(ordinary), ordinary)


class JsonState(unittest.TestCase):
    def test_corrupt_file_is_set_aside_not_wiped(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "lineage.json")
            with open(path, "w") as fh:
                fh.write("{not json")
            told = []
            self.assertEqual(flower.read_json(path, {"fresh": True}, notify=told.append), {"fresh": True})
            self.assertFalse(os.path.exists(path))
            aside = [n for n in os.listdir(tmp) if n.startswith("lineage.json.corrupt-")]
            self.assertEqual(len(aside), 1)
            with open(os.path.join(tmp, aside[0])) as fh:
                self.assertEqual(fh.read(), "{not json")
            self.assertEqual(len(told), 1)
            # a second corrupt file in the same second gets its own name
            with open(path, "w") as fh:
                fh.write("[]")
            flower.read_json(path, {}, expect=dict)
            self.assertEqual(len([n for n in os.listdir(tmp) if ".corrupt-" in n]), 2)

    def test_missing_is_default(self):
        self.assertEqual(flower.read_json("/nonexistent/x.json", 7), 7)


if __name__ == "__main__":
    unittest.main()


class Records(unittest.TestCase):
    """``@record``: a dataclass made on first instantiation (cold start does not pay for dataclasses)."""

    def make(self):
        @flower.record
        class Point:
            x: int
            y: int = 0
            tags: list = flower.field(default_factory=list)

            def norm(self):
                return abs(self.x) + abs(self.y)
        return Point

    def test_a_record_behaves_like_a_dataclass_once_made(self):
        import dataclasses
        point = self.make()
        self.assertNotIn("__dataclass_fields__", point.__dict__)   # nothing made at definition
        a, b = point(1, y=2), point(1, 2)
        self.assertEqual(a, b)
        self.assertIn("(x=1, y=2, tags=[])", repr(a))
        self.assertEqual(a.norm(), 3)
        a.tags.append("t")
        self.assertEqual(b.tags, [])   # default_factory: one list per instance
        self.assertEqual([f.name for f in dataclasses.fields(a)], ["x", "y", "tags"])
        self.assertEqual(dataclasses.asdict(dataclasses.replace(a, y=5)), {"x": 1, "y": 5, "tags": ["t"]})
        with self.assertRaises(TypeError):
            point()   # x is required

    def test_made_once_when_threads_race_to_the_first_instance(self):
        import threading
        point = self.make()
        errors, barrier = [], threading.Barrier(8)

        def first():
            barrier.wait()
            try:
                point(3)
            except Exception as exc:   # noqa: BLE001 - any failure is the finding
                errors.append(exc)
        threads = [threading.Thread(target=first) for _ in range(8)]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)   # switch threads as often as possible: the race shows if it exists
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(interval)
        self.assertEqual(errors, [])
        self.assertEqual(point(3), point(3))

    def test_help_and_status_load_no_heavy_module(self):
        heavy = ("asyncio", "claude_agent_sdk", "dataclasses", "inspect", "socket", "uuid", "hashlib", "ssl",
                 "psycopg", "shlex", "difflib", "random", "threading")
        path = os.path.join(ROOT, "flower.py")   # run as a script is; not runpy, whose pkgutil imports typing
        probe = ("import sys; sys.argv = ['flower.py', *sys.argv[1:]]\n"
                 "try:\n    exec(compile(open(%r, encoding='utf-8').read(), %r, 'exec'), {'__name__': '__main__'})\n"
                 "except SystemExit:\n    pass\n"
                 "sys.__stdout__.write('\\nMODULES ' + ' '.join(sorted(sys.modules)))" % (path, path))
        # --help needs even less: no JSON, no signals, no typing, and argparse's shutil (bz2, lzma) neither
        help_only = ("json", "signal", "shutil", "typing", "bz2", "lzma")
        site = set(subprocess.run([sys.executable, "-c", "import sys; print(' '.join(sys.modules))"],
                                  capture_output=True, text=True).stdout.split())
        with tempfile.TemporaryDirectory() as ws:
            notes = os.path.join(ws, ".flower", "notes")   # a used workspace: a brief and a goal to read
            os.makedirs(notes)
            with open(os.path.join(notes, "brief.md"), "w") as fh:
                fh.write("## Goal\nx\n## Acceptance\ny\n## Bounds\nz\n## Unknowns and assumptions\nnone\n")
            with open(os.path.join(notes, "goal.md"), "w") as fh:
                fh.write("# Goal\nx\n\n# Checks\n- y\n")
            subprocess.run([sys.executable, os.path.join(ROOT, "flower.py"), "status"], cwd=ws,
                           capture_output=True, check=False)
            for args in (["--help"], ["status"], ["status", "--json"]):
                out = subprocess.run([sys.executable, "-c", probe, *args], cwd=ws, capture_output=True,
                                     text=True).stdout
                loaded = set(out.rsplit("MODULES ", 1)[-1].split())
                self.assertIn("argparse", loaded, args)   # the probe saw the run
                self.assertEqual(sorted(m for m in heavy if m in loaded - site), [], args)
                if args == ["--help"]:
                    self.assertEqual(sorted(m for m in help_only if m in loaded - site), [], args)
