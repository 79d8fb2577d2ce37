"""Workspace guard: every tool path is resolved against the project root, symlinks included.

`resolve(root, path, write=...)` turns a (relative or absolute) path into an absolute path with all
symlinks resolved (`os.path.realpath`, non-strict so missing tails are allowed) and raises
`PathOutside` when the result is not inside the (also resolved) root. Reads outside the root are
allowed only when the caller passes `allow_outside=True` (the permission layer asks the user first);
writes outside are always refused.

What remains: resolution is a check at one moment. A process that swaps a path component for a
symlink between the check and the use (TOCTOU) can still redirect the access; the Edit tool narrows
this by re-checking right before its atomic rename, but does not use openat/O_NOFOLLOW per component.
"""
from __future__ import annotations

import os
from pathlib import Path


class PathOutside(Exception):
    """The path resolves (after following symlinks) to a place outside the project root."""


def real_root(root) -> Path:
    return Path(os.path.realpath(os.fspath(root)))


def is_inside(root, path) -> bool:
    """True when the already-resolved `path` is the root or below it (`root` is resolved here)."""
    r = os.fspath(real_root(root))
    p = os.fspath(path)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def resolve(root, path, *, write: bool, allow_outside: bool = False) -> Path:
    """Absolute, symlink-free path of `path` (relative paths are taken from `root`).

    Raises PathOutside when it lies outside the root, unless `allow_outside` and not `write`.
    Raises ValueError for paths the OS cannot represent (e.g. containing NUL)."""
    p = os.fspath(path)
    if "\x00" in p:
        raise ValueError("path contains a NUL byte")
    p = os.path.expanduser(p) if p.startswith("~") else p
    rroot = real_root(root)
    full = p if os.path.isabs(p) else os.path.join(os.fspath(rroot), p)
    resolved = Path(os.path.realpath(full))
    if not is_inside(rroot, resolved) and (write or not allow_outside):
        raise PathOutside(p)
    return resolved


def display(root, path) -> str:
    """Path as shown to the model: relative to the root when inside it, else absolute; never
    contains undecodable surrogates (non-UTF-8 names are shown with U+FFFD)."""
    rroot = os.fspath(real_root(root))
    p = os.fspath(path)
    if is_inside(rroot, p):
        p = os.path.relpath(p, rroot)
    return p.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
