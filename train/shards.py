"""`train data`: the pretraining corpus as parquet shards, built offline or downloaded from the hub.

Layout: <data>/code/shard_00000.parquet ... and <data>/text/shard_00000.parquet ... (default <data> =
$NANOCODE_HOME/data). One document per row in a string column `text` (local builds and both hub
datasets alike), row groups of ~1024 documents, and the LAST shard of a directory is
the validation split, as in nanochat. Each directory has a data.json saying where its shards came
from, so a local build never overwrites downloaded shards and a download never mistakes a local
shard for a downloaded one.

`train data local` builds the offline corpus every machine can make: code = the .py files of the
Python standard library and the active site-packages, text = the .md/.rst/.txt files of
site-packages and /usr/share/doc, or of the trees and package archives (wheels, sdists) named with
--src. One file is one document; train/corpus.py says which are dropped (duplicates, near
duplicates, generated, minified, licence-only, binary, empty, > 1 MB, corrupt archives) and reads
them in worker processes. The order is deterministic: documents are ordered by a hash of their key
(<source root's name>/<path below it>, or <archive name>/<path inside>), so shards mix packages
instead of holding one package each; a document is held out for validation when another hash of
its key falls in the first 2%, so the split does not move when files are added elsewhere. Two
builds of the same sources give byte-identical shards, whatever the number of workers.

`train data download` fetches hub shards by index with plain urllib: retries with exponential
backoff, a .part file resumed with an HTTP Range request, a parquet footer check, then os.replace;
complete files are skipped. The dataset's last shard is always fetched too, so validation stays the
same shard however many training shards are on disk.
"""

from __future__ import annotations

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from nanocode.common import nanocode_home
from train import corpus
from train.corpus import BYTES_PER_TOKEN, EXTENSIONS, REASONS, DataError, key_hash  # noqa: F401

TEXT_COLUMNS = ("text",)  # our shards, FineWeb-Edu and the Stack v2 Python shards all use `text`
SHARD_GLOB = "shard_*.parquet"
MANIFEST = "data.json"
VAL_FRACTION = 0.02
DOCS_PER_SHARD = 8192
ROW_GROUP = 1024

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


class NoFilesError(DataError):
    """The sources hold no file of the kind asked for."""


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def default_data_dir() -> Path:
    return nanocode_home() / "data"


# --- listing and reading ------------------------------------------------------------------------


def open_shard(path: str | os.PathLike):
    """(pyarrow ParquetFile, text column name); DataError naming the file if it is not a readable shard."""
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


def find_files(sources: list[Path], kind: str, exclude: tuple[str, ...] = ()) -> list[tuple[str, Path]]:
    """(key, path) of the kind's plain files under the source trees (not the archives' members), in
    build order, deduplicated by real path.

    key = <source root's name>/<path below it> (e.g. python3.11/json/decoder.py): the same on every
    machine for the same trees, which is what the order and the validation split hash. A file whose
    path below its root matches a glob of `exclude` (`json/*`, `calendar.py`) is left out.
    """
    files = corpus.find_inputs(sources, kind, exclude)[0]
    files.sort(key=lambda t: (key_hash(t[0], "order"), t[0], t[1]))
    return [(key, path) for key, _, path in files]


