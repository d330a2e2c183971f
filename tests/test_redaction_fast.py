"""redact()'s shortcuts (issue 44) against the plain rules that _redact_reference() runs:

- the assignment rule looks only at markers the regex engine finds in a name that an operator follows,
  or (a flag) in a name that a name character starts before the marker and a value follows;
- the ``://`` rules run as one regex substitution each, also where a match is rejected;
- the shape runs are rejected by their first two characters before the prefixes are tried.

Each case is checked alone, among filler past _SMALL (the long-text path) and inside a JSON string; the
secret must go and the output must be the reference's."""

from __future__ import annotations

import json
import unittest

import flower

SECRET = "s3cr3tVal9Zq"
# (text, what must not survive)
FLAGS = [
    (f"deploy --api-key {SECRET}", SECRET),
    (f"deploy --db-password {SECRET} --verbose", SECRET),
    (f"cli -password {SECRET}", SECRET),
    (f"cli --client_secret  {SECRET}", SECRET),
    (f'run "--token" {SECRET}', SECRET),
    (f"run --x.auth-token {SECRET}", SECRET),
    (f"run --MASTER-KEY {SECRET}", SECRET),
    (f"--webhook-token {SECRET}", SECRET),
]
ASSIGNMENTS = [
    (f"api_key={SECRET}", SECRET),
    (f"API__KEY = '{SECRET}'", SECRET),
    (f'"apiKey": "{SECRET}"', SECRET),
    (f'{{\\"client_secret\\": \\"{SECRET}\\"}}', SECRET),
    (f"'password={SECRET}'", SECRET),
    (f"DB_PASSWORD:{SECRET}", SECRET),
    (f"x PGPASSPHRASE = {SECRET}", SECRET),
    (f"AuthToken: {SECRET}", SECRET),
    (f"SENTRY_DSN={SECRET}", SECRET),
    (f"my.jwt = {SECRET}", SECRET),
    (f"slack_webhook: {SECRET}", SECRET),
    (f"ConnectionString={SECRET}", SECRET),
    (f"X-Amz-Signature={SECRET}", SECRET),
    (f"user_credentials = {SECRET}", SECRET),
    (f"pwd: {SECRET}", SECRET),
    (f"token: {SECRET}", SECRET),   # a marker where the name starts
    (f"secret={SECRET}", SECRET),
    (f"passwd={SECRET}", SECRET),
    (f"dsn: {SECRET}", SECRET),
    (f"credentials={SECRET}", SECRET),
    (f"connectionString={SECRET}", SECRET),
]
URLS = [
    (f"see http://u:${{PW}}@h/x and https://bob:{SECRET}@db.example.com/x", SECRET),
    (f"a://u:<pw>@h b://u:{SECRET}@h", SECRET),
    ("https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX and http://x", "XXXXXXXXXXXXXXXXXXXXXXXX"),
    ("https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/1", "0123456789abcdef0123456789abcdef"),
]
TOKENS = [   # the prefixes the two-character check must let through, at a line start and after an escape
    ("ghp_" + "A1b2C3d4" * 5, "A1b2C3d4" * 5),
    ("ya29." + "a0AfH6SMB" * 4, "a0AfH6SMB" * 4),
    ("xoxb-" + "1234567890-" * 3 + "abcdefABCDEF", "abcdefABCDEF"),
    ("MTA4NzY1NDMyMTA5ODc2NTQz.GhIjKl.abcdefghijklmnopqrstuvwxyz12345", "abcdefghijklmnopqrstuvwxyz12345"),
    ("bot123456789:AA" + "b" * 33, "b" * 33),
    ("sk-ant-" + "x9Y8z7W6" * 4, "x9Y8z7W6" * 4),
]
LEFT = [   # markers in prose and code: nothing to redact, nothing the reference redacts either
    "the key lookup takes seconds", "monkey business as usual", "author_association: CONTRIBUTOR",
    "tokenizer: splits on whitespace", "sorted(items, key=lambda i: i[0])", "--keyboard layout us",
    "self.api_key = api_key or os.environ['API_KEY']", "def f(password: str) -> Token:",
    "2026-12-04 a-key--token-x -Wall -O2 -o build/out", "--password-file /run/pw",
]


def bodies(text: str) -> list[str]:
    filler = "2026-12-04 10:00:01 INFO worker: processed batch in 12 ms\n" * 60
    return [text, filler + text + "\n" + filler, json.dumps({"content": "$ run\n" + text + "\nexit 0"}),
            filler + json.dumps({"content": "$ run\n" + text + "\nexit 0"})]


class FastPathsMatchTheRules(unittest.TestCase):

    def check(self, cases):
        self.assertGreater(len(bodies("x")[1]), flower._SMALL)
        for text, secret in cases:
            for body in bodies(text):
                out = flower.redact(body, [])
                self.assertEqual(out, flower._redact_reference(body, []), body[-200:])
                self.assertNotIn(secret, out, body[-200:])

    def test_flags(self):
        self.check(FLAGS)

    def test_assignments(self):
        self.check(ASSIGNMENTS)

    def test_urls(self):
        self.check(URLS)

    def test_many_urls(self):   # past the count where the :// rules hand the text to the regex engine
        many = " ".join(f"http://u{i}:${{PW}}@h{i}/x https://api.example.com/{i}" for i in range(80))
        self.check([(many + f" https://bob:{SECRET}@db.example.com/x " + many, SECRET)] + [(many + " " + t, s)
                                                                                           for t, s in URLS])

    def test_token_shapes(self):
        self.check(TOKENS)
        self.check([("\\n" + token, core) for token, core in TOKENS])

    def test_prose_and_code_are_left(self):
        for text in LEFT:
            for body in bodies(text):
                self.assertEqual(flower.redact(body, []), body)
                self.assertEqual(flower._redact_reference(body, []), body)


if __name__ == "__main__":
    unittest.main()
