"""`nanocode serve`: the engine behind an OpenAI-compatible HTTP API, on loopback by default.

    nanocode serve [--model PATH|TAG] [--host 127.0.0.1] [--port 8000]
    curl localhost:8000/v1/chat/completions -d '{"messages": [{"role": "user", "content": "hi"}]}'

Endpoints: GET /v1/models (with the model's context_length); POST /v1/chat/completions with messages (system, user, assistant
with `tool_calls`, tool), `tools` (function tools; only nanocode's own, Read/Edit/Grep/Bash,
can be called: the grammar mask of agent/grammar.py offers just those the request lists, no call
at all when it lists none; agent/loop_guard.py keeps a reply from extending a loop, ungrounded:
the server has no project), temperature, top_p, max_tokens (or max_completion_tokens), seed and
`stream` (server-sent events: a role chunk, content deltas, a tool-call chunk, a finish chunk
with usage, then `data: [DONE]`). The reply is one message: prose, and at most one tool call (the
model makes one call per reply), finish_reason "tool_calls", "stop" or "length".

Conversion: an assistant message with several tool_calls becomes one of ours per call, each
followed by the `tool` message answering it (by tool_call_id); content given as a list of parts
keeps its text parts. A request the schema cannot hold (a tool message with no call before it,
an unknown role) is a 400 with a message saying which message and why; one too long for the
context is a 400 too. Requests run one at a time (one engine, batch 1).
"""
from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from nanocode.protocol import TOOLS


