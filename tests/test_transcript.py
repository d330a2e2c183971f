"""Transcript logic: the prune pipeline (properties over generated transcripts, fixtures captured
from the real CLI), re-link, heal, the read-only command predicate, the water level."""

import asyncio
import copy
import json
import marshal
import os
import tempfile
import unittest
import unittest.mock

import flower
from flower import PrunePolicy, prune, relink, is_read_only_command
from tests.helpers import exact
from tests.transcripts import Builder, random_transcript, DENIAL_TEXT, hostile_entry, with_odd_entries

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
NEUTRAL = flower.text("interrupted_result")


def uuids(entries):
    return [e.get("uuid") for e in entries]


def tool_uses(entries):
    return [b["id"] for e in entries if e.get("type") == "assistant"
            for b in flower.blocks_of(e) if isinstance(b, dict) and b.get("type") == "tool_use"]


def tool_results(entries):
    return [b["tool_use_id"] for e in entries if e.get("type") == "user"
            for b in flower.blocks_of(e) if isinstance(b, dict) and b.get("type") == "tool_result"]


def model_view(entries):
    """What the model is sent of these entries: their message contents."""
    return json.dumps([e.get("message", {}).get("content") for e in entries if e.get("type") in ("user", "assistant")],
                      ensure_ascii=False)


def check_invariants(case, original, pruned):
    seen = set()
    for entry in pruned:
        parent = entry.get("parentUuid")
        case.assertTrue(parent is None or parent in seen, f"dangling or forward parent {parent}")
        if isinstance(entry.get("uuid"), str):
            seen.add(entry["uuid"])
    results = tool_results(pruned)
    positions = {}
    for i, entry in enumerate(pruned):
        for b in flower.blocks_of(entry):
            if isinstance(b, dict) and b.get("type") == "tool_use":
                positions[b["id"]] = i
    for tid in tool_uses(pruned):
        case.assertEqual(results.count(tid), 1, f"tool_use {tid} has {results.count(tid)} results")
    for i, entry in enumerate(pruned):
        for b in flower.blocks_of(entry):
            if isinstance(b, dict) and b.get("type") == "tool_result" and b["tool_use_id"] in positions:
                case.assertLess(positions[b["tool_use_id"]], i, "tool_result before its tool_use")
    for entry in pruned:
        case.assertFalse(flower.is_api_error_entry(entry), "an API error entry survived")
    case.assertNotIn("API Error", json.dumps(pruned))   # in no entry: one encoding of them all


class PruneProperties(unittest.TestCase):
    """Invariants over 600 seeded random transcripts, under three policies."""

    def test_invariants_on_generated_transcripts(self):
        policies = [PrunePolicy(), PrunePolicy(keep_denials=0),
                    PrunePolicy(trim=True, trim_keep=3, spill_dir="/spill", keep_glances=2)]
        for seed in range(600):
            entries = random_transcript(seed, size=10 + seed % 60)
            before = exact(entries)   # its keys' order too
            policy = policies[seed % 3]
            out1, _ = prune(entries, policy)
            self.assertEqual(exact(entries), before, f"seed {seed}: input mutated")
            out2, _ = prune(marshal.loads(before), policy)   # exact() is marshal's: loaded, a deep copy
            self.assertEqual(out1, out2, f"seed {seed}: not deterministic")
            again, report = prune(out1, policy)
            self.assertEqual(again, out1, f"seed {seed}: not idempotent")
            self.assertEqual(report.as_dict()["denials_dropped"], 0)
            with self.subTest(seed=seed):
                check_invariants(self, entries, out1)

    def test_store_rows_unchanged_by_load(self):
        store = flower.SqliteSessionStore(":memory:")
        wrapped = flower.PruningSessionStore(store)
        for seed in range(20):
            key = {"project_key": "p", "session_id": f"s{seed}"}
            entries = random_transcript(seed)
            asyncio.run(store.append(key, entries))
            pruned = asyncio.run(wrapped.load(key))
            self.assertEqual(store.load_sync(key), entries)
            self.assertEqual(asyncio.run(wrapped.load_raw(key)), entries)
            check_invariants(self, entries, pruned)


