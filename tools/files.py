"""Read and Edit tools. Both return the exact result text of the spec and never raise.

Read: `f"{n:>5}→{line}"` per line, n the real 1-based line number; `offset` (0-based line offset,
default 0) and `limit` (default 100). The file is streamed line by line, so a huge file is paged
without loading it; a single line is read in bounded chunks and shown cut at MAX_LINE_CHARS.
Whatever `limit` says, one result holds at most MAX_READ_LINES lines and MAX_READ_BYTES bytes;
a cut result ends with the line `[truncated at N lines: use offset/limit to read on]`.
Undecodable bytes become U+FFFD. A NUL byte in the first 8 KB means `error: binary file`.
An empty file reads as `(empty file)`; an offset past the end is an `error:` line.

Edit: replaces the unique occurrence of old_string (or creates the file when old_string is absent or
empty). Copied line-number prefixes (`^ *\\d+→`) are stripped from old_string/new_string when every
line of that string has one (old_string is first tried literally; when it matches literally
with its arrows, new_string is kept literal too). CRLF files stay CRLF, a UTF-8 BOM
is kept, undecodable bytes round-trip unchanged (surrogateescape), binary files and files over
MAX_EDIT_BYTES (50 MB) are refused. Result: the path, then the whole new file line-numbered when it
has at most WHOLE_FILE_LINES lines, else the changed lines with CONTEXT_LINES lines around them.

Checked path = used path (tools/workspace.py): both tools open the symlink-resolved path through
directory descriptors without following symlinks, so a component swapped for a symlink after the
check makes the call fail (`error: path outside the project`) instead of reaching outside. Read's
`same_as` is the (st_dev, st_ino) the permission check judged (tools/permissions.Decision): a
descriptor on any other file is refused (`error: ... changed after it was checked`), so an
approved outside read reads that file or nothing. Edit
keeps the parent's descriptor: the existing file is read, the temp file created (O_EXCL,
O_NOFOLLOW), renamed over the target and cleaned up relative to it. A create links the temp file
into place (fails if another process created the name meanwhile; falls back to a rename on file
systems without hard links, where such a file would be replaced).

Errors name what the model can copy instead (tools/closest.py; plain message when nothing is close):
`file not found: x.py (closest: src/x.py, ...)`, `old_string not found in f.py; closest line 12: ...`
(a multi-line old_string: `closest lines 12-14, differing at line 13: ...`), and
`old_string is not unique (3 matches, lines 4, 9, 17); include more surrounding lines`.
"""
from __future__ import annotations

import errno
import os
import re
import secrets
import stat

from nanocode.protocol import MEMORY_CHARS, MEMORY_FILES
from tools.closest import lines_hint, path_hint
from tools.workspace import (OUTSIDE, PathOutside, PathSwapped, display, is_regular, open_dir, open_inside, open_resolved,
                             real_root, resolve)

DEFAULT_LIMIT = 100
MAX_EDIT_BYTES = 50 * 1024 * 1024
WHOLE_FILE_LINES = 40
CONTEXT_LINES = 4
MAX_LINE_CHARS = 2000
MAX_READ_LINES = 2000  # per Read result, whatever limit asks for
MAX_READ_BYTES = 100 * 1024
SNIFF_BYTES = 8192
_CHUNK = 65536
_PREFIX = re.compile(r"^ *\d+→")
NOT_FOUND = "file not found"
CHANGED = "the path changed after it was checked (a file or link was swapped in): not used; try again"


def fmt_line(n: int, line: str) -> str:
    return f"{n:>5}→{line}"


def is_binary_bytes(head: bytes) -> bool:
    return b"\x00" in head[:SNIFF_BYTES]


def _err(msg: str) -> str:
    return f"error: {msg}"


def resolve_arg(root, path: str, *, write: bool, allow_outside: bool = False):
    """A tool's path argument resolved (tools.workspace.resolve): (the path, None), or (None, the
    call's `error:` line) for a path swapped while it was checked, one outside the project, or one
    that cannot name a file."""
    try:
        return resolve(root, path, write=write, allow_outside=allow_outside), None
    except PathSwapped:
        return None, _err(CHANGED)
    except PathOutside:
        return None, _err(OUTSIDE)
    except ValueError:
        return None, _err(NOT_FOUND)


