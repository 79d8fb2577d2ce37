"""`nanocode serve`: the engine behind an OpenAI-compatible HTTP API, on loopback by default.

    nanocode serve [--model PATH|TAG] [--host 127.0.0.1] [--port 8000]
    curl localhost:8000/v1/chat/completions -H "Authorization: Bearer $KEY" \
        -d '{"messages": [{"role": "user", "content": "hi"}]}'

GET /v1/models (with the model's context_length); POST /v1/chat/completions, plain or streamed;
either asked with the other method is a 405 naming the one it takes (ROUTES, an Allow header).
What a request may ask and how the reply looks on the wire is agent/samplers/openai_wire.py: parameters
the server cannot honour are a 400, never ignored; the tools are nanocode's own and the client's
own function tools (listed in the system message, their parameters in the schema subset the
grammar writes: agent/samplers/foreign_tools.py), offered through the grammar mask (agent/masks/grammar.py),
with agent/masks/loop_guard.py keeping a reply out of loops. A reply is prose and at most one tool
call, handed back as `tool_calls` (nothing is run here). Requests run one at a time (one engine,
batch 1).

Containment: the port is reachable by every local user and, through a browser, by every web
page, so before any model work a request must name the server in its Host and Origin (a 403:
DNS rebinding, cross-site pages), carry the key as `Authorization: Bearer KEY` (a 401; compared in
constant time; printed at start, or --token / $NANOCODE_SERVE_TOKEN, or --no-auth), and arrive in
full within --read-timeout with a body of at most MAX_BODY (413, 411, 400). At most
--max-connections are served at once, one thread each; the next get a 503 and are closed, so a
flood of slow clients cannot grow the server's threads.
Not contained: the model's replies are not checked here (the client runs the calls), and a
client with the key can keep the engine busy.

Exit status: 0 stopped (Ctrl-C), 2 bad usage or no such model, CANNOT_LISTEN (7) when the address
cannot be listened on (a port in use: one line says so and how to choose another).
"""
from __future__ import annotations

import argparse
import errno
import hmac
import json
import os
import re
import secrets
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import numpy as np

from agent.masks.grammar import CONTENT, Grammar
from agent.masks.loop_guard import LoopGuard
from agent.samplers.foreign_tools import call_values
from agent.samplers.openai_wire import (
    DONE_EVENT, RequestError, StopText, call_chunk, completion, error_body, first_chunk, last_chunk, parse_json,
    parse_request, reply_head, text_chunk)
from nanocode.common import ModelError, enable_compilation_cache, resolve_model
from nanocode.load import load_engine
from nanocode.protocol import TOOLS

MAX_BODY = 4 << 20  # bytes of one request body
ROUTES = {"/v1/models": "GET", "/v1/chat/completions": "POST"}  # another method: a 405
LOOPBACK = ("localhost", "127.0.0.1", "::1")