class ToldSize(unittest.TestCase):
    """A prune asked for it tells estimate_tokens() of what it returns from its own scan (prepare()
    then need not walk the result again): the walk's figure to the token, or None, never another."""

    POLICIES = (PrunePolicy(), PrunePolicy(keep_denials=0, keep_unavailable=0, keep_glances=0),
                PrunePolicy(drop_api_errors=False, neutralize_interrupts=False),
                PrunePolicy(trim=True, trim_keep=2, trim_min_chars=100, spill_dir="/spill"),
                PrunePolicy(trim=True, trim_keep=0, keep_glances=0, spill_dir="/spill", lang="zh"))

    def assertTold(self, entries, label):
        told, blob = 0, json.dumps(entries)
        shared = json.loads(blob)   # not ours: a prune leaves it as it is
        for policy in self.POLICIES:
            for own in (True, False):   # entries changed in place, or copied where they change
                out, report = flower._prune(json.loads(blob) if own else shared, policy, own, estimate=True)
                with self.subTest(label, policy=policy, own=own):
                    if report.tokens is not None:
                        self.assertEqual(report.tokens, flower.estimate_tokens(out))
                        told += 1
        return told

    def test_the_same_as_the_walk_on_odd_contents(self):
        import random
        rng = random.Random(6)
        told = 0
        for seed in range(300):
            entries = with_odd_entries(rng, random_transcript(seed, size=10 + seed % 70), str(seed), rng.randint(1, 8))
            told += self.assertTold(entries, seed)
        self.assertGreater(told, 0.6 * 300 * 10)   # None only where a tool id comes twice (a quarter)

    def test_the_same_as_the_walk_on_every_mix(self):
        from tests.transcripts import anchor_transcript, replayed_fixtures, sized_transcript
        for label, entries in (("anchor", anchor_transcript(2000)), ("dense", sized_transcript(2000)),
                               ("real", replayed_fixtures(1000))):
            self.assertEqual(self.assertTold(entries, label), 10, label)

    def test_never_another_figure_on_hostile_rows(self):
        import random
        rng = random.Random(8)
        for trial in range(600):
            entries = random_transcript(trial, size=20)
            for _ in range(rng.randint(1, 4)):
                entries.insert(rng.randint(0, len(entries)), hostile_entry(rng, rng.randint(0, 30)))
            self.assertTold(entries, trial)

    def test_a_block_that_is_no_tool_use_stays_when_a_use_with_its_id_leaves(self):
        # step 2 took every block with the id of a call it dropped, text included, which the scan had
        # counted: the size told was not the walk's
        entries = [
            {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user", "content": "go"}},
            {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "message": {"id": "m1", "role": "assistant", "content": [
                {"type": "tool_use", "id": "T1", "name": "Foo", "input": {}}, {"type": "text", "text": "x" * 700, "id": "T1"}]}},
            {"type": "user", "uuid": "r1", "parentUuid": "a1", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "T1", "is_error": True,
                 "content": "<tool_use_error>Error: No such tool available: Foo</tool_use_error>"}]}},
            {"type": "assistant", "uuid": "a2", "parentUuid": "r1", "message": {"id": "m2", "role": "assistant", "content": [
                {"type": "tool_use", "id": "T2", "name": "Foo", "input": {}}]}},
            {"type": "user", "uuid": "r2", "parentUuid": "a2", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "T2", "is_error": True,
                 "content": "<tool_use_error>Error: No such tool available: Foo</tool_use_error>"}]}}]
        out, report = flower._prune(json.loads(json.dumps(entries)), PrunePolicy(), True, estimate=True)
        self.assertEqual(report.unavailable_dropped, 1)
        self.assertEqual(out[1]["message"]["content"], [{"type": "text", "text": "x" * 700, "id": "T1"}])
        self.assertEqual(report.tokens, flower.estimate_tokens(out))
        self.assertEqual(self.assertTold(entries, "a text block with a call's id"), 10)

    def test_without_asking_nothing_is_told(self):
        self.assertIsNone(prune(random_transcript(1, size=50))[1].tokens)


