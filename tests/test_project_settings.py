"""Issue 42: the agents read the workspace's CLAUDE.md and project settings as ``claude -p`` there
would; ``--settings none`` isolates; ``status`` and ``doctor`` say what is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

import flower
from tests.helpers import E2ECase, HAVE_SDK, ROOT, Roles, SKIP, freeze_front

MARK = "PROJECT-RULE-MARK-4242"


class Choices(unittest.TestCase):
    def test_sources(self):
        self.assertEqual(flower.setting_sources_for(None), ["project", "local"])
        self.assertEqual(flower.setting_sources_for("project"), ["project", "local"])
        self.assertEqual(flower.setting_sources_for("none"), [])
        self.assertIsNone(flower.AgentSpec("x").setting_sources)

    def test_files_read_are_listed(self):
        with tempfile.TemporaryDirectory() as ws:
            os.makedirs(os.path.join(ws, ".claude"))
            for name in ("CLAUDE.md", ".claude/settings.local.json"):
                open(os.path.join(ws, name), "w").close()
            self.assertEqual(flower.project_settings_read(ws, ["project", "local"]),
                             ["CLAUDE.md", ".claude/settings.local.json"])
            self.assertEqual(flower.project_settings_read(ws, []), [])

    def cli(self, *args, env=None):
        return subprocess.run([sys.executable, os.path.join(ROOT, "flower.py"), *args], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": ROOT, **(env or {})}, timeout=120)

    def test_status_and_doctor_say_what_is_read(self):
        with tempfile.TemporaryDirectory() as ws:
            open(os.path.join(ws, "CLAUDE.md"), "w").close()
            p = self.cli("status", "-w", ws)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("CLAUDE.md", p.stdout)
            self.assertIn("flower's own rules win", p.stdout)
            p = self.cli("status", "-w", ws, "--settings", "none", "--json")
            self.assertIn("--settings none", json.loads(p.stdout)["settings"])
            p = self.cli("doctor", "-w", ws, "--json")
            self.assertTrue(any("CLAUDE.md" in c["what"] for c in json.loads(p.stdout)["checks"]))
            p = self.cli("status", "-w", ws, env={"FLOWER_SETTINGS": "everything"})
            self.assertEqual(p.returncode, 2)
            self.assertNotIn("Traceback", p.stderr)


@unittest.skipUnless(HAVE_SDK, SKIP)
class ClaudeMdReachesTheWork(E2ECase, unittest.TestCase):

    def setUp(self):
        super().setUp()
        with open(os.path.join(self.ws, "CLAUDE.md"), "w") as fh:
            fh.write(f"# Team rules\nAlways mention {MARK} in commit messages.\n")

    def work_saw_mark(self, roles: Roles) -> bool:
        bodies = roles.bodies("work")
        self.assertTrue(bodies)
        return any(MARK in json.dumps(b, ensure_ascii=False) for b in bodies)

    def test_claude_md_reaches_the_work_step_by_default_and_not_with_settings_none(self):
        freeze_front(self.ws, goal=False)   # about the work step: the brief as the clarify step leaves it
        self.flower("--no-goal")
        self.assertTrue(self.work_saw_mark(self.roles))
        self.roles = Roles()
        self.api.responder = self.roles
        self.flower("write hello again", "--new", "--no-goal", "--settings", "none")
        self.assertFalse(self.work_saw_mark(self.roles))


if __name__ == "__main__":
    unittest.main()
