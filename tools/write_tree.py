"""Writing a set of file states into the user's project without ever following a link: the
last step of best-of (agent/loop/best_of.py), where the files come from a model's rollout.

Each directory on the way is opened from the project's real root one component at a time
without following symlinks (tools/workspace.open_dir; a link there raises UnsafeWrite and
nothing more is written), and each file or link is made under a temp name in its directory and
renamed over the old entry, so nothing at the path itself is ever opened. A symlink whose target
leads out of the project (absolute, or through `..` or other links, as resolved on disk now) is
not created and is returned instead; one that only leads out through another link of the same
write (`a -> d/..` made before `d -> .`) is removed again once all are written.

/undo's restore (tools/undo.py) writes here too, with `restore_file` and `remove_created`: the
plan was checked first (nothing moved on since the turn; `blocked` names a type change in the
way), every parent is checked with realpath against the project's top, and each file goes
through a temp file and os.replace.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading

from tools.workspace import PathOutside, is_inside, open_dir

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeWrite(Exception):
    """A folder on the way to a path is a symlink (or not a folder): nothing is written through it."""


def _link_out(real: str, path: str, target: str) -> bool:
    """Whether a link at `path` (under the resolved top `real`) to `target` leads out of the
    project: an absolute target, or one that resolves outside through what is on disk now."""
    where = os.path.join(real, os.path.dirname(path), target)
    return os.path.isabs(target) or not is_inside(real, os.path.realpath(where))


def _parent_fd(real: str, path: str, create: bool = False) -> int:
    """A descriptor of path's directory, walked from the top without following a symlink."""
    try:
        return open_dir(real, os.path.join(real, os.path.dirname(path)), create=create)
    except (PathOutside, NotADirectoryError) as e:  # O_NOFOLLOW|O_DIRECTORY on a link: ENOTDIR
        raise UnsafeWrite(f"refusing to write {path}: a folder on its way is a symlink (or not a "
                          "folder) in your project; nothing is written through links (remove it "
                          "and rerun)") from e


