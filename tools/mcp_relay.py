"""The process between nanocode and one stdio MCP server, run as a script:

    python -I -S mcp_relay.py PARENT_PID MAX_LINE -- COMMAND ARGS...

It starts the server as its own child (same process group: the MCP SDK's shutdown signals the
group, both go) and copies bytes both ways, so the SDK's stdio client (agent/mcp.py) speaks to it
as to the server. What it adds:

- a bound on what nanocode reads: a line (one JSON-RPC message) over MAX_LINE bytes is never held
  whole here or passed on. It is skipped to its newline, and if its first bytes name a request id
  an error reply for that id takes its place ("the server's reply was over N bytes"), so the call
  that asked fails at once instead of waiting out its timeout. A server that floods output
  costs nanocode at most MAX_LINE bytes a message.
- only JSON objects nested at most MAX_DEPTH levels pass. A deeper one (which the SDK's parser
  cannot read: the request would hang) is replaced by an error reply for its id, the same way;
  a line that is not JSON (a server printing its log to stdout) goes to stderr instead.
- no orphans: both this process and the server get SIGKILL when their parent dies
  (PR_SET_PDEATHSIG, Linux), so a nanocode that is killed outright leaves no server behind; an
  ordinary exit closes the server through the SDK (stdin closed, then the group signalled).
- a command that cannot be started is one line on stderr, exit status 127.
Standard library only, no site (-I -S): nothing of the project or its environment is imported.
"""
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1
MAX_DEPTH = 64
TOO_LARGE = "the server's reply was over"  # how refusal()'s error for a cut reply begins (agent/mcp_hub.py)
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\\n]|\\.){0,200}")')


def die_with_parent() -> None:
    """SIGKILL to this process when the thread that started it ends (Linux; elsewhere nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def pump_stdin(dst) -> None:
    """nanocode's bytes to the server; at EOF the server's stdin closes (its cue to exit)."""
    try:
        while chunk := os.read(0, 1 << 16):
            dst.write(chunk)
            dst.flush()
    except OSError:
        pass
    finally:
        try:
            dst.close()
        except OSError:
            pass


def refusal(head: bytes, why: str, ident=None) -> bytes:
    """The error reply that replaces a message (`ident`: its id, else the first one its first
    bytes `head` name), or b"" when there is none (a notification: dropped)."""
    m = _ID.search(head) if ident is None else None
    if ident is None and not m:
        return b""
    ident = m.group(1) if ident is None else json.dumps(ident).encode()
    return (b'{"jsonrpc":"2.0","id":' + ident + b',"error":{"code":-32603,"message":"the '
            b"server's reply " + why.encode() + b': nanocode dropped it"}}\n')


def depth(value) -> int:
    """How deeply a parsed JSON value nests (no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def checked(line: bytes) -> bytes:
    """What goes on for one whole line of the server's: the line, a refusal, or nothing."""
    try:
        value = json.loads(line)
    except RecursionError:
        return refusal(line[:512], f"was nested over {MAX_DEPTH} levels")
    except ValueError:
        if line.strip():
            write_all(2, b"stdout (not JSON): " + line[:500].rstrip() + b"\n")
        return b""
    if depth(value) > MAX_DEPTH:
        ident = value.get("id") if isinstance(value, dict) else None
        return refusal(b"", f"was nested over {MAX_DEPTH} levels", ident) if ident is not None else b""
    return line


def pump_stdout(src: int, limit: int) -> None:
    """The server's lines to nanocode, each at most `limit` bytes (module docstring)."""
    buf, head, skipping = bytearray(), b"", False
    while chunk := os.read(src, 1 << 16):
        buf += chunk
        while True:
            end = buf.find(b"\n")
            if end < 0:
                break
            if skipping:
                write_all(1, refusal(head, f"was over {limit} bytes"))
                skipping = False
            else:
                write_all(1, checked(bytes(buf[:end + 1])))
            del buf[:end + 1]
        if len(buf) > limit and not skipping:
            head, skipping = bytes(buf[:512]), True
        if skipping:
            buf.clear()


def main(argv: list[str]) -> int:
    parent, limit, sep, *command = argv
    die_with_parent()
    if os.getppid() != int(parent) or sep != "--" or not command:
        return 2  # the parent is already gone (or a malformed call)
    try:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                preexec_fn=die_with_parent)
    except (OSError, ValueError) as e:
        print(f"cannot start {command[0]!r}: {e}", file=sys.stderr, flush=True)
        return 127
    threading.Thread(target=pump_stdin, args=(proc.stdin,), daemon=True).start()
    try:
        pump_stdout(proc.stdout.fileno(), int(limit))
    except OSError:
        pass
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