class HostileRows(unittest.TestCase):
    # A store can hold rows of any shape (an old CLI, a hand edit, a bug elsewhere). Prune crashed on
    # unhashable uuids, parents and tool ids and on a Bash input that is no object, and with it the
    # resume: 7,473 of 32,000 prunes of such transcripts raised on main at 5fa9e66.
    def test_prune_never_raises_and_only_keeps_or_heals(self):
        import random
        policies = (PrunePolicy(), PrunePolicy(trim=True, keep_glances=0, trim_keep=0, trim_min_chars=100,
                                               keep_denials=0))
        for seed in range(2):
            rng = random.Random(seed)
            for _ in range(2000):
                entries = [hostile_entry(rng, i) for i in range(rng.randint(2, 12))]
                blob, originals = json.dumps(entries), [json.dumps(e, sort_keys=True) for e in entries]
                for policy in policies:
                    with self.subTest(seed=seed, entries=entries, policy=policy):
                        out, _ = prune(json.loads(blob), policy)
                        for entry in out:
                            self.assertTrue(isinstance(entry, dict) and (entry.get("flowerHealed") or any(
                                entry.get("uuid") == e.get("uuid") for e in entries)), entry)
                        self.assertLessEqual(len(out), len(originals) + sum(
                            1 for e in out if e.get("flowerHealed")))


    def test_unhashable_ids_and_parents_where_rows_leave(self):
        # a result with a list for its tool id beside a denial that leaves, and an API error with a list
        # for its parent: both raised TypeError (a resume that fails) before
        beside = [
            {"type": "assistant", "uuid": "a1", "parentUuid": None, "message": {"id": "m1", "role": "assistant", "content": [
                {"type": "tool_use", "id": "T1", "name": "Write", "input": {}}]}},
            {"type": "user", "uuid": "r1", "parentUuid": "a1", "toolDenialKind": "user-rejected", "permissionDecision": {},
             "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "T1", "is_error": True, "content": "no"},
                                                     {"type": "tool_result", "tool_use_id": ["x"], "content": "other"}]}}]
        out, report = prune(beside, PrunePolicy(keep_denials=0))
        self.assertEqual(report.denials_dropped, 1)
        self.assertEqual(out[-1]["message"]["content"], [{"type": "tool_result", "tool_use_id": ["x"], "content": "other"}])
        orphaned = [{"type": "system", "subtype": "api_error", "uuid": "e", "parentUuid": ["not", "hashable"], "error": {}},
                    {"type": "user", "uuid": "u", "parentUuid": "e", "message": {"role": "user", "content": "hi"}}]
        out, report = prune(orphaned)
        self.assertEqual((report.dropped_errors, [e["uuid"] for e in out]), (1, ["u"]))


class ReusedEncoders(unittest.TestCase):
    """The encoders flower builds once (every appended row goes through one) write exactly what
    json.dumps writes, and raise where it raises; without json's C encoder, json's own method."""

    def values(self):
        import random
        from tests.transcripts import anchor_transcript, replayed_fixtures
        rng = random.Random(4)
        return (random_transcript(2, size=200) + anchor_transcript(300) + replayed_fixtures(300) +
                [hostile_entry(rng, i) for i in range(300)] +
                [{"lone": "\ud800", "inf": float("inf"), "nan": float("nan"), "big": 10 ** 40, "tuple": (1, 2),
                  1: "int key", None: "none key", "ctl": "\x00\u2028\t\"\\"}, "top", 5, 2.5, None, [], {}])

    def assertSameAsDumps(self, compact, text):
        for value in self.values():
            self.assertEqual(compact(value), json.dumps(value, ensure_ascii=False, separators=(",", ":")))
            self.assertEqual(text(value), json.dumps(value, ensure_ascii=False))
        for bad in (object(), {(1,): 2}, [1, {2, 3}]):
            with self.assertRaises(TypeError):
                compact(bad)

    def test_same_text_as_json_dumps(self):
        compact = flower._compact_json()   # on CPython: the C encoder, built once (not JSONEncoder.encode)
        self.assertIsNone(getattr(compact, "__func__", None))
        self.assertSameAsDumps(compact, flower._json_text)

    def test_without_the_c_encoder_jsons_own_method(self):
        import json.encoder
        made = dict(flower._JSON_ENCODERS)
        self.addCleanup(flower._JSON_ENCODERS.update, made)
        flower._JSON_ENCODERS.clear()
        with unittest.mock.patch.object(json.encoder, "c_make_encoder", None):
            compact = flower._compact_json()
            self.assertEqual(getattr(compact, "__func__", None), json.JSONEncoder.encode)
            self.assertSameAsDumps(compact, flower._json_text)
        flower._JSON_ENCODERS.clear()


