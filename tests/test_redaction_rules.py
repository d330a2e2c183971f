"""Redaction, third round (issue 37) and its speed (issue 44).

- every secret of tests/secret_shapes.SHAPES (137 shapes, each with its reason) in six carriers, through
  every place flower writes or prints: no survivor, every JSON line parses;
- the code and prose lines of CODE (97, with the six lines issue 37 found damaged) come through unchanged;
- every rule is needed: with any one of them left out, some shape survives;
- on real text (the running Python's standard library, the real CLI transcripts in tests/fixtures) every
  line redact() changes is in the reviewed fixture tests/redaction_stdlib.json, and every
  reviewed line that exists here is still changed;
- redact() (prefilter, shape runs, words found once) gives exactly what _redact_reference() (every rule
  over the whole text) gives, on all of the above and the bench corpora."""

from __future__ import annotations

import json
import os
import sysconfig
import tempfile
import unittest
from unittest import mock

import flower
from tests.secret_shapes import CODE, SHAPES, api_dump, build_log, source_files, transcript_mix
from tests.redaction_table import NAMED, PROSE, places
from tests.redaction_table import SHAPES as OLD_SHAPES

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "redaction_stdlib.json")   # not in fixtures/: that folder holds transcripts
JSON_PLACES = ("event --json", "manifest row", "show --raw", "lineage start record")


def carriers(secret: str) -> dict[str, str]:
    """The secret as it reaches flower: on its own, after a log label, in a JSON string (a tool's input
    or output in a transcript), in a JSON string inside a JSON string, among other lines, in a YAML list."""
    return {
        "alone": secret,
        "after a label": f"2026-12-04 10:00:01 INFO worker[3]: {secret}",
        "in a JSON string": json.dumps({"type": "tool_result", "content": f"$ run\n{secret}\nexit 0"}),
        "JSON in JSON": json.dumps(json.dumps({"output": f"step 1\n{secret}"})),
        "among lines": f"Building...\n{secret}\nDone in 3.2 s",
        "in a list": f"env:\n  - {secret}\n  - DEBUG=1",
    }


def survivors(body: str, core: str, rendered: str) -> bool:
    return core in rendered or core in rendered.replace("\\n", "\n") or core in rendered.replace("\\", "")


def stdlib_files() -> list[tuple[str, str]]:
    """(path relative to the standard library, text) of every .py file, in a stable order."""
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "__pycache__"))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                try:
                    with open(path, encoding="utf-8") as fh:
                        out.append((os.path.relpath(path, root), fh.read()))
                except (OSError, UnicodeDecodeError):
                    continue
    return out


def changed_lines(text: str) -> list[str]:
    """The lines redact() changes in ``text`` (stripped)."""
    new = flower.redact(text, [])
    if new == text:
        return []
    return [a.strip() for a, b in zip(text.split("\n"), new.split("\n")) if a != b]


