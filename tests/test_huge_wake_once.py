"""The first wake of a session that does not fit reads its rows once (issue 44): prepare()'s deciding pass
keeps the outline the handoff reads next, which is exactly what reading it again gave, and lets it go."""

import asyncio
import dataclasses
import json
import os
import random
import sqlite3
import tempfile
import unittest
import unittest.mock

import flower
from tests.helpers import PgCase, stop_shared_server
from tests.pgserver import HAVE_PG, SKIP
from tests.transcripts import Builder, anchor_transcript, session_with_big_results, with_logs, with_odd_entries

PK = "proj"
KEY = {"project_key": PK, "session_id": "s"}


def agents_session(seed: int) -> list[dict]:
    """Agent and Task calls (answered, failed, unanswered), a subagent's sidechain entries, big reports."""
    rng = random.Random(seed)
    b = Builder(rng)
    b.prompt("build it with workers")
    for i in range(60):
        pick = rng.random()
        if pick < 0.4:
            name = rng.choice(flower.AGENT_TOOLS)
            report = f"{flower._REPORT_FRAME if rng.random() < 0.5 else ''}done {i}\nagentId: a{i}\n" + \
                "found: the parser drops the last line\n" * rng.choice([1, 80])
            b.tool(name, {"description": f"part {i}", "prompt": "do it"}, report,
                   kind=rng.choice(["ok", "ok", "error"]), answered=rng.random() < 0.9)
        elif pick < 0.6:
            side = b.add({"type": "assistant", "isSidechain": True, "message": {
                "id": f"msg_side{i}", "role": "assistant", "model": "claude-opus-5-5",
                "content": [{"type": "text", "text": f"worker {i} reads the logs " * 40}]}})
            side["agentId"] = f"a{i}"
        elif pick < 0.85:
            b.tool("Bash", {"command": f"make part{i}"}, "ok " * rng.randint(1, 2000))
        else:
            b.say(f"checked part {i} " * rng.randint(1, 60), 1000 + i)
    b.say("all parts done", 9000)
    return b.entries


def chinese_session(seed: int) -> list[dict]:
    """Chinese prompts, answers and big results (and a denial, an API error)."""
    rng = random.Random(seed)
    b = Builder(rng)
    b.prompt("修复所有失败的测试，并说明原因")
    for i in range(50):
        b.tool("Bash", {"command": f"pytest tests/测试_{i}.py"}, f"第{i}个测试：" + "断言失败，期望值与实际值不同。\n" * rng.choice([2, 200]))
        if rng.random() < 0.3:
            b.say(f"第{i}步：夹具已经过期，需要重新生成。" * rng.randint(1, 30), 1000 + i)
        if rng.random() < 0.1:
            b.tool("Bash", {"command": "rm -rf 构建"}, "", kind="denial")
        if rng.random() < 0.05:
            b.api_error(2)
    b.say("全部通过。", 9000)
    return b.entries


def shapes():
    yield "plain", with_logs(anchor_transcript(1500, seed=46), 46)
    yield "agents", agents_session(5)
    yield "big results", session_with_big_results(9, 40)
    yield "chinese", chinese_session(7)
    yield "odd", with_odd_entries(random.Random(3), with_logs(anchor_transcript(600, seed=4), 4), "s-anchor", 40)


def material(entries: list[dict]) -> tuple:
    """What a handoff makes of a retired session's entries (as Runtime._hand_over does): the slim transcript,
    the thread, the degraded ledger and the carry, and what the stream's entries are chained to."""
    entries = list(entries)
    earlier = flower.carried_ledger(entries)
    ledger = flower.degraded_ledger(entries, "the stored session does not fit the window", "the step's prompt",
                                    earlier=earlier)
    thread = flower.recent_thread(entries)
    carry = flower.assemble_carry(ledger, nav={"handoff document": "/n/handoff.md"}, thread=thread,
                                  full_text="/n/handoff.md")
    return (flower.slim_transcript(entries, "s"), thread, ledger.render("work", 2, "en"), carry.text,
            earlier and earlier.render("work", 1, "en"), flower.newest_uuid(entries),
            sorted(e["uuid"] for e in entries if isinstance(e.get("uuid"), str)))


