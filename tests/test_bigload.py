"""Big loads (issues 44, 46): the spill folder listed once per process and still right when another
process adds or removes files; a session that does not fit decided in one prune."""

import asyncio
import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import unittest.mock

import flower
from tests.helpers import exact, forget_listings
from tests.transcripts import session_with_big_results
from tests.transcripts import anchor_transcript, random_transcript, sized_transcript, with_odd_entries

PK = "proj"


def report_counts(report) -> dict:
    return report.as_dict()


class Folder:
    """Counts the folder listings and the stats of single names flower makes."""

    def __init__(self):
        self.listings = self.stats = 0
        self.real, self.real_exists = os.scandir, os.path.exists

    def scandir(self, path):
        self.listings += 1
        return self.real(path)

    def exists(self, path):
        self.stats += 1
        return self.real_exists(path)

    def watching(self):
        return unittest.mock.patch.multiple(flower.os, scandir=self.scandir), \
            unittest.mock.patch.object(flower.os.path, "exists", self.exists)


def age(folder: str, seconds: float = 60) -> None:
    """Make the folder look last changed ``seconds`` ago (its ctime moves to now, its mtime back)."""
    then = time.time() - seconds
    os.utime(folder, (then, then))


def other_process(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True)


def scratch(case: unittest.TestCase) -> str:
    """A temp dir removed when ``case`` ends, after the spill files a big load writes in a thread."""
    tmp = tempfile.mkdtemp()
    case.addCleanup(shutil.rmtree, tmp, True)
    case.addCleanup(flower.wait_spills)
    return tmp


