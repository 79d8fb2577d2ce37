"""The OpenAI chat-completions wire format on our side, both ways.

Requests (`nanocode serve`): parse_request checks a request's parameters (a RequestError names
the parameter; the server answers it in OpenAI's error shape, error_body: a 400, or a 404 for a
model it does not serve); parse_json caps the nesting of JSON at MAX_DEPTH, checked without
recursion. Tools are ours or the client's (foreign_tools; their calls are handed back). Refused,
never ignored: n above 1, a tool the grammar cannot write, a tool_choice naming one not listed,
and the parameters of UNSUPPORTED away from their neutral value. StopText applies `stop`.

OpenAI -> ours. to_conversation: a request's messages in our conversation schema. An assistant
message with several tool_calls becomes one of ours per call, each followed by the `tool` message
answering it (by tool_call_id); content is a string or a list of text parts (their text joined;
other parts are an error). A request the schema cannot hold (a tool message with no call before
it, an unknown role, a call with no result) is an error saying which message and why.
schema_args: a call's JSON arguments as a server streams them, checked into the schema (ints for
INT_ARGS, strings otherwise, wire order), or the `error:` result the agent answers them with.

Ours -> OpenAI. to_openai: a conversation as agent/samplers/remote.py sends it (a call gets the id
`call_<index>`, its tool_result a `tool` message answering that id); tool_schema: one of our
tools as a function tool (protocol.TOOLS: its arguments, which are required, which are integers);
openai_message and openai_call: a reply as `nanocode serve` answers it.

Replies. completion: a whole reply as one body; first_chunk .. last_chunk and DONE_EVENT: the
same as server-sent events, written by `nanocode serve`. read_event and StreamedReply read any
OpenAI-compatible server's stream back (agent/samplers/remote.py): content as it comes, a call's argument
pieces joined by index, the finish reason and usage.

Round trip: to_conversation(to_openai(conv)) == conv for a conversation whose tool_results each
answer the call before them. Two things do not come back: a tool_result that answers no call (a
malformed call's `error:` result) goes as a user message "[tool result] ...", the only place
OpenAI's schema has for it, and reads back as that user message; and a call with no result yet
(the conversation's last message) is refused by to_conversation, which reads only requests a
model can answer.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import NamedTuple

from agent.masks.loop_guard import first_loop
from agent.samplers.foreign_tools import Refused, client_tool, json_schema, wire_calls, wire_values
from nanocode.protocol import INT_ARGS, TOOLS, Tool, canonical_args, check_shape

MAX_DEPTH = 64  # nesting of its JSON (and of a tool call's arguments)
MAX_TOKENS = 1 << 20  # the largest max_tokens taken (then cut to the context's room)
SEED_RANGE = (-(1 << 31), (1 << 31) - 1)
MAX_STOPS = 4  # `stop` strings in a request (as OpenAI)
MAX_STOP_CHARS = 256  # each one's length: a stream holds back at most this much text
TOOL_CHOICES = ("auto", "none", "required")  # or {"type": "function", "function": {"name": ...}}
# Parameters that would change the reply but that this server does not implement: each is taken
# only absent, null or at one of its neutral values; anything else is a 400 saying why.
UNSUPPORTED = {
    "logprobs": ((False,), "this server does not return log-probabilities"),
    "top_logprobs": ((0,), "this server does not return log-probabilities"),
    "presence_penalty": ((0,), "this server applies no presence or frequency penalty"),
    "frequency_penalty": ((0,), "this server applies no presence or frequency penalty"),
    "logit_bias": (({},), "this server applies no logit bias"),
    "response_format": (({"type": "text"},), "this server cannot hold a reply to JSON or a schema"),
    "functions": (([],), "the legacy functions API is not served: send tools"),
    "function_call": (("auto", "none"), "the legacy functions API is not served: send tool_choice"),
}


# ---- requests ----------------------------------------------------------------------------------
class RequestError(ValueError):
    """A request the server cannot answer; the message, the parameter it names and `code` (OpenAI's
    error code, or None) go back in the error body, with HTTP `status` (400; 404 for a model the
    server does not serve)."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 code: str | None = None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> bytes:
    """OpenAI's error shape."""
    return json.dumps({"error": {"message": message, "type": kind, "param": param,
                                 "code": code}}).encode()


