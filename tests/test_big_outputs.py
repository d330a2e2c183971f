"""Big outputs at I/O speed (issue 44): what write_spills and redact() do to keep a huge tool output's
cost near writing it, without changing a byte of what reaches the disk."""

from __future__ import annotations

import os
import random
import tempfile
import unittest
import unittest.mock

import flower
from tests.secret_shapes import SHAPES

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


WORDS = ["pass", "passw", "password", "passwd", "passphrase", "pwd", "token", "secret", "key", "cred", "auth",
         "authorization", "dsn", "jwt", "webhook", "connection", "signature", "sig", "sig=", "bearer", "cookie",
         "mysql", "-u ", "--user", "://", "api_key", "client_secret", "x-amz-signature", "set-cookie"]
GLUE = ["=", ": ", " ", "\n", "\\n", '"', "'", "\\\"", "-", "--", "@", ".", "_", ";", ",", "\t", "://u:", "é", "漢"]


def planted(rng: random.Random, size: int) -> str:
    """A text of about ``size`` characters from trigger words (in any case), glue, words and secrets."""
    parts, n = [], 0
    while n < size:
        kind = rng.random()
        if kind < 0.3:
            word = rng.choice(WORDS)
            piece = "".join(c.upper() if rng.random() < 0.3 else c for c in word)
        elif kind < 0.6:
            piece = rng.choice(GLUE)
        elif kind < 0.97:
            piece = "".join(rng.choice("abcdefhilmnoprstu0123456789ABCDEF_") for _ in range(rng.randint(1, 24)))
        else:
            piece = rng.choice(SHAPES)[0]
        parts.append(piece)
        n += len(piece)
    return "".join(parts)


class GatedWordsMatchTheRules(unittest.TestCase):
    """On a long text redact() does not look for a word (nor try a marker pattern) the text cannot hold:
    a rare letter of it or a shorter word it holds is missing. That may only skip work."""

    def test_random_texts_with_words_near_each_other(self):
        rng = random.Random(44)
        sizes = [600, 2100, flower._GATED_AT + 100, 2 * flower._GATED_AT]
        texts = [planted(rng, rng.choice(sizes)) for _ in range(200)]
        for text in texts[:]:   # each text also without one letter or gate word, the rest left as it is
            gone = rng.choice(list(flower._RARE_LETTERS) + ["auth", "sig", "pass", "-u"])
            texts.append(text.replace(gone, "").replace(gone.upper(), ""))
        diffs = [t[:200] for t in texts if flower.redact(t, []) != flower._redact_reference(t, [])]
        self.assertEqual(diffs, [])

    def test_secrets_after_a_missing_gate(self):
        filler = "2026-12-05 INFO node-3 processed batch 17 in 12 ms\n" * 330   # no j, q, auth, sig, -u
        self.assertGreater(len(filler), flower._GATED_AT)
        for text, core, _ in SHAPES[:40] + [(f"Authorization: Bearer {SECRET}", SECRET, ""),
                                              (f"X-Amz-Signature={SECRET}", SECRET, ""),
                                              (f"my.JWT = {SECRET}", SECRET, ""), (f"mysql -p{SECRET}", SECRET, ""),
                                              (f"curl --user bob:{SECRET}", SECRET, ""),
                                              (f"AUTH_TOKEN={SECRET}", SECRET, "")]:
            for body in (filler + text, text + "\n" + filler, filler + text + filler):
                out = flower.redact(body, [])
                self.assertEqual(out, flower._redact_reference(body, []), text)
                self.assertNotIn(core, out, text)

    def test_a_word_the_text_cannot_hold_is_not_looked_for(self):
        text = "2026-12-05 INFO node-3 processed batch 17 in 12 ms\n" * 330 + "token=abc"
        self.assertGreater(len(text), flower._GATED_AT)
        tried = []

        class Recorded:
            def __init__(self, head, pattern):
                self.head, self.pattern = head, pattern

            def finditer(self, low):
                tried.append(self.head)
                return self.pattern.finditer(low)
        wrapped = [Recorded(head, p) for (head, _), p in zip(flower._MARKER_RESTS, flower._MARKER_ASSIGNED)]
        with unittest.mock.patch.object(flower, "_MARKER_ASSIGNED", wrapped):
            self.assertEqual(flower.redact(text, []), text)
        self.assertIn("token", tried)
        for head in ("jwt", "auth", "signature", "webhook", "pwd"):   # j, auth, sig, w missing
            self.assertNotIn(head, tried)
        places = flower._GatedPlaces(text)
        self.assertEqual(places.of("authorization"), [])
        self.assertEqual(places.of("--user", True), [])
        self.assertEqual(places.of("token"), [len(text) - 9])



class MarkerAfterAFlagLikeName(unittest.TestCase):
    """A marker in a name that a space and a word follow (``x_token_a token=v``) may be looked at as a
    flag; the next name's marker right after it must still be found (it was hidden: the value leaked)."""

    VALUE = "s3cr3tVal9Zq"   # no token shape: only the assignment rule can find it
    CASES = [f"x_token_a token={VALUE}", f"adsnx dsn={VALUE}", f"my-secret-x secret: {VALUE}",
             f"a_pwd_b pwd={VALUE}", f"old_auth_x auth_token={VALUE}", f"some_jwt_y jwt = '{VALUE}'",
             f"the--api-key-x key-z api_key={VALUE}", f"my_password_x passwd={VALUE}"]

    def test_the_value_goes(self):
        filler = "2026-12-05 INFO node-3 processed batch 17 in 12 ms\n" * 60
        for case in self.CASES:
            for body in (case, filler + case, filler + case + "\n" + filler):
                out = flower.redact(body, [])
                self.assertNotIn(self.VALUE, out, case)
                self.assertEqual(out, flower._redact_reference(body, []), case)


if __name__ == "__main__":
    unittest.main()
