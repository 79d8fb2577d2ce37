"""The pretraining loader: best-fit BOS-aligned packing, the code/text mixture, process striding,
exact (bitwise) resume from a JSON state, and clear errors."""

import json
import random
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from nanocode.tokenizer import train_tokenizer
from train.loader import DocumentReader, check_batch, data_sources, hf_dataset, packed_batches
from train.shards import DataError, build_local, list_shards

STDLIB = Path(sysconfig.get_paths()["stdlib"])
WORDS = "the a of river light stone garden music number story tree old new small bright quiet".split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """data/code: ~65 stdlib modules (long docs); data/text: 150 short prose docs; a 512-token BPE."""
    root = tmp_path_factory.mktemp("corpus")
    prose = root / "prose"
    prose.mkdir()
    rng = random.Random(0)
    for i in range(150):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 120))]
        (prose / f"note{i:03d}.md").write_text(f"Note {i}. " + " ".join(words) + ".\n")
    data = root / "data"
    build_local("code", data / "code", [STDLIB / d for d in ("json", "email", "asyncio")],
                docs_per_shard=16, row_group=4, progress=False)
    build_local("text", data / "text", [prose], docs_per_shard=40, row_group=8, progress=False)
    texts = [t for k in ("code", "text") for _, t in DocumentReader(data / k)]
    tok = train_tokenizer(texts, 512)
    docs = {}
    for kind in ("code", "text"):
        all_texts = [t for _, t in DocumentReader(data / kind, None)]
        docs[kind] = [tuple([tok.bos_id, *ids]) for ids in tok.encode_batch(all_texts)]
    docs["whole"] = {k: set(ds) for k, ds in docs.items()}
    return data, tok, docs


def segments(row, bos):
    starts = list(np.flatnonzero(row == bos)) + [len(row)]
    return [tuple(int(t) for t in row[a:b]) for a, b in zip(starts, starts[1:])]


def source_of(seg, docs):
    """Which source's documents this segment is (a whole document or, cropped, a prefix of one)."""
    kinds = ("code", "text")
    found = {k for k in kinds if seg in docs["whole"][k] or any(d[: len(seg)] == seg for d in docs[k])}
    assert len(found) == 1, (found, seg[:10])
    return found.pop()


def row_source(row, docs, bos):
    """The one source of a row's documents (a lone BOS cropped into the last slot tells nothing)."""
    found = {source_of(s, docs) for s in segments(row, bos) if len(s) > 1}
    assert len(found) == 1, found
    return found.pop()


def take(it, n):
    return [next(it) for _ in range(n)]


def test_rows_are_bos_aligned_full_and_from_their_source(corpus):
    data, tok, docs = corpus
    it = packed_batches(tok, {"text": data / "text", "code": data / "code"}, {"text": 0.5, "code": 0.5},
                        batch_size=4, seq_len=128, buffer_docs=16)
    whole_docs_packed = 0
    for x, y, _ in take(it, 12):
        assert x.shape == y.shape == (4, 128) and x.dtype == y.dtype == np.int32
        assert x.flags.c_contiguous and y.flags.c_contiguous
        assert (x[:, 0] == tok.bos_id).all()
        assert (x[:, 1:] == y[:, :-1]).all()  # targets are the inputs shifted by one in each T+1 row
        for xr, yr in zip(x, y):
            row = np.concatenate([xr, yr[-1:]])
            segs = segments(row, tok.bos_id)
            assert sum(map(len, segs)) == 129  # 100% of the row is document tokens: no padding
            row_source(row, docs, tok.bos_id)  # all of a row's documents come from one source
            for s in segs[:-1]:  # only the last document of a row may be cropped
                assert s in docs["whole"]["code"] | docs["whole"]["text"]
            whole_docs_packed += len(segs) - 1
    assert whole_docs_packed > 10  # short prose documents do get packed several to a row


def test_best_fit_picks_largest_that_fits_then_crops_shortest(corpus, tmp_path):
    _, tok, _ = corpus
    lengths = {"a": 30, "b": 10, "c": 25, "d": 60}  # tokens incl. BOS, for a 64-token row
    src = tmp_path / "src"
    src.mkdir()
    word = next(w for w in ("x", "a", "e") if len(tok.encode(" " + w)) == 1 and len(tok.encode(w)) == 1)
    for name, n in lengths.items():
        (src / f"{name}.txt").write_text(word + (" " + word) * (n - 2))
    build_local("text", tmp_path / "text", [src], val_fraction=0.0, progress=False)
    reader_docs = [t for _, t in DocumentReader(tmp_path / "text")]
    assert len(reader_docs) == 3  # one went to the val shard
    x, y, _ = next(packed_batches(tok, {"text": tmp_path / "text"}, None, 1, 63, buffer_docs=10))
    row = np.concatenate([x[0], y[0, -1:]])
    sizes = [len(s) for s in segments(row, tok.bos_id)]
    have = sorted(len(tok.encode(t)) + 1 for t in reader_docs)
    # greedy best fit: the largest that fits 64, then the largest that fits the rest, ...; crop last
    space, expect, pool = 64, [], list(have)
    while space:
        fits = [n for n in pool if n <= space]
        n = max(fits) if fits else min(pool)
        pool.remove(n)
        expect.append(min(n, space))
        space -= expect[-1]
        if not pool:
            break
    assert sizes[: len(expect)] == expect


