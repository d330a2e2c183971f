"""A pending wake (issue 36 item 4b), core tier: a sentence that a killed run's CLI wrote to its own
transcript, but the store never got, is recovered before the work step's prompt is chosen, so the
model is not sent it twice."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import unittest
import uuid
from unittest import mock

import flower
from tests.fake_flower import brain
from tests.fakesdk import FAKE
from tests.helpers import FakeRuntime


class SalvagedSentence(FakeRuntime, unittest.TestCase):
    def test_a_sentence_the_killed_cli_wrote_but_never_mirrored_is_not_sent_again(self):
        sentence = "also support tables SALVAGE-MARK"
        with tempfile.TemporaryDirectory() as config, mock.patch.dict(os.environ, {"CLAUDE_CONFIG_DIR": config}):
            FAKE.turns = [brain] * 10
            rt1 = self.runtime()
            asyncio.run(flower.starter_flow("write md2html", rt=rt1).run(rt1))
            work_sid = self.lineage()["steps"]["work"]
            # a wake written ahead, its goal re-derived; the work step's CLI wrote the sentence, then the kill
            rt1.lineage.add_wake(sentence)
            rt1.lineage.settle_wake(goal=True)
            key = {"project_key": rt1.project_key, "session_id": work_sid}
            stored = rt1.raw_store.load_sync(key)
            said = {"type": "user", "uuid": str(uuid.uuid4()), "parentUuid": stored[-1]["uuid"],
                    "sessionId": work_sid, "message": {"role": "user", "content": sentence}}
            own = os.path.join(config, "projects", rt1.project_key)
            os.makedirs(own)
            with open(os.path.join(own, f"{work_sid}.jsonl"), "w") as fh:
                fh.writelines(json.dumps(e) + "\n" for e in [*stored, said])
            FAKE.calls.clear()
            rt2 = self.runtime()
            asyncio.run(flower.starter_flow(None, rt=rt2).run(rt2))
        work = [c for c in FAKE.calls if c["options"].resume == work_sid]
        self.assertEqual(work[0]["prompt"], flower.text("work_resume"))    # not the sentence again
        history = json.dumps(work[0]["loaded"])
        self.assertEqual(history.count("SALVAGE-MARK"), 1)                # the model sees it once
        self.assertFalse([c for c in FAKE.calls if flower.text("goal_instructions")[:24] in
                          str(c["options"].system_prompt)])                  # the goal was re-derived already
        self.assertIsNone(self.lineage().get("wake"))


if __name__ == "__main__":
    unittest.main()
