"""End-to-end tier, secrets (issue 13): secrets planted in the task, in tool output, in the model's
words and in its handoff document never reach a state file, a --json line, the terminal, or any request
the fake API receives after the handoff (the real SDK and CLI against the fake API)."""

from __future__ import annotations

import json
import os
import unittest

from tests.fakeapi import text, tool
from tests.helpers import E2ECase, HAVE_SDK, LEDGER, RAW_STORE, SKIP
from tests.redaction_table import NAMED, SHAPES


@unittest.skipUnless(HAVE_SDK, SKIP)
class Secrets(E2ECase, unittest.TestCase):
    def test_planted_secrets_reach_no_file_no_output_and_no_request_after_the_handoff(self):
        plain = [value for value, _ in SHAPES[:30] if "\n" not in value]
        named = [f"{key}={value}" for key, value in NAMED]
        cores = [core for value, core in SHAPES[:30] if "\n" not in value] + [value for _, value in NAMED]
        with open(os.path.join(self.ws, "config.env"), "w") as fh:
            fh.write("\n".join(plain + named) + "\n")
        said = "found " + " and ".join(plain[:6]) + "\n" + "\n".join(named[:4])

        def usage(level):
            return dict(input_tokens=1000, cache_read=level - 1000)
        self.roles.work = [tool("Bash", {"command": "cat config.env"}, say=said, **usage(100_000)),
                           tool("Bash", {"command": "echo two"}, say=said, **usage(160_000)),   # crosses 150K
                           text("finished", **usage(50_000))]
        self.roles.ritual = [text(LEDGER.replace("half done", "half done; used " + said))]
        self.env["GITHUB_TOKEN"] = NAMED[0][1]        # a credential in flower's own environment
        p = self.flower("--json", "--model", "claude-sonnet-4-5", "--window", "200000",
                        f"write hello; the key is {plain[0]} and {named[1]}")
        self.assertTrue(self.work_row()["ok"])
        events = [json.loads(line) for line in p.stdout.splitlines()]       # every line parses
        self.assertIn("done", [e["data"].get("phase") for e in events if e["kind"] == "handoff"])
        self.assertEqual(events[-1]["kind"], "summary")
        leaks = []
        for root in (os.path.join(self.ws, "runs"), os.path.join(self.ws, ".flower")):
            for folder, _, files in os.walk(root):
                for name in files:
                    if name in RAW_STORE:
                        continue
                    with open(os.path.join(folder, name), "rb") as fh:
                        body = fh.read().decode("utf-8", "replace")
                    leaks += [f"{name}: {c}" for c in cores if c in body]
        leaks += [f"stdout: {c}" for c in cores if c in p.stdout]
        leaks += [f"stderr: {c}" for c in cores if c in p.stderr]
        ritual_at = max(i for i, (role, _) in enumerate(self.roles.log) if role == "ritual")
        after = [body for _, body in self.roles.log[ritual_at + 1:]]
        self.assertTrue(after)
        sent = json.dumps(after, ensure_ascii=False)
        leaks += [f"request after the handoff: {c}" for c in cores if c in sent]
        first = json.dumps(self.roles.log[0][1], ensure_ascii=False)        # the task itself is redacted
        leaks += [f"first request: {c}" for c in (SHAPES[0][1], NAMED[1][1]) if c in first]
        self.assertEqual(leaks, [])
        self.assertIn("[REDACTED]", self.read(".flower", "notes", "handoff-work.md"))


if __name__ == "__main__":
    unittest.main()