def test_mixture_ratio_follows_weights(corpus):
    data, tok, docs = corpus
    it = packed_batches(tok, {"text": data / "text", "code": data / "code"}, {"text": 0.8, "code": 0.2},
                        batch_size=8, seq_len=16, buffer_docs=8, seed=3)
    kinds = [row_source(np.concatenate([xr, yr[-1:]]), docs, tok.bos_id) for x, y, _ in take(it, 50)
             for xr, yr in zip(x, y)]
    assert abs(kinds.count("code") / len(kinds) - 0.2) < 0.07


def test_single_source_and_val_is_finite(corpus):
    data, tok, _ = corpus
    it = packed_batches(tok, {"code": data / "code"}, {"code": 1.0}, 2, 32, split="val", buffer_docs=4)
    batches = list(it)
    assert 0 < len(batches) <= 20
    assert all((x[:, 0] == tok.bos_id).all() for x, _, _ in batches)


def test_two_processes_stride_row_groups_disjointly(corpus):
    data, _, _ = corpus
    one = DocumentReader(data / "code", "train")
    parts = [DocumentReader(data / "code", "train", p, 2) for p in range(2)]
    assert parts[0].mine == one.units[0::2] and parts[1].mine == one.units[1::2]
    refs = [[ref for ref, _ in r] for r in parts]
    assert not set(refs[0]) & set(refs[1])
    assert sorted(refs[0] + refs[1]) == sorted(ref for ref, _ in one)
    assert len(one.units) > 4


def test_resume_is_bitwise_across_epochs_with_mixture(corpus):
    data, tok, _ = corpus
    kw = dict(tokenizer=tok, sources={"text": data / "text", "code": data / "code"},
              weights={"text": 0.6, "code": 0.4}, batch_size=4, seq_len=40, buffer_docs=6, seed=7)
    run = take(packed_batches(**kw), 60)
    epochs = [(s["sources"]["code"]["epoch"], s["sources"]["text"]["epoch"]) for _, _, s in run]
    assert epochs[-1][0] >= 1 and epochs[-1][1] >= 1  # both sources wrapped around inside the run
    boundary = next(i for i, e in enumerate(epochs) if e != epochs[0])
    for k in sorted({1, boundary - 1, boundary, 45}):
        state = json.loads(json.dumps(run[k - 1][2]))  # the state after k batches, through JSON
        resumed = take(packed_batches(**kw, state=state), 60 - k)
        for (x, y, s), (rx, ry, rs) in zip(run[k:], resumed):
            assert np.array_equal(x, rx) and np.array_equal(y, ry) and s == rs


def test_state_is_json_and_small(corpus):
    data, tok, _ = corpus
    it = packed_batches(tok, {"text": data / "text", "code": data / "code"}, {"text": 0.8, "code": 0.2},
                        batch_size=2, seq_len=64, buffer_docs=1000)
    _, _, state = next(it)
    text = json.dumps(state)
    buffered = sum(len(rows) for _, _, rows, _ in state["sources"]["text"]["buffer"])
    assert buffered >= 990 and len(text) < 200_000
    assert json.loads(text) == state


def test_resume_refuses_a_different_loader(corpus):
    data, tok, _ = corpus
    _, _, state = next(packed_batches(tok, {"code": data / "code"}, None, 2, 32, buffer_docs=4))
    with pytest.raises(DataError, match="does not match"):
        next(packed_batches(tok, {"code": data / "code"}, None, 4, 32, buffer_docs=4, state=state))
    with pytest.raises(DataError, match="does not match.*tokenizer"):
        other = json.loads(json.dumps(state))
        other["tokenizer"] = "0" * 16
        next(packed_batches(tok, {"code": data / "code"}, None, 2, 32, buffer_docs=4, state=other))
    with pytest.raises(DataError, match="the loader state says"):
        changed = json.loads(json.dumps(state))
        for run in changed["sources"]["code"]["buffer"]:
            run[3] = [n + 1 for n in run[3]]  # as if the documents had changed under the same names
        take(packed_batches(tok, {"code": data / "code"}, None, 2, 32, buffer_docs=4, state=changed), 5)
    with pytest.raises(DataError, match="other shards"):
        bad = json.loads(json.dumps(state))
        bad["sources"]["code"]["digest"] = "0" * 16
        next(packed_batches(tok, {"code": data / "code"}, None, 2, 32, buffer_docs=4, state=bad))


