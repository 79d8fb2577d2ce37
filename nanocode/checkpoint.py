"""Model checkpoints: params, optimizer state, step, data-loader state, config, tokenizer and run
metadata in one directory per step, written with orbax-checkpoint.

Trade-offs:
- orbax (CheckpointManager + Composite items) over a hand-rolled npz: it writes sharded arrays from
  every host in parallel, restores onto any mesh (pass `params_like`/`opt_state_like` templates
  carrying shardings), keeps the last `keep` steps, and saves atomically. The price is a heavy
  dependency and opaque errors, so everything is checked here first and reported in our words.
- `save` is synchronous: it returns once the step is committed, so a returned `save` is on disk.
  Training writes through `AsyncSaver` instead: its `save` returns once the arrays are copied to
  host memory (orbax's async checkpointing; the step's buffers may then be donated) and a
  background thread writes the files while the next steps run. It keeps one save in flight: the
  next `save` (or `wait`, or leaving its `with`) waits for the last one to commit first, and
  raises its error if it failed.
- Params and optimizer state are separate items, so `load_params` (inference) never reads the
  optimizer state (2x the params for AdamW). Small things (config, loader state, tokenizer,
  free-form metadata) are JSON items, readable with `cat`.
- Restoring without a template gives default-device jax arrays with the saved structure, except that
  optimizer-state tuples and namedtuples come back as lists and dicts; pass `opt_state_like` (e.g.
  `jax.eval_shape(opt.init, params)`) to get optax's own types back. JSON tuples come back as lists.

Atomicity (orbax 0.12.8, verified in its source and in tests/test_checkpoint.py): a step is written
into `<dir>/<step>.orbax-checkpoint-tmp`; each item there is itself written to `<item>.orbax-
checkpoint-tmp`, given a `commit_success.txt` and renamed; then `_CHECKPOINT_METADATA` gets its
`commit_timestamp_nsecs`, `<step>/commit_success.txt` is written and the step directory is renamed
to `<dir>/<step>` (on GCS, which has no atomic rename, the commit files alone mark completion).
A crash therefore leaves a `*.orbax-checkpoint-tmp` directory, never a complete-looking `<step>`
(orbax removes it when that step is saved again). A FUSE mount (gcsfuse, the usual shared
storage of a Cloud TPU pod) cannot rename a directory, so there `<step>` and its items are written
in place and the commit files alone mark completion (orbax's COMMIT_FILE mode, chosen by
`commit_file_mode`; NANOCODE_CHECKPOINT_COMMIT_FILE=1 forces it anywhere): a crash leaves a
`<step>` without its commit file, which readers skip and the next save of that step removes
first. Orbax itself treats any `<step>` directory on a local disk as finished; this module is
stricter: a step counts only if it has the commit file, the commit timestamp and a committed
directory for every item it lists. Anything else is skipped with
an `IncompleteCheckpointWarning` naming it, and `restore(step=None)` falls back to the previous step
if the newest one can't be read (e.g. a truncated file). Multi-host: call `save`/`restore` on every
process, as orbax expects.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import options as ocp_options
from etils import epath

from nanocode.config import GPTConfig

COMMIT_FILE = "commit_success.txt"  # orbax's commit marker, in the step dir and in each item dir
STEP_METADATA_FILE = "_CHECKPOINT_METADATA"
TMP_SUFFIX = ".orbax-checkpoint-tmp"
ARRAY_ITEMS = ("params", "opt_state")
JSON_ITEMS = ("config", "loader_state", "tokenizer", "run_metadata")
REQUIRED_ITEMS = ("params", "config")
_STEP_RE = re.compile(r"^(0|[1-9]\d*)$")
_TMP_RE = re.compile(r"^(\d+)" + re.escape(TMP_SUFFIX))
_NO_CKPT_FIX = "train one with `train base` or pass --model"


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or doesn't fit the model; the message says the fix."""


class IncompleteCheckpointWarning(UserWarning):
    """A step directory left by an interrupted save (or damaged) was skipped."""


