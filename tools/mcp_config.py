"""MCP servers as Claude Code users write them: an `"mcpServers"` object in the user settings file
(tools/permissions.py reads it with the rest) or in a project's `.mcp.json`:

    {"mcpServers": {"files": {"command": "npx", "args": ["-y", "some-mcp-server"],
                              "env": {"TOKEN": "${MY_TOKEN}"}},
                    "web":   {"type": "http", "url": "http://127.0.0.1:8931/mcp",
                              "headers": {"Authorization": "Bearer ${WEB_KEY}"}}}}

A server is `stdio` (a command run as a child process, the project as its cwd; `"type": "stdio"`
or none) or `http` (streamable HTTP at `url`; `"streamable-http"` is the same). `${VAR}` and
`${VAR:-default}` in command, args, env values, url and header values are filled from the
environment when the server starts (`expand`), so the file (and the hash the user accepted) holds
the name, not the secret. A server's name becomes part of its tools' names (`mcp__NAME__tool`):
characters outside [A-Za-z0-9_-] become "_", "__" becomes "_" (the separator stays unambiguous),
cut to NAME_CHARS.

A project's `.mcp.json` ships with the repository and names programs to run, so it is read like
the project settings files: through the workspace guard and only once the user accepted exactly
its bytes (tools/workspace.project_settings; the CLI's start-up question shows it), else none of
its servers start. Parsing here is pure: nothing is run or connected (agent/mcp.py does that).
Errors are ValueErrors naming the server and the key; the settings loader adds the file and the fix.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

NAME_CHARS = 32
MAX_SERVERS = 32
TRANSPORTS = {"stdio": "stdio", "http": "http", "streamable-http": "http"}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
FIX = ('e.g. {"mcpServers": {"files": {"command": "npx", "args": ["-y", "server"]}, '
       '"web": {"type": "http", "url": "http://127.0.0.1:8931/mcp"}}}')


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server as configured. `source`: the file it came from (for /mcp)."""
    name: str
    transport: str  # "stdio" | "http"
    source: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()


def server_name(raw: str) -> str:
    """A configured name as its tools' names carry it (module docstring)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", raw)
    while "__" in name:
        name = name.replace("__", "_")
    return name[:NAME_CHARS] or "_"


def _strings(value, what: str, mapping: bool) -> tuple:
    ok = isinstance(value, dict) if mapping else isinstance(value, list)
    items = list(value.items()) if mapping and ok else list(value) if ok else []
    flat = [x for pair in items for x in (pair if mapping else (pair,))]
    if not ok or not all(isinstance(x, str) and "\x00" not in x for x in flat):
        raise ValueError(f"{what} must be {'an object of strings' if mapping else 'a list of strings'}")
    return tuple(items)


def parse_servers(section, source: str) -> list[ServerConfig]:
    """The servers of one `"mcpServers"` object; ValueError naming what is wrong."""
    if not isinstance(section, dict):
        raise ValueError('"mcpServers" must be an object: server name -> {command, args, env} '
                         'or {type: "http", url, headers}')
    if len(section) > MAX_SERVERS:
        raise ValueError(f'"mcpServers" names {len(section)} servers; at most {MAX_SERVERS} are taken')
    out: dict[str, ServerConfig] = {}
    for raw, spec in section.items():
        name, where = server_name(raw), f'"mcpServers.{raw[:40]}"'
        if name in out:
            raise ValueError(f"{where}: another server's name reads the same as {name!r} "
                             "(names keep only A-Z a-z 0-9 _ -); rename one")
        if not isinstance(spec, dict):
            raise ValueError(f"{where} must be an object")
        transport = TRANSPORTS.get(spec.get("type", "stdio"))
        if transport is None:
            raise ValueError(f'{where}.type {str(spec.get("type"))[:20]!r} is not taken: use "stdio" '
                             '(a command) or "http" (streamable HTTP); SSE servers are not supported')
        allowed = {"type", "command", "args", "env"} if transport == "stdio" else {"type", "url", "headers"}
        extra = sorted(set(spec) - allowed)
        if extra:
            raise ValueError(f"{where}: unknown key {extra[0][:40]!r} for a {transport} server "
                             f"(its keys: {', '.join(sorted(allowed))})")
        if transport == "stdio":
            command = spec.get("command")
            if not isinstance(command, str) or not command.strip() or "\x00" in command:
                raise ValueError(f"{where}.command must be the program to run")
            out[name] = ServerConfig(name, "stdio", source, command,
                                     _strings(spec.get("args", []), f"{where}.args", False),
                                     env=_strings(spec.get("env", {}), f"{where}.env", True))
        else:
            url = spec.get("url")
            if not isinstance(url, str) or not re.match(r"https?://[^\s/]", url):
                raise ValueError(f"{where}.url must be an http:// or https:// URL")
            out[name] = ServerConfig(name, "http", source, url=url,
                                     headers=_strings(spec.get("headers", {}), f"{where}.headers", True))
    return list(out.values())


def parse_mcp_json(raw: bytes, source: str) -> list[ServerConfig]:
    """The servers of a `.mcp.json` file's bytes; ValueError naming what is wrong."""
    try:
        data = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, RecursionError, ValueError) as e:
        raise ValueError(f"not a JSON object ({str(e)[:80]})") from None
    if not isinstance(data, dict) or set(data) - {"mcpServers"}:
        raise ValueError('it must be a JSON object with only the key "mcpServers"')
    return parse_servers(data.get("mcpServers", {}), source)


def server_names(raw: bytes) -> list[str]:
    """The server names a `.mcp.json` lists, read leniently (for /mcp on a file not accepted)."""
    try:
        data = json.loads(raw.decode("utf-8"))
        return [server_name(str(n)) for n in list(data["mcpServers"])[:MAX_SERVERS]]
    except Exception:  # noqa: BLE001 - any malformed file: no names to show
        return []


def expand(text: str, environ=os.environ) -> str:
    """`${VAR}` and `${VAR:-default}` filled from `environ`; KeyError naming an unset VAR
    without a default."""
    def fill(m):
        value = environ.get(m.group(1))
        if value is None and m.group(2) is None:
            raise KeyError(f"${{{m.group(1)}}} is not set")
        return value if value is not None else m.group(2)
    return _VAR.sub(fill, text)


def merge(servers: list[ServerConfig]) -> list[ServerConfig]:
    """One server per name: a later file's (a project's) replaces an earlier one's (the user's)."""
    return list({s.name: s for s in servers}.values())