def _unlink(real: str, path: str) -> None:
    """Remove the entry at path (a link itself, never its target); a missing one is fine."""
    try:
        fd = _parent_fd(real, path)
    except FileNotFoundError:
        return
    try:
        os.unlink(os.path.basename(path), dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def _rmdir(real: str, path: str) -> bool:
    """Remove the directory path if it is empty (a link, a file or a non-empty one stays)."""
    try:
        fd = _parent_fd(real, path)
    except FileNotFoundError:
        return False
    try:
        os.rmdir(os.path.basename(path), dir_fd=fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _write(real: str, path: str, src: str) -> None:
    """path := the stashed `src` (a symlink as a symlink, a file with its mode), through a temp
    name in the same directory and a rename, never opening anything at path itself."""
    fd = _parent_fd(real, path, create=True)
    tmp = f".nanocode-best-of-{os.getpid()}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=fd)  # a crashed run's leftover
        if os.path.islink(src):
            os.symlink(os.readlink(src), tmp, dir_fd=fd)
        else:
            with open(src, "rb") as f, os.fdopen(os.open(tmp, _CREATE, 0o600, dir_fd=fd), "wb") as out:
                shutil.copyfileobj(f, out)
                os.fchmod(out.fileno(), stat.S_IMODE(os.fstat(f.fileno()).st_mode))
        os.replace(tmp, os.path.basename(path), src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


def write_changes(top: str, changes: dict, stash: str, copy_top: str) -> list[str]:
    """Write into `top` the after-state of each changed path (`changes`: path -> (before, after),
    after None = deleted; the after-state's file or link is at `stash`/path); return the links
    left out ("path -> target"). Deletions first, then directories they emptied that are gone in
    `copy_top` too. Raises UnsafeWrite when a folder on the way is a link."""
    real = os.path.realpath(top)
    for path in sorted((p for p, (_, after) in changes.items() if after is None), reverse=True):
        _unlink(real, path)
        parent = os.path.dirname(path)
        while parent and not os.path.lexists(os.path.join(copy_top, parent)) and _rmdir(real, parent):
            parent = os.path.dirname(parent)
    refused, links = [], []
    for path in sorted(p for p, (_, after) in changes.items() if after is not None):
        src = os.path.join(stash, path)
        target = os.readlink(src) if os.path.islink(src) else None
        if target is not None and _link_out(real, path, target):
            refused.append(f"{path} -> {target}")
            continue
        _write(real, path, src)
        links += [path] if target is not None else []
    while out := [p for p in links if not is_inside(real, os.path.realpath(os.path.join(real, p)))]:
        for p in out:  # e.g. a -> d/.. written before d -> .
            refused.append(f"{p} -> {os.readlink(os.path.join(stash, p))}")
            _unlink(real, p)
            links.remove(p)
    return refused


# ---- /undo's restore ---------------------------------------------------------------------------

def remove_created(top: str, path: str, before_dirs: set[str]) -> None:
    """Delete `path` (a file or symlink the turn created), then its parent directories that are
    now empty and were not in the "before" snapshot (`before_dirs`), deepest first."""
    full = os.path.join(top, path)
    if os.path.islink(full) or os.path.lexists(full) and not os.path.isdir(full):
        os.unlink(full)
    parent = os.path.dirname(path)
    while parent and parent not in before_dirs:
        full = os.path.join(top, parent)
        if not os.path.isdir(full) or os.path.islink(full) or os.listdir(full):
            break
        os.rmdir(full)
        parent = os.path.dirname(parent)


def _refuse_outside(top: str, path: str, folder: str) -> None:
    """UnsafeWrite when `folder` (on the way to `path`) resolves outside `top`."""
    if not is_inside(top, os.path.realpath(folder)):
        raise UnsafeWrite(f"refusing to write {path}: its directory resolves outside {top}")


def restore_file(top: str, path: str, link: bool, exe: bool, read) -> None:
    """Put `path` back as a symlink (`link`; read() gives its target) or a file with the bytes
    read() returns and exec bit `exe`, through a temp file in its directory and os.replace.
    Refuses (UnsafeWrite) when the directory resolves outside `top` (checked on its nearest
    existing folder before any folder is made) or a directory is in the way. Only the exec bit
    follows the snapshot: an existing file keeps its other permission bits, a new one gets
    0o666/0o777 minus the umask."""
    full = os.path.join(top, path)
    parent = existing = os.path.dirname(full)
    while not os.path.lexists(existing):  # Snapshots._plan checked them; a link swapped in since
        existing = os.path.dirname(existing)  # must not get folders made below it either
    _refuse_outside(top, path, existing)
    os.makedirs(parent, exist_ok=True)
    _refuse_outside(top, path, parent)
    if os.path.isdir(full) and not os.path.islink(full):
        raise UnsafeWrite(f"cannot restore {path}: a directory is in the way; move it and retry")
    if link:
        tmp = os.path.join(parent, f".nanocode-{os.getpid()}-{os.path.basename(full)}")
        os.symlink(read(), tmp)
        os.replace(tmp, full)
        return
    data = read()
    try:
        old = os.lstat(full)
        perm = stat.S_IMODE(old.st_mode) if stat.S_ISREG(old.st_mode) else None
    except FileNotFoundError:
        perm = None
    if perm is not None:  # an existing file keeps its other bits; only x follows the snapshot
        perm = perm | (perm & 0o444) >> 2 if exe else perm & ~0o111
    tmp = os.path.join(parent, f".nanocode-{os.getpid()}-{threading.get_ident()}.tmp")
    try:  # a new file gets 0o777/0o666 minus the umask, applied by the kernel (thread-safe)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o777 if exe else 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if perm is not None:
            os.chmod(tmp, perm)
        os.replace(tmp, full)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def blocked(top: str, path: str, removed: set[str]) -> str | None:
    """What keeps `path` from being restored once the `removed` paths are gone: a parent that
    is a symlink or a file, or a directory at `path` holding anything else; None when nothing."""
    parts = path.split("/")
    for i in range(1, len(parts)):
        parent = "/".join(parts[:i])
        full = os.path.join(top, parent)
        if parent in removed or not os.path.lexists(full):
            return None  # made afresh below it
        if os.path.islink(full) or not os.path.isdir(full):
            return f"{parent} is now a symlink or file"
    full = os.path.join(top, path)
    if os.path.islink(full) or not os.path.isdir(full):
        return None
    for cur, dirs, files in os.walk(full):
        for x in files + [d for d in dirs if os.path.islink(os.path.join(cur, d))]:
            rel = os.path.relpath(os.path.join(cur, x), top).replace(os.sep, "/")
            if rel not in removed:
                return f"{path} is now a directory holding {rel}"
    return None
