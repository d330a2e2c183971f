"""``report``: the journal a job writes as it runs, the data ``report --json`` gives, and the one
self-contained HTML page, parsed with ``html.parser``: well-formed, nothing external, one mark per
step, handoff, outage and kill of a scripted job, one water-level point per recorded answer; both
languages, a job in progress and a finished one, both state backends, and a real (fake-API) job."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import tempfile
import unittest
import unittest.mock
from html.parser import HTMLParser

import flower
from tests import fakesdk
from tests.fakesdk import FAKE
from tests.pgserver import HAVE_PG, SKIP as PG_SKIP
from tests.helpers import E2ECase, RUN_FLOWER, HAVE_SDK, ROOT, freeze_front, synthetic_job
from tests.helpers import LEDGER as E2E_LEDGER

LEDGER = ("## Status\nhalf done\n## Decisions\nkeep it small\n## Dead ends\n(none)\n"
          "## Next step\nRun `cat hello.txt` and finish\n## Pointers\n- hello.txt")
VOID = {"meta", "br", "img", "hr", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}
EXTERNAL = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.I)


class Page(HTMLParser):
    """What a test needs of the page: problems of form, every element with a data-kind, the points of
    every water-level line, every attribute and the text of style and script elements."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.kinds: list[dict] = []
        self.levels: dict[str, int] = {}
        self.attrs: list[tuple[str, str, str]] = []
        self.tags: list[str] = []
        self.styles: list[str] = []
        self.scripts: list[tuple[dict, str]] = []
        self.text: list[str] = []
        self.doctype = False
        self.feed(html)
        self.close()
        if self.stack:
            self.problems.append(f"unclosed: {self.stack}")

    def handle_decl(self, decl):
        self.doctype = self.doctype or decl.lower() == "doctype html"

    def _element(self, tag, attrs):
        found = dict(attrs)
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]
        if "data-kind" in found:
            self.kinds.append(dict(found, tag=tag))
        if tag == "polyline" and found.get("class") == "level":
            self.levels[found["data-sid"]] = len(found["points"].split())
        return found

    def handle_starttag(self, tag, attrs):
        found = self._element(tag, attrs)
        if tag == "script":
            self.scripts.append((found, ""))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self._element(tag, attrs)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "style":
            self.styles.append(data)
        elif self.stack and self.stack[-1] == "script":
            self.scripts[-1] = (self.scripts[-1][0], self.scripts[-1][1] + data)
        else:
            self.text.append(data)

    def count(self, kind: str) -> int:
        return sum(1 for k in self.kinds if k["data-kind"] == kind)


def assert_self_contained(test: unittest.TestCase, page: Page) -> None:
    """Well-formed and nothing fetched from anywhere: no external src/href, no <link>, no script with
    a src, no @import or url() in the CSS."""
    test.assertTrue(page.doctype, "no <!DOCTYPE html>")
    test.assertEqual(page.problems, [])
    test.assertNotIn("link", page.tags)
    test.assertNotIn("img", page.tags)
    for tag, name, value in page.attrs:
        if name in ("src", "href", "xlink:href", "action", "data", "poster", "srcset", "background"):
            test.assertFalse(EXTERNAL.match(value) or value.startswith(("http:", "https:")), (tag, name, value))
        if name == "style":
            test.assertNotRegex(value, r"(?i)url\s*\(|@import", (tag, value))
    for css in page.styles:
        test.assertNotRegex(css, r"(?i)@import|url\s*\(|https?://", "external CSS")
    for attrs, _ in page.scripts:
        test.assertNotIn("src", attrs, "an external script")


def run_step(rt, name="work", prompt="do it"):
    result = asyncio.run(rt.run(flower.AgentSpec(name), prompt, step_name=name, lineage_key=name))
    rt.record(result)
    return result


def runtime(ws, run_dir=None, state=None):
    return flower.Runtime(workspace=ws, run_dir=run_dir, state=state,
                          resilience=flower.Resilience(probe=False, base_delay=0),
                          handoff=flower.HandoffPolicy(window=200_000))


