"""`train tokenizer`: end to end on tiny shards, the code/text mix, and its clear errors."""

import random
import sysconfig
from pathlib import Path

import pytest

from nanocode.tokenizer import MIN_VOCAB_SIZE, Tokenizer
from train import cli
from train.shards import build_local
from train.tokenizer import corpus

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokdata")
    prose = root / "prose"
    prose.mkdir()
    rng = random.Random(1)
    words = "when the evening light falls across the valley every stone remembers summer rain".split()
    for i in range(120):
        (prose / f"p{i}.txt").write_text(" ".join(rng.choice(words) for _ in range(rng.randint(20, 200))) + "\n")
    build_local("code", root / "data" / "code", [STDLIB / "json", STDLIB / "email"], docs_per_shard=8,
                row_group=4, progress=False)
    build_local("text", root / "data" / "text", [prose], docs_per_shard=50, progress=False)
    return root / "data"


def test_train_tokenizer_end_to_end(data, tmp_path, capsys):
    out = tmp_path / "tok"
    argv = ["tokenizer", "--data", str(data), "--vocab-size", "400", "--max-chars", "300000", "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    tok = Tokenizer.load(out)
    assert MIN_VOCAB_SIZE < tok.vocab_size <= 400 and (out / "tokenizer.json").exists()
    assert "bytes/token" in printed and "trained a" in printed
    table = {line.split()[0]: float(line.split()[-1]) for line in printed.splitlines()[2:]}
    assert set(table) == {"code", "text"} and all(1.5 < v < 8 for v in table.values())


def test_corpus_mixes_to_the_code_ratio(data):
    counts = {}
    texts = list(corpus(data, 60_000, 0.25, 10_000, counts))
    assert sum(map(len, texts)) == sum(counts.values()) == 60_000
    assert abs(counts["code"] / 60_000 - 0.25) < 0.1
    only_code = {}
    list(corpus(data, 5_000, 1.0, 300, only_code))
    assert set(only_code) == {"code"} and only_code["code"] == 5_000


def test_vocab_too_small_is_a_clear_error(data, tmp_path, capsys):
    argv = ["tokenizer", "--data", str(data), "--vocab-size", "200", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"at least {MIN_VOCAB_SIZE}" in err and "Traceback" not in err
    assert not (tmp_path / "tokenizer.json").exists()


def test_missing_data_is_a_clear_error(tmp_path, capsys):
    argv = ["tokenizer", "--data", str(tmp_path / "nothing"), "--vocab-size", "300", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "train data local" in capsys.readouterr().err