def parse_json(data: bytes | str, what: str = "the body"):
    """JSON nested at most MAX_DEPTH levels: deeper is a RequestError, also where the decoder
    itself would run out of recursion."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise RequestError(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as e:  # JSONDecodeError, and bytes that are not UTF-8
        raise RequestError(f"{what} is not JSON: {e}") from None
    stack = [(value, 1)]
    while stack:  # no recursion here: a list of (value, depth) to visit
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > MAX_DEPTH:
                raise RequestError(f"{what} is nested more than {MAX_DEPTH} levels deep")
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return value


def _number(req: dict, key: str, default: float, low: float, high: float) -> float:
    v = req.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= high:
        raise RequestError(f"{key} must be a number from {low:g} to {high:g}, not {v!r:.40}", key)
    return float(v)


def _integer(req: dict, key: str, default: int, low: int, high: int) -> int:
    v = req.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise RequestError(f"{key} must be an integer from {low} to {high}, not {v!r:.40}", key)
    return v


def _tools(tools) -> list[Tool]:
    """The function tools a request lists: ours by name, the client's as foreign_tools.client_tool."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError("tools must be a list of function tools", "tools")
    out = {}  # name -> protocol.Tool
    for k, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise RequestError(f"tools[{k}] must be {{\"type\": \"function\", \"function\": "
                               "{\"name\": ...}}", "tools")
        try:
            out[fn["name"]] = TOOLS.get(fn["name"]) or client_tool(fn["name"], fn.get("description"),
                                                                    fn.get("parameters"))
        except Refused as e:
            raise RequestError(f"tools[{k}] ({fn['name'][:40]!r}): this server cannot offer it: {e}; "
                               "drop it or simplify its parameters", "tools") from None
    return list(out.values())


def _offered(tools: list[Tool], choice) -> tuple[tuple[Tool, ...], bool]:
    """tool_choice over the listed tools: (the tools the reply may call, ours in TOOLS order then
    the client's; whether it must be a call). "auto" (or absent): those listed, a call or not;
    "none": no call; "required": a call to one listed; a named function: a call to that one."""
    listed = tuple(sorted(tools, key=lambda t: list(TOOLS).index(t.name) if t.name in TOOLS else len(TOOLS)))
    if choice is None or choice == "auto":
        return listed, False
    if choice == "none":
        return (), False
    if choice == "required":
        if not listed:
            raise RequestError('tool_choice "required" needs tools: list the tools the reply may '
                               "call", "tool_choice")
        return listed, True
    fn = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" \
        else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise RequestError(f"tool_choice must be {', '.join(map(json.dumps, TOOL_CHOICES))} or "
                           '{"type": "function", "function": {"name": ...}}, not '
                           f"{json.dumps(choice)[:60]}", "tool_choice")
    chosen = [t for t in listed if t.name == name]
    if not chosen:
        raise RequestError(f"tool_choice names {name[:40]!r}, which tools does not list; list it "
                           f"in tools (nanocode's own: {', '.join(TOOLS)}, or your function)", "tool_choice")
    return tuple(chosen), True


def _stop_strings(stop) -> tuple[str, ...]:
    """`stop`: null, a string, or a list of at most MAX_STOPS non-empty strings."""
    stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or not all(
            isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops):
        raise RequestError(f"stop must be a string or a list of at most {MAX_STOPS} strings, each "
                           f"of 1 to {MAX_STOP_CHARS} characters", "stop")
    return tuple(dict.fromkeys(stops))


def _unsupported(req: dict) -> None:
    """n above 1, or a parameter of UNSUPPORTED away from its neutral value: a RequestError."""
    n = req.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise RequestError(f"n is {json.dumps(n)[:40]}: this server returns one choice per request "
                           "(n=1); send separate requests, with different seeds, for more", "n")
    for key, (neutral, why) in UNSUPPORTED.items():
        v = req.get(key)
        if v is not None and not any(v == x and isinstance(v, bool) == isinstance(x, bool)
                                     for x in neutral):
            raise RequestError(f"{key} is {json.dumps(v)[:60]}: {why}; leave {key} out", key)


