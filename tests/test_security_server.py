"""Attacks on `nanocode serve` (agent/serve.py, its HTTP front agent/serve_http.py), executed over real loopback sockets against the
real server (make_server, as `nanocode serve` builds it) on a tiny random checkpoint.

Each attack is checked by its damage: whether the engine did any work (a counter on
Server.complete), the status and OpenAI-shaped error on the wire, whether the connection is
still usable or was closed, and how many threads the server holds. Controls show the damage
without the defence: no key asked, the attacker's name allowed, no connection cap."""
import contextlib
import http.client
import json
import socket
import threading
import time

import pytest

from agent.serve import Server
from agent.serve_http import MAX_BODY, make_server

KEY = "k3y-for-the-tests"
CHAT = "/v1/chat/completions"
GOOD = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def srv(ckpt):
    """The engine behind the server; `work` counts the completions it ran."""
    from agent.model import load_engine
    s = Server(load_engine(ckpt), "tiny")
    s.work, complete = 0, s.complete

    def counted(job, on_text=None):
        s.work += 1
        return complete(job, on_text)
    s.complete = counted
    return s


@contextlib.contextmanager
def serving(srv, **kw):
    """The real server in a thread; yields its port."""
    httpd = make_server(srv, **{"token": KEY, **kw})
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def ask(port, method, path, body=None, headers=None, key=KEY, conn=None):
    """One request: (status, JSON body, response headers)."""
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    head = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {}),
            **(headers or {})}
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    conn.request(method, path, data, head)
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"null"), r.headers


