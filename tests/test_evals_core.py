"""evals core: centered accuracy and the CORE/CORE-subset name, nanochat's prompt templates and
continuation spans, the jitted row scorer against a numpy recomputation, an oracle scorer that
gets every tiny-bundle task right (and an anti-oracle none), the offline error, and `evals core`
end to end on a tiny random checkpoint."""

import json
import math

import numpy as np
import pytest

from evals import core
from nanocode.checkpoint import save
from nanocode.tokenizer import train_tokenizer
from tests.tiny_models import random_params, tiny


@pytest.fixture(scope="module")
def tok():
    tasks = core.load_tasks(core.TINY_BUNDLE)
    texts = [json.dumps(row) for t in tasks for row in core.load_data(core.TINY_BUNDLE, t)]
    return train_tokenizer(texts * 3, 300)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tok):
    cfg = tiny(n_layer=2, vocab_size=320, sequence_len=128)
    params = random_params(cfg)
    run = tmp_path_factory.mktemp("core") / "runs" / "tiny"
    save(run / "checkpoints", 7, params, config=cfg, tokenizer=tok, metadata={"step": 7, "stage": "base"})
    return run, cfg, params


def test_centered_accuracy_by_hand():
    assert core.centered(0.5, 50) == 0.0  # chance
    assert core.centered(1.0, 25) == 1.0  # perfect
    assert core.centered(0.625, 25) == pytest.approx(0.5)  # (0.625 - 0.25) / 0.75
    assert core.centered(0.2, 0) == pytest.approx(0.2)  # LM tasks: no baseline
    assert core.centered(0.31, 62) == pytest.approx((0.31 - 0.62) / 0.38)  # boolq: below chance


def test_metric_name_never_calls_a_subset_core():
    assert core.metric_name(core.CORE_TASKS) == "CORE"
    assert core.metric_name(core.CORE_TASKS[:6]) == "CORE-subset (6/22 tasks)"
    assert core.metric_name(["copa", "mine"], limit=5) == "CORE-subset (1/22 tasks + 1 others), first 5 examples/task"
    assert core.metric_name(core.CORE_TASKS, limit=100) == "CORE, first 100 examples/task"


def test_tiny_bundle_loads_with_every_task_type():
    tasks = core.load_tasks(core.TINY_BUNDLE)
    assert {t.task_type for t in tasks} == set(core.TASK_TYPES)
    assert all(len(core.load_data(core.TINY_BUNDLE, t)) >= 10 for t in tasks)
    assert {t.label: t.baseline for t in tasks}["copa"] == 50.0
    assert next(t for t in tasks if t.label == "arc_easy").delimiter == "\nAnswer: "


def test_render_matches_nanochat_templates():
    mc = core.IclTask("mc", "multiple_choice", "x", 1, "\nAnswer: ", 25)
    shot = {"query": "S", "choices": ["no", "yes"], "gold": 1}
    assert core.render(mc, {"query": "Q", "choices": ["a", "b"], "gold": 0}, [shot]) == [
        "S\nAnswer: yes\n\nQ\nAnswer: a", "S\nAnswer: yes\n\nQ\nAnswer: b"]
    schema = core.IclTask("s", "schema", "x", 0, " ", 50)
    assert core.render(schema, {"context_options": ["A x", "B x"], "continuation": "end.", "gold": 1}, []) == [
        "A x end.", "B x end."]
    lm = core.IclTask("l", "language_modeling", "x", 1, " ", 0)
    shot = {"context": " one two ", "continuation": "three"}
    assert core.render(lm, {"context": "four five \n", "continuation": "six"}, [shot]) == [
        "one two three\n\nfour five", "one two three\n\nfour five six"]


def test_spans_per_task_type():
    mc = core.spans("multiple_choice", [[1, 5, 6, 7], [1, 5, 6, 8, 9]])
    assert [(s, e) for _, s, e in mc] == [(3, 4), (3, 5)]
    schema = core.spans("schema", [[1, 2, 9, 9], [1, 3, 4, 9, 9]])
    assert [(s, e) for _, s, e in schema] == [(2, 4), (3, 5)]
    (row, s, e), = core.spans("language_modeling", [[1, 2, 3], [1, 2, 3, 4, 5]])
    assert (row, s, e) == ([1, 2, 3, 4, 5], 3, 5)


def test_fewshot_draw_is_nanochats():
    import random

    for i, n, k in [(0, 12, 3), (5, 12, 10), (11, 12, 11), (3, 4, 10)]:
        others = [j for j in range(n) if j != i]
        assert core.fewshot_indices(i, n, k) == random.Random(1234 + i).sample(others, min(k, n - 1))


def test_judge_picks_lowest_loss_first_on_ties():
    assert core.judge("multiple_choice", 1, [2.0, 0.5, 0.7], [False] * 3) == (1, True)
    assert core.judge("schema", 0, [0.3, 0.3], [False] * 2) == (0, True)
    assert core.judge("multiple_choice", 2, [0.1, 0.9, 0.4], [True] * 3) == (0, False)
    assert core.judge("language_modeling", None, [5.0], [True]) == (None, True)


