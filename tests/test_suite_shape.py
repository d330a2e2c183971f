"""The suite's own shape (issue 38): test modules share scaffolding through tests/helpers.py and never
import each other, so changing one test module can never break another."""

from __future__ import annotations

import ast
import glob
import os
import unittest

from tests.helpers import ROOT


def test_modules() -> list[str]:
    return sorted(glob.glob(os.path.join(ROOT, "tests", "test_*.py")))


class SuiteShape(unittest.TestCase):
    def test_no_test_module_imports_another(self):
        found = []
        for path in test_modules():
            for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                if any(n.split(".")[:2][-1].startswith("test_") and n.startswith("tests.") for n in names):
                    found.append(f"{os.path.basename(path)}:{node.lineno}")
        self.assertEqual(found, [], "import shared scaffolding from tests.helpers instead")

    def test_scaffolding_is_defined_once(self):
        shared = {"ROOT", "FLOWER", "NO_SDK", "HAVE_SDK", "base_env", "closed_port", "wait_until", "Roles",
                  "role_of", "FakeRuntime", "PgCase", "shared_server"}
        found = []
        for path in test_modules():
            for node in ast.parse(open(path, encoding="utf-8").read()).body:
                names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else \
                    [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
                found += [f"{os.path.basename(path)}: {n}" for n in names if n in shared]
        self.assertEqual(found, [], "defined in tests/helpers.py")


if __name__ == "__main__":
    unittest.main()
