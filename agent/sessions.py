"""Saved conversations: `<project>/.nanocode/sessions/<YYYYmmdd-HHMMSS>-<id>.jsonl`.

Choice: one conversation per file, ONE JSON line, rewritten atomically (temp file + os.replace)
after every turn. The line is the conversation schema (`{"messages": [...]}`, so
`Tokenizer.render_conversation(json.loads(line))` works on it and the file is valid SFT-style
JSONL) plus a "meta" key the renderer ignores: id, created/updated, cwd, model, mode, the
approvals asked this session ({"turn", "name", "args", "reason", "answer": yes|no|always,
"rule"?}), one record per turn (steps, stop_reason, files_changed, checkpoint id for undo, the
request as typed) and, after a /rewind, "rewinds": one entry per rewind holding the messages,
turn records and approvals it took out (agent/loop/conversation.py), so "messages" is the rewound
conversation (what a resumed session shows) and nothing said is lost.
Rewriting (not appending a state per turn) keeps files small and a reader never has to pick
which line is current; a crash mid-write leaves the previous version (atomic replace).
The sessions folder gets a `.gitignore` of `*` so sessions never show up in `git status`.

Which sessions are ours: a project's .nanocode/sessions can come with the project (a cloned
repository may ship one), so every save is also recorded in a manifest in the user settings
folder (`manifest_path`: the session's real path -> sha256 of the bytes written).
`is_recorded(path, data)` is true only for bytes this user's agent wrote there. The manifest is
rewritten with a lock-free read-modify-replace (temp file + os.replace): a reader never sees half
a file, but two agents saving at the same instant can drop one entry, which only makes
`train export-sessions` skip that session by default (naming it; it can still be named).

Reading is untrusted: `read_session` opens the last component with O_NOFOLLOW|O_NONBLOCK and
reads only a regular file of at most MAX_SESSION_BYTES (a symlink, a FIFO or a device named
*.jsonl is refused, never followed or waited on); a sessions folder (or .nanocode) that is a
symlink is not listed. `parse_session` checks the shape (messages are objects with a string
role and content, meta and its turns are objects) and turns too-deep JSON into ValueError, so a caller only
has to catch OSError and ValueError. What remains: a folder swapped for a symlink between the
check and the listing (that needs a local process that can write the project anyway).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import time
from pathlib import Path

from nanocode.common import write_atomic
from tools.workspace import is_inside, user_settings_dir

MAX_SESSION_BYTES = 64 << 20
MANIFEST = "saved-sessions.json"


def sessions_dir(root) -> Path:
    return Path(root) / ".nanocode" / "sessions"


def manifest_path() -> Path:
    return user_settings_dir() / MANIFEST


def real_session_path(path) -> str:
    """The key a session has in the manifest: its folder resolved, its own name as is."""
    path = os.fspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path) or "."), os.path.basename(path))


def read_manifest() -> dict[str, str]:
    """{real path: sha256}; empty when there is none (or it is unreadable: later saves rewrite it)."""
    try:
        data = json.loads(read_session(manifest_path()))
    except (OSError, ValueError, RecursionError):
        return {}
    sessions = data.get("sessions") if isinstance(data, dict) else None
    return {k: v for k, v in (sessions or {}).items() if isinstance(k, str) and isinstance(v, str)}


def record(path, data: bytes) -> None:
    """Note that the agent wrote `data` to `path` (dropping entries whose file is gone)."""
    entries = {k: v for k, v in read_manifest().items() if os.path.lexists(k)}
    entries[real_session_path(path)] = hashlib.sha256(data).hexdigest()
    target = manifest_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, json.dumps({"sessions": entries}, indent=0).encode() + b"\n")


def is_recorded(path, data: bytes, manifest: dict[str, str]) -> bool:
    return manifest.get(real_session_path(path)) == hashlib.sha256(data).hexdigest()


class SessionStore:
    def __init__(self, root, session_id: str, path: Path | None = None):
        self.root = Path(root)
        self.id = session_id
        self.path = Path(path) if path else \
            sessions_dir(root) / f"{time.strftime('%Y%m%d-%H%M%S')}-{session_id}.jsonl"

    def fresh(self, session_id: str) -> "SessionStore":
        return SessionStore(self.root, session_id)

    def save(self, messages, meta) -> Path:
        """Write the session (atomically, replacing a link rather than following it) and record
        it in the manifest. OSError when the folder is a link out of the project or a write fails."""
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True)
        if not is_inside(self.root, os.path.realpath(folder)):
            raise OSError(f"{folder} resolves outside {self.root}: remove the link to save sessions")
        _ignore_all(folder)
        # A non-UTF-8 file name is a lone surrogate in a str: written as its JSON escape (\udce9),
        # so the file stays UTF-8 and reads back the same string.
        text = json.dumps({"messages": messages, "meta": meta}, ensure_ascii=False) + "\n"
        data = text.encode("utf-8", "backslashreplace")
        write_atomic(self.path, data)
        try:
            record(self.path, data)
        except OSError as e:
            raise OSError(f"saved {self.path}, but could not record it in {manifest_path()} ({e}): "
                          "`train export-sessions` exports it only when named") from e
        return self.path


def _ignore_all(folder: Path) -> None:
    """Create the folder's `.gitignore` unless something (even a dangling link) is there already."""
    try:
        fd = os.open(folder / ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write("*\n")


def linked_folder(folder: Path) -> Path | None:
    """The first of `folder` and its parent that is a symlink (None: neither)."""
    return next((p for p in (folder, folder.parent) if p.is_symlink()), None)


def list_sessions(root) -> list[Path]:
    """Saved sessions, oldest first (file names start with the creation time): regular files
    only, none through a symlinked sessions folder."""
    folder = sessions_dir(root)
    if linked_folder(folder) or not folder.is_dir():
        return []
    found = [(p, os.lstat(p)) for p in folder.glob("*.jsonl")]
    return [p for p, st in sorted(found, key=lambda x: (x[0].name, x[1].st_mtime)) if stat.S_ISREG(st.st_mode)]


def find_session(root, session_id: str | None = None) -> Path:
    """The latest session (session_id None) or the one whose id (or file name) is session_id.
    FileNotFoundError with a one-line message otherwise."""
    if link := linked_folder(sessions_dir(root)):
        raise FileNotFoundError(f"{link} is a symlink: sessions are only read from a real "
                                f"{sessions_dir(root)}; remove the link")
    found = list_sessions(root)
    if session_id is None:
        if not found:
            raise FileNotFoundError(f"no saved session in {sessions_dir(root)} to continue")
        return max(found, key=lambda p: p.lstat().st_mtime)
    hits = [p for p in found if p.stem == session_id or p.stem.endswith("-" + session_id)
            or p.name == session_id]
    if len(hits) != 1:
        known = ", ".join(p.stem.rsplit("-", 1)[-1] for p in found[-5:]) or "none"
        raise FileNotFoundError(f"no session {session_id!r} in {sessions_dir(root)} "
                                f"(latest ids: {known})")
    return hits[0]


def read_session(path) -> bytes:
    """The bytes of a regular file of at most MAX_SESSION_BYTES, never through a final symlink
    and never waiting on a FIFO. OSError (ValueError for a link, FIFO or oversized file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symlink: sessions are not read through links") from e
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file (a FIFO or device?): not read")
        data = f.read(MAX_SESSION_BYTES + 1)
    if len(data) > MAX_SESSION_BYTES:
        raise ValueError(f"{path} is over {MAX_SESSION_BYTES >> 20} MiB: not a saved session")
    return data


def parse_session(data: bytes, path) -> tuple[list[dict], dict]:
    """(messages, meta) of a saved session's bytes (the last line, if there are several);
    ValueError naming `path` for anything that is not one."""
    lines = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{path} is empty")
    try:
        row = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not a saved session ({e})") from e
    except RecursionError as e:
        raise ValueError(f"{path} is not a saved session (nested too deeply)") from e
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
        raise ValueError(f"{path} is not a saved session (no messages)")
    messages, meta = row["messages"], row.get("meta") or {}
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and
               isinstance(m.get("content", ""), str) for m in messages):
        raise ValueError(f"{path} is not a saved session (a message is not an object with a "
                         "string role and content)")
    turns = meta.get("turns") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or not isinstance(turns or [], list) or \
            not all(isinstance(t, dict) for t in turns or []):
        raise ValueError(f"{path} is not a saved session (meta or its turns are not objects)")
    return messages, dict(meta)


def load_session(path) -> tuple[list[dict], dict]:
    """(messages, meta) of a saved session: `read_session` then `parse_session`."""
    return parse_session(read_session(path), path)


def undone_requests(messages: list[dict], meta: dict) -> dict[int, int]:
    """The requests of a saved transcript that /undo undid: {index in `messages` of the user
    message that opened it: its number}, from the turn records ("undone", "user_index")."""
    found = {}
    for n, record in enumerate(meta.get("turns") or [], 1):
        i = record.get("user_index")
        if record.get("undone") and type(i) is int and 0 <= i < len(messages) and \
                messages[i].get("role") == "user":
            found[i] = n
    return found


def resume_note(messages: list[dict], meta: dict) -> str:
    """The line both faces show when they continue a saved session (`messages` its transcript)."""
    asked = sum(m.get("role") == "user" for m in messages)
    undone = sorted(undone_requests(messages, meta).values())
    said = (f"; {'requests' if len(undone) > 1 else 'request'} {', '.join(map(str, undone))} "
            f"undone with /undo" if undone else "")
    return f"continuing session {meta.get('id')} ({asked} earlier requests{said})"