def _write_shard(path: Path, texts: list[str] | list[bytes], row_group: int) -> None:  # bytes: UTF-8
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
                exclude: tuple[str, ...] = (), workers: int | None = None) -> dict:
    """Build <out>/shard_*.parquet from the kind's documents under sources; returns the report dict.

    train/corpus.py reads the trees and archives with `workers` processes (default: up to 8) and
    decides which documents are kept. Train documents fill shards of docs_per_shard in build order;
    the held-out ones form the last shard (if the hash holds out none, the last train document is).
    Shards are written to a scratch directory first and swapped in, replacing an earlier local build.
    """
    if kind not in EXTENSIONS:
        raise ValueError(f"kind must be one of {sorted(EXTENSIONS)}, got {kind!r}")
    if docs_per_shard < 1 or row_group < 1 or (workers is not None and workers < 1):
        raise DataError(f"--docs-per-shard, --row-group and --workers must be >= 1 "
                        f"(got {docs_per_shard}, {row_group}, {workers})")
    out = Path(out)
    if out.is_dir():
        _check_manifest(out, "local")
    srcs = [Path(s) for s in sources] if sources else default_sources(kind)
    t0 = time.time()
    docs, dropped, info = corpus.gather(srcs, kind, tuple(exclude), workers, progress)
    where = ", ".join(map(str, srcs))
    if not docs and not any(dropped.values()):
        inside = f" (nor in the {info['archives']} archives there)" if info["archives"] else ""
        raise NoFilesError(f"no {'/'.join(EXTENSIONS[kind])} files under {where}{inside}: nothing to build")
    out.mkdir(parents=True, exist_ok=True)
    scratch = out / f".build-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    pending, val, writes, n_docs, n_bytes = [], [], [], 0, 0
    try:
        with ThreadPoolExecutor(4) as writer:  # pyarrow encodes and compresses without holding the GIL
            bar = tqdm(corpus.unique(docs, dropped), desc=f"{kind}: dedup+write", unit="doc",
                       disable=None if progress else True, file=sys.stderr, dynamic_ncols=True)
            for key, text in bar:  # text: the document's UTF-8 bytes
                n_docs += 1
                n_bytes += len(text)
                is_val = key_hash(key, "val") % 100_000 < val_fraction * 100_000
                (val if is_val else pending).append(text)
                if len(pending) > docs_per_shard:  # keep one back: it may have to become the validation doc
                    writes.append(writer.submit(_write_shard, scratch / shard_name(len(writes)),
                                                pending[:docs_per_shard], row_group))
                    pending = pending[docs_per_shard:]
            bar.close()
            if not val and pending:
                val.append(pending.pop())
            if pending:
                writes.append(writer.submit(_write_shard, scratch / shard_name(len(writes)), pending, row_group))
            if not writes or not val:
                raise DataError(f"only {n_docs} usable document(s) under {where}: need at least 2 (one for validation)")
            # smaller row groups in the (small) val shard, so up to 16 processes each get a share of it
            writes.append(writer.submit(_write_shard, scratch / shard_name(len(writes)), val,
                                        min(row_group, -(-len(val) // 16))))
        for w in writes:
            w.result()  # raises a failed write's error
        n_shards = len(writes)
        for old in out.glob(SHARD_GLOB):
            old.unlink()
        for new in sorted(scratch.iterdir()):
            os.replace(new, out / new.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = {"source": "local", "kind": kind, "sources": [str(s) for s in srcs], "docs": n_docs,
              "val_docs": len(val), "shards": n_shards, "text_mb": round(n_bytes / 1e6, 3),
              "tokens_estimate": round(n_bytes / BYTES_PER_TOKEN),
              "tokens_estimate_note": f"UTF-8 bytes / {BYTES_PER_TOKEN}, before any tokenizer exists",
              "disk_mb": round(sum(f.stat().st_size for f in out.glob(SHARD_GLOB)) / 1e6, 3),
              "dropped": dropped, "excluded": info["excluded"], "files": info["files"],
              "archives": info["archives"], "docs_per_shard": docs_per_shard, "row_group": row_group,
              "exclude": list(exclude)}
    _write_manifest(out, report)
    report["warnings"], report["workers"] = info["warnings"], info["workers"]
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


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n:,}"


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
                                exclude=tuple(args.exclude or ()), workers=args.workers)
            except NoFilesError as e:
                if len(kinds) == 1 or (kind == "text" and not built):
                    raise
                print(f"{kind}: skipped, {e}")
                continue
            built = True
            dropped = ", ".join(f"{n:,} {why}" for why, n in r["dropped"].items() if n) or "none"
            print(f"{kind}: {r['docs']:,} docs ({r['val_docs']:,} val), {r['text_mb']:.1f} MB of text "
                  f"(~{_count(r['tokens_estimate'])} tokens, estimated at {BYTES_PER_TOKEN} bytes/token; "
                  f"{r['disk_mb']:.1f} MB on disk) from {r['files']:,} files and {r['archives']:,} archives, "
                  f"{r['shards']} shards (last = val) in {r['seconds']:.1f} s -> {out / kind}; "
                  f"dropped: {dropped}; excluded: {r['excluded']:,}")
    except DataError as e:
        print(f"train data: error: {e}", file=sys.stderr)
        return 2
    return 0
