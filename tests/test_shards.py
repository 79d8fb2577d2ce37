"""`train data`: local shard builds (deterministic, val last, row groups, report, errors), shard
validation naming corrupt or truncated files, and the hub download path without the network."""

import io
import json
import socket
import sysconfig
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from train import cli, corpus_filters, shards
from train.shards import DataError, build_local, list_shards

STDLIB = Path(sysconfig.get_paths()["stdlib"])
SRC = [STDLIB / "json", STDLIB / "email", STDLIB / "asyncio"]


def texts(path):
    return pq.read_table(path).column("text").to_pylist()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "code"
    report = build_local("code", out, SRC, docs_per_shard=16, row_group=4, progress=False)
    return out, report


def test_build_reports_and_layout(built):
    out, r = built
    files = list_shards(out)
    assert [f.name for f in files] == [f"shard_{i:05d}.parquet" for i in range(r["shards"])]
    assert r["shards"] >= 3 and r["docs"] > 40 and r["text_mb"] > 0.2 and r["val_docs"] >= 1
    rows = [pq.ParquetFile(f).metadata.num_rows for f in files]
    assert sum(rows) == r["docs"] and rows[-1] == r["val_docs"]
    assert all(n == 16 for n in rows[:-2])  # full train shards, then the rest, then val
    for f in files:
        md = pq.ParquetFile(f).metadata
        assert all(md.row_group(i).num_rows <= 4 for i in range(md.num_row_groups))
        assert pq.ParquetFile(f).schema_arrow.names == ["text"]
    train = {t for f in files[:-1] for t in texts(f)}
    assert not train & set(texts(files[-1]))  # val documents appear only in the last shard
    assert json.loads((out / "data.json").read_text())["docs"] == r["docs"]
    assert r["dropped"]["empty"] >= 0 and tuple(r["dropped"]) == shards.REASONS


def test_build_is_deterministic(built, tmp_path):
    out, r = built
    again = build_local("code", tmp_path / "code", SRC, docs_per_shard=16, row_group=4, progress=False)
    assert again["docs"] == r["docs"]
    a, b = list_shards(out), list_shards(tmp_path / "code")
    assert [f.name for f in a] == [f.name for f in b]
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b))


def test_rebuild_replaces_stale_shards(tmp_path):
    out = tmp_path / "code"
    small = build_local("code", out, SRC, docs_per_shard=4, row_group=2, progress=False)
    big = build_local("code", out, SRC, docs_per_shard=1000, row_group=64, progress=False)
    assert small["shards"] > big["shards"] == 2 == len(list_shards(out))
    assert not list(out.glob(".build-*"))


