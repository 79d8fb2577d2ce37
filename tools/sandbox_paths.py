"""The project's protected paths for the Bash sandbox (tools/sandbox.py mounts them read-only):
what git or nanocode would later run or trust on the user's behalf, found from every git config
scope and through the symlinks on the way; `guard`/`restore` handle the ones a mount cannot
cover (missing paths, symlinks) after the call; `loosen_undo_refs` keeps /undo's refs where a
command cannot delete them."""
from __future__ import annotations

import os
import shutil

from tools.workspace import HOOK_DIRS, hooks_paths, project_venvs

GIT_PROTECTED = ("hooks", "config", "config.worktree", "commondir", "modules", "worktrees")
UNDO_STORE = ("refs/nanocode", "nanocode")  # tools/undo.py's refs and metadata, in the git dir


def _with_links(path: str, root: str) -> list[str]:
    """What protects `path`: itself when no symlink is on the way to it; otherwise every link met
    (a link's own path, to be put back when re-pointed) and, followed, where it leads (a shipped
    `.nanocode -> conf` makes conf/ what nanocode reads). A path that does not exist stands for
    its topmost missing ancestor (a command could otherwise create that one as a link).
    Everything returned has only real directories between it and `root`; paths outside the
    project are dropped (the sandbox makes them read-only anyway); a link to the project root
    itself makes the whole project read-only (fail-safe, for an odd layout)."""
    out, todo, seen = [], [os.path.normpath(path)], set()
    while todo and len(seen) < 40:  # 40: the kernel's own limit on links followed
        p = todo.pop()
        if p in seen or not (p == root or p.startswith(root + os.sep)):
            continue
        seen.add(p)
        cur, rest = root, os.path.relpath(p, root).split(os.sep)
        for i, part in enumerate(rest if p != root else []):
            cur = os.path.join(cur, part)
            if not os.path.lexists(cur):
                break
            if os.path.islink(cur):
                todo.append(os.path.normpath(os.path.join(os.path.dirname(cur), os.readlink(cur), *rest[i + 1:])))
                break
        if cur not in out:
            out.append(cur)
    return out


def pins(paths, root: str) -> list[str]:
    """The existing directories strictly between `root` and each protected path: bound onto
    themselves (still writable) they become mount points, which cannot be renamed or removed,
    so a command cannot move a protected path's parent away and build a new one in its place."""
    out = []
    for p in paths:
        cur = root
        for part in os.path.relpath(p, root).split(os.sep)[:-1]:
            cur = os.path.join(cur, part)
            if cur != root and os.path.isdir(cur) and not os.path.islink(cur) and cur not in out:
                out.append(cur)
    return out


def loosen_undo_refs(git: str) -> None:
    """Give every refs/nanocode/ ref that lives only in packed-refs (after the user's `git gc` or
    `git pack-refs`) its loose file again, with the same value, so the read-only mount of
    refs/nanocode/ holds it: git reads a loose ref before packed-refs, and deleting or moving
    a ref needs its loose file's lock, which a read-only directory refuses. packed-refs itself
    stays writable (the user's git rewrites it); a command can drop or change the packed copy,
    never the loose one that wins. Best effort: an unreadable packed-refs changes nothing."""
    try:
        with open(os.path.join(git, "packed-refs"), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        sha, _, name = line.partition(" ")
        loose = os.path.join(git, name)
        if (not name.startswith("refs/nanocode/") or ".." in name.split("/") or len(sha) not in (40, 64)
                or os.path.lexists(loose)):
            continue
        os.makedirs(os.path.dirname(loose), exist_ok=True)
        with open(loose + ".nanocode-tmp", "w") as f:
            f.write(sha + "\n")
        os.replace(loose + ".nanocode-tmp", loose)


def project_protected(root) -> list[str]:
    """Paths inside the project a sandboxed command must not create or change: what git or
    nanocode would later run or trust on the user's behalf. ``.git/{hooks, config,
    config.worktree, commondir, modules, worktrees}``, ``.nanocode``, ``.githooks``, ``.husky``,
    every core.hooksPath target inside the project (from every config scope), every virtualenv
    in it (workspace.project_venvs: what its activate, python, *.pth files and packages run
    when the user next uses it; a missing one may be created), each with the
    symlinks on the way to it and their targets; the whole ``.git`` when it is a file (gitdir
    pointer) or absent (so a `git init` inside the sandbox is undone); and the undo store
    (``.git/refs/nanocode``, ``.git/nanocode``) when it exists: the harness made it before the
    call, and a command that deletes it takes the user's /undo away. The rest of .git stays
    writable: git add, commit, stash, checkout, gc work (gc cannot prune what a loose
    refs/nanocode ref keeps, see `loosen_undo_refs`)."""
    root = os.path.realpath(root)
    git = os.path.join(root, ".git")
    named = [os.path.join(root, n) for n in (".nanocode",) + HOOK_DIRS] + hooks_paths(root) + project_venvs(root)
    if not os.path.isdir(git) or os.path.islink(git):
        named.insert(0, git)
    else:
        named += [os.path.join(git, n) for n in GIT_PROTECTED]
        named += [p for p in (os.path.join(git, n) for n in UNDO_STORE) if os.path.isdir(p)]
    out = []
    for p in named:
        out += [q for q in _with_links(p, root) if q not in out]
    return out


def guard(paths) -> dict:
    """What `restore` needs for the protected paths a mount cannot cover: missing ones (None) and
    symlinks (their target). Existing files and dirs are mounted over instead (`mountable`)."""
    out = {}
    for p in paths:
        if not os.path.lexists(p):
            out[p] = None
        elif os.path.islink(p):
            out[p] = os.readlink(p)
    return out


def mountable(paths, guarded: dict) -> list[str]:
    return [p for p in paths if p not in guarded]


def restore(guarded: dict) -> list[str]:
    """Undo what the command did to the guarded paths (remove what it created, without following
    symlinks; put a replaced symlink back); returns the paths it had to fix."""
    fixed = []
    for p, link in guarded.items():
        if (os.readlink(p) if os.path.islink(p) else None if not os.path.lexists(p) else "") == link:
            continue
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        if link is not None:
            os.symlink(link, p)
        fixed.append(p)
    return fixed
