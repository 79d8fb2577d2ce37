"""Copies of the project for best-of's rollouts (agent/loop/best_of.py), and what a change
compares. A copy (make_copy) holds the work tree's listed files and a .git that borrows the user's
objects, so git works there and can never write to the user's repository; `manifest` digests every
listed file, so a rollout's change is the paths whose digest moved. Git runs through tools/git.py
(nothing the repository's config names runs)."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat

from tools.git import git as safe_git

SKIP = {".git", ".nanocode", "__pycache__", ".pytest_cache"}  # never copied, never a change


class BestOfError(Exception):
    """The pick could not be applied; the message names the files and the fix."""


def copy_git(cwd: str, *args: str, check: bool = True) -> bytes | None:
    """stdout of a git command run through tools/git.py (nothing the repo's config names runs);
    failure: BestOfError, or None when check is False."""
    r = safe_git(cwd, *args, timeout=None)
    if r.returncode == 0:
        return r.stdout
    if check:
        raise BestOfError(f"git {args[0]} failed in {cwd}: {r.stderr.decode(errors='replace').strip()}")
    return None


def probe(root: str) -> tuple[str, dict | None]:
    """(work tree top, the git facts a copy needs, or None outside git)."""
    out = copy_git(root, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-path",
               "objects", "--git-path", "index", "--git-path", "info/exclude", check=False)
    if out is None:
        return root, None
    top, objects, index, exclude = os.fsdecode(out).splitlines()[:4]
    top = os.path.realpath(top)
    head = copy_git(top, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False)
    ref = copy_git(top, "symbolic-ref", "-q", "HEAD", check=False)
    return top, {"objects": objects, "index": index, "exclude": exclude,
                 "head": head.decode().strip() if head else None,
                 "ref": ref.decode().strip() if ref else None}


def skipped(path: str) -> bool:
    return any(part in SKIP for part in path.split("/"))


def project_files(top: str, git: bool) -> list[str]:
    """Work-tree-relative paths of the project's files (git: tracked + untracked-not-ignored)."""
    if git:
        names = os.fsdecode(copy_git(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard"))
        paths = dict.fromkeys(p for p in names.split("\0") if p)  # unmerged entries come thrice
    else:
        paths = {}
        for dirpath, dirs, files in os.walk(top):
            rel = os.path.relpath(dirpath, top).replace(os.sep, "/")
            links = [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]
            dirs[:] = sorted(d for d in dirs if d not in SKIP and d not in links)
            for name in sorted(files + links):
                paths[name if rel == "." else f"{rel}/{name}"] = None
    out = []
    for p in paths:
        full = os.path.join(top, p)
        if not skipped(p) and os.path.lexists(full) and (os.path.islink(full) or not os.path.isdir(full)):
            out.append(p)  # a tracked file deleted in the work tree, or a submodule, is left out
    return out


def digest(full: str) -> str | None:
    """What a change compares: symlink target, or exec bit + content sha1; None when absent."""
    try:
        st = os.lstat(full)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "l:" + os.readlink(full)
    if not stat.S_ISREG(st.st_mode):
        return None
    h = hashlib.sha1()
    with open(full, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return ("x:" if st.st_mode & 0o111 else "f:") + h.hexdigest()


def manifest(top: str, git: bool) -> dict[str, str]:
    return {p: d for p in project_files(top, git) if (d := digest(os.path.join(top, p))) is not None}


def copy_file(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
    else:
        shutil.copy2(src, dst)


def make_copy(top: str, git: dict | None, files: list[str], dest: str) -> None:
    """A copy at `dest`: `files` (git's tracked and untracked-not-ignored files, symlinks as
    symlinks; outside git every file). Its .git is a fresh repository that borrows the user's
    objects through objects/info/alternates and has a copy of the user's index, info/exclude and
    HEAD (branch name and commit), so `git status`, `git diff`, `git log` and commits work in the
    copy, cost O(index) rather than O(history) to set up, and never write to the user's
    repository. Not copied, by design: ignored files (build outputs, .env, an in-project venv:
    tests that need them fail in every copy alike), SKIP (a Python run recreates the caches; they
    never count as changes; tracked files there are marked skip-worktree, so git does not see them
    as deleted), submodule contents, the repo's config, other refs and the stash."""
    os.makedirs(dest)
    for p in files:
        copy_file(os.path.join(top, p), os.path.join(dest, p))
    if git is None:
        return
    copy_git(dest, "init", "-q", "--template=")
    dot = os.path.join(dest, ".git")
    os.makedirs(os.path.join(dot, "objects", "info"), exist_ok=True)
    with open(os.path.join(dot, "objects", "info", "alternates"), "w") as f:
        f.write(git["objects"] + "\n")
    if os.path.isfile(git["exclude"]):
        os.makedirs(os.path.join(dot, "info"), exist_ok=True)
        shutil.copyfile(git["exclude"], os.path.join(dot, "info", "exclude"))
    if os.path.isfile(git["index"]):
        shutil.copyfile(git["index"], os.path.join(dot, "index"))
        # tracked files under SKIP (a committed .nanocode/settings.json) are not copied: marked
        # skip-worktree, so the copy's status and `git add -A` do not take them as deleted
        tracked = os.fsdecode(copy_git(dest, "ls-files", "-z")).split("\0")
        skipped_tracked = [p for p in tracked if p and skipped(p)]
        if skipped_tracked:
            copy_git(dest, "update-index", "--skip-worktree", "--", *skipped_tracked)
    if git["ref"]:
        copy_git(dest, "symbolic-ref", "HEAD", git["ref"])
    if git["head"]:
        copy_git(dest, "update-ref", *([] if git["ref"] else ["--no-deref"]), "HEAD", git["head"])
