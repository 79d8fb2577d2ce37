"""`train synth --real-source PATH`: the package roots whose functions join the real-code task
world's training side besides the standard library (tasks/real_packages.py lists a root's modules).

A PATH is a folder one would put on sys.path (a site-packages, a checkout's import root) or a
package archive (a wheel, a zip or tar sdist); the archives inside a folder count too (a
wheelhouse, a pip cache). train/corpus.py finds and reads them, as for `train data local`. The
harvest runs code from files, so an archive's .py files are unpacked once into
<cache>/<content hash>/ (the cache is below the workdir the user chose), by way of a temporary
folder renamed into place, so a second run at the same time never sees half an archive. A member
whose path would leave that folder is skipped; a corrupt archive is skipped with a warning.

Contract: `resolve_real_sources(paths, cache)` returns the roots (each folder, then the archives
found in it, unpacked, in walk order; duplicates once), the same for the same files; DataError
naming the path and the fix for one that is neither a folder nor an archive, or that holds the
cache (projects built there would become packages).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from train.corpus import ARCHIVES, DataError, find_inputs, member_paths, read_archive


def resolve_real_sources(paths: list[str], cache: str) -> tuple[str, ...]:
    """The folder roots for the named paths (archives unpacked into `cache`)."""
    roots = []
    for path in paths:
        try:
            _, archives, _ = find_inputs([Path(path)], "code")
        except DataError:
            raise DataError(f"--real-source {path}: not a folder or a package archive ({', '.join(ARCHIVES)}); "
                            "name a site-packages, a checkout's import root, a wheel or an sdist") from None
        if os.path.isdir(path):
            if (os.path.realpath(cache) + os.sep).startswith(os.path.realpath(path) + os.sep):
                raise DataError(f"--real-source {path} holds the work folder {os.path.dirname(cache)}, where "
                                "projects are built: name a folder beside it, or move --workdir")
            roots.append(os.path.abspath(path))
        roots += [root for root in (unpack(a, cache) for a in archives) if root]
    return tuple(dict.fromkeys(roots))


def unpack(archive: Path, cache: str) -> str | None:
    """<cache>/<hash of the archive's bytes>: its .py files laid out as an import root (a wheel's
    .data/purelib and an sdist's name-version/ and src/ folders dropped); None, with a warning,
    for a corrupt archive."""
    digest = hashlib.sha256()
    with open(archive, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    dest = os.path.join(cache, digest.hexdigest()[:24])
    if os.path.isdir(dest):
        return dest
    os.makedirs(cache, exist_ok=True)
    try:
        docs, _ = read_archive(archive, "code", ())
    except Exception as e:  # noqa: BLE001 - BadZipFile, tarfile.ReadError, EOFError, zlib.error, OSError...
        print(f"train synth: warning: skipped {archive}: corrupt or unreadable archive ({type(e).__name__}: {e})",
              file=sys.stderr)
        return None
    tmp = tempfile.mkdtemp(prefix=".unpacking-", dir=cache)
    for key, _, data, _ in docs:
        parts = member_paths(archive.name, key[len(archive.name) + 1:])[-1].split("/")
        if data is None or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
            continue  # too big, or a path that would leave the folder
        target = os.path.join(tmp, *parts)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "xb") as f:  # a name twice in one archive: the first copy
                f.write(data)
        except OSError:
            continue
    try:
        os.rename(tmp, dest)
    except OSError:  # another run unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