def raw(port, data: bytes, wait: float = 5.0) -> tuple[bytes, float]:
    """Send bytes on a fresh socket; what comes back until the server closes, and how long."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        got = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                got += chunk
    return got, time.monotonic() - t0


def threads_settle(limit: int, seconds: float = 5.0) -> int:
    end = time.monotonic() + seconds
    while threading.active_count() > limit and time.monotonic() < end:
        time.sleep(0.05)
    return threading.active_count()


def test_no_key_no_model(srv, monkeypatch):
    """Without the key (or with a wrong or near one) every endpoint is a 401 in OpenAI's shape
    and the engine runs nothing; the comparison is hmac.compare_digest. Control: a server with
    no key asked serves anyone."""
    with serving(srv, token=None) as port:
        before = srv.work
        assert ask(port, "POST", CHAT, GOOD, key=None)[0] == 200 and srv.work == before + 1
    compared = []
    import agent.serve_http
    real = agent.serve_http.hmac.compare_digest
    monkeypatch.setattr(agent.serve_http.hmac, "compare_digest", lambda a, b: compared.append(1) or real(a, b))
    bad = [None, "Bearer wrong", f"Bearer {KEY}x", f"Bearer {KEY[:-1]}", f"Basic {KEY}", KEY,
           "Bearer", f"Bearer {KEY.upper()}", f"Token {KEY}"]
    with serving(srv) as port:
        before = srv.work
        for auth in bad:
            for method, path, body in [("POST", CHAT, GOOD), ("GET", "/v1/models", None)]:
                status, err, headers = ask(port, method, path, body, key=None,
                                           headers={"Authorization": auth} if auth else None)
                assert status == 401 and err["error"]["code"] == "invalid_api_key", (auth, err)
                assert err["error"]["type"] == "invalid_request_error" and "Bearer" in err["error"]["message"]
                assert headers["WWW-Authenticate"] == "Bearer" and headers["Connection"] == "close"
        assert srv.work == before and compared
        assert ask(port, "POST", CHAT, GOOD)[0] == 200 and srv.work == before + 1
        assert ask(port, "POST", CHAT, GOOD, key=None, headers={"Authorization": f"bearer {KEY}"})[0] == 200


def test_foreign_host_or_origin_is_403_before_any_work(srv):
    """DNS rebinding (a Host naming another site) and web pages (an Origin of another site) are
    refused before the key is even looked at, with the right key and a valid body. Control: the
    attacker's name, once allowed with --allow-host, is served."""
    with serving(srv) as port:
        hosts = ["evil.example", f"evil.example:{port}", "127.0.0.1.evil.example",
                 f"localhost.evil.example:{port}", "evil@localhost", "localhost/x", "", "0.0.0.0"]
        origins = ["http://evil.example", f"http://evil.example:{port}", "null",
                   "http://localhost.evil.example", "https://127.0.0.1.evil.example", "file://",
                   "http://[::1", "localhost"]
        before = srv.work
        for host in hosts:
            status, err, _ = ask(port, "POST", CHAT, GOOD, headers={"Host": host})
            assert status == 403 and err["error"]["code"] == "host_not_allowed", host
            assert "--allow-host" in err["error"]["message"]
        for origin in origins:
            status, err, _ = ask(port, "POST", CHAT, GOOD, headers={"Origin": origin})
            assert status == 403 and err["error"]["code"] == "origin_not_allowed", origin
        got, _ = raw(port, f"GET /v1/models HTTP/1.1\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode())
        assert got.startswith(b"HTTP/1.1 403")  # no Host at all
        assert srv.work == before
        for host in ["localhost", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST."]:
            assert ask(port, "GET", "/v1/models", headers={"Host": host})[0] == 200, host
        for origin in [f"http://localhost:{port}", f"http://127.0.0.1:{port}", "http://[::1]:5173"]:
            assert ask(port, "GET", "/v1/models", headers={"Origin": origin})[0] == 200, origin
    with serving(srv, allow_hosts=["evil.example"]) as port:
        assert ask(port, "POST", CHAT, GOOD, headers={"Host": f"evil.example:{port}",
                                                       "Origin": "http://evil.example"})[0] == 200
        assert srv.work == before + 1


def deep(n: int) -> str:
    return "[" * n + "]" * n


BAD_BODIES = [
    ({"messages": "hi"}, "messages", "non-empty list"),
    ({"messages": [1]}, "messages", "unknown role"),
    ({"messages": [{"role": ["user"], "content": "x"}]}, "messages", "unknown role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages", "string or a list of text parts"),
    ({"messages": [{"role": "user", "content": {"text": "x"}}]}, "messages", "list of text parts"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages",
     "not a text part"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages", "not a text part"),
    ({**GOOD, "temperature": "hot"}, "temperature", "number from 0 to 2"),
    ({**GOOD, "temperature": -1}, "temperature", "number"),
    ({**GOOD, "temperature": True}, "temperature", "number"),
    ({**GOOD, "top_p": 2}, "top_p", "number from 0 to 1"),
    ({**GOOD, "seed": 1e40}, "seed", "integer"),
    ({**GOOD, "seed": 2 ** 64}, "seed", "integer"),
    ({**GOOD, "seed": "1"}, "seed", "integer"),
    ({**GOOD, "tools": 5}, "tools", "list of function tools"),
    ({**GOOD, "tools": [5]}, "tools", "tools[0]"),
    ({**GOOD, "tools": [{"type": "function", "function": {"name": 3}}]}, "tools", "tools[0]"),
    ({**GOOD, "max_tokens": -1}, "max_tokens", "integer from 1"),
    ({**GOOD, "max_tokens": 0}, "max_tokens", "integer from 1"),
    ({**GOOD, "max_tokens": 10 ** 30}, "max_tokens", "integer from 1"),
    ({**GOOD, "max_tokens": "12"}, "max_tokens", "integer"),
    ({**GOOD, "max_tokens": 1.5}, "max_tokens", "integer"),
    ({**GOOD, "max_completion_tokens": -3}, "max_completion_tokens", "integer"),
    ({**GOOD, "stream": "yes"}, "stream", "true or false"),
    ({**GOOD, "stream": 1}, "stream", "true or false"),
    ({"messages": [{"role": "assistant", "content": "", "tool_calls": "x"}]}, "messages", "tool_calls must be a list"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "Read", "arguments": {"a": 1}}}]}]},
     "messages", "arguments as a JSON string"),
    ({"messages": [{"role": "tool", "tool_call_id": 5, "content": "x"}]}, "messages", "answers no earlier"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "a", "function": {
        "name": "Read", "arguments": deep(100)}}]}]}, None, "nested more than 64"),
    ({**GOOD, "x": json.loads(deep(100))}, None, "nested more than 64"),
    (("{\"messages\": " + deep(100_000) + "}").encode(), None, "nested more than 64"),
    (b"[]", None, "must be a JSON object"),
    (b"{oops", None, "not JSON"),
    (b"\xff\xfe{}", None, "not JSON"),
    (b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', "temperature", "number"),
]


def test_bad_parameters_are_400s_that_keep_the_connection(srv):
    """Each bad body is a 400 in OpenAI's shape naming the parameter, the engine runs nothing,
    and all of them go down one keep-alive connection, which then still serves a good request
    (no reconnect: the same socket)."""
    with serving(srv) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        before, sock = srv.work, None
        for body, param, says in BAD_BODIES:
            status, err, _ = ask(port, "POST", CHAT, body, conn=conn)
            assert status == 400 and says in err["error"]["message"], (body, err)
            assert err["error"]["type"] == "invalid_request_error" and err["error"]["param"] == param, body
            sock = sock or conn.sock
            assert conn.sock is sock  # kept alive
        assert srv.work == before
        assert ask(port, "POST", CHAT, GOOD, conn=conn)[0] == 200 and conn.sock is sock
        assert srv.work == before + 1