HANDOFF_TURNS = [
    [("text", "step 1", 100_000), ("tool", "Bash", {"command": "make"}, "built", 145_000),
     ("tool", "Bash", {"command": "make test"}, "passed", 151_000),   # crosses the threshold (150K)
     ("tool", "Bash", {"command": "never runs"}, "x", 152_000)],
    [("text", LEDGER, 152_000)],                                       # the handoff document
    [("tool", "Read", {"file_path": "x"}, "x", 30_000), ("text", "finished in the new session", 31_000)],
]


def scripted_job(ws, run_dir=None, state_of=lambda: None):
    """Two runs: clarify, then work with a handoff, an outage and a kill; then a second run (a wake
    that rescues) continues work. Returns what the marks must be."""
    rt = runtime(ws, run_dir, state_of())
    try:
        FAKE.turns = [[("text", "clarified", 5_000)]]
        run_step(rt, "clarify")
        FAKE.turns = list(HANDOFF_TURNS)
        run_step(rt, "work")
        rt.journal.add("offline", "work", None, host="api.anthropic.com", waited_s=0)   # as the runtime writes them
        rt.journal.add("online", "work", None, host="api.anthropic.com", waited_s=42)
        rt.rescue("killed-by-signal")
    finally:
        rt.close()
    rt = runtime(ws, run_dir, state_of())
    try:
        FAKE.turns = [[("text", "carried on", 40_000)]]
        run_step(rt, "work")
    finally:
        rt.close()
    return {"step": 3, "handoff": 1, "outage": 1, "kill": 1, "wake": 1, "rescue": 1}


