"""Talking to a running job (issue 41): the inbox, questions without a terminal, signs of life, side
questions, handing off on purpose. Core tier: the pure parts. Real tier: the real SDK and CLI driven
through ``flower.py`` against the fake API (tests/fakeapi.py), with ``say``/``answer``/``ask``/``handoff``
run as separate processes while ``go`` runs."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import unittest

import flower
from tests.fakeapi import FakeAnthropic, Reply, text, tool
from tests.fakesdk import FAKE
from tests.helpers import E2ECase, FakeRuntime, RUN_FLOWER, HAVE_SDK, SKIP, assert_mail_delivered, freeze_front, \
    mail_ids, resume_copies, role_of
from tests.fakeapi import last_user_text


class InboxFiles(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.inbox = flower.Inbox(os.path.join(self.tmp.name, "inbox"))

    def test_post_is_private_ordered_and_redacted(self):
        first = self.inbox.post("one")
        second = self.inbox.post("two sk-ant-api03-" + "x" * 40)
        self.assertEqual(os.stat(self.inbox.directory).st_mode & 0o777, 0o700)
        self.assertEqual(os.stat(os.path.join(self.inbox.directory, first)).st_mode & 0o777, 0o600)
        mails = self.inbox.pending()
        self.assertEqual([m.id for m in mails], [first, second])
        self.assertNotIn("x" * 40, mails[1].words)

    def test_mail_is_dated_by_the_clock_it_was_posted_by_not_its_files_coarse_mtime(self):
        # the file system's clock lags the one post() reads by up to a jiffy: a mail posted 3 ms after a
        # database mail (dated by that clock) must not come before it
        later = self.inbox.post("typed second")
        posted = int(later[:19])
        os.utime(os.path.join(self.inbox.directory, later), ns=(posted - 4_000_000, posted - 4_000_000))
        with open(os.path.join(self.inbox.directory, "note.txt"), "w") as fh:
            fh.write("dropped by hand")
        os.utime(os.path.join(self.inbox.directory, "note.txt"), ns=(posted - 2_000_000, posted - 2_000_000))
        mails = self.inbox.pending()
        self.assertEqual([m.id for m in mails], ["note.txt", later])   # by hand: dated by its mtime
        self.assertEqual(mails[1].sent, posted / 1e9)
        database = flower.Mail("db", "posted first", (posted - 3_000_000) / 1e9)
        self.assertEqual([m.id for m in sorted(mails + [database], key=lambda m: m.sent)], ["db", "note.txt", later])

    def test_a_dropped_file_is_mail_and_a_bad_one_is_set_aside(self):
        with open(os.path.join(self.tmp.name, "x"), "w"):
            pass
        os.makedirs(self.inbox.directory)
        with open(os.path.join(self.inbox.directory, "note.txt"), "w") as fh:
            fh.write("dropped words\n")
        with open(os.path.join(self.inbox.directory, "bad.txt"), "wb") as fh:
            fh.write(b"\xff\xfe\x00bad")
        with open(os.path.join(self.inbox.directory, ".hidden.tmp"), "w") as fh:
            fh.write("half written")
        said = []
        self.inbox.notify = said.append
        self.assertEqual([m.words for m in self.inbox.pending()], ["dropped words"])
        self.assertTrue(any(n.startswith("bad.txt.corrupt-") for n in os.listdir(self.inbox.directory)))
        self.assertEqual(len(said), 1)

    def test_recorded_mail_is_found_in_a_hook_attachment_only(self):
        mail_id = self.inbox.post("hi")
        context = flower.mail_context(self.inbox.pending())
        attachment = {"type": "attachment", "attachment": {"type": "hook_additional_context", "content": [context]}}
        said_by_user = {"type": "user", "message": {"role": "user", "content": context}}
        self.assertEqual(flower.mails_recorded([said_by_user]), set())
        self.assertEqual(flower.mails_recorded([attachment]), {mail_id})


class Desk(unittest.TestCase):
    """The desk hands mail over at a boundary and lets it go only once the store recorded it."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.rt = flower.Runtime(workspace=self.tmp.name)
        self.addCleanup(self.rt.close)
        self.events = []
        self.rt.on_event = self.events.append
        self.desk = flower.attach_inbox(self.rt)

    def boundary(self, spec_name="work", data=None):
        import asyncio
        hooks = self.desk.hooks(flower.AgentSpec(spec_name))
        if not hooks:
            return {}
        return asyncio.run(hooks["PostToolBatch"][0][1](data or {}, None, None))

    def test_handed_over_once_and_kept_until_recorded(self):
        mail_id = self.desk.inbox.post("use tabs")
        first = self.boundary()
        context = first["hookSpecificOutput"]["additionalContext"]
        self.assertIn(f"[mail {mail_id}]", context)
        self.assertIn("use tabs", context)
        import asyncio
        again = asyncio.run(self.desk._hook("PostToolBatch")({}, None, None))
        self.assertEqual(again, {})   # handed over already on this connection
        self.assertEqual([m.id for m in self.desk.inbox.pending()], [mail_id])   # not recorded yet: kept
        self.assertIn("use tabs", flower._read_text(self.rt.paths.brief))
        self.assertEqual([e.data["id"] for e in self.events if e.kind == "mail"], [mail_id])
        # a new connection (the last one ended before the store took it) gets it again
        self.assertIn(mail_id, self.boundary()["hookSpecificOutput"]["additionalContext"])
        self.rt._stored({"project_key": "p", "session_id": "s"}, [
            {"type": "attachment", "attachment": {"type": "hook_additional_context", "content": [context]}}])
        self.assertEqual(self.desk.inbox.pending(), [])
        self.assertEqual(flower._read_text(self.rt.paths.brief).count("use tabs"), 1)

    def test_not_for_subagents_nor_other_steps(self):
        self.desk.inbox.post("hello")
        self.assertEqual(self.boundary("judge"), {})
        self.assertEqual(self.boundary(data={"agent_id": "a1"}), {})
        self.assertEqual(len(self.desk.inbox.pending()), 1)


