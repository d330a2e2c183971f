"""A state database that is away when a step decides whether to continue is waited for (issue 39).

``bench/chaos.py --delegate --state pg``, seed 2: a SIGTERM left the work step's session stored; the
next run loaded the lineage, then the database stopped (a 7.8 s outage) just before the work step asked
the store whether that session was still there. The question raised :class:`flower.Offline`, flower
took it for "not stored" and started the work step over in a fresh session with the plain work prompt:
the coordinator, with no history, delegated step 1 again. Now the step waits for the database, as it
does before any request, and continues the stored session.

Real SDK + CLI against tests/fakeapi.py, all state in PostgreSQL (tests/pgserver.py). The fault is at a
phase: the database stops once the second run has loaded its lineage and starts again when flower says it
waits for it."""

from __future__ import annotations

import asyncio
import os
import unittest

import flower
from tests.fakeapi import FakeAnthropic
from tests.helpers import E2ECase, HAVE_SDK, SKIP, StepModel, WithPostgres, stop_shared_server
from tests.pgserver import HAVE_PG, SKIP as SKIP_PG

tearDownModule = stop_shared_server   # the one server this module started


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, SKIP_PG)
class StateAwayAtTheStep(WithPostgres, E2ECase, unittest.TestCase):

    def spec(self):
        return flower.AgentSpec("work", instructions="You do the work.", tools=["Bash"], allowed_tools=["Bash"])

    def runtime(self, on_event=None):
        run_dir = os.path.join(self.tmp.name, "run")
        state = flower.PostgresState(flower.Paths(self.ws, run_dir), self.dsn, "job-1")
        self.assertTrue(state.ready())
        return self._runtime(run_dir=run_dir, state=state, on_event=on_event)

    def workflow(self):
        return flower.Workflow([flower.Step("work", self.spec(), "do the two steps",
                                            resume_prompt="check the steps once more")])

    def first_job(self):
        """The two steps done undisturbed: the model and the work session."""
        model = StepModel(self.ws, steps=2)
        self.api.responder = model
        first = self.runtime()
        asyncio.run(self.workflow().run(first))
        sid = first.lineage.steps["work"]
        first.close()
        self.assertEqual(model.lines(), ["step-1", "step-2"])
        return model, sid

    def back_when_waited_for(self, events, waited):
        """An event watcher that starts the database again once flower says it waits for it."""
        def watch(event):
            events.append(event)
            message = str((event.data or {}).get("message", ""))
            if event.kind == "info" and "unreachable" in message and not self.server.running:
                waited.append(message)
                self.server.start()   # the phase: flower waits for the database
        return watch

    def run_with_database_away(self, rt):
        """The workflow run on ``rt`` with the database stopped first (the watcher starts it again);
        the database is up and ``rt`` closed afterwards, whatever happened."""
        self.server.stop("immediate")
        try:
            return asyncio.run(self.workflow().run(rt))
        finally:
            if not self.server.running:
                self.server.start()
            rt.close()

    def test_the_step_continues_its_session_when_the_database_was_away_at_the_check(self):
        model, sid = self.first_job()
        events: list[flower.Event] = []
        waited: list[str] = []
        second = self.runtime(on_event=self.back_when_waited_for(events, waited))
        self.assertEqual(second.lineage.steps.get("work"), sid)   # the lineage is loaded
        ctx = self.run_with_database_away(second)   # the phase: before the step's check
        self.assertTrue(waited, "flower never waited for the database")
        self.assertEqual(model.lines(), ["step-1", "step-2"])   # no step done twice
        steps = [e.data for e in events if e.kind == "step"]
        self.assertEqual([s["continues"] for s in steps], [True])
        self.assertEqual(ctx["_sessions"]["work"], sid)
        resumed = FakeAnthropic.messages_text(self.api.requests[-1])
        self.assertIn("check the steps once more", resumed)
        self.assertIn("STEP-2-OK", resumed)   # the history the model got holds the steps done

    def test_the_workflow_reads_its_lineage_once_the_database_is_back(self):
        """The database went away before the run read its lineage: the workflow waits for it instead of
        running on a blank lineage (every step would start over)."""
        model, sid = self.first_job()
        waited: list[str] = []
        second = self.runtime(on_event=self.back_when_waited_for([], waited))
        ctx = self.run_with_database_away(second)   # the phase: before the run reads its lineage
        self.assertTrue(waited, "flower never waited for the database")
        self.assertEqual(model.lines(), ["step-1", "step-2"])   # no step done twice
        self.assertEqual(ctx["_sessions"]["work"], sid)
        self.assertEqual(ctx["_woke"], 2)

    def test_a_lineage_read_from_the_spool_keeps_a_step_the_store_cannot_vouch_for(self):
        """The database went away after the lineage's newest snapshot was spooled: loading it cannot ask
        the store about the work session, so the step stays (the step's own check waits and decides)."""
        rt = self.runtime()
        rt.lineage.remember("work", "sid-stored-or-not")
        self.server.stop("immediate")
        try:
            rt.lineage.bump()   # spooled: the database is away
            rt.close()
            state = flower.PostgresState(flower.Paths(self.ws, os.path.join(self.tmp.name, "run")), self.dsn, "job-1")
            self.assertTrue(os.path.exists(state.spool.path))
            away = self._runtime(run_dir=os.path.join(self.tmp.name, "run"), state=state)
            self.assertEqual(away.lineage.steps.get("work"), "sid-stored-or-not")
            self.assertEqual(away.lineage.gone, {})
            away.close()
        finally:
            self.server.start()


if __name__ == "__main__":
    unittest.main()