class StoredFactsVersion(unittest.TestCase):
    # Stores keep entry_facts() beside each row and trust it on later loads: when the rules behind a
    # fact change (API-error detection, read-only commands), facts stored by the old rules must stop
    # counting, which is what bumping FACTS_VERSION does. This digest of the facts of a fixed corpus
    # says when: if it changes, bump FACTS_VERSION and record the new digest under it.
    DIGESTS = {"2": "f2ea9e87bdb6ff58"}

    def test_digest_of_the_facts_of_a_fixed_corpus(self):
        import hashlib
        import random
        from tests.transcripts import anchor_transcript
        rng = random.Random(3)
        listed = [e for s in range(20, 26) for e in random_transcript(s, size=60)]
        for entry in listed:   # results as lists of blocks (version 2 tells their text)
            for block in flower.blocks_of(entry):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    block["content"] = [{"type": "text", "text": block["content"]}, {"type": "image", "source": {}}]
        entries = [e for s in range(20) for e in random_transcript(s, size=60)] + anchor_transcript(1500) + \
            [hostile_entry(rng, i) for i in range(400)] + listed
        facts = flower.batch_facts(json.loads(json.dumps(entries)))
        self.assertGreater(sum(f is not None and f[1] == "d" for f in flower.batch_facts(listed)), 20)
        self.assertGreater(sum(f is not None for f in facts), 1000)
        digest = hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]
        self.assertEqual(digest, self.DIGESTS.get(flower.FACTS_VERSION),
                         "what stored facts say changed: bump FACTS_VERSION and record this digest under it")

    def test_bad_message_ids_do_not_stop_a_prune(self):
        # A transcript with stale glances whose assistant rows carry an id that is no string raised
        # TypeError (unhashable) while counting the turns since each glance.
        b = Builder(__import__("random").Random(4))
        b.prompt("look")
        for _ in range(9):
            b.tool("Bash", {"command": "ls"}, "a b", level=1000)
        for k, e in enumerate(b.entries):
            if e.get("type") == "assistant":
                e["message"]["id"] = [k] if k % 2 else {"k": k}
        out, report = prune(b.entries)
        self.assertEqual(report.expired, 3)
        self.assertIn("expired 6 turns ago", json.dumps(out))   # each such call counts as one