class RequestError(ValueError):
    """A request the server cannot answer; the message goes back in the 400 body."""


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def to_conversation(messages: list) -> list[dict]:
    """OpenAI chat messages -> nanocode's conversation schema (see the module docstring)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list")
    out, waiting = [], {}  # tool_call_id -> our assistant message waiting for its result
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("system", "developer"):
            if out:
                raise RequestError(f"message {i}: a system message must come first")
            out.append({"role": "system", "content": _text(m.get("content"))})
        elif role == "user":
            out.append({"role": "user", "content": _text(m.get("content"))})
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            text = _text(m.get("content"))
            if not calls:
                out.append({"role": "assistant", "content": text})
            for k, c in enumerate(calls):
                fn = c.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except json.JSONDecodeError as e:
                    raise RequestError(f"message {i}: tool call {k} arguments are not JSON: {e}")
                waiting[c.get("id")] = len(out)
                out.append({"role": "assistant", "content": text if k == 0 else "",
                            "tool_call": {"name": fn.get("name"), "args": args}})
                out.append(None)  # its result's slot
        elif role == "tool":
            slot = waiting.pop(m.get("tool_call_id"), None)
            if slot is None:
                raise RequestError(f"message {i}: a tool message answers no earlier tool call "
                                   "(check its tool_call_id)")
            out[slot + 1] = {"role": "tool_result", "content": _text(m.get("content"))}
        else:
            raise RequestError(f"message {i}: unknown role {role!r} (system, user, assistant, tool)")
    if any(m is None for m in out):
        raise RequestError("a tool call has no tool message with its result")
    return out


class Server:
    """The engine, its tokenizer and grammar, and one lock: what the handler calls."""

    def __init__(self, engine, model_name: str):
        from agent.grammar import Grammar
        self.engine, self.tok, self.name = engine, engine.tokenizer, model_name
        self.grammar = Grammar.shared(self.tok, engine.cfg.vocab_size)
        self.lock = threading.Lock()
        s = self.tok.special_ids
        self.a_start, self.a_end = s["<|assistant_start|>"], s["<|assistant_end|>"]
        self.call_start, self.call_end = s["<|tool_call_start|>"], s["<|tool_call_end|>"]

    def prepare(self, req: dict) -> dict:
        """Check a request and render it; a RequestError says what is wrong (a 400, also for a
        streamed request: it is raised before the stream starts)."""
        conv = to_conversation(req.get("messages"))
        names = [t.get("function", {}).get("name") for t in req.get("tools") or []
                 if isinstance(t, dict)]
        ids = self.tok.render_conversation({"messages": conv})[0] + [self.a_start]
        limit = req.get("max_completion_tokens") or req.get("max_tokens") or 1024
        if not isinstance(limit, int) or limit < 1:
            raise RequestError("max_tokens must be a positive integer")
        room = self.engine.max_len - len(ids) - 1
        if room < 1:
            raise RequestError(f"the conversation is {len(ids)} tokens: more than the model's "
                               f"context of {self.engine.max_len}; shorten it")
        return {"ids": ids, "tools": tuple(n for n in TOOLS if n in names),
                "max_tokens": min(limit, room), "temperature": float(req.get("temperature") or 0.0),
                "top_p": float(req.get("top_p") or 1.0), "seed": int(req.get("seed") or 0)}

    def complete(self, job: dict, on_text=None) -> dict:
        """One chat completion of a prepared request: {"content", "tool_call" or None,
        "finish_reason", "usage"}. on_text(piece) streams the prose as it is sampled."""
        import codecs
        ids = job["ids"]
        from agent.grammar import CONTENT
        from agent.loop_guard import LoopGuard
        state = self.grammar.state(tools=job["tools"])
        loops = LoopGuard.shared(self.grammar).reply()  # no reply extends a loop (agent/loop_guard.py)

        def allowed(out):
            m = state.allowed(out)
            return loops.mask(out, m, prose=state.phase == CONTENT)
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out, in_call = [], False
        with self.lock:
            t0 = time.perf_counter()
            decoder = self.engine.decoder()
            decoder.append(ids)
            for t in decoder.generate(max_tokens=job["max_tokens"], temperature=job["temperature"],
                                      top_p=job["top_p"], seed=job["seed"], allowed=allowed):
                out.append(t)
                in_call = in_call or t == self.call_start
                if on_text is not None and not in_call and not self.tok.is_special(t):
                    piece = dec.decode(self.tok.id_to_bytes(t))
                    if piece:
                        on_text(piece)
            seconds = time.perf_counter() - t0
        body = out[:-1] if out and out[-1] in (self.a_end, self.call_end) else out
        call, content = None, body
        if self.call_start in body:
            content = body[:body.index(self.call_start)]
            try:
                call = self.tok.parse_tool_call(out) if out[-1] == self.call_end else None
            except ValueError:
                call = None
        finish = "tool_calls" if call else "stop" if out and out[-1] in (self.a_end, self.call_end) \
            else "length"
        return {"content": self.tok.decode(content), "tool_call": call, "finish_reason": finish,
                "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out),
                          "total_tokens": len(ids) + len(out), "seconds": round(seconds, 3)}}


def openai_message(res: dict) -> dict:
    msg = {"role": "assistant", "content": res["content"]}
    if res["tool_call"]:
        msg["tool_calls"] = [openai_call(res["tool_call"])]
    return msg


def openai_call(call: dict) -> dict:
    return {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["args"])}}


def make_handler(server: Server):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the client sees every error in its reply
            pass

        def _json(self, code: int, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str) -> None:
            self._json(code, {"error": {"message": message, "type": "invalid_request_error"}})

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                self._json(200, {"object": "list", "data": [
                    {"id": server.name, "object": "model", "owned_by": "nanocode",
                     "context_length": server.engine.max_len}]})
            else:
                self._error(404, f"no route {self.path}; try /v1/models or /v1/chat/completions")

        def do_POST(self):
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._error(404, f"no route {self.path}; POST /v1/chat/completions")
            try:
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(n) or b"{}")
                if not isinstance(req, dict):
                    raise RequestError("the body must be a JSON object")
            except (ValueError, json.JSONDecodeError) as e:
                return self._error(400, f"bad request body: {e}")
            head = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "created": int(time.time()),
                    "model": server.name}
            if req.get("stream"):
                return self._stream(req, head)
            try:
                res = server.complete(server.prepare(req))
            except RequestError as e:
                return self._error(400, str(e))
            self._json(200, {**head, "object": "chat.completion", "usage": res["usage"],
                             "choices": [{"index": 0, "message": openai_message(res),
                                          "finish_reason": res["finish_reason"]}]})

        def _stream(self, req, head):
            try:
                job = server.prepare(req)  # a bad request is a 400, not a broken stream
            except RequestError as e:
                return self._error(400, str(e))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

            def send(delta, finish=None, **extra):
                chunk = {**head, "object": "chat.completion.chunk", **extra,
                         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            send({"role": "assistant", "content": ""})
            res = server.complete(job, on_text=lambda piece: send({"content": piece}))
            if res["tool_call"]:
                send({"tool_calls": [{"index": 0, **openai_call(res["tool_call"])}]})
            send({}, res["finish_reason"], usage=res["usage"])
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
    return Handler


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nanocode serve", description="The model behind an "
                                "OpenAI-compatible HTTP API (/v1/chat/completions, /v1/models).")
    p.add_argument("--model", metavar="PATH|TAG", help="checkpoint directory or run tag "
                   "(default: the model embedded in the package)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    return p


def main(argv: list[str]) -> int:
    import sys

    from agent.model import ModelError, load_engine, resolve_model
    args = build_parser().parse_args(argv)
    try:
        ckpt, tag = resolve_model(args.model)
        from nanocode.common import enable_compilation_cache
        enable_compilation_cache()
        engine = load_engine(ckpt)
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    httpd = ThreadingHTTPServer((args.host, args.port), make_handler(Server(engine, tag)))
    host, port = httpd.server_address[:2]
    print(f"nanocode serve: model {tag} ({ckpt}) on http://{host}:{port}/v1", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0
