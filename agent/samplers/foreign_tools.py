"""Tools from outside as protocol.Tool: an MCP server's (agent/mcp.py) and a `nanocode serve`
client's (agent/samplers/openai_wire.py), from a name, a description and a JSON schema.

Our model's calls are written under the grammar mask (agent/masks/grammar.py), key by key, each value
as its argument's kind allows, so a tool is taken only when its input schema lies in the subset
the grammar can express: an object (`"type": "object"` or none) whose properties are each

    {"type": "string" | "integer" | "number" | "boolean"}, {"enum": [strings]}, {"const": string},
    or one of those or null (`"type": [T, "null"]`, `"anyOf": [{...}, {"type": "null"}]`),

with `required` naming some of them. Keywords that only describe or narrow a value (title,
description, default, format, minimum, pattern, ...) are left to the server to judge. Anything
else (arrays, nested objects, $ref, oneOf, an enum of numbers) is refused (`Refused`, with the
reason): the tool is not offered at all, and /mcp (or serve's 400) says why. Not "free JSON
checked afterwards": our model writes key/value text, so a schema it cannot write would only
make calls that fail. A remote model (--base-url) gets the same tools, as function schemas.

In the conversation a call's values are what the wire holds (strings, and ints for integer
kinds): `wire_values` brings a remote model's JSON arguments there; `call_values` turns them
into the JSON the tool takes (5, 2.5, true), checked against the kinds.

Hostile input never crashes this and never reaches a prompt or a terminal raw: names are cut to
[A-Za-z0-9_-] (`safe_name`), descriptions and enum strings lose control characters and escape
sequences, bidi overrides and lone surrogates (`clean`) and are capped (MAX_DESCRIPTION), a schema over MAX_SCHEMA_BYTES or with
more than MAX_ARGS arguments is refused. A description can still say anything to the model
("ignore your instructions ..."): that grants nothing, every call still goes through the
permission policy (tools/permissions.py: an MCP tool asks unless a rule allows it).
"""
from __future__ import annotations

import json
import re

from nanocode.protocol import Tool

MAX_DESCRIPTION = 300  # characters of a tool's description kept for the prompt
MAX_SCHEMA_BYTES = 32 << 10  # a larger input schema is refused
MAX_ARGS = 32
MAX_ENUM = 64  # strings in one enum
MAX_ENUM_CHARS = 100
SCALARS = ("string", "integer", "number", "boolean")
ARG_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
INTEGER = re.compile(r"-?\d+")
_ESCAPES = re.compile("\x1b(\\[[0-?]*[ -/]*[@-~]|\\][^\x07\x1b]*(\x07|\x1b\\\\)?|[@-_])"  # CSI, OSC, ESC x
                      "|[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")  # controls, bidi, surrogates


class Refused(ValueError):
    """A tool the grammar cannot offer; the message says why."""


def clean(text, cap: int = MAX_DESCRIPTION) -> str:
    """`text` on one line: escape sequences and control characters dropped, runs of whitespace
    one space, cut to `cap` characters ("..." marks a cut)."""
    text = " ".join(_ESCAPES.sub(" ", str(text or "")).split())
    return text if len(text) <= cap else text[:cap - 3] + "..."


def safe_name(text, cap: int = 64) -> str:
    """`text` with every character outside [A-Za-z0-9_-] as "_", cut to `cap` ("_" if empty)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", str(text))[:cap] or "_"


def _schema_size(schema) -> int:
    try:
        return len(json.dumps(schema))
    except (RecursionError, ValueError, TypeError):
        raise Refused("its input schema is nested too deep or is not JSON") from None


def _kind(arg: str, prop, inner: bool = False) -> str | tuple[str, ...]:
    """One property's kind; Refused when the grammar cannot write it."""
    if not isinstance(prop, dict):
        raise Refused(f"argument {arg!r} has no schema object")
    options = prop.get("anyOf") or prop.get("oneOf")
    if options is not None:  # T or null: an optional T
        kept = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")] \
            if isinstance(options, list) else []
        if len(kept) != 1 or len(options) > 2 or inner:
            raise Refused(f"argument {arg!r} is one of several schemas (anyOf/oneOf)")
        return _kind(arg, kept[0], inner=True)
    if "const" in prop:
        prop = {"enum": [prop["const"]]}
    if "enum" in prop:
        values = prop["enum"]
        if not (isinstance(values, list) and 0 < len(values) <= MAX_ENUM and all(
                isinstance(v, str) and v and clean(v, MAX_ENUM_CHARS) == v for v in values)):
            raise Refused(f"argument {arg!r}: an enum is taken only as 1 to {MAX_ENUM} plain "
                          f"strings of at most {MAX_ENUM_CHARS} characters")
        return tuple(dict.fromkeys(values))
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = [k for k in kind if k != "null"]
        kind = kind[0] if len(kind) == 1 else None
    if kind not in SCALARS:
        what = kind if isinstance(kind, str) else "of no single type"
        raise Refused(f"argument {arg!r} is {what}: the grammar writes only string, integer, "
                      "number, boolean and enum-of-strings arguments")
    return kind


