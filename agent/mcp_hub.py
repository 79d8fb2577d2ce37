"""MCP servers as the agent's tools, through the official SDK (the `mcp` package): the servers of
the settings' "mcpServers" and an accepted `.mcp.json` (tools/mcp_config.py, chosen by
tools/permissions.Policy.load), their tools offered to the model as `mcp__server__tool`.

`McpHub(root, servers)` starts every server at once on one background thread (an asyncio loop:
the SDK is async), so they start while the model loads; the first turn waits (`wait`) until each
is running or failed, so its system prompt lists their tools. A server's tools become
protocol.Tools (agent/samplers/foreign_tools.py: the schema subset the grammar writes; others are refused,
with the reason /mcp shows). `call(name, args, cancel)` runs one from the turn driver's thread
and returns the result text; it never raises. `describe()` is /mcp; `reconnect(which)` is
/mcp reconnect [NAME]: the failed servers (or all, or one) started afresh, their tools offered
again (the caller refreshes the system prompt). `close()` stops them all (also at exit). The `mcp` package (~1.6 s to import) is imported inside the functions that
start and call servers: a session without MCP servers never loads it.

Containment. stdio servers are not run inside tools/sandbox.py: a server is a program the user
chose (the user file) or approved by its exact bytes (a project's `.mcp.json`, accepted like the
project settings: tools/workspace.project_settings), as Claude Code runs them, and most need what
the sandbox withholds (the network, credentials, the user's own tools). What contains them is
that approval; their environment (the SDK passes only HOME, LOGNAME, PATH, SHELL, TERM and USER,
plus the config's `env`: API keys reach a server only when its config names them); and the
permission policy, through which every call of their tools goes (asks unless a rule allows it;
plan mode only read-only ones). They run with the project root as cwd, so `--best-of` rollouts,
each in its own copy of the project, run without them.

Robustness: a server that does not start and list its tools within `startup_timeout` (env
MCP_TIMEOUT, ms, as Claude Code; 30 s) is failed; a call gets `call_timeout` (MCP_TOOL_TIMEOUT;
120 s), then an `error:` result, and Ctrl-C abandons it. A server that exits is failed (found by
the call that meets it, or by /mcp's ping): its calls get an `error:` naming the exit and its
stderr's last line, and the session goes on. Output is bounded twice: each stdio server runs
behind tools/mcp_relay.py, which passes no message over MAX_LINE bytes into this process, and an
HTTP server's reply bodies are read through agent/mcp_http.py, which stops at MAX_LINE bytes (JSON
or SSE); such a call gets an `error:` naming the server and the limit, and the server goes on.
An HTTP server's GET listening stream is bounded over its session, in bytes and in how fast it
is reopened; past that it is closed for good, /mcp says why, and the calls go on.
Then a result is cut to MAX_RESULT characters here, and to its share of the context by the driver. stderr is
read into a STDERR_TAIL-byte tail. Every stdio server dies with this process, however it ends:
the SDK signals its process group on close, and the relay asks the kernel (PR_SET_PDEATHSIG) to
kill it and the server when their parent goes. The SDK's own log lines are silenced: they would
draw over the TUI.
"""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import hashlib
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field

import anyio

from agent.mcp_http import capped_client
from agent.samplers.foreign_tools import Refused, call_values, clean, from_schema, safe_name
from tools import mcp_relay
from tools.mcp_config import ServerConfig, expand

MAX_LINE = 4 << 20  # bytes of one message from a server
MAX_RESULT = 256 << 10  # characters of one result kept
MAX_TOOLS = 64  # tools taken from one server
MAX_PAGES = 8  # pages of a tools/list read
STDERR_TAIL = 2000
PING_TIMEOUT = 2.0


def _seconds(env: str, default: float) -> float:
    try:
        return max(0.1, float(os.environ[env]) / 1000)
    except (KeyError, ValueError):
        return default