def test_lengths_that_lie_are_refused_at_once(srv):
    """A Content-Length that is negative, not digits, doubled and different, or over the cap,
    and a chunked body: an immediate 400/411/413 without reading a body, and the connection
    closed (no thread left waiting for bytes that will not come)."""
    head = f"POST {CHAT} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEY}\r\n"
    cases = [("Content-Length: -5\r\n", 400), ("Content-Length: abc\r\n", 400),
             ("Content-Length: 1e3\r\n", 400), ("Content-Length: \r\n", 400),
             ("Content-Length: 5\r\nContent-Length: 6\r\n", 400),
             ("Content-Length: 99999999999999999999\r\n", 400),
             (f"Content-Length: {MAX_BODY + 1}\r\n", 413),
             ("Transfer-Encoding: chunked\r\n", 411)]
    with serving(srv, read_timeout=30) as port:
        base = threading.active_count()
        before = srv.work
        for line, code in cases:
            got, took = raw(port, (head + line + "\r\n").encode())
            assert got.startswith(f"HTTP/1.1 {code}".encode()) and took < 2, (line, got[:80], took)
            err = json.loads(got.split(b"\r\n\r\n", 1)[1])["error"]
            assert err["type"] == "invalid_request_error" and "Connection: close" in got.decode()
        assert srv.work == before and threads_settle(base) <= base


def test_a_body_or_headers_that_never_arrive_are_cut_at_the_read_timeout(srv):
    """A Content-Length larger than what is sent, headers never finished, and headers dripped a
    byte every 0.2 s (each byte well inside any per-read timeout): every one is closed about
    the read timeout (1 s here) after it began, and its thread ends."""
    with serving(srv, read_timeout=1.0) as port:
        base = threading.active_count()
        short = f"POST {CHAT} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEY}\r\n" \
                "Content-Length: 1000\r\n\r\n{\"messages\": "
        for data in [short.encode(), b"GET /v1/models HTTP/1.1\r\nHost: localh"]:
            got, took = raw(port, data)
            assert got == b"" and 0.9 < took < 3, (data, got, took)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            t0, closed = time.monotonic(), None
            for byte in b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 100:
                try:
                    s.send(bytes([byte]))
                except OSError:
                    closed = time.monotonic() - t0
                    break
                with contextlib.suppress(BlockingIOError):
                    if s.recv(1, socket.MSG_DONTWAIT) == b"":
                        closed = time.monotonic() - t0
                        break
                time.sleep(0.2)
        assert closed is not None and 0.9 < closed < 3
        assert threads_settle(base) <= base


def test_a_slowloris_flood_is_held_at_the_connection_cap(srv):
    """200 sockets each sending its request line a byte every 0.25 s: the server holds at most
    32 threads for them (the rest get a prompt 503 or are closed), a normal request during the
    flood gets a prompt 503 or its answer, the held ones are cut at the read timeout, and a
    normal request then succeeds. Control: with no effective cap the same flood holds a thread
    per socket."""
    line = f"POST {CHAT} HTTP/1.1\r\n".encode()

    def flood(port, seconds):
        socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(200)]
        peak, t0, i = 0, time.monotonic(), 0
        while time.monotonic() - t0 < seconds:
            for s in socks:
                with contextlib.suppress(OSError):
                    s.send(line[i % len(line):i % len(line) + 1])
            i += 1
            peak = max(peak, threading.active_count())
            time.sleep(0.25)
        return socks, peak

    def ended(s):
        try:
            got = s.recv(4096, socket.MSG_DONTWAIT)
            return got == b"" or got.startswith(b"HTTP/1.1 503")
        except BlockingIOError:
            return False
        except OSError:
            return True

    with serving(srv, max_connections=1000, read_timeout=30) as port:  # control
        base = threading.active_count()
        socks, peak = flood(port, 1.0)
        assert peak >= base + 150
        for s in socks:
            s.close()
    time.sleep(0.5)
    with serving(srv, max_connections=32, read_timeout=2.0) as port:
        base = threading.active_count()
        socks, peak = flood(port, 1.0)
        assert peak <= base + 32
        assert sum(ended(s) for s in socks) >= 160  # refused at once, not queued
        t0 = time.monotonic()
        try:
            status, err, _ = ask(port, "GET", "/v1/models")
        except (ConnectionError, http.client.HTTPException):
            status, err = 503, {"error": {"code": "server_busy"}}  # closed before it could answer
        assert time.monotonic() - t0 < 2 and (status == 200 or err["error"]["code"] == "server_busy")
        time.sleep(2.0)  # past the read timeout: the 32 held sockets are cut
        assert all(ended(s) for s in socks) and threads_settle(base) <= base
        assert ask(port, "POST", CHAT, GOOD)[0] == 200
        for s in socks:
            s.close()
