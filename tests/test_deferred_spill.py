"""A huge tool output spilled at write time (issue 44): the agent gets its pointer at once, the file is
redacted and written in a thread of its own, and every tool call waits for it before it runs.

- the pointer's head is what redacting the whole text would show (a differential test of
  redacted_head() over the redaction corpora, at many head lengths, in texts of many lines);
- the hook returns while the file is still being written, and a tool call waits for it (the writer is
  held until the test lets it go: no timing);
- the file holds redact() of the whole output (no secret), 0600; an output whose first lines hold a key
  block is spilled as before, in place."""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import threading
import unittest

import flower
from tests import redaction_table, secret_shapes

SECRET = "sk-ant-api03-" + "Q" * 40


def call(hook, data):
    return asyncio.run(hook(data, None, None))


def corpus() -> list[str]:
    bodies = [body for _, body, _ in redaction_table.cases()]
    bodies += [text for text, _, _ in secret_shapes.SHAPES] + secret_shapes.CODE + redaction_table.PROSE
    return bodies


def big_output(size: int, seed: int = 7) -> str:
    """A build log of ``size`` chars with a secret in its first line, in its middle and at its end."""
    log = secret_shapes.build_log(size, seed)
    middle = log.index("\n", size // 2)
    return f"export API_TOKEN={SECRET}\n" + log[:middle] + f"\nAuthorization: Bearer {SECRET}" + log[middle:] + \
        f"\npassword={SECRET}\n"


class Head(unittest.TestCase):
    def test_the_head_of_the_first_lines_is_the_head_of_the_whole(self):
        bodies, rng, told = corpus(), random.Random(44), 0
        secrets = flower._env_secrets()
        for round_ in range(60):
            text = "\n".join(rng.choice(bodies) for _ in range(rng.randint(1, 40)))
            whole = flower.redact(text, secrets)
            for head in sorted({1, 7, 40, 400, *(rng.randrange(1, len(text) + 1) for _ in range(6))}):
                shown = flower.redacted_head(text, head, secrets)
                if shown is not None:
                    told += 1
                    self.assertEqual(shown, whole[:head], (round_, head))
        self.assertGreater(told, 100)   # most heads are told from the first lines

    def test_a_key_block_or_a_line_that_does_not_end_is_left_to_the_whole(self):
        pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "A" * 64 + "\n-----END RSA PRIVATE KEY-----\n"
        self.assertIsNone(flower.redacted_head(pem + "x\n" * 100, 20, []))
        self.assertIsNone(flower.redacted_head("y" * (flower.SPILL_HEAD_LINES + 10_000), 400, []))
        self.assertIsNone(flower.redacted_head("a\n" * 1000, 10, ["two\nlines"]))


class Deferred(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.paths = flower.Paths(self.tmp.name)
        self.hook = flower.spill_hook(self.paths)
        self.wait = flower.spill_wait_hook()

    def tearDown(self):
        flower.wait_spills()
        self.tmp.cleanup()

    def bash(self, text):
        return call(self.hook, {"tool_name": "Bash", "tool_input": {"command": "make"},
                                "tool_response": {"stdout": text, "stderr": ""}})["hookSpecificOutput"]["updatedToolOutput"]

    def spilled(self):
        folder = self.paths.spill_dir
        return [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".txt")] \
            if os.path.isdir(folder) else []

    def test_a_huge_output_gets_its_pointer_before_its_file_and_a_tool_call_waits_for_the_file(self):
        text = big_output(flower.SPILL_DEFER_AT + 50_000)
        held, release = threading.Event(), threading.Event()
        real = flower.atomic_write

        def slow(path, data, mode=0o600):
            held.set()
            release.wait(60)
            real(path, data, mode)
        flower.atomic_write = slow
        try:
            out = self.bash(text)["stdout"]
            self.assertTrue(held.wait(60))
            self.assertEqual(self.spilled(), [])   # the pointer came first

            async def tool_call():
                waiting = asyncio.ensure_future(self.wait({"tool_name": "Read"}, None, None))
                for _ in range(20):
                    await asyncio.sleep(0)
                self.assertFalse(waiting.done())   # the writer is held: the call waits
                release.set()
                return await waiting
            self.assertEqual(asyncio.run(tool_call()), {})
        finally:
            release.set()
            flower.atomic_write = real
        [path] = self.spilled()   # written when the call goes on
        self.assertIn(path, out)
        with open(path) as fh:
            body = fh.read()
        self.assertEqual(body, flower.redact(text))
        self.assertNotIn(SECRET, body)
        self.assertNotIn(SECRET, out)
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        head = flower.redact(text)[:flower.SPILL_HEAD]
        self.assertEqual(out, flower.text("spilled_output", n=len(text), path=path, k=len(head), head=head))

    def test_a_key_block_in_the_first_lines_is_spilled_in_place(self):
        pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "A" * 64 + "\n-----END RSA PRIVATE KEY-----\n"
        text = pem + big_output(flower.SPILL_DEFER_AT)
        release, real = threading.Event(), flower.atomic_write

        def held_elsewhere(path, data, mode=0o600):   # a write off the agent's path waits for the test
            if threading.current_thread() is not threading.main_thread():
                release.wait(60)
            real(path, data, mode)
        flower.atomic_write = held_elsewhere
        try:
            out = self.bash(text)["stdout"]
            [path] = self.spilled()   # written before the pointer came back
        finally:
            release.set()
            flower.atomic_write = real
        with open(path) as fh:
            self.assertEqual(fh.read(), flower.redact(text))
        self.assertNotIn("A" * 64, out)
        self.assertIn(path, out)

    def test_a_delegating_session_waits_for_spills_before_every_tool_call(self):
        rt = flower.Runtime(workspace=self.tmp.name, run_dir=os.path.join(self.tmp.name, "runs"))
        self.addCleanup(rt.close)
        for spec, count in ((flower.coordinator(self.paths), 1), (flower.AgentSpec("work"), 0)):
            waits = [hook for matcher, hook in rt._hooks_for(spec).get("PreToolUse", [])
                     if matcher is None and getattr(hook, "waits_for_spills", False)]
            self.assertEqual(len(waits), count, spec.name)


if __name__ == "__main__":
    unittest.main()
