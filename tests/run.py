"""Run the whole suite (or the modules named) and end with one plain line:
``N passed, N failed, N skipped``. Exit 0 only when nothing failed and something ran.

    python -m tests.run                      # everything
    python -m tests.run tests.test_e2e       # one module
"""

from __future__ import annotations

import os
import sys
import unittest


class CountingResult(unittest.TextTestResult):
    """Counts successes itself: how testsRun treats class-level skips differs between Pythons."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = 0

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1


def main(argv: list[str]) -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    sys.path.insert(0, root)
    loader = unittest.TestLoader()
    if argv:
        suite = unittest.TestSuite(loader.loadTestsFromName(name) for name in argv)
    else:
        suite = loader.discover("tests", top_level_dir=root)
    verbosity = 2 if os.environ.get("VERBOSE") else 1
    result = unittest.TextTestRunner(verbosity=verbosity, buffer=False, resultclass=CountingResult).run(suite)
    skipped = len(result.skipped)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.passed
    reasons = sorted({reason for _, reason in result.skipped})
    for reason in reasons:
        print(f"skipped: {reason}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