def kinds_of(schema) -> tuple[tuple[tuple[str, object], ...], tuple[str, ...]]:
    """(the (arg, kind) pairs, the required args) of an input schema; Refused otherwise."""
    if not isinstance(schema, dict):
        raise Refused("its input schema is not a JSON object")
    if _schema_size(schema) > MAX_SCHEMA_BYTES:
        raise Refused(f"its input schema is over {MAX_SCHEMA_BYTES // 1024} KB")
    if schema.get("type", "object") != "object":
        raise Refused("its input schema is not an object")
    for key in ("$ref", "anyOf", "oneOf", "allOf", "not", "if", "patternProperties"):
        if key in schema:
            raise Refused(f"its input schema uses {key}")
    props, required = schema.get("properties") or {}, schema.get("required") or []
    if not isinstance(props, dict) or not isinstance(required, list) or not all(
            isinstance(r, str) for r in required):
        raise Refused("its input schema's properties or required list is malformed")
    if len(props) > MAX_ARGS:
        raise Refused(f"it has {len(props)} arguments (at most {MAX_ARGS} are taken)")
    for arg in props:
        if not ARG_NAME.fullmatch(arg):
            raise Refused(f"argument name {clean(arg, 40)!r} has characters other than "
                          "A-Z a-z 0-9 _ - (or is over 64)")
    missing = [r for r in required if r not in props]
    if missing:
        raise Refused(f"it requires {clean(missing[0], 40)!r}, which it does not describe")
    return tuple((a, _kind(a, p)) for a, p in props.items()), tuple(dict.fromkeys(required))


def describe_kind(kind) -> str:
    return "|".join(kind) if isinstance(kind, tuple) else kind


def from_schema(name: str, description, schema, read_only: bool = False) -> Tool:
    """A Tool named `name` (already safe: [A-Za-z0-9_-]) for this input schema; Refused when the
    grammar cannot write its calls. read_only: it changes nothing (an MCP readOnlyHint): plan
    mode offers it, no undo snapshot is taken before it, a failed call may be resampled."""
    kinds, required = kinds_of(schema)
    shown = ", ".join(f"{a}{'' if a in required else '?'}{'' if k == 'string' else ': ' + describe_kind(k)}"
                      for a, k in kinds)
    text = clean(description)
    prompt = f"{name}({shown})" + (f": {text}" if text else "")
    return Tool(name, tuple(a for a, _ in kinds), required, prompt, changes_files=not read_only,
                error_changes_nothing=read_only, path_arg=None, kinds=kinds)


def client_tool(name, description, parameters) -> Tool:
    """A `nanocode serve` client's function tool (agent/samplers/openai_wire.py); Refused when its name is
    not 1 to 64 of [A-Za-z0-9_-] (OpenAI's own rule) or the grammar cannot write its parameters."""
    if not isinstance(name, str) or not ARG_NAME.fullmatch(name):
        raise Refused("its name must be 1 to 64 of A-Z a-z 0-9 _ -")
    return from_schema(name, description, parameters or {})


def json_schema(tool: Tool) -> dict:
    """The input schema a server or model is told: the kinds as JSON schema."""
    props = {a: {"type": "string", "enum": list(k)} if isinstance(k, tuple) else {"type": k}
             for a, k in tool.kinds}
    return {"type": "object", "properties": props, "required": list(tool.required)}


def _to_json(kind, value):
    """A wire value (str or int) as the JSON its kind takes; ValueError naming what it should be."""
    text = str(value).strip() if not isinstance(value, bool) else ""
    if isinstance(kind, tuple):
        if isinstance(value, str) and value in kind:
            return value
    elif kind == "string":
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
    elif kind == "integer":
        if isinstance(value, int) and not isinstance(value, bool) or INTEGER.fullmatch(text):
            return int(text)
    elif kind == "number":
        if isinstance(value, (int, str)) and NUMBER.fullmatch(text):
            return int(text) if INTEGER.fullmatch(text) else float(text)
    elif kind == "boolean" and text in ("true", "false"):
        return text == "true"
    raise ValueError(describe_kind(kind) if isinstance(kind, tuple) else f"a{'n' * (kind == 'integer')} {kind}")


def call_values(tool: Tool, args: dict) -> tuple[dict | None, str | None]:
    """(the JSON arguments the tool takes, None) or (None, the `error:` line saying which
    argument is wrong and what it should be). The call's shape (names, required) is checked
    before (protocol.check_call)."""
    kinds, out = dict(tool.kinds), {}
    for key, value in args.items():
        try:
            out[key] = _to_json(kinds.get(key, "string"), value)
        except ValueError as e:
            return None, f"error: argument {key} must be {e}, not {clean(repr(value), 40)}"
    return out, None


def wire_values(tool: Tool, args: dict) -> tuple[dict | None, str | None]:
    """A model's JSON arguments (5, 2.5, true) as the conversation holds them (ints for integer
    kinds, text otherwise), or (None, the `error:` line for a value no kind takes: a list, an
    object, null)."""
    kinds, out = dict(tool.kinds), {}
    for key, value in args.items():
        kind = kinds.get(key, "string")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, float) or (isinstance(value, int) and kind != "integer"):
            value = json.dumps(value)
        elif kind == "integer" and isinstance(value, str) and INTEGER.fullmatch(value.strip()):
            value = int(value)
        elif not isinstance(value, (str, int)):
            return None, (f"error: argument {key} of {tool.name} must be "
                          f"{describe_kind(kind)}, not {type(value).__name__}")
        out[key] = value
    return {**{a: out[a] for a in tool.args if a in out},
            **{k: v for k, v in out.items() if k not in tool.args}}, None


def wire_calls(messages: list[dict], tools: list[Tool]) -> list[dict]:
    """`messages` with the earlier calls of `tools` holding their values as the conversation does
    (wire_values, in place); ValueError naming a call whose values no kind takes."""
    theirs = {t.name: t for t in tools}
    for m in messages:
        call = m.get("tool_call")
        if call and call["name"] in theirs and isinstance(call["args"], dict):
            call["args"], error = wire_values(theirs[call["name"]], call["args"])
            if error:
                raise ValueError(f"an earlier call of {call['name']}: {error[7:]}")
    return messages