class Shapes(unittest.TestCase):
    def test_at_least_100_shapes_each_with_its_reason(self):
        self.assertGreaterEqual(len(SHAPES), 100)
        self.assertEqual(len({text for text, _, _ in SHAPES}), len(SHAPES))
        for text, core, why in SHAPES:
            self.assertTrue(why and core and core in text, why)

    def test_no_shape_survives_any_carrier_or_place_and_json_parses(self):
        missed, n = [], 0
        with tempfile.TemporaryDirectory() as tmp, mock.patch("os.fsync"):   # what is written, not how durably
            for text, core, why in SHAPES:
                for carrier, body in carriers(text).items():
                    n += 1
                    for place, rendered in places(body, tmp).items():
                        if survivors(body, core, rendered):
                            missed.append(f"{why} / {carrier} -> {place}")
                        if place in JSON_PLACES:
                            json.loads(rendered)
        self.assertGreaterEqual(n, 100 * 6)
        self.assertEqual(missed, [], f"{len(missed)} survivors")

    def test_the_six_lines_of_issue_37_stay_and_so_does_all_code_and_prose(self):
        six = ["self.api_key = os.environ['API_KEY']", "password = getpass.getpass('Password: ')",
               "auth = request.headers.get('Authorization')", "c.token = t", "Authorization: see the gateway docs"]
        self.assertTrue(all(line in CODE for line in six))
        self.assertIn("getpass.getpass(", " ".join(CODE))
        self.assertGreaterEqual(len(CODE), 80)
        changed = [(line, flower.redact(line, [])) for line in CODE + PROSE if flower.redact(line, []) != line]
        self.assertEqual(changed, [])
        block = "\n".join(CODE)       # as one text too (a source file a tool read)
        self.assertEqual(flower.redact(block, []), block)
        self.assertEqual(flower.redact(json.dumps({"content": block}), []), json.dumps({"content": block}))

    def test_issue_37_cases(self):
        cases = {
            "INFO: DB_PASSWORD=hunter2xyz9": "INFO: DB_PASSWORD=[REDACTED]",
            "note=SECRET=s3cr3t-value": "note=SECRET=[REDACTED]",
            "Step two: password=Tr0ub4dor&3": "Step two: password=[REDACTED]&3",
            '{"cmd": "export GITHUB_TOKEN=abc123def456"}': '{"cmd": "export GITHUB_TOKEN=[REDACTED]"}',
            'curl -H "x-api-key: k3y-v4lue-123" -u bob:pa55word https://x':
                'curl -H "x-api-key: [REDACTED]" -u bob:[REDACTED] https://x',
            "mysql -u root -pS3cretPw db": "mysql -u root -p[REDACTED] db",
            "deploy --password hunter22 --token=abcdef123": "deploy --password [REDACTED] --token=[REDACTED]",
            "Cookie: sid=abc123def; theme=dark": "Cookie: sid=[REDACTED]; theme=dark",
            "Server=x;User Id=u;Password=p4ssw0rd;": "Server=x;User Id=u;Password=[REDACTED];",
            "?sv=2020&sig=abcDEF%2F123&se=2025": "?sv=2020&sig=[REDACTED]&se=2025",
            "Authorization: see the gateway docs": "Authorization: see the gateway docs",
            "self.api_key = os.environ['API_KEY']": "self.api_key = os.environ['API_KEY']",
        }
        for text, want in cases.items():
            self.assertEqual(flower.redact(text, []), want, text)

    def test_credential_variables_from_the_environment(self):
        named = {"PGPASSWORD": "pg-4711-value", "SENTRY_DSN": "https://k@s.example/1", "APP_CONNECTION_STRING": "Host=a;x=1",
                 "SLACK_WEBHOOK_URL": "https://example.com/hook/abc", "AUTH_JWT": "jwt-value-0815",
                 "DOCKER_AUTH_CONFIG": '{"auths":{}}1234', "MY_SERVICE_TOKEN": "no-shape-4711x"}
        harmless = {"SSH_AUTH_SOCK": "/tmp/ssh-agent.sock", "GIT_AUTHOR_NAME": "flower bot", "AUTH_TYPE": "basic-auth"}
        with mock.patch.dict(os.environ, {**named, **harmless}):
            found = set(flower._env_secrets())
        self.assertTrue(set(named.values()) <= found, set(named.values()) - found)
        self.assertFalse(set(harmless.values()) & found)

    def test_secret_names_both_sides(self):
        for name in ("PGPASSWORD", "SENTRY_DSN", "DB_CONNECTION_STRING", "ConnectionString", "SLACK_WEBHOOK_URL",
                     "AUTH_JWT", "jwt_secret", "DOCKER_AUTH_CONFIG", "X-Amz-Signature", "X-Amz-Security-Token",
                     "AccountKey", "client-key-data", "_authToken", "csrftoken", "x-api-key", "MYSQL_PWD"):
            self.assertTrue(flower._secret_name(name), name)
        for name in ("author", "GIT_AUTHOR_NAME", "SSH_AUTH_SOCK", "auth_method", "signature", "webhook_id",
                     "tokenizer", "keyboard", "password_file", "token_count", "jwt_algorithm"):
            self.assertFalse(flower._secret_name(name), name)


class EveryRuleIsNeeded(unittest.TestCase):
    """Leave out any one rule and some shape survives: each rule has a test that goes red without it."""

    def survivors_without(self, **patches) -> list[str]:
        with mock.patch.multiple(flower, **patches) if patches else mock.patch.dict({}):
            return [why for text, core, why in SHAPES
                    if any(survivors(b, core, flower.redact(b, [])) for b in carriers(text).values())]

    def test_each_shape_rule(self):
        self.assertEqual(self.survivors_without(), [])
        for i, (kind, _, _) in enumerate(flower._SHAPE_RULES):
            without = flower._SHAPE_RULES[:i] + flower._SHAPE_RULES[i + 1:]
            self.assertTrue(self.survivors_without(_SHAPE_RULES=without), f"{kind} is not needed")

    def test_each_word_rule(self):
        for i, (kind, _) in enumerate(flower._WORD_RULES):
            without = flower._WORD_RULES[:i] + flower._WORD_RULES[i + 1:]
            self.assertTrue(self.survivors_without(_WORD_RULES=without), f"{kind} is not needed")

    def test_each_block_rule(self):
        for i, (marker, _) in enumerate(flower._BLOCKS):
            without = flower._BLOCKS[:i] + flower._BLOCKS[i + 1:]
            self.assertTrue(self.survivors_without(_BLOCKS=without), f"{marker} is not needed")


