"""Talking to a running job from another machine (issue 41, "with ``--state`` from another machine"):
``say``, ``answer`` and ``handoff`` given ``--state postgresql://...`` leave their request in the
database (``flower.inbox``, schema 5), and the go that drives the workspace, on any machine, acts on
it at its next tool boundary as on its local ``.flower/`` files. PostgreSQL tier (tests/pgserver.py):
the backend's mailbox and the schema migration; real tier: the real SDK and CLI against the fake API,
machine A running ``go``, machine B (another directory, no shared run dir) running the commands."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import unittest

import flower
from tests.fakeapi import FakeAnthropic, Reply, text, tool
from tests.helpers import RUN_FLOWER, HAVE_SDK, MachinesCase, PgCase, SKIP, shared_server, assert_mail_delivered, \
    freeze_front, mail_ids, stop_shared_server
from tests.pgserver import HAVE_PG, SKIP as PG_SKIP

WS_ID = "github.com/acme/hello#main"   # machine A's checkout of git@github.com:acme/hello.git, branch main


def tearDownModule():
    stop_shared_server()


@unittest.skipUnless(HAVE_PG, PG_SKIP)
class InboxTable(PgCase):
    """The backend's side: rows one machine leaves, another machine's go finds and deletes."""

    def inbox(self, state):
        return flower.Inbox(flower.inbox_dir(state.paths))

    def test_mail_left_on_b_is_pending_on_a_in_order_with_its_local_files_until_done(self):
        a, b = self.machine("a"), self.machine("b")
        box_a, box_b = a.mailbox(self.inbox(a)), b.mailbox(self.inbox(b))
        first = box_b.post("first from B sk-ant-api03-" + "x" * 40)
        local = self.inbox(a).post("typed on A")
        second = box_b.post("second from B")
        self.assertFalse(os.path.exists(flower.inbox_dir(b.paths)))         # nothing on B's disk
        mails = box_a.pending()
        self.assertEqual([m.id for m in mails], [first, local, second])
        self.assertNotIn("x" * 40, mails[0].words)                       # redacted before it is stored
        self.assertEqual(self.sql("SELECT count(*) FROM flower.inbox WHERE body LIKE %s", "%" + "x" * 40 + "%"),
                         [(0,)])
        for mail in mails:
            box_a.done(mail.id)
        self.assertEqual(box_a.pending(), [])
        self.assertEqual(self.sql("SELECT count(*) FROM flower.inbox"), [(0,)])

    def test_another_workspace_does_not_see_the_mail(self):
        a, other = self.machine("a"), self.machine("c", ws_id="job-2")
        a.mailbox(self.inbox(a)).post("for job-1")
        self.assertEqual(other.mailbox(self.inbox(other)).pending(), [])

    def test_a_question_asked_on_a_is_answered_from_b(self):
        a, b = self.machine("a"), self.machine("b")
        a.post_question("q1", "tabs?")
        self.assertEqual(b.questions_waiting(), ["q1"])
        self.assertIsNone(a.answer_waiting("q1"))
        b.post_answer("q1", "spaces")
        self.assertEqual(a.answer_waiting("q1"), "spaces")
        a.close_question("q1")
        self.assertEqual(b.questions_waiting(), [])
        self.assertEqual(self.sql("SELECT count(*) FROM flower.inbox"), [(0,)])

    def test_a_handoff_asked_on_b_waits_on_a_until_done(self):
        a, b = self.machine("a"), self.machine("b")
        self.assertFalse(a.handoff_waiting())
        self.assertIn("handoff", b.post_handoff())
        self.assertFalse(os.path.exists(flower.handoff_flag(b.paths)))   # B's disk is not where A looks
        self.assertTrue(a.handoff_waiting())
        a.handoff_done()
        self.assertFalse(a.handoff_waiting())

    def test_polls_during_an_outage_read_nothing_and_never_reconnect(self):
        a, b = self.machine("a"), self.machine("b")
        b.post_handoff()
        a.mailbox(self.inbox(a)).post("from the database")
        self.inbox(a).post("typed on A")
        self.assertTrue(a.handoff_waiting())
        a._conn.close()
        a._conn, a._retry_at = None, 1.0   # lost: the last connect failed, its pause is over
        real_connect, tries = a._connect, []
        a._connect = lambda: tries.append(1) or real_connect()
        self.assertFalse(a.handoff_waiting())
        self.assertEqual([m.words for m in a.mailbox(self.inbox(a)).pending()], ["typed on A"])   # the files speak
        self.assertEqual(tries, [])   # a poll on each answer never waits for a connect
        self.assertTrue(a.ready())    # what brings the connection back
        self.assertTrue(a.handoff_waiting())
        self.assertEqual(len(a.mailbox(self.inbox(a)).pending()), 2)

    def test_a_schema_4_database_migrates(self):
        old = self.machine("a")
        old.lineage_update(lambda d: d.update({"steps": {"work": "s-old"}, "workspace": "/x"}), {})
        old.close()
        self.states.remove(old)
        # the database as a flower.py of schema 4 left it: no flower.inbox, version 4
        self.sql("DROP TABLE IF EXISTS flower.inbox")
        self.sql("DELETE FROM flower.schema_version")
        self.sql("INSERT INTO flower.schema_version (version) VALUES (4)")
        a = self.machine("a")
        self.assertEqual(self.sql("SELECT max(version) FROM flower.schema_version"), [(5,)])
        self.assertEqual(a.lineage_latest()["steps"], {"work": "s-old"})   # what was there is kept
        mail_id = a.mailbox(self.inbox(a)).post("after the migration")
        self.assertEqual([m.id for m in a.mailbox(self.inbox(a)).pending()], [mail_id])


@unittest.skipUnless(HAVE_SDK, SKIP)
@unittest.skipUnless(HAVE_PG, PG_SKIP)
class FromAnotherMachine(MachinesCase, unittest.TestCase):
    """Machine A runs ``go --state``; machine B, in a directory of its own, talks to it."""

    @classmethod
    def setUpClass(cls):
        cls.server = shared_server()

    @classmethod
    def tearDownClass(cls):
        pass   # the module's server is stopped by tearDownModule

    def setUp(self):
        super().setUp()
        self.elsewhere = os.path.join(self.tmp.name, "b", "elsewhere")   # B: not a checkout of the job
        os.makedirs(self.elsewhere)
        os.makedirs(os.path.join(self.tmp.name, "b", "home"), exist_ok=True)

    def env(self, ws):
        env = super().env(ws)
        env.pop("CI", None)   # a person can answer here
        return env

    def on_b(self, *args):
        """``flower.py ARGS --state URL --workspace-id <A's id>`` run on machine B."""
        p = subprocess.run([*RUN_FLOWER, *args, "--state", self.dsn, "--workspace-id", WS_ID],
                           cwd=self.elsewhere, env=self.env(os.path.join(self.elsewhere, "x")),
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return p

    def say_on_b(self, words):
        return re.search(r"mail (\S+) left", self.on_b("say", words).stderr).group(1)

    def rows(self, kind=None):
        if kind is None:
            return self.sql("SELECT kind, key FROM flower.inbox ORDER BY id")
        return [key for (key,) in self.sql("SELECT key FROM flower.inbox WHERE kind=%s ORDER BY id", kind)]

    def local_inbox(self, ws):
        directory = os.path.join(ws, ".flower", "inbox")
        return sorted(os.listdir(directory)) if os.path.isdir(directory) else []

    def test_say_on_b_reaches_the_next_request_of_a_in_order_once_and_lands_in_the_brief(self):
        sent = {}

        def step(k):
            def answer(body):
                if k in (2, 5, 8):
                    sent[k] = self.say_on_b(f"MAIL-{k} please also keep a log")
                    self.assertEqual(self.rows("mail")[-1], sent[k])   # in the database, not on a disk of B's
                return tool("Bash", {"command": f"echo tool-{k}"})
            return answer
        self.roles.work = [step(k) for k in range(10)] + [text("all done")]
        freeze_front(self.a)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.run_flower(self.a, "--no-goal", "--json")
        work = self.roles.bodies("work")
        self.assertEqual(len(work), 11)
        assert_mail_delivered(self, work, sent)
        with open(os.path.join(self.a, ".flower", "notes", "brief.md"), encoding="utf-8") as fh:
            brief = fh.read()
        self.assertLess(brief.index("MAIL-2"), brief.index("MAIL-5"))
        self.assertLess(brief.index("MAIL-5"), brief.index("MAIL-8"))
        self.assertIn("### Mail received", brief)
        events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        self.assertEqual([e["data"]["id"] for e in events if e["kind"] == "mail"], [sent[2], sent[5], sent[8]])
        self.assertEqual(self.rows(), [])                                     # delivered: gone
        self.assertEqual(self.local_inbox(self.elsewhere), [])

    def test_mail_from_b_when_a_is_killed_first_is_delivered_on_the_next_run(self):
        state, killed = {}, threading.Event()

        def say_then_die(body):
            state["mail"] = self.say_on_b("MAIL-KILLED carry on")
            os.kill(state["proc"].pid, signal.SIGKILL)
            killed.set()
            return Reply(stall=5)
        self.roles.work = [tool("Bash", {"command": "echo before"}), say_then_die]
        freeze_front(self.a)   # about the work step: the brief and goal as clarify and goal leave them
        state["proc"] = self.spawn(self.a, "--no-goal")
        self.wait_for(killed.is_set, timeout=120, what="the kill")
        state["proc"].wait(timeout=60)
        self.assertEqual(self.rows("mail"), [state["mail"]])                 # not delivered: still waiting
        before = len(self.roles.bodies("work"))
        self.roles.work = [tool("Bash", {"command": "echo after"}), text("done")]
        b = self.checkout_b()                                                  # the next run, on machine B
        self.run_flower(b, "--no-goal")
        later = self.roles.bodies("work")[before:]
        self.assertEqual(mail_ids(later[-1]).count(state["mail"]), 1)
        self.assertEqual(sum(mail_ids(body).count(state["mail"]) for body in later[:-1]), 0)
        self.assertEqual(self.rows(), [])
        with open(os.path.join(b, ".flower", "notes", "brief.md"), encoding="utf-8") as fh:
            self.assertEqual(fh.read().count("MAIL-KILLED"), 1)

    def test_mail_the_store_recorded_is_not_handed_over_again_when_its_row_outlived_a_kill(self):
        # the phase: the entry recording the mail is committed, A dies before the row is deleted (the
        # test puts the row back after the kill, which is what that kill leaves)
        state, killed = {}, threading.Event()

        def say_then_tool(body):
            state["mail"] = self.say_on_b("MAIL-RECORDED carry on")
            state["row"] = self.sql("SELECT ws, kind, key, body FROM flower.inbox WHERE key=%s", state["mail"])[0]
            return tool("Bash", {"command": "echo during"})

        def die_once_recorded(body):
            tag = f"%[mail {state['mail']}]%"
            self.wait_for(lambda: self.sql("SELECT count(*) FROM flower.entries WHERE payload LIKE %s", tag)[0][0],
                          timeout=60, what="the mail's record")
            os.kill(state["proc"].pid, signal.SIGKILL)
            killed.set()
            return Reply(stall=5)
        self.roles.work = [say_then_tool, die_once_recorded]
        freeze_front(self.a)   # about the work step: the brief and goal as clarify and goal leave them
        state["proc"] = self.spawn(self.a, "--no-goal")
        self.wait_for(killed.is_set, timeout=120, what="the kill")
        state["proc"].wait(timeout=60)
        self.sql("INSERT INTO flower.inbox (ws, kind, key, body) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                 *state["row"])
        before = len(self.roles.bodies("work"))
        self.roles.work = [tool("Bash", {"command": "echo after"}), text("done")]
        self.run_flower(self.checkout_b(), "--no-goal")                        # the next run, on machine B
        later = self.roles.bodies("work")[before:]
        self.assertTrue(later)
        self.assertEqual(mail_ids(later[-1]), [state["mail"]])               # the session's one record
        self.assertEqual(self.rows(), [])

    def test_answer_on_b_answers_the_question_a_waits_on(self):
        self.roles.work = [tool("mcp__flower__ask", {"question": "QUESTION-MARK tabs or spaces?"}), text("done")]
        answered = {}

        def answer_it():
            self.wait_for(lambda: self.rows("question"), timeout=120, what="the question in the database")
            qid = self.rows("question")[0]
            answered["p"] = self.on_b("answer", qid, "ANSWER-MARK spaces")
        helper = threading.Thread(target=answer_it)
        helper.start()
        env = dict(self.env(self.a), FLOWER_ASK_TIMEOUT="180")
        freeze_front(self.a)   # about the work step: the brief and goal as clarify and goal leave them
        p = subprocess.run([*RUN_FLOWER, "--state", self.dsn, "--no-goal"], cwd=self.a, env=env,
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        helper.join()
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn("left: the agent gets it now", answered["p"].stderr)
        self.assertIn("ANSWER-MARK spaces", FakeAnthropic.messages_text(self.roles.bodies("work")[1]))
        with open(os.path.join(self.a, ".flower", "notes", "qa.md"), encoding="utf-8") as fh:
            qa = fh.read()
        self.assertIn("QUESTION-MARK", qa)
        self.assertIn("ANSWER-MARK spaces", qa)
        self.assertEqual(self.rows(), [])

    def test_handoff_on_b_makes_a_hand_over_at_its_next_boundary(self):
        def ask_then_tool(body):
            self.on_b("handoff")
            self.assertEqual(self.rows("handoff"), [""])
            return tool("Bash", {"command": "echo tool-1"})
        self.roles.work = [tool("Bash", {"command": "echo tool-0"}), ask_then_tool,
                           tool("Bash", {"command": "echo tool-2"}), text("all done")]
        freeze_front(self.a)   # about the work step: the brief and goal as clarify and goal leave them
        p = self.run_flower(self.a, "--no-goal", "--json")
        order = [role for role, _ in self.roles.log if role in ("work", "ritual")]
        self.assertEqual(order, ["work", "work", "ritual", "work", "work"])
        ritual = next(body for role, body in self.roles.log if role == "ritual")
        self.assertIn("tool-1", FakeAnthropic.messages_text(ritual))          # the tool in flight ran to its end
        sent = FakeAnthropic.messages_text(self.roles.bodies("work")[2])
        self.assertIn("You take over unfinished work", sent)                   # a fresh session from the carry
        self.assertNotIn("echo tool-0", sent)
        events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        asked = [e for e in events if e["kind"] == "handoff" and e["data"].get("phase") == "asked"]
        self.assertEqual([e["data"]["reason"] for e in asked], ["asked"])
        self.assertEqual(self.rows(), [])                                       # done: the request is gone


if __name__ == "__main__":
    unittest.main()
