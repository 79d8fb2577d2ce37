"""The agent protocol, defined once: special tokens, the tools and their arguments, the permission
modes and what each lets the model call, the fixed result strings, the tool-call wire format
(render, parse, validate) and the typed events the agent loop emits.

Everything that speaks the protocol imports it from here: the tokenizer (specials, the call
format), the tools (argument shapes), the agent (prompt, grammar, loop, faces), `train synth` and
`train sft` (the data must be what the agent sees) and `evals agent`. It imports nothing from the
project, so it sits at the bottom of the dependency graph.

Wire format of one call, inside an assistant message after its prose:
    <|tool_call_start|>Name(<|tool_arg|>key<|tool_val|>value)*<|tool_call_end|>
Arguments come in the order TOOLS lists them (the grammar enforces it; the data follows it). An
Edit of an existing file gives old_string; an Edit that creates a file gives none (file_path, then
new_string), so the grammar knows from the path alone which of the two a call is.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import ClassVar, Literal, get_args

SPECIAL_TOKENS = [
    "<|bos|>",  # starts every document and every conversation
    "<|user_start|>",
    "<|user_end|>",
    "<|assistant_start|>",
    "<|assistant_end|>",
    "<|tool_call_start|>",
    "<|tool_arg|>",
    "<|tool_val|>",
    "<|tool_call_end|>",
    "<|tool_result_start|>",
    "<|tool_result_end|>",
]


@dataclass(frozen=True)
class Tool:
    """One tool: its arguments in wire order, which are required, its line in the prompt, and the
    facts the agent acts on: whether it changes files (undo snapshots before it, grounding lists
    the project again after it, a repeat after it is no repeat), whether an `error:` result means
    it changed nothing (then the agent may take the call back and resample), and which argument
    names the path the permission policy judges.

    A tool from outside (an MCP server's, a `nanocode serve` client's: agent/samplers/foreign_tools.py)
    also has `kinds`: per argument "string", "integer", "number", "boolean" or a tuple of the
    strings it may be; the grammar writes each value as its kind allows. Ours have none (their
    values are INT_ARGS digits or the grounded automata of agent/masks/grammar.py)."""
    name: str
    args: tuple[str, ...]
    required: tuple[str, ...]
    prompt: str  # rendered after "- " in the system prompt's tool list
    changes_files: bool
    error_changes_nothing: bool
    path_arg: str | None
    kinds: tuple[tuple[str, str | tuple[str, ...]], ...] = ()

    @property
    def optional(self) -> tuple[str, ...]:
        return tuple(a for a in self.args if a not in self.required)


TOOLS = {t.name: t for t in (
    Tool("Read", ("file_path", "offset", "limit"), ("file_path",),
         'Read(file_path, offset?, limit?): numbered lines of a file. e.g. Read(file_path="src/app.py")',
         changes_files=False, error_changes_nothing=True, path_arg="file_path"),
    Tool("Edit", ("file_path", "old_string", "new_string"), ("file_path", "new_string"),
         "Edit(file_path, old_string?, new_string): replace the unique old_string; no old_string "
         'creates the file. e.g. Edit(file_path="src/app.py", old_string="return a", '
         'new_string="return a + b")',
         changes_files=True, error_changes_nothing=True, path_arg="file_path"),
    Tool("Grep", ("pattern", "path", "-A", "-B"), ("pattern",),
         "Grep(pattern, path?, -A?, -B?): regex search in every text file under path. "
         'e.g. Grep(pattern="def main", path="src")',
         changes_files=False, error_changes_nothing=True, path_arg="path"),
    Tool("Bash", ("command",), ("command",),
         'Bash(command): run a shell command in the project root. e.g. Bash(command="python -m pytest -q")',
         changes_files=True, error_changes_nothing=False, path_arg=None),
)}
TOOL_ARGS = {t.name: (t.required, t.optional) for t in TOOLS.values()}  # name -> (required, optional)
INT_ARGS = frozenset({"offset", "limit", "-A", "-B"})  # decimal digits on the wire, ints once parsed


def call_path(name: str, args: dict):
    """The path a call names (its tool's path_arg; "." for an optional path left out), None for a
    tool that names none. Not checked: the value may be any JSON the model wrote."""
    key = TOOLS[name].path_arg
    if key is None:
        return None
    return args.get(key) or ("." if key not in TOOLS[name].required else None)


MODES = ("ask", "accept-edits", "auto", "plan")
MODE_TOOLS = {"ask": tuple(TOOLS), "accept-edits": tuple(TOOLS), "auto": tuple(TOOLS),
              "plan": ("Read", "Grep")}  # what the grammar offers (the policy still decides)


def mode_tools(mode: str, extra: tuple[Tool, ...] = ()) -> tuple[Tool, ...]:
    """The tools a reply may call in `mode`: ours (MODE_TOOLS), then the `extra` ones from outside
    (in plan mode only those that change no files: an MCP tool its server marks read-only)."""
    return tuple(TOOLS[n] for n in MODE_TOOLS[mode]) + tuple(
        t for t in extra if mode != "plan" or not t.changes_files)

# fixed tool results and notes: the data and the agent write exactly these
REJECTED = "rejected by user"
CANCELLED = "cancelled by user: the call was not run"
BLOCKED = "error: blocked by a hook: "  # then the hook's stderr (agent/loop/hooks.py)
DROPPED = "[output dropped to save context]"
REPEATED = "error: the same call three times in a row; stopped so the user can step in"
PLAN_REASON = "plan mode is read-only: switch mode to edit files or run commands"
# why a turn ended (TurnEnd, TurnResult): the model answered; a call was rejected; the same call
# three times; max_steps calls; Ctrl-C; a reply cut at max_tokens or for repeating itself; the
# request did not fit the context; the model server failed
StopReason = Literal["done", "rejected", "repeat", "step_limit", "cancelled", "max_tokens", "loop",
                     "context", "model_error"]
STOP_REASONS: tuple[StopReason, ...] = get_args(StopReason)


def tools_prompt(mode: str = "ask", extra: tuple[Tool, ...] = ()) -> str:
    """The system prompt's tool list. Modes that offer every tool render the text the shipped
    models were trained on (then a line per `extra` tool the mode offers); plan mode lists its
    tools and says that it is on."""
    lines = ["tools (one call per message):"] + [f"- {t.prompt}" for t in mode_tools(mode, extra)]
    if mode == "plan":
        lines.append(mode_note(mode))
    return "\n".join(lines)


def mode_note(mode: str) -> str:
    """The line that says which mode is on (in plan mode's system prompt, and in the user message
    after a switch that changes the tools offered)."""
    if mode == "plan":
        return "mode: plan (read-only: Read and Grep; no edits, no commands)"
    return f"mode: {mode} (every tool)"


MEMORY_FILES = ("NANOCODE.md", "AGENTS.md")
MEMORY_CHARS = 4000  # ~1,000 tokens: memory beyond this is cut (the marker says so)

PROMPT = """\
you are nanocode, a coding agent working in the user's project.
style: lowercase prose, brief. think out loud in a sentence before acting. read before you edit; \
make small, precise edits; say plainly when unsure; do only what was asked. when done, say what \
changed and why. no flattery, never ask "anything else?".
{tools}
working directory: {cwd}"""


def system_prompt(cwd, memory: tuple[str, str] | None = None, mode: str = "ask",
                  extra: tuple[Tool, ...] = ()) -> str:
    """The system message for a project shown at `cwd` in `mode`, with its memory file appended.
    Short (~330 tokens at a 4k vocab): a small model's context is precious and every turn re-reads
    it. `train synth` renders the same text, so the model sees at inference what it trained on.
    `extra`: tools from outside (MCP servers), listed after ours."""
    text = PROMPT.format(tools=tools_prompt(mode, extra), cwd=os.fspath(cwd))
    if memory:
        name, body = memory
        text += f"\n\nproject notes ({name}):\n{body}"
    return text


def check_call(name, args, tools: dict[str, Tool] = TOOLS) -> str | None:
    """The `error:` line for a call of the wrong shape, or None when its shape is right.
    `tools`: the session's table (ours, and those from outside)."""
    if not isinstance(name, str) or name not in tools:
        return "error: unknown tool"
    if not isinstance(args, dict):
        return "error: arguments must be a mapping of names to values"
    tool = tools[name]
    for key in args:
        if key not in tool.args:
            return f"error: unknown argument {key} for {name} (valid: {', '.join(tool.args)})"
    for key in tool.required:
        if args.get(key) is None:
            return f"error: missing argument {key}"
    return None


def canonical_args(name: str, args: dict) -> dict:
    """`args` in the tool's wire order (unknown keys last, in their own order)."""
    order = TOOLS[name].args if isinstance(name, str) and name in TOOLS else ()
    return {**{k: args[k] for k in order if k in args}, **{k: v for k, v in args.items() if k not in order}}


# --- the wire format ----------------------------------------------------------------------------

def check_shape(tc, where: str) -> None:
    """Raise ValueError unless `tc` is {"name": non-empty str, "args": {str: str | int}}."""
    if not isinstance(tc, dict):
        raise ValueError(f"{where}: tool_call must be a dict with name and args, got {type(tc).__name__}")
    if not isinstance(tc.get("name"), str) or not tc["name"].strip():
        raise ValueError(f"{where}: tool_call needs a non-empty string name, got {tc.get('name')!r}")
    args = tc.get("args", None)
    if not isinstance(args, dict):
        raise ValueError(f"{where}: tool_call args must be a dict of str -> str|int, got {args!r}")
    for key, value in args.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: tool_call argument names must be non-empty strings, got {key!r}")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError(f"{where}: tool_call argument {key!r} must be str or int, got {type(value).__name__}")


def encode_call(tok, tool_call: dict) -> list[int]:
    """Token ids of one call (tok: a nanocode.tokenizer.Tokenizer); ints are written in decimal."""
    check_shape(tool_call, "tool_call")
    s = tok.special_ids
    ids = [s["<|tool_call_start|>"], *tok.encode(tool_call["name"])]
    for key, value in tool_call["args"].items():
        ids += [s["<|tool_arg|>"], *tok.encode(key), s["<|tool_val|>"], *tok.encode(str(value))]
    return ids + [s["<|tool_call_end|>"]]


def parse_call(tok, ids) -> dict | None:
    """Generated ids -> {"name", "args"} of the first call in them, None when there is none.

    Prose before <|tool_call_start|> is ignored. Name and keys are stripped, values kept exactly;
    integer-looking INT_ARGS of our tools become ints. Raises ValueError on an unterminated or malformed call
    (the agent turns it into an `error:` tool result)."""
    s = tok.special_ids
    start, end = s["<|tool_call_start|>"], s["<|tool_call_end|>"]
    arg, val = s["<|tool_arg|>"], s["<|tool_val|>"]
    ids = [int(i) for i in ids]
    if start not in ids:
        return None
    body = ids[ids.index(start) + 1:]
    if end not in body:
        raise ValueError("malformed tool call: no <|tool_call_end|> (generation stopped inside the call)")
    body = body[:body.index(end)]
    stray = [t for t in body if tok.is_special(t) and t not in (arg, val)]
    if stray:
        raise ValueError(f"malformed tool call: unexpected {tok.id_to_token(stray[0])} inside the call")
    parts = _split(body, arg)
    name = tok.decode(parts[0]).strip()
    if not name:
        raise ValueError("malformed tool call: no tool name before the first argument")
    args: dict[str, str | int] = {}
    for part in parts[1:]:
        if part.count(val) != 1:
            raise ValueError(f"malformed tool call: argument {tok.decode(part)!r} needs exactly one <|tool_val|>")
        k, v = _split(part, val)
        key, value = tok.decode(k).strip(), tok.decode(v)
        if not key:
            raise ValueError("malformed tool call: an argument has an empty name")
        if key in args:
            raise ValueError(f"malformed tool call: argument {key!r} given twice")
        ours = name in TOOLS  # a tool from outside keeps its text (its kinds convert it: foreign_tools)
        args[key] = int(value) if ours and key in INT_ARGS and re.fullmatch(r"\s*-?\d+\s*", value) else value
    return {"name": name, "args": args}


def _split(ids: list[int], sep: int) -> list[list[int]]:
    parts: list[list[int]] = [[]]
    for t in ids:
        if t == sep:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


# --- events the agent loop emits (agent/loop/driver.py); faces render them ------------------------------
# Faces `match` on the classes; `kind` names each one where an event leaves the process (a
# stream-json line's "type").

@dataclass
class Text:
    """A piece of the assistant's prose, streamed as it is sampled."""
    kind: ClassVar[Literal["text"]] = "text"
    text: str


@dataclass
class ToolCall:
    """A call the model made (args may be invalid); step counts calls in the turn from 1."""
    kind: ClassVar[Literal["tool_call"]] = "tool_call"
    name: str
    args: dict
    step: int


@dataclass
class Approval:
    """A call the policy asked about and the user's answer ("yes", "no", "always", or
    "cancelled": Ctrl-C at the prompt, which is not a verdict on the call)."""
    kind: ClassVar[Literal["approval"]] = "approval"
    name: str
    args: dict
    decision: str
    reason: str
    answer: str
    rule: str = ""  # the session rule(s) "always" added (tools.permissions.Policy.always)


@dataclass
class ToolResult:
    kind: ClassVar[Literal["tool_result"]] = "tool_result"
    name: str
    args: dict
    result: str
    step: int


@dataclass
class Status:
    """A note for the user: context dropped, loop stopped, a retry, undo unavailable ..."""
    kind: ClassVar[Literal["status"]] = "status"
    text: str
    dropped_outputs: int = 0
    dropped_turns: int = 0
    took_back: bool = False  # the reply just made is taken back, to be resampled (its call dropped)


@dataclass
class TurnEnd:
    kind: ClassVar[Literal["turn_end"]] = "turn_end"
    stop_reason: StopReason
    steps: int
    retries: int = 0


Event = Text | ToolCall | Approval | ToolResult | Status | TurnEnd


@dataclass
class TurnResult:
    """What one user turn did: run_turn's return value (and a headless run's JSON)."""
    answer: str = ""
    tool_calls: list = field(default_factory=list)  # [{"name", "args", "result"}]
    files_changed: list = field(default_factory=list)
    steps: int = 0
    stop_reason: StopReason = "done"
    retries: int = 0
    # tokens the model read (prefilled) and wrote (sampled, taken-back retries included), and the
    # seconds each took; `seconds` is the whole turn, approvals and tools included
    usage: dict = field(default_factory=lambda: dict.fromkeys(
        ("prompt_tokens", "completion_tokens", "prefill_s", "generate_s", "seconds"), 0))

    def to_dict(self) -> dict:
        return {"answer": self.answer, "tool_calls": self.tool_calls, "files_changed": self.files_changed,
                "steps": self.steps, "stop_reason": self.stop_reason, "retries": self.retries,
                "usage": self.usage}

    @property
    def tokens_per_second(self) -> float | None:
        """The decode rate of this turn (sampled tokens over sampling time), None before any."""
        u = self.usage
        return u["completion_tokens"] / u["generate_s"] if u["generate_s"] > 0 else None