def test_missing_or_empty_source_names_it(corpus, tmp_path):
    _, tok, _ = corpus
    (tmp_path / "empty").mkdir()
    for d in (tmp_path / "missing", tmp_path / "empty"):
        with pytest.raises(DataError, match=f"{d.name}.*train data local"):
            next(packed_batches(tok, {"code": d}, None, 2, 32))
    with pytest.raises(DataError, match="train data local"):
        data_sources(tmp_path)


def test_corrupt_shard_is_named_by_the_loader(corpus, tmp_path):
    data, tok, _ = corpus
    d = tmp_path / "code"
    d.mkdir()
    files = list_shards(data / "code")
    for f in files:
        (d / f.name).write_bytes(f.read_bytes())
    victim = d / files[1].name
    with pytest.raises(DataError, match=f"{victim.name}: corrupt or truncated"):
        victim.write_bytes(victim.read_bytes()[:300])
        next(packed_batches(tok, {"code": d}, None, 2, 32))
    victim.write_bytes(files[1].read_bytes())
    reader = DocumentReader(d, "train")  # footers read and cached; now the data goes bad under it
    victim.write_bytes(victim.read_bytes()[:300])
    with pytest.raises(DataError, match=f"{victim.name}: (cannot read row group|corrupt or truncated)"):
        list(reader)


def test_check_batch():
    assert check_batch(32, 4) == 8 and check_batch(32, 2, 4) == 16
    with pytest.raises(ValueError, match="global batch 10 does not divide over 4 processes"):
        check_batch(10, 4)
    with pytest.raises(ValueError, match="does not divide over 4 local devices"):
        check_batch(12, 2, 4)
    with pytest.raises(ValueError, match=">= 1"):
        check_batch(0)


def test_data_sources(corpus):
    data, _, _ = corpus
    assert data_sources(data, 0.2) == ({"text": str(data / "text"), "code": str(data / "code")},
                                       {"text": 0.8, "code": 0.2})
    assert data_sources(data, 1.0) == ({"code": str(data / "code")}, {"code": 1.0})


def test_datasets_view_matches_reader(corpus):
    data, _, _ = corpus
    ds = hf_dataset(data / "code", "val")
    assert [row["text"] for row in ds] == [t for _, t in DocumentReader(data / "code", "val")]



def test_copy_rows_repeat_a_random_run_and_resume_exactly(corpus):
    """copy_share=0.5: about half the rows are BOS + one random run of 8-128 ordinary tokens
    repeated; the other rows are exactly the plain loader's rows, in order (copy rows read no
    documents); the rows are a function of the state."""
    data, tok, _ = corpus
    kw = dict(tokenizer=tok, sources={"code": data / "code"}, weights=None, batch_size=4, seq_len=300,
              buffer_docs=6, seed=3)
    plain = np.concatenate([x for x, _, _ in take(packed_batches(**kw), 10)])
    copied = take(packed_batches(**kw, copy_share=0.5), 10)
    rows = np.concatenate([x for x, _, _ in copied])
    is_copy = []
    for row in rows:
        assert row[0] == tok.bos_id
        period = next((p for p in range(8, 129) if np.array_equal(row[1 + p:], row[1:-p])), None)
        is_copy.append(period is not None)
        if period is not None:
            assert not any(tok.is_special(int(t)) for t in row[1:])
    assert 10 <= sum(is_copy) <= 30
    natural = rows[~np.array(is_copy)]
    assert np.array_equal(natural, plain[:len(natural)])
    state = json.loads(json.dumps(copied[4][2]))
    assert state["copy_share"] == 0.5
    for (x, y, s), (rx, ry, rs) in zip(copied[5:], take(packed_batches(**kw, copy_share=0.5, state=state), 5)):
        assert np.array_equal(x, rx) and np.array_equal(y, ry) and s == rs
    with pytest.raises(DataError, match="does not match"):
        next(packed_batches(**kw, copy_share=0.25, state=state))
    with pytest.raises(ValueError, match="copy_share"):
        packed_batches(**kw, copy_share=1.5)