class Pure(unittest.TestCase):
    """report_data and render_report on records written by hand."""

    def records(self):
        return [
            {"k": "run", "t": 1000.0, "r": "r1", "host": "a"},
            {"k": "turn", "t": 1001.0, "r": "r1", "s": "work", "sid": "s1", "lv": 10, "w": 100, "at": 75,
             "tools": ["Bash", "Bash", "Read"]},
            {"k": "turn", "t": 1002.0, "r": "r1", "s": "work", "sid": "s1", "lv": 80, "w": 100, "at": 75},
            {"k": "resume", "t": 1003.0, "r": "r1", "s": "work", "sid": "s1",
             "pruned": {"chars_saved": 1200, "trimmed": 2, "expired": 0}},
            {"k": "retry", "t": 1004.0, "r": "r1", "s": "work", "kind": "transient", "delay": 3},
            {"k": "verdict", "t": 1005.0, "r": "r1", "s": "work·judge#1", "verdict": "not_yet",
             "failed": ["tests pass"]},
            {"k": "degraded", "t": 1006.0, "r": "r1", "s": "work", "message": "mirror failed"},
        ]

    def rows(self):
        return [{"run": "r1", "step": "work", "ok": True, "cost_usd": 0.5, "num_turns": 2,
                 "started_at": "1970-01-01T00:16:40+00:00", "ended_at": "1970-01-01T00:16:47+00:00"},
                {"run": "r1", "step": "work·judge#1", "ok": True, "cost_usd": 0.25, "num_turns": 1,
                 "started_at": "1970-01-01T00:16:44+00:00", "ended_at": "1970-01-01T00:16:45+00:00"}]

    def test_data_of_steps_tools_saved_verdict_and_checks(self):
        goal = "# Goal\nship it\n\n# Checks\n- tests pass\n- docs written"
        data = flower.report_data(self.rows(), self.records(), brief="## Goal\nx", goal=goal, running=False, now=2000.0)
        work = data["steps"][0]
        self.assertEqual((work["label"], work["tools"], work["tool_names"]), ("work", 3, {"Bash": 2, "Read": 1}))
        self.assertEqual(work["saved"], {"chars_saved": 1200, "trimmed": 2, "expired": 0})
        self.assertEqual(data["cost"]["total"], 0.75)
        self.assertEqual(data["cost"]["cumulative"][-1][1], 0.75)
        self.assertEqual([c["status"] for c in data["goal"]["checks"]], ["failed", "unknown"])
        self.assertEqual(data["goal"]["verdict"], "not_yet")
        self.assertEqual(sorted(m["kind"] for m in data["marks"]), ["degraded", "verdict", "wait"])
        wait = [m for m in data["marks"] if m["kind"] == "wait"][0]
        self.assertEqual(wait["end"] - wait["t"], 3)
        self.assertEqual(data["sessions"][0]["points"], [[1001.0, 10], [1002.0, 80]])
        self.assertEqual((data["sessions"][0]["threshold"], data["sessions"][0]["window"]), (75, 100))

    def test_workers_calls_are_counted_apart_per_step(self):
        records = self.records() + [{"k": "wturn", "t": 1002.5, "r": "r1", "s": "work", "sid": "s1",
                                     "tools": ["Write", "Bash"]},
                                    {"k": "wturn", "t": 1002.6, "r": "r1", "s": "work", "sid": "s1", "tools": ["Edit"]}]
        data = flower.report_data(self.rows(), records, brief=None, goal=None, running=False, now=2000.0)
        work = data["steps"][0]
        self.assertEqual((work["tools"], work["worker_tools"]), (3, 3))   # the coordinator's and the workers'
        self.assertEqual(data["sessions"][0]["points"], [[1001.0, 10], [1002.0, 80]])   # no level of a worker
        page = Page(flower.render_report(data))
        cells = [k for k in page.kinds if k.get("data-kind") == "worker-calls"]
        self.assertEqual(len(cells), len(data["steps"]))
        self.assertIn(">3</td>", flower.render_report(data).split('data-kind="worker-calls"')[1][:10])

    def test_a_workers_answer_is_journaled_with_its_tools_only(self):
        from tests.fakesdk import AssistantMessage, TextBlock, ToolUseBlock
        seen = []

        class St:
            name, sid, level, window, at = "work", "s1", 5, 100, 75
        with unittest.mock.patch.object(flower, "_journal", lambda rt, kind, step, sid, fields: seen.append((kind, fields))):
            flower.journal_answer(None, St, AssistantMessage([ToolUseBlock("t1", "Write", {})], "m",
                                                             parent_tool_use_id="agent-call"))
            flower.journal_answer(None, St, AssistantMessage([TextBlock("thinking aloud")], "m",
                                                             parent_tool_use_id="agent-call"))
            flower.journal_answer(None, St, AssistantMessage([ToolUseBlock("t2", "Agent", {})], "m"))
        self.assertEqual(seen, [("wturn", {"tools": ["Write"]}),
                                ("turn", {"lv": 5, "w": 100, "at": 75, "tools": ["Agent"]})])

    def test_page_of_the_data(self):
        data = flower.report_data(self.rows(), self.records(), brief="<b>brief</b>", goal=None, running=False,
                                  now=2000.0)
        html = flower.render_report(data)
        page = Page(html)
        assert_self_contained(self, page)
        self.assertEqual(page.count("step"), 2)
        self.assertEqual((page.count("verdict"), page.count("wait"), page.count("degraded")), (1, 1, 1))
        self.assertEqual(page.levels, {"s1": 2})
        self.assertEqual((page.count("threshold"), page.count("window")), (1, 1))
        self.assertIn("<b>brief</b>", "".join(page.text))   # shown as text, not markup
        self.assertNotIn("<b>brief</b>", html)

    def test_cost_per_machine(self):
        records = self.records() + [{"k": "run", "t": 1004.5, "r": "r2", "host": "b"}]
        rows = self.rows() + [{"run": "r2", "step": "work", "ok": True, "cost_usd": 1.0, "num_turns": 1,
                               "started_at": "1970-01-01T00:16:50+00:00", "ended_at": "1970-01-01T00:16:55+00:00"}]
        data = flower.report_data(rows, records, brief="", goal="", running=False, now=2000.0)
        self.assertEqual(data["cost"]["machines"], {"a": 0.75, "b": 1.0})
        self.assertIn("b: $1.0000", flower.render_report(data))

    def test_idle_hours_between_wakes_are_cut_out_of_the_axis(self):
        records = [{"k": "run", "t": 0.0, "r": "r1", "host": "a"}, {"k": "run", "t": 36_000.0, "r": "r2", "host": "a"}]
        rows = [{"run": run, "step": "work", "ok": True, "started_at": f"1970-01-01T{h:02d}:00:00+00:00",
                 "ended_at": f"1970-01-01T{h:02d}:30:00+00:00"} for run, h in (("r1", 0), ("r2", 10))]
        data = flower.report_data(rows, records, brief="", goal="", running=False, now=40_000.0)
        page = Page(flower.render_report(data))
        steps = [k for k in page.kinds if k["data-kind"] == "step"]
        widths = [float(k["width"]) for k in steps]
        self.assertGreater(min(widths), 300)   # each half hour takes over a third of the axis (42 px uncut)
        self.assertLess(float(steps[0]["x"]) + widths[0], float(steps[1]["x"]))
        self.assertEqual(page.count("gap"), 1)
        self.assertEqual(flower.idle_gaps([(0, 10), (5, 20), (30, 40)], 0, 40), [])   # 10 s: not long
        self.assertEqual(flower.idle_gaps([(0, 60), (5000, 5060)], 0, 5060), [(60, 5000)])

    def test_empty_workspace_renders(self):
        data = flower.report_data([], [], brief=None, goal=None, running=False, now=2000.0)
        page = Page(flower.render_report(data))
        assert_self_contained(self, page)
        self.assertEqual(page.kinds, [])

    def test_chinese(self):
        data = flower.report_data(self.rows(), self.records(), brief="", goal="", running=True, now=2000.0)
        html = flower.render_report(data, "zh")
        page = Page(html)
        assert_self_contained(self, page)
        self.assertIn('<html lang="zh">', html)
        for key in ("rp_title", "rp_timeline", "rp_water", "rp_cost", "rp_tools", "rp_goal", "rp_running"):
            self.assertIn(flower.text(key, "zh"), html)
            self.assertNotIn(flower.text(key, "en"), "".join(page.text))

    def test_long_job_page_size(self):
        rows, records, goal = synthetic_job()
        data = flower.report_data(rows, records, brief="b", goal=goal, running=False, now=records[-1]["t"])
        self.assertEqual(data["turns"], 2 + 2 + 2000 + 1)
        self.assertEqual(len(data["sessions"]), 13)
        html = flower.render_report(data)
        self.assertLess(len(html.encode("utf-8")), 2_000_000)
        page = Page(html)
        assert_self_contained(self, page)
        self.assertEqual(page.count("handoff"), 9)
        self.assertEqual((page.count("kill"), page.count("rescue"), page.count("wake"), page.count("outage")),
                         (1, 1, 1, 1))
        self.assertEqual(data["cost"]["machines"].keys(), {"ci-runner-1", "ci-runner-2"})

    def test_a_torn_or_foreign_line_is_skipped(self):
        records = flower.Journal.parse(['{"k":"turn","t":1,"r":"x"}', '{"k":"turn","t":', "[1]", '{"k":1,"t":2}',
                                        '{"k":"run","t":true}', ""])
        self.assertEqual(records, [{"k": "turn", "t": 1, "r": "x"}])