class AnswersTypedAtOnce(FakeRuntime, unittest.TestCase):
    """A question shown at the terminal (Ctrl-C's, an agent's ``ask``) is asked before it shows: the
    next line typed is its answer, never mail, however soon it comes."""

    def test_a_line_typed_the_moment_the_question_shows_is_the_answer_not_mail(self):
        import asyncio
        import io
        from unittest import mock
        FAKE.turns = [[("tool", "Bash", {"command": "make"}, "ok", 100), ("block", "until-interrupted")],
                      [("text", "using your words", 200)]]
        rt = self.runtime()
        desk = flower.attach_inbox(rt)
        read_end, write_end = os.pipe()
        stdin = os.fdopen(read_end, "r")
        self.addCleanup(stdin.close)
        self.addCleanup(os.close, write_end)   # first: the reader thread sees the end of input and stops

        class Screen(flower.Reporter):
            def say(self, message, *, always=False):
                super().say(message, always=always)
                if "What should I tell the agent?" in message:   # typed at once: the reader's line is queued now
                    lines = flower._TERMINAL[0]
                    lines.loop.call_soon_threadsafe(lines._route, "use tabs")
        reporter = Screen(out=io.StringIO(), err=io.StringIO(), tty=False)

        async def body():
            task = asyncio.ensure_future(rt.run(flower.AgentSpec("work"), "go", lineage_key="work"))
            while not any(e.kind == "tool_result" for e in self.events):
                await asyncio.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)
            done, _ = await asyncio.wait([task], timeout=20)
            if not done:   # the words went astray and the question still waits: fail, do not hang
                os.write(write_end, b"\n")
            return await task
        with mock.patch.object(sys, "stdin", stdin):
            result = asyncio.run(flower._run_with_signals(
                rt, reporter, lambda: flower.listening(rt, reporter, desk, True, body), True))
        self.assertTrue(result.ok, result.error)
        self.assertEqual(desk.inbox.pending(), [])   # the answer, not mail
        self.assertEqual(FAKE.interrupts, 1)
        self.assertTrue(FAKE.calls[1]["prompt"].endswith("use tabs"), FAKE.calls[1]["prompt"])

    def test_an_answer_typed_the_moment_an_ask_question_shows_is_its_answer_not_mail(self):
        import asyncio
        rt = self.runtime()
        desk = flower.QuestionDesk(rt, interactive=True, timeout=3)
        read_end, write_end = os.pipe()
        stdin = os.fdopen(read_end, "r")
        self.addCleanup(stdin.close)
        self.addCleanup(os.close, write_end)
        mails = []

        async def scenario():
            with flower.TerminalLines(mails.append, stream=stdin) as lines:
                def shown(event):   # typed at once: the reader's line is queued as the question shows
                    if event.kind == "ask" and "phase" not in event.data:
                        lines.loop.call_soon_threadsafe(lines._route, "blue")
                rt.on_event = shown
                return await desk.ask("which colour?")
        self.assertEqual(asyncio.run(scenario()), "blue")
        self.assertEqual(mails, [])