def parse_request(req: dict, model: str | None = None) -> dict:
    """A chat-completions request's parameters, checked: {"temperature", "top_p", "seed",
    "max_tokens" (before the context's room), "stop" (strings; empty: none), "tools" (those the
    reply may call: protocol.Tools), "must_call" (tool_choice "required" or a named function:
    the reply is a call), "messages" (our conversation schema)}. `model`: the served model's
    name; a request naming another is a 404 (code model_not_found), one naming none is taken.
    Raises RequestError naming the parameter."""
    name = req.get("model")
    if name is not None and not isinstance(name, str):
        raise RequestError("model must be a string: the id /v1/models lists", "model")
    if model is not None and name is not None and name != model:
        raise RequestError(f"the model {name[:80]!r} does not exist here: this server serves "
                           f"{model!r} (GET /v1/models); send that, or leave model out", "model",
                           404, "model_not_found")
    if not isinstance(req.get("stream", False), (bool, type(None))):
        raise RequestError("stream must be true or false", "stream")
    _unsupported(req)
    limit = _integer(req, "max_tokens", 1024, 1, MAX_TOKENS)
    tools, must_call = _offered(_tools(req.get("tools")), req.get("tool_choice"))
    return {"temperature": _number(req, "temperature", 0.0, 0, 2),
            "top_p": _number(req, "top_p", 1.0, 0, 1) or 1.0,
            "seed": _integer(req, "seed", 0, *SEED_RANGE),
            "max_tokens": _integer(req, "max_completion_tokens", limit, 1, MAX_TOKENS),
            "stop": _stop_strings(req.get("stop")),
            "tools": tools, "must_call": must_call,
            "messages": _client_calls(to_conversation(req.get("messages")), tools)}


def _client_calls(messages: list[dict], tools) -> list[dict]:
    try:  # earlier calls of the client's tools: their JSON values as text (wire_calls)
        return wire_calls(messages, [t for t in tools if t.name not in TOOLS])
    except ValueError as e:
        raise RequestError(str(e), "messages") from None


class StopText:
    """`stop` on a reply's prose as it streams. feed(piece) returns the text that may go out now:
    never a stop string, nor a tail that may still grow into one (it is held until resolved).
    Once a stop string has appeared, `hit` is True, the text before its first occurrence has gone
    out and nothing more does: the reply ends there. flush() returns what is held at the end."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops, self.held, self.hit = stops, "", False

    def feed(self, piece: str) -> str:
        if self.hit:
            return ""
        text = self.held + piece
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            self.hit, self.held = True, ""
            return text[:min(found)]
        keep = max((k for s in self.stops for k in range(1, min(len(s), len(text) + 1))
                    if text.endswith(s[:k])), default=0)
        self.held = text[len(text) - keep:]
        return text[:len(text) - keep]

    def flush(self) -> str:
        out, self.held = ("" if self.hit else self.held), ""
        return out


# ---- OpenAI -> ours ------------------------------------------------------------------------------
def _text(content, where: str) -> str:
    """A message's content: a string, null, or a list of text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise RequestError(f"{where}: content must be a string or a list of text parts",
                           "messages")
    for k, part in enumerate(content):
        if not (isinstance(part, dict) and part.get("type") == "text"
                and isinstance(part.get("text"), str)):
            raise RequestError(f"{where}: content part {k} is not a text part "
                               '({"type": "text", "text": "..."}); only text is read', "messages")
    return "".join(p["text"] for p in content)


def _calls(m: dict, i: int) -> list[tuple]:
    """An assistant message's tool calls as (id, name, args)."""
    calls = m.get("tool_calls") or []
    if not isinstance(calls, list):
        raise RequestError(f"message {i}: tool_calls must be a list", "messages")
    out = []
    for k, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) \
                or not isinstance(fn.get("arguments") or "", str):
            raise RequestError(f"message {i}: tool call {k} must have a function with a name and "
                               "arguments as a JSON string", "messages")
        args = parse_json(fn.get("arguments") or "{}", f"message {i}: tool call {k} arguments")
        out.append((c.get("id"), fn["name"], args))
    return out


