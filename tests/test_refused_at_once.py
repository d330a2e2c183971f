"""A run refused for its setup is refused before the SDK is imported (issue 38).

Importing claude_agent_sdk costs over a second of CPU (its MCP models); ``go``, ``once`` and ``side``
imported it before they looked at the credentials and at the room for the CLI's transcripts, so a user
with no API key waited for that import to hear so, and the suite's refusal tests paid it every time.
Each case runs flower in a process of its own and asks, as flower exits, whether the SDK was loaded."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest

import flower
from tests.helpers import FLOWER, HAVE_SDK, ROOT, SKIP, base_env

# flower's main as `python flower.py ...` runs it; as it exits, whether the SDK was imported
PROBE = ("import sys, runpy\n"
         f"sys.argv = [{FLOWER!r}] + sys.argv[1:]; sys.path[0] = {ROOT!r}\n"
         "try:\n"
         f"    runpy.run_path({FLOWER!r}, run_name='__main__')\n"
         "finally:\n"
         "    sys.stderr.write('SDK-LOADED=%s\\n' % ('claude_agent_sdk' in sys.modules))\n")


@unittest.skipUnless(HAVE_SDK, SKIP)
class RefusedAtOnce(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.ws = os.path.join(self.tmp.name, "ws")
        self.home = os.path.join(self.tmp.name, "home")
        os.makedirs(self.ws)
        os.makedirs(self.home)
        self.env = base_env(self.home)

    def run_flower(self, *args, **env) -> tuple[int, str]:
        p = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=self.ws, env=dict(self.env, **env),
                           capture_output=True, text=True, timeout=120)
        return p.returncode, p.stderr

    def assert_refused_at_once(self, said: str, *args, **env) -> None:
        code, err = self.run_flower(*args, **env)
        self.assertEqual(code, flower.EXIT_SETUP, err)
        self.assertIn(said, err)
        self.assertIn("SDK-LOADED=False", err)
        self.assertNotIn("Traceback", err)

    def test_go_without_credentials(self):
        self.assert_refused_at_once(flower.text("er_no_credentials"), "go", "build a thing")

    def test_once_without_credentials(self):
        self.assert_refused_at_once(flower.text("er_no_credentials"), "once", "say hi")

    def test_a_run_that_passes_the_checks_does_import_it(self):
        # the probe can tell: with credentials and room, the refusal comes later (no server) and the SDK is loaded
        code, err = self.run_flower("once", "say hi", ANTHROPIC_API_KEY="sk-test-0000000000",
                                    FLOWER_MAX_OFFLINE_WAIT="0")
        self.assertIn("SDK-LOADED=True", err)


if __name__ == "__main__":
    unittest.main()