class PruneSteps(unittest.TestCase):
    """Each step on a small hand-built transcript."""

    def build(self, denials=5):
        b = Builder(__import__("random").Random(1))
        b.prompt("write x")
        for _ in range(denials):
            b.tool("Write", {"file_path": "/w/x.txt", "content": "secret stuff"}, "", kind="denial")
        b.say("I could not write", 5000)
        return b.entries

    def test_keeps_only_newest_denial_and_relinks(self):
        entries = self.build(5)
        out, report = prune(entries)
        self.assertEqual(report.denials_dropped, 4)
        self.assertEqual(json.dumps(tool_results(out)).count("toolu_"), 1)
        self.assertEqual(json.dumps([b for e in out for b in flower.blocks_of(e)]).count(DENIAL_TEXT), 1)
        self.assertEqual(len(tool_uses(out)), 1)
        # the denied assistant entries holding only the tool_use are gone, chain intact to the prompt
        chain, by_uuid = [], {e["uuid"]: e for e in out if "uuid" in e}
        node = out[-1]
        while node is not None:
            chain.append(node)
            node = by_uuid.get(node.get("parentUuid"))
        self.assertEqual(chain[-1]["message"]["content"], "write x")
        self.assertGreater(report.chars_saved, 4 * len(DENIAL_TEXT))

    def test_keep_zero_and_keep_many(self):
        def denials(out):
            return json.dumps([b for e in out for b in flower.blocks_of(e)]).count(DENIAL_TEXT)
        self.assertEqual(denials(prune(self.build(3), PrunePolicy(keep_denials=0))[0]), 0)
        self.assertEqual(denials(prune(self.build(3), PrunePolicy(keep_denials=9))[0]), 3)

    def test_interrupts_get_neutral_text_and_keep_their_block(self):
        b = Builder(__import__("random").Random(2))
        b.prompt("go")
        b.tool("Bash", {"command": "python3 slow.py"}, "", kind="interrupt")
        b.tool("Bash", {"command": "python3 slow.py"}, "", kind="killed")
        out, report = prune(b.entries)
        self.assertEqual(report.interrupts, 2)
        text = model_view(out)
        self.assertNotIn("doesn't want to proceed", text)
        self.assertNotIn("Tool call interrupted", text)
        self.assertEqual(text.count(json.dumps(NEUTRAL)[1:-1]), 1)   # the human's interrupt
        self.assertEqual(text.count(json.dumps(flower.text("killed_result"))[1:-1]), 1)   # the run's end
        self.assertEqual(len(tool_results(out)), 2)
        zh, _ = prune(b.entries, PrunePolicy(lang="zh"))
        self.assertIn("上一轮在此处被中断", json.dumps(zh, ensure_ascii=False))

    def test_stale_glances_expire_but_newest_and_big_stay(self):
        b = Builder(__import__("random").Random(3))
        b.prompt("go")
        for i in range(9):
            b.tool("Bash", {"command": "git status"}, f"status {i}")
        b.tool("Bash", {"command": "ls"}, "L" * 3000)  # big: not a glance to expire
        b.tool("Bash", {"command": "git branch newname"}, "made a branch")  # writes: never expires
        out, report = prune(b.entries)
        text = model_view(out)
        # 10 glances (the big ls counts in the ranking but is never expired): the oldest 4 expire
        self.assertEqual(report.expired, 4)
        for i in range(4):
            self.assertNotIn(f"status {i}\"", text)
        for i in range(4, 9):
            self.assertIn(f"status {i}", text)
        self.assertIn("made a branch", text)
        self.assertIn("expired", text)

    def test_an_expired_glance_names_the_distinct_calls_after_it_that_stay(self):
        # "expired n turns ago": n is the number of distinct API calls (message ids) after the glance's
        # entry that are still in the chain; counted here from what prune returns, on transcripts whose
        # calls are all distinct and on ones where calls share message ids, with and without dropped calls
        import random
        import re
        marker = re.compile(re.escape(flower.text("expired_result")).replace(r"\{cmd\}", ".*?").replace(
            r"\{n\}", "([0-9]+)"))
        checked = {"distinct": 0, "shared": 0}
        for seed in range(40):
            entries = random_transcript(seed, size=160)
            shared = copy.deepcopy(entries)
            rng = random.Random(seed)
            ids = [f"msg_{rng.randrange(25)}" for _ in range(len(shared))]
            for entry, mid in zip(shared, ids):
                if entry.get("type") == "assistant" and isinstance(entry.get("message"), dict):
                    entry["message"]["id"] = mid
            for label, transcript in (("distinct", entries), ("shared", shared)):
                for policy in (PrunePolicy(keep_glances=1), PrunePolicy(keep_glances=0, keep_denials=0)):
                    out, report = prune(transcript, policy)
                    for k, entry in enumerate(out):
                        for block in flower.blocks_of(entry):
                            said = marker.fullmatch(block.get("content", "")) if isinstance(block, dict) and \
                                block.get("type") == "tool_result" and isinstance(block.get("content"), str) else None
                            if said is None:
                                continue
                            calls = {e["message"].get("id") or e["uuid"] for e in out[k + 1:]
                                     if e.get("type") == "assistant" and not e.get("isSidechain")
                                     and e["message"].get("model") != flower.SYNTHETIC_MODEL}
                            self.assertEqual(int(said.group(1)), len(calls), (label, seed, policy))
                            checked[label] += 1
        self.assertGreater(min(checked.values()), 100, checked)

    def test_trim_spills_old_big_results_reversibly(self):
        b = Builder(__import__("random").Random(4))
        b.prompt("go")
        for i in range(25):
            b.tool("Read", {"file_path": f"/w/{i}.py"}, f"{i:03d}" + "x" * 2500)
        with tempfile.TemporaryDirectory() as tmp:
            policy = PrunePolicy(trim=True, spill_dir=tmp)
            out, report = prune(b.entries, policy)
            self.assertEqual(report.trimmed, 5)
            self.assertEqual(len(report.spills), 5)
            for path, full in report.spills.items():
                self.assertTrue(path.startswith(tmp))
                self.assertIn(path, json.dumps(out))
            self.assertTrue(any(full.startswith("000") for full in report.spills.values()))
            self.assertIn("024" + "x" * 10, json.dumps(out))  # newest stays whole
            store = flower.SqliteSessionStore(":memory:")
            asyncio.run(store.append({"project_key": "p", "session_id": "s"}, b.entries))
            wrapped = flower.PruningSessionStore(store, policy=policy)
            asyncio.run(wrapped.load({"project_key": "p", "session_id": "s"}))
            files = sorted(os.listdir(tmp))
            self.assertEqual(len(files), 5)
            with open(os.path.join(tmp, files[0]), encoding="utf-8") as fh:
                self.assertIn(fh.read(), [b.entries[i]["message"]["content"][0]["content"] for i in range(len(b.entries))
                                          if b.entries[i].get("type") == "user" and isinstance(b.entries[i]["message"]["content"], list)])

    def test_heal_orphan_tool_use(self):
        b = Builder(__import__("random").Random(5))
        b.prompt("go")
        b.tool("Bash", {"command": "make"}, "", answered=False)
        b.prompt("continue")
        out, report = prune(b.entries)
        self.assertEqual(report.healed, 1)
        check_invariants(self, b.entries, out)
        healed = [e for e in out if e.get("flowerHealed")]
        tool_use_entry = [e for e in b.entries if tool_uses([e])][0]
        self.assertEqual(healed[0]["parentUuid"], tool_use_entry["uuid"])
        follow = [e for e in out if e.get("type") == "user" and e["message"]["content"] == "continue"][0]
        self.assertEqual(follow["parentUuid"], healed[0]["uuid"])  # the next prompt hangs after the heal

    def test_api_errors_dropped_and_chain_relinked(self):
        b = Builder(__import__("random").Random(6))
        b.prompt("go")
        b.say("before", 100)
        b.api_error(3)
        b.prompt("again")
        out, report = prune(b.entries)
        self.assertEqual(report.dropped_errors, 4)
        self.assertEqual(out[-1]["parentUuid"], [e for e in out if e.get("type") == "assistant"][-1]["uuid"])

    def test_relink_is_loop_safe(self):
        entries = [{"uuid": "a", "parentUuid": "b"}, {"uuid": "b", "parentUuid": "a"}, {"uuid": "c", "parentUuid": "b"}]
        out = relink(entries, {"a", "b"})
        self.assertEqual(out, [{"uuid": "c", "parentUuid": None}])
        chain = [{"uuid": "1", "parentUuid": None}, {"uuid": "2", "parentUuid": "1"},
                 {"uuid": "3", "parentUuid": "2"}, {"type": "x"}, {"uuid": "4", "parentUuid": "3"}]
        self.assertEqual(relink(chain, {"2", "3"}), [chain[0], {"type": "x"}, {"uuid": "4", "parentUuid": "1"}])

    def test_invariants_hold_on_one_long_session(self):
        # linear time is measured in bench/prune.py; here: a 20K-entry session keeps every invariant
        big = random_transcript(7, size=8000)
        out, report = prune(big)
        check_invariants(self, big, out)
        self.assertEqual(report.denials_dropped, sum(
            1 for e in big if e.get("toolDenialKind") and e.get("permissionDecision")) - 1)


