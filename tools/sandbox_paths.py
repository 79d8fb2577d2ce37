"""The project's protected paths for the Bash sandbox (tools/sandbox.py mounts them read-only):
what git or nanocode would later run or trust on the user's behalf, found from every git config
scope and through the symlinks on the way; `guard`/`restore` handle the ones a mount cannot
cover (missing paths, symlinks) after the call; `loosen_undo_refs` keeps /undo's refs where a
command cannot delete them; `pin_reftable_undo` does the same for a reftable repository, whose
refs are not files (`restore` puts them back, a kept pack holds their objects)."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from tools.git import git as run_git
from tools.workspace import HOOK_DIRS, hooks_paths, project_venvs

GIT_PROTECTED = ("hooks", "config", "config.worktree", "commondir", "modules", "worktrees")
UNDO_STORE = ("refs/nanocode", "nanocode")  # tools/undo.py's refs and metadata, in the git dir
UNDO_REFS = "refs/nanocode/"
KEEP_MARK = "nanocode undo store"  # first line of the .keep files of the packs pin_reftable_undo makes


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


def uses_reftable(git: str) -> bool:
    """Whether the repository keeps its refs in the reftable format (`git init --ref-format=reftable`,
    git >= 2.45): one table stack under <git dir>/reftable, rewritten by every ref update."""
    return os.path.isdir(os.path.join(git, "reftable"))


@dataclass(frozen=True)
class UndoRefs:
    """The refs/nanocode/ refs of a reftable repository as they were before a command (`refs`:
    name -> object), and the files of the kept packs holding their objects (`files`, protected
    read-only). A table stack cannot be mounted ref by ref: `put_back` re-points each ref the
    command deleted or moved, after the call, from outside the sandbox."""
    top: str
    refs: dict
    files: tuple

    def put_back(self) -> list[str]:
        """Re-point every ref that no longer names its object; returns the refs it fixed."""
        try:
            now = _undo_refs(self.top)
            lost = [n for n, sha in self.refs.items() if now.get(n) != sha]
            if lost:
                run_git(self.top, "update-ref", "--stdin",
                        input="".join(f"update {n} {self.refs[n]}\n" for n in lost).encode())
        except (OSError, subprocess.SubprocessError):  # no git: undo names the missing refs (Turn.missing)
            return []
        return lost


def _undo_refs(top: str) -> dict:
    r = run_git(top, "for-each-ref", "--format=%(refname) %(objectname)", UNDO_REFS)
    return dict(line.split(" ", 1) for line in r.stdout.decode(errors="replace").splitlines() if " " in line)


def _kept_packs(pack_dir: str) -> tuple[list[str], set[str]]:
    """(the .keep, .pack and .idx files of the packs pin_reftable_undo made, the objects whose
    closure they hold: the lines after KEEP_MARK)."""
    files, covered = [], set()
    for name in sorted(os.listdir(pack_dir)) if os.path.isdir(pack_dir) else []:
        if not name.endswith(".keep"):
            continue
        try:
            with open(os.path.join(pack_dir, name), encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        if lines[:1] == [KEEP_MARK]:
            covered.update(lines[1:])
            files += [p for p in (os.path.join(pack_dir, name[:-5] + ext) for ext in (".keep", ".pack", ".idx"))
                      if os.path.isfile(p)]
    return files, covered


def pin_reftable_undo(top: str, git: str) -> UndoRefs | None:
    """For a reftable repository with undo refs (else None): the refs as they are, and every
    object they reach in a kept pack (<git dir>/objects/pack, a .keep whose first line is
    KEEP_MARK and whose other lines name what it covers), made once per new ref with only what
    earlier such packs lack. Mounted read-only, the packs survive `gc --prune=now` and
    `repack -a -d` (git never repacks or deletes a kept pack), so a ref put back after the call
    finds its objects. Trade-off: the first call after a turn in such a repository packs that
    turn's objects (one `pack-objects`), and the kept packs stay until the user deletes them."""
    if not uses_reftable(git):
        return None
    refs = _undo_refs(top)
    if not refs:
        return None
    pack_dir = os.path.join(git, "objects", "pack")
    files, covered = _kept_packs(pack_dir)
    new = sorted(set(refs.values()) - covered)
    if new:
        revs = "".join(f"{sha}\n" for sha in new) + "".join(f"^{sha}\n" for sha in sorted(covered))
        r = run_git(top, "pack-objects", "--revs", "-q", os.path.join(pack_dir, "pack"), input=revs.encode())
        name = r.stdout.decode().strip()
        if r.returncode == 0 and name:
            with open(os.path.join(pack_dir, f"pack-{name}.keep"), "w", encoding="utf-8") as f:
                f.write("\n".join([KEEP_MARK, *new]) + "\n")
            files = _kept_packs(pack_dir)[0]
    return UndoRefs(top, refs, tuple(files))


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
    symlinks (their target). Existing files and dirs are mounted over instead (`mountable`). A
    caller adds the reftable's undo refs (an UndoRefs under any key)."""
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
    symlinks; put a replaced symlink back) and to a reftable's undo refs (UndoRefs.put_back);
    returns the paths and refs it had to fix."""
    fixed = []
    for p, link in guarded.items():
        if isinstance(link, UndoRefs):
            fixed += link.put_back()
            continue
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