def _tiny_examples(tok, limit=None, max_len=4096):
    tasks = core.load_tasks(core.TINY_BUNDLE)
    datas = [core.load_data(core.TINY_BUNDLE, t) for t in tasks]
    examples, rows = core.build(tasks, datas, tok, limit, max_len)
    return tasks, examples, rows


def test_oracle_scorer_gets_accuracy_one_and_anti_oracle_zero(tok):
    """A scorer that knows the gold rows (loss 0 and a greedy match there, loss 5 elsewhere) must
    score 1.0 on every task through batching and bookkeeping; its mirror must score 0."""
    tasks, examples, rows = _tiny_examples(tok)
    gold_rows = {tuple(rows[ex.rows[0 if ex.gold is None else ex.gold]][0].tolist()) for ex in examples}

    def scorer(right: bool):
        def run(ids, starts, ends):
            hit = np.array([tuple(r[:e]) in gold_rows for r, e in zip(ids.tolist(), ends)])
            good = hit if right else ~hit
            return np.where(good, 0.0, 5.0), good
        return run

    for right, want in ((True, 1.0), (False, 0.0)):
        losses, matches = core.score_rows(rows, scorer(right), tok.bos_id, 4096, 256)
        per_task, records, value = core.summarize(tasks, examples, losses, matches)
        assert {r["accuracy"] for r in per_task.values()} == {want}
        assert len(records) == sum(r["examples"] for r in per_task.values()) == 60
    assert value == pytest.approx(sum(core.centered(0.0, t.baseline) for t in tasks) / len(tasks))


def test_limit_is_a_prefix_of_the_full_run(tok):
    _, full_ex, full_rows = _tiny_examples(tok)
    _, ex, rows = _tiny_examples(tok, limit=3)
    assert len(ex) == 3 * 6
    def key(rs, e):
        return [(rs[i][0].tolist(), rs[i][1], rs[i][2]) for i in e.rows]

    full = {(e.task, e.idx): key(full_rows, e) for e in full_ex}
    assert all(full[(e.task, e.idx)] == key(rows, e) for e in ex)


def test_long_rows_keep_their_last_tokens(tok):
    _, ex, rows = _tiny_examples(tok, max_len=24)
    assert max(len(t) for t, _, _ in rows) <= 24
    assert all(1 <= s < e <= len(t) for t, s, e in rows)


def test_row_scorer_matches_numpy(tiny_run):
    import jax

    from nanocode.gpt import forward

    _, cfg, params = tiny_run
    fwd = jax.jit(lambda p, ids: forward(p, cfg, ids)[0])
    ids = np.random.default_rng(0).integers(0, 300, (4, 32)).astype(np.int32)
    starts, ends = np.array([3, 10, 1, 20], np.int32), np.array([8, 11, 32, 25], np.int32)
    logits = np.asarray(fwd(params, ids), np.float64)
    ids[1, 10] = logits[1, 9].argmax()  # row 1 scores one token: make it the greedy one
    logits = np.asarray(fwd(params, ids), np.float64)
    m = logits.max(-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
    mean, match = core.make_row_scorer(params, cfg)(ids, starts, ends)
    for b in range(4):
        pos = np.arange(starts[b] - 1, ends[b] - 1)
        assert mean[b] == pytest.approx(-np.mean(logp[b, pos, ids[b, pos + 1]]), rel=1e-4)
        assert match[b] == bool(np.all(logits[b, pos].argmax(-1) == ids[b, pos + 1]))
    assert match[1] and not match[2]


def test_core_cli_tiny_model_writes_a_subset(tiny_run, tmp_path, capsys):
    from evals import cli

    run = tiny_run[0]
    status = cli.main(["core", "--model", str(run), "--bundle", "tiny", "--limit", "3",
                       "--out", str(tmp_path), "--quiet"])
    assert status == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "core_step7.json").read_text())
    assert summary["metric"] == "CORE-subset (6/22 tasks), first 3 examples/task"
    assert "core" not in summary and math.isfinite(summary["core_subset"])
    assert summary["tasks_in_core"] == 6 and len(summary["missing"]) == 16
    assert all(r["examples"] == 3 for r in summary["tasks"].values())
    records = (tmp_path / "core_step7.jsonl").read_text().splitlines()
    assert len(records) == 18
    assert "CORE-subset (6/22 tasks)" in capsys.readouterr().out


def test_offline_without_bundle_is_one_line_naming_the_flag(tiny_run, tmp_path, capsys, monkeypatch):
    from evals import cli

    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path))
    monkeypatch.setattr(core, "EVAL_BUNDLE_URL", "http://127.0.0.1:9/eval_bundle.zip")
    assert cli.main(["core", "--model", str(tiny_run[0]), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--bundle DIR" in err and len(err.splitlines()) == 1
    assert cli.main(["core", "--model", str(tiny_run[0]), "--bundle", str(tmp_path)]) == 2
    assert "no core.yaml" in capsys.readouterr().err