class Fixtures(unittest.TestCase):
    """Transcripts captured from the real CLI (tests/capture_fixtures.py)."""

    def load(self, name):
        path = os.path.join(FIXTURES, name + ".json")
        if not os.path.exists(path):
            self.skipTest(f"fixture {name} not captured")
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)

    def test_network_error_retries(self):
        entries = self.load("network_error")
        self.assertTrue(any(flower.is_api_error_entry(e) for e in entries))
        out, report = prune(entries)
        self.assertGreaterEqual(report.dropped_errors, 2)
        check_invariants(self, entries, out)
        self.assertNotIn("ECONNREFUSED", json.dumps(out))

    def test_five_denials(self):
        entries = self.load("denials")
        denied = [e for e in entries if e.get("toolDenialKind") and e.get("permissionDecision")]
        self.assertEqual(len(denied), 5)
        out, report = prune(entries)
        self.assertEqual(report.denials_dropped, 4)
        self.assertEqual(len([e for e in out if e.get("toolDenialKind") and e.get("permissionDecision")]), 1)
        check_invariants(self, entries, out)

    def test_interrupt_mid_tool(self):
        entries = self.load("interrupt")
        self.assertIn("doesn't want to proceed", json.dumps(entries))
        out, report = prune(entries)
        self.assertEqual(report.interrupts, 1)
        self.assertNotIn("doesn't want to proceed", model_view(out))
        check_invariants(self, entries, out)

    def test_killed_mid_tool(self):
        entries = self.load("killed")
        self.assertIn("Tool call interrupted", json.dumps(entries))
        out, report = prune(entries)
        self.assertEqual(report.interrupts, 1)
        self.assertNotIn("Tool call interrupted", model_view(out))
        check_invariants(self, entries, out)
        self.assertEqual(len(tool_uses(out)), len(tool_results(out)))


