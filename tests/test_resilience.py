"""Resilience: endpoint and proxies, the DNS+TCP probe, classify, backoff, waiting out an outage."""

import asyncio
import random
import socket
import threading
import time
import unittest
from unittest import mock

import flower
from flower import classify, endpoint, reachable, Resilience

# Every verbatim text of sdk-notes §d, with its structured fields and the expected class.
PORT_TEXT = "127.0.0.1:40123"
TABLE = [
    ("API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)", None, "api_error", "transient"),
    ("API Error: Connection dropped (ECONNRESET). Check the gateway set in ANTHROPIC_BASE_URL, then try again.", None, "api_error", "transient"),
    ("API Error: Connection to the API was lost (ECONNRESET). This is usually temporary — try again.", None, "api_error", "transient"),
    ("Request timed out. If the API is slow to answer, or a proxy or gateway holds responses, set API_TIMEOUT_MS above 3000.", None, "api_error", "transient"),
    (f"API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again in a moment. If it persists, check your inference gateway ({PORT_TEXT}).", 529, "api_error", "transient"),
    (f"API Error: 500 Internal server error. This is a server-side issue, usually temporary — try again in a moment. If it persists, check your inference gateway ({PORT_TEXT}).", 500, "api_error", "transient"),
    ("API Error: 503 Service Unavailable. This is a server-side issue, usually temporary.", 503, "api_error", "transient"),
    ("API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit", 429, "api_error", "transient"),
    ("Invalid API key · Fix external API key", 401, "api_error", "fatal"),
    ("Failed to authenticate. API Error: 403 Your API key does not have permission to use the specified resource.", 403, "api_error", "fatal"),
    ("There's an issue with the selected model (claude-opus-5-5). It may not exist or you may not have access to it. Run --model to pick a different model.", 404, "api_error", "fatal"),
    ("API Error: 400 messages: bad thing", 400, "api_error", "fatal"),
    ("Credit balance is too low", 400, "api_error", "fatal"),
    ("Prompt is too long · the request is ~250000 tokens (limit 200000) but this conversation is only ~2502 tokens", 400, "prompt_too_long", "overflow"),
    ("Request too large (max 32MB). Accumulated images and attachments in the conversation pushed the request over the limit.", 413, "image_error", "fatal"),
    ("Prompt is too long", None, "blocking_limit", "overflow"),
    ("Reached maximum number of turns (1)", None, "max_turns", "fatal"),
    ("Reached maximum budget ($0.01)", None, "budget_exhausted", "fatal"),
]
TEXT_ONLY = [
    ("Invalid API key · the connection to the gateway was fine", "fatal"),    # fatal before transient
    ("authentication_error: connection reset by auth proxy", "fatal"),
    ("API Error: Connection refused (ECONNREFUSED)", "transient"),
    ("Prompt is too long", "overflow"),
    ("something nobody has seen", "unknown"),
    ("", "unknown"),
    ("Credit balance is too low; check your network connection", "fatal"),
    ("No conversation found with session ID: 123", "fatal"),
]


class Classify(unittest.TestCase):
    def test_verbatim_cli_texts_with_fields(self):
        for message, status, reason, expected in TABLE:
            with self.subTest(message=message[:40]):
                self.assertEqual(classify(message, status=status, terminal_reason=reason), expected)

    def test_verbatim_cli_texts_alone(self):
        for message, status, reason, expected in TABLE:
            if reason in ("max_turns", "budget_exhausted", "image_error"):
                continue
            with self.subTest(message=message[:40]):
                self.assertEqual(classify(message), expected)

    def test_text_only_and_misleading_words(self):
        for message, expected in TEXT_ONLY:
            with self.subTest(message=message):
                self.assertEqual(classify(message), expected)

    def test_status_beats_text(self):
        self.assertEqual(classify("connection whatever", status=401), "fatal")
        self.assertEqual(classify("Invalid request", status=529), "transient")


class Backoff(unittest.TestCase):
    def test_bounds_over_10000_samples(self):
        policy = Resilience()
        rng = random.Random(42)
        for attempt in range(1, 9):
            nominal = min(4.0 * 2 ** (attempt - 1), 120.0)
            samples = [policy.delay(attempt, rng) for _ in range(10000)]
            self.assertGreaterEqual(min(samples), 0.75 * nominal)
            self.assertLessEqual(max(samples), 1.25 * nominal)
            self.assertLess(min(samples), 0.8 * nominal)   # the jitter really spreads
            self.assertGreater(max(samples), 1.2 * nominal)

    def test_defaults_and_env_overrides(self):
        d = Resilience()
        self.assertEqual((d.max_attempts, d.base_delay, d.max_delay, d.probe_timeout, d.probe_interval,
                          d.max_offline_wait, d.retry_unknown), (6, 4.0, 120.0, 5.0, 15.0, 3600.0, True))
        env = {"FLOWER_MAX_ATTEMPTS": "3", "FLOWER_PROBE_INTERVAL": "0.5", "FLOWER_MAX_OFFLINE_WAIT": "bogus",
               "FLOWER_NO_PROBE": "1"}
        saved = {k: flower.os.environ.get(k) for k in env}
        flower.os.environ.update(env)
        warnings = []
        try:
            r = Resilience.from_env(warn=warnings.append)
        finally:
            for k, v in saved.items():
                if v is None:
                    flower.os.environ.pop(k, None)
                else:
                    flower.os.environ[k] = v
        self.assertEqual((r.max_attempts, r.probe_interval, r.max_offline_wait, r.probe), (3, 0.5, 3600.0, False))
        self.assertEqual(len(warnings), 1)
        self.assertIn("FLOWER_MAX_OFFLINE_WAIT", warnings[0])

    def test_cli_env_defaults_respect_the_user(self):
        self.assertEqual(flower.cli_env_defaults({}), {"CLAUDE_CODE_MAX_RETRIES": "2",
                                                        "CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS": "120000"})
        self.assertEqual(flower.cli_env_defaults({"CLAUDE_CODE_MAX_RETRIES": "9"}),
                         {"CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS": "120000"})

    def test_resume_prompt_carries_no_error_details(self):
        for lang in ("en", "zh"):
            prompt = flower.text("resume_prompt", lang)
            for word in ("ECONN", "503", "error", "Error", "API"):
                self.assertNotIn(word, prompt)


