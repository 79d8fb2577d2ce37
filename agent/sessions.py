"""Saved conversations: `<project>/.nanocode/sessions/<YYYYmmdd-HHMMSS>-<id>.jsonl`.

Choice: one conversation per file, ONE JSON line, rewritten atomically (temp file + os.replace)
after every turn. The line is the conversation schema (`{"messages": [...]}`, so
`Tokenizer.render_conversation(json.loads(line))` works on it and the file is valid SFT-style
JSONL) plus a "meta" key the renderer ignores: id, created/updated, cwd, model, mode, the
approvals asked this session ({"turn", "name", "args", "reason", "answer": yes|no|always,
"rule"?}) and one record per turn (steps, stop_reason, files_changed, checkpoint id for undo).
Rewriting (not appending a state per turn) keeps files small and a reader never has to pick
which line is current; a crash mid-write leaves the previous version (atomic replace).
The sessions folder gets a `.gitignore` of `*` so sessions never show up in `git status`.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path


def sessions_dir(root) -> Path:
    return Path(root) / ".nanocode" / "sessions"


class SessionStore:
    def __init__(self, root, session_id: str, path: Path | None = None):
        self.root = Path(root)
        self.id = session_id
        self.path = Path(path) if path else \
            sessions_dir(root) / f"{time.strftime('%Y%m%d-%H%M%S')}-{session_id}.jsonl"

    def fresh(self, session_id: str) -> "SessionStore":
        return SessionStore(self.root, session_id)

    def save(self, messages, meta) -> Path:
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True)
        ignore = folder / ".gitignore"
        if not ignore.exists():
            ignore.write_text("*\n")
        line = json.dumps({"messages": messages, "meta": meta}, ensure_ascii=False)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".session.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(line + "\n")
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        return self.path


def list_sessions(root) -> list[Path]:
    """Saved sessions, oldest first (file names start with the creation time)."""
    folder = sessions_dir(root)
    if not folder.is_dir():
        return []
    return sorted(folder.glob("*.jsonl"), key=lambda p: (p.name, p.stat().st_mtime))


def find_session(root, session_id: str | None = None) -> Path:
    """The latest session (session_id None) or the one whose id (or file name) is session_id.
    FileNotFoundError with a one-line message otherwise."""
    found = list_sessions(root)
    if session_id is None:
        if not found:
            raise FileNotFoundError(f"no saved session in {sessions_dir(root)} to continue")
        return max(found, key=lambda p: p.stat().st_mtime)
    hits = [p for p in found if p.stem == session_id or p.stem.endswith("-" + session_id)
            or p.name == session_id]
    if len(hits) != 1:
        known = ", ".join(p.stem.rsplit("-", 1)[-1] for p in found[-5:]) or "none"
        raise FileNotFoundError(f"no session {session_id!r} in {sessions_dir(root)} "
                                f"(latest ids: {known})")
    return hits[0]


def load_session(path) -> tuple[list[dict], dict]:
    """(messages, meta) of a saved session (the last line, if a file has several)."""
    lines = [ln for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{path} is empty")
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not a saved session ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise ValueError(f"{path} is not a saved session (no messages)")
    return data["messages"], dict(data.get("meta") or {})
