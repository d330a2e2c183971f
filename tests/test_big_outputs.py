"""Big outputs at I/O speed (issue 44): what write_spills and redact() do to keep a huge tool output's
cost near writing it, without changing a byte of what reaches the disk."""

from __future__ import annotations

import os
import tempfile
import unittest
import unittest.mock

import flower

SECRET = "ghp_" + "A1b2C3d4" * 5


class SameTextRedactedOnce(unittest.TestCase):
    """A tool result and its toolUseResult copy hold the same text: one redaction serves both files."""

    def test_equal_texts_are_redacted_once_and_every_file_is_written(self):
        log = ("2026-12-05 INFO step ok\n" * 400) + f"token={SECRET}\n"
        other = log.replace("step", "stage")
        near = log[:-5] + "zzzz\n"   # same length, head and tail as ``log``: still another text
        with tempfile.TemporaryDirectory() as tmp:
            spills = {os.path.join(tmp, "a", "1-0.txt"): log, os.path.join(tmp, "a", "1-1.txt"): log[:],
                      os.path.join(tmp, "b", "2-0.txt"): "".join([log]), os.path.join(tmp, "a", "3-0.txt"): other,
                      os.path.join(tmp, "a", "4-0.txt"): near}
            calls = []
            real = flower.redact

            def counted(value, secrets=None):
                calls.append(value)
                return real(value, secrets)
            with unittest.mock.patch.object(flower, "redact", counted):
                flower.write_spills(spills)
            self.assertEqual(sorted(calls), sorted([log, other, near]))
            for path, text in spills.items():
                with open(path, encoding="utf-8") as fh:
                    self.assertEqual(fh.read(), real(text, flower._env_secrets()), path)
            with open(os.path.join(tmp, "b", "2-0.txt"), encoding="utf-8") as fh:
                self.assertNotIn(SECRET, fh.read())

    def test_files_already_written_cost_no_redaction(self):
        with tempfile.TemporaryDirectory() as tmp:
            spills = {os.path.join(tmp, f"{i}-0.txt"): "x" * 5000 for i in range(3)}
            flower.write_spills(spills)
            with unittest.mock.patch.object(flower, "redact", side_effect=AssertionError("redacted again")):
                flower.write_spills(spills)


if __name__ == "__main__":
    unittest.main()