class ReadOnlyCommands(unittest.TestCase):
    def test_table(self):
        rows = [
            ("git status", True), ("git log --oneline -5", True), ("ls -la src", True), ("cat a | grep x", True),
            ("git diff HEAD~1 && git status", True), ("git branch", True), ("git branch -a", True),
            ("git remote -v", True), ("pwd", True), ("find . -name '*.py'", True), ("sed -n 1,5p f", True),
            ("git -C sub status", True), ("rg foo src", True),
            ("env x", False), ("env", False), ("git branch new", False), ("git remote add o url", False),
            ("sed -i s/a/b/ f", False), ("sort -o out in", False), ("ls > out.txt", False), ("cat < in", False),
            ("echo $(rm -rf /)", False), ("echo `id`", False), ("git commit -m x", False), ("rm -rf x", False),
            ("X=1 ls", False), ("find . -delete", False), ("find . -exec rm {} ;", False), ("ls &", False),
            ("git tag v1", False), ("git stash", False), ("git stash list", True), ("python3 x.py", False),
            ("ls; rm x", False), ("git -c core.x=1 status", False), ("", False), ("ls 'unterminated", False),
            ("git config user.name x", False), ("git config --get user.name", True), ("ls 2>&1", False),
            # writing forms of otherwise read-only commands, each beside its reading form
            ("git reflog", True), ("git reflog show HEAD", True), ("git reflog expire --all", False),
            ("git reflog delete HEAD@{1}", False),
            ("git log --oneline -3", True), ("git log --output=out.txt", False), ("git log --output out.txt", False),
            ("git show HEAD", True), ("git show --output=out.txt HEAD", False),
            ("git diff --output-indicator-new=+", True), ("git diff --output=d.patch", False),
            ("git grep -n foo", True), ("git grep -Ovim foo", False), ("git grep -nO foo", False),
            ("git grep --open-files-in-pager=vim foo", False),
            ("tree -L 2 src", True), ("tree -a", True), ("tree -o out.txt", False), ("tree -L 2 -o out.txt", False),
            ("uniq in.txt", True), ("uniq -c -f 2 in.txt", True), ("sort f | uniq -c", True),
            ("uniq in.txt out.txt", False), ("uniq -c in.txt out.txt", False),
            ("sed s/a/b/g f", True), ("sed -n '/x/,/y/p' f", True), ("sed -e 's|a|b|;3q' f", True),
            ("sed -ne 's/a/b/p' f", True), ("sed '1e id' f", False), ("sed 'e' f", False),
            ("sed 's/a/b/e' f", False), ("sed 's/a/b/w out' f", False), ("sed -e 's/a/b/gw out' f", False),
            ("sed '$w out' f", False), ("sed -f script.sed f", False), ("sed --in-place s/a/b/ f", False),
            ("date", True), ("date +%Y-%m-%d", True), ("date -u -d yesterday +%F", True),
            ("date -s '2020-01-01'", False), ("date --set=2020-01-01", False), ("date 010112002020", False),
            ("hostname", True), ("hostname -f", True), ("hostname box2", False), ("hostname -F name.txt", False),
            ("sort -n -k2 f", True), ("sort --output=out f", False), ("sort --compress-program=sh f", False),
        ]
        for cmd, expected in rows:
            with self.subTest(cmd=cmd):
                self.assertEqual(is_read_only_command(cmd), expected)


    def test_fast_path_agrees_with_the_full_parse(self):
        """The first-word pre-check and the regex tokeniser give exactly what shlex gives (issue 16)."""
        import random
        import shlex
        table = [
            "ls|grep x", "ls||true", "ls&&pwd", "ls;pwd", "ls |grep x", "cat a|head -3|wc -l", "ls>out", "ls >>out",
            "ls 2>&1", "ls 2>/dev/null", "ls&", "ls & pwd", "(ls)", "(cd x && ls)", "{ ls; }", "ls # rm -rf /",
            "ls#x", "ls #x", "# comment only", "rm#x", "cat 'a b'|wc", 'cat "a|b"', "cat a\ b", "cat a\|b",
            "X=1 ls", "X=1", "ls X=1", "A=/bin/ls", "a=b=c ls", "=x", "ls =x", "git status", "git -C d log",
            "/bin/ls -la", "./ls", "/usr/bin/git status", "python3 -m pytest -k 'a or b'", "make -j2 && ls",
            "echo $HOME", "echo ${HOME}", "$HOME/bin/ls", "ls ~", "ls ~/x", "ls *.py", "ls ?.py", "ls [ab].py",
            "cat <in", "cat<in", "cat <<EOF", "sed -n '1,5p' f|sort -u", "sort -o out in", "sort -oout in",
            "find . -name x -exec rm {} \\;", "find . -name '*.py' | xargs grep -l x", "ls\tx", "ls\t|\tpwd",
            "ls\r", "  ls  ", "\tls", "ls\x0bx", "ls\u00a0x", "l\u00e9s", "\u00e9cho x", "grep -e ';' f",
            "grep ';' f", "echo 'unterminated", 'echo "unterminated', "echo \\", "ls\\", "ls '' x", 'ls "" x',
            "ls a'b'c", 'ls a"b"c', "ls;", ";ls", "|ls", "&&", ";", "", " ", "ls ;; pwd", "ls |& cat", "ls &> f",
            "git log --format='%H %s' -3", "git diff HEAD~1..HEAD -- a.py | head -5", "wc -l a b c", "ls -- -x",
            "ls)", "ls(", "tail -f log &", "cat f|&head", "true&&false||ls", "sed -i'' s/a/b/ f", "ls 1>&2",
            "echo hi >&2", "ls 'a#b'", "ls a#b", "ls '#'", "env", "sudo ls", "nice ls", "time ls", "!ls", "ls!",
            "ls\n", "ls $(pwd)", "ls `pwd`", "cat <(ls)", "tee >(cat)", "cd x; ls", "cd x && git status",
        ]
        rng = random.Random(16)
        pieces = ["ls", "git", "status", "log", "grep", "-n", "x", "'a b'", '"c"', "|", "||", "&&", ";", ">", ">>",
                  "<", "2>&1", "&", "#", "#c", "X=1", "=", "a=b", "\\", "\\ ", "(", ")", "sed", "-i", "sort", "-o",
                  "find", "-delete", "cat", "rm", "/bin/ls", "./x", "$V", "~", "*", "\t", "  ", "é", "head", "-3",
                  "'", '"', "'|'", '";"', "''", '""', "'a\"b'", '"a\'b"', "'>'", "'&&'", "a'b'", 'x"y z"']
        for _ in range(4000):
            parts = [rng.choice(pieces) for _ in range(rng.randint(1, 7))]
            table.append("".join(p + rng.choice(["", " ", " ", "  "]) for p in parts))
        split = 0
        for cmd in table:
            try:
                lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                tokens = list(lexer)
            except ValueError:
                tokens = None
            words = flower.shell_words(cmd)
            if words is not None:
                self.assertEqual(words, tokens, cmd)             # the regex tokeniser is exact
                split += 1
            elif "\\" not in cmd and "#" not in cmd:
                self.assertIsNone(tokens, cmd)                   # it gives up only on escapes, comments, open quotes
            first = flower._FIRST_WORD.match(cmd)
            if first is not None and tokens:
                self.assertEqual(first.group(1), tokens[0], cmd)                  # so is the first word
            with self.subTest(cmd=cmd):
                self.assertEqual(is_read_only_command(cmd), flower._read_only_parsed(cmd), cmd)
        self.assertGreater(sum(map(is_read_only_command, table)), 100)             # both answers well represented
        self.assertGreater(split, len(table) // 2)

    def test_an_unclosed_quote_is_told_in_linear_time(self):
        """A long word before an unclosed quote once took exponential time (a regex with nested
        repetition): a resume hung on one commit message with an apostrophe."""
        for cmd in ("echo " + "a" * 40 + "'", "git log --grep " + "x" * 5000 + ' "open', "cat it" + "s" * 60 + "'s"):
            self.assertIsNone(flower.shell_words(cmd))
            self.assertFalse(is_read_only_command(cmd))


class WaterLevel(unittest.TestCase):
    def test_last_real_main_thread_assistant_counts(self):
        entries = [
            {"type": "assistant", "message": {"model": "m", "usage": {"input_tokens": 10, "cache_read_input_tokens": 100,
                                                                      "cache_creation_input_tokens": 5}}},
            {"type": "assistant", "isSidechain": True, "message": {"model": "m", "usage": {"input_tokens": 99999}}},
            {"type": "assistant", "message": {"model": "<synthetic>", "usage": {"input_tokens": 0}}},
        ]
        self.assertEqual(flower.entry_context(entries), 115)
        self.assertIsNone(flower.entry_context([]))


if __name__ == "__main__":
    unittest.main()