@dataclass
class Server:
    """One configured server and what is known of it. state: starting, running, failed, stopped."""
    config: ServerConfig
    state: str = "starting"
    why: str = ""
    tools: dict = field(default_factory=dict)  # full name -> protocol.Tool
    names: dict = field(default_factory=dict)  # full name -> the server's own name for it
    refused: list = field(default_factory=list)  # (name, why) of tools not offered
    session: object = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: concurrent.futures.Future | None = None  # its life (_run), seen from other threads
    runner: asyncio.Task | None = None  # the same, in the loop
    stderr: bytearray = field(default_factory=bytearray)
    stderr_done: threading.Event = field(default_factory=threading.Event)
    http: object = None  # an HTTP server's agent/mcp_http.CappedTransport: its refused replies

    def fail(self, why: str) -> None:
        if self.state in ("starting", "running"):
            tail = self.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
            self.state, self.why = "failed", why + (f" (stderr: {clean(tail[0], 200)})" if tail else "")

    def adopt(self, listed: list) -> None:
        """The tools a tools/list gave, as Tools (MAX_TOOLS at most; refused ones noted)."""
        for t in listed[:MAX_TOOLS]:
            full = f"mcp__{self.config.name}__{safe_name(t.name, 64)}"
            if len(full) > 64 or full in self.tools:
                full = full[:57] + "_" + hashlib.sha1(t.name.encode("utf-8", "replace")).hexdigest()[:6]
            try:
                read_only = bool(t.annotations is not None and t.annotations.read_only_hint)
                self.tools[full] = from_schema(full, t.description or t.title, t.input_schema, read_only)
                self.names[full] = t.name
            except Refused as e:
                self.refused.append((full, str(e)))
        if len(listed) > MAX_TOOLS:
            self.refused.append((f"{len(listed) - MAX_TOOLS} more", f"at most {MAX_TOOLS} tools a server"))


