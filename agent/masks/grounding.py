"""The project as the grammar sees it: which paths exist, what an Edit's old_string may be, which
words a Grep pattern may name, what a backticked span in prose may say. agent/masks/grammar.py and
agent/masks/prose.py walk these automata with the vocabulary, so an argument or a name the project
cannot back is never sampled, whatever the tokenizer split.

Paths. The files `git ls-files --cached --others --exclude-standard` lists for the root (less
those gone from disk or outside a sparse checkout) or, outside a work tree, a walk that skips
tools.grep.SKIP_DIRS; the directories they imply; relative to the root, as the tools write
them. Names that are not UTF-8 cannot be written and are left out. Path-like strings of the
conversation (`add_text`: runs with a '/' or '.' and without blanks, quotes, brackets or
`,;:=*?`) that name an existing file or directory join them as written (relative or absolute); a nonexistent one never
does. Read takes a text file (a binary one is left out: Read would only say so); Grep a file, a
directory ('dir' or 'dir/') or '.'. Above MAX_PATHS files, or when listing takes over
INDEX_SECONDS, paths are free text and a note says so: the first call stays bounded.

Edit. An existing file (text: no NUL in its first 8 KB, non-empty, at most tools.files'
MAX_EDIT_BYTES, inside the root; a binary file is never offered, Edit would refuse it) or a new
file: an existing directory (or the root) plus one new name of NAME_CHARS, at most NAME_BYTES,
not dots only, that nothing on disk has yet (no new directories: Edit would make them, but a
typo'd directory is what the model invents). old_string is matched against the file's bytes as
Edit sees them (BOM cut, CRLF read as LF when every newline is CRLF), read when the path is
complete and cached by (path, inode, mtime, ctime, size): a file changed between Read and Edit
is followed. Files over ANCHOR_BYTES or not UTF-8 leave old_string free (with a note).

Grep. Words are identifier runs (`[A-Za-z0-9_]+`, at most WORD_LEN bytes) of the listed text
files (at most WORD_FILES files and WORD_BYTES read, scanned on the first Grep or prose mask,
rescanned only where a file changed) and of the conversation. With `names` (the default) they
are kept whole and a pattern's identifier run may close only at a whole word (`def p il\\(` is
never written); with names off, as the sorted suffixes of every word, and a run need only lie
inside one (one inside a known word adds nothing). Words only accumulate (a stale one costs a
`no matches found`); new ones cost one merge of the sorted list.

Prose (names only). `spans()`: the texts the word scan reads (UTF-8 ones), the listing and every
add_text but the model's own prose (add_message), as an agent/masks/spans.py SpanText, with the Citations of the listed files; agent/masks/prose.py masks
backticked spans with it. None (free prose) with names off or when the project is not listed.

Everything is lazy: the constructor touches nothing; the listing runs when a path argument or
(names on) a prose mask is first grounded, the word scan on the first grounded pattern or prose
mask. `refresh()` marks the tree changed;
the next use lists again and keeps the same index objects (and so the grammar's memoised masks)
when the listing is unchanged; checks that read the disk are redone.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from collections import OrderedDict

from agent.masks.spans import BOM, SPAN_TEXT_BYTES, AnchorText, Citations, SpanText, anchor_bytes
from agent.masks.vocab_trie import SortedStrings
from tools.files import MAX_EDIT_BYTES, SNIFF_BYTES, is_binary_bytes
from tools.git import git
from tools.grep import SKIP_DIRS
from tools.workspace import PathOutside, resolve

MAX_PATHS = 50_000
INDEX_SECONDS = 5.0
NAME_BYTES = 128
NAME_CHARS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
ANCHOR_BYTES = 512 * 1024
ANCHORS_KEPT = 8
WORD_FILES = 2000
WORD_BYTES = 4 * 1024 * 1024
WORD_FILE_BYTES = 512 * 1024
WORD_LEN = 64
WORD_SUFFIXES = 1_000_000
TEXT_BYTES = 256 * 1024   # of one add_text call
TALK_CANDIDATES = 2000    # path-like strings waiting to be checked, at most
WORD = re.compile(rb"[A-Za-z0-9_]+")
PATH_LIKE = re.compile(r"[^\s\"'`<>|,;:()\[\]{}*?=]+")


class Words(SortedStrings):
    """Grep's known words: whole (`whole`, names on) or every word's suffixes (names off)."""

    def __init__(self, strings, whole: bool):
        super().__init__(strings)
        self.whole = whole

    def closes(self, run: bytes) -> bool:
        """Whether an identifier run may end here (it is already known to be a prefix)."""
        return not self.whole or self.holds(run)


class PathSet:
    """Grep.path: a listed file or directory ('dir' or 'dir/') or '.'; a value may stop at
    `accept`. Every listed string is admissible, so nothing ahead needs checking."""
    checked = False

    def __init__(self, items, accept):
        self.strings = SortedStrings(items)
        self.accept = frozenset(accept)

    def closable(self, q: bytes) -> bool:
        return q in self.accept


class TextPaths:
    """Read.file_path: a listed regular file that is not binary (Read would only say so).
    `live(q)`: some admissible value starts with q. Disk checks are cached for the life of
    the object: the Grounding makes new ones after every refresh."""
    checked = True
    edit = False

    def __init__(self, root: str, strings: SortedStrings, files: set):
        self.root, self.strings, self.files = root, strings, files
        self._usable: dict[bytes, bool] = {}

    def closable(self, q: bytes) -> bool:
        return q in self.files and self.usable(q)

    def live(self, q: bytes) -> bool:
        lo, hi = self.strings.span(q)
        return any(s.endswith(b"/") or self.usable(s) for s in self.strings.items[lo:hi])

    def usable(self, q: bytes) -> bool:
        ok = self._usable.get(q)
        if ok is None:
            ok = self._usable[q] = _text_file(self.root, os.fsdecode(q), self.edit)
        return ok


class EditPaths(TextPaths):
    """Edit.file_path: an existing editable file (text, non-empty, at most MAX_EDIT_BYTES,
    inside the root), or a new name in an existing directory. A prefix q is in "new name" mode
    when its directory part (up to the last '/') is the root or a known directory and the rest
    is NAME_CHARS; `name_room(q)` is the bytes that name may still grow by, None otherwise."""
    edit = True

    def __init__(self, root: str, strings: SortedStrings, files: set, dirs: set):
        super().__init__(root, strings, files)
        self.dirs = dirs

    def name_room(self, q: bytes) -> int | None:
        cut = q.rfind(b"/") + 1
        if cut and q[:cut - 1] not in self.dirs:
            return None
        name = q[cut:]
        if len(name) > NAME_BYTES or name.translate(None, NAME_CHARS):
            return None
        return NAME_BYTES - len(name)

    def closable(self, q: bytes) -> bool:
        if q in self.files:
            return self.usable(q)
        name = q[q.rfind(b"/") + 1:]
        return (self.name_room(q) is not None and name.strip(b".") != b"" and q not in self.dirs
                and not os.path.lexists(os.path.join(self.root, os.fsdecode(q))))

    def existing(self, q: bytes) -> bool:
        """Whether the complete value q names a file (then old_string comes next)."""
        return q in self.files

    def live(self, q: bytes) -> bool:
        room = self.name_room(q)
        return room is not None and (room > 0 or self.closable(q)) or super().live(q)


def _text_file(root: str, path: str, edit: bool) -> bool:
    """A regular file with no NUL in its first 8 KB; for Edit also inside the root, non-empty
    (past a BOM) and at most MAX_EDIT_BYTES."""
    full = os.path.join(root, path)
    try:
        if edit:
            resolve(root, path, write=True)
        if not os.path.isfile(full):
            return False
        size = os.path.getsize(full)
        with open(full, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except (OSError, ValueError, PathOutside):
        return False
    if is_binary_bytes(head):
        return False
    return not edit or (size <= MAX_EDIT_BYTES and bool(head.removeprefix(BOM)))


class Grounding:
    """The project at `root` for the grammar. The loop calls `add_text` with every message's
    text before a reply, `refresh()` after a call that may change the tree, and shows `notes`
    (human-readable fallbacks, each said once). The grammar asks `read_paths()`,
    `grep_paths()`, `edit_paths()`, `anchor(file_path, pad)`, `words()` and `spans(pad)`; None
    means free text. names=False: Grep words as substrings and free prose (the lever to measure
    whole names against)."""

    def __init__(self, root, names: bool = True):
        self.root, self.names = os.path.realpath(os.fspath(root)), names
        self.notes: list[str] = []
        self._stale = True
        self._listed: list[bytes] | None = None  # the files the last listing gave, sorted
        self._known: set[bytes] = set()  # the same, as a set
        self._sets: tuple | None = None  # see _build_sets
        self._checked: list = [None, None, None]  # TextPaths, EditPaths, Citations since the last refresh
        self._pending: set[str] = set()   # path-like strings from the conversation, unchecked
        self._talk_files: set[bytes] = set()
        self._talk_dirs: set[bytes] = set()
        self._talk_inside: set[bytes] = set()
        self._anchors: OrderedDict = OrderedDict()
        self._new_words: set[bytes] = set()  # seen, not yet in self._words
        self._scanned: dict[bytes, tuple] = {}
        self._words: Words | None = None
        self._span_text = SpanText()
        self._worded: set[bytes] = set()  # the words self._words holds
        self._words_stale = True

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def refresh(self) -> None:
        self._stale = self._words_stale = True

    def add_message(self, message: dict) -> None:
        """A conversation message: its content and its tool call's argument values. The model's
        own prose gives words and paths but no backticked spans: a span it writes comes from the
        request, a tool output, a call's arguments or the project, never from its own words."""
        args = (message.get("tool_call") or {}).get("args", {})
        self.add_text("\n".join(map(str, args.values())))
        self.add_text(message["content"], spans=message["role"] != "assistant")

    def add_text(self, text: str, spans: bool = True) -> None:
        raw = text.encode("utf-8", "replace")[:TEXT_BYTES]
        self._add_words(WORD.findall(raw))
        if self.names and spans:
            self._span_text.add(raw)
        for m in PATH_LIKE.finditer(raw.decode("utf-8", "ignore")):
            s = m.group().rstrip(".")  # a sentence's full stop is not part of a path
            if len(self._pending) >= TALK_CANDIDATES:
                break
            if "/" in s or "." in s:  # plain words are not worth a stat
                self._pending.add(s)

    # ---- paths --------------------------------------------------------------------------------
    def read_paths(self) -> TextPaths | None:
        return self._fresh(0, TextPaths)

    def grep_paths(self) -> PathSet | None:
        return self._paths()[0]

    def edit_paths(self) -> EditPaths | None:
        return self._fresh(1, EditPaths)

    def _fresh(self, i: int, cls):
        """The Read (0) or Edit (1) paths, remade after every refresh (their disk checks)."""
        sets = self._paths()
        if sets[i + 1] is None:
            return None
        if self._checked[i] is None:
            self._checked[i] = cls(self.root, *sets[i + 1])
        return self._checked[i]

    def _paths(self) -> tuple:
        changed = self._sets is None
        if self._stale:
            listed = self._list()
            changed |= listed != self._listed
            self._listed, self._known, self._stale = listed, set(listed or ()), False
            self._checked = [None, None, None]
        if self._pending and self._listed is not None:
            changed |= self._check_talk_paths()
        if changed:
            self._sets, self._checked = self._build_sets(), [None, None, None]
        return self._sets

    def _build_sets(self) -> tuple:
        """Grep's PathSet, then the arguments of TextPaths and EditPaths (None: free text)."""
        if self._listed is None:
            return None, None, None
        listed = self._known
        implied = _parents(listed | {f for f in self._talk_files if not f.startswith(b"/")})
        files, dirs = listed | self._talk_files, implied | self._talk_dirs
        slashed = {d + b"/" for d in dirs}
        grep = PathSet(files | slashed | {b"."}, files | dirs | slashed | {b"."})
        read = (SortedStrings(files), files) if files else None
        if read is None:
            self.note("no files to ground Read paths: Read paths are free text")
        edit_files = listed | (self._talk_files & self._talk_inside)
        edit_dirs = implied | (self._talk_dirs & self._talk_inside)
        edit = SortedStrings(edit_files | {d + b"/" for d in edit_dirs}), edit_files, edit_dirs
        return grep, read, edit

    def _list(self) -> list[bytes] | None:
        """The files git lists for the root (tags: H tracked, M unmerged, ? untracked; R says
        a tracked file is gone from disk, S that it is outside a sparse checkout), else (no
        work tree, or none of its files listed, e.g. a home directory's repo ignoring it) a walk."""
        try:
            r = git(self.root, "ls-files", "-z", "-t", "--cached", "--deleted", "--others",
                    "--exclude-standard", timeout=INDEX_SECONDS)
        except subprocess.TimeoutExpired:
            self.note(f"listing the project's files took over {INDEX_SECONDS:g} s: paths are free text")
            return None
        except OSError:
            return self._walk()
        entries = [e for e in r.stdout.split(b"\0") if len(e) > 2]
        gone = {e[2:] for e in entries if e[:1] == b"R"}
        names = {e[2:] for e in entries if e[:1] in b"HM?"} - gone
        if r.returncode != 0 or not names:  # not a work tree, or one that ignores the root
            return self._walk()
        if len(names) > MAX_PATHS:
            return self._too_many(len(names))
        return sorted(n for n in names if _utf8(n))

    def _walk(self) -> list[bytes] | None:
        out, deadline = [], time.monotonic() + INDEX_SECONDS
        for cur, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            rel = os.path.relpath(cur, self.root)
            for f in files:
                p = os.fsencode(f if rel == "." else os.path.join(rel, f))
                if _utf8(p):
                    out.append(p)
            if len(out) > MAX_PATHS:
                return self._too_many(len(out), more=True)
            if time.monotonic() > deadline:
                self.note(f"listing the project's files took over {INDEX_SECONDS:g} s: paths are free text")
                return None
        return sorted(out)

    def _too_many(self, n: int, more: bool = False) -> None:
        self.note(f"project too large to ground paths ({n}{'+' if more else ''} files, over "
                  f"{MAX_PATHS}): paths are free text")
        return None

    def _check_talk_paths(self) -> bool:
        added = False
        for s in self._pending:
            b = os.fsencode(s)
            if b in self._known or b in self._talk_files or b in self._talk_dirs or not b:
                continue
            full = s if os.path.isabs(s) else os.path.join(self.root, s)
            if os.path.isfile(full):
                self._talk_files.add(b)
            elif os.path.isdir(full):
                b = b.rstrip(b"/") or b
                self._talk_dirs.add(b)
            else:
                continue
            added = True
            try:
                resolve(self.root, s, write=True)
                self._talk_inside.add(b)
            except (PathOutside, ValueError):
                pass
        self._pending.clear()
        return added

    # ---- Edit's old_string --------------------------------------------------------------------
    def anchor(self, file_path: str, pad: int) -> AnchorText | None:
        """The current bytes of `file_path` to ground old_string on; `pad`: how far past the end
        a walk may look (the longest token + 1)."""
        full = os.path.join(self.root, file_path)
        try:
            st = os.stat(full)
        except (OSError, ValueError):
            return None
        key = (full, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, pad)
        if key in self._anchors:
            self._anchors.move_to_end(key)
            return self._anchors[key]
        if st.st_size > ANCHOR_BYTES:
            self.note(f"{file_path} is over {ANCHOR_BYTES // 1024} KiB: its Edit old_string is free text")
            return None
        try:
            with open(full, "rb") as f:
                data = anchor_bytes(f.read(ANCHOR_BYTES + 1))
        except OSError:
            return None
        if data is None:
            self.note(f"{file_path} is not UTF-8 text: its Edit old_string is free text")
            return None
        self._anchors[key] = a = AnchorText(data, pad)
        if len(self._anchors) > ANCHORS_KEPT:
            self._anchors.popitem(last=False)
        return a

    # ---- Grep's words -------------------------------------------------------------------------
    def words(self) -> Words | None:
        """The known words (whole, or every word's suffixes with names off), or None (free
        patterns) when the project could not be listed."""
        if not self._scan():
            self.note("project files not indexed: Grep patterns are free text")
            return None
        if self._words is None or self._new_words:
            new = self._new_words if self.names else {  # a word inside a known one adds no suffix
                w[i:] for w in self._new_words if self._words is None or not self._words.has_prefix(w)
                for i in range(len(w))}
            if self._words is None:
                self._words = Words(new, self.names)
            elif len(self._words.items) + len(new) > WORD_SUFFIXES:
                self.note(f"over {WORD_SUFFIXES} word strings: later words are not admissible in Grep patterns")
            elif new:
                self._words = self._words.grown(new)
            self._worded |= self._new_words
            self._new_words.clear()
        return self._words

    def spans(self, pad: int) -> SpanText | None:
        """The context of backticked spans and `path:line` citations, synced (`pad`: how far
        past the end a walk may look), or None (free prose): names off, or the project could
        not be listed."""
        if not self.names:
            return None
        if not self._scan():
            self.note("project files not indexed: prose is free text")
            return None
        if self._checked[2] is None:
            read = self._sets[1]
            self._checked[2] = Citations(self.root, read[1] if read else ())
            self._span_text.add(b"\n".join(sorted(self._checked[2].files)))  # paths are names too
        if not self._span_text.sync(pad, self._checked[2]):
            self.note(f"over {SPAN_TEXT_BYTES >> 20} MiB of context: later text is not admissible in backticks")
        return self._span_text

    def _scan(self) -> bool:
        """List the project and scan it when stale; False when it could not be listed."""
        self._paths()
        if self._listed is None:
            return False
        if self._words_stale:
            self._scan_words()
            self._words_stale = False
        return True

    def _add_words(self, words) -> None:
        self._new_words.update(w for w in words if len(w) <= WORD_LEN and w not in self._worded)

    def _scan_words(self) -> None:
        files = read = 0
        for rel in self._listed:
            if files >= WORD_FILES or read >= WORD_BYTES:
                self.note(f"Grep words indexed from the first {files} files ({read >> 10} KiB) only; "
                          "others count once seen in the conversation")
                return
            full = os.path.join(self.root, os.fsdecode(rel))
            try:
                st = os.stat(full)
            except OSError:
                continue
            if not os.path.isfile(full) or st.st_size > WORD_FILE_BYTES:
                continue
            files, read = files + 1, read + st.st_size
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._scanned.get(rel) == stamp:
                continue
            self._scanned[rel] = stamp
            try:
                with open(full, "rb") as f:
                    data = f.read(WORD_FILE_BYTES)
            except OSError:
                continue
            if not is_binary_bytes(data):
                self._add_words(WORD.findall(data))
                if self.names and _utf8(data):
                    self._span_text.add(data)


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _parents(files) -> set[bytes]:
    """Every directory the relative paths imply (not the root)."""
    dirs: set[bytes] = set()
    for f in files:
        cut = f.rfind(b"/")
        while cut > 0:
            f = f[:cut]
            if f in dirs:
                break
            dirs.add(f)
            cut = f.rfind(b"/")
    return dirs
