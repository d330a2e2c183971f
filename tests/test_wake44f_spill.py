"""Spill files at I/O speed (issue 44, "until its files are written"): what write_spills does with equal
texts and long batches, and how a writer that lets its caller go first is hurried by whoever waits.

- equal texts (a tool result and its toolUseResult copy) are redacted once and written once: the second
  name is a hard link to the first (same inode, 0600, the redacted bytes); where the file system cannot
  link, it is written as before;
- wait_spills() starts a writer that still waits (SPILL_LOAD_WAIT, SPILL_DEFER_WAIT) at once."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import unittest
import unittest.mock

import flower

SECRET = "sk-ant-api03-" + "Q" * 40


def text(i: int, size: int = 40_000) -> str:
    return f"{i:05d} export API_TOKEN={SECRET}\n" + ("line of a build log\n" * (size // 20))


class SpillFiles(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.root = tmp.name
        self.spill = os.path.join(self.root, "spill")

    def files(self, folder: str | None = None) -> dict[str, tuple[bytes, int]]:
        folder = folder or self.spill
        out = {}
        for name in sorted(os.listdir(folder)):
            info = os.stat(os.path.join(folder, name))
            with open(os.path.join(folder, name), "rb") as fh:
                out[name] = (fh.read(), stat.S_IMODE(info.st_mode))
        return out

    def spills(self, folder: str, texts: list[str]) -> dict[str, str]:
        """Two files a text (as a result and its toolUseResult copy), named as the prune names them."""
        out = {}
        for i, body in enumerate(texts):
            out[os.path.join(folder, f"{i:016x}-0.txt")] = body
            out[os.path.join(folder, f"{i:016x}-1.txt")] = body
        return out

    def test_equal_texts_are_redacted_once_and_written_once(self):
        spills = self.spills(self.spill, [text(0, 2000), text(1, 2000)])
        real, redacted = flower.redact, []

        def counting(value, secrets=None):
            redacted.append(value)
            return real(value, secrets)
        with unittest.mock.patch.object(flower, "redact", counting):
            flower.write_spills(spills)
        self.assertEqual(len(redacted), 2)
        files = self.files()
        self.assertEqual(sorted(files), sorted(os.path.basename(p) for p in spills))
        for path, body in spills.items():
            data, mode = files[os.path.basename(path)]
            self.assertEqual(data, real(body).encode())
            self.assertNotIn(SECRET.encode(), data)
            self.assertEqual(mode, 0o600)
        for i in range(2):
            first, second = (os.stat(os.path.join(self.spill, f"{i:016x}-{k}.txt")) for k in (0, 1))
            self.assertEqual((first.st_ino, first.st_dev), (second.st_ino, second.st_dev))
        self.assertNotEqual(os.stat(os.path.join(self.spill, f"{0:016x}-0.txt")).st_ino,
                            os.stat(os.path.join(self.spill, f"{1:016x}-0.txt")).st_ino)

    def test_a_file_system_that_cannot_link_gets_the_files_written(self):
        spills = self.spills(self.spill, [text(0, 2000)])

        def no_link(*args, **kwargs):
            raise OSError(errno.EPERM, "Operation not permitted")
        with unittest.mock.patch.object(os, "link", no_link):
            flower.write_spills(spills)
        files = self.files()
        self.assertEqual(len(files), 2)
        self.assertEqual({data for data, _ in files.values()}, {flower.redact(text(0, 2000)).encode()})
        self.assertEqual({mode for _, mode in files.values()}, {0o600})
        first, second = (os.stat(os.path.join(self.spill, f"{0:016x}-{k}.txt")) for k in (0, 1))
        self.assertNotEqual(first.st_ino, second.st_ino)
        self.assertEqual([n for n in os.listdir(self.spill) if n.endswith(".tmp")], [])

class WaitHurries(unittest.TestCase):
    """A writer waits SPILL_LOAD_WAIT / SPILL_DEFER_WAIT before it starts, so that its caller goes first;
    here both are 30 s, and wait_spills() is given 20: the files are there only if it hurried them."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.spill = os.path.join(tmp.name, "spill")
        self.addCleanup(flower.wait_spills, 60)
        for name in ("SPILL_LOAD_WAIT", "SPILL_DEFER_WAIT"):
            patcher = unittest.mock.patch.object(flower, name, 30)
            patcher.start()
            self.addCleanup(patcher.stop)

    def test_a_load_writer_starts_once_someone_waits(self):
        spills = {os.path.join(self.spill, f"{i:016x}-0.txt"): text(i) for i in range(30)}
        self.assertTrue(flower.write_spills_later(spills))
        flower.wait_spills(20)
        self.assertEqual(flower._SPILL_WRITERS, {})
        self.assertEqual(len(os.listdir(self.spill)), 30)

    def test_a_write_time_writer_starts_once_someone_waits(self):
        full = text(1, flower.SPILL_DEFER_AT + 1000)
        path, shown = flower.spill_later(self.spill, full, 100)
        flower.wait_spills(20)
        self.assertEqual(flower._SPILL_WRITERS, {})
        with open(path, encoding="utf-8") as fh:
            self.assertEqual(fh.read(), flower.redact(full))
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(shown, flower.redact(full)[:100])


if __name__ == "__main__":
    unittest.main()
