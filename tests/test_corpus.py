"""`train data local` over package archives (train/corpus.py): wheels and sdists built here with
zipfile/tarfile; what lands in the shards, what is dropped and why, exclusion inside archives,
corrupt archives, and shards byte-identical for any number of workers."""

import io
import json
import random
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from train import cli, corpus
from train.shards import build_local, list_shards

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("parse token stream buffer header record field value index cache limit offset window "
         "label count width height color point frame block chunk table entry score weight").split()
APACHE = """# Copyright 2020 The Example Authors. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
"""


def module(seed: int, funcs: int = 25) -> str:
    """A ~200-line module of small functions; another seed gives another module of the same kind."""
    rng = random.Random(seed)
    lines = [f'"""Helpers for {rng.choice(WORDS)} {rng.choice(WORDS)} handling ({seed})."""', "", "import math", ""]
    for i in range(funcs):
        a, b, c = rng.sample(WORDS, 3)
        lines += [f"def {a}_{b}_{i}({c}, limit={rng.randint(1, 99)}):",
                  f'    """Return the {a} of each {b} in {c}, capped at limit."""',
                  f"    total = {rng.randint(0, 9)}",
                  f"    for {b} in range({c}):",
                  f"        if {b} % {rng.randint(2, 9)} == {rng.randint(0, 1)}:",
                  f"            total += math.floor({b} * {rng.random():.3f})",
                  f"    return min(total, limit + {rng.randint(1, 20)})", ""]
    return "\n".join(lines) + "\n"


