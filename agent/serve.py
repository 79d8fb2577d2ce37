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

Containment (agent/serve_http.py): a request must name the server in its Host and Origin, carry
the key as `Authorization: Bearer KEY` (printed at start, or --token / $NANOCODE_SERVE_TOKEN, or
--no-auth) and arrive in full within --read-timeout; at most --max-connections are served at once.
Not contained: the model's replies are not checked here (the client runs the calls), and a
client with the key can keep the engine busy.

Exit status: 0 stopped (Ctrl-C), 2 bad usage or no such model, CANNOT_LISTEN (7) when the address
cannot be listened on (a port in use: one line says so and how to choose another).
"""
from __future__ import annotations

import argparse
import errno
import os
import re
import secrets
import sys
import threading
import time

import numpy as np

from agent.masks.grammar import CONTENT, Grammar
from agent.masks.loop_guard import LoopGuard
from agent.samplers.foreign_tools import call_values
from agent.serve_http import make_server
from agent.samplers.openai_wire import RequestError, StopText, parse_request
from nanocode.common import ModelError, enable_compilation_cache, resolve_model
from nanocode.load import load_engine
from nanocode.protocol import TOOLS

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
        when the budget or the context cut the reply (a call it cut is dropped, never sent in
        part: the prose before it is the reply, "" for a forced call), else "stop" (a malformed
        call included: its prose is the reply). With job["stop"], the prose ends before the first stop string
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
