"""`train data`: the pretraining corpus as parquet shards, built offline or downloaded from the hub.

Layout: <data>/code/shard_00000.parquet ... and <data>/text/shard_00000.parquet ... (default <data> =
$NANOCODE_HOME/data). One document per row in a string column `text` (local builds and both hub
datasets alike), row groups of ~1024 documents, and the LAST shard of a directory is
the validation split, as in nanochat. Each directory has a data.json saying where its shards came
from, so a local build never overwrites downloaded shards and a download never mistakes a local
shard for a downloaded one.

`train data local` builds the offline corpus every machine can make: code = the .py files of the
Python standard library and the active site-packages, text = the .md/.rst/.txt files of
site-packages and /usr/share/doc. One file is one document; binary or non-UTF-8, empty, and > 1 MB
files are skipped and counted. The order is deterministic: paths are listed sorted, then ordered by
a hash of their key (<source root's name>/<path below it>), so shards mix packages instead of
holding one package each; a file is held out for validation when another hash of its key falls in
the first 2%, so the split does not move when files are added elsewhere. Two builds of the same
trees give byte-identical shards.

`train data download` fetches hub shards by index with plain urllib: retries with exponential
backoff, a .part file resumed with an HTTP Range request, a parquet footer check, then os.replace;
complete files are skipped. The dataset's last shard is always fetched too, so validation stays the
same shard however many training shards are on disk.
"""

from __future__ import annotations

import fnmatch
import hashlib
import http.client
import json
import os
import shutil
import socket
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

EXTENSIONS = {"code": (".py",), "text": (".md", ".rst", ".txt")}
TEXT_COLUMNS = ("text",)  # our shards, FineWeb-Edu and the Stack v2 Python shards all use `text`
SHARD_GLOB = "shard_*.parquet"
MANIFEST = "data.json"
MAX_DOC_BYTES = 1_000_000
VAL_FRACTION = 0.02
DOCS_PER_SHARD = 8192
ROW_GROUP = 1024
SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages", "node_modules"}  # below a source root

# FineWeb-Edu, shuffled and repacked by Karpathy for nanochat: shard_00000 ... shard_01822, ~250M chars each.
FINEWEB_URL = "https://huggingface.co/datasets/karpathy/fineweb-edu-100b-shuffle/resolve/main/shard_{index:05d}.parquet"
FINEWEB_LAST = 1822
# The Stack v2, Python, WITH file contents: the dataset the original nanocode pretrains on. The
# official bigcode/the-stack-v2 holds only Software Heritage blob ids, so its author packed Python
# files of bigcode/the-stack-v2-train-smol-ids (contents from Software Heritage's S3 bucket; no
# vendored or generated files, 100 B-500 KB), shuffled, into FineWeb-Edu's layout: shard_00000 ...
# at the repo root, a `text` column, ~250M chars per shard, row groups of 1024 files, zstd.
# 80 shards, shard_00000 ... shard_00079: max_shard = 79 in the original nanocode's download script
# (data/pretrain.py and nanojax/dataset.py, as copied in github.com/moof2x/nanocode), which also holds
# the packing script (dev/package_code.py). Not checked against the hub itself (no network here): a
# wrong last index shows as an HTTP 404 naming the URL.
STACK_URL = "https://huggingface.co/datasets/smohammadi/the-stack-v2-python-shuffle/resolve/main/shard_{index:05d}.parquet"
STACK_LAST = 79
HUB = {"fineweb": ("text", FINEWEB_URL, FINEWEB_LAST), "stack": ("code", STACK_URL, STACK_LAST)}


class DataError(ValueError):
    """A problem with the data the user can fix; the CLI prints it as one line and exits 2."""


class NoFilesError(DataError):
    """The sources hold no file of the kind asked for."""


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def default_data_dir() -> Path:
    from nanocode.common import nanocode_home

    return nanocode_home() / "data"


# --- listing and reading ------------------------------------------------------------------------


