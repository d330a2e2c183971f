"""End-to-end tier, secrets third round (issue 37): every shape of tests/secret_shapes.SHAPES planted in
the six carriers (the task, a tool's output, the model's words, the ritual's handoff document, flower's
environment, a file a tool reads) reaches no file flower writes, no --json line, no terminal line, no
request after the handoff, and neither ``status --json`` nor ``show`` (the real SDK and CLI against the
fake API; the pattern of tests/test_e2e_redaction.py)."""

from __future__ import annotations

import json
import os
import unittest

from tests.fakeapi import text, tool
from tests.secret_shapes import SHAPES
from tests.helpers import E2ECase, HAVE_SDK, LEDGER, RAW_STORE, SKIP

ONE_LINE = [(t, core) for t, core, _ in SHAPES if "\n" not in t]


@unittest.skipUnless(HAVE_SDK, SKIP)
class AllShapes(E2ECase, unittest.TestCase):
    def leaks_in_files(self, cores):
        leaks = []
        for root in (os.path.join(self.ws, "runs"), os.path.join(self.ws, ".flower")):
            for folder, _, files in os.walk(root):
                for name in files:
                    if name in RAW_STORE:
                        continue
                    with open(os.path.join(folder, name), "rb") as fh:
                        body = fh.read().decode("utf-8", "replace")
                    unescaped = body.replace("\\n", "\n").replace("\\", "")
                    leaks += [f"{name}: {c}" for c in cores if c in body or c in unescaped]
        return leaks

    def test_every_shape_in_every_carrier_reaches_no_place(self):
        cores = [core for _, core, _ in SHAPES]
        with open(os.path.join(self.ws, "config.env"), "w") as fh:        # a file a tool reads: all of them
            fh.write("\n\n".join(t for t, _, _ in SHAPES) + "\n")
        said = "found these:\n" + "\n".join(t for t, _ in ONE_LINE[::2])     # the model's words
        handoff = "half done; seen:\n" + "\n".join(t for t, _ in ONE_LINE[1::2])

        def usage(level):
            return dict(input_tokens=1000, cache_read=level - 1000)
        self.roles.work = [tool("Bash", {"command": "cat config.env"}, say=said, **usage(100_000)),
                           tool("Bash", {"command": "grep -c . config.env"}, say=said, **usage(160_000)),
                           text("finished", **usage(50_000))]
        self.roles.ritual = [text(LEDGER.replace("half done", handoff))]
        env_cores = {"GITHUB_TOKEN": ONE_LINE[3][0], "DEPLOY_PASSWORD": "no-shape-at-all-8842x",   # the environment
                     "PGPASSWORD": "pg-no-shape-5519", "SENTRY_DSN": "https://k9q7@o1.example/2",
                     "DOCKER_AUTH_CONFIG": '{"auths":{"r":{"auth":"ZW52OnNlY3JldDEyMw=="}}}'}
        self.env.update(env_cores)
        task = "write hello; credentials you may meet:\n" + "\n".join(t for t, _ in ONE_LINE)   # the task
        p = self.flower("--json", "--model", "claude-sonnet-4-5", "--window", "200000", task)
        self.assertTrue(self.work_row()["ok"])
        events = [json.loads(line) for line in p.stdout.splitlines()]       # every line parses
        self.assertIn("done", [e["data"].get("phase") for e in events if e["kind"] == "handoff"])
        cores += list(env_cores.values())
        leaks = self.leaks_in_files(cores)
        leaks += [f"stdout: {c}" for c in cores if c in p.stdout or c in p.stdout.replace("\\", "")]
        leaks += [f"stderr: {c}" for c in cores if c in p.stderr]
        ritual_at = max(i for i, (role, _) in enumerate(self.roles.log) if role == "ritual")
        after = [body for _, body in self.roles.log[ritual_at + 1:]]
        self.assertTrue(after)
        sent = json.dumps(after, ensure_ascii=False)
        leaks += [f"request after the handoff: {c}" for c in cores if c in sent or c in sent.replace("\\", "")]
        first = json.dumps(self.roles.log[0][1], ensure_ascii=False)
        leaks += [f"first request (the task): {c}" for t, c in ONE_LINE if c in first.replace("\\", "")]
        sid = self.work_row()["session_id"]
        for argv in (["status", "--json"], ["show", sid], ["show", sid, "--raw"]):
            shown = self.flower(*argv).stdout
            self.assertTrue(shown.strip(), argv)
            leaks += [f"{' '.join(argv[:2])}: {c}" for c in cores if c in shown or c in shown.replace("\\", "")]
        self.assertEqual(leaks, [], f"{len(leaks)} leaks")
        self.assertIn("[REDACTED]", self.read(".flower", "notes", "handoff-work.md"))


if __name__ == "__main__":
    unittest.main()