class ScriptedJob(unittest.TestCase):
    """A fake-SDK job with a handoff, an outage, a kill and a wake, reported from the local files."""

    def setUp(self):
        fakesdk.install()
        self.tmp = tempfile.TemporaryDirectory()
        self.ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(self.ws)
        os.environ.pop("FLOWER_WINDOW", None)

    def tearDown(self):
        fakesdk.uninstall()
        self.tmp.cleanup()

    def journal(self):
        return flower.Journal.read(os.path.join(self.ws, ".flower", "journal.jsonl"))

    def test_one_mark_per_step_handoff_outage_kill_and_a_point_per_answer(self):
        want = scripted_job(self.ws)
        path = os.path.join(self.ws, ".flower", "journal.jsonl")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        paths = flower.Paths(self.ws)
        data = flower.gather_report(paths, flower.LocalState(paths))
        self.assertFalse(data["running"])
        page = Page(flower.render_report(data))
        assert_self_contained(self, page)
        for kind, n in want.items():
            self.assertEqual(page.count(kind), n, kind)
        self.assertEqual(len(flower.Manifest.read(paths.run_dir)), want["step"])
        turns = {}
        for rec in self.journal():
            if rec["k"] == "turn":
                turns[rec["sid"]] = turns.get(rec["sid"], 0) + 1
        self.assertEqual(page.levels, turns)
        self.assertEqual(len(turns), 4)                  # clarify, work, its successor, work again
        self.assertEqual(sum(turns.values()), 1 + 3 + 1 + 2 + 1)   # the 4th call never runs; the handoff document is an answer
        self.assertEqual(page.count("session"), 4)
        tools = {s["label"]: s["tools"] for s in data["steps"] if s["run"] == data["steps"][1]["run"]}
        self.assertEqual(tools, {"clarify": 0, "work": 3})

    def test_cli_writes_the_page_and_json(self):
        scripted_job(self.ws)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWER_", "ANTHROPIC_"))}
        env.update(PYTHONPATH=ROOT, NO_COLOR="1")
        p = subprocess.run([*RUN_FLOWER, "report"], cwd=self.ws, env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        target = os.path.join(os.path.realpath(self.ws), ".flower", "report.html")
        self.assertEqual(p.stdout.strip(), f"report written to {target}")
        self.assertEqual(stat.S_IMODE(os.stat(target).st_mode), 0o600)
        with open(target, encoding="utf-8") as fh:
            page = Page(fh.read())
        self.assertEqual(page.count("handoff"), 1)
        p = subprocess.run([*RUN_FLOWER, "report", "--json"], cwd=self.ws, env=env, capture_output=True,
                           text=True)
        data = json.loads(p.stdout)
        self.assertEqual((data["kind"], len(data["steps"]), data["running"]), ("report", 3, False))
        self.assertEqual(sorted(m["kind"] for m in data["marks"]), ["handoff", "kill", "outage", "rescue", "wake"])
        out = os.path.join(self.tmp.name, "mine.html")
        p = subprocess.run([*RUN_FLOWER, "report", "-o", out, "--lang", "zh"], cwd=self.ws, env=env,
                           capture_output=True, text=True)
        self.assertEqual(p.stdout.strip(), f"报告已写入 {out}")
        p = subprocess.run([*RUN_FLOWER, "report", "-o", os.path.join(self.tmp.name, "no", "x.html")],
                           cwd=self.ws, env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 3)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("cannot write the report", p.stderr)

    def test_in_progress_and_killed_before_the_row(self):
        paths = flower.Paths(self.ws)
        paths.prepare()
        journal = flower.Journal(paths.run(flower.JOURNAL_FILE), "r1")
        journal.add("step", "work", None, woke=1)
        for level in (1000, 2000, 3000):
            journal.add("turn", "work", "s1", lv=level, w=200_000, at=150_000, tools=["Bash"])
        journal.add("cost", "work", "s1", cost=0.2)
        lock = flower.DriverLock(os.path.join(paths.flower_dir, "flower.lock"), "this workspace").acquire()
        try:
            data = flower.gather_report(paths, flower.LocalState(paths))
        finally:
            lock.release()
        self.assertTrue(data["running"])
        self.assertEqual([(s["status"], s["turns"], s["tools"], s["cost"]) for s in data["steps"]],
                         [("running", 3, 3, 0.2)])
        self.assertEqual(data["marks"], [])
        self.assertIn(flower.text("rp_running"), flower.render_report(data))
        data = flower.gather_report(paths, flower.LocalState(paths))   # nobody drives: it was killed
        self.assertFalse(data["running"])
        self.assertEqual(data["steps"][0]["status"], "killed")
        self.assertEqual([m["kind"] for m in data["marks"]], ["kill"])
        self.assertEqual(Page(flower.render_report(data)).count("kill"), 1)

    def test_a_journal_that_cannot_be_written_never_stops_the_run(self):
        rt = runtime(self.ws)
        try:
            rt.journal.path = os.path.join(self.tmp.name, "missing", "journal.jsonl")
            FAKE.turns = [[("text", "fine", 1000)]]
            self.assertTrue(run_step(rt).ok)
            self.assertEqual(len(rt.degraded), 1)   # said once, not once per answer
        finally:
            rt.close()


@unittest.skipUnless(HAVE_PG, PG_SKIP)
class Postgres(unittest.TestCase):
    """The same scripted job with all state in PostgreSQL: the journal is a table (schema 3)."""

    @classmethod
    def setUpClass(cls):
        from tests.pgserver import PgServer
        cls.server = PgServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def setUp(self):
        fakesdk.install()
        self.tmp = tempfile.TemporaryDirectory()
        self.dsn = self.server.database()
        self.states = []

    def tearDown(self):
        for state in self.states:
            state.close()
        fakesdk.uninstall()
        self.tmp.cleanup()

    def state(self, ws):
        paths = flower.Paths(ws)
        paths.prepare()
        state = flower.PostgresState(paths, self.dsn, "job-1")
        self.assertTrue(state.ready())
        self.states.append(state)
        return state

    def test_scripted_job_reported_from_the_database_on_another_machine(self):
        ws = os.path.join(self.tmp.name, "a", "ws")
        os.makedirs(ws)
        want = scripted_job(ws, state_of=lambda: self.state(ws))
        self.assertFalse(os.path.exists(os.path.join(ws, ".flower", "journal.jsonl")))
        other = os.path.join(self.tmp.name, "b", "ws")   # another checkout: nothing local
        os.makedirs(other)
        paths = flower.Paths(other)
        data = flower.gather_report(paths, self.state(other))
        page = Page(flower.render_report(data))
        assert_self_contained(self, page)
        for kind, n in want.items():
            self.assertEqual(page.count(kind), n, kind)
        self.assertEqual(sum(page.levels.values()), 8)
        import psycopg
        with psycopg.connect(self.dsn) as conn:
            found = conn.execute("SELECT max(version) FROM flower.schema_version").fetchone()[0]
            self.assertEqual(found, flower.PG_SCHEMA_VERSION)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWER_", "ANTHROPIC_"))}
        env.update(PYTHONPATH=ROOT)
        p = subprocess.run([*RUN_FLOWER, "report", "--json", "--state", self.dsn, "--workspace-id", "job-1"],
                           cwd=other, env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(json.loads(p.stdout)["steps"]), want["step"])

    def test_journal_written_while_the_database_is_away_arrives_when_it_is_back(self):
        ws = os.path.join(self.tmp.name, "ws")
        os.makedirs(ws)
        state = self.state(ws)
        journal = state.journal("r1")
        journal.add("turn", "work", "s1", lv=1, w=10, at=8)
        self.server.stop("immediate")
        try:
            journal.add("turn", "work", "s1", lv=2, w=10, at=8)   # spooled, not lost
            self.assertTrue(state.spool.exists())
        finally:
            self.server.start()
        self.assertTrue(state.ready())
        self.assertEqual([r["lv"] for r in state.journal_records() if r["k"] == "turn"], [1, 2])


@unittest.skipUnless(HAVE_SDK, "claude-agent-sdk not installed: the end-to-end tier runs in CI (.ci/run installs it)")
class RealJob(E2ECase, unittest.TestCase):
    """The real SDK and CLI against the fake API: a job with two handoffs, then ``report`` on it."""

    def flower(self, *args):
        p = subprocess.run([*RUN_FLOWER, *args], cwd=self.ws, env=self.env, capture_output=True, text=True,
                           timeout=300, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return p

    def test_report_of_a_job_with_two_handoffs(self):
        make_real_job(self)
        self.flower("report")
        with open(os.path.join(self.ws, ".flower", "report.html"), encoding="utf-8") as fh:
            page = Page(fh.read())
        assert_self_contained(self, page)
        rows = flower.Manifest.read(os.path.join(self.ws, ".flower"))
        self.assertEqual(page.count("step"), len(rows))
        self.assertEqual(page.count("handoff"), 2)
        records = flower.Journal.read(os.path.join(self.ws, ".flower", "journal.jsonl"))
        turns = {}
        for rec in records:
            if rec["k"] == "turn":
                turns[rec["sid"]] = turns.get(rec["sid"], 0) + 1
        self.assertEqual(page.levels, turns)
        work = [s for s in json.loads(self.flower("report", "--json").stdout)["sessions"] if s["step"] == "work"]
        self.assertEqual(len(work), 3)   # the first session and two successors
        self.assertTrue(all(s["threshold"] == 150_000 and s["window"] == 200_000 for s in work))
        self.assertEqual([p[1] for p in work[0]["points"]], [60_000, 110_000, 160_000, 162_000])


    def test_report_of_a_job_running_then_killed_9_then_rescued(self):
        """While the work step's tool runs, ``report`` says running; after ``kill -9`` (no rescue, no
        row) it says killed; the next run is a wake that rescues it, and the page marks all of it."""
        import signal
        import time
        from tests.fakeapi import text, tool
        slow = "python3 -c \"import time; time.sleep(60)\""
        self.roles.work = [tool("Bash", {"command": slow}), text("after the kill")]
        freeze_front(self.ws)   # about the work step: the brief and goal as clarify and goal leave them
        proc = subprocess.Popen([*RUN_FLOWER], cwd=self.ws, env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        journal = os.path.join(self.ws, ".flower", "journal.jsonl")
        deadline = time.time() + 240
        while not any(r["k"] == "turn" and r.get("tools") for r in flower.Journal.read(journal)):
            self.assertLess(time.time(), deadline, "the tool call never reached the journal")
            self.assertIsNone(proc.poll())
            time.sleep(0.1)
        data = json.loads(self.flower("report", "--json").stdout)
        self.assertTrue(data["running"])
        self.assertEqual(data["steps"][-1]["label"], "work")
        self.assertEqual(data["steps"][-1]["status"], "running")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        data = json.loads(self.flower("report", "--json").stdout)
        self.assertFalse(data["running"])
        self.assertEqual(data["steps"][-1]["status"], "killed")
        self.assertEqual([m["kind"] for m in data["marks"]], ["kill"])
        self.flower()
        self.flower("report")
        with open(os.path.join(self.ws, ".flower", "report.html"), encoding="utf-8") as fh:
            page = Page(fh.read())
        assert_self_contained(self, page)
        self.assertEqual((page.count("kill"), page.count("rescue"), page.count("wake")), (1, 1, 1))
        self.assertEqual(page.count("step"), len(flower.Manifest.read(os.path.join(self.ws, ".flower"))) + 1)


def make_real_job(test) -> None:
    """clarify -> goal -> work (two handoffs, a few tool calls) -> judge, on the fake API."""
    from tests.fakeapi import text, tool

    def usage(level):
        return dict(input_tokens=1000, cache_read=level - 1000)
    hello = os.path.join(test.ws, "hello.txt")
    test.roles.work = [
        tool("Bash", {"command": "echo one"}, **usage(60_000)),
        tool("Bash", {"command": "echo two"}, **usage(110_000)),
        tool("Bash", {"command": "echo three"}, **usage(160_000)),      # crosses 150K
        tool("Read", {"file_path": hello}, **usage(40_000)),             # successor 1
        tool("Bash", {"command": "echo five"}, **usage(100_000)),
        tool("Bash", {"command": "echo six"}, **usage(165_000)),        # crosses again
        tool("Write", {"file_path": hello, "content": "hi\n"}, **usage(50_000)),   # successor 2
        text("all done", **usage(52_000)),
    ]
    DOCUMENT = E2E_LEDGER
    test.roles.ritual = [text(DOCUMENT, **usage(162_000)), text(DOCUMENT, **usage(167_000))]
    test.flower("--model", "claude-sonnet-4-5", "--window", "200000", "write hello")


if __name__ == "__main__":
    unittest.main()
