"""`train rollouts`: the shipped model run through the real headless agent loop on fresh training
tasks; resolved rollouts become SFT rows, failed ones a preference pair at the first step where the
model departs from every oracle variant; a rerun resumes. The pair builder is checked on real tasks
with transcripts whose departures are known."""
from __future__ import annotations

import json

import pytest

from agent.model import PoolModel
from agent.settings import SamplerSettings, TurnSettings
from tasks import make_task
from train import rollouts


class NoModel:
    """A stand-in server whose samplers are never used (a Fake agent answers)."""

    def fork(self, root, sampling):
        return None


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return str(tmp_path_factory.mktemp("rollout-projects"))


def first_call_task(family, tool, base):
    """A task of `family` whose oracle starts with `tool`, and the oracle's transcript."""
    for seed in range(10, 60):
        task = make_task(family, seed, base=base)
        oracle = task.rollout()["messages"]
        if next(m for m in oracle if m.get("tool_call"))["tool_call"]["name"] == tool:
            return task, oracle
    pytest.skip(f"no {family} draw starts with {tool}")


def test_oracle_transcript_has_no_departure_and_a_garbled_call_does(base):
    task, oracle = first_call_task("implement_stub", "Grep", base)
    assert rollouts.departure_pair(task, oracle) is None
    k = next(i for i, m in enumerate(oracle) if m.get("tool_call"))
    call = {"name": "Grep", "args": {"pattern": oracle[k]["tool_call"]["args"]["pattern"].replace("_", " ", 1)}}
    garbled = oracle[:k] + [{**oracle[k], "tool_call": call}]  # a name the model garbled
    pair = rollouts.departure_pair(task, garbled)
    assert pair["chosen"]["messages"][:k] == pair["rejected"]["messages"][:k] == oracle[:k]
    assert pair["chosen"]["messages"][k]["tool_call"] == oracle[k]["tool_call"]
    assert pair["rejected"]["messages"][k]["tool_call"] == call


def test_a_choice_some_oracle_variant_makes_is_no_departure(base):
    """find_definition's oracle reads the definition before answering in ~40% of its prose draws.
    A model that reads where this task's own oracle did not has not departed there: the pair is at
    its wrong answer after the Read, and chosen is a variant's answer naming the location."""
    for seed in range(20, 60):
        task = make_task("find_definition", seed, base=base)
        oracle = task.rollout()["messages"]
        if not any(m.get("tool_call", {}).get("name") == "Read" for m in oracle):
            break
    else:
        pytest.skip("no draw without a Read")
    grep = next(i for i, m in enumerate(oracle) if m.get("tool_call"))
    path = oracle[grep + 1]["content"].split(":")[0]  # the Grep result's first hit
    read = {"role": "assistant", "content": "let me look at it.", "tool_call": {"name": "Read", "args": {"file_path": path}}}
    wrong = {"role": "assistant", "content": "it is somewhere."}
    model = oracle[:grep + 2] + [read, {"role": "tool_result", "content": "(the file)"}, wrong]
    pair = rollouts.departure_pair(task, model)
    assert pair["rejected"]["messages"][-1] == wrong
    assert pair["chosen"]["messages"][-3]["tool_call"] == read["tool_call"]
    assert task.check(task.root, pair["chosen"]["messages"][-1]["content"])


def test_same_action_ignores_the_oracles_arbitrary_choices():
    same = rollouts.same_action
    grep = lambda p: {"name": "Grep", "args": {"pattern": p}}  # noqa: E731
    bash = lambda c: {"name": "Bash", "args": {"command": c}}  # noqa: E731
    assert same(grep("def area\\("), grep("def area\\b")) and not same(grep("def area\\("), grep("def are\\("))
    assert same(bash("python -m pytest -q"), bash("python -m pytest tests"))
    assert not same(bash("wc -l a.py"), bash("wc -l b.py")) and not same(bash("ls"), grep("ls"))
    assert same(None, None) and not same(None, bash("ls"))


def run(out, *extra):
    from train.cli import build_parser
    args = build_parser().parse_args(["rollouts", "--model", "default", "--out", str(out), "--n", "4",
                                      "--workers", "1", "--max-steps", "6", *extra])
    return rollouts.main(args)