def unexpected(e: Exception) -> str:
    """Tools never raise: an unexpected exception becomes one `error:` line naming it."""
    return _err(f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__)


def get_str(args, key: str, required: bool = True):
    """(value, error). Ints are accepted and turned into strings; None counts as missing."""
    v = args.get(key) if isinstance(args, dict) else None
    if v is None:
        return None, (_err(f"missing argument {key}") if required else None)
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        return None, _err(f"invalid argument {key}: expected a string")
    return str(v), None


def get_int(args, key: str, default: int, minimum: int = 0):
    v = args.get(key) if isinstance(args, dict) else None
    if v is None or (isinstance(v, str) and v.strip() == ""):
        return default, None
    if isinstance(v, bool):
        return None, _err(f"invalid argument {key}: expected an integer")
    if isinstance(v, str):
        s = v.strip()
        if not re.fullmatch(r"[+-]?\d+", s):
            return None, _err(f"invalid argument {key}: expected an integer")
        v = int(s)
    if not isinstance(v, int):
        return None, _err(f"invalid argument {key}: expected an integer")
    if v < minimum:
        return None, _err(f"invalid argument {key}: must be at least {minimum}")
    return v, None


def _os_error(e: OSError) -> str:
    if isinstance(e, FileNotFoundError):
        return _err(NOT_FOUND)
    if isinstance(e, IsADirectoryError):
        return _err("is a directory")
    if isinstance(e, PermissionError):
        return _err("permission denied")
    return _err((e.strerror or type(e).__name__).lower())


def _read_line(f):
    """One line (bytes, without its newline) read in bounded chunks; None at EOF.
    Returns (bytes_kept, truncated)."""
    first = f.readline(_CHUNK)
    if not first:
        return None, False
    if first.endswith(b"\n") or len(first) < _CHUNK:
        return first.rstrip(b"\n"), False
    while True:  # very long line: keep the head, drop the rest
        more = f.readline(_CHUNK)
        if not more or more.endswith(b"\n") or len(more) < _CHUNK:
            return first, True


def read(root, args: dict, *, allow_outside: bool = False, same_as: tuple[int, int] | None = None) -> str:
    """The Read tool; `same_as`: only this (st_dev, st_ino) may be read (module docstring)."""
    try:
        return _read(root, args, allow_outside, same_as)
    except Exception as e:  # noqa: BLE001 - tools never raise
        return unexpected(e)


def _read(root, args, allow_outside, same_as):
    path, err = get_str(args, "file_path")
    if err:
        return err
    offset, err = get_int(args, "offset", 0, 0)
    if err:
        return err
    limit, err = get_int(args, "limit", DEFAULT_LIMIT, 1)
    if err:
        return err
    try:
        p = resolve(root, path, write=False, allow_outside=allow_outside)
        fd = open_resolved(root, p)
    except PathSwapped:
        return _err(CHANGED)
    except PathOutside:
        return _err(OUTSIDE)
    except ValueError:
        return _err(NOT_FOUND)
    except (FileNotFoundError, NotADirectoryError):
        return _err(NOT_FOUND + path_hint(root, p))
    except OSError as e:
        return _os_error(e)
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if same_as is not None and (st.st_dev, st.st_ino) != tuple(same_as):
                return _err(CHANGED)
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                return _err("is a directory")
            if not stat.S_ISREG(mode):  # FIFO, socket, device: reading could block forever
                return _err("not a regular file")
            if is_binary_bytes(f.read(SNIFF_BYTES)):
                return _err("binary file")
            f.seek(0)
            out, n, size, cut_short = [], 0, 0, False
            while True:
                raw, cut = _read_line(f)
                if raw is None:
                    break
                if n >= offset:
                    if n == 0 and raw.startswith(b"\xef\xbb\xbf"):
                        raw = raw[3:]
                    if raw.endswith(b"\r"):
                        raw = raw[:-1]
                    line = raw.decode("utf-8", "replace")
                    if cut or len(line) > MAX_LINE_CHARS:
                        line = line[:MAX_LINE_CHARS] + " … (line truncated)"
                    text = fmt_line(n + 1, line)
                    size += len(text.encode("utf-8")) + 1
                    if len(out) >= MAX_READ_LINES or size > MAX_READ_BYTES:
                        cut_short = True
                        break
                    out.append(text)
                n += 1
                if len(out) >= limit:
                    break
    except OSError as e:
        return _os_error(e)
    if n == 0:
        return "(empty file)"
    if not out:
        return _err(f"offset {offset} is past the end of the file ({n} lines)")
    if cut_short:
        out.append(f"[truncated at {len(out)} lines: use offset/limit to read on]")
    return "\n".join(out)


