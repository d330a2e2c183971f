"""Core tier for issue 40: which words repeat what a job was already told (a re-run that continues)."""

from __future__ import annotations

import unittest

import flower


class SaidBefore(unittest.TestCase):
    BRIEF = ("## Goal\nx\n\n### Added on wake 2026-01-01 10:00\nalso tables\nand\n  lists\n\n"
             "### Added on wake 2026-01-02 10:00\nsecond words\n")

    def test_the_task_a_pending_sentence_or_an_appended_one_repeat(self):
        brief = self.BRIEF
        self.assertTrue(flower.said_before("build  X\n", "build X", [], ""))
        self.assertTrue(flower.said_before("pending", None, ["pending"], ""))
        self.assertTrue(flower.said_before("also tables", None, [], brief))
        self.assertTrue(flower.said_before("second words", None, [], brief))

    def test_new_words_or_part_of_a_sentence_do_not(self):
        brief = self.BRIEF
        self.assertFalse(flower.said_before("build Y", "build X", ["pending"], brief))
        self.assertFalse(flower.said_before("tables", None, [], brief))
        self.assertFalse(flower.said_before("x", None, [], brief))        # the brief's own text is not a wake
        self.assertFalse(flower.said_before("   ", "build X", [], brief))


if __name__ == "__main__":
    unittest.main()