class RealText(unittest.TestCase):
    """redact() over real text changes only reviewed lines, each of which holds a credential-shaped
    literal (tests/redaction_stdlib.json says which and why)."""

    @classmethod
    def setUpClass(cls):
        with open(FIXTURE, encoding="utf-8") as fh:
            cls.reviewed = json.load(fh)["reviewed"]

    def test_stdlib_changes_only_reviewed_lines_and_still_changes_them(self):
        allowed = {(r["file"], r["line"]) for r in self.reviewed}
        unexpected, still, n_lines = [], set(), 0
        files = stdlib_files()
        self.assertGreater(len(files), 500)
        for rel, text in files:
            n_lines += text.count("\n")
            for line in changed_lines(text):
                if (rel, line) in allowed:
                    still.add((rel, line))
                else:
                    unexpected.append(f"{rel}: {line}")
        self.assertEqual(unexpected, [], "changed lines not in the reviewed fixture")
        present = {(r["file"], r["line"]) for r in self.reviewed
                   if any(rel == r["file"] and r["line"] in text for rel, text in files)}
        self.assertEqual(present - still, set(), "reviewed credential lines no longer redacted")
        self.assertGreater(n_lines, 100_000)

    def test_real_cli_transcripts_are_unchanged(self):
        folder = os.path.join(HERE, "fixtures")
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
        self.assertGreaterEqual(len(names), 4)
        for name in names:
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                raw = fh.read()
            self.assertEqual(changed_lines(raw), [], name)
            entries = json.loads(raw)
            self.assertEqual(flower.redact_obj(entries), json.loads(json.dumps(entries)), name)

    def test_every_reviewed_line_says_why(self):
        self.assertTrue(self.reviewed)
        for r in self.reviewed:
            self.assertTrue(r["why"].strip(), r)
            self.assertNotEqual(flower.redact(r["line"], []), r["line"], r)


class FastEqualsReference(unittest.TestCase):
    """The prefilter may only skip work, never change the result."""

    def check(self, texts, label):
        diffs = [t[:120] for t in texts if flower.redact(t, []) != flower._redact_reference(t, [])]
        self.assertEqual(diffs, [], label)

    def test_secret_carriers_code_and_prose(self):
        texts = [body for text, _, _ in SHAPES for body in carriers(text).values()]
        texts += [value for value, _ in OLD_SHAPES] + [f"{k}={v}" for k, v in NAMED] + CODE + PROSE
        self.check(texts, "one at a time")
        big = "\n".join(texts)   # past _SMALL: the shape runs decide which lines the shape rules see
        self.assertGreater(len(big), 10 * flower._SMALL)
        self.check([big, json.dumps({"content": big}), "x" * 3000 + big], "all at once")

    def test_bench_corpora(self):
        self.check([build_log(300_000), api_dump(300_000), transcript_mix(600_000)] + source_files(300_000), "corpora")

    def test_stdlib_and_transcripts(self):
        texts, total = [], 0
        for _, text in stdlib_files():
            texts.append(text)
            total += len(text)
            if total > 4_000_000:
                break
        folder = os.path.join(HERE, "fixtures")
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                texts.append(fh.read())
        self.check(texts, "stdlib and transcripts")

    def test_non_ascii_keeps_offsets(self):
        secret = "ghp_" + "A1b2C3d4" * 5
        text = ("é İ ß 漢字 " * 300) + f"\ntoken: {secret}\n" + "İ" * 3000 + f" Authorization: Bearer {secret}"
        out = flower.redact(text, [])
        self.assertNotIn(secret, out)
        self.assertEqual(out, flower._redact_reference(text, []))
        self.assertTrue(out.startswith("é İ ß 漢字"))


if __name__ == "__main__":
    unittest.main()
