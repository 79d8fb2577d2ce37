"""The settings file format, read from bytes (UTF-8, a leading BOM allowed): `{"mode",
"permissions": {"allow", "ask", "deny"}, "env", "hooks", "mcpServers"}`, the rule syntax
(`parse_rule`), hooks (`Hook`) and MCP servers (tools/mcp_config.py). Every problem is a
SettingsError naming the file, the problem and the fix. Which files apply, and what the rules
decide, is tools/permissions.py; this module writes nothing.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from nanocode.protocol import MODES, TOOLS
from tools.mcp_config import FIX as MCP_FIX, parse_servers
from tools.workspace import user_settings_dir

KINDS = ("allow", "ask", "deny")


class SettingsError(ValueError):
    """A malformed settings file; the message names the file, the problem and the fix."""


HOOK_EVENTS = ("PreToolUse", "PostToolUse", "Stop")  # what each one does: agent/loop/hooks.EVENTS


@dataclass(frozen=True)
class Hook:
    """One hook of the settings file `source`: a shell command run at `event` (agent/loop/hooks.py) for
    the tools whose whole name the regex `matcher` matches (None: every tool; Stop has none)."""
    event: str
    command: str
    matcher: str | None = None
    timeout: float = 30.0
    source: str = ""


# ------------------------------------------------------------------------------ rules

_RULE = re.compile(r"\s*([A-Za-z]+)\s*(?:\((.*)\))?\s*", re.S)
_MCP_RULE = re.compile(r"\s*(mcp__[A-Za-z0-9_*?-]+)\s*")


def parse_rule(text):
    """"Bash" -> ("Bash", None); "Bash(git status*)" -> ("Bash", "git status*"). ValueError on junk.
    A Claude-style trailing ":*" (`Bash(npm run test:*)`) is read as "*". An MCP tool's rule is
    its name, with `*` for any part: "mcp__files__read" -> ("mcp__files__read", None); a server
    alone, "mcp__files", is every tool of it ("mcp__files__*")."""
    mcp = _MCP_RULE.fullmatch(text) if isinstance(text, str) else None
    if mcp:
        name = mcp.group(1)
        return (name if "__" in name[5:] else name + "__*"), None
    m = _RULE.fullmatch(text) if isinstance(text, str) else None
    if not m or m.group(1) not in TOOLS:
        raise ValueError(f"not a rule: {text!r} (expected e.g. Bash, Bash(git status*), Edit(docs/**), "
                         "mcp__server__tool)")
    pattern = m.group(2)
    if pattern is not None:
        pattern = pattern.strip()
        if not pattern or "\x00" in pattern:
            raise ValueError(f"empty pattern in rule {text!r} (write {m.group(1)} to match every call)")
        if pattern.endswith(":*"):
            pattern = pattern[:-2] + "*"
    return m.group(1), pattern


# ------------------------------------------------------------------------------ files

def load_file(path: Path) -> dict:
    """{"mode"?: str, "allow": [...], "ask": [...], "deny": [...]} from one settings file."""
    try:
        return parse(path, path.read_bytes())
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise SettingsError(f"{path}: cannot read settings ({e}); fix: make it a readable UTF-8 JSON file") from e


def parse(path: Path, raw: bytes) -> dict:
    """load_file's result from the file's bytes."""
    def fail(problem, fix='use {"mode": "ask", "permissions": {"allow": [], "ask": [], "deny": []}}'):
        return SettingsError(f"{path}: {problem}; fix: {fix}")
    try:
        text = raw.decode("utf-8-sig")  # a BOM (Windows editors write one) is no syntax error
        data = json.loads(text) if text.strip() else {}
    except RecursionError:
        raise fail("JSON nested too deeply", "a settings file nests a few levels at most") from None
    except json.JSONDecodeError as e:
        raise fail(f"invalid JSON at line {e.lineno} column {e.colno} ({e.msg})",
                   "correct the syntax (JSON has no comments or trailing commas)") from e
    except UnicodeDecodeError as e:
        raise fail(f"cannot read settings ({e})", "make it a readable UTF-8 JSON file") from e
    if not isinstance(data, dict):
        raise fail("settings must be a JSON object")
    perms = data.get("permissions", {})
    if not isinstance(perms, dict):
        raise fail('"permissions" must be an object')
    known = {"mode", "permissions", "env", "hooks", "mcpServers", "$schema"}
    for unknown in sorted(set(data) - known) + sorted(set(perms) - set(KINDS)):
        raise fail(f"unknown key {unknown!r}")
    out = {key: perms.get(key, []) for key in KINDS}
    env = data.get("env", [])
    if not isinstance(env, list) or not all(isinstance(n, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)
                                            for n in env):
        raise fail('"env" must be a list of environment variable names', 'e.g. "env": ["PYTHONPATH"]')
    if "mode" in data:
        if data["mode"] not in MODES:
            raise fail(f"unknown mode {data['mode']!r}", f"use one of {', '.join(MODES)}")
        out["mode"] = data["mode"]
    for key, rules in out.items():
        if key != "mode" and not isinstance(rules, list):
            raise fail(f'"permissions.{key}" must be a list of rule strings')
        for rule in rules if key != "mode" else ():
            try:
                parse_rule(rule)
            except ValueError as e:
                raise fail(f'bad rule in "permissions.{key}": {e}',
                           'write Tool or Tool(pattern), e.g. "Bash(git status*)"') from e
    try:
        servers = parse_servers(data.get("mcpServers", {}), str(path))
    except ValueError as e:
        raise fail(str(e), MCP_FIX) from None
    return {**out, "env": env, "hooks": _parse_hooks(path, data.get("hooks", {}), fail), "mcp": servers}


def _parse_hooks(path: Path, section, fail) -> list[Hook]:
    """The "hooks" object of one settings file as Hooks; a SettingsError names the bad key."""
    fix = 'e.g. "hooks": {"PreToolUse": [{"matcher": "Bash|Edit", "command": "./check.sh", "timeout": 30}]}'
    if not isinstance(section, dict):
        raise fail('"hooks" must be an object: event name -> list of hooks', fix)
    out = []
    for event, entries in section.items():
        if event not in HOOK_EVENTS or not isinstance(entries, list):
            raise fail(f'"hooks.{event}": not an event name with a list of hooks', f"use {', '.join(HOOK_EVENTS)}")
        keys = {"command", "timeout"} | ({"matcher"} if event != "Stop" else set())
        for i, entry in enumerate(entries):
            key = f'"hooks.{event}[{i}]"'
            if not isinstance(entry, dict) or set(entry) - keys:
                raise fail(f"{key} must be an object with only the keys {', '.join(sorted(keys))}", fix)
            command, matcher, timeout = entry.get("command"), entry.get("matcher", "*"), entry.get("timeout", 30)
            if not isinstance(command, str) or not command.strip() or "\x00" in command:
                raise fail(f"{key}.command must be a non-empty shell command", fix)
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
                raise fail(f"{key}.timeout must be seconds, more than 0 and at most 3600", fix)
            try:
                matcher = None if matcher in ("", "*") else re.compile(matcher).pattern
            except (re.error, TypeError, RecursionError, OverflowError) as e:
                raise fail(f"{key}.matcher is not a regular expression ({e})",
                           'a regex on the tool name, e.g. "Bash|Edit", or "*" for every tool') from e
            out.append(Hook(event, command, matcher, float(timeout), str(path)))
    return out


def default_user_file(home=None) -> Path:
    return user_settings_dir(home) / "settings.json"
