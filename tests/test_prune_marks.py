"""A key its trim-on load left as it was is marked (issue 46): a later load with the same policy reads its
payloads in one statement after the head and prunes nothing. What must hold: every load still equals
prune() of the stored rows, whatever another writer did to them since (added, changed, deleted, moved,
replaced a row, dropped a trigger), and a key a prune changes, or a mark of another policy, is never
taken as left as it was."""

import asyncio
import json
import os
import random
import sqlite3
import tempfile
import unittest
import unittest.mock

import flower
from tests.transcripts import anchor_transcript, random_transcript

PK = "proj"


def plain_session(n: int, sid: str = "s", errors: bool = False) -> list[dict]:
    """``n`` entries a prune leaves as they are: a prompt, then Read calls and their results (two of them
    big: trimmed by a policy that keeps no big result); with ``errors``, an API error among them, which
    a store leaves unread (its facts tell it) and whose child a prune points at the error's parent."""
    entries, parent = [], None
    for i in range(n):
        uid = f"{sid}-{i}"
        if i % 2:
            message = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i - 1}",
                                                    "content": f"contents of file {i}" * (300 if i in (3, 7) else 1)}]}
        elif i:
            message = {"role": "assistant", "id": f"m{i}", "model": "claude-x", "content": [
                {"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"file_path": f"/w/f{i}"}}]}
        else:
            message = {"role": "user", "content": "read the files"}
        entries.append({"type": message["role"], "uuid": uid, "parentUuid": parent, "sessionId": sid,
                        "isSidechain": True, "message": message})
        parent = uid
        if errors and i == 10:
            entries.append(api_error(f"{sid}-error", parent))
            parent = f"{sid}-error"
    entries.append({"type": "assistant", "uuid": f"{sid}-end", "parentUuid": parent, "sessionId": sid,
                    "isSidechain": True, "message": {"role": "assistant", "id": "mend", "model": "claude-x",
                                                     "content": [{"type": "text", "text": "Report: done."}]}})
    return entries


def api_error(uid: str, parent: str) -> dict:
    return {"type": "assistant", "uuid": uid, "parentUuid": parent, "isApiErrorMessage": True, "sessionId": "s",
            "message": {"role": "assistant", "model": "<synthetic>", "content": [
                {"type": "text", "text": "API Error: 500 Internal server error"}]}}


class MarkCase(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.path = os.path.join(tmp.name, "sessions.db")
        self.store = flower.SqliteSessionStore(self.path)
        self.addCleanup(self.store.close)
        self.other = sqlite3.connect(self.path, isolation_level=None)   # a writer knowing nothing of flower
        self.addCleanup(self.other.close)
        self.policy = flower.PrunePolicy(trim=True, spill_dir=os.path.join(tmp.name, "spill"))
        self.key = {"project_key": PK, "session_id": "s", "subpath": "subagents/agent-1"}
        self.skey = flower._key_string(self.key)

    def load(self, key=None, policy=None):
        wrapped = flower.PruningSessionStore(self.store, policy=policy or self.policy)
        got = asyncio.run(wrapped.load(key or self.key))
        self.report = wrapped.last_report
        return got

    def marked(self) -> set:
        return {r[0] for r in self.other.execute("SELECT skey FROM prune_marks")}

    def assertSameAsPrune(self, key=None, policy=None):
        policy = policy or self.policy
        want, report = flower.prune(self.store.load_sync(key or self.key), policy)
        self.assertEqual(self.load(key, policy), want)
        self.assertEqual(self.report.as_dict(), report.as_dict())

    def statements(self, run):
        seen = []
        self.store._db.set_trace_callback(lambda sql: sql.startswith("--") or seen.append(sql))
        try:
            return run(), seen
        finally:
            self.store._db.set_trace_callback(None)


class MarkedLoad(MarkCase):
    def test_a_key_left_as_it_was_is_marked_and_then_read_in_two_statements(self):
        self.store.append_sync(self.key, plain_session(30))
        first = self.load()
        self.assertEqual(first, self.store.load_sync(self.key))   # prune leaves it as it was
        self.assertEqual(self.marked(), {self.skey})
        got, seen = self.statements(self.load)
        self.assertEqual(got, first)
        self.assertEqual(len(seen), 2, seen)   # head, payloads
        self.assertIn("prune_marks", seen[1])

    def test_a_key_whose_prune_drops_only_rows_left_unread_is_marked_so(self):
        self.store.append_sync(self.key, plain_session(30, errors=True))
        first = self.load()
        self.assertEqual(len(first), len(self.store.load_sync(self.key)) - 1)   # the error left
        mark = self.other.execute("SELECT policy FROM prune_marks").fetchone()[0]
        self.assertEqual(mark, flower.prune_mark(self.policy) + flower.LEFT_MARK)
        got, seen = self.statements(self.load)
        self.assertEqual(got, first)
        self.assertEqual(len(seen), 4, seen)   # head, plan, rows, data_version
        self.assertEqual(sum("data_version" in s for s in seen), 2, seen)   # in the head, then alone

    def test_a_row_added_during_a_left_only_load_is_pruned(self):
        self.store.append_sync(self.key, plain_session(30, errors=True))
        self.load()
        real = flower.SqliteSessionStore._planned_rows
        last = self.store.load_sync(self.key)[-1]["uuid"]

        def planned(store, skey, policy):   # another writer adds an API error (without facts) right then
            self.other.execute("INSERT INTO entries(skey, uuid, payload) VALUES (?,?,?)",
                               (skey, "late-error", json.dumps(api_error("late-error", last))))
            return real(store, skey, policy)
        with unittest.mock.patch.object(flower.SqliteSessionStore, "_planned_rows", planned):
            got = self.load()
        self.assertEqual(got, flower.prune(self.store.load_sync(self.key), self.policy)[0])
        self.assertNotIn("late-error", [e["uuid"] for e in got])

    def test_a_key_a_prune_changes_is_not_marked(self):
        rng = random.Random(46)
        keys = []
        for k in range(40):
            key = dict(self.key, subpath=f"subagents/agent-{k}")
            entries = random_transcript(k, size=30) if k % 2 else anchor_transcript(25, seed=k)
            self.store.append_sync(key, entries)
            keys.append(key)
        for _ in range(2):
            for key in rng.sample(keys, len(keys)):
                with self.subTest(key=key["subpath"]):
                    self.assertSameAsPrune(key)
        marks = dict(self.other.execute("SELECT skey, policy FROM prune_marks"))
        for key in keys:
            stored = self.store.load_sync(key)
            pruned, report = flower.prune(stored, self.policy)
            mark = marks.get(flower._key_string(key))
            self.assertEqual(pruned == stored, mark == flower.prune_mark(self.policy), key)
            if report.expired or report.interrupts or report.healed or report.trimmed:
                self.assertIsNone(mark, key)
        kinds = [(m or "").endswith(flower.LEFT_MARK) for m in marks.values()]
        self.assertTrue(any(kinds) and not all(kinds))   # both kinds met
        self.assertLess(len(marks), len(keys))           # and keys not marked

    def test_a_mark_of_another_policy_is_not_used(self):
        self.store.append_sync(self.key, plain_session(30))
        self.load()
        self.assertEqual(self.marked(), {self.skey})
        harder = flower.PrunePolicy(trim=True, trim_keep=0, trim_min_chars=1000, spill_dir=self.policy.spill_dir)
        self.assertNotEqual(flower.prune(self.store.load_sync(self.key), harder)[0], self.store.load_sync(self.key))
        self.assertSameAsPrune(policy=harder)   # it trims the big results
        self.assertSameAsPrune()

    def test_a_policy_changed_in_place_has_another_mark(self):
        policy = flower.PrunePolicy(trim=True)
        before = flower.prune_mark(policy)
        self.assertEqual(flower.prune_mark(policy), before)
        policy.trim_keep = 0
        self.assertNotEqual(flower.prune_mark(policy), before)
        self.assertEqual(flower.prune_mark(flower.PrunePolicy(trim=True)), before)

    def test_an_estimate_is_not_served_by_a_mark(self):
        self.store.append_sync(self.key, plain_session(30))
        self.load()
        entries, report = self.store.load_pruned(self.key, self.policy, estimate=True)
        self.assertEqual(entries, self.store.load_sync(self.key))
        self.assertEqual(report.tokens, flower.estimate_tokens(entries))   # the size a prepare decides by
        wrapped = flower.PruningSessionStore(self.store, policy=self.policy)
        self.assertTrue(asyncio.run(wrapped.prepare(self.key, 10**9)))
        self.assertIsNotNone(wrapped.last_report.tokens)   # the estimate a prepare asks for is told
        self.assertEqual(asyncio.run(wrapped.load(self.key)), self.store.load_sync(self.key))


class MarkGoesWithTheRows(MarkCase):
    """Whatever another writer does to a marked key's rows, the next load prunes what is stored now."""

    def changed(self, how: str) -> None:
        rows = self.other.execute("SELECT seq, uuid, payload FROM entries WHERE skey=? ORDER BY seq",
                                  (self.skey,)).fetchall()
        seq, uid, payload = rows[5]
        error = json.dumps(api_error(uid, json.loads(payload)["parentUuid"]))
        if how == "append":   # an API error after the last row: a prune drops it
            last = json.loads(rows[-1][2])["uuid"]
            self.other.execute("INSERT INTO entries(skey, uuid, payload) VALUES (?,?,?)",
                               (self.skey, "late-error", json.dumps(api_error("late-error", last))))
        elif how == "update":
            self.other.execute("UPDATE entries SET payload=? WHERE seq=?", (error, seq))
        elif how == "delete":   # the chain now names a parent that is gone: still what prune makes of it
            self.other.execute("DELETE FROM entries WHERE seq=?", (rows[1][0],))
        elif how == "replace":   # the row's uuid taken again: the old row goes (no delete trigger), a new seq
            self.other.execute("INSERT OR REPLACE INTO entries(skey, uuid, payload) VALUES (?,?,?)",
                               (self.skey, uid, error))
        elif how == "delete and append":   # as many rows as before
            self.other.execute("DELETE FROM entries WHERE seq=?", (rows[-1][0],))
            self.other.execute("INSERT INTO entries(skey, uuid, payload) VALUES (?,?,?)",
                               (self.skey, "late-error", json.dumps(api_error("late-error", rows[-2][1]))))
        elif how == "moved in":   # an older key's first row moved under this one (its seq below this key's)
            first = self.other.execute("SELECT min(seq) FROM entries").fetchone()[0]
            self.other.execute("UPDATE entries SET payload=? WHERE seq=?", (json.dumps(api_error("moved", None)), first))
            self.other.execute("UPDATE entries SET skey=? WHERE seq=?", (self.skey, first))
        elif how == "uuid column":
            self.other.execute("UPDATE entries SET uuid='elsewhere' WHERE seq=?", (seq,))

    def test_every_change_unmarks_the_key(self):
        for how in ("append", "update", "delete", "replace", "delete and append", "moved in", "uuid column"):
            for errors in (False, True):
                with self.subTest(how=how, errors=errors):
                    self.key = dict(self.key, subpath=f"subagents/{how}-{errors}")
                    self.skey = flower._key_string(self.key)
                    self.store.append_sync(self.key, plain_session(30, sid=f"{how}-{errors}".replace(" ", "-"),
                                                                   errors=errors))
                    self.check_change(how)

    def check_change(self, how):
        self.load()
        self.assertIn(self.skey, self.marked())
        self.changed(how)
        self.assertSameAsPrune()
        self.assertSameAsPrune()   # and again, marked anew or not

    def test_a_mark_trigger_dropped_by_another_writer_forgets_every_mark(self):
        for name in flower.MARK_TRIGGERS:
            with self.subTest(trigger=name):
                self.key = dict(self.key, subpath=f"subagents/{name}")
                self.skey = flower._key_string(self.key)
                self.store.append_sync(self.key, plain_session(30, sid=name))
                self.load()
                self.assertIn(self.skey, self.marked())
                self.other.execute(f"DROP TRIGGER {name}")
                seq = self.other.execute("SELECT seq, uuid FROM entries WHERE skey=? ORDER BY seq LIMIT 1 OFFSET 5",
                                         (self.skey,)).fetchone()[0]
                if name.endswith("gone_1"):
                    self.other.execute("DELETE FROM entries WHERE seq=?", (seq,))
                else:
                    self.other.execute("UPDATE entries SET payload=? WHERE seq=?",
                                       (json.dumps(api_error(f"e{seq}", None)), seq))
                self.assertSameAsPrune()
                known = {n for (n,) in self.other.execute(flower.SQL_TRIGGERS_KNOWN)}
                self.assertTrue(known.issuperset(flower.MARK_TRIGGERS))   # back, for later writes


if __name__ == "__main__":
    unittest.main()
