"""Fine-tuning rows (train/packing.py) with the fine-tuning tokenizer: conversations are packed
whole (never cut), only assistant tokens are supervised, BOS pads with target -1, rows come out
nearly full, best fit never overfills, the stream resumes from its state, and a data source's
weight sets how often its rows come per epoch."""
import numpy as np
import pytest

from train_helpers import make_conv


def test_packing_keeps_conversations_whole_and_supervises_only_the_assistant(tokenizer):
    from train.packing import Packer, render_docs

    T = 200
    convs = [make_conv(i) for i in range(40)]
    long = {"messages": [{"role": "user", "content": "x " * 400}, {"role": "assistant", "content": "ok"}]}
    docs, too_long = render_docs(convs + [long], tokenizer, T)
    assert too_long == 1 and len(docs) == 40
    packer = Packer([docs], [(len(docs), 1.0)], T, tokenizer.bos_id, seed=3)
    rows = packer.epoch_rows(0)
    assert sorted(i for row in rows for _, i in row) == list(range(40))  # each conversation once
    bos = tokenizer.bos_id
    specials = {tokenizer.encode_special(s) for s in ("<|tool_call_start|>", "<|tool_call_end|>",
                                                     "<|assistant_end|>", "<|tool_arg|>", "<|tool_val|>")}
    used = []
    for row in rows:
        x, y = packer.materialize(row)
        assert x.shape == y.shape == (T,)
        n = sum(len(docs[i][0]) for _, i in row)
        used.append(n)
        full = np.concatenate([x, [bos]])
        # the row is exactly the conversations back to back, then BOS padding with target -1
        expect = np.concatenate([docs[i][0] for _, i in row])
        assert np.array_equal(full[:n], expect)
        assert np.all(full[n:] == bos) and np.all(y[n - 1:] == -1)
        # every supervised target is an assistant token of the conversation at that position
        mask = np.concatenate([docs[i][1] for _, i in row])
        for t in np.nonzero(y >= 0)[0]:
            assert mask[t + 1] == 1 and y[t] == full[t + 1]
            assert y[t] in specials or not tokenizer.is_special(int(y[t]))
        assert np.sum(y >= 0) == mask[1:].sum()
    assert np.mean(used) / (T + 1) > 0.85


def test_best_fit_never_overfills():
    from train.packing import best_fit_rows

    rng = np.random.default_rng(0)
    lengths = [int(v) for v in rng.integers(1, 50, 500)]
    rows = best_fit_rows(lengths, 50, buffer=64)
    assert sorted(i for r in rows for i in r) == list(range(500))
    assert all(sum(lengths[i] for i in r) <= 50 for r in rows)
    assert np.mean([sum(lengths[i] for i in r) for r in rows]) > 47


def test_stream_resumes_from_its_state(tokenizer):
    from train.packing import Packer, render_docs

    docs, _ = render_docs([make_conv(i) for i in range(30)], tokenizer, 64)
    packer = Packer([docs], [(len(docs), 2.0)], 64, tokenizer.bos_id, seed=1)
    stream = packer.stream(None)
    first = [next(stream) for _ in range(25)]  # crosses an epoch boundary
    resumed = Packer([docs], [(len(docs), 2.0)], 64, tokenizer.bos_id, seed=1).stream(first[9][1])
    for (x, _), ((x2, _), _) in zip([f[0] for f in first[10:]], resumed):
        assert np.array_equal(x, x2)


def test_data_specs_and_weights():
    from train.conversations import parse_source
    from train.packing import epoch_order

    assert parse_source("a.jsonl") == ("a.jsonl", 1.0)
    assert parse_source("a.jsonl*3") == ("a.jsonl", 3.0)
    assert parse_source("owner/name*0.5") == ("owner/name", 0.5)
    with pytest.raises(ValueError, match="SOURCE\\*K"):
        parse_source("a.jsonl*x")
    items = epoch_order([(10, 2.0), (8, 0.5)], seed=0, epoch=0)
    assert sum(s == 0 for s, _ in items) == 20 and sum(s == 1 for s, _ in items) == 4