def wheel(directory: Path, name: str, version: str, files: dict[str, str], description: str = "") -> Path:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for inside, text in files.items():
            zf.writestr(inside, text)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                    f"Summary: the {name} package\n\n{description}")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\n")
        zf.writestr(f"{info}/top_level.txt", f"{name}\n")
        zf.writestr(f"{info}/LICENSE", "MIT License\n\nPermission is hereby granted, free of charge...\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


def sdist(directory: Path, name: str, version: str, files: dict[str, str], suffix: str = ".tar.gz") -> Path:
    path = directory / f"{name}-{version}{suffix}"
    mode = {".tar.gz": "w:gz", ".tgz": "w:gz", ".tar.bz2": "w:bz2", ".tar.xz": "w:xz"}[suffix]
    with tarfile.open(path, mode) as tf:
        for inside, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(f"{name}-{version}/{inside}")
            member.size = len(data)
            tf.addfile(member, io.BytesIO(data))
    return path


def docs(out: Path) -> list[str]:
    return [t for f in list_shards(out) for t in pq.read_table(f).column("text").to_pylist()]


def build(kind, out, src, **kw):
    return build_local(kind, out, src, progress=False, **kw)


def nonzero(report) -> dict:
    return {why: n for why, n in report["dropped"].items() if n}


def test_wheel_and_sdist_documents_land_in_the_shards(tmp_path):
    """The .py files of a wheel and of a tar sdist, found in a wheelhouse-like directory, become code
    documents; README and the wheel's long description become text; other metadata stays out."""
    house = tmp_path / "house"
    house.mkdir()
    wheel(house, "alpha", "1.0", {"alpha/__init__.py": module(1, 3), "alpha/core.py": module(2)},
          description="Alpha reads token streams and writes tables of records, quickly and simply.\n")
    sdist(house, "beta", "2.0", {"beta/io.py": module(3), "setup.py": "from setuptools import setup\nsetup(name='beta')\n",
                                 "README.md": "# Beta\n\nBeta keeps a cache of frames for the window index.\n",
                                 "PKG-INFO": "Metadata-Version: 2.1\nName: beta\n",
                                 "beta.egg-info/SOURCES.txt": "beta/io.py\nsetup.py\n"})
    r = build("code", tmp_path / "code", [house])
    assert r["archives"] == 2 and r["files"] == 0 and r["docs"] == 4
    assert sorted(docs(tmp_path / "code")) == sorted([module(1, 3), module(2), module(3),
                                                      "from setuptools import setup\nsetup(name='beta')\n"])
    r = build("text", tmp_path / "text", [house])
    text = docs(tmp_path / "text")
    assert sorted(text) == ["# Beta\n\nBeta keeps a cache of frames for the window index.\n",
                            "Alpha reads token streams and writes tables of records, quickly and simply.\n"]
    assert r["docs"] == 2 and r["tokens_estimate"] == round(sum(len(t.encode()) for t in text) / corpus.BYTES_PER_TOKEN)


def test_a_vendored_module_is_one_document(tmp_path):
    """The same file in two archives (once with CRLF line endings and trailing spaces) is kept once."""
    shared = module(7)
    crlf = "\r\n".join(line + "  " for line in shared.split("\n"))
    wheel(tmp_path, "one", "1.0", {"one/_vendor/six.py": shared, "one/main.py": module(8)})
    sdist(tmp_path, "two", "3.1", {"two/_vendored/six.py": crlf, "two/main.py": module(9)}, ".tar.bz2")
    r = build("code", tmp_path / "out", [tmp_path])
    kept = docs(tmp_path / "out")
    assert nonzero(r) == {"duplicate": 1} and r["docs"] == 3
    assert (shared in kept) != (crlf in kept) and module(8) in kept and module(9) in kept


def test_near_duplicates_across_archives_are_dropped_similar_files_kept(tmp_path):
    """Two versions of a package: the edited module (3 of ~200 lines changed) is a near duplicate and
    the copy first in build order is kept; a different module on the same topic stays."""
    v1 = module(11)
    lines = v1.split("\n")
    changed = [i for i, line in enumerate(lines) if "math.floor" in line][2::8]
    for i in changed:
        lines[i] = lines[i].replace("math.floor", "math.ceil").replace("total +=", "total -=")
    v2 = "\n".join(lines)
    assert len(changed) == 3 and v2 != v1
    a = wheel(tmp_path, "gamma", "1.0", {"gamma/util.py": v1, "gamma/other.py": module(12)})
    b = wheel(tmp_path, "gamma", "1.1", {"gamma/util.py": v2, "gamma/more.py": module(13)})
    similarity = lambda x, y: np.mean(np.frombuffer(corpus.minhash(x.encode()), np.uint32)
                                      == np.frombuffer(corpus.minhash(y.encode()), np.uint32))
    assert similarity(v1, v2) >= corpus.NEAR_DUP > 0.3 > similarity(v1, module(12))
    r = build("code", tmp_path / "out", [a, b])
    kept = docs(tmp_path / "out")
    assert nonzero(r) == {"near_duplicate": 1} and r["docs"] == 3
    first = min((a.name + "/gamma/util.py", v1), (b.name + "/gamma/util.py", v2),
                key=lambda kt: corpus.key_hash(kt[0], "order"))[1]
    assert first in kept and ({v1, v2} - {first}).isdisjoint(kept)
    assert module(12) in kept and module(13) in kept


def test_near_duplicates_inside_one_tree_are_kept(tmp_path):
    """Near duplicates are looked for between archives and trees, not inside one (docstring of
    train/corpus.py); exact duplicates are dropped everywhere."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(module(21))
    (src / "b.py").write_text("# the other file\n" + module(21))
    (src / "c.py").write_text(module(21))
    r = build("code", tmp_path / "out", [src])
    assert nonzero(r) == {"duplicate": 1} and r["docs"] == 2


def test_generated_minified_and_licence_files_are_dropped_with_their_reason(tmp_path):
    table = "TABLE = [\n" + "".join(f"    ({i}, {i * i}, '{i:x}'),\n" for i in range(300)) + "]\n"
    files = {
        "pkg/good.py": module(31),
        "pkg/doc_mentions.py": '"""A tree can be generated by passing flags."""\n' + module(32),
        "pkg/gen.py": "# Generated by the protocol buffer compiler.  DO NOT EDIT!\n" + module(33),
        "pkg/thing_pb2.py": module(34),
        "pkg/table.py": '"""Lookup tables."""\n' + table,
        "pkg/mini.py": "x=[" + ",".join(f"f{i}(a,b)" for i in range(800)) + "]\n",
        "pkg/__init__.py": APACHE,
        "pkg/header_only.py": APACHE + '"""Nothing here yet."""\n',
        "README.rst": "Pkg\n===\n\nPkg turns token streams into tables of records and keeps them in a cache.\n",
        "docs/guide.md": "# Guide\n\nCall `parse` on a stream, then `index` the records by their header field.\n",
        "LICENSE.txt": "MIT License\n\nCopyright (c) 2024 Someone\n\nPermission is hereby granted...\n",
        "NOTICE.md": "This product includes software developed at Example.\n",
        "docs/legal.txt": "Copyright (c) 2024 Someone. All rights reserved.\n\nRedistribution and use in "
                          "source and binary forms, with or without modification, are permitted.\n",
    }
    path = sdist(tmp_path, "delta", "0.1", files, ".tar.xz")
    r = build("code", tmp_path / "code", [path])
    assert nonzero(r) == {"generated": 3, "minified": 1, "licence": 2}
    assert sorted(docs(tmp_path / "code")) == sorted([files["pkg/good.py"], files["pkg/doc_mentions.py"]])
    r = build("text", tmp_path / "text", [path], val_fraction=0.0)
    assert nonzero(r) == {"licence": 3} and r["docs"] == 2
    assert sorted(docs(tmp_path / "text")) == sorted([files["README.rst"], files["docs/guide.md"]])


def test_exclude_globs_reach_inside_archives(tmp_path):
    """`json/*` and `calendar.py` (as speedrun passes the eval packages) match the path below a
    wheel's root and below an sdist's name-version/ folder (and its src/)."""
    wheel(tmp_path, "mix", "1.0", {"json/__init__.py": module(41), "json/decoder.py": module(42),
                                   "calendar.py": module(43), "mix/json/keep.py": module(44)})
    sdist(tmp_path, "cal", "2.0", {"calendar.py": module(45), "src/json/x.py": module(46), "cal/core.py": module(47)})
    r = build("code", tmp_path / "out", [tmp_path], exclude=("json/*", "calendar.py"))
    assert r["excluded"] == 5 and r["docs"] == 2
    assert sorted(docs(tmp_path / "out")) == sorted([module(44), module(47)])


def test_a_corrupt_archive_is_skipped_with_a_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(corpus, "INLINE_BYTES", 0)  # read in worker processes, however small
    good = wheel(tmp_path, "fine", "1.0", {"fine/a.py": module(51), "fine/b.py": module(52)})
    data = good.read_bytes()
    (tmp_path / "cut-1.0-py3-none-any.whl").write_bytes(data[: len(data) // 2])  # truncated
    (tmp_path / "junk-1.0.tar.gz").write_bytes(b"\x1f\x8b" + bytes(range(256)) * 4)  # not gzip inside
    bad_crc = bytearray(wheel(tmp_path, "crc", "1.0", {"crc/z.py": module(53)}).read_bytes())
    at = bad_crc.find(b"crc/z.py") + len("crc/z.py") + 10
    bad_crc[at] ^= 0xFF  # damage the deflated data of the member, after its local header
    (tmp_path / "crc-1.0-py3-none-any.whl").write_bytes(bytes(bad_crc))
    r = build("code", tmp_path / "out", [tmp_path], workers=2)
    err = capsys.readouterr().err
    assert r["dropped"]["bad_archive"] == 3 and r["archives"] == 4 and r["docs"] == 2
    assert sorted(docs(tmp_path / "out")) == sorted([module(51), module(52)])
    warned = [line for line in err.splitlines() if "warning: skipped" in line]
    assert len(warned) == 3 and len(r["warnings"]) == 3
    for name in ("cut-1.0-py3-none-any.whl", "junk-1.0.tar.gz", "crc-1.0-py3-none-any.whl"):
        assert sum(name in line for line in warned) == 1, (name, warned)


def test_shards_are_byte_identical_for_any_number_of_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "INLINE_BYTES", 0)  # read in worker processes, however small
    src = tmp_path / "src"
    (src / "tree" / "pkg").mkdir(parents=True)
    for i in range(12):
        (src / "tree" / "pkg" / f"m{i}.py").write_text(module(100 + i, 5))
    for w in range(5):
        wheel(src, f"w{w}", "1.0", {f"w{w}/m{i}.py": module(200 + 10 * w + i, 4) for i in range(6)}
              | {"shared/six.py": module(999, 6)}, description=f"Package {w} of the test.\n")
        sdist(src, f"s{w}", "0.1", {f"s{w}/m{i}.py": module(300 + 10 * w + i, 4) for i in range(4)}
              | {"util.py": module(400 + (w % 2), 8)})
    reports = []
    for n in (1, 2):
        reports.append(build("code", tmp_path / f"out{n}", [src], docs_per_shard=7, row_group=3, workers=n))
    one, two = (list_shards(tmp_path / f"out{n}") for n in (1, 2))
    assert [r["workers"] for r in reports] == [1, 2]
    assert len(one) >= 5 and [f.name for f in one] == [f.name for f in two]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(one, two))
    assert reports[0]["dropped"] == reports[1]["dropped"] and reports[0]["dropped"]["duplicate"] == 4 + 3
    manifests = [json.loads((tmp_path / f"out{n}" / "data.json").read_text()) for n in (1, 2)]
    assert manifests[0] == manifests[1] and manifests[0]["docs"] == reports[0]["docs"]


def test_cli_prints_what_was_kept_and_dropped(tmp_path):
    wheel(tmp_path, "eps", "1.0", {"eps/a.py": module(61), "eps/b.py": module(62), "eps/gen.py": "# DO NOT EDIT\nx = 1\n"})
    wheel(tmp_path, "eps", "1.1", {"eps/a.py": module(61), "eps/b.py": module(62)})
    out = tmp_path / "data"
    run = subprocess.run([sys.executable, "-m", "train.cli", "data", "local", "--kind", "code", "--src",
                          str(tmp_path), "--out", str(out), "--workers", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    line = run.stdout.strip()
    assert line.startswith("code: 2 docs") and "MB of text" in line and "tokens, estimated at 3.8 bytes/token" in line
    assert "from 0 files and 2 archives" in line and "dropped: 1 generated, 2 duplicate;" in line
    manifest = json.loads((out / "code" / "data.json").read_text())
    assert {k: n for k, n in manifest["dropped"].items() if n} == {"duplicate": 2, "generated": 1}
    assert sorted(docs(out / "code")) == sorted([module(61), module(62)])


def test_cli_rejects_a_source_that_is_not_a_tree_or_archive(tmp_path, capsys):
    (tmp_path / "notes.pdf").write_bytes(b"%PDF")
    assert cli.main(["data", "local", "--kind", "code", "--src", str(tmp_path / "notes.pdf"), "--out", str(tmp_path)]) == 2
    assert "notes.pdf is not a directory or a source archive" in capsys.readouterr().err