def open_shard(path: str | os.PathLike):
    """(pyarrow ParquetFile, text column name); DataError naming the file if it is not a readable shard."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
    except Exception as e:  # ArrowInvalid (bad magic, truncated footer), OSError, ...
        raise DataError(f"{path}: corrupt or truncated parquet file ({type(e).__name__}: {e}); "
                        f"delete it and rebuild or re-download it") from e
    column = next((c for c in TEXT_COLUMNS if c in names), None)
    if column is None:
        raise DataError(f"{path}: no text column (looked for {' or '.join(TEXT_COLUMNS)}; has {names})")
    return pf, column


def read_row_group(pf, column: str, row_group: int, path) -> list[str]:
    """The texts of one row group (None becomes ''); DataError naming the file on a bad read."""
    try:
        values = pf.read_row_group(row_group, columns=[column]).column(0).to_pylist()
    except Exception as e:  # corrupt pages, truncated data, bad compression
        raise DataError(f"{path}: cannot read row group {row_group} ({type(e).__name__}: {e}); "
                        f"the file is corrupt: delete it and rebuild or re-download it") from e
    return [v if v is not None else "" for v in values]


def list_shards(directory: str | os.PathLike, split: str | None = None, validate: bool = True) -> list[Path]:
    """Sorted shard paths of a directory; split "train" = all but the last, "val" = the last.

    With validate, every listed file's parquet footer is read (milliseconds each), so a corrupt or
    truncated shard fails here, naming the file, rather than hours into a run.
    """
    d = Path(directory)
    hint = "build an offline corpus with `train data local` (or fetch hub shards with `train data download`)"
    if not d.is_dir():
        raise DataError(f"no data directory {d}: {hint}")
    files = sorted(d.glob(SHARD_GLOB))
    if not files:
        raise DataError(f"no {SHARD_GLOB} files in {d}: {hint}")
    if split == "train":
        if len(files) < 2:
            raise DataError(f"{d} has a single shard, which is the validation split: need at least 2 ({hint})")
        files = files[:-1]
    elif split == "val":
        files = files[-1:]
    elif split is not None:
        raise ValueError(f"split must be 'train', 'val' or None, got {split!r}")
    if validate:
        for f in files:
            open_shard(f)[0].close()
    return files


# --- building the local corpus ------------------------------------------------------------------


def default_sources(kind: str) -> list[Path]:
    """code: the stdlib and the running interpreter's site-packages; text: site-packages and /usr/share/doc."""
    paths = sysconfig.get_paths()
    site = [Path(p) for p in dict.fromkeys([paths["purelib"], paths["platlib"]])]
    if kind == "code":
        return [Path(paths["stdlib"]), *site]
    doc = Path("/usr/share/doc")
    return [*site, *([doc] if doc.is_dir() else [])]


def _hash(key: str, salt: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8,
                                          person=salt.encode()).digest(), "big")


def find_files(sources: list[Path], kind: str, exclude: tuple[str, ...] = ()) -> list[tuple[str, Path]]:
    """(key, path) of the kind's files under the sources, deduplicated by real path, in build order.

    key = <source root's name>/<path below it> (e.g. python3.11/json/decoder.py): the same on every
    machine for the same trees, which is what the order and the validation split hash. A file whose
    path below its root matches a glob of `exclude` (`json/*`, `calendar.py`) is left out.
    """
    exts = EXTENSIONS[kind]
    found, seen = [], set()
    for si, root in enumerate(sources):
        root = Path(root)
        if not root.is_dir():
            raise DataError(f"source {root} is not a directory")
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                                 and not (kind == "text" and d.endswith((".dist-info", ".egg-info"))))
            for name in sorted(filenames):
                path = Path(dirpath, name)
                if not name.endswith(exts) or path.is_symlink():
                    continue
                below = path.relative_to(root).as_posix()
                if any(fnmatch.fnmatchcase(below, g) for g in exclude):
                    continue
                real = os.path.realpath(path)
                if real in seen:
                    continue
                seen.add(real)
                found.append((f"{root.name}/{below}", si, path))
    found.sort(key=lambda t: (_hash(t[0], "order"), t[0], t[1]))
    return [(key, path) for key, _, path in found]


def _read_doc(path: Path) -> tuple[str | None, str]:
    """(text, '') or (None, reason skipped)."""
    try:
        if path.stat().st_size > MAX_DOC_BYTES:
            return None, "huge"
        data = path.read_bytes()
    except OSError:
        return None, "unreadable"
    if b"\x00" in data:
        return None, "binary"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "binary"
    return (text, "") if text.strip() else (None, "empty")


def _write_shard(path: Path, texts: list[str], row_group: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": pa.array(texts, type=pa.string())}), path,
                   row_group_size=row_group, compression="zstd")


def _check_manifest(out: Path, source: str, url: str | None = None) -> None:
    """DataError unless out's shards (if any) came from `source` (and, given a url, that URL template)."""
    m = out / MANIFEST
    if not m.exists():
        if any(out.glob(SHARD_GLOB)):
            raise DataError(f"{out} holds shards of unknown origin (no {MANIFEST}): move them away or pass --out")
        return
    try:
        info = json.loads(m.read_text())
        have, have_url = info.get("source"), info.get("url")
    except (OSError, ValueError, AttributeError):
        have = have_url = None
    if have != source and any(out.glob(SHARD_GLOB)):
        raise DataError(f"{out} holds {have or 'unknown'} shards, not {source} ones: delete them or pass --out")
    if url and have_url and have_url != url and any(out.glob(SHARD_GLOB)):  # e.g. an earlier Stack re-upload
        raise DataError(f"{out} holds {source} shards from {have_url}, not {url}: delete them or pass --out")