def test_span_rows_plant_names_twice_far_apart_and_resume_exactly(corpus):
    """span_share=1: every natural row keeps its text except for made-up backticked names, each
    written twice 64+ tokens apart (the second copy is the first's tokens exactly); rows are a
    function of the state."""
    from train.copy_rows import MIN_DISTANCE, plant_spans
    data, tok, _ = corpus
    kw = dict(tokenizer=tok, sources={"code": data / "code"}, weights=None, batch_size=4, seq_len=600,
              buffer_docs=6, seed=3)
    plain = np.concatenate([x for x, _, _ in take(packed_batches(**kw), 6)])
    spanned = take(packed_batches(**kw, span_share=1.0), 6)
    rows = np.concatenate([x for x, _, _ in spanned])
    changed = (rows != plain).mean(axis=1)
    assert (changed > 0).all() and (changed < 0.5).all()  # names planted, the text mostly kept (a tiny vocab)
    state = json.loads(json.dumps(spanned[2][2]))
    assert state["span_share"] == 1.0
    for (x, _, _), (rx, _, _) in zip(spanned[3:], take(packed_batches(**kw, span_share=1.0, state=state), 3)):
        assert np.array_equal(x, rx)
    # the planting itself: every planted name occurs twice, at least MIN_DISTANCE apart
    row = np.zeros(2049, dtype=np.int32)
    rng = np.random.default_rng(0)
    encoded = []
    n = plant_spans(row, rng, lambda s: encoded.append(tok.encode(s)) or encoded[-1])
    assert n >= 2
    text = tok.decode(row)
    for ids in encoded[:n]:
        hits = [i for i in range(len(row) - len(ids) + 1) if list(row[i:i + len(ids)]) == ids]
        assert len(hits) == 2 and hits[1] - hits[0] >= MIN_DISTANCE, (tok.decode(ids), hits)
    assert text.count("`") == 4 * n
    with pytest.raises(ValueError, match="span_share"):
        packed_batches(**kw, span_share=-0.1)


class CountingTokenizer:
    """The real tokenizer, counting the characters it is asked to encode."""

    def __init__(self, tok):
        self.tok, self.chars = tok, 0

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def encode_batch(self, texts):
        self.chars += sum(len(t) for t in texts)
        return self.tok.encode_batch(texts)


def test_a_long_document_is_cut_before_it_is_tokenized(corpus, tmp_path):
    """A 200,000-character file gives a row its first tokens, the same as from tokenizing it whole,
    but only CROP_CHARS_PER_TOKEN x (T+1) of its characters are tokenized."""
    from train.loader import CROP_CHARS_PER_TOKEN
    _, tok, _ = corpus
    src = tmp_path / "src"
    src.mkdir()
    text = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(7000))[:200_000]
    (src / "big.py").write_text(text)
    (src / "other.py").write_text("# the other file\n" + text)  # one file goes to the val shard
    build_local("code", tmp_path / "code", [src], val_fraction=0.0, progress=False)
    text, = [t for _, t in DocumentReader(tmp_path / "code")]
    counting = CountingTokenizer(tok)
    x, y, state = next(packed_batches(counting, {"code": tmp_path / "code"}, None, 1, 63, buffer_docs=1))
    assert counting.chars == CROP_CHARS_PER_TOKEN * 64 < len(text) / 100
    assert list(x[0]) == [tok.bos_id, *tok.encode(text)[:62]] and y[0, -1] == tok.encode(text)[62]
    assert state["format"] == "nanocode-loader/2"


def test_prefetched_batches_keep_their_order_and_raise_where_the_source_failed():
    """train.loop.prefetched runs an iterator ahead on a thread: the same items in the same order,
    at most `depth` ahead of the consumer, and an error at the item where it happened."""
    import threading
    import time
    from train.loop import prefetched
    made = []

    def source(n, fail_at=None):
        for i in range(n):
            if i == fail_at:
                raise DataError(f"shard {i} is corrupt")
            made.append(i)
            yield i, {"batches": i + 1}

    assert list(prefetched(source(20), 3)) == [(i, {"batches": i + 1}) for i in range(20)]
    made.clear()
    it = prefetched(source(20), 3)
    assert next(it) == (0, {"batches": 1})
    time.sleep(0.3)  # the thread runs ahead, then waits on the full queue
    assert len(made) <= 1 + 3 + 1  # the item taken, the queue, the one waiting to go in
    assert [t.name for t in threading.enumerate()].count("nanocode-batches") >= 1
    got = []
    with pytest.raises(DataError, match="shard 5 is corrupt"):
        for item, _ in prefetched(source(20, fail_at=5), 2):
            got.append(item)
    assert got == [0, 1, 2, 3, 4]
    assert list(prefetched(source(4), 0)) == [(i, {"batches": i + 1}) for i in range(4)]  # depth 0: inline
