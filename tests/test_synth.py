"""`train synth` (train/synth.py): rollouts are real (replayable tool results), render, follow
the schema and the style, keep held-out names/phrasings/families out of training data, and every
family's hidden check fails before and passes after its oracle. One task per family plus two
small `main` runs keep the file quick. The task package alone is tests/test_tasks.py's, the
oracle audit tests/test_oracle_audit.py's."""
from __future__ import annotations

import argparse
import json
import os

import pytest

from nanocode.tokenizer import train_tokenizer
from tiny_models import untimed
from tools.dispatch import run_tool
from train import synth
from train.cli import add_synth_args
from tasks import EVAL_ONLY_FAMILIES, HELDOUT_WORDS, WORLD_FAMILIES, make_task, shows_flaw
from tasks.requests import heldout_fragments


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return str(tmp_path_factory.mktemp("synth-projects"))


@pytest.fixture(scope="module")
def oracle_runs(base):
    """family -> (task, check before, conversation, check after), one task each."""
    runs = {}
    for i, family in enumerate(WORLD_FAMILIES["generated"]):
        task = make_task(family, 7 + i, heldout=family in EVAL_ONLY_FAMILIES or i % 2 == 0, base=base)
        before = task.check(task.root, "")
        conv = task.rollout()
        runs[family] = (task, before, conv, task.check(task.root, conv["messages"][-1]["content"]))
    return runs


def run_main(out, base, n=12, seed=3):
    p = argparse.ArgumentParser()
    add_synth_args(p)
    args = p.parse_args(["--out", str(out), "--n", str(n), "--seed", str(seed), "--workers", "2",
                         "--n-eval", str(len(WORLD_FAMILIES["generated"])), "--pref-ratio", "1",
                         "--code-ratio", "0.2",
                         "--val-fraction", "0.2", "--workdir", base])
    assert synth.main(args) == 0
    return {name: open(os.path.join(out, name)).read() for name in sorted(os.listdir(out))}


@pytest.fixture(scope="module")
def main_out(tmp_path_factory, base):
    return run_main(tmp_path_factory.mktemp("out1"), base)


def rows(text):
    return [json.loads(line) for line in text.splitlines()]


def all_convs(main_out, oracle_runs):
    convs = [r for name in ("train.jsonl", "val.jsonl") for r in rows(main_out[name])]
    for name in ("preference_train.jsonl", "preference_val.jsonl"):
        for pair in rows(main_out[name]):
            convs += [pair["chosen"], pair["rejected"]]
    return convs + [c for _, _, c, _ in oracle_runs.values()]


@pytest.fixture(scope="module")
def tokenizer(main_out, oracle_runs):
    texts = [m["content"] for c in all_convs(main_out, oracle_runs) for m in c["messages"]]
    return train_tokenizer(iter(texts), 512)


def test_check_fails_before_and_passes_after_oracle(oracle_runs):
    from tools.test_guard import tampered
    for family, (task, before, conv, after) in oracle_runs.items():
        assert not before, family
        assert after, (family, conv["messages"][-1]["content"])
        # no oracle edits the tests beyond what its request asks (harness.resolved's guard)
        assert tampered(task.root, task.guarded, task.tests_allowed, task.tests_view) == [], family


def test_schema_and_style(main_out, oracle_runs):
    """Every output passes the validator `train sft` filters its data with (schema, role order,
    tool names and arguments, result formats), so no generated conversation is silently dropped."""
    from train.conversations import validate
    for conv in all_convs(main_out, oracle_runs):
        msgs = conv["messages"]
        assert msgs[0]["role"] == "system" and msgs[1]["role"] == "user"
        assert validate(conv) == [], (validate(conv), msgs[1]["content"])


def test_oracle_style(main_out, oracle_runs):
    chosen = [c for name in ("train.jsonl", "val.jsonl") for c in rows(main_out[name])]
    chosen += [p["chosen"] for name in ("preference_train.jsonl", "preference_val.jsonl") for p in rows(main_out[name])]
    chosen += [c for _, _, c, _ in oracle_runs.values()]
    for conv in chosen:
        for m in conv["messages"]:
            if m["role"] == "assistant":
                assert not m["content"][:1].isupper(), m["content"]
                assert "anything else" not in m["content"].lower()
                assert "great question" not in m["content"].lower()


def test_renders(tokenizer, main_out, oracle_runs):
    """Supervised tokens are exactly the assistant messages' tokens."""
    for conv in all_convs(main_out, oracle_runs):
        ids, loss_mask = tokenizer.render_conversation(conv)
        want = sum(len(tokenizer.render_message(m)[0]) - 1 for m in conv["messages"]
                   if m["role"] == "assistant")  # all but <|assistant_start|>
        assert len(ids) == len(loss_mask) and sum(loss_mask) == want


def test_tool_results_are_real(oracle_runs, base):
    """Replaying every call on a freshly built copy of the project gives the same results."""
    for family, (task, _, conv, _) in oracle_runs.items():
        fresh = make_task(family, task.seed, task.heldout, base=base)
        assert fresh.prompt == task.prompt and fresh.root == task.root
        msgs = conv["messages"]
        for a, b in zip(msgs, msgs[1:]):
            if a.get("tool_call"):
                tc = a["tool_call"]
                if b["content"] == "rejected by user":
                    continue
                got = run_tool(fresh.root, tc["name"], tc["args"])
                assert untimed(got) == untimed(b["content"]), (family, tc)