def test_skips_binary_undecodable_empty_huge(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(5):
        (src / f"ok{i}.py").write_text(f"x = {i}\n")
    (src / "nul.py").write_bytes(b"x = 1\x00\n")
    (src / "latin1.py").write_bytes(b"s = '\xe9\xff'\n")
    (src / "empty.py").write_text("  \n")
    (src / "huge.py").write_text("#" * (corpus_filters.MAX_DOC_BYTES + 1))
    (src / "notes.txt").write_text("not code")
    r = build_local("code", tmp_path / "out", [src], progress=False)
    assert r["docs"] == 5
    assert {why: n for why, n in r["dropped"].items() if n} == {"binary": 2, "empty": 1, "huge": 1}


def test_empty_or_missing_source_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no .py files under .*empty"):
        build_local("code", tmp_path / "out", [tmp_path / "empty"], progress=False)
    assert cli.main(["data", "local", "--kind", "text", "--src", str(tmp_path / "empty"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error: no .md/.rst/.txt files under" in err and "Traceback" not in err
    assert cli.main(["data", "local", "--src", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert "missing is not a directory" in capsys.readouterr().err
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.py").write_text("a = 1\n")
    with pytest.raises(DataError, match="need at least 2"):
        build_local("code", tmp_path / "out1", [tmp_path / "one"], progress=False)


def test_cli_local_reports(tmp_path, capsys):
    argv = ["data", "local", "--kind", "code", "--src", str(SRC[0]), "--out", str(tmp_path), "--row-group", "2"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "code:" in out and "MB" in out and "docs" in out and "shards (last = val)" in out
    assert len(list_shards(tmp_path / "code")) >= 2


def test_exclude_leaves_out_the_matching_files(tmp_path):
    """--exclude: globs on the path below each source root (how the cpu preset keeps the packages
    of the real-code eval split out of pretraining)."""
    src = [STDLIB / "json", STDLIB / "email"]
    everything = dict(shards.find_files(src, "code"))
    kept = dict(shards.find_files(src, "code", ("decoder.py", "mime/*")))
    assert "json/decoder.py" in everything and "email/mime/text.py" in everything
    assert set(kept) == {k for k in everything if k != "json/decoder.py" and not k.startswith("email/mime/")}
    argv = ["data", "local", "--kind", "code", "--src", str(STDLIB / "json"), "--out", str(tmp_path),
            "--exclude", "decoder.py", "tool.py"]
    assert cli.main(argv) == 0
    docs = [t for p in list_shards(tmp_path / "code") for t in texts(p)]
    assert len(docs) == len([k for k in everything if k.startswith("json/")]) - 2
    assert not any("class JSONDecoder" in t for t in docs)
    assert json.loads((tmp_path / "code" / shards.MANIFEST).read_text())["exclude"] == ["decoder.py", "tool.py"]


def test_both_kinds_skip_a_kind_without_files(tmp_path, capsys):
    argv = ["data", "local", "--src", str(STDLIB / "json"), "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "code:" in out and "text: skipped, no .md/.rst/.txt files" in out
    assert list_shards(tmp_path / "code") and not (tmp_path / "text").exists()


def test_listing_errors(tmp_path):
    with pytest.raises(DataError, match="train data local"):
        list_shards(tmp_path / "nope")
    (tmp_path / "d").mkdir()
    with pytest.raises(DataError, match="no shard_.*train data local"):
        list_shards(tmp_path / "d")
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "d" / "shard_00000.parquet")
    with pytest.raises(DataError, match="single shard"):
        list_shards(tmp_path / "d", "train")
    pq.write_table(pa.table({"body": ["a"]}), tmp_path / "d" / "shard_00001.parquet")
    with pytest.raises(DataError, match="shard_00001.parquet: no text column"):
        list_shards(tmp_path / "d")


@pytest.mark.parametrize("damage", ["random", "truncated", "empty"])
def test_corrupt_shard_named_at_listing(built, tmp_path, damage):
    d = tmp_path / "code"
    d.mkdir()
    for f in list_shards(built[0]):
        (d / f.name).write_bytes(f.read_bytes())
    bad = d / "shard_00001.parquet"
    data = bad.read_bytes()
    bad.write_bytes({"random": bytes(range(256)) * 40, "truncated": data[: len(data) // 2], "empty": b""}[damage])
    with pytest.raises(DataError, match=r"shard_00001\.parquet: corrupt or truncated"):
        list_shards(d, "train")


def test_corrupt_pages_named_at_read_time(tmp_path):
    path = tmp_path / "shard_00000.parquet"
    pq.write_table(pa.table({"text": [f"document {i} " * 50 for i in range(64)]}), path,
                   row_group_size=16, compression="zstd")
    pf, column = shards.open_shard(path)  # the footer is fine
    data = bytearray(path.read_bytes())
    start = pf.metadata.row_group(0).column(0).data_page_offset
    data[start + 8:start + 400] = b"\xa5" * 392  # garble the first data page, leave the footer
    path.write_bytes(bytes(data))
    pf, column = shards.open_shard(path)
    with pytest.raises(DataError, match=r"shard_00000\.parquet: cannot read row group 0"):
        shards.read_row_group(pf, column, 0, path)


# --- download ---------------------------------------------------------------------------------


def test_download_offline_is_one_clear_error(tmp_path, monkeypatch, capsys):
    calls = []

    def offline(req, timeout=None):
        calls.append(req.full_url)
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert cli.main(["data", "download", "--kind", "fineweb", "--shards", "2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(calls) == 1  # no retries when the host does not resolve
    assert shards.FINEWEB_URL.format(index=0) in err
    assert "hub is unreachable" in err and "train data local" in err
    assert not list((tmp_path / "text").glob("*.parquet*"))


def test_download_retries_then_fails_clearly(tmp_path, monkeypatch, capsys):
    calls, sleeps = [], []

    def flaky(req, timeout=None):
        calls.append(req.full_url)
        raise urllib.error.URLError(TimeoutError("timed out"))

    monkeypatch.setattr(urllib.request, "urlopen", flaky)
    monkeypatch.setattr(shards, "_sleep", sleeps.append)
    assert cli.main(["data", "download", "--kind", "stack", "--shards", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(calls) == 5 and sleeps == [1, 2, 4, 8]
    assert shards.STACK_URL.format(index=0) in err and "5 tries" in err and "train data local" in err


class FakeResponse(io.BytesIO):
    def __init__(self, body, status=200):
        super().__init__(body)
        self.status = status
        self.headers = {"Content-Length": str(len(body))}


def test_download_writes_resumes_and_skips(tmp_path, monkeypatch):
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": ["hello world"] * 10}), buf)
    body = buf.getvalue()
    seen = []

    def serve(req, timeout=None):
        rng = req.get_header("Range")
        seen.append((req.full_url, rng))
        if rng:
            start = int(rng.split("=")[1].rstrip("-"))
            return FakeResponse(body[start:], 206)
        return FakeResponse(body)

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    target = tmp_path / "text"
    target.mkdir()
    (target / "shard_00001.parquet.part").write_bytes(body[:100])  # an interrupted earlier download
    r = shards.download("fineweb", 2, tmp_path)
    names = sorted(p.name for p in target.iterdir())
    assert names == ["data.json", "shard_00000.parquet", "shard_00001.parquet", "shard_01822.parquet"]
    assert all((target / n).read_bytes() == body for n in names[1:])
    assert (shards.FINEWEB_URL.format(index=1), "bytes=100-") in seen
    assert r["fetched"] == 3 and len(list_shards(target, "train")) == 2
    seen.clear()
    assert shards.download("fineweb", 2, tmp_path)["already_there"] == 3 and not seen
    with pytest.raises(DataError, match="holds fineweb shards"):
        build_local("text", target, [STDLIB / "json"], progress=False)


def test_download_stack_layout(tmp_path, monkeypatch):
    """Stack v2 Python: FineWeb-Edu's layout (shard_XXXXX.parquet at the repo root, a `text` column),
    80 shards (last = val), written to <out>/code; a shard without `text` is not a shard."""
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": ["def f():\n    return 1\n"] * 10}), buf)
    seen = []

    def serve(req, timeout=None):
        seen.append(req.full_url)
        return FakeResponse(buf.getvalue())

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    r = shards.download("stack", 1, tmp_path)
    hub = "https://huggingface.co/datasets/smohammadi/the-stack-v2-python-shuffle/resolve/main/"
    assert seen == [hub + "shard_00000.parquet", hub + "shard_00079.parquet"]
    target = tmp_path / "code"
    assert r["dir"] == str(target) and r["fetched"] == 2
    assert sorted(p.name for p in target.iterdir()) == ["data.json", "shard_00000.parquet", "shard_00079.parquet"]
    assert [p.name for p in list_shards(target, "val")] == ["shard_00079.parquet"]
    assert texts(target / "shard_00000.parquet")[0].startswith("def f()")
    other = tmp_path / "shard_00000.parquet"
    pq.write_table(pa.table({"content": ["x = 1\n"]}), other)
    with pytest.raises(DataError, match="no text column"):
        shards.open_shard(other)


def test_download_refuses_shards_of_another_dataset_url(tmp_path, monkeypatch):
    """Shards from an earlier Stack dataset (same kind, other URL template) are not mixed with new ones."""
    monkeypatch.setattr(urllib.request, "urlopen", lambda req, timeout=None: pytest.fail("no fetch expected"))
    target = tmp_path / "code"
    target.mkdir()
    old = "https://huggingface.co/datasets/someone/old-stack/resolve/main/data/train-{index:05d}-of-00289.parquet"
    (target / "data.json").write_text(json.dumps({"source": "stack", "url": old}))
    pq.write_table(pa.table({"content": ["x = 1\n"]}), target / "shard_00288.parquet")
    with pytest.raises(DataError, match="holds stack shards from .*old-stack.*delete them or pass --out"):
        shards.download("stack", 1, tmp_path)