class SpillListing(unittest.TestCase):
    def setUp(self):
        self.tmp = scratch(self)
        self.spill = os.path.join(self.tmp, "spill")
        self.policy = flower.PrunePolicy(trim=True, trim_keep=2, spill_dir=self.spill)
        self.store = flower.SqliteSessionStore(os.path.join(self.tmp, "s.db"))
        self.wrapped = flower.PruningSessionStore(self.store, policy=self.policy)
        self.keys = [{"project_key": PK, "session_id": "s1"}]
        self.store.append_sync(self.keys[0], session_with_big_results(1, 8))
        for k in range(12):
            key = {"project_key": PK, "session_id": "s1", "subpath": f"subagents/agent-{k}"}
            self.store.append_sync(key, session_with_big_results(100 + k, 3 + k % 4))
            self.keys.append(key)
        forget_listings()
        self.addCleanup(forget_listings)
        self.addCleanup(self.store.close)

    def load_all(self) -> None:
        """Each key loaded as the SDK does, each equal to prune() of its stored rows (entries and report)."""
        for key in self.keys:
            got = asyncio.run(self.wrapped.load(key))
            report = self.wrapped.last_report
            want, want_report = flower.prune(self.store.load_sync(key), self.policy)
            self.assertEqual(exact(got), exact(want), key)
            self.assertEqual(report_counts(report), report_counts(want_report), key)

    def spill_files(self) -> set:
        return {n for n in os.listdir(self.spill) if n.endswith(".txt")}

    def test_later_loads_of_many_keys_list_the_folder_once(self):
        self.load_all()          # writes the spill files, notes the cut facts
        age(self.spill)
        folder = Folder()
        listing, stats = folder.watching()
        with listing, stats:
            self.load_all()
            self.load_all()
        self.assertEqual((folder.listings, folder.stats), (1, 0))   # then every key looks in the kept listing

    def test_a_file_another_process_removes_is_written_again(self):
        self.load_all()
        age(self.spill)
        self.load_all()   # the listing is kept now
        files = sorted(self.spill_files())
        gone = files[len(files) // 2]
        other_process(f"import os; os.remove({os.path.join(self.spill, gone)!r})")
        self.load_all()   # every load still equals prune(): the row of the file that went is read whole
        self.assertIn(gone, self.spill_files())

    def test_a_file_removed_among_many_others_is_written_again(self):
        # a folder of many more names than a session asks about: the lookup stats the names it wants
        self.load_all()
        for i in range(2000):
            with open(os.path.join(self.spill, f"other-{i}.txt"), "w"):
                pass
        age(self.spill)
        self.load_all()
        files = sorted(self.spill_files() - {f"other-{i}.txt" for i in range(2000)})
        gone = files[3]
        other_process(f"import os; os.remove({os.path.join(self.spill, gone)!r})")
        folder = Folder()
        with unittest.mock.patch.object(flower.os, "scandir", folder.scandir):
            self.load_all()
        self.assertIn(gone, self.spill_files())
        self.assertEqual(folder.listings, 0)   # the stale listing's size chose stats, not 13 listings

    def test_a_file_another_process_creates_is_seen(self):
        os.makedirs(self.spill)
        age(self.spill)
        self.assertEqual(set(flower.present_names(self.spill, ["a.txt"])), set())
        other_process(f"open({os.path.join(self.spill, 'a.txt')!r}, 'w').close()")
        self.assertIn("a.txt", flower.present_names(self.spill, ["a.txt"]))

    def test_a_listing_of_a_folder_changed_just_now_is_not_kept(self):
        # A file system clock that does not tick between two changes (a coarse one): the stamp alone
        # cannot tell them apart, so a listing made right after a change must not be kept
        os.makedirs(self.spill)
        for name in ("a.txt", "b.txt"):
            with open(os.path.join(self.spill, name), "w"):
                pass
        coarse = lambda st: (st.st_dev, st.st_ino)   # noqa: E731
        with unittest.mock.patch.object(flower, "_folder_stamp", coarse):
            self.assertEqual(set(flower.present_names(self.spill, ["a.txt", "b.txt"])), {"a.txt", "b.txt"})
            other_process(f"import os; os.remove({os.path.join(self.spill, 'a.txt')!r})")
            self.assertEqual(set(flower.present_names(self.spill, ["a.txt", "b.txt"])) & {"a.txt", "b.txt"},
                             {"b.txt"})

    def test_a_symlink_whose_target_goes_is_not_kept_present(self):
        os.makedirs(self.spill)
        target = os.path.join(self.tmp, "elsewhere.txt")
        with open(target, "w"):
            pass
        os.symlink(target, os.path.join(self.spill, "a.txt"))
        age(self.spill)
        self.assertIn("a.txt", flower.present_names(self.spill, ["a.txt"]))
        os.remove(target)   # the folder itself does not change
        self.assertNotIn("a.txt", flower.present_names(self.spill, ["a.txt"]))

    def test_own_writes_then_removal_by_another_process(self):
        # This process writes files, another removes one meanwhile: the stamp after the writes cannot tell
        # that change from ours (here: a clock that never ticks), so what this process wrote is not learned
        self.load_all()
        age(self.spill)
        self.load_all()
        extra = {os.path.join(self.spill, f"new-{i}.txt"): "x" * 10 for i in range(5)}
        coarse = lambda st: (st.st_dev, st.st_ino)   # noqa: E731
        with unittest.mock.patch.object(flower, "_folder_stamp", coarse):
            flower.present_names(self.spill, ["x.txt"])   # kept under the coarse stamp
            flower.write_spills(extra)
            other_process(f"import os; os.remove({os.path.join(self.spill, 'new-2.txt')!r})")
            self.assertNotIn("new-2.txt", flower.present_names(self.spill, sorted(os.path.basename(p) for p in extra)))
        flower.write_spills(extra)
        self.assertIn("new-2.txt", self.spill_files())

    def test_missing_and_unlistable_folders(self):
        self.assertEqual(set(flower.present_names(os.path.join(self.tmp, "none"), ["a.txt"])), set())
        path = os.path.join(self.tmp, "file")
        with open(path, "w"):
            pass
        self.assertIsNone(flower.present_names(path, ["a.txt"]))


_PRUNES: list = [None, {}]   # the session last pruned here, and its prunes and their sizes by policy


def pruned(raw: list[dict], policy) -> tuple:
    """``flower.prune(raw, policy)`` and the size of its entries, worked out once per session and policy:
    the oracles below ask for the same two prunes at every budget (prune is a pure function of its
    input and leaves the input as it is)."""
    if _PRUNES[0] is not raw:
        _PRUNES[:] = [raw, {}]
    done = _PRUNES[1].get(repr(policy))
    if done is None:
        entries, report = flower.prune(raw, policy)
        done = _PRUNES[1][repr(policy)] = (entries, report, flower.estimate_tokens(entries))
    return done


def prepared_before(raw: list[dict], policy, harder, budget: int):
    """What prepare() + load() gave before a prune decided it once: prune, walk; too big: prune harder."""
    entries, report, tokens = pruned(raw, policy)
    if tokens > budget:
        entries, report, tokens = pruned(raw, harder)
    return entries, report, tokens <= budget


def mixes():
    rng = random.Random(3)
    yield "random", random_transcript(4, 300)
    yield "hostile", with_odd_entries(rng, random_transcript(5, 200), "s-5", 40)
    yield "anchor", anchor_transcript(900, seed=8)
    yield "dense", sized_transcript(700)
    yield "big results", session_with_big_results(9, 40)


POLICIES = {
    "trim off": dict(),
    "trim on": dict(trim=True),
    "trim keep 0, min 500": dict(trim=True, trim_keep=0, trim_min_chars=500),
    "keep errors, no glances": dict(trim=True, drop_api_errors=False, expire_glances=False),
}


class PruneOnce(unittest.TestCase):
    """prepare() decides with one load and one prune what two prunes decided before."""

    def budgets(self, raw, policy, harder):
        soft, hard = pruned(raw, policy)[2], pruned(raw, harder)[2]
        return sorted({soft, soft - 1, hard, hard - 1, (soft + hard) // 2, 10**9}, reverse=True)   # spills first

    def test_prepare_decides_and_loads_as_two_prunes_did(self):
        loop = asyncio.new_event_loop()   # one for all the pruning store's calls (asyncio.run: ~1 ms of CPU each)
        self.addCleanup(loop.close)
        self.addCleanup(loop.run_until_complete, loop.shutdown_default_executor())
        for (mix, raw), (name, fields) in ((m, p) for m in mixes() for p in POLICIES.items()):
            tmp = scratch(self)
            policy = flower.PrunePolicy(spill_dir=os.path.join(tmp, "spill"), **fields)
            store = flower.SqliteSessionStore(os.path.join(tmp, "s.db"))
            key = {"project_key": PK, "session_id": "s"}
            store.append_sync(key, raw)
            wrapped = flower.PruningSessionStore(store, policy=policy)
            harder = wrapped.harder_policy()
            for budget in self.budgets(raw, policy, harder):
                want, want_report, want_fits = prepared_before(raw, policy, harder, budget)
                want = exact(want)
                for attempt in ("first", "again"):   # again: spill files exist, rows may be read cut
                    with self.subTest(mix=mix, policy=name, budget=budget, attempt=attempt):
                        fits = loop.run_until_complete(wrapped.prepare(key, budget))
                        self.assertEqual(fits, want_fits)
                        if fits:
                            self.assertEqual(exact(loop.run_until_complete(wrapped.load(key))), want)
                            self.assertEqual(wrapped.last_report.as_dict(), want_report.as_dict())
                        else:
                            self.assertEqual(wrapped._prepared, {})
            store.close()

    def test_prune_with_a_budget_is_prune_of_the_policy_it_picks(self):
        for (mix, raw), (name, fields) in ((m, p) for m in mixes() for p in POLICIES.items()):
            policy = flower.PrunePolicy(spill_dir="/s", **fields)
            harder = flower.PruningSessionStore(None, policy=policy).harder_policy()
            for budget in self.budgets(raw, policy, harder):
                with self.subTest(mix=mix, policy=name, budget=budget):
                    want, want_report, _ = prepared_before(raw, policy, harder, budget)
                    got, report = flower._prune(raw, dataclasses.replace(policy, budget=budget, fallback=harder),
                                                estimate=True)
                    if report.tokens is None:   # uuids or tool ids twice: only a walk tells, prepare() walks
                        want, want_report, _ = pruned(raw, policy)
                    self.assertEqual(exact(got), exact(want))
                    self.assertEqual(report.as_dict(), want_report.as_dict())
                    self.assertEqual(report.spills, want_report.spills)

    def test_a_session_that_does_not_fit_is_loaded_and_pruned_once_and_spills_nothing(self):
        tmp = scratch(self)
        spill = os.path.join(tmp, "spill")
        store = flower.SqliteSessionStore(os.path.join(tmp, "s.db"))
        key = {"project_key": PK, "session_id": "s"}
        store.append_sync(key, session_with_big_results(2, 60))
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(trim=True, spill_dir=spill))
        with unittest.mock.patch.object(store, "load_pruned", wraps=store.load_pruned) as loads, \
                unittest.mock.patch.object(flower, "_late_steps", wraps=flower._late_steps) as steps:
            self.assertFalse(asyncio.run(wrapped.prepare(key, 50)))
        self.assertEqual(loads.call_count, 1)
        self.assertEqual(steps.call_count, 2)   # the policy's last steps, then the harder ones instead
        self.assertFalse(os.path.exists(spill) and os.listdir(spill))
        self.assertEqual(wrapped._prepared, {})
        store.close()


def handoff_material(entries: list[dict]) -> tuple:
    """What a handoff makes of a retired session's entries (see Runtime._hand_over)."""
    ledger = flower.degraded_ledger(entries, "the stored session does not fit the window", "the step's prompt")
    return (flower.slim_transcript(entries, "s"), flower.recent_thread(entries),
            ledger.render("work", 2, "en"))


class Outline(unittest.TestCase):
    """A handoff reads big tool results' rows cut, and makes exactly what it made of the whole rows."""

    def test_handoff_material_from_the_outline_is_that_of_the_stored_rows(self):
        for mix, raw in mixes():
            with self.subTest(mix=mix):
                tmp = scratch(self)
                store = flower.SqliteSessionStore(os.path.join(tmp, "s.db"))
                key = {"project_key": PK, "session_id": "s"}
                store.append_sync(key, raw)
                wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(
                    trim=True, spill_dir=os.path.join(tmp, "spill")))
                self.assertFalse(asyncio.run(wrapped.prepare(key, 10)))   # notes the cut facts
                outline = asyncio.run(wrapped.load_outline(key))
                self.assertEqual(handoff_material(outline), handoff_material(store.load_sync(key)))
                self.assertEqual(len(outline), len(store.load_sync(key)))
                cut = sum(1 for e in outline if e.get("type") == "user" and isinstance(e["message"].get("content"), list)
                          and e["message"]["content"][:1] and isinstance(e["message"]["content"][0], dict)
                          and e["message"]["content"][0].get("content") == "")
                facts = store._db.execute("SELECT COUNT(*) FROM cut_facts").fetchone()[0]
                self.assertGreater(facts, 0)
                self.assertGreaterEqual(cut, facts)   # every row with a cut fact came cut
                store.close()

    def test_a_row_another_writer_replaces_is_read_as_it_is(self):
        tmp = scratch(self)
        path = os.path.join(tmp, "s.db")
        store = flower.SqliteSessionStore(path)
        key = {"project_key": PK, "session_id": "s"}
        store.append_sync(key, session_with_big_results(3, 12))
        wrapped = flower.PruningSessionStore(store, policy=flower.PrunePolicy(trim=True, spill_dir=os.path.join(tmp, "sp")))
        asyncio.run(wrapped.prepare(key, 10))
        seq, uid = store._db.execute("SELECT seq, uuid FROM cut_facts ORDER BY seq LIMIT 1").fetchone()
        other = {"type": "user", "uuid": "f" * 8, "parentUuid": None, "message": {"role": "user", "content": "NEW WORDS"}}
        import sqlite3
        db = sqlite3.connect(path)
        # INSERT OR REPLACE fires no trigger: the fact stays, noted of another uuid (one put back under the
        # same seq and uuid is believed, as a load believes it)
        for _ in range(1):
            db.execute("INSERT OR REPLACE INTO entries(seq, skey, uuid, payload) VALUES (?,?,?,?)",
                       (seq, "proj/s", other["uuid"], json.dumps(other)))
            db.commit()
            outline = asyncio.run(wrapped.load_outline(key))
            self.assertEqual(handoff_material(outline), handoff_material(store.load_sync(key)))
            self.assertIn("NEW WORDS", handoff_material(outline)[0])
        db.close()
        store.close()


def recent_thread_before(entries, limit=10, max_chars=700):
    """recent_thread() as it was: a walk over every entry."""
    items = []
    for entry in entries:
        if entry.get("type") == "user" and flower._is_ritual_prompt(flower.entry_text(entry)):
            break
        if entry.get("isSidechain") or flower.is_api_error_entry(entry):
            continue
        if entry.get("type") == "assistant" and flower.is_main_assistant(entry):
            said = flower.entry_text(entry).strip()
            if said:
                items.append(("assistant", said))
        elif entry.get("type") == "user":
            lines = "\n".join(flower._user_prompts([entry])).splitlines()
            said = "\n".join(line for line in lines if not line.startswith("[Request interrupted")).strip()
            if said:
                items.append(("user", said))
    items = items[-limit:]
    return [(role, said if len(said) <= max_chars else said[:max_chars - 1] + "…") for role, said in items]


class RecentThread(unittest.TestCase):
    def test_the_walk_back_finds_what_the_walk_over_all_found(self):
        ritual = flower.text("handoff_prompt", "en")
        for mix, raw in mixes():
            variants = {"as is": raw}
            for at in (0, len(raw) // 3, len(raw) - 1):   # the ritual prompt here (a user entry), maybe as a sidechain
                variants[f"ritual at {at}"] = raw[:at] + [{"type": "user", "message": {"role": "user", "content": ritual}},
                                                          *raw[at:]]
                variants[f"sidechain ritual at {at}"] = raw[:at] + [{"type": "user", "isSidechain": True, "message": {
                    "role": "user", "content": [{"type": "text", "text": "x " + ritual}]}}, *raw[at:]]
            for name, entries in variants.items():
                for limit in (-3, 0, 1, 2, 10, 50, 10**6):
                    with self.subTest(mix=mix, variant=name, limit=limit):
                        self.assertEqual(flower.recent_thread(entries, limit, 80), recent_thread_before(entries, limit, 80))


# -- prepare() deciding that a stored session does not fit (issue 44): rows with a cut fact are read cut even
# where their spill file is not written (a session that does not fit writes none), and a session that fits
# after such a decision is loaded whole once more, so that every pointer it returns has its file --

def cut_rows(store) -> int:
    return store._db.execute("SELECT COUNT(*) FROM cut_facts").fetchone()[0]


class LaterWakes(unittest.TestCase):

    def setUp(self):
        self.tmp = scratch(self)
        self.spill = os.path.join(self.tmp, "spill")
        self.store = flower.SqliteSessionStore(os.path.join(self.tmp, "s.db"))
        self.key = {"project_key": PK, "session_id": "s"}
        self.store.append_sync(self.key, session_with_big_results(4, 60))
        self.wrapped = flower.PruningSessionStore(self.store, policy=flower.PrunePolicy(trim=True, spill_dir=self.spill))
        self.addCleanup(self.store.close)

    def test_a_later_wake_that_does_not_fit_reads_the_big_results_cut_and_writes_nothing(self):
        self.assertFalse(asyncio.run(self.wrapped.prepare(self.key, 50)))   # the first wake notes the cut facts
        self.assertGreater(cut_rows(self.store), 20)
        with unittest.mock.patch.object(flower.SqliteSessionStore, "_read_cut",
                                        wraps=flower.SqliteSessionStore._read_cut) as cut, \
                unittest.mock.patch.object(self.store, "load_pruned", wraps=self.store.load_pruned) as loads:
            self.assertFalse(asyncio.run(self.wrapped.prepare(self.key, 50)))
        self.assertEqual(loads.call_count, 1)
        # every old big result (all but the newest trim_keep of them) came from its fact, not its row (read
        # with its trim marker; the outline kept for the handoff reads each fact with "" in its place)
        read_cut = sum(1 for call in cut.call_args_list if call.args[3])
        self.assertEqual(read_cut, cut_rows(self.store) - self.wrapped.policy.trim_keep)
        self.assertFalse(os.path.exists(self.spill) and os.listdir(self.spill))
        self.assertEqual(self.wrapped._prepared, {})
        self.assertEqual(self.wrapped.last_report.unspilled, read_cut)
        self.assertNotIn("unspilled", self.wrapped.last_report.as_dict())   # not in the resume event

    def test_a_wake_that_fits_after_a_decision_writes_every_file_it_points_to(self):
        raw = self.store.load_sync(self.key)
        self.assertFalse(asyncio.run(self.wrapped.prepare(self.key, 50)))
        harder = self.wrapped.harder_policy()
        budget = flower.estimate_tokens(flower.prune(raw, harder)[0])
        want, want_report, fits = prepared_before(raw, self.wrapped.policy, harder, budget)
        self.assertTrue(fits)
        with unittest.mock.patch.object(self.store, "load_pruned", wraps=self.store.load_pruned) as loads:
            self.assertTrue(asyncio.run(self.wrapped.prepare(self.key, budget)))
        got = asyncio.run(self.wrapped.load(self.key))
        self.assertEqual(exact(got), exact(want))
        self.assertEqual(self.wrapped.last_report.as_dict(), want_report.as_dict())
        self.assertEqual(self.wrapped.last_report.unspilled, 0)
        self.assertEqual(sorted(os.listdir(self.spill)), sorted(os.path.basename(p) for p in want_report.spills))
        for path, full in want_report.spills.items():
            with open(path, encoding="utf-8") as fh:
                self.assertEqual(fh.read(), flower.redact(full))
        self.assertEqual(loads.call_count, 2)   # decided cut, then read whole for the files
        with unittest.mock.patch.object(self.store, "load_pruned", wraps=self.store.load_pruned) as loads:
            self.assertTrue(asyncio.run(self.wrapped.prepare(self.key, budget)))   # the files exist now
        self.assertEqual(loads.call_count, 1)


class DecidedThenFits(PruneOnce):
    """PruneOnce's differential with the budgets in rising order: prepare() first decides that the
    session does not fit (noting cut facts, writing no file), then that it fits."""

    def budgets(self, raw, policy, harder):
        return sorted(super().budgets(raw, policy, harder))

    # these two do not depend on the order of the budgets: PruneOnce runs them
    test_prune_with_a_budget_is_prune_of_the_policy_it_picks = None
    test_a_session_that_does_not_fit_is_loaded_and_pruned_once_and_spills_nothing = None


if __name__ == "__main__":
    unittest.main()