def test_rejected_results_are_real(main_out, base):
    pairs = rows(main_out["preference_train.jsonl"]) + rows(main_out["preference_val.jsonl"])
    for pair in pairs[:3]:
        seed, i = map(int, pair["id"].split("-"))
        fresh = make_task(pair["family"], seed * 10**6 + i, False, base=base)
        msgs = pair["rejected"]["messages"]
        for a, b in zip(msgs, msgs[1:]):
            if a.get("tool_call") and b["content"] != "rejected by user":
                got = run_tool(fresh.root, a["tool_call"]["name"], a["tool_call"]["args"])
                assert untimed(got) == untimed(b["content"])


def test_preference_pairs_show_flaw(main_out):
    pairs = rows(main_out["preference_train.jsonl"]) + rows(main_out["preference_val.jsonl"])
    assert pairs
    for pair in pairs:
        assert pair["chosen"] != pair["rejected"]
        assert shows_flaw(pair["flaw"], pair["chosen"], pair["rejected"]), pair["flaw"]


def test_heldout_and_eval_only_stay_out_of_training(main_out):
    train_text = "".join(main_out[n] for n in ("train.jsonl", "val.jsonl", "preference_train.jsonl",
                                               "preference_val.jsonl"))
    low = train_text.lower().replace("`", "")
    for word in HELDOUT_WORDS:
        assert word not in low, word
    for frag in heldout_fragments():
        assert frag.lower() not in low, frag
    fams = {r["family"] for n in ("train.jsonl", "val.jsonl") for r in rows(main_out[n])}
    assert not fams & set(EVAL_ONLY_FAMILIES)
    evals = rows(main_out["eval_tasks.jsonl"])
    assert {e["family"] for e in evals} == set(WORLD_FAMILIES["generated"])  # the generated suite
    for e in evals:
        assert e["heldout"] and any(w in e["project"] for w in HELDOUT_WORDS)


def test_eval_prompts_use_heldout_phrasings(oracle_runs):
    frags = [f.lower() for f in heldout_fragments()]
    for family in EVAL_ONLY_FAMILIES:
        task = oracle_runs[family][0]
        assert any(f in task.prompt.lower().replace("`", "") for f in frags), task.prompt


def test_deterministic_by_seed(main_out, tmp_path, base):
    again = run_main(tmp_path / "out2", base)
    assert sorted(again) == sorted(main_out)
    for name in main_out:
        assert untimed(again[name]) == untimed(main_out[name]), name


def test_synth_stats_report_grounding(main_out):
    grounded = json.loads(main_out["stats.json"])["grounded"]
    assert grounded["path"][0] == grounded["path"][1] > 0


def test_a_killed_run_resumes_after_what_it_kept(main_out, tmp_path, base):
    """A run cut short (here: 5 of 12, then its last line torn as by a kill mid-write) resumes
    after the conversations it kept and ends with the same files as one uninterrupted run."""
    out = tmp_path / "cut"
    run_main(out, base, n=5)
    partial = out / synth.PARTIAL
    lines = partial.read_text().splitlines()
    assert len(lines) == 1 + 5
    first = json.loads(lines[1])
    first[0]["id"] += "-kept"  # a mark: only a kept result carries it into the output
    lines[1] = json.dumps(first)
    partial.write_text("\n".join(lines[:4]) + "\n" + lines[4][: len(lines[4]) // 2])  # 3 kept, one torn
    resumed = run_main(out, base)
    assert len((out / synth.PARTIAL).read_text().splitlines()) == 1 + 12
    assert "3-0-kept" in resumed["train.jsonl"] + resumed["val.jsonl"]
    for name in main_out:
        if name != synth.PARTIAL:
            assert untimed(resumed[name].replace("3-0-kept", "3-0")) == untimed(main_out[name]), name


def test_a_partial_file_of_other_settings_is_not_resumed(tmp_path, base):
    out = tmp_path / "other"
    run_main(out, base, n=2, seed=4)
    run_main(out, base, n=2, seed=3)
    kept = [json.loads(line) for line in (out / synth.PARTIAL).read_text().splitlines()[1:]]
    assert [conv["id"] for conv, _ in kept] == ["3-0", "3-1"]


def test_a_job_whose_every_project_fails_is_left_out_not_fatal(tmp_path, base, monkeypatch, capsys):
    """A task that cannot be built on any of its projects (here: every odd job's, by a make_task
    that raises) no longer ends a long run: it keeps its place in the partial file (a resume counts
    positions), stays out of the data, and is counted in stats.json and a warning that names it."""
    real_make_task = synth.make_task

    def make_task(family, seed, *args, **kw):
        if (seed % 10**11) % 2:  # attempt seeds differ by multiples of 10**11: job i's parity
            raise IndexError("Cannot choose from an empty sequence")
        return real_make_task(family, seed, *args, **kw)
    monkeypatch.setattr(synth, "make_task", make_task)
    p = argparse.ArgumentParser()
    add_synth_args(p)
    out = tmp_path / "out"
    args = p.parse_args(["--out", str(out), "--n", "6", "--seed", "3", "--workers", "1", "--n-eval", "0",
                         "--code-ratio", "0.2", "--workdir", base])
    assert synth.main(args) == 0
    kept = [json.loads(line)[0] for line in (out / synth.PARTIAL).read_text().splitlines()[1:]]
    failed = [c["id"] for c in kept if "failed" in c]
    assert len(kept) == 6 and failed and all(int(i.split("-")[1]) % 2 for i in failed)
    written = [json.loads(line)["id"] for name in ("train.jsonl", "val.jsonl")
               for line in (out / name).read_text().splitlines()]
    assert sorted(written) == sorted(c["id"] for c in kept if "failed" not in c)
    stats = json.loads((out / "stats.json").read_text())
    assert sum(stats["failed"].values()) == len(failed)
    err = capsys.readouterr().err
    assert f"{len(failed)} of 6 jobs built no task" in err and "IndexError: Cannot choose" in err
