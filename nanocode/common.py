"""Small helpers the command-line tools share. Nothing here imports jax at module level: the
CLIs import this module for `--help`, which must start without jax (~3 s)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Replace the file at `path` with `data` through a temp file in its folder, fsync and
    os.replace: a reader (or a crash) sees the old bytes or the new ones, never half. The temp file
    is removed when anything fails."""
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=f".{os.path.basename(path)}.",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def nanocode_home() -> Path:
    """Where nanocode keeps caches and downloads: $NANOCODE_HOME, default ~/.cache/nanocode."""
    home = os.environ.get("NANOCODE_HOME")
    return Path(home).expanduser() if home else Path.home() / ".cache" / "nanocode"


def enable_compilation_cache(
    path: str | os.PathLike | None = None,
    min_compile_time_secs: float = 0.5,
    min_entry_size_bytes: int = -1,
) -> Path:
    """Turn on jax's persistent compilation cache (default: nanocode_home()/jax_cache).

    Programs that took less than `min_compile_time_secs` to compile are not cached (cheap to redo,
    and they would litter the disk); -1 for the size threshold caches entries of any size.
    Returns the cache directory. Call it before the first jit compiles.
    """
    import jax

    cache_dir = Path(path).expanduser() if path is not None else nanocode_home() / "jax_cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_time_secs)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", min_entry_size_bytes)
    return cache_dir


DEFAULT_MODEL = Path(__file__).resolve().parent / "default_model"  # shipped: `--model/--from default`


def find_checkpoints(spec: str, home: Path | None = None) -> tuple[Path, str]:
    """--model / --from PATH|TAG -> (directory holding step folders, run tag). PATH may be that
    directory, a run directory (with checkpoints/) or one step folder; a TAG is a run name under
    $NANOCODE_HOME/runs, or `default`: the model shipped in the package. Raises FileNotFoundError saying where it looked and what runs exist."""
    home = Path(home) if home else nanocode_home()
    runs, p = home / "runs", Path(spec).expanduser()
    candidates = [DEFAULT_MODEL / "checkpoints"] if spec == "default" else []
    if p.is_dir():
        if p.name.isdigit():  # a step folder
            candidates.append(p.parent)
        candidates += [p / "checkpoints", p]
    if "/" not in spec and os.sep not in spec and spec not in (".", ".."):
        candidates.append(runs / spec / "checkpoints")
    for c in candidates:
        if c.is_dir() and any(d.name.isdigit() and d.is_dir() for d in c.iterdir()):
            run = c.parent if c.name == "checkpoints" else c
            return c, run.name
    known = sorted(d.name for d in runs.iterdir() if (d / "checkpoints").is_dir()) if runs.is_dir() else []
    tried = ", ".join(str(c) for c in candidates) or str(p)
    raise FileNotFoundError(
        f"no checkpoint for {spec!r} (looked in {tried}); pass a checkpoint directory or a run tag "
        f"under {runs} (known: {', '.join(known) or 'none'}); train one with `train base`")


class ModelError(ValueError):
    """A model that cannot be used (none where --model points, none shipped, one that does not
    load), for the agent and the evals alike. The message is one line without an `error:`
    prefix (the CLIs add it) and says what to do; `code` is the exit status (2: not found)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


NO_DEFAULT = (
    "this nanocode install has no default model (nothing at {path}); train one with "
    "`train speedrun --preset cpu` (data to agent-ready checkpoint in one command) or "
    "`train base` then `train sft`, then pass --model <run tag or checkpoint dir>"
)


def resolve_model(spec: str | None) -> tuple[Path, str]:
    """--model PATH|TAG, or None for the model shipped in the package -> (directory holding
    step folders, run tag): the one resolution the agent and the evals share. ModelError
    (code 2) when there is none."""
    if spec is None:
        if not (DEFAULT_MODEL / "checkpoints").is_dir():
            raise ModelError(NO_DEFAULT.format(path=DEFAULT_MODEL), code=2)
        spec = "default"
    try:
        return find_checkpoints(spec)
    except FileNotFoundError as e:
        raise ModelError(str(e), code=2) from None
