"""The program name in usage lines and suggestions follows how flower was invoked."""

import os
import subprocess
import sys
import tempfile
import unittest

import flower
from tests.helpers import FLOWER, ROOT, base_env


class ProgramName(unittest.TestCase):
    def test_name_from_argv0(self):
        self.assertEqual(flower.program_name("/venv/bin/flower"), "flower")
        self.assertEqual(flower.program_name("/src/flower.py"), "python3 flower.py")
        self.assertEqual(flower.program_name("/src/tests/run.py"), "python3 flower.py")
        self.assertEqual(flower.program_name(""), "python3 flower.py")

    def run_as(self, argv0_path, *args):
        with tempfile.TemporaryDirectory() as tmp:
            env = base_env(tmp)
            return subprocess.run([sys.executable, argv0_path, *args], cwd=tmp, env=env,
                                  capture_output=True, text=True, timeout=120)

    def test_installed_command_names_itself(self):
        with tempfile.TemporaryDirectory() as bindir:
            script = os.path.join(bindir, "flower")   # what pip's console script does
            with open(script, "w") as fh:
                fh.write(f"import sys\nsys.path.insert(0, {ROOT!r})\nfrom flower import main\nsys.exit(main())\n")
            usage = self.run_as(script, "--help")
            self.assertEqual(usage.returncode, 0, usage.stderr)
            self.assertIn("usage: flower [", usage.stdout)
            self.assertNotIn("flower.py", usage.stdout)
            sub = self.run_as(script, "status", "--help")
            self.assertIn("usage: flower status", sub.stdout)
            typo = self.run_as(script, "stauts")
            self.assertEqual(typo.returncode, 2)
            self.assertIn("did you mean: flower status?", typo.stderr)
            self.assertIn("one-word task: flower go stauts", typo.stderr)
            self.assertNotIn("flower.py", typo.stderr)
            bad = self.run_as(script, "--rounds", "0", "x")
            self.assertEqual(bad.returncode, 2)
            self.assertIn("(see: flower --help)", bad.stderr)

    def test_file_run_keeps_python3_flower_py(self):
        usage = self.run_as(FLOWER, "--help")
        self.assertIn('usage: python3 flower.py ["what should be done"]', usage.stdout)
        typo = self.run_as(FLOWER, "stauts")
        self.assertIn("did you mean: python3 flower.py status?", typo.stderr)


if __name__ == "__main__":
    unittest.main()