@pytest.mark.slow  # the suite's time (docs/LOG.md, sixth session)
def test_rollouts_of_the_shipped_model_make_rows_and_pairs_and_resume(tmp_path, base, capsys):
    out = tmp_path / "r"
    assert run(out, "--workdir", base, "--real-ratio", "0.5") == 0
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(p.read_text()) for p in sorted((out / "tasks").glob("*.json"))]
    assert summary["tasks"] == len(records) == 4 and summary["errors"] == 0
    # --real-ratio: the drawn share of tasks on real code, each record and row saying which world
    worlds = {r["world"] for r in records}
    assert worlds == {"real", "generated"} and {w: s["tasks"] for w, s in summary["worlds"].items()} == \
        {w: sum(r["world"] == w for r in records) for w in worlds}
    assert all(rollouts.task_world(r["family"], r["seed"], 0.5) == r["world"] for r in records)
    rows = [json.loads(x) for x in (out / "sft.jsonl").read_text().splitlines()]
    pairs = [json.loads(x) for x in (out / "preference.jsonl").read_text().splitlines()]
    assert len(rows) <= summary["resolved"] == sum(r["resolved"] for r in records)
    assert len(rows) == sum(len(r["rows"]) for r in records)
    assert len(pairs) == summary["pairs"] and summary["resolved"] + summary["pairs"] >= 2
    for row in rows:
        assert row["messages"][0]["role"] == "system" and row["messages"][-1]["role"] == "assistant"
        assert all(set(m) <= {"role", "content", "tool_call"} for m in row["messages"])
    for pair in pairs:
        c, r = pair["chosen"]["messages"], pair["rejected"]["messages"]
        assert pair["flaw"] == "on_policy" and c[:-1] == r[:-1] and c[-1] != r[-1]
        assert c[-1]["role"] == r[-1]["role"] == "assistant"
    for rec in records:  # fresh training seeds, never eval ones
        from tasks import EVAL_SEED0
        assert rollouts.ROLLOUT_SEED0 <= rec["seed"] < EVAL_SEED0
    # valid training data: train sft / dpo accept every row and pair
    from train.conversations import keep_valid
    assert len(keep_valid(rows)[0]) == len(rows)
    assert keep_valid(pairs) == (pairs, {})
    # a rerun resumes: nothing runs again, the outputs are rebuilt the same
    capsys.readouterr()
    stamp = {p.name: p.stat().st_mtime_ns for p in (out / "tasks").glob("*.json")}
    assert run(out, "--workdir", base, "--real-ratio", "0.5") == 0
    assert "4 of 4 tasks done already" in capsys.readouterr().out
    assert stamp == {p.name: p.stat().st_mtime_ns for p in (out / "tasks").glob("*.json")}
    assert [json.loads(x) for x in (out / "sft.jsonl").read_text().splitlines()] == rows


def test_task_world_draws_the_real_share_among_families_with_a_real_form():
    from tasks import ROLLOUT_SEED0, TRAIN_FAMILIES, WORLD_FAMILIES
    jobs = [(TRAIN_FAMILIES[i % len(TRAIN_FAMILIES)], ROLLOUT_SEED0 + i) for i in range(600)]
    real = [f for f, s in jobs if rollouts.task_world(f, s, 0.5) == "real"]
    assert 0.4 < len(real) / len(jobs) < 0.6 and set(real) <= set(WORLD_FAMILIES["real"])
    both = [(f, s) for f, s in jobs if f in WORLD_FAMILIES["generated"]]
    assert all(rollouts.task_world(f, s, 0.0) == "generated" for f, s in both)
    assert {rollouts.task_world(f, s, 1.0) for f, s in jobs if f in WORLD_FAMILIES["real"]} == {"real"}
    # a family with real tasks only is real whatever the ratio
    assert {rollouts.task_world(f, s, 0.0) for f, s in jobs if f not in WORLD_FAMILIES["generated"]} == {"real"}


def test_a_missing_model_is_a_clear_error(tmp_path, capsys):
    from train.cli import build_parser
    args = build_parser().parse_args(["rollouts", "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert rollouts.main(args) == 2
    assert "nope" in capsys.readouterr().err


def test_a_tampered_rollout_that_passes_the_check_is_no_sft_row(tmp_path, monkeypatch):
    """A fake agent on a real fix_bug task turns every assert of the tests into a return: the
    task's own check passes, but the rollout is tampered, so no SFT row; the oracle's fix is one."""
    from nanocode.protocol import TurnResult
    from tasks.projects import run_tests
    checks = []

    class Fake:
        def __init__(self, task):
            self.task, self.messages = task, []

    def cheat(agent, task):
        for rel in task.project.test_files:
            path = f"{task.root}/{rel}"
            text = open(path).read()
            open(path, "w").write(text.replace("    assert ", "    return "))
        checks.append(task.check(task.root) and run_tests(task.root))
        agent.messages = [{"role": "system", "content": task.system}, {"role": "user", "content": task.prompt},
                          {"role": "assistant", "content": "done: the tests pass now."}]
        return [TurnResult(answer=agent.messages[-1]["content"], stop_reason="done")]

    def honest(agent, task):
        agent.messages = task.rollout()["messages"]
        return [TurnResult(answer=agent.messages[-1]["content"], stop_reason="done")]
    monkeypatch.setattr(rollouts, "_worker", PoolModel(remote=NoModel()))  # no model: Fake answers
    monkeypatch.setattr(rollouts, "task_agent", lambda sampler, task, *a, **k: Fake(task))
    opts = {"samples": 1, "temperature": 0.0, "workdir": str(tmp_path),
            "sampling": SamplerSettings(max_tokens=64), "turn": TurnSettings(max_steps=6, retries=0)}
    monkeypatch.setattr(rollouts, "drive", cheat)
    rec = rollouts.run_task(("fix_bug", 5, "generated", opts))
    assert checks == [True] and "error" not in rec, rec
    assert rec["rows"] == [] and not rec["resolved"] and rec["samples"][0]["tampered"]
    monkeypatch.setattr(rollouts, "drive", honest)
    rec = rollouts.run_task(("fix_bug", 5, "generated", opts))
    assert len(rec["rows"]) == 1 and rec["samples"][0]["tampered"] == [], rec
