"""Rows from a hub dataset's data files, read one file at a time (the fallback of
train.conversations when `datasets.load_dataset` cannot build the dataset), and the file readers.

`datasets` gives a whole split one Arrow schema. Tool-call rows defeat that: each tool has its own
`args` keys (Edit file_path/old_string/new_string, Grep pattern/path/-A/-B, Bash command ...), so
two parquet files whose rows call different tools have different `args` structs, and building the
split fails with a cast error (JSONL files too, with `datasets` versions that give them one struct
type). Here the split's files are listed and downloaded with `huggingface_hub` and read separately:
JSONL line by line with `json`, parquet per file with pyarrow (one file has one schema; fields it
lacks in a row come back None, and `args` stored as JSON strings stay strings:
train.conversations.normalize drops the Nones and parses the strings). Rows are returned as they
are: no conversion here.

Which files are a split follows the hub's file-name convention: a file belongs to split S when
one of S's names (train/training, validation/valid/val/dev, test/testing/eval/evaluation) stands in
its path between separators (`all_train.jsonl`, `data/test-00000-of-00001.parquet`); when no file
names any split, every data file is train. A dataset card's own `configs:` mapping is not read.

pyarrow (~0.3 s) and huggingface_hub are imported inside the readers that need them:
train.conversations imports this module to read local JSON lines as well, with neither (the chip
host of train/v5e.sh has no huggingface_hub).
"""

from __future__ import annotations

import json
import re

DATA_EXTENSIONS = (".jsonl", ".json", ".parquet")
SPLIT_NAMES = {"train": ("train", "training"), "validation": ("validation", "valid", "val", "dev"),
               "test": ("test", "testing", "eval", "evaluation")}
_SCHEMA_ERRORS = {"CastError", "DatasetGenerationCastError", "ArrowInvalid", "ArrowTypeError",
                  "ArrowNotImplementedError"}
_SCHEMA_MESSAGE = re.compile(r"(could ?n[o']t|cannot|can't|unable to) cast|schema", re.IGNORECASE)


def is_schema_error(e: BaseException) -> bool:
    """Whether a `datasets.load_dataset` failure is Arrow not unifying the rows' types (a cast or
    schema error anywhere in its chain of causes), as opposed to being offline or a missing name."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e).__name__ in _SCHEMA_ERRORS or _SCHEMA_MESSAGE.search(str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


def _names_split(path: str, split: str) -> bool:
    names = SPLIT_NAMES.get(split, (split,))
    return any(re.search(rf"(^|[-._ /0-9]){re.escape(n)}($|[-._ /0-9])", path.lower())
               for n in names)


def split_files(files: list[str], split: str) -> list[str]:
    """The data files (by extension) of `split` among a repository's file paths, sorted."""
    data = sorted(f for f in files if f.lower().endswith(DATA_EXTENSIONS))
    mine = [f for f in data if _names_split(f, split)]
    if mine:
        return mine
    if split == "train" and not any(_names_split(f, s) for f in data for s in SPLIT_NAMES):
        return data
    raise ValueError(f"no {split!r} data files ({', '.join(DATA_EXTENSIONS)}) among "
                     f"{', '.join(files) or 'no files'}")


def read_jsonl(path: str) -> list[dict]:
    """Every line of a JSONL file as JSON (blank lines skipped); a bad line is an error naming
    it."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: json: {e}; check the file with "
                                     f"`python -m train.conversations {path}`") from None
    return rows


def read_parquet(path: str) -> list[dict]:
    """A parquet file's rows as Python objects, batch by batch under the file's own schema."""
    import pyarrow.parquet as pq

    return [row for batch in pq.ParquetFile(path).iter_batches() for row in batch.to_pylist()]


def read_data_file(path: str) -> list[dict]:
    """Rows of a .parquet, .jsonl or .json file (a .json file is one array of rows, one row, or
    JSON lines)."""
    if path.lower().endswith(".parquet"):
        return read_parquet(path)
    if path.lower().endswith(".json"):
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError:
                data = None
        if isinstance(data, list):
            return data
        if isinstance(data, dict):
            return [data]
    return read_jsonl(path)


def hub_rows(name: str, split: str = "train") -> list[dict]:
    """The rows of `split` of the hub dataset `name`, file by file, without schema unification."""
    import huggingface_hub  # local: not on the chip host (train/v5e.sh); see the docstring

    files = split_files(huggingface_hub.list_repo_files(name, repo_type="dataset"), split)
    rows = []
    for f in files:
        rows += read_data_file(huggingface_hub.hf_hub_download(name, f, repo_type="dataset"))
    return rows
