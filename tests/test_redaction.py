"""Redaction (issue 13): a table of secrets x carriers x every place flower writes or prints -> no
survivor and every JSON line parses; a table of prose with the trigger words -> unchanged."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import unittest

import flower
from tests.redaction_table import NAMED, PROSE, SHAPES, cases, places


class Table(unittest.TestCase):
    def test_no_secret_survives_any_place_and_json_parses(self):
        n_cases, survivors = 0, []
        with tempfile.TemporaryDirectory() as tmp:
            for name, body, core in cases():
                n_cases += 1
                for place, rendered in places(body, tmp).items():
                    if core in rendered or core in rendered.replace("\\n", "\n"):
                        survivors.append(f"{name} -> {place}")
                    if place in ("event --json", "manifest row", "show --raw", "lineage start record"):
                        json.loads(rendered)   # redaction never breaks the encoding
        self.assertGreaterEqual(len(SHAPES) + len(NAMED), 40)
        self.assertGreaterEqual(n_cases, 40 * 6)
        self.assertEqual(survivors, [], f"{len(survivors)} survivors")

    def test_spill_files_are_redacted(self):
        secret = SHAPES[8][0]
        from_env = "wq8Zr2Lm0Xp4Tn7Kd1Vb"   # no known shape: only the environment says it is a credential
        os.environ["DEPLOY_PASSWORD"] = from_env
        self.addCleanup(os.environ.pop, "DEPLOY_PASSWORD", None)
        big = ("line of output\n" * 200) + f"GITHUB_TOKEN={secret}\nconnecting with {from_env} ...\n" + "tail\n" * 10
        entries = []
        for i in range(3):
            entries.append({"type": "assistant", "uuid": f"a{i}", "parentUuid": f"u{i - 1}" if i else None, "message": {
                "role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Bash",
                                                  "input": {"command": f"cat f{i}"}}]}})
            entries.append({"type": "user", "uuid": f"u{i}", "parentUuid": f"a{i}", "message": {
                "role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": big}]}})
        with tempfile.TemporaryDirectory() as tmp:
            inner = flower.SqliteSessionStore(":memory:")
            key = {"project_key": "p", "session_id": "s"}
            inner.append_sync(key, entries)
            store = flower.PruningSessionStore(inner, policy=flower.PrunePolicy(trim=True, trim_keep=0, spill_dir=tmp))
            asyncio.run(store.load(key))
            spilled = os.listdir(tmp)
            self.assertTrue(spilled)
            for name in spilled:
                with open(os.path.join(tmp, name), encoding="utf-8") as fh:
                    body = fh.read()
                self.assertNotIn(secret, body)
                self.assertNotIn(from_env, body)
                self.assertIn("GITHUB_TOKEN=[REDACTED]", body)
                self.assertIn("connecting with [REDACTED] ...", body)
            self.assertIn(secret, json.dumps(inner.load_sync(key)))   # the store keeps entries as written

    def test_env_credentials_by_name(self):
        saved = dict(os.environ)
        try:
            os.environ["MY_SERVICE_TOKEN"] = "no-shape-at-all-4711"
            os.environ["HARMLESS_SETTING"] = "no-shape-at-all-4712"
            out = flower.redact("a no-shape-at-all-4711 b no-shape-at-all-4712")
            self.assertEqual(out, "a [REDACTED] b no-shape-at-all-4712")
        finally:
            os.environ.clear()
            os.environ.update(saved)


class Prose(unittest.TestCase):
    def test_prose_comes_through_unchanged(self):
        self.assertGreaterEqual(len(PROSE), 30)
        changed = [(line, flower.redact(line)) for line in PROSE if flower.redact(line) != line]
        self.assertEqual(changed, [])

    def test_secret_name_rule_both_sides(self):
        for name in ("token", "auth_token", "GITHUB_TOKEN", "db_password", "client_secret", "api-key", "apiKey",
                     "AWS_SECRET_ACCESS_KEY", "x.password", "SigningKey", "PWD", "credentials"):
            self.assertTrue(flower._secret_name(name), name)
        for name in ("tokenizer", "tokens", "secretary", "passwordless", "keyboard", "key", "author",
                     "max_tokens", "token_count", "credentialsPath", "passport", "password_file", "api_key_id"):
            self.assertFalse(flower._secret_name(name), name)


if __name__ == "__main__":
    unittest.main()
