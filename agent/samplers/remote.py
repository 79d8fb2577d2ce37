"""Any OpenAI-compatible server as the agent's model (`nanocode --base-url URL`): a capable local
server (vLLM, llama.cpp, Ollama, LM Studio, `nanocode serve`) runs under nanocode's permissions,
sandbox, undo and session format, so its sessions can be distilled (`train export-sessions`).

RemoteSampler keeps agent/samplers/sampler.Sampler. A reply is one streamed
POST /chat/completions: the conversation as OpenAI messages (our assistant message with a
tool_call -> `tool_calls` with an id, its tool_result -> a `tool` message answering that id), the
mode's tools as function schemas (protocol.TOOLS: arguments, which are required, integers; an MCP
tool's kinds as its JSON schema: agent/samplers/foreign_tools.py), one
call per reply (`parallel_tool_calls: false`; a server that sends more gets the first run and a
status note). Content deltas stream as Text events; the call's JSON arguments are checked into
the conversation schema (ints for offset/limit/-A/-B, strings otherwise, wire order) so the
saved session renders as training data; arguments that are not JSON or of the wrong type are an
`error:` result the turn driver resamples, as it does our engine's malformed calls.

Context. The server's tokenizer is not ours, so sizes are estimated (`count`: UTF-8 bytes / 3,
on the high side for code): tool results and the memory file get their shares of `max_len`
(the server's context_length / max_model_len from /v1/models, else --context, else 8,192); a
conversation estimated over max_len - reserve has old outputs, then old turns, dropped before it
is sent (agent/loop/context.drop_oldest), and a 400 that names the context drops one more and resends.
No grammar mask here: a remote model's calls are checked after the fact (`nanocode serve` masks
on its side), and so are loops (agent/masks/loop_guard.py's detector on the streamed text): prose that
completes a loop is cut there (the text up to it kept, the reply's stop "loop"), and a call whose
argument value holds one is malformed (an `error:` result, resampled). An unreachable or failing
server ends the turn with stop_reason "model_error".

Key (a Bearer token) goes only where it was given for. An explicit api_key, else
$NANOCODE_API_KEY, goes to the --base-url server; $OPENAI_API_KEY goes only when the base URL is
https://api.openai.com, so a key made for OpenAI never reaches whatever server a URL names. No
redirect is followed (a 3xx is an error naming its Location): the key would go with it. A proxy
named by $http_proxy sees an http:// request and its key; use https past loopback.

Bounded replies: a hostile or broken server cannot grow the agent or hold it. A request (its
/models listing too) has a total deadline (600 s; a timer shuts its socket, so bytes dripped
into the headers or SSE comments like `: ping` do not extend it), reads at most 8 MiB of reply
and 1 MiB per line, and each read waits at most `timeout` for the next bytes. Past any of them
the reply is dropped with a SamplerError (the turn's "model_error", exit 6 headless).
"""
from __future__ import annotations

import contextlib
import copy
import http.client
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from urllib.parse import urlsplit

from agent.loop.context import ContextFull, Dropped, drop_oldest, fit
from agent.masks.loop_guard import PROSE, Tail
from agent.samplers.openai_wire import DONE, StreamedReply, StreamError, read_event, schema_args, to_openai, tool_schema
from agent.samplers.sampler import Reply, SamplerError
from agent.settings import SamplerSettings
from nanocode.protocol import Status, Text

DEFAULT_CONTEXT = 8192
BYTES_PER_TOKEN = 3  # the size estimate: a little more tokens than most tokenizers make
CONTEXT_RETRIES = 8  # 400s naming the context, each answered by dropping one more thing
DEADLINE = 600.0  # seconds for one request, reply included
MAX_REPLY = 8 << 20  # bytes of one reply
SERVER_SEEDS = 2**31  # a server's seed is a 32-bit int (`nanocode serve` refuses more): sent mod this
MAX_LINE = 1 << 20  # bytes of one line of it
OPENAI = ("https", "api.openai.com", 443)


def key_for(base_url: str) -> str | None:
    """The key for this base URL when none is given: $NANOCODE_API_KEY, else $OPENAI_API_KEY for
    https://api.openai.com only."""
    key = os.environ.get("NANOCODE_API_KEY")
    if key:
        return key
    try:
        u = urlsplit(base_url)
        origin = (u.scheme, u.hostname, u.port or {"http": 80, "https": 443}.get(u.scheme))
    except ValueError:
        return None
    return os.environ.get("OPENAI_API_KEY") if origin == OPENAI else None