# ---------------------------------------------------------------- Edit

def strip_prefixes(s: str) -> str:
    """Remove `^ *\\d+→` from every line when every line of `s` carries one."""
    lines = s.split("\n")
    body = lines[:-1] if lines and lines[-1] == "" and len(lines) > 1 else lines
    if not body or not all(_PREFIX.match(l) for l in body):
        return s
    return "\n".join(_PREFIX.sub("", l, count=1) for l in lines)


def _numbered_region(text: str, start: int, end: int) -> str:
    """`text` (LF newlines) line-numbered; the whole file when short, else lines start..end
    (0-based, inclusive) with CONTEXT_LINES around them."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [l[:-1] if l.endswith("\r") else l for l in lines]
    if len(lines) <= WHOLE_FILE_LINES:
        lo, hi = 0, len(lines)
    else:
        lo = max(0, start - CONTEXT_LINES)
        hi = min(len(lines), end + 1 + CONTEXT_LINES)
    return "\n".join(fmt_line(i + 1, lines[i]) for i in range(lo, hi))


def _new_file_mode() -> int:
    """0o666 minus the process umask (mkstemp alone would leave new files 0o600)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _atomic_write(dfd: int, name: str, data: bytes, mode: int, *, create: bool):
    """Write `data` to `name` in the directory `dfd` atomically: a temp file there (O_EXCL,
    O_NOFOLLOW), fsync, chmod, then a rename over `name` (or, for `create`, a hard link that fails
    with FileExistsError when the name appeared meanwhile). The temp file never outlives a failure."""
    tmp = f".nanocode-edit-{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        if not create:
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            return
        try:
            os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            raise
        except OSError:  # no hard links here (some FUSE / FAT file systems): plain rename
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            return
        os.unlink(tmp, dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise


def _where(text: str, s: str, count: int, shown: int = 5) -> str:
    """`N matches, lines a, b, ...`: the distinct 1-based lines where the first non-overlapping
    occurrences of `s` start (one search per line, so a line holding many costs one step)."""
    lines, n, prev, at = [], 1, 0, text.find(s)
    while at != -1 and len(lines) <= shown:
        n += text.count("\n", prev, at)
        lines.append(n)
        eol = text.find("\n", at)
        prev = at
        at = text.find(s, max(at + len(s), eol + 1 if eol != -1 else len(text)))
    more = ", ..." if len(lines) > shown else ""
    named = ", ".join(map(str, lines[:shown]))
    return f"{count} matches, line{'s' if len(lines) > 1 else ''} {named}{more}"


def edit(root, args: dict) -> str:
    try:
        return _edit(root, args)
    except PathOutside:
        return _err(OUTSIDE)
    except Exception as e:  # noqa: BLE001 - tools never raise
        return _os_error(e) if isinstance(e, OSError) else unexpected(e)


def _edit(root, args):
    path, err = get_str(args, "file_path")
    if err:
        return err
    old, err = get_str(args, "old_string", required=False)
    if err:
        return err
    new, err = get_str(args, "new_string")
    if err:
        return err
    p, err = resolve_arg(root, path, write=True)
    if err:
        return err
    shown = display(root, p)
    if p == real_root(root):
        return _err("is a directory")
    try:
        dfd = open_dir(root, p.parent, create=not old)
    except (FileNotFoundError, NotADirectoryError):
        return _err(NOT_FOUND + path_hint(root, p))
    try:
        return _edit_in(root, dfd, p, shown, old, new)
    finally:
        os.close(dfd)


class EditMismatch(ValueError):
    """old_string is not in the file exactly once; message(shown) is the Edit's error."""

    def __init__(self, text: str, old: str, count: int):
        super().__init__(f"old_string found {count} times")
        self.text, self.old, self.count = text, old, count

    def message(self, shown: str) -> str:
        if self.count == 0:
            hint = lines_hint(self.text, self.old)
            return f"old_string not found in {shown}; {hint}" if hint else "old_string not found"
        return (f"old_string is not unique ({_where(self.text, self.old, self.count)}); "
                "include more surrounding lines")


def edited_text(text: str, old: str, new: str) -> tuple[str, int, int, bool]:
    """A file's text after an Edit of old -> new, by the Edit's own rules: old_string must occur
    exactly once (in a CRLF file both strings are matched with \\n line ends; line-number prefixes
    copied from a Read are stripped when the literal string is not there). What the approval's
    diff shows and what the Edit writes both come from here. -> (the new text with \\n line ends,
    where new_string starts and ends in it, whether the file is CRLF); EditMismatch otherwise."""
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    work = text.replace("\r\n", "\n") if crlf else text

    def norm(s):
        return s.replace("\r\n", "\n") if crlf else s

    old_n, new_n = norm(old), norm(strip_prefixes(new))
    count = work.count(old_n)
    if count and strip_prefixes(old) != old:
        new_n = norm(new)  # old_string's arrows are real file content: keep new_string literal too
    if count == 0:
        stripped = norm(strip_prefixes(old))
        if stripped != old_n and stripped:
            old_n, count = stripped, work.count(stripped)
    if count != 1:
        raise EditMismatch(work, old_n, count)
    idx = work.index(old_n)
    return work[:idx] + new_n + work[idx + len(old_n):], idx, idx + len(new_n), crlf


def _edit_in(root, dfd, p, shown, old, new):
    """The Edit of the resolved path `p`, every file operation relative to its parent's descriptor."""
    name = p.name
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        return _err("is a directory")
    new_s = strip_prefixes(new)

    if not old:  # create
        if st is not None:
            return _err("file already exists, use old_string to edit")
        try:
            _atomic_write(dfd, name, new_s.encode("utf-8", "surrogateescape"), _new_file_mode(), create=True)
        except FileExistsError:
            return _err("file already exists, use old_string to edit")
        body = _numbered_region(new_s, 0, new_s.count("\n"))
        return shown + ("\n" + body if body else "")

    if st is None:
        return _err(NOT_FOUND + path_hint(root, p))
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as e:
        if e.errno == errno.ELOOP:  # swapped for a symlink after the check
            raise PathOutside(name) from e
        raise
    with os.fdopen(fd, "rb") as f:
        if not is_regular(f.fileno()):
            return _err("not a regular file")
        if is_binary_bytes(f.read(SNIFF_BYTES)):
            return _err("binary file")
        fst = os.fstat(f.fileno())
        if fst.st_size > MAX_EDIT_BYTES:
            return _err(f"file too large to edit (over {MAX_EDIT_BYTES // 2**20} MB)")
        f.seek(0)
        data = f.read()
    bom = data.startswith(b"\xef\xbb\xbf")
    text = data[3:].decode("utf-8", "surrogateescape") if bom else data.decode("utf-8", "surrogateescape")
    try:
        result, idx, end_idx, crlf = edited_text(text, old, new)
    except EditMismatch as e:
        return _err(e.message(shown))
    out_text = result.replace("\n", "\r\n") if crlf else result
    out = (b"\xef\xbb\xbf" if bom else b"") + out_text.encode("utf-8", "surrogateescape")
    _atomic_write(dfd, name, out, fst.st_mode & 0o7777, create=False)
    start = result[:idx].count("\n")
    end = start + result[idx:end_idx].rstrip("\n").count("\n")
    shown_text = result.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    body = _numbered_region(shown_text, start, end)
    return shown + ("\n" + body if body else "")


def read_memory(root) -> tuple[str, str] | None:
    """(file name, text) of the project's memory file (protocol.MEMORY_FILES), cut to
    MEMORY_CHARS, or None; protocol.system_prompt renders it. Opened through the workspace guard:
    a memory file that is a symlink to a place outside the project, or not a regular file, is
    skipped, never pasted into the prompt. At most 64 x MEMORY_CHARS characters are read."""
    for name in MEMORY_FILES:
        try:
            fd, _ = open_inside(root, name)
        except (PathOutside, OSError):
            continue
        if not is_regular(fd):
            os.close(fd)
            continue
        try:
            with open(fd, encoding="utf-8", errors="replace") as f:
                text = f.read(64 * MEMORY_CHARS).strip()
        except OSError:
            continue
        if len(text) > MEMORY_CHARS:
            text = text[:MEMORY_CHARS] + f"\n[... {name} cut at {MEMORY_CHARS} characters]"
        return name, text
    return None