def to_conversation(messages: list) -> list[dict]:
    """OpenAI chat messages -> nanocode's conversation schema (see the module docstring)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    out, waiting = [], {}  # tool_call_id -> our assistant message waiting for its result
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("system", "developer"):
            if out:
                raise RequestError(f"message {i}: a system message must come first", "messages")
            out.append({"role": "system", "content": _text(m.get("content"), f"message {i}")})
        elif role == "user":
            out.append({"role": "user", "content": _text(m.get("content"), f"message {i}")})
        elif role == "assistant":
            calls = _calls(m, i)
            text = _text(m.get("content"), f"message {i}")
            if not calls:
                out.append({"role": "assistant", "content": text})
            for k, (call_id, name, args) in enumerate(calls):
                waiting[call_id] = len(out)
                out.append({"role": "assistant", "content": text if k == 0 else "",
                            "tool_call": {"name": name, "args": args}})
                out.append(None)  # its result's slot
        elif role == "tool":
            call_id = m.get("tool_call_id")
            slot = waiting.pop(call_id, None) if isinstance(call_id, str) else None
            if slot is None:
                raise RequestError(f"message {i}: a tool message answers no earlier tool call "
                                   "(check its tool_call_id)", "messages")
            out[slot + 1] = {"role": "tool_result", "content": _text(m.get("content"), f"message {i}")}
        else:
            raise RequestError(f"message {i}: unknown role {str(role)[:40]!r} (system, user, "
                               "assistant, tool)", "messages")
    if any(m is None for m in out):
        raise RequestError("a tool call has no tool message with its result", "messages")
    return out


class CallArgs(NamedTuple):
    """A call's arguments in the conversation schema, or None and the `error: ...` result that
    says what is wrong with them."""
    args: dict | None
    error: str | None


def schema_args(name: str, text: str, tool: Tool | None = None) -> CallArgs:
    """A call's JSON arguments (`text`, as a server sends them) in the conversation schema:
    digit strings become ints for INT_ARGS, numbers become strings elsewhere (an MCP `tool`'s: as
    its kinds say, foreign_tools.wire_values), keys in wire order. Arguments that are not a JSON
    object, of the wrong shape, or with a value that holds a loop give an error instead."""
    try:  # bounded depth: a server's deeply nested arguments are an error, not a crash
        args = parse_json(text or "{}", f"the {name} call's argument text")
    except RequestError as e:
        return CallArgs(None, f"error: {e}; send a JSON object")
    if not isinstance(args, dict):
        return CallArgs(None, f"error: the {name} call's arguments must be a JSON object")
    fixed, error = wire_values(tool, args) if tool is not None and tool.kinds else ({}, None)
    if error:
        return CallArgs(None, error)
    for key, value in (args if not fixed else {}).items():
        if key in INT_ARGS and isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        elif key not in INT_ARGS and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        fixed[key] = value
    try:
        check_shape({"name": name, "args": fixed}, name)
    except ValueError as e:
        return CallArgs(None, f"error: {e}")
    for key, value in fixed.items():
        if isinstance(value, str) and first_loop(value.encode("utf-8", "replace")) is not None:
            return CallArgs(None, f"error: the {name} call's {key} repeats itself; write it once")
    return CallArgs(canonical_args(name, fixed), None)


# ---- ours -> OpenAI ------------------------------------------------------------------------------
def tool_schema(tool: Tool | str) -> dict:
    """One of our tools (or its name) or an MCP tool as an OpenAI function tool."""
    t = TOOLS[tool] if isinstance(tool, str) else tool
    props = {a: {"type": "integer" if a in INT_ARGS else "string"} for a in t.args}
    params = json_schema(t) if t.kinds else {"type": "object", "properties": props, "required": list(t.required)}
    return {"type": "function", "function": {"name": t.name, "description": t.prompt, "parameters": params}}


def to_openai(messages: list[dict]) -> list[dict]:
    """Our conversation -> OpenAI chat messages. A tool_result that answers no call (a malformed
    call's error) goes as a user message, the only place the schema has for it."""
    out, last_id = [], None
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m.get("tool_call"):
            last_id = f"call_{i}"
            out.append({"role": "assistant", "content": m["content"] or None,
                        "tool_calls": [openai_call(m["tool_call"], last_id)]})
        elif m["role"] == "tool_result":
            out.append({"role": "tool", "tool_call_id": last_id, "content": m["content"]} if last_id
                       else {"role": "user", "content": f"[tool result] {m['content']}"})
            last_id = None
        else:
            out.append({"role": m["role"], "content": m["content"]})
            last_id = None
    return out


def openai_message(res: dict) -> dict:
    """A reply ({"content", "tool_call" or None}) as an OpenAI assistant message."""
    msg = {"role": "assistant", "content": res["content"]}
    if res["tool_call"]:
        msg["tool_calls"] = [openai_call(res["tool_call"])]
    return msg


def openai_call(call: dict, call_id: str | None = None) -> dict:
    """Our {"name", "args"} as an OpenAI tool call (call_id None: a fresh random id)."""
    return {"id": call_id or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["args"])}}