@unittest.skipUnless(HAVE_SDK, SKIP)
class InboxLive(E2ECase, unittest.TestCase):

    def say(self, words):
        p = subprocess.run([*RUN_FLOWER, "say", words], cwd=self.ws, env=self.env,
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr)
        return re.search(r"mail (\S+) left", p.stderr).group(1)

    def inbox(self):
        directory = os.path.join(self.ws, ".flower", "inbox")
        return sorted(n for n in os.listdir(directory) if not n.startswith(".")) if os.path.isdir(directory) else []

    def test_three_mails_during_a_ten_tool_job_reach_the_next_request_in_order_once(self):
        sent = {}   # work request index (0-based) during which a mail was sent -> its id

        def step(k):
            def answer(body):
                if k in (2, 5, 8):
                    sent[k] = self.say(f"MAIL-{k} please also keep a log")
                return tool("Bash", {"command": f"echo tool-{k}"})
            return answer
        self.roles.work = [step(k) for k in range(10)] + [text("all done")]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.flower("--no-goal", "--json")
        work = self.roles.bodies("work")
        self.assertEqual(len(work), 11)
        last = assert_mail_delivered(self, work, sent)
        self.assertNotIn("interrupted", last.lower())
        brief = self.read(".flower", "notes", "brief.md")
        self.assertLess(brief.index("MAIL-2"), brief.index("MAIL-5"))
        self.assertLess(brief.index("MAIL-5"), brief.index("MAIL-8"))
        self.assertIn("### Mail received", brief)
        events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        self.assertEqual([e["data"]["id"] for e in events if e["kind"] == "mail"], [sent[2], sent[5], sent[8]])
        self.assertEqual(self.inbox(), [])

    def test_mail_of_a_killed_run_is_delivered_on_the_next_run(self):
        state = {}
        killed = threading.Event()

        def say_then_die(body):
            state["mail"] = self.say("MAIL-KILLED carry on")
            os.kill(state["proc"].pid, signal.SIGKILL)
            killed.set()
            return Reply(stall=5)
        self.roles.work = [tool("Bash", {"command": "echo before"}), say_then_die]
        freeze_front(self.ws)
        proc = self.spawn("--no-goal")
        state["proc"] = proc
        self.addCleanup(lambda: (proc.poll() is None and proc.kill(), proc.wait(), proc.stdout.close(),
                                 proc.stderr.close()))
        self.wait_for(killed.is_set, timeout=120, what="the kill")
        proc.wait(timeout=60)
        self.assertEqual(self.inbox(), [state["mail"]])   # not delivered: still waiting
        before = len(self.roles.bodies("work"))
        self.roles.work = [tool("Bash", {"command": "echo after"}), text("done")]
        self.flower("--no-goal")
        later = self.roles.bodies("work")[before:]
        self.assertEqual(mail_ids(later[-1]).count(state["mail"]), 1)
        self.assertEqual(self.inbox(), [])
        self.assertEqual(self.read(".flower", "notes", "brief.md").count("MAIL-KILLED"), 1)

    def killed_at_delivery(self, words, before_kill=lambda state: None):
        """``go`` with a mail said during its first tool, SIGKILLed at the request that carries the mail
        (after ``before_kill(state)``); returns the state: the mail's id, its file, what was carried."""
        state, killed = {}, threading.Event()

        def say_then_tool(body):
            state["mail"] = self.say(words)
            with open(os.path.join(self.ws, ".flower", "inbox", state["mail"]), "rb") as fh:
                state["file"] = fh.read()
            return tool("Bash", {"command": "echo during"})

        def die_on_delivery(body):   # the request carrying the mail: the hook has handed it over
            state["carried"] = mail_ids(body)
            before_kill(state)
            os.kill(state["proc"].pid, signal.SIGKILL)
            killed.set()
            return Reply(stall=5)
        self.roles.work = [say_then_tool, die_on_delivery]
        freeze_front(self.ws)
        proc = self.spawn("--no-goal")
        state["proc"] = proc
        self.addCleanup(lambda: (proc.poll() is None and proc.kill(), proc.wait(), proc.stdout.close(),
                                 proc.stderr.close()))
        self.wait_for(killed.is_set, timeout=120, what="the kill")
        proc.wait(timeout=60)
        return state

    def next_run(self):
        """The run after a kill, to its end; the work requests it sent."""
        before = len(self.roles.bodies("work"))
        self.roles.work = [tool("Bash", {"command": "echo after"}), text("done")]
        self.flower("--no-goal")
        later = self.roles.bodies("work")[before:]
        self.assertTrue(later)
        return later

    def test_mail_handed_over_when_the_run_is_killed_is_in_the_session_once(self):
        state = self.killed_at_delivery("MAIL-INFLIGHT carry on")
        self.assertEqual(state["carried"], [state["mail"]])
        later = self.next_run()
        self.assertEqual(mail_ids(later[-1]), [state["mail"]])   # in the session once: never sent twice
        self.assertEqual(self.inbox(), [])

    def recorded_anywhere(self, mail_id):
        db = sqlite3.connect(os.path.join(self.ws, ".flower", "sessions.db"))
        try:
            return db.execute("SELECT count(*) FROM entries WHERE payload LIKE ?", (f"%[mail {mail_id}]%",)).fetchone()[0]
        finally:
            db.close()

    def test_mail_the_store_recorded_is_not_handed_over_again_when_its_file_outlived_a_kill(self):
        # the phase: the store committed the entry recording the mail, flower died before the inbox
        # file was deleted; the test leaves exactly that on disk (the file put back after the kill)
        state = self.killed_at_delivery("MAIL-RECORDED carry on", lambda state: self.wait_for(
            lambda: self.recorded_anywhere(state["mail"]), timeout=60, what="the mail's record"))
        left = os.path.join(self.ws, ".flower", "inbox", state["mail"])
        if not os.path.exists(left):
            with open(left, "wb") as fh:
                fh.write(state["file"])
        later = self.next_run()
        self.assertEqual(mail_ids(later[-1]), [state["mail"]])   # the session's one record, not a second
        self.assertEqual(self.inbox(), [])


