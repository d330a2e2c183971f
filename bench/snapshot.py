"""Workspace snapshots (issue 40): the time to take one on a git repository of 1,000 files with 100
changed (90 tracked files edited, 10 new untracked ones), against the floor of what any snapshot must
run: ``git diff --binary HEAD`` and ``git ls-files --others --exclude-standard`` alone (goal <= 1.5x).
Also its share of a turn: against a 2 s model answer, were one taken every turn, and as taken
(debounced: at most one per FLOWER_SNAPSHOT_EVERY, 30 s; goal < 5%)."""

import os
import subprocess
import tempfile

from common import QUICK, paired, report

import flower

ENV = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@example.com", GIT_COMMITTER_NAME="b",
           GIT_COMMITTER_EMAIL="b@example.com")


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=ENV).stdout


def repository(root, files=1000, changed=100):
    """A repository of ``files`` files of ~2 KB in 20 folders; ``changed`` of them changed after the commit."""
    git(root, "init", "-q", "-b", "main")
    for i in range(files):
        folder = os.path.join(root, f"pkg{i % 20:02d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"mod{i:04d}.py"), "w") as fh:
            fh.write("".join(f"def f{i}_{j}(x):\n    return x + {j}\n" for j in range(60)))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    for i in range(changed - changed // 10):
        with open(os.path.join(root, f"pkg{i % 20:02d}", f"mod{i:04d}.py"), "a") as fh:
            fh.write(f"def added_{i}():\n    return {i}\n")
    for i in range(changed // 10):
        with open(os.path.join(root, f"new{i}.py"), "w") as fh:
            fh.write("x = 1\n" * 300)


def main():
    with tempfile.TemporaryDirectory() as root:
        repository(root)

        def snapshot():
            snap = flower.capture_snapshot(root, 0, flower.SNAPSHOT_MAX)
            return snap.pack()

        def floor():
            git(root, "diff", "--binary", "HEAD")
            git(root, "ls-files", "--others", "--exclude-standard", "-z")

        ours, base, pair = paired(snapshot, floor, 5 if QUICK else 15)
        report("snapshot, 1,000 files, 100 changed", ours, base, pair, goal=1.5)
        every = flower.SNAPSHOT_EVERY
        print(f"{'snapshot / a 2 s turn, had every turn one':<60} {100 * ours / 2.0:9.2f} %")
        print(f"{f'snapshot / turn time, at most one per {every:.0f} s (debounced)':<60} "
              f"{100 * ours / every:9.2f} %  (goal < 5%)")
        print(f"{'packed size':<60} {len(snapshot()) / 1024:9.1f} KB")


if __name__ == "__main__":
    main()
