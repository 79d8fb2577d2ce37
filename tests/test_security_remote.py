"""Attacks on the `--base-url` client (agent/samplers/remote.py) by hostile servers on loopback: real
http.server and raw-socket servers in threads, the real RemoteSampler and Agent against them.

Damage is checked where it lands: which Authorization headers a second server received, how
many bytes the client read and how much memory it took, how long it was held. Controls show
the attack is real: urllib's default opener forwards the key on a redirect, the infinite
server really does not end, each ping arrives well inside the per-read timeout."""
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent.samplers.remote import MAX_LINE, MAX_REPLY, RemoteSampler, key_for
from agent.samplers.sampler import SamplerError
from agent.settings import TurnSettings
from tools.permissions import Policy

ROOT = Path(__file__).resolve().parents[1]
KEY = "nk-secret-for-this-server"


@pytest.fixture(autouse=True)
def no_keys(monkeypatch):
    monkeypatch.delenv("NANOCODE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@contextlib.contextmanager
def hostile(do_post=None, do_get=None):
    """A server whose handlers are the functions given (a models listing by default); every
    request's path and Authorization header is kept in `seen`."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            (do_get or models)(self)

        def do_POST(self):
            seen.append((self.path, self.headers.get("Authorization")))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            do_post(self)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def models(h):
    data = json.dumps({"data": [{"id": "m", "context_length": 4096}]}).encode()
    h.send_response(200)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def redirect(code, to):
    def handler(h):
        h.send_response(code)
        h.send_header("Location", to + h.path.removeprefix("/v1"))
        h.send_header("Content-Length", "0")
        h.end_headers()
    return handler


def sse_forever(piece: bytes, every: float = 0.0, sent: list | None = None):
    """An event stream that never ends: `piece` again and again (every `every` seconds)."""
    def handler(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        h.close_connection = True
        with contextlib.suppress(OSError):
            while True:
                h.wfile.write(piece)
                h.wfile.flush()
                if sent is not None:
                    sent.append(len(piece))
                time.sleep(every)
    return handler


def turn(url, tmp_path, **kw):
    """One agent turn on the server: (stop_reason, status notes, seconds)."""
    from agent.loop.driver import Agent
    agent = Agent(RemoteSampler(url, **kw), tmp_path, Policy.load(tmp_path, mode="auto"),
                  TurnSettings(snapshots=False))
    events, t0 = [], time.monotonic()
    res = agent.run_turn("hi", on_event=events.append)
    return res.stop_reason, [e.text for e in events if e.kind == "status"], time.monotonic() - t0


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_never_carries_the_key(code, tmp_path, monkeypatch):
    """The base URL answers /models, or the chat request, with a redirect to a second server:
    the client stops with an error naming the Location, and the second server never sees the
    key (nor any request). Control: urllib's default opener sends the key there."""
    monkeypatch.setenv("NANOCODE_API_KEY", KEY)
    with hostile(models, models) as (second, got):
        with hostile(do_get=redirect(code, second)) as (first, _):
            if code == 302:  # control: what following the redirect does
                req = urllib.request.Request(first + "/models", headers={"Authorization": f"Bearer {KEY}"})
                urllib.request.urlopen(req, timeout=10).read()
                assert got == [("/v1/models", f"Bearer {KEY}")]
                got.clear()
            with pytest.raises(SamplerError, match=f"answered {code}, a redirect to '{second}/models'"):
                RemoteSampler(first)
        with hostile(do_post=redirect(code, second)) as (first, seen):
            stop, notes, _ = turn(first, tmp_path)
            assert stop == "model_error" and f"redirect to '{second}/chat/completions'" in notes[-1]
            assert all(auth == f"Bearer {KEY}" for _, auth in seen)  # the key went to its own server
        assert got == []


def test_openai_key_goes_only_to_openai(tmp_path, monkeypatch):
    """$OPENAI_API_KEY is not sent to a server the URL names (a loopback server sees no
    Authorization on /models or on the chat request); $NANOCODE_API_KEY is, to that server; an
    explicit key wins. The rule, on the URLs an attacker could dress up."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    with hostile(do_post=answer_ok) as (url, seen):
        assert turn(url, tmp_path)[0] == "done"
        assert seen == [("/v1/models", None), ("/v1/chat/completions", None)]
        seen.clear()
        monkeypatch.setenv("NANOCODE_API_KEY", KEY)
        assert turn(url, tmp_path)[0] == "done"
        assert {auth for _, auth in seen} == {f"Bearer {KEY}"}
        seen.clear()
        RemoteSampler(url, api_key="explicit")
        assert seen == [("/v1/models", "Bearer explicit")]
    monkeypatch.delenv("NANOCODE_API_KEY")
    assert key_for("https://api.openai.com/v1") == key_for("https://API.openai.com:443/v1") == "sk-openai"
    for url in ["http://api.openai.com/v1", "https://api.openai.com.evil.example/v1",
                "https://api.openai.com:8443/v1", "https://evil.example/v1?h=api.openai.com",
                "https://evil.example/api.openai.com", "http://127.0.0.1:8000/v1", "https://[::1/v1"]:
        assert key_for(url) is None, url


def answer_ok(h):
    data = (b'data: {"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}\n\n'
            b"data: [DONE]\n\n")
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def test_a_401_says_which_key_goes_where(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")

    def unauthorized(h):
        data = b'{"error": {"message": "missing or wrong API key"}}'
        h.send_response(401)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    with hostile(do_get=unauthorized) as (url, _):
        with pytest.raises(SamplerError, match=r"401: missing or wrong API key \(nanocode sends "
                                               r"\$NANOCODE_API_KEY.*only to https://api.openai.com"):
            RemoteSampler(url)


EVENT = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": null}]}\n\n'
ARGS = b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": ' \
       b'{"name": "Bash", "arguments": "0123456789abcdef0123456789abcdef"}}]}}]}\n\n'


@pytest.mark.parametrize("piece", [EVENT, ARGS], ids=["empty-events", "endless-arguments"])
def test_an_endless_reply_stops_at_the_byte_cap(piece, tmp_path):
    """A server that streams forever (empty deltas, or one call's arguments growing without
    end): the turn ends with model_error once the cap is read (1 MiB here, traced; the default
    in the CLI test below), the client's memory peak stays a small multiple of it, and the
    client hangs up (the server's writes stop). Control: a plain reader gets three times the
    cap from it and it is still sending."""
    sent, cap = [], 1 << 20
    with hostile(do_post=sse_forever(piece, sent=sent)) as (url, _):
        req = urllib.request.Request(url + "/chat/completions", data=b"{}")
        with urllib.request.urlopen(req, timeout=10) as r:  # control
            assert len(r.read(3 * cap)) == 3 * cap
        time.sleep(0.5)
        sent.clear()
        tracemalloc.start()
        try:
            stop, notes, took = turn(url, tmp_path, max_reply=cap)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert stop == "model_error" and f"passed {cap} bytes" in notes[-1]
        assert peak < 8 * cap, peak
        time.sleep(1.0)
        total = sum(sent)
        time.sleep(0.5)
        assert sum(sent) == total < cap + (32 << 20)  # stopped: the client hung up


def test_an_endless_line_stops_at_the_line_cap(tmp_path):
    with hostile(do_post=sse_forever(b"data: " + b"a" * 65536)) as (url, _):
        stop, notes, _ = turn(url, tmp_path)
        assert stop == "model_error" and f"a line longer than {MAX_LINE} bytes" in notes[-1]


@pytest.mark.parametrize("ping", [b": ping\n\n", b"\n", b"event: ping\n\n", EVENT],
                         ids=["comment", "blank", "event", "empty-delta"])
def test_keepalives_do_not_extend_the_deadline(ping, tmp_path):
    """Something every 0.1 s, never an answer: each arrives far inside the per-read timeout
    (1 s: it alone would wait forever), and the turn ends at the 1.5 s deadline."""
    with hostile(do_post=sse_forever(ping, every=0.1)) as (url, _):
        stop, notes, took = turn(url, tmp_path, timeout=1.0, deadline=1.5)
        assert stop == "model_error" and "did not finish its reply within 1.5 s" in notes[-1]
        assert 1.4 < took < 4, took


def drip_server(head: bytes):
    """A raw server that sends `head`, then one byte of a header every 0.1 s, forever."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=drip, args=(conn,), daemon=True).start()

    def drip(conn):
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)
            conn.sendall(head)
            while True:
                conn.sendall(b"x")
                time.sleep(0.1)
    threading.Thread(target=serve, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}/v1"


@pytest.mark.parametrize("head,scheme", [
    (b"HTTP/1.1 200 OK\r\nX-Slow: ", "http"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n{\"data\": \"", "http"),
    (b"\x16\x03\x03\x40\x00", "https")], ids=["headers", "body", "tls-handshake"])
def test_a_dripped_listing_is_cut_at_the_deadline(head, scheme):
    """The /models listing dripped a byte at a time: in the headers (where no reply loop runs),
    in its body, or in a TLS handshake record (before any HTTP): the deadline's timer shuts the
    socket, the start-up fails on time."""
    listener, url = drip_server(head)
    try:
        t0 = time.monotonic()
        with pytest.raises(SamplerError, match="did not finish its reply within 1 s"):
            RemoteSampler(url.replace("http", scheme, 1), timeout=1.0, deadline=1.0)
        assert time.monotonic() - t0 < 3
    finally:
        listener.close()


def test_the_cli_exits_6_on_an_endless_reply(tmp_path):
    """Headless: the byte cap ends the run with the model server's error, exit status 6."""
    with hostile(do_post=sse_forever(EVENT)) as (url, _):
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        out = subprocess.run([sys.executable, "-m", "agent.cli", "-p", "hi", "--base-url", url,
                              "--cwd", str(tmp_path), "--trust"], env={**env, "PYTHONPATH": str(ROOT)},
                             capture_output=True, text=True, timeout=120)
    assert out.returncode == 6, out.stderr[-2000:]
    assert f"passed {MAX_REPLY} bytes" in out.stderr and "Traceback" not in out.stderr
