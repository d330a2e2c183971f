"""Delegation with HOME full: what the CLI streamed but could not write reaches the store (issue 39).

``bench/chaos.py --delegate --state pg`` found two ways to lose it (the CLI writes no transcript while
HOME is full, so the SDK mirrors nothing, and flower held those messages only from the stream):

- seed 1: the coordinator's Agent call answered while HOME was full, then flower killed with SIGKILL
  while the worker ran: the resumed coordinator did not see the call and delegated that work again.
  Now a worker's answer (a model call after the coordinator's) has flower store the coordinator's
  unwritten messages at once.
- seed 10: the worker's report (the Agent call's result) streamed while HOME was full, then the
  coordinator's next request failed (a context overflow): the run ended plain ``done`` with the report in
  no store, and the degraded handoff said "no report". Now a turn that ends with streamed messages the
  store never took stores them from the stream, as a turn the CLI did not finish does.

Real SDK + CLI against tests/fakeapi.py, all state in PostgreSQL (tests/pgserver.py), HOME on a small
tmpfs that the test fills at the phase (needs root, else skipped)."""

from __future__ import annotations

import json
import os
import signal
import unittest

import flower
from tests.fakeapi import FakeAnthropic, error, text, tool
from tests.helpers import E2ECase, Filling, HAVE_SDK, SKIP, SmallHome, WithPostgres, freeze_front, stop_shared_server, system_of, \
    wait_until
from tests.pgserver import HAVE_PG, SKIP as SKIP_PG

tearDownModule = stop_shared_server   # the one server this module started

AGENT = {"description": "the step", "prompt": "run the step", "subagent_type": "worker"}


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, SKIP_PG)
class UnwrittenWhileDelegating(WithPostgres, SmallHome, Filling, E2ECase, unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.env.pop("FLOWER_NO_DELEGATE", None)
        self.worker_q: list = []
        self.workers: list[dict] = []
        self.small = self.home

    def responder(self, body):
        if flower.text("worker_instructions")[:30] in system_of(body):
            self.workers.append(body)
            item = self.worker_q.pop(0) if self.worker_q else text("worker ok")
            return item(body) if callable(item) else item
        return self.roles(body)

    def payloads(self) -> str:
        import psycopg
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return "\n".join(row[0] for row in conn.execute("SELECT payload FROM flower.entries"))

    def test_the_coordinators_call_survives_a_kill_while_its_worker_runs(self):
        marker = os.path.join(self.ws, "step.log")
        self.roles.work = [self.full(tool("Agent", AGENT, say="AGENT-CALL-MARK"))]
        self.worker_q = [tool("Bash", {"command": f"echo ran >> {marker} && sleep 30"})]
        self.api.responder = self.responder
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.spawn("--state", self.dsn, "--json", "--no-goal")
        try:
            self.wait_for(lambda: os.path.exists(marker), timeout=120, what="the worker's step running")
            # the phase: the worker's step runs; flower had its answer (the fixed flower stores the call then)
            wait_until(lambda: "AGENT-CALL-MARK" in self.payloads(), timeout=30, interval=0.2)
            os.kill(p.pid, signal.SIGKILL)
        finally:
            p.communicate(timeout=60)
        self.freed(None)(None)
        self.roles.work = [text("all done")]
        self.flower("--state", self.dsn, "--no-goal", timeout=240)
        resumed = FakeAnthropic.messages_text(self.roles.bodies("work")[1])
        self.assertIn("AGENT-CALL-MARK", resumed)   # the call is in the history the coordinator resumes
        self.assertIn(json.dumps(flower.text("worker_stopped"))[1:41], resumed)
        self.assertEqual(len(self.workers), 1)
        self.assertEqual(self.read("step.log"), "ran\n")

    def test_a_report_streamed_while_home_was_full_is_stored_when_the_turn_fails(self):
        self.roles.work = [tool("Agent", AGENT),
                           self.freed(error(400, "prompt is too long: 210000 tokens > 200000 maximum",
                                            "invalid_request_error")),
                           text("all done")]
        self.worker_q = [tool("Bash", {"command": "echo one"}), self.full(text("WORKER-REPORT-MARK: step done"))]
        self.api.responder = self.responder
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.flower("--state", self.dsn, "--json", "--no-goal", timeout=240)
        self.assertIn("WORKER-REPORT-MARK", self.payloads(), p.stderr[-2000:])
        successor = FakeAnthropic.messages_text(self.roles.bodies("work")[-1])
        self.assertIn("WORKER-REPORT-MARK", successor)   # the degraded handoff carries the report

    def test_a_normal_delegation_stores_nothing_from_the_stream(self):
        self.roles.work = [tool("Agent", AGENT), text("all done")]
        self.worker_q = [tool("Bash", {"command": "echo one"}), text("WORKER-REPORT-MARK: step done")]
        self.api.responder = self.responder
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.flower("--state", self.dsn, "--json", timeout=240)
        self.assertNotIn("never recorded", p.stderr)
        self.assertNotIn('"flowerFromStream"', self.payloads())


if __name__ == "__main__":
    unittest.main()
