"""A hook's own ``timeout`` reaches the real CLI (``HookMatcher.timeout``): past it the CLI does not run the
tool and tells the model the hook did not respond; without one (the SDK's 60 s) the same wait is waited
out. This is why the spill wait, which may hold a tool call while a load's files are written, sets a long
one (SPILL_WAIT_TIMEOUT)."""

import asyncio
import os
import unittest

import flower
from tests.fakeapi import FakeAnthropic, text, tool
from tests.helpers import E2ECase, HAVE_SDK, SKIP


@unittest.skipUnless(HAVE_SDK, SKIP)
class HookTimeout(E2ECase, unittest.TestCase):
    def held(self, timeout: float | None) -> tuple[bool, str]:
        """A Bash call held 4 s by a PreToolUse hook (with ``timeout``, or none): whether the tool ran,
        and the result the model was sent."""
        ran = os.path.join(self.ws, "ran.txt")
        script = [tool("Bash", {"command": f"echo ran > {ran}"}), text("done")]
        self.api.responder = lambda body: script.pop(0) if script else text("done")

        async def hold(data, tool_use_id, context):
            await asyncio.sleep(4)
            return {}
        if timeout is not None:
            hold.timeout = timeout
        rt = self._runtime(resilience=flower.Resilience(probe=False))
        try:
            spec = flower.AgentSpec("work", tools=["Bash"], allowed_tools=["Bash"], hooks={"PreToolUse": [("Bash", hold)]})
            result = asyncio.run(rt.run(spec, "go"))
        finally:
            rt.close()
        self.assertTrue(result.ok, result.error)
        return os.path.exists(ran), FakeAnthropic.messages_text(self.api.requests[-1])

    def test_a_hooks_own_timeout_reaches_the_cli(self):
        ran, sent = self.held(1)
        self.assertFalse(ran)
        self.assertIn("did not respond before its timeout", sent)
        self.assertIn("was not executed", sent)

    def test_without_one_the_sdk_default_waits_the_hook_out(self):
        ran, sent = self.held(None)
        self.assertTrue(ran)
        self.assertNotIn("did not respond before its timeout", sent)


if __name__ == "__main__":
    unittest.main()