class Server:
    """The engine, its tokenizer and grammar, and one lock: what the handler calls."""

    def __init__(self, engine, model_name: str):
        self.engine, self.tok, self.name = engine, engine.tokenizer, model_name
        self.grammar = Grammar.shared(self.tok, engine.cfg.vocab_size)
        self.lock = threading.Lock()
        self.a_start = self.tok.special_ids["<|assistant_start|>"]
        self.call_first = np.zeros(self.grammar.n_vocab, bool)  # a reply that must be a call
        self.call_first[self.grammar.call_start] = True

    def prepare(self, req: dict) -> dict:
        """Check a request and render it; a RequestError says what is wrong (a 400, or a 404 for
        another model; also for a streamed request: it is raised before the stream starts)."""
        job = parse_request(req, self.name)
        messages = client_tools_prompt(job.pop("messages"), job["tools"])
        ids = self.tok.render_conversation({"messages": messages})[0] + [self.a_start]
        room = self.engine.max_len - len(ids) - 1
        if room < 1:
            raise RequestError(f"the conversation is {len(ids)} tokens: more than the model's "
                               f"context of {self.engine.max_len}; shorten it", "messages")
        return {**job, "ids": ids, "max_tokens": min(job["max_tokens"], room)}

    def complete(self, job: dict, on_text=None) -> dict:
        """One chat completion of a prepared request: {"content", "tool_call" or None,
        "finish_reason", "usage"}. on_text(piece) streams the prose as it is sampled
        (agent/samplers/reply_stream.py). finish_reason: "tool_calls" for a call that parsed, "length"
        when the budget or the context cut the reply, else "stop" (a malformed call included:
        its prose is the reply). With job["stop"], the prose ends before the first stop string
        in it (StopText: what on_text gets holds none of it), sampling stops there, and the
        reply has no call. With job["must_call"], the reply opens with the call."""
        from agent.samplers.reply_stream import stream_reply  # deferred: it loads jax
        state = self.grammar.state(tools=job["tools"])
        loops = LoopGuard.shared(self.grammar).reply()  # no reply extends a loop (agent/masks/loop_guard.py)
        stop, sent, cancel = StopText(job["stop"]), [], threading.Event()

        def allowed(out):
            if job["must_call"] and not out:
                return self.call_first
            m = state.allowed(out)
            return loops.mask(out, m, prose=state.phase == CONTENT)

        def emit(piece):
            if piece:
                sent.append(piece)
                if on_text is not None:
                    on_text(piece)

        def text(piece):
            emit(stop.feed(piece))
            if stop.hit:
                cancel.set()  # no token after this one is read
        with self.lock:
            t0 = time.perf_counter()
            decoder = self.engine.decoder()
            decoder.append(job["ids"])
            tokens = decoder.generate(max_tokens=job["max_tokens"], temperature=job["temperature"],
                                      top_p=job["top_p"], seed=job["seed"], allowed=allowed)
            reply = stream_reply(self.tok, tokens, text, cancel)
            emit(stop.flush())  # the prose ended with no stop string: what was held goes out
            seconds = time.perf_counter() - t0
        finish = "tool_calls" if reply.call else "length" if reply.stop == "length" else "stop"
        prompt, completion = len(job["ids"]), len(reply.ids)
        content = "".join(sent) if stop.hit else reply.content
        return {"content": content, "tool_call": client_call(reply.call, job["tools"]), "finish_reason": finish,
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion, "seconds": round(seconds, 3)}}


def client_tools_prompt(messages: list[dict], tools) -> list[dict]:
    """The request's messages with the client's own tools listed at the end of the system message
    (a new one when there is none), as the system prompt lists ours: the model sees what it may call."""
    theirs = [t for t in tools if t.name not in TOOLS]
    if not theirs:
        return messages
    listed = "tools (one call per message):\n" + "\n".join(f"- {t.prompt}" for t in theirs)
    if messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n{listed}"}, *messages[1:]]
    return [{"role": "system", "content": listed}, *messages]


def client_call(call: dict | None, tools) -> dict | None:
    """A call as the client gets it: for one of its own tools, the values as its JSON schema
    types them (5, 2.5, true: agent/samplers/foreign_tools.call_values)."""
    tool = next((t for t in tools if call and t.name == call["name"] and t.name not in TOOLS), None)
    if tool is None:
        return call
    values, _ = call_values(tool, call["args"])
    return {"name": call["name"], "args": values if values is not None else call["args"]}


def host_name(value: str) -> str | None:
    """The name in a Host header (`name`, `name:port`, `[v6]:port`), lowercased; None when the
    value is anything else (a user part, a path, spaces)."""
    m = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::\d{1,5})?", value)
    return m and m.group(1).strip("[]").rstrip(".").lower()


