"""The report page in a real browser: Debian's ``chromium``, headless (``.ci/run`` installs it; without
it this tier skips with a message). A screenshot that is not blank, no console errors, and every
SVG laid out inside the page width at 1280 px and at 390 px (the page measures itself when opened
with ``#measure``; at 390 px it is framed by a local wrapper page, because headless Chromium does
not make a window narrower than 500 px)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import unittest
import zlib

import flower
from tests.helpers import synthetic_job

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SKIP = "chromium not installed: apt-get install chromium (the browser tier runs in CI: .ci/run installs it)"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]
WRAPPER = ('<!DOCTYPE html><html><body style="margin:0"><script>addEventListener("message",function(e){'
           'var p=document.createElement("pre");p.id="measured";p.textContent=e.data;document.body.appendChild(p)})'
           '</script><iframe src="report.html#measure" style="border:0;width:390px;height:4000px"></iframe>'
           '</body></html>')


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """``(width, height, rows)`` of an 8-bit RGB or RGBA PNG, unfiltered (rows of raw pixel bytes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = header[:4]
    assert depth == 8 and colour in (2, 6), (depth, colour)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def variety(data: bytes) -> tuple[int, float]:
    """``(distinct colours, share of pixels unlike the commonest colour)`` of a PNG, every 4th pixel."""
    width, height, rows = png_pixels(data)
    bpp = len(rows[0]) // width
    counts: dict[bytes, int] = {}
    for row in rows[::2]:
        for x in range(0, width * bpp, bpp * 2):
            pixel = row[x:x + 3]
            counts[pixel] = counts.get(pixel, 0) + 1
    total = sum(counts.values())
    return len(counts), 1 - max(counts.values()) / total


@unittest.skipUnless(CHROMIUM, SKIP)
class Browser(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        rows, records, goal = synthetic_job(turns=300, sessions=4)
        data = flower.report_data(rows, records, brief="## Goal\nship it\n## Acceptance\ntests pass", goal=goal,
                                  running=False, now=records[-1]["t"], workspace="/ws", state="local")
        cls.page = os.path.join(cls.tmp.name, "report.html")
        with open(cls.page, "w", encoding="utf-8") as fh:
            fh.write(flower.render_report(data))
        with open(os.path.join(cls.tmp.name, "narrow.html"), "w", encoding="utf-8") as fh:
            fh.write(WRAPPER)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def chromium(self, *args, width=1280):
        profile = tempfile.mkdtemp(dir=self.tmp.name)
        p = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},2000", *args],
                           capture_output=True, text=True, timeout=180, cwd=self.tmp.name)
        return p

    def console_errors(self, stderr: str) -> list[str]:
        return [line for line in stderr.splitlines()
                if "CONSOLE" in line and ("Uncaught" in line or ":ERROR:" in line or "error" in line.lower())]

    def measured(self, url: str, width: int) -> dict:
        p = self.chromium("--virtual-time-budget=5000", "--dump-dom", url, width=width)
        found = re.search(r'<pre id="measured">([^<]*)</pre>', p.stdout)
        self.assertIsNotNone(found, f"the page did not measure itself: {p.stderr[-2000:]}")
        self.assertEqual(self.console_errors(p.stderr), [])
        return json.loads(found.group(1).replace("&quot;", '"'))

    def test_screenshot_is_not_blank(self):
        for width, url in ((1280, f"file://{self.page}"), (390, f"file://{self.tmp.name}/narrow.html")):
            shot = os.path.join(self.tmp.name, f"shot-{width}.png")
            p = self.chromium(f"--screenshot={shot}", url, width=width)
            self.assertTrue(os.path.exists(shot), p.stderr[-2000:])
            self.assertEqual(self.console_errors(p.stderr), [])
            with open(shot, "rb") as fh:
                colours, share = variety(fh.read())
            self.assertGreater(colours, 20, width)
            self.assertGreater(share, 0.03, width)

    def test_svgs_inside_the_page_width(self):
        for width, url in ((1280, f"file://{self.page}#measure"), (390, f"file://{self.tmp.name}/narrow.html")):
            found = self.measured(url, width)
            if width == 390:
                self.assertEqual(found["width"], 390)
            else:
                self.assertGreater(found["width"], 1200)
            self.assertLessEqual(found["scroll"], found["width"], f"the page scrolls sideways at {width}px")
            self.assertEqual(len(found["svgs"]), 3)
            for left, right, height in found["svgs"]:
                self.assertGreaterEqual(left, 0, width)
                self.assertLessEqual(right, found["width"], width)
                self.assertGreater(height, 20, width)


if __name__ == "__main__":
    unittest.main()