# ---- where and how steps are written -----------------------------------------------------------
def on_fuse_mount(path, mounts: str | None = None) -> bool:
    """Whether local `path` lies on a FUSE file system (`mounts`: /proc/mounts' text by default;
    False where it cannot be read). The deepest mount point holding the path decides."""
    if mounts is None:
        try:
            mounts = open("/proc/mounts").read()
        except OSError:
            return False
    where, best, fstype = os.path.realpath(path), "", ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, fstype = point, fields[2]
    return fstype.startswith("fuse")


def commit_file_mode(directory: epath.Path) -> bool:
    """Commit files instead of directory renames (see the module docstring): on a FUSE mount, or
    anywhere with NANOCODE_CHECKPOINT_COMMIT_FILE=1. gs:// paths get them from orbax itself."""
    if os.environ.get("NANOCODE_CHECKPOINT_COMMIT_FILE") == "1":
        return True
    return "://" not in str(directory) and on_fuse_mount(directory)


# ---- listing ------------------------------------------------------------------------------------
def _incomplete_reason(step_dir: epath.Path) -> str | None:
    """Why `step_dir` is not a complete checkpoint, or None if it is."""
    if not (step_dir / COMMIT_FILE).exists():
        return f"no {COMMIT_FILE} commit marker"
    try:
        meta = json.loads((step_dir / STEP_METADATA_FILE).read_text())
    except Exception:  # noqa: BLE001 - missing or half-written file
        return f"missing or unreadable {STEP_METADATA_FILE}"
    if not meta.get("commit_timestamp_nsecs"):
        return f"no commit timestamp in {STEP_METADATA_FILE}"
    handlers = meta.get("item_handlers")
    items = set(handlers if isinstance(handlers, dict) else ()) | set(REQUIRED_ITEMS)
    for item in sorted(items):
        if not (step_dir / item / COMMIT_FILE).exists():
            return f"item {item!r} is missing or was not committed"
    return None


def _path(ckpt_dir) -> epath.Path:
    """orbax refuses relative paths, and only when it writes (after a whole interval of training):
    make local paths absolute up front. URIs (gs://...) pass through."""
    text = str(ckpt_dir)
    return epath.Path(text if "://" in text else os.path.abspath(os.path.expanduser(text)))


def _scan(directory: epath.Path) -> list[int]:
    """Complete steps in `directory`, ascending; warns about each incomplete one."""
    steps = []
    for path in sorted(directory.iterdir(), key=lambda p: p.name) if directory.is_dir() else []:
        if _TMP_RE.match(path.name):
            reason = "temporary directory of a save that never finished"
        elif _STEP_RE.match(path.name) and path.is_dir():
            reason = _incomplete_reason(path)
            if reason is None:
                steps.append(int(path.name))
                continue
        else:
            continue
        warnings.warn(f"ignoring incomplete checkpoint {path} ({reason}); it was left by an "
                      "interrupted save or damaged, and can be deleted",
                      IncompleteCheckpointWarning, stacklevel=3)
    return sorted(steps)


def all_steps(ckpt_dir) -> list[int]:
    """Steps with a complete checkpoint in `ckpt_dir`, ascending ([] if there is no directory)."""
    return _scan(_path(ckpt_dir))


def latest_step(ckpt_dir) -> int | None:
    """The newest complete step in `ckpt_dir`, or None if there is none (or no directory)."""
    steps = _scan(_path(ckpt_dir))
    return steps[-1] if steps else None


@contextlib.contextmanager
def _quiet_orbax():
    """Hide orbax's INFO chatter (~100 lines a save under logging.basicConfig(level=INFO)) unless
    someone configured the "absl" logger explicitly, e.g. absl.logging.set_verbosity(INFO)."""
    logger = logging.getLogger("absl")
    if logger.level != logging.NOTSET:
        yield
        return
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(logging.NOTSET)


def _manager(directory: epath.Path, keep: int | None = None, *, writing: bool = False, background: bool = False):
    # Readers never create directories or clean up temporary ones: a training run may be mid-save.
    # With commit files, cleaning up removes the <step> directories that have none.
    commit = ocp_options.AtomicityOptions(mode=ocp_options.AtomicityMode.COMMIT_FILE)
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=writing,
                                           cleanup_tmp_directories=writing,
                                           enable_async_checkpointing=background,
                                           atomicity_options=commit if commit_file_mode(directory) else None)
    handlers = {name: ocp.StandardCheckpointHandler() for name in ARRAY_ITEMS}
    handlers |= {name: ocp.JsonCheckpointHandler() for name in JSON_ITEMS}
    return ocp.CheckpointManager(directory, options=options, item_handlers=handlers)


