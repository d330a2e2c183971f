"""The degraded ledger lists the workbench's artifacts (issue 39, item 5): a handoff without a
handoff document still tells the successor what the workbench holds, and only where there is one."""

import asyncio
import os
import unittest

import flower
from tests import fakesdk
from tests.fakesdk import FAKE


class DegradedLedgerWorkbench(fakesdk.FakeWorkspace, unittest.TestCase):
    def run_degraded(self, make_workbench):
        os.environ.pop("FLOWER_WINDOW", None)
        rt = flower.Runtime(workspace=self.ws, run_dir=self.run_dir, handoff=flower.HandoffPolicy(window=200_000),
                            resilience=flower.Resilience(probe=False, base_delay=0, max_attempts=2))
        try:
            if make_workbench:
                for rel, body in (("scripts/fetch.py", "# desc: FETCH-SCRIPT\n"), ("artifacts/table.csv", "a,b\n")):
                    path = os.path.join(rt.paths.workbench_dir, rel)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "w") as fh:
                        fh.write(body)
            FAKE.turns = [[("text", "step 1", 151_000)], [("text", "sorry, no document", 151_000)],
                          [("text", "done", 1000)]]
            asyncio.run(flower.Workflow([flower.Step("work", flower.AgentSpec("work"), "do it")]).run(rt))
            with open(rt.paths.handoff("work"), encoding="utf-8") as fh:
                document = fh.read()
            self.assertIn("[degraded: ", document)
            return rt.paths, flower.Ledger.parse(document)
        finally:
            rt.close()

    def test_pointers_list_the_workbench_files_and_its_index(self):
        paths, ledger = self.run_degraded(True)
        pointers = ledger.get("pointers")
        self.assertIn(paths.workbench_index, pointers)
        for rel in ("scripts/fetch.py", "artifacts/table.csv"):
            self.assertIn(os.path.join(paths.workbench_dir, rel), pointers)

    def test_no_workbench_no_workbench_pointers(self):
        paths, ledger = self.run_degraded(False)
        self.assertNotIn("workbench", ledger.get("pointers"))
        self.assertFalse(os.path.exists(paths.workbench_dir))

    def test_many_files_are_counted_not_listed(self):
        paths = flower.Paths(self.ws)
        os.makedirs(os.path.join(paths.workbench_dir, "notes"))
        for i in range(5):
            with open(os.path.join(paths.workbench_dir, "notes", f"n{i}.md"), "w") as fh:
                fh.write("x\n")
        lines = flower.workbench_pointers(paths, limit=3)
        self.assertEqual(len(lines), 1 + 3 + 1)
        self.assertIn("2 more files", lines[-1])
        ledger = flower.degraded_ledger([], "overflow", "go on", workbench=lines)
        self.assertIn(os.path.join(paths.workbench_dir, "notes", "n0.md"), ledger.get("pointers"))


if __name__ == "__main__":
    unittest.main()
