"""A worker starts only once flower has read the coordinator's call off the stream (issues 36, 39).

CI with 4 workers on 2 cores: ``test_e2e_delegation.GoDelegates.test_kill_9_mid_worker...`` resumed a
coordinator whose history held no Agent call ("No response requested.", then the resume prompt). The CLI
streams the coordinator's call and mirrors the worker's transcript as the worker runs; flower, behind its
stream on a loaded machine, had not yet read (and written ahead) the call when the worker's tool_use was
stored and the kill came. A model that trusts its history would delegate that work again. The PreToolUse
hook on Agent now waits until the stream has shown the call, so the worker cannot get ahead of it."""

from __future__ import annotations

import asyncio
import unittest

import flower
from tests import fakesdk


def run_state():
    return flower._RunState(name="work", window=200_000, at=150_000, warn_at=120_000, manage=True,
                            emit=lambda event: None, call_seen=asyncio.Event())


class ShownHook(unittest.TestCase):
    def test_the_worker_waits_until_the_stream_has_shown_its_call(self):
        async def go():
            st = run_state()
            hook = flower.Runtime._shown_hook(None, st)
            order = []

            async def stream():   # flower reads the coordinator's answer a moment later
                await asyncio.sleep(0.05)
                order.append("shown")
                st.calls_seen.add("toolu_agent")
                st.call_seen.set()
            reader = asyncio.ensure_future(stream())
            answer = await hook({"hook_event_name": "PreToolUse", "tool_name": "Agent"}, "toolu_agent", None)
            order.append("worker starts")
            await reader
            return answer, order
        answer, order = asyncio.run(go())
        self.assertEqual(answer, {})
        self.assertEqual(order, ["shown", "worker starts"])

    def test_a_workers_own_calls_and_a_call_already_shown_do_not_wait(self):
        async def go():
            st = run_state()
            hook = flower.Runtime._shown_hook(None, st)
            st.calls_seen.add("toolu_seen")
            await asyncio.wait_for(hook({"tool_name": "Agent"}, "toolu_seen", None), 1)
            await asyncio.wait_for(hook({"tool_name": "Agent", "agent_id": "w1"}, "toolu_inner", None), 1)
            return True
        self.assertTrue(asyncio.run(go()))


class OnlyWhereThereAreWorkers(fakesdk.FakeWorkspace, unittest.TestCase):
    def test_a_delegating_spec_gets_the_hook_and_a_single_worker_does_not(self):
        rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir)
        self.addCleanup(rt.close)
        st = run_state()
        coordinator = flower.AgentSpec("work", agents={"worker": flower.worker()})
        hooks = rt._hooks_for(coordinator, rt._connection_hooks(st, coordinator))
        self.assertEqual([(m, h.__name__) for m, h in hooks["PreToolUse"]][-1:],
                         [("|".join(flower.AGENT_TOOLS), "before_agent")])
        solo = flower.AgentSpec("work")
        self.assertNotIn("PreToolUse", rt._hooks_for(solo, rt._connection_hooks(st, solo)))

    def test_each_connection_of_a_delegating_step_carries_it(self):
        rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, resilience=flower.Resilience(probe=False))
        self.addCleanup(rt.close)
        fakesdk.FAKE.turns = [[("text", "done", 10)], [("text", "done", 10)]]
        for spec in (flower.AgentSpec("work", agents={"worker": flower.worker()}), flower.AgentSpec("solo")):
            result = asyncio.run(rt.run(spec, "go"))
            self.assertTrue(result.ok, result.error)
        waits = [[h.__name__ for m in (c["options"].hooks or {}).get("PreToolUse", [])
                  if "Agent" in (m.matcher or "") for h in m.hooks] for c in fakesdk.FAKE.calls]
        self.assertEqual([("before_agent" in names) for names in waits], [True, False])


if __name__ == "__main__":
    unittest.main()
