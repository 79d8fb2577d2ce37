"""The HTTP front of `nanocode serve` (agent/serve.py): routes, limits and who may ask.

Containment: the port is reachable by every local user and, through a browser, by every web
page, so before any model work a request must name the server in its Host and Origin (a 403:
DNS rebinding, cross-site pages), carry the key as `Authorization: Bearer KEY` (a 401; compared in
constant time), and arrive in full within the read timeout with a body of at most MAX_BODY (413,
411, 400). At most `max_connections` are served at once, one thread each; the next get a 503 and
are closed, so a flood of slow clients cannot grow the server's threads. A route asked with the
other method is a 405 naming the one it takes (ROUTES, an Allow header).
"""
from __future__ import annotations

import hmac
import json
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from agent.samplers.openai_wire import (
    DONE_EVENT, RequestError, call_chunk, completion, error_body, first_chunk, last_chunk, parse_json, reply_head,
    text_chunk)

MAX_BODY = 4 << 20  # bytes of one request body
ROUTES = {"/v1/models": "GET", "/v1/chat/completions": "POST"}  # another method: a 405
LOOPBACK = ("localhost", "127.0.0.1", "::1")


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

    def __init__(self, address, model, token: str | None = None, *, max_connections: int = 32,
                 read_timeout: float = 10.0, allow_hosts=()):
        self.closed = threading.Event()  # before the bind: a failed bind calls server_close
        super().__init__(address, Handler)
        self.model = model  # agent/serve.Server: what the routes ask
        self.want = None if token is None else token.encode()  # the key, or None: none asked for
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


def make_server(server, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None,
                allow_hosts=(), max_connections: int = 32, read_timeout: float = 10.0) -> HTTPServer:
    """The HTTP server for `server` (an agent/serve.Server; token None: no key asked for);
    serve_forever() runs it."""
    return HTTPServer((host, port), server, token, max_connections=max_connections,
                      read_timeout=read_timeout, allow_hosts=allow_hosts)



class Handler(BaseHTTPRequestHandler):
    """One connection's requests: the checks of the module docstring, then the routes, answered
    by `self.server.model` (agent/serve.Server)."""
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
        want = self.server.want
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
                {"id": self.server.model.name, "object": "model", "owned_by": "nanocode",
                 "context_length": self.server.model.engine.max_len}]})
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
            job = self.server.model.prepare(req)  # a bad request is a 400, also before a stream starts
        except RequestError as e:
            return self._error(e.status, str(e), e.param, e.code)
        head = reply_head(self.server.model.name)
        if req.get("stream"):
            return self._stream(job, head)
        self._json(200, completion(head, self.server.model.complete(job)))

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
        res = self.server.model.complete(job, on_text=lambda piece: send(text_chunk(head, piece)))
        if res["tool_call"]:
            send(call_chunk(head, res["tool_call"]))
        send(last_chunk(head, res["finish_reason"], res["usage"]))
        send(DONE_EVENT)
