"""Issue 42: a usage limit that says when it resets is waited out (a line a minute), then the same
session resumes with the neutral prompt; past FLOWER_MAX_LIMIT_WAIT the run ends with exit 6."""

from __future__ import annotations

import asyncio
import os
import time
import unittest

import flower
from tests.fakeapi import error, text, tool
from tests.helpers import E2ECase, HAVE_SDK, ROOT, Roles, SKIP, freeze_front, role_of


def stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at))


class Parse(unittest.TestCase):
    NOW = 1_800_000_000.0

    def test_reset_times(self):
        now = self.NOW
        self.assertAlmostEqual(flower.limit_wait(f"usage limit reached, resets at {stamp(now + 90)}", now=now), 90)
        self.assertAlmostEqual(flower.limit_wait(f"Claude AI usage limit reached|{int(now) + 3600}", now=now), 3600)
        self.assertEqual(flower.limit_wait("rate_limit_error: retry-after: 5 minutes", now=now), 300)
        self.assertEqual(flower.limit_wait("429 Too Many Requests, try again in 2 hours", now=now), 7200)
        at = flower.limit_wait("You've hit your usage limit · resets 3pm", now=now)
        self.assertTrue(0 < at <= 86400)

    def test_not_a_limit(self):
        for message in ("429 retry-after 20", "connection reset by peer", "overloaded", "", None,
                        "API Error: 400 invalid_request_error"):
            self.assertIsNone(flower.limit_wait(message, now=self.NOW), message)

    def test_a_line_each_minute(self):
        told, slept = [], []

        async def sleep(s):
            slept.append(s)
        asyncio.run(flower.wait_out_limit(150, sleep=sleep, tell=told.append))
        self.assertEqual(slept, [60, 60, 30])
        self.assertEqual(told, [150, 90, 30])

    def test_exit_code_is_documented(self):
        self.assertIn("6 a usage limit", flower.EXIT_CODES_HELP)
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
            self.assertIn("| `6` |", fh.read())


class LimitedWork(Roles):
    """The work step meets a usage limit twice: 429 until a reset time, then a tool round, then 429
    until a second reset time, then done."""

    def __init__(self, hello: str, gap: float):
        super().__init__()
        self.hello, self.gap = hello, gap
        self.reset: float | None = None   # set by the first work request (clarify may take long on a busy box)
        self.phase = 0
        self.limited = 0

    def __call__(self, body):
        if role_of(body) != "work":
            return super().__call__(body)
        with self.lock:
            self.log.append(("work", body))
            if self.reset is None:
                self.reset = time.time() + self.gap
            if time.time() < self.reset:
                self.limited += 1
                return error(429, f"This request would exceed your account's usage limit. Your limit resets at "
                                  f"{stamp(self.reset)}.", "rate_limit_error")
            self.phase += 1
            if self.phase == 1:
                return tool("Write", {"file_path": self.hello, "content": "hi\n"})
            if self.phase == 2:
                self.reset = time.time() + self.gap
                self.limited += 1
                return error(429, f"usage limit reached; resets at {stamp(self.reset)}", "rate_limit_error")
            return text("done")


@unittest.skipUnless(HAVE_SDK, SKIP)
class WaitedOut(E2ECase, unittest.TestCase):
    def test_a_limit_that_resets_is_waited_out_twice_and_the_same_session_finishes(self):
        roles = LimitedWork(os.path.join(self.ws, "hello.txt"), gap=2)
        self.api.responder = roles
        # the CLI passes each 429 on at once (its own retries would only hide the second one)
        freeze_front(self.ws, goal=False)   # about the work step: the brief as the clarify step leaves it
        p = self.flower("--no-goal", env={"CLAUDE_CODE_MAX_RETRIES": "0"})
        self.assertEqual(p.returncode, 0)
        self.assertGreaterEqual(roles.limited, 2, p.stderr[-3000:])
        self.assertGreaterEqual(p.stderr.count("usage limit reached: waiting until it resets"), 2, p.stderr[-3000:])
        work = [r for r in self.manifest() if r["step"] == "work"][-1]
        self.assertTrue(work["ok"])
        self.assertEqual(self.lineage()["steps"]["work"], work["session_id"])
        # every work request after the first went on the one session: its history grows, it never restarts
        bodies = roles.bodies("work")
        last = bodies[-1]
        self.assertIn(flower.text("resume_prompt", "en")[:40], str(last["messages"]))
        self.assertIn("hello.txt", str(last["messages"]))
        with open(os.path.join(self.ws, "hello.txt")) as fh:
            self.assertEqual(fh.read(), "hi\n")

    def test_a_limit_past_the_bound_ends_with_its_own_exit_code(self):
        roles = LimitedWork(os.path.join(self.ws, "hello.txt"), gap=3600)
        self.api.responder = roles
        freeze_front(self.ws, goal=False)   # about the work step: the brief as the clarify step leaves it
        p = self.flower("--no-goal", env={"FLOWER_MAX_LIMIT_WAIT": "60", "CLAUDE_CODE_MAX_RETRIES": "0"}, check=False)
        self.assertEqual(p.returncode, 6, p.stderr[-2000:])
        self.assertIn("FLOWER_MAX_LIMIT_WAIT", p.stderr)
        self.assertNotIn("Traceback", p.stderr)


if __name__ == "__main__":
    unittest.main()
