"""A tiny fake Anthropic Messages API on 127.0.0.1, for driving the real CLI offline.

Replies are scripted: ``api.script`` is a list consumed in order (one item per POST /v1/messages),
or ``api.responder(body) -> Reply`` decides per request. Every request body is logged in
``api.requests`` (its arrival time in ``api.arrivals``) so tests can assert on what the model was sent;
``api.on_done(index, body, reply, delivered)``, when set, hears whether each answer reached the client.
Loopback only.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    """One scripted answer. ``blocks``: ("text", str) or ("tool_use", name, input_dict[, tool_use_id]).
    ``cut``: stream only the first N SSE events, then close the connection (a stream dropped mid-way)."""

    blocks: list = field(default_factory=lambda: [("text", "ok")])
    usage: dict = field(default_factory=lambda: {"input_tokens": 100, "cache_read_input_tokens": 0,
                                                 "cache_creation_input_tokens": 0})
    status: int = 200
    error_type: str = "api_error"
    error_message: str = "error"
    headers: dict = field(default_factory=dict)
    drop: bool = False          # close the connection without answering
    stall: float = 0.0          # hold the response this many seconds before answering
    model: str = "claude-sonnet-4-5"
    cut: int = 0                # > 0: send this many SSE events of the stream, then hang up
    msg_id: str | None = None   # the message id to answer with (default: a random one)


def text(value: str, **usage: int) -> Reply:
    """A plain text answer with the given usage numbers."""
    return Reply([("text", value)], usage=_usage(**usage))


def tool(name: str, args: dict, say: str = "", **usage: int) -> Reply:
    """An answer that calls one tool (optionally after some text)."""
    blocks = ([("text", say)] if say else []) + [("tool_use", name, args)]
    return Reply(blocks, usage=_usage(**usage))


def error(status: int, message: str, error_type: str = "api_error", **headers: str) -> Reply:
    """An HTTP error with Anthropic's error JSON."""
    return Reply(status=status, error_message=message, error_type=error_type,
                 headers={k.replace("_", "-"): v for k, v in headers.items()})


def _usage(input_tokens: int = 100, cache_read: int = 0, cache_creation: int = 0) -> dict:
    return {"input_tokens": input_tokens, "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_creation}


class FakeAnthropic:
    """The server. Use as a context manager; ``base_url`` goes into ANTHROPIC_BASE_URL."""

    def __init__(self, port: int = 0):
        self.script: list = []
        self.responder: Callable[[dict], Reply] | None = None
        self.requests: list[dict] = []
        self.arrivals: list[float] = []     # time.time() of each logged request
        self.on_done: Callable[[int, dict, Reply, bool], None] | None = None
        self.refuse = False
        self.paths: list[str] = []          # the URL path of each logged request (a base URL's prefix marks a client)
        self.current_path = ""              # the path of the request being answered (read by a responder)
        self._lock = threading.Lock()
        self._port = port
        self.server: ThreadingHTTPServer | None = None

    # -- lifecycle --

    def start(self) -> "FakeAnthropic":
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                if "count_tokens" in self.path:
                    return self._json(200, {"input_tokens": 100})
                with api._lock:
                    index = len(api.requests)
                    api.requests.append(body)
                    api.arrivals.append(time.time())
                    api.paths.append(self.path)
                    api.current_path = self.path
                    reply = api._next(body)
                try:
                    delivered = api._answer(self, body, reply)
                except OSError:   # the client hung up mid-answer
                    delivered = False
                    self.close_connection = True
                if api.on_done is not None:
                    api.on_done(index, body, reply, bool(delivered))

            def do_GET(self) -> None:  # noqa: N802
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "no"}})

            def _json(self, status: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # a client that hung up is expected here
                pass

        self.server = Server(("127.0.0.1", self._port), Handler)
        self.server.daemon_threads = True
        self._port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def restart(self) -> None:
        """Listen again on the same port (after stop())."""
        for _ in range(50):
            try:
                self.start()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("port did not come back")

    def __enter__(self) -> "FakeAnthropic":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    # -- scripting --

    def _next(self, body: dict) -> Reply:
        if self.responder is not None:
            return self.responder(body)
        if self.script:
            item = self.script.pop(0)
            return item(body) if callable(item) else item
        return text("ok")

    def saw(self, needle: str, requests: list[dict] | None = None) -> bool:
        """Whether any logged request body contains ``needle``."""
        return any(needle in json.dumps(r, ensure_ascii=False) for r in (requests or self.requests))

    @staticmethod
    def messages_text(body: dict) -> str:
        """All text of a request's messages, tool results included, as one string."""
        return json.dumps(body.get("messages", []), ensure_ascii=False)

    # -- answering --

    def _answer(self, handler: BaseHTTPRequestHandler, body: dict, reply: Reply) -> bool:
        """Write the answer; True when a complete 200 answer was written."""
        if reply.stall:
            time.sleep(reply.stall)
        if reply.drop:
            try:
                handler.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            handler.close_connection = True
            return False
        if reply.status != 200:
            data = json.dumps({"type": "error", "error": {"type": reply.error_type,
                                                          "message": reply.error_message}}).encode()
            handler.send_response(reply.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            for k, v in reply.headers.items():
                handler.send_header(k, v)
            handler.end_headers()
            handler.wfile.write(data)
            return False
        msg_id = reply.msg_id or "msg_fake_" + uuid.uuid4().hex[:12]
        content = []
        for block in reply.blocks:
            if block[0] == "text":
                content.append({"type": "text", "text": block[1]})
            else:
                content.append({"type": "tool_use", "id": block[3] if len(block) > 3 else "toolu_" + uuid.uuid4().hex[:16],
                                "name": block[1], "input": block[2]})
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        usage = dict(reply.usage, output_tokens=5)
        if not body.get("stream"):
            data = json.dumps({"id": msg_id, "type": "message", "role": "assistant", "model": reply.model,
                               "content": content, "stop_reason": stop, "stop_sequence": None,
                               "usage": usage}).encode()
            handler.send_response(200)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return True
        events = [("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": reply.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": dict(reply.usage, output_tokens=1)}})]
        for i, block in enumerate(content):
            if block["type"] == "text":
                events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {"type": "text", "text": ""}}))
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": block["text"]}}))
            else:
                events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {"type": "tool_use", "id": block["id"],
                                                                         "name": block["name"], "input": {}}}))
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
            events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop,
                                                                            "stop_sequence": None},
                                         "usage": {"output_tokens": 5}}))
        events.append(("message_stop", {"type": "message_stop"}))
        chunks = [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]
        payload = b"".join(chunks)
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("content-length", str(len(payload)))   # the full length, also when cut short
        handler.end_headers()
        handler.wfile.write(b"".join(chunks[:reply.cut]) if reply.cut else payload)
        if reply.cut:
            handler.wfile.flush()
            try:
                handler.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            handler.close_connection = True
            return False
        return True


def last_user_text(body: dict) -> str:
    """The text of the last user message of a request body (its text blocks joined)."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def cli_env(api: FakeAnthropic, home: str) -> dict:
    """The environment the real CLI needs to talk to ``api`` offline (sdk-notes)."""
    return {
        "ANTHROPIC_BASE_URL": api.base_url,
        "ANTHROPIC_API_KEY": "sk-test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "HOME": home,
        "CLAUDE_CONFIG_DIR": home + "/.claude",
        "IS_SANDBOX": "1",
    }