class Deadline:
    """One request's total time: when it passes, a timer shuts the request's socket down, so a
    read in progress returns at once however slowly the server drips its bytes."""

    def __init__(self, seconds: float):
        self.sock, self.passed, self.lock = None, False, threading.Lock()
        self.timer = threading.Timer(seconds, self._end)
        self.timer.daemon = True
        self.timer.start()

    def attach(self, sock) -> None:
        with self.lock:
            self.sock = sock
        if self.passed:
            self._end()

    def _end(self) -> None:
        with self.lock:
            self.passed = True
            sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Watched:
    """urllib's HTTP(S) handler, its connections handing their socket to the request's Deadline:
    the TCP socket as soon as it exists (so a TLS handshake dripped byte by byte is cut too),
    then the TLS socket that replaces it."""

    def do_open(self, http_class, req, **kw):
        def connection(host, **args):
            conn = http_class(host, **args)
            create, connect = conn._create_connection, conn.connect

            def created(*a, **k):
                sock = create(*a, **k)
                req.deadline.attach(sock)
                return sock

            def connected():
                connect()
                req.deadline.attach(conn.sock)
            conn._create_connection, conn.connect = created, connected
            return conn
        return super().do_open(connection, req, **kw)


class _Http(_Watched, urllib.request.HTTPHandler):
    pass


class _Https(_Watched, urllib.request.HTTPSHandler):
    pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # the 3xx comes back as an HTTPError, answered in RemoteSampler._open


OPENER = urllib.request.build_opener(_Http, _Https, _NoRedirect)


def count_tokens(text: str) -> int:
    return len(text.encode("utf-8", "replace")) // BYTES_PER_TOKEN + 1