class HTTPServer(ThreadingHTTPServer):
    """The listening socket, at most `max_connections` connection threads, and a reaper thread
    that shuts a connection down when its request has not arrived in full `read_timeout` seconds
    after it began (a socket timeout alone would let a client drip a byte at a time forever)."""
    request_queue_size = 128  # a burst of connections waits to be accepted (and refused)

    def __init__(self, address, handler, *, max_connections: int = 32, read_timeout: float = 10.0,
                 allow_hosts=()):
        self.closed = threading.Event()  # before the bind: a failed bind calls server_close
        super().__init__(address, handler)
        self.read_timeout, self.max_connections = read_timeout, max_connections
        self.slots = threading.BoundedSemaphore(max_connections)
        bound = self.server_address[0]
        names = {*LOOPBACK, *(host_name(h) or h.lower() for h in allow_hosts)}
        self.names = names | ({bound} if bound not in ("0.0.0.0", "::") else set())
        self.pending, self.pending_lock = {}, threading.Lock()  # socket -> deadline
        threading.Thread(target=self._reap, daemon=True, name="serve-reaper").start()

    def origin_allowed(self, origin: str) -> bool:
        """A page on one of this server's names (`null`, another site or a bad URL: no)."""
        try:
            u = urlsplit(origin)
            return u.scheme in ("http", "https") and u.hostname in self.names
        except ValueError:
            return False

    # ---- the connection cap --------------------------------------------------------------------
    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            return self._busy(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def _busy(self, sock) -> None:
        body = error_body(f"the server is at its cap of {self.max_connections} connections; "
                          "retry shortly", "server_error", code="server_busy")
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
        try:
            sock.settimeout(1.0)
            sock.sendall(head.encode() + body)
        except OSError:
            pass
        self.shutdown_request(sock)

    # ---- the read deadline ---------------------------------------------------------------------
    def watch(self, sock) -> None:
        with self.pending_lock:
            self.pending[sock] = time.monotonic() + self.read_timeout

    def in_time(self, sock) -> bool:
        """Whether this request is still being read within its deadline."""
        with self.pending_lock:
            return sock in self.pending

    def unwatch(self, sock) -> bool:
        """The request has arrived: True when it did so before the reaper cut it."""
        with self.pending_lock:
            return self.pending.pop(sock, None) is not None

    def _reap(self) -> None:
        while not self.closed.wait(min(1.0, self.read_timeout / 4)):
            now = time.monotonic()
            with self.pending_lock:
                late = [s for s, t in self.pending.items() if t <= now]
                for s in late:
                    del self.pending[s]
            for s in late:
                try:
                    s.shutdown(socket.SHUT_RDWR)  # the handler's read returns; it ends the connection
                except OSError:
                    pass

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], OSError):  # a client gone or cut: nothing to report
            super().handle_error(request, client_address)

    def server_close(self):
        self.closed.set()
        super().server_close()


def make_server(server: Server, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None,
                allow_hosts=(), max_connections: int = 32, read_timeout: float = 10.0) -> HTTPServer:
    """The HTTP server for `server` (token None: no key asked for); serve_forever() runs it."""
    return HTTPServer((host, port), make_handler(server, token), max_connections=max_connections,
                      read_timeout=read_timeout, allow_hosts=allow_hosts)