def _write_manifest(out: Path, info: dict) -> None:
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(info, indent=1) + "\n")
    os.replace(tmp, out / MANIFEST)


def build_local(kind: str, out: str | os.PathLike, sources: list[str | os.PathLike] | None = None,
                docs_per_shard: int = DOCS_PER_SHARD, row_group: int = ROW_GROUP,
                val_fraction: float = VAL_FRACTION, progress: bool = True,
                exclude: tuple[str, ...] = ()) -> dict:
    """Build <out>/shard_*.parquet from the kind's files under sources; returns the report dict.

    Train documents fill shards of docs_per_shard in build order; the held-out ones form the last
    shard (if the hash holds out none, the last train document is). Shards are written to a scratch
    directory first and swapped in, replacing an earlier local build.
    """
    if kind not in EXTENSIONS:
        raise ValueError(f"kind must be one of {sorted(EXTENSIONS)}, got {kind!r}")
    if docs_per_shard < 1 or row_group < 1:
        raise DataError(f"--docs-per-shard and --row-group must be >= 1 (got {docs_per_shard}, {row_group})")
    out = Path(out)
    if out.is_dir():
        _check_manifest(out, "local")
    srcs = [Path(s) for s in sources] if sources else default_sources(kind)
    files = find_files(srcs, kind, tuple(exclude))
    where = ", ".join(map(str, srcs))
    if not files:
        raise NoFilesError(f"no {'/'.join(EXTENSIONS[kind])} files under {where}: nothing to build")
    out.mkdir(parents=True, exist_ok=True)
    scratch = out / f".build-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    from tqdm import tqdm

    t0 = time.time()
    skipped = {"binary": 0, "empty": 0, "huge": 0, "unreadable": 0}
    pending, val, n_shards, n_docs, n_bytes = [], [], 0, 0, 0
    try:
        bar = tqdm(files, desc=f"{kind} docs", unit="file", disable=None if progress else True,
                   file=sys.stderr, dynamic_ncols=True)
        for key, path in bar:
            text, why = _read_doc(path)
            if text is None:
                skipped[why] += 1
                continue
            n_docs += 1
            n_bytes += len(text.encode("utf-8", "surrogatepass"))
            is_val = _hash(key, "val") % 100_000 < val_fraction * 100_000
            (val if is_val else pending).append(text)
            if len(pending) > docs_per_shard:  # keep one back: it may have to become the validation doc
                _write_shard(scratch / shard_name(n_shards), pending[:docs_per_shard], row_group)
                pending, n_shards = pending[docs_per_shard:], n_shards + 1
            if n_docs % 256 == 0:
                bar.set_postfix_str(f"{n_bytes / 1e6:.1f} MB", refresh=False)
        bar.close()
        if not val and pending:
            val.append(pending.pop())
        if pending:
            _write_shard(scratch / shard_name(n_shards), pending, row_group)
            n_shards += 1
        if n_shards == 0 or not val:
            raise DataError(f"only {n_docs} usable document(s) under {where}: need at least 2 (one for validation)")
        # smaller row groups in the (small) val shard, so up to 16 processes each get a share of it
        _write_shard(scratch / shard_name(n_shards), val, min(row_group, -(-len(val) // 16)))
        n_shards += 1
        for old in out.glob(SHARD_GLOB):
            old.unlink()
        for new in sorted(scratch.iterdir()):
            os.replace(new, out / new.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = {"source": "local", "kind": kind, "sources": [str(s) for s in srcs], "docs": n_docs,
              "val_docs": len(val), "shards": n_shards, "text_mb": round(n_bytes / 1e6, 3),
              "disk_mb": round(sum(f.stat().st_size for f in out.glob(SHARD_GLOB)) / 1e6, 3),
              "skipped": skipped, "docs_per_shard": docs_per_shard, "row_group": row_group,
              "exclude": list(exclude)}
    _write_manifest(out, report)
    report["seconds"] = round(time.time() - t0, 2)
    return report


# --- downloading --------------------------------------------------------------------------------


def _sleep(seconds: float) -> None:  # a seam for tests
    time.sleep(seconds)


def _offline(url: str, why: object) -> DataError:
    return DataError(f"cannot reach {url} ({why}): the Hugging Face hub is unreachable from here; "
                     f"build the offline corpus with `train data local` instead")


def download_file(url: str, dest: Path, retries: int = 5, timeout: float = 60.0) -> int:
    """Fetch url to dest via dest.part (resumed with a Range request), check the parquet footer, rename.

    Retries timeouts, connection errors, 429 and 5xx with backoff 1, 2, 4, ... s; fails at once on an
    unresolvable host (offline) and on 401/403/404. Returns the file size.
    """
    part = dest.with_name(dest.name + ".part")
    last: object = None
    for attempt in range(retries):
        if attempt:
            _sleep(2.0 ** (attempt - 1))
        have = part.stat().st_size if part.exists() else 0
        headers = {"User-Agent": "nanocode-data/1", **({"Range": f"bytes={have}-"} if have else {})}
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
                if have and resp.status != 206:
                    have = 0  # the server ignored the range: start over
                length = resp.headers.get("Content-Length")
                expected = have + int(length) if length else None
                with open(part, "ab" if have else "wb") as f:
                    shutil.copyfileobj(resp, f, 1 << 20)
        except urllib.error.HTTPError as e:
            if e.code == 416:  # range past the end: the .part is complete or stale; check it below
                expected = None
            elif e.code in (401, 403, 404):
                raise DataError(f"{url}: HTTP {e.code} {e.reason} (a wrong index, or a gated/moved dataset; "
                                f"see the URL templates in train/shards.py)") from e
            else:
                last = f"HTTP {e.code} {e.reason}"
                continue
        except urllib.error.URLError as e:
            if isinstance(e.reason, socket.gaierror):
                raise _offline(url, e.reason) from e
            last = e.reason
            continue
        except (TimeoutError, ConnectionError, http.client.HTTPException, OSError) as e:
            last = e
            continue
        size = part.stat().st_size
        if expected is not None and size != expected:
            last = f"incomplete: {size} of {expected} bytes"
            continue
        try:
            open_shard(part)
        except DataError as e:
            part.unlink()
            last = e
            continue
        os.replace(part, dest)
        return size
    raise DataError(f"could not download {url} in {retries} tries (last error: {last}): the Hugging Face "
                    f"hub is unreachable or failing; offline, build the corpus with `train data local` instead")


def download(kind: str, shards: int, out: str | os.PathLike, retries: int = 5) -> dict:
    """Fetch the first `shards` training shards of a hub dataset plus its last (validation) shard."""
    if kind not in HUB:
        raise ValueError(f"kind must be one of {sorted(HUB)}, got {kind!r}")
    if shards < 1:
        raise DataError(f"--shards must be >= 1, got {shards}")
    sub, template, last_index = HUB[kind]
    target = Path(out) / sub
    target.mkdir(parents=True, exist_ok=True)
    _check_manifest(target, kind, template)
    _write_manifest(target, {"source": kind, "url": template})
    indices = list(range(min(shards, last_index))) + [last_index]
    t0, fetched, skipped, nbytes = time.time(), 0, 0, 0
    for i, index in enumerate(indices):
        dest = target / shard_name(index)
        if dest.exists():
            try:
                open_shard(dest)
                skipped += 1
                continue
            except DataError:
                dest.unlink()
        url = template.format(index=index)
        t = time.time()
        size = download_file(url, dest, retries=retries)
        fetched, nbytes = fetched + 1, nbytes + size
        print(f"[{i + 1}/{len(indices)}] {dest.name}: {size / 1e6:.1f} MB in {time.time() - t:.1f} s", file=sys.stderr)
    return {"kind": kind, "dir": str(target), "fetched": fetched, "already_there": skipped,
            "mb": round(nbytes / 1e6, 1), "seconds": round(time.time() - t0, 1)}


# --- the `train data` command -------------------------------------------------------------------


def main(args) -> int:
    out = Path(args.out) if getattr(args, "out", None) else default_data_dir()
    try:
        if args.action == "download":
            r = download(args.kind, args.shards, out)
            print(f"{r['kind']}: fetched {r['fetched']} shard(s), {r['mb']} MB in {r['seconds']} s; "
                  f"{r['already_there']} already there -> {r['dir']}")
            return 0
        kinds, built = (["code", "text"] if args.kind == "both" else [args.kind]), False
        for kind in kinds:
            try:
                r = build_local(kind, out / kind, args.src, args.docs_per_shard, args.row_group,
                                exclude=tuple(args.exclude or ()))
            except NoFilesError as e:
                if len(kinds) == 1 or (kind == "text" and not built):
                    raise
                print(f"{kind}: skipped, {e}")
                continue
            built = True
            skipped = ", ".join(f"{n} {why}" for why, n in r["skipped"].items() if n) or "none"
            print(f"{kind}: {r['text_mb']:.1f} MB of text ({r['disk_mb']:.1f} MB on disk), {r['docs']:,} docs "
                  f"({r['val_docs']:,} val), {r['shards']} shards (last = val) in {r['seconds']:.1f} s "
                  f"-> {out / kind}; skipped: {skipped}")
    except DataError as e:
        print(f"train data: error: {e}", file=sys.stderr)
        return 2
    return 0