def base_url_error(url: str) -> str | None:
    """Why `url` cannot be a --base-url (not http(s), no host), or None."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return (f"--base-url {url!r} is not an http(s) URL with a host; give the API root, e.g. "
                "http://127.0.0.1:8000/v1")
    return None


class RemoteSampler:
    """base_url: the API root (e.g. http://127.0.0.1:8000/v1). model: the server's model id (None:
    the first /v1/models lists). settings: its temperature, top_p, seed, max_tokens, reserve and
    retry_temperature apply (the rest is our engine's). context: max_len when the server does not
    say it. timeout: seconds to wait for the server's next bytes; deadline: seconds for a whole
    request; max_reply: bytes of one reply. api_key: None reads the environment (above)."""

    def __init__(self, base_url: str, model: str | None = None, settings: SamplerSettings = SamplerSettings(),
                 *, context: int | None = None, timeout: float = 300.0, deadline: float = DEADLINE,
                 max_reply: int = MAX_REPLY, api_key: str | None = None):
        if (bad := base_url_error(base_url)) is not None:
            raise SamplerError(bad)
        self.base_url, self.settings = base_url.rstrip("/"), settings
        self.timeout, self.deadline, self.max_reply = timeout, deadline, max_reply
        self.api_key = api_key if api_key is not None else key_for(self.base_url)
        listing = self._get("/models")
        models = [m for m in listing.get("data") or [] if isinstance(m, dict) and m.get("id")]
        if model is None and not models:
            raise SamplerError(f"{self.base_url}/models lists no model; name one with --model")
        found = next((m for m in models if m["id"] == model), None) if model else models[0]
        if found is None and models:
            raise SamplerError(f"the server at {self.base_url} has no model {model!r} (it has: "
                               f"{', '.join(m['id'] for m in models[:10])})")
        self.model = model or found["id"]
        known = (found or {}).get("context_length") or (found or {}).get("max_model_len")
        self.max_len = int(known or context or DEFAULT_CONTEXT)
        self.reserve = settings.reserve_for(self.max_len)
        self.reset()
        self.count = count_tokens

    def fork(self, root, settings: SamplerSettings) -> "RemoteSampler":
        """The same server and model (not asked again) with `settings`, for a new conversation."""
        twin = copy.copy(self)
        twin.settings, twin.reserve = settings, settings.reserve_for(self.max_len)
        twin.reset()
        return twin

    # ---- the interface: nothing is cached here, so most of it is trivial -------------------------
    def reset(self) -> None:
        self.n_replies = 0  # replies asked for in this conversation (the seed offset)

    def invalidate(self) -> None:
        pass

    def tree_changed(self) -> None:
        pass

    def context_used(self, messages) -> int:
        return sum(self.count(m["content"]) + 4 for m in messages)

    def describe(self) -> str:
        return f"{self.model} at {self.base_url}, context {self.max_len} tokens (estimated sizes)"

    def sync(self, conv, emit, usage) -> None:
        self._fit(conv, emit, 0)

    def reply(self, conv, tools, emit, cancel, usage, retry: bool = False) -> Reply:
        self._fit(conv, emit, self.reserve)
        st = self.settings
        body = {"model": self.model, "stream": True, "max_tokens": st.max_tokens,
                "temperature": st.temperature_for(retry), "top_p": st.top_p,
                "seed": (st.seed + self.n_replies) % SERVER_SEEDS,
                "stream_options": {"include_usage": True}}
        if tools:
            body.update(tools=[tool_schema(t) for t in tools], parallel_tool_calls=False)
        self.n_replies += 1
        for _ in range(CONTEXT_RETRIES):
            try:
                return self._stream({**body, "messages": to_openai(conv.messages)}, conv, emit,
                                    cancel, usage, {t.name: t for t in tools if not isinstance(t, str)})
            except ContextFull:  # the server counted more than we estimated: drop one more
                what = drop_oldest(conv, self.count)
                if what is None:
                    raise
                dropped = Dropped()
                dropped.add(what)
                dropped.say(emit)
        raise ContextFull(f"the server at {self.base_url} still finds the request too long")

    # ---- HTTP ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _request(self, path: str, body: dict | None = None):
        """The open response and its Deadline; whatever breaks once the deadline has passed is
        reported as the deadline."""
        deadline = Deadline(self.deadline)
        try:
            with self._open(path, body, deadline) as r:
                yield r, deadline
        except (SamplerError, OSError, http.client.HTTPException):
            if deadline.passed:
                raise SamplerError(self._late()) from None
            raise
        finally:
            deadline.timer.cancel()

    def _late(self) -> str:
        return (f"the model server at {self.base_url} did not finish its reply within "
                f"{self.deadline:g} s; nanocode stopped waiting")

    def _open(self, path: str, body: dict | None, deadline: Deadline):
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.base_url + path, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
        req.deadline = deadline
        try:
            return OPENER.open(req, timeout=min(self.timeout, self.deadline))
        except urllib.error.HTTPError as e:
            if 300 <= e.code < 400:
                raise SamplerError(f"the model server answered {e.code}, a redirect to "
                                   f"{e.headers.get('Location')!r}: nanocode follows no redirect "
                                   "(the key would go with it); use the URL it names as --base-url "
                                   "if you trust it") from None
            text = e.read(64 << 10).decode("utf-8", "replace")
            try:
                error = json.loads(text).get("error") or {}
                text = error.get("message", text) if isinstance(error, dict) else str(error)
            except (json.JSONDecodeError, AttributeError):
                pass
            text = " ".join(str(text).split())[:300]
            if e.code == 400 and "context" in text.lower():
                raise ContextFull(f"the server says: {text}") from None
            if e.code == 404 and path == "/models" and not self.base_url.endswith("/v1"):
                text += f" (the API root usually ends in /v1: --base-url {self.base_url}/v1 ?)"
            if e.code == 401:
                text += (" (nanocode sends $NANOCODE_API_KEY as the key; $OPENAI_API_KEY only to "
                         "https://api.openai.com)")
            raise SamplerError(f"the model server answered {e.code}: {text}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            if deadline.passed:
                raise SamplerError(self._late()) from None
            reason = getattr(e, "reason", e)
            raise SamplerError(f"cannot reach the model server at {self.base_url}: {reason}") from None

    def _get(self, path: str) -> dict:
        with self._request(path) as (r, deadline):
            data = r.read(self.max_reply + 1)
            if deadline.passed:
                raise SamplerError(self._late())
            if len(data) > self.max_reply:
                raise SamplerError(f"{self.base_url}{path} sent more than {self.max_reply} bytes; "
                                   "nanocode stopped reading it")
            try:
                return json.loads(data)
            except (json.JSONDecodeError, RecursionError):
                raise SamplerError(f"{self.base_url}{path} did not answer JSON: is it an "
                                   "OpenAI-compatible API root (…/v1)?") from None

    def _stream(self, body: dict, conv, emit, cancel, usage, tools: dict) -> Reply:
        """POST the request and read its server-sent events into one Reply; prose that completes
        a loop ends it there (stop "loop"). `tools`: name -> protocol.Tool of those offered (an
        MCP tool's values are read by its kinds)."""
        t0 = time.perf_counter()
        text, stop, got = [], "stop", StreamedReply()
        tail = Tail(PROSE)  # the prose so far, for loops (prose's rule: three times in a row)
        with self._request("/chat/completions", body) as (r, deadline):
            try:
                for chunk in self._chunks(r, deadline):
                    if cancel.is_set():
                        stop = "cancelled"
                        break
                    piece = got.feed(chunk).encode("utf-8", "replace")
                    cut = tail.push(piece) if piece else None
                    if cut is not None:  # kept: the text before the byte completing the loop
                        piece, stop = piece[:cut], "loop"
                    if piece := piece.decode("utf-8", "ignore"):
                        text.append(piece)
                        emit(Text(piece))
                    if stop == "loop":
                        break
            except StreamError as e:
                raise SamplerError(f"the model server {e}") from None
        usage["generate_s"] += time.perf_counter() - t0
        if got.usage:
            usage["prompt_tokens"] += got.usage.get("prompt_tokens") or 0
            usage["completion_tokens"] += got.usage.get("completion_tokens") or 0
        if stop == "stop" and got.finish == "length":
            stop = "length"
        msg = {"role": "assistant", "content": "".join(text)}
        call, error, calls = None, None, got.calls
        if calls and stop in ("stop", "length"):
            if len(calls) > 1:
                emit(Status(f"the model made {len(calls)} calls in one reply; nanocode runs one "
                            "per reply: the first"))
            first = calls[min(calls)]
            name = first["name"]
            args, error = schema_args(name, first["arguments"], tools.get(name))
            if error is None:
                call = {"name": name, "args": args}
                msg["tool_call"] = call
                stop = "stop"
        conv.messages.append(msg)
        return Reply(msg, call, error, stop)

    def _chunks(self, response, deadline: Deadline):
        """The JSON objects of a server-sent event stream (openai_wire.read_event), up to
        `data: [DONE]`; a connection that drops or stalls past the timeout is a SamplerError."""
        try:
            for line in self._lines(response, deadline):
                got = read_event(line)
                if got == DONE:
                    return
                if got is not None:
                    yield got
        except (OSError, http.client.HTTPException) as e:
            raise SamplerError(f"the model server at {self.base_url} broke off its reply: "
                               f"{type(e).__name__}: {e}") from None
        # an OpenAI-style stream always ends with `data: [DONE]`: without it the reply was cut
        raise SamplerError(f"the model server at {self.base_url} broke off its reply: the connection "
                           "closed before `data: [DONE]`")

    def _lines(self, response, deadline: Deadline):
        """The reply's lines (without their newline), at most MAX_LINE bytes each and max_reply
        bytes in all; an end that the deadline caused is an error, not a short reply."""
        buf, total = bytearray(), 0
        while data := response.read1(64 << 10):
            total += len(data)
            if total > self.max_reply:
                raise SamplerError(f"the model server's reply passed {self.max_reply} bytes; "
                                   "nanocode stopped reading it")
            seen = len(buf)
            buf += data
            end = buf.find(b"\n", seen)
            while end >= 0:
                yield bytes(buf[:end])
                del buf[:end + 1]
                end = buf.find(b"\n")
            if len(buf) > MAX_LINE:
                raise SamplerError(f"the model server sent a line longer than {MAX_LINE} bytes; "
                                   "nanocode stopped reading it")
        if deadline.passed:
            raise SamplerError(self._late())
        if buf:
            yield bytes(buf)

    def _fit(self, conv, emit, extra: int) -> None:
        """Drop old outputs, then old turns, while the estimate exceeds max_len - extra; past
        that the server decides (it may count fewer tokens than the estimate)."""
        fit(conv, self.count, lambda messages: self.context_used(messages) + extra, self.max_len,
            emit, strict=False)
