"""Workspace snapshots (issue 40 items 1-2), core tier: what a snapshot holds in a git work tree and
outside one, how it is kept by the local backend, and how it is restored (clean, diverged)."""

from __future__ import annotations

import os
import stat
import tempfile
import time
import unittest

import flower
from tests.helpers import git


def write(path, body):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(body if isinstance(body, bytes) else body.encode())


def read(path):
    with open(path, "rb") as fh:
        return fh.read().decode()


class Repo(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.a = os.path.join(self.tmp.name, "a")
        os.makedirs(self.a)
        git(self.a, "init", "-q", "-b", "main")
        write(os.path.join(self.a, "keep.txt"), "one\ntwo\nthree\n")
        write(os.path.join(self.a, "other.txt"), "alpha\n")
        write(os.path.join(self.a, ".gitignore"), "*.log\n")
        git(self.a, "add", "-A")
        git(self.a, "commit", "-q", "-m", "base")

    def tearDown(self):
        self.tmp.cleanup()

    def clone(self, name="b"):
        b = os.path.join(self.tmp.name, name)
        git(self.tmp.name, "clone", "-q", self.a, b)
        return b

    def change_a(self):
        write(os.path.join(self.a, "keep.txt"), "one\ntwo\nthree\nfour\n")
        write(os.path.join(self.a, "new", "made.txt"), "made by the job\n")
        write(os.path.join(self.a, "bin.dat"), bytes(range(256)))
        write(os.path.join(self.a, "noise.log"), "ignored\n")
        write(os.path.join(self.a, ".flower", "lineage.json"), "{}")
        return flower.capture_snapshot(self.a, 0, 10 ** 9)

    def test_a_snapshot_holds_the_diff_and_untracked_files_never_ignored_or_flower(self):
        snap = self.change_a()
        self.assertEqual(snap.base, git(self.a, "rev-parse", "HEAD").decode().strip())
        self.assertEqual(sorted(snap.files), ["bin.dat", "new/made.txt"])
        self.assertEqual([n for n, _ in flower.split_diff(snap.diff)], ["keep.txt"])
        again = flower.Snapshot.unpack(snap.pack())
        self.assertEqual((again.diff, again.files, again.base), (snap.diff, snap.files, snap.base))
        self.assertIsNone(flower.Snapshot.unpack(b"not a snapshot"))
        self.assertIsNone(flower.Snapshot.unpack(snap.pack()[:-10]))

    def test_credential_files_never_travel_in_a_snapshot(self):
        secret = "sk-ant-api03-" + "S" * 40
        for name in (".env", "config/.env.production", "keys/id_ed25519", "deploy.pem", ".netrc", "app.key"):
            write(os.path.join(self.a, name), f"TOKEN={secret}\n")
        write(os.path.join(self.a, "env.md"), "notes about the environment\n")
        for snap in (flower.capture_snapshot(self.a, 0, 10 ** 9), flower.capture_snapshot(self.a + "/keys", 0, 10 ** 9)):
            self.assertNotIn(secret.encode(), snap.pack())
        self.assertEqual(sorted(flower.capture_snapshot(self.a, 0, 10 ** 9).files), ["env.md"])
        plain = os.path.join(self.tmp.name, "plain")   # outside git: the files changed since the job began
        write(os.path.join(plain, ".env"), f"TOKEN={secret}\n")
        write(os.path.join(plain, "made.txt"), "x\n")
        self.assertEqual(sorted(flower.capture_snapshot(plain, 0, 10 ** 9).files), ["made.txt"])

    def test_over_the_cap_no_snapshot(self):
        write(os.path.join(self.a, "big.bin"), b"x" * 5000)
        self.assertIsNone(flower.capture_snapshot(self.a, 0, 4000))

    def test_restored_into_a_clean_clone_at_the_base(self):
        snap = self.change_a()
        b = self.clone()
        self.assertFalse(flower.snapshot_present(b, snap))
        done = flower.restore_snapshot(b, snap, os.path.join(b, ".flower", "aside"))
        self.assertEqual(sorted(done.restored), ["bin.dat", "keep.txt", "new/made.txt"])
        self.assertIsNone(done.aside)
        self.assertEqual(read(os.path.join(b, "keep.txt")), "one\ntwo\nthree\nfour\n")
        self.assertEqual(read(os.path.join(b, "new", "made.txt")), "made by the job\n")
        with open(os.path.join(b, "bin.dat"), "rb") as fh:
            self.assertEqual(fh.read(), bytes(range(256)))
        self.assertEqual(git(b, "diff", "--cached", "--name-only"), b"")      # the index is left alone
        self.assertTrue(flower.snapshot_present(b, snap))                     # a second start: nothing to do
        self.assertTrue(flower.snapshot_present(self.a, snap))

    def test_diverged_a_local_edit_survives_the_rest_applies_or_is_set_aside(self):
        snap = self.change_a()
        b = self.clone()
        write(os.path.join(b, "keep.txt"), "LOCAL EDIT\n")              # local change on a file the job changed
        write(os.path.join(b, "new", "made.txt"), "B's own file\n")    # an untracked file of the same name
        aside = os.path.join(b, ".flower", "aside")
        done = flower.restore_snapshot(b, snap, aside)
        self.assertEqual(read(os.path.join(b, "keep.txt")), "LOCAL EDIT\n")
        self.assertEqual(read(os.path.join(b, "new", "made.txt")), "B's own file\n")
        self.assertEqual(done.restored, ["bin.dat"])
        self.assertEqual(done.aside, aside)
        self.assertIn("+four", read(os.path.join(aside, "changes.patch")))
        self.assertEqual(read(os.path.join(aside, "files", "new", "made.txt")), "made by the job\n")

    def test_another_base_merges_three_way_what_applies_cleanly(self):
        snap = self.change_a()
        b = self.clone()
        write(os.path.join(b, "other.txt"), "alpha\nbeta\n")       # B's base moved on, elsewhere in the tree
        write(os.path.join(b, "keep.txt"), "zero\none\ntwo\nthree\n")  # and in the job's file, another hunk
        git(b, "commit", "-q", "-am", "moved on")
        done = flower.restore_snapshot(b, snap, os.path.join(b, ".flower", "aside"))
        self.assertIn("keep.txt", done.restored)
        self.assertEqual(read(os.path.join(b, "keep.txt")), "zero\none\ntwo\nthree\nfour\n")
        self.assertEqual(git(b, "diff", "--cached", "--name-only"), b"")

    def test_outside_git_the_files_changed_since_the_job_began(self):
        plain = os.path.join(self.tmp.name, "plain")
        write(os.path.join(plain, "old.txt"), "old")
        past = time.time() - 100
        os.utime(os.path.join(plain, "old.txt"), (past, past))
        write(os.path.join(plain, "sub", "new.txt"), "new")
        write(os.path.join(plain, ".flower", "x"), "state")
        snap = flower.capture_snapshot(plain, time.time() - 50, 10 ** 9)
        self.assertIsNone(snap.base)
        self.assertEqual(sorted(snap.files), ["sub/new.txt"])
        fresh = os.path.join(self.tmp.name, "fresh")
        os.makedirs(fresh)
        done = flower.restore_snapshot(fresh, snap, os.path.join(fresh, ".flower", "aside"))
        self.assertEqual(done.restored, ["sub/new.txt"])

    def test_unsafe_paths_in_a_snapshot_are_never_written(self):
        snap = flower.Snapshot(None, b"", {"../escape.txt": (0o644, b"x"), ".flower/lineage.json": (0o644, b"x"),
                                           "ok.txt": (0o644, b"x")})
        self.assertEqual(sorted(flower.Snapshot.unpack(snap.pack()).files), ["ok.txt"])

    def test_the_local_backend_keeps_the_newest_few_private(self):
        state = flower.LocalState(flower.Paths(self.a))
        self.assertIsNone(state.latest_snapshot())
        for n in range(5):
            state.put_snapshot(f"snap {n}".encode())
        folder = os.path.join(self.a, ".flower", "snapshots")
        names = os.listdir(folder)
        self.assertEqual(len(names), flower.SNAPSHOTS_KEPT)
        self.assertEqual(state.latest_snapshot(), b"snap 4")
        for name in names:
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode), 0o600)

    def test_names_shown_are_redacted(self):
        key = "sk-ant-api03-" + "A" * 90
        shown = flower.listing([f"notes/{key}.txt", "plain.txt"])
        self.assertNotIn(key, shown)
        self.assertIn("plain.txt", shown)


if __name__ == "__main__":
    unittest.main()
