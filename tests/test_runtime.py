"""Agent runtime, lineage and manifest on the fake SDK: the four exits, accounting, continuity."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import tempfile
import unittest

import flower
from flower import AgentSpec, Runtime, Resilience, Lineage, Manifest, Step, Workflow
from tests import fakesdk
from tests.fakesdk import FAKE


class Base(fakesdk.FakeWorkspace, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.events = []
        self.sleeps = []
        self.rt = self.runtime()

    def runtime(self, **kw):
        async def sleep(seconds):
            self.sleeps.append(seconds)
        kw.setdefault("resilience", Resilience(probe=False, max_attempts=4))
        return Runtime(workspace=self.ws, run_dir=self.run_dir, on_event=self.events.append, sleep=sleep, **kw)

    def tearDown(self):
        self.rt.close()
        super().tearDown()

    def run_spec(self, prompt="go", spec=None, **kw):
        return asyncio.run(self.rt.run(spec or AgentSpec("work"), prompt, **kw))

    def kinds(self, kind):
        return [e for e in self.events if e.kind == kind]


class Exits(Base):
    def test_success(self):
        FAKE.turns = [[("text", "hello", 1234)]]
        result = self.run_spec()
        self.assertTrue(self.events)
        self.assertTrue(all(e.window == 200_000 and e.level is not None for e in self.events))
        self.assertEqual(self.kinds("result")[0].level, 1234)
        self.assertTrue(result.ok)
        self.assertEqual(result.text, "hello")
        self.assertEqual(result.context, 1234)
        self.assertAlmostEqual(result.cost_usd, 0.01)
        self.assertEqual((result.attempts, result.resumed), (1, False))

    def test_transient_failure_retries_resume_same_session_with_neutral_prompt(self):
        FAKE.turns = [[("text", "part one", 100), ("error", "API Error: 529 Overloaded. This is a server-side issue", 529, "api_error")],
                      [("text", "finished", 200)]]
        result = self.run_spec("build it")
        self.assertTrue(result.ok)
        self.assertEqual((result.attempts, result.resumed), (2, True))
        self.assertEqual(FAKE.calls[1]["prompt"], flower.text("resume_prompt"))
        self.assertEqual(FAKE.calls[1]["options"].resume, FAKE.calls[0]["options"].session_id)
        self.assertEqual(result.session_id, FAKE.calls[0]["options"].session_id)
        self.assertAlmostEqual(result.cost_usd, 0.02)
        self.assertEqual(result.num_turns, 2)
        self.assertEqual(len(self.kinds("retry")), 1)
        self.assertEqual(len(self.sleeps), 1)
        self.assertTrue(3.0 <= self.sleeps[0] <= 5.0)
        # what the resumed "model" was sent: no error noise
        seen = json.dumps(FAKE.loaded[-1])
        self.assertNotIn("API Error", seen)
        self.assertNotIn("api_error", seen)

    def test_exception_counts_as_failure_and_is_classified(self):
        FAKE.turns = [[("raise", fakesdk.ProcessError("Connection refused (ECONNREFUSED)"))], [("text", "ok", 1)]]
        result = self.run_spec()
        self.assertTrue(result.ok)
        self.assertEqual(result.attempts, 2)
        # nothing of the first session was stored beyond the prompt? the prompt is, so it resumes
        self.assertTrue(FAKE.calls[1]["options"].resume)
        errors = self.kinds("error")
        self.assertEqual([e.data["kind"] for e in errors], ["transient"])
        self.assertIn("ProcessError: Connection refused", errors[0].data["message"])
        self.assertEqual([e.data["kind"] for e in self.kinds("retry")], ["transient"])
        self.assertIn("ProcessError: Connection refused", result.errors[0])
        # the same exception path with a fatal message: classified fatal, no retry
        self.events.clear()
        FAKE.turns = [[("raise", fakesdk.ProcessError("Invalid API key · Fix external API key"))], [("text", "ok", 1)]]
        result = self.run_spec()
        self.assertFalse(result.ok)
        self.assertEqual(result.attempts, 1)
        self.assertEqual([e.data["kind"] for e in self.kinds("error")], ["fatal"])
        self.assertEqual(self.kinds("retry"), [])

    def test_fatal_failure_stops_at_once(self):
        FAKE.turns = [[("error", "Invalid API key · Fix external API key", 401, "api_error")]]
        result = self.run_spec()
        self.assertFalse(result.ok)
        self.assertEqual(result.attempts, 1)
        self.assertIn("Invalid API key", result.error)
        self.assertEqual(self.sleeps, [])

    def test_attempts_are_capped(self):
        FAKE.turns = [[("error", "API Error: 500 Internal server error", 500, "api_error")]] * 10
        result = self.run_spec()
        self.assertFalse(result.ok)
        self.assertEqual(result.attempts, 4)
        self.assertEqual(len(result.errors), 4)

    # chaos seed 8: an hours-long job met six passing faults far apart (a 529, an outage, two killed
    # CLIs) and stopped with exit 1, because the budget counted every failure of the step
    def test_failures_far_apart_do_not_use_up_the_budget(self):
        work = [("tool", "Bash", {"command": "make"}, "ok", 100), ("text", "step done", 100)]
        boom = ("error", "API Error: 500 Internal server error", 500, "api_error")
        FAKE.turns = [work + [boom]] * 9 + [[("text", "finished", 100)]]
        result = self.run_spec()
        self.assertTrue(result.ok, result.error)
        self.assertEqual(result.attempts, 10)   # the total is still reported
        self.assertEqual(len(self.sleeps), 9)
        self.assertTrue(all(3.0 <= s <= 5.0 for s in self.sleeps), self.sleeps)   # no growing backoff

    def test_one_answer_per_connection_is_not_progress(self):
        # a connection that dies right after the resume's first answer, again and again, is capped
        FAKE.turns = [[("text", "resuming", 100), ("error", "API Error: 500 Internal server error", 500,
                                                   "api_error")]] * 10
        result = self.run_spec()
        self.assertFalse(result.ok)
        self.assertEqual(result.attempts, 4)

    def test_network_down_past_the_wait(self):
        self.rt.resilience = Resilience(max_offline_wait=0.0, probe_interval=0.01, probe_timeout=0.2)
        os.environ["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9"
        try:
            FAKE.turns = [[("error", "API Error: Connection refused (ECONNREFUSED)", None, "api_error")]]
            result = self.run_spec()
        finally:
            del os.environ["ANTHROPIC_BASE_URL"]
        self.assertFalse(result.ok)
        self.assertTrue(result.error.startswith("network down"), result.error)

    def test_human_interrupt_resumes_same_session_without_using_an_attempt(self):
        FAKE.turns = [[("tool", "Bash", {"command": "make"}, "ok", 100), ("block", "forever")],
                      [("text", "using your words", 200)]]

        async def scenario():
            task = asyncio.ensure_future(self.rt.run(AgentSpec("work"), "go"))
            while not any(e.kind == "tool_result" for e in self.events):
                await asyncio.sleep(0.01)
            self.rt.interrupt("please use tabs")
            return await task
        result = asyncio.run(scenario())
        self.assertTrue(result.ok)
        self.assertEqual(result.attempts, 1)
        self.assertEqual(FAKE.interrupts, 1)
        self.assertTrue(FAKE.calls[1]["prompt"].endswith("please use tabs"))
        self.assertIn("interrupted", FAKE.calls[1]["prompt"])
        self.assertEqual(FAKE.calls[1]["options"].resume, FAKE.calls[0]["options"].session_id)

    def stop_while_disconnecting(self, stop):
        """A turn that failed (the run would retry), and ``stop(task)`` called while its connection is
        being closed, where a signal's stop can land; the run's outcome (an exception or a result)."""
        FAKE.turns = [[("text", "part", 100), ("error", "API Error: 500 Internal server error", 500, "api_error")],
                      [("text", "finished", 200)]]
        close = fakesdk.ClaudeSDKClient.disconnect

        async def scenario():
            task = asyncio.ensure_future(self.rt.run(AgentSpec("work"), "go", lineage_key="work"))

            async def slow_close(client):
                if len(FAKE.calls) == 1:
                    stop(task)
                    await asyncio.sleep(0.05)
                await close(client)
            fakesdk.ClaudeSDKClient.disconnect = slow_close
            try:
                return await task
            except asyncio.CancelledError as exc:
                return exc
            finally:
                fakesdk.ClaudeSDKClient.disconnect = close
        return asyncio.run(scenario())

    def test_a_stop_that_lands_while_a_connection_closes_is_not_swallowed(self):
        outcome = self.stop_while_disconnecting(lambda task: task.cancel())
        self.assertIsInstance(outcome, asyncio.CancelledError)
        self.assertEqual(len(FAKE.calls), 1)   # no request after the stop

    def test_no_request_after_rescue_even_when_its_cancel_went_astray(self):
        outcome = self.stop_while_disconnecting(lambda task: self.rt.rescue())
        self.assertIsInstance(outcome, asyncio.CancelledError)
        self.assertEqual(len(FAKE.calls), 1)
        self.assertEqual(Manifest.read(self.run_dir)[0]["error"], "killed-by-signal")

    def test_a_stop_during_a_clean_up_lets_it_end_before_the_next_one_starts(self):
        # the salvage of a failed turn runs in a thread: a stop that lands during it must not start the
        # store of the streamed messages beside it (both write the same session)
        FAKE.turns = [[("text", "part", 100), ("raise", ConnectionResetError("the CLI went away"))],
                      [("text", "finished", 200)]]
        order = []
        salvage, seen = self.rt.salvage, self.rt._store_seen

        async def scenario():
            loop = asyncio.get_running_loop()
            task = asyncio.ensure_future(self.rt.run(AgentSpec("work"), "go", lineage_key="work"))

            def slow_salvage(sid, **kw):
                if kw.get("keep_copies") and "salvage" not in order:
                    order.append("salvage")
                    loop.call_soon_threadsafe(task.cancel)   # the stop lands while it runs
                    time.sleep(0.3)
                    order.append("salvaged")
                return salvage(sid, **kw)

            def store_seen(sid, msgs):
                order.append("store")
                return seen(sid, msgs)
            self.rt.salvage, self.rt._store_seen = slow_salvage, store_seen
            try:
                return await task
            except asyncio.CancelledError as exc:
                return exc
        outcome = asyncio.run(scenario())
        self.assertIsInstance(outcome, asyncio.CancelledError)
        self.assertEqual(order, ["salvage", "salvaged", "store"])
        self.assertEqual(len(FAKE.calls), 1)

    def test_a_human_interrupt_before_the_connection_starts_is_kept(self):
        # Ctrl-C while a step prepares (the check online, the lineage written ahead): the turn that
        # then starts is interrupted and the words go to the session, they are not lost
        FAKE.turns = [[("block", "until-interrupted")], [("text", "using your words", 200)]]
        connect = self.rt._one_connection

        async def interrupted_first(*args, **kw):
            if not FAKE.calls:
                self.rt.interrupt("please use tabs")
                await asyncio.sleep(0)
            return await connect(*args, **kw)
        self.rt._one_connection = interrupted_first
        async def scenario():   # lost, the interrupt would leave the first turn blocked: fail, do not hang
            task = asyncio.ensure_future(self.rt.run(AgentSpec("work"), "go"))
            done, _ = await asyncio.wait([task], timeout=30)
            if not done:
                FAKE.events["until-interrupted"].set()
            return await task
        result = asyncio.run(scenario())
        self.assertTrue(result.ok, result.error)
        self.assertEqual(FAKE.interrupts, 1)
        self.assertTrue(FAKE.calls[1]["prompt"].endswith("please use tabs"))
        self.assertEqual(FAKE.calls[1]["options"].resume, FAKE.calls[0]["options"].session_id)

    def test_missing_session_on_resume_starts_fresh(self):
        FAKE.turns = [[("text", "fresh", 1)]]
        result = self.run_spec(resume="00000000-dead-beef-0000-000000000000")
        self.assertTrue(result.ok)
        self.assertIsNone(FAKE.calls[0]["options"].resume)
        self.assertTrue(any("not in the store" in e.data.get("message", "") for e in self.kinds("info")))

    def test_options(self):
        FAKE.turns = [[("text", "x", 1)]]
        self.run_spec(spec=AgentSpec("work", allowed_tools=["Read"], max_turns=3))
        o = FAKE.calls[0]["options"]
        self.assertEqual(o.session_store_flush, "eager")
        self.assertEqual(o.setting_sources, ["project", "local"])   # the workspace's CLAUDE.md, as claude -p
        self.assertEqual(o.permission_mode, "acceptEdits")
        self.assertEqual(o.cwd, os.path.realpath(self.ws))
        self.assertIsInstance(o.session_store, flower.PruningSessionStore)
        self.assertEqual(o.env["CLAUDE_CODE_MAX_RETRIES"], "2")
        self.assertEqual(o.env["DISABLE_AUTO_COMPACT"], "1")
        self.assertRegex(o.session_id, r"^[0-9a-f-]{36}$")

    def test_fork_gets_its_own_id(self):
        FAKE.turns = [[("text", "base", 1)], [("text", "branch", 1)]]
        base = self.run_spec()
        branch = self.run_spec(resume=base.session_id, fork=True)
        o = FAKE.calls[1]["options"]
        self.assertEqual((o.resume, o.fork_session), (base.session_id, True))
        self.assertNotEqual(branch.session_id, base.session_id)
        self.assertEqual(o.session_id, branch.session_id)


class Continuity(Base):
    def test_lineage_written_before_the_first_message(self):
        seen = {}

        def turn(prompt, options, loaded):
            with open(os.path.join(self.run_dir, "lineage.json")) as fh:
                seen.update(json.load(fh))
            return [("text", "hi", 1)]
        FAKE.turns = [turn]
        result = self.run_spec(lineage_key="work")
        self.assertEqual(seen["steps"]["work"], result.session_id)
        self.assertEqual(seen["workspace"], os.path.realpath(self.ws))

    def test_judges_never_enter_lineage(self):
        FAKE.turns = [[("text", "VERDICT: achieved", 1)]]
        self.run_spec(lineage_key=None)
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "lineage.json")))

    def test_workflow_resumes_same_step_session_on_the_next_wake(self):
        FAKE.turns = [[("text", "first", 1)], [("text", "second", 1)]]
        step = Step("取词", AgentSpec("terse"), "read seed.txt", resume_prompt="carry on")
        ctx1 = asyncio.run(Workflow([step]).run(self.rt))
        self.rt.close()
        self.rt = self.runtime()
        ctx2 = asyncio.run(Workflow([step]).run(self.rt))
        self.assertEqual((ctx1["_woke"], ctx2["_woke"]), (1, 2))
        self.assertEqual(ctx1["_sessions"]["取词"], ctx2["_sessions"]["取词"])
        self.assertEqual(FAKE.calls[1]["prompt"], "carry on")
        self.assertEqual(FAKE.calls[1]["options"].resume, ctx1["_sessions"]["取词"])
        self.assertEqual(flower.wake_state(self.ws, self.run_dir)["steps"], {"取词": ctx1["_sessions"]["取词"]})

    def test_continuous_false_starts_fresh(self):
        FAKE.turns = [[("text", "first", 1)], [("text", "second", 1)]]
        step = Step("s", AgentSpec("a"), "p")
        ctx1 = asyncio.run(Workflow([step], continuous=False).run(self.rt))
        ctx2 = asyncio.run(Workflow([step], continuous=False).run(self.rt))
        self.assertNotEqual(ctx1["_sessions"]["s"], ctx2["_sessions"]["s"])
        self.assertIsNone(FAKE.calls[1]["options"].resume)

    def test_moved_workspace_or_missing_session_means_fresh_start(self):
        FAKE.turns = [[("text", "first", 1)], [("text", "second", 1)], [("text", "third", 1)]]
        step = Step("s", AgentSpec("a"), "p", resume_prompt="again")
        asyncio.run(Workflow([step]).run(self.rt))
        # 1) the store lost the session
        lineage = flower.read_json(os.path.join(self.run_dir, "lineage.json"), {})
        lineage["steps"]["s"] = "11111111-1111-1111-1111-111111111111"
        flower.write_json(os.path.join(self.run_dir, "lineage.json"), lineage)
        self.rt.close()
        self.rt = self.runtime()
        asyncio.run(Workflow([step]).run(self.rt))
        self.assertIsNone(FAKE.calls[1]["options"].resume)
        self.assertEqual(FAKE.calls[1]["prompt"], "p")
        self.assertTrue(any("no longer stored" in e.data.get("message", "") for e in self.kinds("info")))
        # 2) the workspace moved
        moved = self.ws + "-moved"
        shutil.move(self.ws, moved)
        self.rt.close()
        self.ws = moved
        self.rt = self.runtime()
        asyncio.run(Workflow([step]).run(self.rt))
        self.assertIsNone(FAKE.calls[2]["options"].resume)
        self.assertTrue(any("belongs to" in e.data.get("message", "") for e in self.kinds("info")))

    def test_retries_and_step_name_forms(self):
        FAKE.turns = [[("error", "Invalid API key", 401, "api_error")], [("text", "ok", 1)]]
        step = Step("s", AgentSpec("a"), "p", retries=1)
        asyncio.run(Workflow([step]).run(self.rt))
        steps = [r["step"] for r in Manifest.read(self.run_dir)]
        self.assertEqual(steps, ["s", "s#retry1"])

    def test_gate_rejection_rounds_resume_the_same_session(self):
        FAKE.turns = [[("text", "v1", 1)], [("text", "v2", 1)]]
        verdicts = iter(["not good", True])
        step = Step("s", AgentSpec("a"), "p", gate=lambda ctx, r: next(verdicts),
                    on_reject=lambda ctx, r, why: f"fix: {why}")
        ctx = asyncio.run(Workflow([step]).run(self.rt))
        self.assertEqual(ctx["s"], "v2")
        self.assertEqual(FAKE.calls[1]["prompt"], "fix: not good")
        self.assertEqual(FAKE.calls[1]["options"].resume, FAKE.calls[0]["options"].session_id)
        self.assertEqual([r["step"] for r in Manifest.read(self.run_dir)], ["s", "s#round2"])

    def test_hostile_step_names(self):
        for bad in ("x\x00y", "a" * 300):
            with self.assertRaises(flower.FlowerError):
                Workflow([Step(bad, AgentSpec("a"), "p")])
        # names with / and .. never become paths outside the notes directory
        for name in ("../../escape", "a/b", ".."):
            path = self.rt.paths.handoff(name)
            self.assertEqual(os.path.dirname(path), self.rt.paths.notes_dir)
            self.assertNotIn("..", os.path.basename(path).replace("handoff-", "", 1)[:2])
            self.assertTrue(os.path.dirname(self.rt.paths.transcript(name)).startswith(self.run_dir))

    def test_failed_step_aborts(self):
        FAKE.turns = [[("error", "Invalid API key", 401, "api_error")]]
        with self.assertRaises(flower.StepAbort):
            asyncio.run(Workflow([Step("s", AgentSpec("a"), "p")]).run(self.rt))

    def test_on_fail_skip_and_continue_go_on(self):
        fail = [("error", "Invalid API key", 401, "api_error")]
        FAKE.turns = [fail, [("text", "b ran", 1)], fail, [("text", "rejected", 1)], [("text", "d ran", 1)]]
        steps = [Step("a", AgentSpec("a"), "p", on_fail="skip"), Step("b", AgentSpec("b"), "p"),
                 Step("c", AgentSpec("c"), "p", on_fail="continue"),
                 Step("g", AgentSpec("g"), "p", on_fail="skip", gate=lambda ctx, r: "no"),
                 Step("d", AgentSpec("d"), "p")]
        ctx = asyncio.run(Workflow(steps).run(self.rt))
        self.assertNotIn("a", ctx)
        self.assertNotIn("g", ctx)
        self.assertEqual(ctx["_skipped"], ["a", "g"])
        self.assertIsNone(ctx["c"])
        self.assertEqual((ctx["b"], ctx["d"]), ("b ran", "d ran"))
        with self.assertRaises(flower.FlowerError):
            Workflow([Step("s", AgentSpec("a"), "p", on_fail="skpi")])

    def test_async_when_is_awaited(self):
        FAKE.turns = [[("text", "ran", 1)]]

        async def due(ctx):
            return ctx.get("wanted", False)
        steps = [Step("no", AgentSpec("a"), "p", when=due), Step("yes", AgentSpec("a"), "p", when=lambda ctx: due({"wanted": True}))]
        ctx = asyncio.run(Workflow(steps).run(self.rt))
        self.assertNotIn("no", ctx)
        self.assertEqual(ctx["yes"], "ran")
        self.assertEqual(len(FAKE.calls), 1)

    def test_info_lines_in_chinese(self):
        with open(os.path.join(self.run_dir, "lineage.json"), "w") as fh:
            fh.write("{broken")
        told = []
        Lineage.open(self.run_dir, self.ws, notify=told.append, lang="zh")
        self.assertEqual(len(told), 1)
        self.assertIn("无法读取", told[0])

    def test_lineage_remember_merges_parallel_writers(self):
        """Four processes open the lineage, wait at a start line until all have, then each remembers
        40 steps at once: every step of every process survives."""
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = ("import os, sys, time; sys.path.insert(0, sys.argv[1]); import flower\n"
                "run_dir, ws, me, gate = sys.argv[2:6]\n"
                "lineage = flower.Lineage.open(run_dir, ws)\n"
                "open(os.path.join(gate, me), 'w').close()\n"
                "while not os.path.exists(os.path.join(gate, 'go')):\n"
                "    time.sleep(0.001)\n"
                "for i in range(40):\n"
                "    lineage.remember(f'{me}-{i}', f'sid-{me}-{i}')\n")
        gate = os.path.join(self.tmp.name, "gate")
        os.makedirs(gate)
        names = [f"p{n}" for n in range(4)]
        procs = [subprocess.Popen([sys.executable, "-c", code, root, self.run_dir, self.ws, name, gate])
                 for name in names]
        while not all(os.path.exists(os.path.join(gate, name)) for name in names):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.01)
        open(os.path.join(gate, "go"), "w").close()
        for p in procs:
            self.assertEqual(p.wait(timeout=120), 0)
        expected = {f"{name}-{i}": f"sid-{name}-{i}" for name in names for i in range(40)}
        self.assertEqual(Lineage.open(self.run_dir, self.ws).steps, expected)

    def test_archive(self):
        lineage = Lineage.open(self.run_dir, self.ws)
        lineage.remember("work", "sid")
        lineage.bump()
        brief = os.path.join(self.tmp.name, "brief.md")
        with open(brief, "w") as fh:
            fh.write("b")
        first = flower.archive_dir(os.path.join(self.tmp.name, "notes"), now=0)
        moved = lineage.archive(first, extra=[brief])
        self.assertEqual(len(moved), 2)
        self.assertFalse(os.path.exists(brief))
        self.assertEqual((lineage.steps, lineage.woke), ({}, 0))
        second = flower.archive_dir(os.path.join(self.tmp.name, "notes"), now=0)
        self.assertNotEqual(first, second)  # collision-safe names


class ManifestRows(Base):
    def test_two_runtimes_in_one_run_dir_keep_both_rows(self):
        other = self.runtime()
        FAKE.turns = [[("text", "a", 1)], [("text", "b", 1)], [("text", "c", 1)]]
        r1 = self.run_spec()
        self.rt.record(r1)
        r2 = asyncio.run(other.run(AgentSpec("x"), "go", step_name="other"))
        other.record(r2)
        r3 = self.run_spec(step_name="again")
        self.rt.record(r3)
        rows = Manifest.read(self.run_dir)
        self.assertEqual(sorted(r["step"] for r in rows), ["again", "other", "work"])
        self.assertEqual(len({r["run"] for r in rows}), 2)
        for field in ("step", "session_id", "ok", "cost_usd", "num_turns", "text", "error", "started_at", "ended_at",
                      "attempts", "errors", "retired", "resumed", "context", "duration_s", "run"):
            self.assertIn(field, rows[0])
        other.close()

    def test_processes_writing_at_once_lose_nothing(self):
        import subprocess
        import sys
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import flower\n"
                "m = flower.Manifest(sys.argv[2], flower.run_id())\n"
                "for i in range(40):\n"
                "    m.put({'step': f'{sys.argv[3]}{i}', 'started_at': str(i)})\n")
        procs = [subprocess.Popen([sys.executable, "-c", code, root, self.run_dir, tag]) for tag in "abc"]
        for p in procs:
            self.assertEqual(p.wait(timeout=120), 0)
        self.assertEqual(len(Manifest.read(self.run_dir)), 120)

    def test_corrupt_manifest_is_set_aside(self):
        path = os.path.join(self.run_dir, "manifest.json")
        with open(path, "w") as fh:
            fh.write("[{broken")
        told = []
        m = Manifest(self.run_dir, "r1", notify=told.append)
        m.put({"step": "s", "started_at": "t"})
        aside = [n for n in os.listdir(self.run_dir) if n.startswith("manifest.json.corrupt-")]
        self.assertEqual(len(aside), 1)
        with open(os.path.join(self.run_dir, aside[0])) as fh:
            self.assertEqual(fh.read(), "[{broken")
        self.assertEqual([r["step"] for r in Manifest.read(self.run_dir)], ["s"])
        self.assertEqual(len(told), 1)

    def test_foreign_layout_is_kept(self):
        path = os.path.join(self.run_dir, "manifest.json")
        with open(path, "w") as fh:
            json.dump([{"run": "old", "step": "legacy"}], fh, indent=4)
        Manifest(self.run_dir, "new").put({"step": "s", "started_at": "t"})
        self.assertEqual([r["step"] for r in Manifest.read(self.run_dir)], ["legacy", "s"])

    def test_put_appends_one_line_and_a_later_version_supersedes(self):
        path = os.path.join(self.run_dir, "manifest.jsonl")
        m = Manifest(self.run_dir, "r1")
        m.put({"step": "a", "started_at": "1", "ok": False})
        m.put({"step": "b", "started_at": "2", "ok": True})
        with open(path, "rb") as fh:
            before = fh.read()
        m.put({"step": "a", "started_at": "1", "ok": True})          # a's new version
        with open(path, "rb") as fh:
            after = fh.read()
        self.assertTrue(after.startswith(before))                      # appended, nothing rewritten
        self.assertEqual(after.count(b"\n"), 3)
        rows = Manifest.read(self.run_dir)
        self.assertEqual([(r["step"], r["ok"]) for r in rows], [("a", True), ("b", True)])   # first place kept
        self.assertEqual([r["step"] for r in m.rows], ["a", "b"])
        self.assertEqual(Manifest.tail(self.run_dir, 1), rows[-1:])

    def test_legacy_manifest_json_is_read_then_moved_in_once(self):
        legacy = os.path.join(self.run_dir, "manifest.json")
        with open(legacy, "w") as fh:
            json.dump([{"run": "old", "step": "one", "started_at": "0"}, {"run": "old", "step": "two"}], fh)
        self.assertEqual([r["step"] for r in Manifest.read(self.run_dir)], ["one", "two"])
        self.assertEqual([r["step"] for r in Manifest.tail(self.run_dir, 5)], ["one", "two"])
        Manifest(self.run_dir, "new").put({"step": "three", "started_at": "t"})
        self.assertFalse(os.path.exists(legacy))
        self.assertEqual([r["step"] for r in Manifest.read(self.run_dir)], ["one", "two", "three"])
        Manifest(self.run_dir, "newer").put({"step": "four", "started_at": "t"})
        self.assertEqual([r["step"] for r in Manifest.read(self.run_dir)], ["one", "two", "three", "four"])

    def test_wrong_shaped_and_torn_lines_are_skipped(self):
        path = os.path.join(self.run_dir, "manifest.jsonl")
        Manifest(self.run_dir, "r1").put({"step": "a", "started_at": "1"})
        with open(path, "a") as fh:
            fh.write('[1, 2]\n{"run": "r1", "step": 7}\n"text"\n{"run": "r1", "step": "b", "ok": "yes"}\n{"run": "r1", "st')
        self.assertEqual([r["step"] for r in Manifest.read(self.run_dir)], ["a"])
        self.assertEqual([r["step"] for r in Manifest.tail(self.run_dir, 10)], ["a"])
        Manifest(self.run_dir, "r2").put({"step": "c", "started_at": "2"})   # not glued to the torn line
        self.assertEqual([r["step"] for r in Manifest.read(self.run_dir)], ["a", "c"])
        state = flower.LocalState(flower.Paths(self.ws, self.run_dir))
        self.assertEqual([r["step"] for r in flower.status_data(state.paths, state)["manifest"]], ["a", "c"])

    def test_tail_reads_only_the_end(self):
        path = os.path.join(self.run_dir, "manifest.jsonl")
        with open(path, "w") as fh:
            for i in range(20_000):
                fh.write(json.dumps({"run": "r", "step": f"s{i}", "started_at": str(i), "text": "x" * 100}) + "\n")
        read = []
        real_open = open

        class Counting:
            def __init__(self, fh):
                self.fh = fh

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.fh.close()

            def seek(self, *a):
                return self.fh.seek(*a)

            def read(self, n=-1):
                data = self.fh.read(n)
                read.append(len(data))
                return data
        flower.open = lambda *a, **k: Counting(real_open(*a, **k))
        try:
            rows = Manifest.tail(self.run_dir, 10)
        finally:
            del flower.open
        self.assertEqual([r["step"] for r in rows], [f"s{i}" for i in range(19_990, 20_000)])
        self.assertLess(sum(read), os.path.getsize(path) // 10)

    def test_rows_are_redacted(self):
        result = flower.StepResult(step="s", text="the key is sk-ant-api03-abcdefghijklmnop", errors=["password=xyz123"])
        row = result.row("r")
        self.assertNotIn("abcdefghijklmnop", json.dumps(row))
        self.assertNotIn("xyz123", json.dumps(row))

    def test_rescue_writes_the_in_flight_step(self):
        FAKE.turns = [[("block", "forever")]]

        async def scenario():
            task = asyncio.ensure_future(self.rt.run(AgentSpec("work"), "go", lineage_key="work"))
            while not FAKE.calls:
                await asyncio.sleep(0.01)
            self.rt.rescue()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        asyncio.run(scenario())
        rows = Manifest.read(self.run_dir)
        self.assertEqual(rows[0]["error"], "killed-by-signal")
        self.assertTrue(Lineage.open(self.run_dir, self.ws).steps["work"])


if __name__ == "__main__":
    unittest.main()


class HookSeam(unittest.TestCase):
    """Capabilities add SDK hooks through the spec or ``Runtime.hook_sources``, never by editing
    ``build_options``: every one reaches the options, the batch stop last."""

    def test_spec_hooks_sources_and_the_batch_stop_all_reach_the_options(self):
        with tempfile.TemporaryDirectory() as tmp:
            rt = flower.Runtime(workspace=tmp)
            try:
                async def mine(*a): return {}
                async def theirs(*a): return {}
                async def batch(*a): return {}
                rt.hook_sources.append(lambda spec: {"PreToolUse": [("Bash", theirs)]})
                spec = flower.AgentSpec("w", hooks={"PreToolUse": [("Write", mine)]},
                                        agents={"worker": {"description": "d"}})
                got = rt._hooks_for(spec, {"PostToolBatch": [(None, batch)]})
                wait = got["PreToolUse"][1][1]   # every session's (spill_waits, the first source)
                self.assertEqual(wait.__qualname__, "spill_wait_hook.<locals>.wait")
                self.assertEqual(got, {"PreToolUse": [("Write", mine), (None, wait), ("Bash", theirs)],
                                       "PostToolBatch": [(None, batch)]})
                opts = rt.build_options(fakesdk, spec, session_id="s", resume=None, fork=False,
                                        manage_context=True, connection_hooks={"PostToolBatch": [(None, batch)]})
                self.assertEqual([(m.matcher, len(m.hooks)) for m in opts.hooks["PreToolUse"]],
                                 [("Write", 1), (None, 1), ("Bash", 1)])
                self.assertEqual([m.hooks[0] for m in opts.hooks["PreToolUse"]][::2], [mine, theirs])
                self.assertEqual([m.timeout for m in opts.hooks["PreToolUse"]], [None, flower.SPILL_WAIT_TIMEOUT, None])
                self.assertEqual(opts.agents, {"worker": {"description": "d"}})
            finally:
                rt.close()