class Endpoint(unittest.TestCase):
    def test_base_url_forms(self):
        self.assertEqual(endpoint({}), ("api.anthropic.com", 443))
        self.assertEqual(endpoint({"ANTHROPIC_BASE_URL": "http://gw.local"}), ("gw.local", 80))
        self.assertEqual(endpoint({"ANTHROPIC_BASE_URL": "gw.local:8443"}), ("gw.local", 8443))
        self.assertEqual(endpoint({"ANTHROPIC_BASE_URL": "https://gw.local/v1"}), ("gw.local", 443))
        self.assertEqual(endpoint({"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/x"}), ("127.0.0.1", 9))

    def test_proxy_and_no_proxy(self):
        proxy = {"HTTPS_PROXY": "http://proxy.corp:3128"}
        self.assertEqual(endpoint(proxy), ("proxy.corp", 3128))
        self.assertEqual(endpoint({"https_proxy": "proxy.corp:8080"}), ("proxy.corp", 8080))
        self.assertEqual(endpoint({"ALL_PROXY": "http://p2:1"}), ("p2", 1))
        self.assertEqual(endpoint(dict(proxy, NO_PROXY="api.anthropic.com")), ("api.anthropic.com", 443))
        self.assertEqual(endpoint(dict(proxy, NO_PROXY=".anthropic.com")), ("api.anthropic.com", 443))
        self.assertEqual(endpoint(dict(proxy, NO_PROXY="anthropic.com")), ("api.anthropic.com", 443))
        self.assertEqual(endpoint(dict(proxy, no_proxy="*")), ("api.anthropic.com", 443))
        self.assertEqual(endpoint(dict(proxy, NO_PROXY="example.com,localhost")), ("proxy.corp", 3128))
        self.assertEqual(endpoint(dict(proxy, NO_PROXY="thropic.com")), ("proxy.corp", 3128))  # not a suffix match


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Listener:
    def __init__(self, port):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)

    def close(self):
        self.sock.close()


class Probe(unittest.TestCase):
    def test_up_closed_unresolvable(self):
        port = free_port()
        listener = Listener(port)
        try:
            self.assertTrue(asyncio.run(reachable("127.0.0.1", port, 2.0)))
        finally:
            listener.close()
        self.assertFalse(asyncio.run(reachable("127.0.0.1", port, 2.0)))
        self.assertFalse(asyncio.run(reachable("no-such-host.invalid", 443, 2.0)))

    def test_probe_does_not_block_the_loop(self):
        """The resolver blocks until the loop has ticked three times: only a probe that resolves
        off the event loop lets that happen (in the loop it would wait for ticks that never come)."""
        ticked = threading.Event()
        released = []

        def blocking_getaddrinfo(*args, **kwargs):
            released.append(ticked.wait(10))
            raise socket.gaierror("no such host")

        async def main():
            async def ticker():
                for _ in range(3):
                    await asyncio.sleep(0)
                ticked.set()
            t = asyncio.ensure_future(ticker())
            with mock.patch("socket.getaddrinfo", blocking_getaddrinfo):
                ok = await reachable("no-such-host.invalid", 443, 30.0)
            await t
            return ok
        self.assertFalse(asyncio.run(main()))
        self.assertEqual(released, [True])

    def test_wait_online_with_a_listener_that_comes_back(self):
        port = free_port()
        policy = Resilience(probe_interval=0.1, probe_timeout=1.0, max_offline_wait=10.0)
        notes = []

        def come_back():
            time.sleep(0.5)
            holder.append(Listener(port))
        holder = []
        threading.Thread(target=come_back, daemon=True).start()
        try:
            ok = asyncio.run(policy.wait_online(notes.append, target=("127.0.0.1", port)))
        finally:
            for l in holder:
                l.close()
        self.assertTrue(ok)
        self.assertEqual(len(notes), 2)
        self.assertIn("unreachable", notes[0])
        self.assertIn("reachable again", notes[1])

    def test_wait_online_gives_up_with_injected_clock(self):
        clock = [0.0]
        probes = []

        async def probe(host, port, timeout):
            probes.append(clock[0])
            return False

        async def sleep(seconds):
            clock[0] += seconds

        policy = Resilience()  # the real defaults: 15 s interval, 3600 s wait, all virtual here
        notes = []
        ok = asyncio.run(policy.wait_online(notes.append, target=("h", 1), probe=probe, sleep=sleep,
                                            clock=lambda: clock[0]))
        self.assertFalse(ok)
        self.assertEqual(clock[0], 3600.0)
        self.assertEqual(len(probes), 1 + 240)
        self.assertEqual(len(notes), 1 + 59)   # down, then one line a minute (never an hour of silence)
        self.assertTrue(all("still offline" in n for n in notes[1:]), notes[:3])

    def test_wait_online_immediately_true_when_up_and_when_probe_off(self):
        async def up(h, p, t):
            return True
        notes = []
        self.assertTrue(asyncio.run(Resilience().wait_online(notes.append, target=("h", 1), probe=up)))
        self.assertEqual(notes, [])
        self.assertTrue(asyncio.run(Resilience(probe=False).wait_online(target=("no-such-host.invalid", 1))))


if __name__ == "__main__":
    unittest.main()