# ---- the reply on the wire: one JSON body, or server-sent events -------------------------------
DONE = "[DONE]"  # the data of a stream's last event


def reply_head(model: str) -> dict:
    """What every body and chunk of one reply shares: a fresh id, the time, the model."""
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "created": int(time.time()),
            "model": model}


def completion(head: dict, res: dict) -> dict:
    """A whole reply ({"content", "tool_call", "finish_reason", "usage"}) as one response body."""
    return {**head, "object": "chat.completion", "usage": res["usage"],
            "choices": [{"index": 0, "message": openai_message(res),
                         "finish_reason": res["finish_reason"]}]}


# A stream, as `nanocode serve` writes it: first_chunk, a text_chunk per piece of prose, at most
# one call_chunk, last_chunk, then DONE_EVENT. Each is one server-sent event, as bytes.
DONE_EVENT = f"data: {DONE}\n\n".encode()


def _chunk(head: dict, delta: dict, finish: str | None = None, **extra) -> bytes:
    chunk = {**head, "object": "chat.completion.chunk", **extra,
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(chunk)}\n\n".encode()


def first_chunk(head: dict) -> bytes:
    return _chunk(head, {"role": "assistant", "content": ""})


def text_chunk(head: dict, piece: str) -> bytes:
    return _chunk(head, {"content": piece})


def call_chunk(head: dict, call: dict) -> bytes:
    """A whole call ({"name", "args"}) in one chunk."""
    return _chunk(head, {"tool_calls": [{"index": 0, **openai_call(call)}]})


def last_chunk(head: dict, finish: str, usage: dict) -> bytes:
    """The finish reason and the usage, with an empty delta."""
    return _chunk(head, {}, finish, usage=usage)


class StreamError(ValueError):
    """A stream the reader cannot take: an error event, or data that is not a JSON object."""


def read_event(line: bytes) -> dict | str | None:
    """One line of a server-sent event stream: its JSON object, DONE, or None for a line that
    carries no data (a blank line, a `: comment`, an `event:` field). Raises StreamError."""
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith("data:"):
        return None
    data = text[5:].strip()
    if data == DONE:
        return DONE
    try:
        value = json.loads(data)
    except (json.JSONDecodeError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise StreamError(f"sent a line that is not a JSON object: {data[:80]}")
    return value


class StreamedReply:
    """A streamed reply read chunk by chunk, from any OpenAI-compatible server: feed(chunk) gives
    the chunk's content and keeps the rest. `calls`: index -> {"name", "arguments"}, the
    pieces of each joined in order (servers split a call's arguments over many chunks); `finish`:
    the last finish_reason seen; `usage`: the last usage seen, or None."""

    def __init__(self):
        self.calls, self.finish, self.usage = {}, None, None

    def feed(self, chunk: dict) -> str:
        """A chunk's content ("" for none); an error chunk raises StreamError (its message)."""
        if isinstance(chunk.get("error"), dict):
            raise StreamError(f"failed: {chunk['error'].get('message')}")
        self.usage = chunk.get("usage") or self.usage
        pieces = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                pieces.append(delta["content"])
            for c in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(c.get("index", 0), {"name": "", "arguments": ""})
                fn = c.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            self.finish = choice.get("finish_reason") or self.finish
        return "".join(pieces)