def make_handler(server: Server, token: str | None = None):
    """The request handler; it needs the HTTPServer above (its names, deadline and cap)."""
    want = None if token is None else token.encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the client sees every error in its reply
            pass

        def setup(self):
            self.timeout = self.server.read_timeout  # per read and per write
            super().setup()

        def handle_one_request(self):
            self.server.watch(self.connection)  # the next request must arrive in time
            try:
                super().handle_one_request()
            finally:
                self.server.unwatch(self.connection)

        def _json(self, code: int, obj: dict) -> None:
            self._send(code, json.dumps(obj).encode())

        def _send(self, code: int, data: bytes, close: bool = False, **headers) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            if close:  # the body, if any, was not read: the connection cannot go on
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str, param: str | None = None,
                   code_name: str | None = None) -> None:
            self._send(code, error_body(message, param=param, code=code_name))

        def _refuse(self, code: int, message: str, kind: str = "invalid_request_error",
                    code_name: str | None = None, **headers) -> None:
            self._send(code, error_body(message, kind, code=code_name), close=True, **headers)

        def _admit(self) -> bool:
            """Host, Origin, then the key; a refusal is sent and the connection closed."""
            host = self.headers.get("Host")
            if host is None or host_name(host) not in self.server.names:
                self._refuse(403, f"Host {host!r} is not this server's name (localhost, 127.0.0.1, "
                             "[::1] or its address); to serve another name, start it with "
                             "--allow-host NAME", "permission_error", "host_not_allowed")
                return False
            origin = self.headers.get("Origin")
            if origin is not None and not self.server.origin_allowed(origin):
                self._refuse(403, f"requests from the web page at {origin!r} are not allowed",
                             "permission_error", "origin_not_allowed")
                return False
            scheme, _, got = (self.headers.get("Authorization") or "").partition(" ")
            if want is not None and not (scheme.lower() == "bearer" and hmac.compare_digest(
                    got.strip().encode("latin-1", "replace"), want)):
                self._refuse(401, "missing or wrong API key: send `Authorization: Bearer KEY` with "
                             "the key `nanocode serve` printed at start", code_name="invalid_api_key",
                             WWW_Authenticate="Bearer")
                return False
            return True

        def _body(self) -> bytes | None:
            """The request body, or None when a refusal was sent or the read was cut."""
            if "Transfer-Encoding" in self.headers:
                self._refuse(411, "send the body with a Content-Length, not Transfer-Encoding")
                return None
            lengths = self.headers.get_all("Content-Length") or ["0"]
            if len(set(lengths)) != 1 or not re.fullmatch(r"\d{1,12}", lengths[0].strip()):
                self._refuse(400, f"bad Content-Length {', '.join(lengths)!r}: send the body's "
                             "size in bytes, once")
                return None
            n = int(lengths[0])
            if n > MAX_BODY:
                self._refuse(413, f"the body is {n} bytes; the most this server reads is {MAX_BODY}")
                return None
            data = self.rfile.read(n)
            if not self.server.unwatch(self.connection) or len(data) < n:
                self.close_connection = True  # cut at the read deadline, or the client went away
                return None
            return data

        def _wrong_method(self) -> bool:
            """A route asked with the other method: a 405 naming the one it takes (Allow)."""
            path = urlsplit(self.path).path.rstrip("/")
            method = ROUTES.get(path)
            if method is None or method == self.command:
                return False
            self._refuse(405, f"{path} takes {method}, not {self.command}", Allow=method)
            return True

        def do_GET(self):
            if not self.server.unwatch(self.connection) or not self._admit():
                self.close_connection = True
                return
            if self._wrong_method():
                return
            if self.path.rstrip("/") == "/v1/models":
                self._json(200, {"object": "list", "data": [
                    {"id": server.name, "object": "model", "owned_by": "nanocode",
                     "context_length": server.engine.max_len}]})
            else:
                self._error(404, f"no route {self.path}; try GET /v1/models or POST /v1/chat/completions")

        def do_POST(self):
            if not self.server.in_time(self.connection) or not self._admit():
                self.close_connection = True
                return
            if self._wrong_method():
                return
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._refuse(404, f"no route {self.path}; POST /v1/chat/completions")
            data = self._body()
            if data is None:
                return
            try:
                req = parse_json(data or b"{}")
                if not isinstance(req, dict):
                    raise RequestError("the body must be a JSON object")
                job = server.prepare(req)  # a bad request is a 400, also before a stream starts
            except RequestError as e:
                return self._error(e.status, str(e), e.param, e.code)
            head = reply_head(server.name)
            if req.get("stream"):
                return self._stream(job, head)
            self._json(200, completion(head, server.complete(job)))

        def _stream(self, job, head):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

            def send(data: bytes):
                self.wfile.write(data)
                self.wfile.flush()
            send(first_chunk(head))
            res = server.complete(job, on_text=lambda piece: send(text_chunk(head, piece)))
            if res["tool_call"]:
                send(call_chunk(head, res["tool_call"]))
            send(last_chunk(head, res["finish_reason"], res["usage"]))
            send(DONE_EVENT)
    return Handler