# ---- saving -------------------------------------------------------------------------------------
def _json_default(x):
    if isinstance(x, (np.generic, np.ndarray, jax.Array)):
        return np.asarray(x).tolist()
    if isinstance(x, (set, frozenset)):
        return sorted(x)
    raise TypeError(f"{type(x).__name__} is not JSON-serializable")


def _jsonable(name: str, value):
    try:
        return json.loads(json.dumps(value, default=_json_default))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"cannot save {name} as JSON: {e}; pass plain dicts, lists, "
                              "numbers and strings") from e


def save(ckpt_dir, step: int, params, *, config, opt_state=None, loader_state=None, tokenizer=None,
         metadata=None, keep: int | None = 3) -> str:
    """Save everything for `step` into `<ckpt_dir>/<step>` and return that path.

    Synchronous and atomic (see module docstring); keeps the newest `keep` steps (None: all). Call
    on every process in multi-host runs. `config` is a GPTConfig (or its dict), `tokenizer` an
    object with `to_dict()` or a dict, `loader_state`/`metadata` JSON-able dicts (numpy scalars ok).
    """
    step, directory = int(step), _path(ckpt_dir)
    items = _items(directory, step, params, config, opt_state, loader_state, tokenizer, metadata)
    with _quiet_orbax():
        _save(directory, step, items, keep)
    return str(directory / str(step))


def _items(directory: epath.Path, step: int, params, config, opt_state, loader_state, tokenizer,
           metadata) -> dict:
    """The orbax items of one step, once `<directory>/<step>` is known to be free to write."""
    step_dir = directory / str(step)
    if step_dir.exists():
        reason = _incomplete_reason(step_dir)
        if not (reason and commit_file_mode(directory)):  # there: a save that crashed, removed by orbax
            state = f"an incomplete checkpoint ({reason})" if reason else "a complete checkpoint"
            raise CheckpointError(f"{step_dir} already holds {state}; delete it, or resume from the "
                                  "latest step so later steps get new numbers")
    cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    items = {"params": ocp.args.StandardSave(params), "config": ocp.args.JsonSave(cfg)}
    if opt_state is not None:
        items["opt_state"] = ocp.args.StandardSave(opt_state)
    if tokenizer is not None:
        tok = tokenizer.to_dict() if hasattr(tokenizer, "to_dict") else tokenizer
        items["tokenizer"] = ocp.args.JsonSave(_jsonable("tokenizer", tok))
    for name, value in (("loader_state", loader_state), ("run_metadata", metadata)):
        if value is not None:
            items[name] = ocp.args.JsonSave(_jsonable(name, value))
    return items


def _save(directory: epath.Path, step: int, items: dict, keep: int | None) -> None:
    mngr = _manager(directory, keep, writing=True)
    try:
        if not mngr.save(step, args=ocp.args.Composite(**items), force=True):
            raise CheckpointError(f"orbax declined to save step {step} in {directory}")
        mngr.wait_until_finished()
    finally:
        mngr.close()


class AsyncSaver:
    """The training loop's checkpoint writer: `save` (the arguments of module-level `save`) returns
    once the step's arrays are on the host and writes them on a background thread; one save is in
    flight at a time (the next `save`, `wait` or `close` waits for it and raises its error). The
    same directory layout, atomicity and retention as `save`; use it as a context manager (leaving
    waits for the last save). Multi-host: every process calls every method at the same step."""

    def __init__(self, ckpt_dir, keep: int | None = 3):
        self.directory, self.keep, self.mngr = _path(ckpt_dir), keep, None

    def save(self, step: int, params, *, config, opt_state=None, loader_state=None, tokenizer=None,
             metadata=None) -> str:
        self.wait()
        step = int(step)
        items = _items(self.directory, step, params, config, opt_state, loader_state, tokenizer, metadata)
        if self.mngr is None:
            self.mngr = _manager(self.directory, self.keep, writing=True, background=True)
        with _quiet_orbax():
            if not self.mngr.save(step, args=ocp.args.Composite(**items), force=True):
                raise CheckpointError(f"orbax declined to save step {step} in {self.directory}")
        return str(self.directory / str(step))

    def wait(self) -> None:
        """Block until the last save is committed (its error, if it failed, is raised here)."""
        if self.mngr is not None:
            with _quiet_orbax():
                self.mngr.wait_until_finished()

    def close(self) -> None:
        if self.mngr is not None:
            try:
                self.wait()
            finally:
                self.mngr.close()
                self.mngr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- restoring ----------------------------------------------------------------------------------