@unittest.skipUnless(HAVE_SDK, SKIP)
class QuestionsLive(E2ECase, unittest.TestCase):

    def asking(self):
        freeze_front(self.ws)   # about the work step's question: the brief and goal as clarify and goal leave them
        return [tool("mcp__flower__ask", {"question": "QUESTION-MARK tabs or spaces?"}), text("done")]

    def test_unanswered_question_times_out_and_the_agent_is_told_to_assume(self):
        self.roles.work = self.asking()
        p = self.flower("--no-goal", "--json", env={"FLOWER_ASK_TIMEOUT": "2"})
        after = FakeAnthropic.messages_text(self.roles.bodies("work")[1])
        self.assertIn("No answer came within", after)
        self.assertIn("Unknowns and assumptions", after)
        asks = [json.loads(line) for line in p.stdout.splitlines() if '"kind": "ask"' in line]
        self.assertTrue(any(e["data"].get("id") and "answer" in e["data"].get("message", "") for e in asks), asks)
        qa = self.read(".flower", "notes", "qa.md")
        self.assertIn("QUESTION-MARK tabs or spaces?", qa)
        self.assertIn("no answer within", qa)

    def test_answer_from_another_process(self):
        self.roles.work = self.asking()
        qdir = os.path.join(self.ws, ".flower", "questions")
        answered = {}

        def answer_it():
            self.wait_for(lambda: os.path.isdir(qdir) and any(n.endswith(".json") for n in os.listdir(qdir)),
                          timeout=120, what="the question")
            qid = [n for n in os.listdir(qdir) if n.endswith(".json")][0][:-5]
            answered["p"] = subprocess.run([*RUN_FLOWER, "answer", qid, "ANSWER-MARK spaces"],
                                           cwd=self.ws, env=self.env, capture_output=True, text=True, timeout=60)
        helper = threading.Thread(target=answer_it)
        helper.start()
        self.flower("--no-goal", env={"FLOWER_ASK_TIMEOUT": "600"})
        helper.join()
        self.assertEqual(answered["p"].returncode, 0, answered["p"].stderr)
        self.assertIn("ANSWER-MARK spaces", FakeAnthropic.messages_text(self.roles.bodies("work")[1]))
        qa = self.read(".flower", "notes", "qa.md")
        self.assertIn("QUESTION-MARK", qa)
        self.assertIn("ANSWER-MARK spaces", qa)
        self.assertEqual(os.listdir(qdir), [])

    def test_no_human_possible_is_told_at_once(self):
        self.roles.work = self.asking()
        self.flower("--no-goal", env={"CI": "1", "FLOWER_ASK_TIMEOUT": "600"}, timeout=120)
        self.assertIn("No human can answer here", FakeAnthropic.messages_text(self.roles.bodies("work")[1]))

    def test_answer_to_no_such_question_is_a_usage_error(self):
        p = self.flower("answer", "abc123", "hi", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no question abc123", p.stderr)
        self.assertNotIn("Traceback", p.stderr)


@unittest.skipUnless(HAVE_SDK, SKIP)
class HeartbeatLive(E2ECase, unittest.TestCase):
    """Without a terminal, silence gets a line per period (1 s here): the tool and the stalled answer
    each last until the test has seen two such lines, so nothing depends on how fast the machine is."""

    def setUp(self):
        super().setUp()
        self.enough = threading.Event()

    def run_watching(self, needle):
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        proc = self.spawn("--no-goal", "--json", env={"FLOWER_HEARTBEAT": "1"})
        self.addCleanup(lambda: (proc.poll() is None and proc.kill(), proc.wait()))
        self.beats = []

        def read():
            for line in proc.stdout:
                if '"kind": "heartbeat"' in line:
                    event = json.loads(line)
                    self.beats.append(event)
                    if needle in event["data"].get("message", "") and \
                            sum(needle in b["data"].get("message", "") for b in self.beats) >= 2:
                        self.enough.set()
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        err = proc.stderr.read()
        proc.wait(timeout=180)
        reader.join(10)
        self.assertEqual(proc.returncode, 0, err[-3000:])
        return err

    def test_a_long_tool_gets_a_line_per_period(self):
        flag = os.path.join(self.tmp.name, "go-on")
        wait = f"python3 -c \"import os,time\nwhile not os.path.exists('{flag}'): time.sleep(0.1)\""

        def release_after_beats():
            self.enough.wait(120)
            open(flag, "w").close()
        threading.Thread(target=release_after_beats, daemon=True).start()
        self.roles.work = [tool("Bash", {"command": wait}), text("done")]
        err = self.run_watching("work · still running Bash")
        self.assertTrue(self.enough.is_set())
        self.assertGreaterEqual(err.count("work · still running Bash · "), 2, err[-3000:])
        self.assertTrue(all(b["step"] == "work" for b in self.beats if "Bash" in b["data"].get("message", "")))

    def test_a_stalled_answer_gets_a_line_per_period(self):
        def stall(body):
            self.enough.wait(120)
            return text("done late")
        self.roles.work = [stall]
        err = self.run_watching("work · still waiting for the model")
        self.assertTrue(self.enough.is_set())
        self.assertGreaterEqual(err.count("work · still waiting for the model · "), 2, err[-3000:])


@unittest.skipUnless(HAVE_SDK, SKIP)
class SideQuestionLive(E2ECase, unittest.TestCase):

    def test_ask_while_go_runs_forks_the_live_session_and_leaves_it_alone(self):
        self.roles.work = [tool("Bash", {"command": "echo FIRST-RUN-MARK"}), text("done")]
        freeze_front(self.ws)   # a finished job to wake: its work and judge as a fresh go leaves them
        self.flower()
        work_sid = self.lineage()["steps"]["work"]
        arrived, release = threading.Event(), threading.Event()
        self.addCleanup(release.set)
        side, roles = [], self.roles

        def responder(body):   # the held work answer never holds the roles' lock
            if "A side question from the person" in last_user_text(body):
                side.append(body)
                return text("SIDE-ANSWER-MARK it writes hello")
            if role_of(body) == "work" and not arrived.is_set():
                arrived.set()
                reply = text("LIVE-ANSWER-MARK")
                reply.held = True   # held in _answer, outside the server's lock
                return reply
            if role_of(body) in ("work", "clarify", "goal", "judge", "ritual"):
                return roles(body)
            return text("ok")
        self.api.responder = responder
        answer = self.api._answer
        self.api._answer = lambda handler, body, reply: (
            getattr(reply, "held", False) and release.wait(120), answer(handler, body, reply))[1]
        go = self.spawn("also say bye")   # a wake: the work step resumes its stored session
        self.addCleanup(lambda: (go.poll() is None and go.kill(), go.wait(), go.stdout.close(), go.stderr.close()))
        self.wait_for(arrived.is_set, what="the live go's resumed work request")
        copies = resume_copies(work_sid)
        self.assertTrue(copies)
        # the live go settles its wake once the store holds the sentence: its own change, not the question's
        self.wait_for(lambda: self.lineage().get("wake") is None, what="the live go's wake settled")
        entries = self.stored(work_sid)
        lineage = self.read(".flower", "lineage.json")
        p = self.flower("ask", "what are you doing and why?")
        self.assertFalse(release.is_set())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("SIDE-ANSWER-MARK", p.stdout)
        self.assertIn("side question answered from a fork of work session", p.stderr)
        self.assertEqual(len(side), 1)
        asked = FakeAnthropic.messages_text(side[0])
        self.assertIn("FIRST-RUN-MARK", asked)                 # it saw the work session's history
        self.assertIn("what are you doing and why?", asked)
        self.assertEqual(resume_copies(work_sid), copies)      # the live go's temp copy untouched
        self.assertEqual(self.stored(work_sid), entries)       # and its stored entries
        self.assertEqual(self.read(".flower", "lineage.json"), lineage)
        rows = flower.Manifest.read(os.path.join(self.ws, ".flower"))
        rows_side = [r for r in rows if r["step"] == flower.SIDE_STEP]
        self.assertEqual(len(rows_side), 1)
        self.assertNotEqual(rows_side[0]["session_id"], work_sid)
        release.set()
        out, err = go.communicate(timeout=180)
        self.assertEqual(go.returncode, 0, err[-3000:])
        self.assertIn("LIVE-ANSWER-MARK", json.dumps(self.stored(work_sid)))
        self.assertNotIn("SIDE-ANSWER-MARK", json.dumps(self.stored(work_sid)))
        self.assertEqual(self.lineage()["steps"]["work"], work_sid)

    def test_ask_without_a_work_session_is_a_usage_error(self):
        p = self.flower("ask", "anything?", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no work session", p.stderr)


class Pty:
    """``flower.py ARGS`` on a pseudo-terminal; a thread keeps reading the screen."""

    def __init__(self, ws, env, *args):
        import pty
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(ws)
            os.execve(sys.executable, [*RUN_FLOWER, *args], env)
        self.pid, self.fd, self.screen = pid, fd, b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                return
            if not chunk:
                return
            self.screen += chunk

    def send(self, data):
        os.write(self.fd, data.encode())

    def wait(self, timeout=180):
        import time
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.thread.join(5)
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        raise AssertionError("timed out: " + self.screen.decode("utf-8", "replace")[-2000:])

    def text(self):
        return self.screen.decode("utf-8", "replace")


@unittest.skipUnless(HAVE_SDK, SKIP)
class TerminalLive(E2ECase, unittest.TestCase):

    def inbox_count(self):
        directory = os.path.join(self.ws, ".flower", "inbox")
        return len(os.listdir(directory)) if os.path.isdir(directory) else 0

    def test_a_line_typed_while_work_runs_is_mail(self):
        def type_line(body):
            self.term.send("MAIL-TYPED use tabs\n")
            self.wait_for(lambda: self.inbox_count() == 1, timeout=60, what="the typed mail in the inbox")
            return tool("Bash", {"command": "echo typed"})
        self.roles.work = [type_line, text("done")]
        self.term = Pty(self.ws, self.env, "write hello")
        self.assertEqual(self.term.wait(), 0, self.term.text()[-3000:])
        work = self.roles.bodies("work")
        self.assertNotIn("MAIL-TYPED", FakeAnthropic.messages_text(work[0]))
        self.assertEqual(len(mail_ids(work[1])), 1)
        self.assertIn("MAIL-TYPED use tabs", FakeAnthropic.messages_text(work[1]))
        self.assertIn("MAIL-TYPED", self.read(".flower", "notes", "brief.md"))
        self.assertIn("queued", self.term.text())


if __name__ == "__main__":
    unittest.main()