TOKEN_ENV = "NANOCODE_SERVE_TOKEN"
CANNOT_LISTEN = 7  # the exit status when the address cannot be listened on (a port in use)


def listen_error(e: OSError, host: str, port: int) -> str:
    """One line saying why the server cannot listen on host:port, and what to do."""
    if e.errno == errno.EADDRINUSE:
        return f"port {port} is in use; pass --port N or stop the other server"
    if e.errno == errno.EACCES:
        return f"port {port} needs privileges this user lacks; pass --port N (above 1023)"
    return f"cannot listen on {host}:{port} ({e.strerror or e}); pass another --host or --port"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nanocode serve", description="The model behind an "
                                "OpenAI-compatible HTTP API (/v1/chat/completions, /v1/models).",
                                epilog="Exit status: 0 stopped with Ctrl-C, 2 bad usage or no such "
                                f"model, {CANNOT_LISTEN} cannot listen (the port is in use).")
    p.add_argument("--model", metavar="PATH|TAG", help="checkpoint directory or run tag "
                   "(default: the model embedded in the package)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    auth = p.add_mutually_exclusive_group()
    auth.add_argument("--token", metavar="KEY", help=f"the API key clients must send (default: "
                      f"${TOKEN_ENV}, else a fresh one, printed at start; the variable keeps it "
                      "out of the process list)")
    auth.add_argument("--no-auth", action="store_true", help="ask for no key: anything that can "
                      "reach the port can use the model")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also answer requests addressed to NAME (Host and Origin), e.g. the "
                   "machine's name when --host is not loopback; repeatable")
    p.add_argument("--max-connections", type=int, default=32, metavar="N",
                   help="connections served at once; more get a 503 (default 32)")
    p.add_argument("--read-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="time for a request to arrive in full, headers and body, from the "
                   "first byte awaited (a keep-alive's idle time included; default 10)")
    return p


def server_token(args) -> str | None:
    """The key clients must send: --token, else $NANOCODE_SERVE_TOKEN, else a fresh one; None
    with --no-auth. An empty key is a ValueError saying what to do."""
    if args.no_auth:
        return None
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    if token is None:
        return secrets.token_urlsafe(32)
    if not re.fullmatch(r"[\x21-\x7e]+", token):
        raise ValueError(f"the API key (--token or ${TOKEN_ENV}) must be printable ASCII without "
                         "spaces, and not empty; leave both unset for a fresh one, or pass --no-auth")
    return token


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_connections < 1 or not args.read_timeout > 0:
        parser.error("--max-connections and --read-timeout must be positive")
    try:
        token = server_token(args)
    except ValueError as e:
        parser.error(str(e))
    try:
        ckpt, tag = resolve_model(args.model)
        enable_compilation_cache()
        engine = load_engine(ckpt)
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    try:
        httpd = make_server(Server(engine, tag), args.host, args.port, token=token,
                            allow_hosts=args.allow_host, max_connections=args.max_connections,
                            read_timeout=args.read_timeout)
    except OSError as e:
        print(f"error: {listen_error(e, args.host, args.port)}", file=sys.stderr)
        return CANNOT_LISTEN
    host, port = httpd.server_address[:2]
    print(f"nanocode serve: model {tag} ({ckpt}) on http://{host}:{port}/v1", flush=True)
    if token is None:
        print("nanocode serve: no API key (--no-auth): anything that can reach the port can use "
              "the model", flush=True)
    else:
        print(f"nanocode serve: API key {token} (clients send `Authorization: Bearer KEY`: "
              "nanocode --base-url reads $NANOCODE_API_KEY, OpenAI clients --api-key or "
              "$OPENAI_API_KEY)", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0