def result_text(result) -> str:
    """A CallToolResult as the model reads it: the text of its content blocks (other media
    named, not shown; the structured content when there is no text), `error: ` before a tool
    error, cut to MAX_RESULT characters."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {clean(block.mime_type, 60)}: not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource {clean(block.uri, 200)}]")
        elif kind == "resource":
            text = getattr(block.resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {clean(block.resource.uri, 200)}: binary, not shown]")
        if sum(map(len, parts)) > MAX_RESULT:
            break
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content)[:MAX_RESULT + 1])
    text = "\n".join(parts)
    if len(text) > MAX_RESULT:
        text = text[:MAX_RESULT] + f"\n[... cut at {MAX_RESULT:,} characters]"
    if result.is_error and not text.startswith("error:"):
        text = "error: " + (text or "the tool failed and said nothing")
    return text or "(no output)"


def _quiet_sdk_logs() -> None:
    """The SDK logs parse errors and warnings with tracebacks: they would draw over the TUI."""
    log = logging.getLogger("mcp")
    log.addHandler(logging.NullHandler())
    log.propagate = False


class McpHub:
    """The servers of one session (module docstring). `ignored`: (name, why) of servers in files
    that do not apply (a `.mcp.json` not accepted), shown by /mcp as not approved."""

    def __init__(self, root, servers: list[ServerConfig], ignored=(), startup_timeout: float | None = None,
                 call_timeout: float | None = None):
        self.root = os.fspath(root)
        self.servers = {c.name: Server(c) for c in servers}
        self.ignored = list(ignored)
        self.startup_timeout = startup_timeout or _seconds("MCP_TIMEOUT", 30.0)
        self.call_timeout = call_timeout or _seconds("MCP_TOOL_TIMEOUT", 120.0)
        self._loop, self._closed = None, False
        if self.servers:
            _quiet_sdk_logs()
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, daemon=True, name="mcp").start()
            for s in self.servers.values():
                self._start(s)
            atexit.register(self.close)

    # ---- the driver's side (any thread) ----------------------------------------------------------
    def wait(self) -> None:
        """Until no server is still starting (each is bounded by startup_timeout)."""
        deadline = time.monotonic() + self.startup_timeout + 5
        while any(s.state == "starting" for s in self.servers.values()) and time.monotonic() < deadline:
            time.sleep(0.02)

    def tools(self) -> dict:
        """name -> protocol.Tool of every running server's offered tools."""
        return {n: t for s in self.servers.values() if s.state == "running" for n, t in s.tools.items()}

    def call(self, name: str, args: dict, cancel: threading.Event | None = None) -> str:
        """Run one call (its shape checked before: protocol.check_call); the result text."""
        s = next((s for s in self.servers.values() if name in s.tools), None)
        if s is None or s.state != "running":
            why = f" ({s.why})" if s is not None and s.why else ""
            return f"error: {name}'s MCP server is not running{why}; /mcp shows the servers"
        values, error = call_values(s.tools[name], args)
        if error:
            return error
        future = asyncio.run_coroutine_threadsafe(self._call(s, name, values), self._loop)
        while True:
            try:
                return future.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if cancel is not None and cancel.is_set():
                    future.cancel()
                    return "error: cancelled by user while the MCP tool ran (the server may have acted on it)"

    def describe(self, names=None) -> str:
        """/mcp: each server (or those `names`), its state and its tools; the servers not approved."""
        self._ping()
        lines = []
        for s in self.servers.values():
            if names is not None and s.config.name not in names:
                continue
            where = s.config.url if s.config.transport == "http" else s.config.command
            state = s.state + (f": {s.why}" if s.why else "")
            lines.append(f"{s.config.name} ({s.config.transport} {clean(where, 80)}; {s.config.source}): {state}")
            if s.http is not None and s.http.listen_why:
                lines.append(f"  listening stream closed: the server {s.http.listen_why}; nanocode opens it no "
                             "more (its calls go on)")
            for t in s.tools.values() if s.state == "running" else ():
                lines.append(f"  {t.prompt[:160]}" + ("" if t.changes_files else "  [read-only]"))
            lines += [f"  not offered: {n}: {why}" for n, why in s.refused]
        lines += [f"{name}: not approved: {why}" for name, why in self.ignored if names is None]
        return "\n".join(lines) or "no MCP servers"

    def reconnect(self, which: str = "") -> str:
        """/mcp reconnect [NAME]: restart the failed servers ("": those found failed now, after a
        ping), every one ("all") or the one named; wait until each runs or fails again (bounded
        by startup_timeout) and describe them. Their tools are in tools() once they run."""
        self._ping()
        if which and which != "all" and which not in self.servers:
            ignored = dict(self.ignored)
            if which in ignored:
                return f"error: the MCP server {which} is not approved: {ignored[which]}"
            known = ", ".join(self.servers) or "none"
            return f"error: no MCP server named {clean(which, 80)} (configured: {known}); /mcp lists them"
        if self._loop is None or self._closed:
            return "no MCP servers to reconnect"
        old = [s for s in self.servers.values()
               if which == "all" or s.config.name == which or (not which and s.state == "failed")]
        if not old:
            return "no MCP server has failed; `/mcp reconnect all` restarts every one, `/mcp reconnect NAME` one"
        for s in old:
            self._loop.call_soon_threadsafe(self._stop, s)
        concurrent.futures.wait([s.task for s in old if s.task], 6.0)
        for s in old:
            self.servers[s.config.name] = fresh = Server(s.config)
            self._start(fresh)
        self.wait()
        return self.describe([s.config.name for s in old])

    def close(self, timeout: float = 6.0) -> None:
        """Stop every server (stdin closed, then the group signalled: the SDK) and the loop."""
        if self._loop is None or self._closed:
            return
        self._closed = True
        for s in self.servers.values():
            self._loop.call_soon_threadsafe(self._stop, s)
        concurrent.futures.wait([s.task for s in self.servers.values() if s.task], timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)

    def _start(self, s: Server) -> None:
        s.task = asyncio.run_coroutine_threadsafe(self._run(s), self._loop)

    def _ping(self) -> None:
        """Ping the running servers (bounded), so that those which exited show as failed."""
        if self._loop is not None and not self._closed:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._ping_all(), self._loop).result(PING_TIMEOUT + 1)

    # ---- the loop's side ------------------------------------------------------------------------
    @staticmethod
    def _stop(s: Server) -> None:
        """A running (or failed) server's life ends at its stop; a starting one's is cancelled (the
        SDK's shutdown still runs, shielded, so its process is ended before the task is done)."""
        s.stop.set()
        if s.state == "starting" and s.runner is not None:
            s.runner.cancel()

    async def _run(self, s: Server) -> None:
        """One server's life: connect, initialize, list its tools, wait for close."""
        from mcp import ClientSession
        s.runner = asyncio.current_task()
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._open(s, stack)
                session = await stack.enter_async_context(ClientSession(read, write))
                try:
                    with anyio.fail_after(self.startup_timeout):
                        await session.initialize()
                        listed = await self._list(session)
                except TimeoutError:
                    return s.fail(f"did not start within {self.startup_timeout:g} s")
                s.adopt(listed)
                s.session, s.state = session, "running"
                await s.stop.wait()
                s.state = "stopped"
        except Exception as e:  # noqa: BLE001 - any failure of a server is its state, never ours
            for _ in range(25):  # the relay's last words ("cannot start ...") on their way
                if s.stderr_done.is_set():
                    break
                await asyncio.sleep(0.02)
            s.fail(_failure(e))

    async def _open(self, s: Server, stack):
        """The transport's (read, write) streams, entered on `stack`."""
        cfg = s.config
        if cfg.transport == "http":
            from mcp.client.streamable_http import streamable_http_client
            client, s.http = capped_client({k: expand(v) for k, v in cfg.headers}, MAX_LINE)
            await stack.enter_async_context(client)
            return await stack.enter_async_context(streamable_http_client(
                expand(cfg.url), http_client=client, max_sse_event_size=MAX_LINE))
        from mcp.client.stdio import StdioServerParameters, stdio_client
        relay = [sys.executable, "-I", "-S", mcp_relay.__file__, str(os.getpid()), str(MAX_LINE), "--"]
        params = StdioServerParameters(command=relay[0], args=relay[1:] + [expand(cfg.command)] + [
            expand(a) for a in cfg.args], env={k: expand(v) for k, v in cfg.env}, cwd=self.root)
        r, w = os.pipe()
        threading.Thread(target=_read_tail, args=(r, s), daemon=True).start()
        with os.fdopen(w, "w") as errlog:  # ours is closed once the child has its copy
            return await stack.enter_async_context(stdio_client(params, errlog=errlog))

    async def _list(self, session) -> list:
        from mcp.types import PaginatedRequestParams
        tools, cursor = [], None
        for _ in range(MAX_PAGES):
            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools += page.tools
            cursor = page.next_cursor
            if not cursor or len(tools) > MAX_TOOLS:
                break
        return tools

    async def _call(self, s: Server, name: str, values: dict) -> str:
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED
        refused = s.http.refused if s.http is not None else 0
        try:
            with anyio.fail_after(self.call_timeout):
                return result_text(await s.session.call_tool(s.names[name], values))
        except TimeoutError:
            return (f"error: {name} did not answer within {self.call_timeout:g} s; nanocode stopped "
                    "waiting (the server may still be running it)")
        except MCPError as e:
            if s.http is not None and s.http.refused > refused:  # its reply was cut: agent/mcp_http.py
                return f"error: the MCP server {s.config.name} {s.http.why}"
            if e.message.startswith(mcp_relay.TOO_LARGE):  # the stdio relay's cut
                return (f"error: the MCP server {s.config.name} sent a reply over nanocode's limit of "
                        f"{MAX_LINE:,} bytes: nanocode dropped it")
            if e.code == CONNECTION_CLOSED:
                s.fail("the server exited")
                return f"error: the MCP server {s.config.name} stopped: {s.why}; /mcp shows it"
            return f"error: {clean(e.message, 500)}"
        except Exception as e:  # noqa: BLE001 - a reply the SDK could not read or validate
            return f"error: the MCP server's reply could not be read: {_failure(e)}"

    async def _ping_all(self) -> None:
        async def ping(s):
            from mcp import MCPError
            refused = s.http.refused if s.http is not None else 0
            try:
                with anyio.fail_after(PING_TIMEOUT):
                    await s.session.send_ping()
            except MCPError:
                if s.http is None or s.http.refused == refused:  # a cut reply: that ping's alone
                    s.fail("the server exited")
            except TimeoutError:
                pass  # busy or stuck: its calls time out on their own
        await asyncio.gather(*(ping(s) for s in self.servers.values() if s.state == "running"))


def _failure(e: BaseException) -> str:
    """One line on why a server failed (the first leaf of an exception group)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    text = clean(str(e), 200)
    if "Connection closed" in text:
        return "the server exited"
    if type(e).__name__ == "MCPError":  # the server's (or the relay's) own words
        return text
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _read_tail(fd: int, s: Server) -> None:
    """Read a server's stderr to its end, keeping the last STDERR_TAIL bytes."""
    try:
        with os.fdopen(fd, "rb", buffering=0) as f:
            while chunk := f.read(1 << 16):
                s.stderr += chunk
                del s.stderr[:-STDERR_TAIL]
    finally:
        s.stderr_done.set()