def _path_str(keypath) -> str:
    parts = []
    for k in keypath:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def _leaves(tree) -> dict[str, Any]:
    return {_path_str(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _describe(x) -> str:
    return f"{tuple(x.shape)} {np.dtype(x.dtype).name}"


def _check_template(item: str, saved_tree, template, where: str) -> None:
    """Raise a CheckpointError naming every path where `template` disagrees with the saved tree."""
    saved, wanted = _leaves(saved_tree), _leaves(template)
    problems = []
    for p, want in wanted.items():
        have = saved.get(p)
        if have is not None and _describe(have) != _describe(want):
            problems.append(f"{p}: checkpoint has {_describe(have)}, "
                            f"model expects {_describe(want)}")
    missing = [p for p in wanted if p not in saved]
    extra = [p for p in saved if p not in wanted]
    if missing:
        problems.append(f"missing from checkpoint ({len(missing)}): {', '.join(missing[:12])}")
    if extra:
        problems.append(f"in checkpoint but not in model ({len(extra)}): {', '.join(extra[:12])}")
    if problems:
        more = [f"... and {len(problems) - 20} more"] if len(problems) > 20 else []
        shown = "\n  ".join(problems[:20] + more)
        raise CheckpointError(f"{item} in {where} do not match the model:\n  {shown}\nFix: build "
                              "the model from the checkpoint's config (restore()['config'] or "
                              "load_params), or use a fresh checkpoint directory")


def _default_sharding():
    return jax.sharding.SingleDeviceSharding(jax.local_devices()[0])


def _abstract(tree, default_sharding):
    """ShapeDtypeStructs for orbax: the leaf's own jax sharding if it has one, else the default."""
    def one(x):
        sharding = getattr(x, "sharding", None)
        if not isinstance(sharding, jax.sharding.Sharding):  # None, or orbax's ShardingMetadata
            sharding = default_sharding
        return jax.ShapeDtypeStruct(tuple(x.shape), x.dtype, sharding=sharding)
    return jax.tree.map(one, tree)


def _read_step(directory: epath.Path, step: int, params_like, opt_state_like, load_opt_state: bool,
               load_params_: bool = True) -> dict:
    where = f"checkpoint step {step} of {directory}"
    step_dir = directory / str(step)
    present = {name for name in ARRAY_ITEMS + JSON_ITEMS if (step_dir / name).exists()}
    want_opt = load_opt_state and "opt_state" in present
    if opt_state_like is not None and load_opt_state and not want_opt:
        raise CheckpointError(f"{where} has no optimizer state (saved without opt_state); restore "
                              "with opt_state_like=None and initialize the optimizer afresh")
    mngr = _manager(directory)
    try:
        args = {name: ocp.args.JsonRestore() for name in JSON_ITEMS if name in present}
        for name, like, wanted in (("params", params_like, load_params_),
                                   ("opt_state", opt_state_like, want_opt)):
            if not wanted:
                continue
            # per item, not mngr.item_metadata(): that would also open the optimizer state's arrays
            meta = ocp.StandardCheckpointHandler().metadata(step_dir / name)
            saved = getattr(meta, "tree", meta)
            if like is None:
                like = saved
            else:
                _check_template(name, saved, like, where)
            args[name] = ocp.args.StandardRestore(_abstract(like, _default_sharding()))
        out = mngr.restore(step, args=ocp.args.Composite(**args))
    finally:
        mngr.close()
    try:
        config = GPTConfig.from_dict(out["config"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where} has a config this nanocode can't build: {e}") from e
    return {"params": out["params"] if load_params_ else None,
            "opt_state": out["opt_state"] if want_opt else None, "step": step,
            "loader_state": out.get("loader_state") if "loader_state" in present else None,
            "config": config,
            "tokenizer": out.get("tokenizer") if "tokenizer" in present else None,
            "metadata": out.get("run_metadata") if "run_metadata" in present else None}


def _read(ckpt_dir, step, **kw) -> dict:
    directory = _path(ckpt_dir)
    if not directory.is_dir():
        raise CheckpointError(f"no checkpoint found in {directory} (no such directory); "
                              f"{_NO_CKPT_FIX}")
    steps = _scan(directory)
    if not steps:
        raise CheckpointError(f"no checkpoint found in {directory} (no complete step directory); "
                              f"{_NO_CKPT_FIX}")
    if step is not None:
        if int(step) not in steps:
            raise CheckpointError(f"no complete checkpoint for step {step} in {directory}; "
                                  f"available steps: {', '.join(map(str, steps))} "
                                  "(or pass step=None for the latest)")
        candidates = [int(step)]
    else:
        candidates = steps[::-1]
    for i, s in enumerate(candidates):
        try:
            with _quiet_orbax():
                return _read_step(directory, s, **kw)
        except CheckpointError:
            raise
        except Exception as e:  # orbax/tensorstore read failure: damaged files, or no room for them
            detail = f"{type(e).__name__}: {e}"
            detail = detail if len(detail) < 400 else detail[:400] + " ..."
            if _out_of_memory(e):  # the files are fine: an older step would not fit either
                raise CheckpointError(
                    f"checkpoint step {s} in {directory} is intact but did not fit in device memory "
                    f"({detail}); free the device (another process holding it?) or restore on a "
                    "device with more memory; the checkpoint was not changed") from e
            problem = f"checkpoint step {s} in {directory} could not be read ({detail})"
            if i + 1 == len(candidates):
                raise CheckpointError(f"{problem}; delete it or restore another step") from e
            warnings.warn(f"{problem}; falling back to step {candidates[i + 1]}",
                          IncompleteCheckpointWarning, stacklevel=3)
    raise AssertionError("unreachable")


def _out_of_memory(e: BaseException) -> bool:
    """Whether a read failed for want of memory (host or device), not because of its files."""
    return isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower()


def restore(ckpt_dir, step: int | None = None, *, params_like=None, opt_state_like=None,
            load_opt_state: bool = True) -> dict:
    """Restore `step` (None: the latest complete one) from `ckpt_dir`.

    Returns {params, opt_state, step, loader_state, config (GPTConfig), tokenizer (dict or None),
    metadata}. `params_like`/`opt_state_like` are templates (arrays or jax.ShapeDtypeStruct, with
    shardings if wanted); they are checked against the checkpoint first (shapes, dtypes, paths) and
    the arrays are restored with their shardings. Without a template, arrays land on the default
    device. opt_state is None if it wasn't saved or `load_opt_state=False`.
    """
    return _read(ckpt_dir, step, params_like=params_like, opt_state_like=opt_state_like,
                 load_opt_state=load_opt_state)


def load_params(ckpt_dir, step: int | None = None, dtype=None):
    """(params, config, tokenizer_dict, metadata) for inference; never reads the optimizer state.
    Floating-point leaves are cast to `dtype` (e.g. jnp.bfloat16) when given."""
    r = restore(ckpt_dir, step, load_opt_state=False)
    params = r["params"]
    if dtype is not None:
        dtype = jnp.dtype(dtype)
        params = jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating)
                              else x, params)
    return params, r["config"], r["tokenizer"], r["metadata"]


def load_tokenizer(ckpt_dir, step: int | None = None):
    """The checkpoint's Tokenizer object (None if it was saved without one); reads no arrays."""
    r = _read(ckpt_dir, step, params_like=None, opt_state_like=None, load_opt_state=False,
              load_params_=False)
    if r["tokenizer"] is None:
        return None
    from nanocode.tokenizer import Tokenizer  # local: checkpoints load without tiktoken
    return Tokenizer.from_dict(r["tokenizer"])