def outline_read(store, key=KEY) -> list[dict]:
    """The outline as the store reads it from its rows (nothing kept)."""
    store._outline = None
    return store.load_outline(key)


def entry_reads(statements: list[str]) -> list[str]:
    """The statements that read the payloads of entries rows."""
    return [s for s in statements if "FROM entries" in s and "payload" in s.split("FROM entries")[0]]


class Case(unittest.TestCase):
    def stored(self, entries, policy=None):
        tmp = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(tmp, ignore_errors=True))
        self.path = os.path.join(tmp, "s.db")
        store = flower.SqliteSessionStore(self.path)
        self.addCleanup(store.close)
        store.append_sync(KEY, entries)
        wrapped = flower.PruningSessionStore(store, policy=policy or flower.PrunePolicy(
            trim=True, spill_dir=os.path.join(tmp, "spill")))
        return store, wrapped

    def budgets(self, wrapped, raw):
        """Budgets the session does not fit: one its text alone is over (the deciding pass stops after its
        scan), and where the shape allows, one only its results make it miss (every step of the prune runs)."""
        least = min(flower.estimate_tokens(flower.prune(raw, policy)[0])
                    for policy in (wrapped.policy, wrapped.harder_policy()))
        st = flower._drop_api_errors(raw, wrapped.policy)
        text_only = flower._tokens(st.chars, [])
        out = {"text over": max(1, text_only // 2)}
        if text_only < least - 100:   # (midway: clear of the estimate's own error either way)
            out["results over"] = (text_only + least) // 2
        return out


class Differential(Case):
    def test_the_kept_outline_is_what_reading_it_gives_and_the_handoff_makes_the_same(self):
        steps = kept_ones = 0
        for shape, raw in shapes():
            store, wrapped = self.stored(raw)
            scan = flower._drop_api_errors(raw, wrapped.policy)
            told = not (scan.careful or scan.recount)   # else only a walk tells the size: the rows are read again
            for name, budget in self.budgets(wrapped, raw).items():
                store._db.execute("DELETE FROM cut_facts")
                for wake in ("first", "later"):
                    with self.subTest(shape=shape, budget=name, wake=wake):
                        with unittest.mock.patch.object(flower, "_late_steps", wraps=flower._late_steps) as late:
                            self.assertFalse(asyncio.run(wrapped.prepare(KEY, budget)))
                        steps += late.call_count
                        stopped = told and name == "text over"   # the prune stopped after its scan
                        self.assertEqual(late.call_count == 0, stopped)
                        self.assertEqual(store._outline is not None, stopped)
                        kept = asyncio.run(wrapped.load_outline(KEY))
                        self.assertIsNone(store._outline)   # given once
                        kept_ones += stopped
                        read = outline_read(store)
                        self.assertEqual(json.dumps(kept, ensure_ascii=False), json.dumps(read, ensure_ascii=False))
                        self.assertEqual(material(kept), material(read))
                        if shape != "agents":   # (an outline cuts a big worker's report: the ledger then lacks it)
                            self.assertEqual(material(kept), material(store.load_sync(KEY)))
                        self.assertEqual(store.load_sync(KEY), raw)   # nothing changed in what it stored
                        if wake == "first":
                            self.assertGreater(store._db.execute("SELECT COUNT(*) FROM cut_facts").fetchone()[0], 0)
        self.assertGreater(steps, 0)   # some shape took every step of the prune
        self.assertGreater(kept_ones, 6)

    def test_a_session_only_its_results_make_miss_keeps_no_outline(self):
        # the prune trims, expires and relinks its entries in place: the handoff reads the rows
        raw = with_logs(anchor_transcript(1500, seed=46), 46)
        store, wrapped = self.stored(raw)
        budget = self.budgets(wrapped, raw)["results over"]
        self.assertFalse(asyncio.run(wrapped.prepare(KEY, budget)))
        self.assertGreater(wrapped.last_report.trimmed + wrapped.last_report.expired, 0)
        self.assertIsNone(store._outline)
        self.assertEqual(material(asyncio.run(wrapped.load_outline(KEY))), material(raw))


class OneRead(Case):
    def test_the_first_wake_and_its_handoff_read_the_rows_once(self):
        for wake in ("first", "later"):
            with self.subTest(wake=wake):
                store, wrapped = self.stored(with_logs(anchor_transcript(1200, seed=8), 8))
                if wake == "later":
                    self.assertFalse(asyncio.run(wrapped.prepare(KEY, 10)))
                    asyncio.run(wrapped.load_outline(KEY))
                said: list[str] = []
                store._db.set_trace_callback(said.append)
                self.assertFalse(asyncio.run(wrapped.prepare(KEY, 10)))
                decided = len(entry_reads(said))
                entries = asyncio.run(wrapped.load_outline(KEY))
                store._db.set_trace_callback(None)
                self.assertEqual(decided, 1)
                self.assertEqual(len(entry_reads(said)), 1)   # the handoff read nothing more
                self.assertEqual(len(entries), 1200)

    def test_a_session_that_fits_keeps_no_outline(self):
        store, wrapped = self.stored(with_logs(anchor_transcript(300, seed=8), 8))
        self.assertTrue(asyncio.run(wrapped.prepare(KEY, 10**9)))
        self.assertIsNone(store._outline)
        self.assertEqual(asyncio.run(wrapped.load(KEY)), flower.prune(store.load_sync(KEY), wrapped.policy)[0])

    def test_a_session_whose_last_context_was_under_the_budget_is_spared_the_outline(self):
        raw = with_logs(anchor_transcript(800, seed=8), 8)
        last = [e for e in raw if e.get("type") == "assistant" and e["message"].get("model") != "<synthetic>"][-1]
        last["message"]["usage"] = {"input_tokens": 40}
        store, wrapped = self.stored(raw)
        self.assertEqual(store.last_context(PK, "s"), 40)
        self.assertFalse(asyncio.run(wrapped.prepare(KEY, 50)))   # most likely fits: it did not, read as before
        self.assertIsNone(store._outline)
        self.assertEqual(material(asyncio.run(wrapped.load_outline(KEY))), material(raw))
        self.assertFalse(asyncio.run(wrapped.prepare(KEY, 39)))
        self.assertIsNotNone(store._outline)

    def test_what_it_holds_after_the_handoff_read_is_nothing(self):
        store, wrapped = self.stored(with_logs(anchor_transcript(800, seed=8), 8))
        self.assertFalse(asyncio.run(wrapped.prepare(KEY, 10)))
        kept = store._outline[2]
        self.assertEqual(len(json.dumps(kept)), len(json.dumps(outline_read(store))))   # no big text kept
        self.assertFalse(asyncio.run(wrapped.prepare(KEY, 10)))
        asyncio.run(wrapped.load_outline(KEY))
        self.assertIsNone(store._outline)
        self.assertEqual(wrapped._prepared, {})


class Stale(Case):
    """A kept outline is given only while the store holds what it was taken of."""

    def decided(self):
        raw = with_logs(anchor_transcript(600, seed=9), 9)
        store, wrapped = self.stored(raw)
        self.assertFalse(asyncio.run(wrapped.prepare(KEY, 10)))
        self.assertIsNotNone(store._outline)
        return store, wrapped, raw

    def added(self):
        return {"type": "user", "uuid": "added-1", "parentUuid": None, "sessionId": "s",
                "message": {"role": "user", "content": "ADDED LATER"}}

    def test_another_connection_wrote(self):
        store, wrapped, raw = self.decided()
        db = sqlite3.connect(self.path)
        db.execute("INSERT INTO entries(skey, uuid, payload) VALUES (?,?,?)",
                   (f"{PK}/s", "added-1", json.dumps(self.added())))
        db.commit()
        db.close()
        entries = asyncio.run(wrapped.load_outline(KEY))
        self.assertEqual(entries[-1]["uuid"], "added-1")
        self.assertEqual(len(entries), len(raw) + 1)

    def test_this_store_wrote(self):
        store, wrapped, raw = self.decided()
        asyncio.run(wrapped.append(KEY, [self.added()]))
        self.assertEqual(asyncio.run(wrapped.load_outline(KEY))[-1]["uuid"], "added-1")

    def test_another_session_or_another_load(self):
        store, wrapped, raw = self.decided()
        self.assertEqual(asyncio.run(wrapped.load_outline(dict(KEY, session_id="other"))), None)
        self.assertIsNone(store._outline)   # asked for another key: let go
        self.assertFalse(asyncio.run(wrapped.prepare(KEY, 10)))
        store.load_pruned(KEY, wrapped.policy)
        self.assertIsNone(store._outline)

    def test_a_fact_another_writer_left_stale_is_read_as_the_rows_are(self):
        store, wrapped, raw = self.decided()
        asyncio.run(wrapped.load_outline(KEY))
        seq, uid = store._db.execute("SELECT seq, uuid FROM cut_facts ORDER BY seq LIMIT 1").fetchone()
        other = dict(self.added(), uuid="f" * 8)
        db = sqlite3.connect(self.path)   # INSERT OR REPLACE fires no trigger: the fact stays, of another uuid
        db.execute("INSERT OR REPLACE INTO entries(seq, skey, uuid, payload) VALUES (?,?,?,?)",
                   (seq, f"{PK}/s", other["uuid"], json.dumps(other)))
        db.commit()
        db.close()
        self.assertFalse(asyncio.run(wrapped.prepare(KEY, 10)))
        kept = asyncio.run(wrapped.load_outline(KEY))
        self.assertEqual(json.dumps(kept), json.dumps(outline_read(store)))
        self.assertIn("ADDED LATER", material(kept)[0])


class Verdict(unittest.TestCase):
    """The deciding pass stops after its scan only where the verdict is that of the whole prune."""

    def test_a_deciding_prune_over_its_budget_anyway_says_what_the_whole_prune_says(self):
        stops = 0
        for shape, raw in shapes():
            policy = flower.PrunePolicy(trim=True, spill_dir="/s")
            harder = flower.PruningSessionStore(None, policy=policy).harder_policy()
            for budget in (1, 100, 1000, 5000, 20000, 10**9):
                with self.subTest(shape=shape, budget=budget):
                    over = dataclasses.replace(policy, budget=budget, fallback=harder)
                    stored = json.dumps(raw)
                    whole = flower._prune(json.loads(stored), over, True, estimate=True)
                    given = json.loads(stored)
                    kept = list(given)   # the prune empties the list it is given
                    decided = flower._prune(given, dataclasses.replace(over, deciding=True), True, estimate=True)
                    if decided[0] == [] and whole[0] != []:   # stopped after the scan: over whatever the steps leave
                        self.assertEqual(json.dumps(kept), stored)   # and changed no entry
                        self.assertGreater(decided[1].tokens, budget)
                        self.assertGreater(flower._size(whole), budget)
                        stops += 1
                    else:
                        self.assertEqual(json.dumps(decided[0]), json.dumps(whole[0]))
                        self.assertEqual(decided[1].as_dict(), whole[1].as_dict())
        self.assertGreater(stops, 5)


@unittest.skipUnless(HAVE_PG, SKIP)
class Postgres(PgCase):
    """The PostgreSQL store keeps no outline (it declares none): its handoff reads the session whole."""

    def test_a_session_that_does_not_fit_is_handed_over_from_its_rows(self):
        paths_state = self.machine()
        store = paths_state.session_store()
        raw = with_logs(anchor_transcript(400, seed=5), 5)
        for i in range(0, len(raw), 100):
            store.append_sync(KEY, raw[i:i + 100])
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(trim=True, spill_dir=self.tmp.name))
        self.assertFalse(asyncio.run(wrapped.prepare(KEY, 10)))
        self.assertEqual(wrapped._prepared, {})
        self.assertEqual(material(asyncio.run(wrapped.load_outline(KEY))), material(raw))
        self.assertTrue(asyncio.run(wrapped.prepare(KEY, 10**9)))
        self.assertEqual(asyncio.run(wrapped.load(KEY)), flower.prune(raw, wrapped.policy)[0])


tearDownModule = stop_shared_server   # the one server PgCase started for this module


if __name__ == "__main__":
    unittest.main()
