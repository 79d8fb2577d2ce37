"""`evals agent`: harness validity (every task's check fails on its initial repo, the oracle resolves
100% and a do-nothing agent 0%), the model path scored through the real Agent loop (a tiny model
scripted to replay the oracle resolves with every metric at 100%), and a tiny random model run
end to end through the CLI writing valid JSON with all the metrics."""
import json
import warnings
from pathlib import Path

import pytest

import evals.agent as ea
import evals.agent_score as es
from agent.model import PoolModel
from agent.settings import SamplerSettings, TurnSettings
from nanocode.protocol import system_prompt
from tasks import EVAL_ONLY_FAMILIES, TRAIN_FAMILIES, WORLD_FAMILIES, make_task

FAMILIES = [f for f in TRAIN_FAMILIES + EVAL_ONLY_FAMILIES if f in WORLD_FAMILIES["generated"]]  # the default suite
METRICS = ("tasks", "resolved", "resolve_rate", "valid_tool_call_rate", "first_call_correct_rate",
           "mean_steps", "edits_applied_rate", "tool_calls", "edit_calls")


@pytest.fixture(scope="module")
def tok():
    from nanocode.tokenizer import train_tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return train_tokenizer(iter([system_prompt("{cwd}")] * 3 + ["def f(x):\n    return x + 1\n" * 30]), 1024)


def test_task_seeds_match_eval_tasks_and_interleave():
    from tasks import EVAL_SEED0, FAMILIES as SLOTS
    from tasks.seeds import FAMILY_SLOTS
    jobs = ea.task_jobs(FAMILIES, 2)
    assert [s for _, s in jobs] == [EVAL_SEED0 + i * FAMILY_SLOTS + list(SLOTS).index(f)
                                    for i in range(2) for f in FAMILIES]
    assert [f for f, _ in jobs[:len(FAMILIES)]] == FAMILIES and len({s for _, s in jobs}) == len(jobs)
    assert ea.task_jobs(["explain"], 2) == [f for f in jobs if f[0] == "explain"]
    # a family's seeds are pinned: adding a family moves none of them
    assert ea.task_jobs(["fix_bug"], 2) == [("fix_bug", EVAL_SEED0 + 2), ("fix_bug", EVAL_SEED0 + FAMILY_SLOTS + 2)]
    assert ea.task_jobs(FAMILIES, 2, seed=5, limit=3)[0][1] == EVAL_SEED0 + 5
    train = ea.task_jobs(FAMILIES, 2, split="train")  # the split settings are chosen on
    assert [s for _, s in train] == [s - EVAL_SEED0 for _, s in jobs]


def test_train_split_runs_training_distribution_tasks(tmp_path):
    """--split train: ids say so, tasks use training names (heldout=False), the oracle resolves."""
    opts = {"split": "train"}
    seed = ea.task_jobs(["fix_bug"], 1, split="train")[0][1]
    (tmp_path / "t").mkdir()
    rec = ea.run_task(("fix_bug", seed, "oracle", opts, str(tmp_path / "t")))
    assert rec["id"] == f"train-fix_bug-{seed}" and rec["resolved"], rec
    assert rec["prompt"] == make_task("fix_bug", seed, heldout=False, base=str(tmp_path)).prompt
    assert rec["prompt"] != make_task("fix_bug", seed, heldout=True, base=str(tmp_path / "h")).prompt


@pytest.mark.parametrize("family", FAMILIES)
def test_checks_fail_on_the_initial_repo(tmp_path, family):
    for _, seed in ea.task_jobs([family], 2):
        task = make_task(family, seed, heldout=True, base=str(tmp_path))
        assert not task.check(task.root, ""), (family, seed)
        assert not es.score(task, "", [], ea.oracle_first_call(task))["resolved"]


def test_fix_bug_only_injects_bugs_a_test_catches(tmp_path):
    """fix_bug commits only a bug the project's tests catch. Seed 10**12 + 3 is a project where a
    bug picked without that check is one no test covers: a task resolved before the agent ran, and
    a training rollout that claims a test failed after pytest passed."""
    task = make_task("fix_bug", 10**12 + 3, heldout=True, base=str(tmp_path))
    assert not task.check(task.root, "")


def test_user_rejects_needs_the_refusal(tmp_path):
    seed = ea.task_jobs(["user_rejects"], 1)[0][1]
    task = make_task("user_rejects", seed, heldout=True, base=str(tmp_path))
    answer = "i would have run the tests."
    assert task.check(task.root, answer)  # the check alone passes an answer that changed nothing
    assert not es.score(task, answer, [], None)["resolved"]


def test_first_call_targets():
    root = "/p"
    ref = {"name": "Grep", "args": {"pattern": "def foo_bar\\("}}
    assert es.same_target({"name": "Grep", "args": {"pattern": "foo_bar"}}, ref, root)
    assert not es.same_target({"name": "Grep", "args": {"pattern": "foo"}}, ref, root)
    assert es.same_target({"name": "Grep", "args": {"pattern": "\\bFoo\\b"}},
                          {"name": "Grep", "args": {"pattern": "class Foo"}}, root)
    read = {"name": "Read", "args": {"file_path": "pkg/a.py"}}
    assert es.same_target({"name": "Read", "args": {"file_path": "/p/./pkg/a.py"}}, read, root)
    assert not es.same_target({"name": "Edit", "args": {"file_path": "pkg/a.py"}}, read, root)
    bash = {"name": "Bash", "args": {"command": "python -m pytest -q"}}
    assert es.same_target({"name": "Bash", "args": {"command": "pytest tests/test_a.py"}}, bash, root)
    assert not es.same_target({"name": "Bash", "args": {"command": "ls tests"}}, bash, root)
    assert not es.same_target({"name": "?", "args": {}}, bash, root)


def test_valid_calls():
    ok = {"name": "Read", "args": {"file_path": "a.py"}, "result": "    1→x"}
    assert es.valid_call(ok) and es.valid_call({**ok, "result": "error: file not found"})
    assert not es.valid_call({"name": "?", "args": {}, "result": "error: unterminated tool call"})
    assert not es.valid_call({**ok, "args": {"path": "a.py"}})  # unknown and missing argument
    assert not es.valid_call({**ok, "args": {"file_path": "a.py", "offset": "x"},
                              "result": "error: invalid argument offset: expected an integer"})


def _run(args, capsys):
    from evals import cli
    status = cli.main(["agent", "--quiet", *args])
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


@pytest.mark.parametrize("policy,rate", [("oracle", 1.0), ("nothing", 0.0)])
def test_baselines(tmp_path, capsys, policy, rate):
    """One task per family, two worker processes (the pool path)."""
    out = _run(["--policy", policy, "--per-family", "1", "--workers", "2", "--out", str(tmp_path)],
               capsys)
    s = json.loads((tmp_path / f"agent_{policy}.json").read_text())
    assert s["errors"] == 0 and s["system_prompt_mismatches"] == 0
    assert s["overall"]["tasks"] == len(FAMILIES) and s["overall"]["resolve_rate"] == rate
    assert s["eval_only_families"]["tasks"] == len(EVAL_ONLY_FAMILIES)
    if policy == "oracle":
        assert s["overall"]["valid_tool_call_rate"] == s["overall"]["first_call_correct_rate"] == 1.0
        assert s["overall"]["edits_applied_rate"] == 1.0
        assert s["copy"]["overall"]["share"] == 1.0 and s["copy"]["attempted"] > 0  # the oracle copies names
        assert "names from the request written exactly: 100.0%" in out
    rows = [json.loads(x) for x in (tmp_path / f"agent_{policy}.jsonl").read_text().splitlines()]
    assert len(rows) == len(FAMILIES)
    assert len(list((tmp_path / f"agent_{policy}_transcripts").glob("*.jsonl"))) == len(FAMILIES)
    assert "eval-only families" in out and "= all" in out


@pytest.mark.slow
@pytest.mark.parametrize("policy,rate", [("oracle", 1.0), ("nothing", 0.0)])
def test_baselines_sweep(tmp_path, capsys, policy, rate):
    _run(["--policy", policy, "--per-family", "5", "--out", str(tmp_path)], capsys)
    s = json.loads((tmp_path / f"agent_{policy}.json").read_text())
    assert s["errors"] == 0 and s["overall"]["tasks"] == 5 * len(FAMILIES)
    assert all(m["resolve_rate"] == rate for m in s["families"].values())


@pytest.fixture(scope="module")
def engine(tok):
    from nanocode.engine import Engine
    from tiny_models import random_params, tiny
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=8192)
    return Engine(random_params(cfg), cfg, tok, buckets=(256, 1024, 4096))


def replay_oracle(engine, tok, tmp_path, monkeypatch, family):
    """(record, oracle rollout): --policy model through the real Agent, the tiny model forced to
    write the oracle's messages."""
    import agent.loop.driver
    from scripted_agent import Script
    seed = ea.task_jobs([family], 1)[0][1]
    oracle = make_task(family, seed, heldout=True, base=str(tmp_path / "oracle")).rollout()
    replies = [tok.encode(m["content"]) + (tok.encode_tool_call(m["tool_call"]) if m.get("tool_call")
                                           else [tok.encode_special("<|assistant_end|>")])
               for m in oracle["messages"] if m["role"] == "assistant"]
    script = Script(tok, replies)
    script.V = engine.cfg.vocab_size

    class Scripted(agent.loop.driver.Agent):
        def __init__(self, sampler, *a, **kw):
            sampler.extra_mask = script
            super().__init__(sampler, *a, **kw)
            script.agent = self
    monkeypatch.setattr(agent.loop.driver, "Agent", Scripted)
    monkeypatch.setattr(ea, "_worker", PoolModel(engine=engine))
    (tmp_path / "t").mkdir()
    opts = {"sampling": SamplerSettings(max_tokens=1024), "turn": TurnSettings(max_steps=15)}
    rec = ea.run_task((family, seed, "model", opts, str(tmp_path / "t")))
    assert "error" not in rec, rec["error"]
    return rec, oracle


@pytest.mark.parametrize("family", [pytest.param("find_definition", marks=pytest.mark.slow),
                                    pytest.param("fix_bug", marks=pytest.mark.slow), "user_rejects", "rename_symbol"])
def test_model_path_scripted_to_replay_the_oracle(engine, tok, tmp_path, monkeypatch, family):
    rec, oracle = replay_oracle(engine, tok, tmp_path, monkeypatch, family)
    assert rec["resolved"] and rec["system_prompt_ok"] and rec["first_call_correct"], rec
    assert rec["valid_calls"] == rec["steps"] == sum(1 for m in oracle["messages"] if m.get("tool_call"))
    assert rec["edits_applied"] == rec["edit_calls"]
    if family == "user_rejects":
        assert rec["stop_reasons"] == ["rejected", "done"]
    conv = json.loads((tmp_path / "t" / f"{rec['id']}.jsonl").read_text())
    assert [m["role"] for m in conv["messages"]] == [m["role"] for m in oracle["messages"]]


def test_a_task_runs_in_the_same_place_every_run(tmp_path, monkeypatch):
    """The project's path is in the system prompt, so it is a function of the task id: a random
    one made greedy runs of the same model differ. A held base gets a suffix; a dead run's is reused."""
    import subprocess
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    first = ea.task_base("real-find_definition-7")
    assert first.startswith(str(tmp_path / "nanocode-evals-agent-")) and "find_definition" not in first
    assert ea.task_base("real-find_definition-7") == first + ".2"  # this process holds the first
    assert ea.task_base("real-explain-7") not in (first, first + ".2")
    dead = subprocess.Popen(["true"])
    dead.wait()
    (Path(first) / ".pid").write_text(str(dead.pid))  # its run is gone: the path is reused
    (Path(first) / "leftover").write_text("x")
    assert ea.task_base("real-find_definition-7") == first and not (Path(first) / "leftover").exists()

    seed = ea.task_jobs(["find_definition"], 1, split="real")[0][1]
    opts = {"sampling": SamplerSettings(), "turn": TurnSettings(max_steps=5), "split": "real"}
    prompts = []
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        rec = ea.run_task(("find_definition", seed, "oracle", opts, str(tmp_path / run)))
        conv = json.loads((tmp_path / run / f"{rec['id']}.jsonl").read_text())
        prompts.append(conv["messages"][0]["content"])
    assert prompts[0] == prompts[1] and "working directory: " + str(tmp_path) in prompts[0]


def test_a_grounding_fallback_is_recorded_and_counted(engine, tok, tmp_path, monkeypatch, capsys):
    """A listing that times out (a loaded machine) leaves paths free text: the record says so."""
    import subprocess

    from agent.masks import grounding

    def slow_git(*a, timeout=None, **kw):
        raise subprocess.TimeoutExpired("git ls-files", timeout)
    monkeypatch.setattr(grounding, "git", slow_git)
    rec, _ = replay_oracle(engine, tok, tmp_path, monkeypatch, "user_rejects")
    assert any("listing the project's files took over" in n for n in rec["grounding_notes"]), rec
    summary = es.summarize([rec])
    assert summary["overall"]["grounding_fallbacks"] == 1
    es.print_table(summary)
    assert "1 task(s) ran with a grounding fallback" in capsys.readouterr().out


def test_without_a_sandbox_the_oracles_command_is_refused(engine, tok, tmp_path, monkeypatch, unsandboxed):
    """Why the eval warns: with no sandbox every Bash call asks, nobody answers, the task fails."""
    rec, _ = replay_oracle(engine, tok, tmp_path, monkeypatch, "run_command")
    assert not rec["resolved"] and rec["stop_reasons"][0] == "rejected", rec


def test_a_run_without_a_sandbox_says_so_and_records_it(tiny_run, tmp_path, capsys, unsandboxed):
    from evals import cli
    assert cli.main(["agent", "--quiet", "--model", str(tiny_run), "--limit", "1", "--max-steps", "1",
                     "--max-tokens", "8", "--workers", "1", "--out", str(tmp_path), "--unsandboxed"]) == 0
    err = capsys.readouterr().err
    assert "warning: no OS sandbox here" in err and "not comparable" in err and "--unsandboxed: " in err
    summary = json.loads((tmp_path / "agent_step2.json").read_text())
    assert summary["sandbox_found"] == "none" and summary["unsandboxed"] is True


@pytest.fixture(scope="module")
def tiny_run(tok, tmp_path_factory):
    from nanocode.checkpoint import save
    from tiny_models import random_params, tiny
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=2048)
    run = tmp_path_factory.mktemp("evals_agent") / "runs" / "tinyagent"
    save(run / "checkpoints", 2, random_params(cfg), config=cfg, tokenizer=tok,
         metadata={"step": 2, "stage": "sft"})
    return run


def test_tiny_random_model_end_to_end(tiny_run, tmp_path, capsys):
    _run(["--model", str(tiny_run), "--limit", "2", "--max-steps", "2", "--max-tokens", "12",
          "--workers", "1", "--out", str(tmp_path)], capsys)
    s = json.loads((tmp_path / "agent_step2.json").read_text())
    assert (s["model"], s["step"], s["policy"]) == ("tinyagent", 2, "model")
    assert s["errors"] == 0 and s["system_prompt_mismatches"] == 0
    for group in ("overall", "trained_families", "eval_only_families"):
        assert set(METRICS) <= set(s[group])
    assert s["overall"]["tasks"] == 2 and list(s["families"]) == FAMILIES[:2]
    for r in map(json.loads, (tmp_path / "agent_step2.jsonl").read_text().splitlines()):
        assert r["steps"] <= 2 and 0 <= r["valid_calls"] <= r["steps"]


def test_missing_model_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    from evals import cli
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path))
    assert cli.main(["agent", "--model", "nope", "--limit", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "nope" in err and len(err.splitlines()) == 1


def test_no_model_means_the_default_model(tmp_path, capsys, monkeypatch):
    """`evals agent` with no --model scores the model `nanocode` runs (it used to refuse)."""
    import json

    from evals import cli
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path))
    assert cli.main(["agent", "--limit", "1", "--workers", "1", "--max-steps", "1", "--max-tokens", "8",
                     "--out", str(tmp_path / "out"), "--quiet"]) == 0, capsys.readouterr().err
    [result] = (tmp_path / "out").glob("agent*.json")
    assert json.loads(result.read_text())["model"] == "default_model"  # nanocode/default_model


def test_checkpoint_without_tokenizer_is_a_one_line_error(tmp_path, capsys):
    from evals import cli
    from nanocode.checkpoint import save
    from tiny_models import random_params, tiny
    cfg = tiny()
    save(tmp_path / "ckpt", 1, random_params(cfg), config=cfg, metadata={"step": 1})
    assert cli.main(["agent", "--model", str(tmp_path / "ckpt"), "--limit", "1", "--workers", "1",
                     "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "tokenizer" in err and len(err.splitlines()) == 1


@pytest.mark.slow  # ~30-50 s on a shared 2-core box: decode compiles at a second temperature
def test_best_of_scores_the_pick_beside_pass_at_1(engine, tok, tmp_path, monkeypatch):
    """--best-of 2 through the real Agent: rollout 0 gives up, rollout 1 replays the oracle; the
    verifier (the project's tests, not the hidden check) picks 1, the hidden check scores it in its
    copy, and the record keeps rollout 0's pass@1 beside it."""
    import agent.loop.driver
    from scripted_agent import Script
    family = "fix_bug"
    seed = ea.task_jobs([family], 1)[0][1]
    oracle = make_task(family, seed, heldout=True, base=str(tmp_path / "oracle")).rollout()
    replies = [tok.encode(m["content"]) + (tok.encode_tool_call(m["tool_call"]) if m.get("tool_call")
                                           else [tok.encode_special("<|assistant_end|>")])
               for m in oracle["messages"] if m["role"] == "assistant"]
    scripts = [Script(tok, [tok.encode("i do not know.") + [tok.encode_special("<|assistant_end|>")]]),
               Script(tok, replies)]
    made = []

    class Scripted(agent.loop.driver.Agent):
        def __init__(self, sampler, *a, **kw):
            script = scripts[len(made)]
            script.V = engine.cfg.vocab_size
            made.append(sampler.settings.temperature)
            sampler.extra_mask = script
            super().__init__(sampler, *a, **kw)
            script.agent = self
    monkeypatch.setattr(agent.loop.driver, "Agent", Scripted)
    monkeypatch.setattr(ea, "_worker", PoolModel(engine=engine))
    (tmp_path / "t").mkdir()
    opts = {"sampling": SamplerSettings(max_tokens=1024), "turn": TurnSettings(max_steps=15), "best_of": 2,
            "best_of_temperature": 0.7}
    rec = ea.run_task((family, seed, "model", opts, str(tmp_path / "t")))
    assert "error" not in rec, rec["error"]
    assert made == [0.0, 0.7]
    assert rec["resolved"] and rec["system_prompt_ok"] and not rec["at_1"]["resolved"]
    bo = rec["best_of"]
    assert (bo["n"], bo["kind"], bo["pick"], bo["applied"]) == (2, "change", 1, [])
    assert [r["tests_passed"] for r in bo["rollouts"]] == [None, True]
    assert rec["steps"] == bo["rollouts"][1]["steps"] and rec["at_1"]["steps"] == 0
    s = es.summarize([rec])
    assert (s["overall"]["resolve_rate"], s["overall"]["pass_at_1_rate"]) == (1.0, 0.0)
    assert s["families"][family]["resolved_at_1"] == 0
    conv = json.loads((tmp_path / "t" / f"{rec['id']}.jsonl").read_text())
    assert conv["meta"]["best_of"] == {"n": 2, "pick": 1}


def test_tiny_random_model_best_of_and_agent_flags(tiny_run, tmp_path, capsys):
    out = _run(["--model", str(tiny_run), "--limit", "2", "--max-steps", "2", "--max-tokens", "12",
                "--workers", "1", "--out", str(tmp_path), "--best-of", "2", "--no-ground",
                "--retries", "0", "--copy-bias", "0.5"], capsys)
    s = json.loads((tmp_path / "agent_step2.json").read_text())
    assert (s["best_of"], s["best_of_temperature"], s["ground"], s["retries"], s["copy_bias"]) == \
        (2, 0.7, False, 0, 0.5)
    assert s["errors"] == 0 and s["system_prompt_mismatches"] == 0
    for group in ("overall", "trained_families", "eval_only_families"):
        assert set(METRICS) | {"resolved_at_1", "pass_at_1_rate"} <= set(s[group])
    for r in map(json.loads, (tmp_path / "agent_step2.jsonl").read_text().splitlines()):
        assert r["best_of"]["n"] == 2 and len(r["best_of"]["rollouts"]) == 2
        assert set(r["at_1"]) >= {"resolved", "steps", "valid_calls", "first_call_correct"}
    assert " @1 " in out.splitlines()[0] + " "


def test_a_tampered_run_is_unresolved_counted_and_shown(tmp_path, capsys):
    task = make_task("fix_bug", ea.task_jobs(["fix_bug"], 1)[0][1], heldout=True, base=str(tmp_path))
    test = task.project.test_files[0]
    with open(f"{task.root}/{test}", "w"):
        pass  # emptied
    rec = {"id": "t", "family": "fix_bug", **es.score(task, "", [], None)}
    assert rec["tampered"] == [test] and not rec["resolved"]
    s = es.summarize([rec])
    assert s["overall"]["tampered"] == s["families"]["fix_bug"]["tampered"] == 1
    es.print_table(s)
    out = capsys.readouterr().out
    assert "tamper" in out.splitlines()[0] and out.splitlines()[-1].split()[-1] == "1"


def test_reply_audit_counts_invented_spans_and_loops():
    from evals.reply_audit import backticked_spans, invented_spans, looping_replies
    assert backticked_spans("`a` then ```x `y` z``` and `c` ``") == ["a", "c", ""]
    project = {"pkg/core.py": "def mean_price(xs):\n    return 1\n"}
    messages = [{"role": "user", "content": "where is mean_price?"},
                {"role": "assistant", "content": "", "tool_call": {"name": "Grep", "args": {"pattern": "zz_q"}}},
                {"role": "tool_result", "content": "no matches"},
                {"role": "assistant", "content": "`mean_price` at `pkg/core.py:2`, not `pkg/core.py:9`, "
                                                 "`zz_q` or `mean_prize`; ```\nmade_up()\n```"}]
    assert invented_spans(messages, project) == ["pkg/core.py:9", "mean_prize"]
    assert looping_replies(messages) == 0
    messages.append({"role": "assistant", "content": "tests/" * 8})
    assert looping_replies(messages) == 1


def test_reply_audit_counts_answers_that_repeat_a_phrase(capsys):
    """The model issue's audit: a phrase three times in a row, up to 40 words and marks long, is
    counted, also where the bytes differ by one (which the mask's prose rule lets through); lists,
    prose and code that only look alike are not."""
    from evals import agent_score as es
    from agent.masks.loop_guard import PROSE, first_loop
    from evals.reply_audit import repeated_phrase, repeating_answers
    looped = "`normcase` has 2 modules: `normcase` has 2 modules: `normcase` has 2 modules:`, done"
    assert repeated_phrase(looped) == "` normcase ` has 2 modules :"
    assert first_loop(looped.encode(), PROSE) is None  # a byte short of the prose rule's loop ...
    assert first_loop(looped.replace(":`", ": `").encode(), PROSE) is not None  # ... which a space completes
    assert repeated_phrase("very very very long") == "very"
    long_unit = " ".join(f"w{i}" for i in range(40)) + " "
    assert repeated_phrase(long_unit * 3) is not None
    assert repeated_phrase(long_unit + "w0 " + long_unit * 2) is None  # three times, but not in a row
    assert repeated_phrase((" ".join(f"w{i}" for i in range(41)) + " ") * 3) is None  # a unit over 40
    for fine in ("only the tests call `escape`: `tests/test_a.py`, `tests/test_b.py`, `tests/test_c.py`.",
                 "`a` calls `b`, `b` calls `c`, `c` calls `d`.", "wait... ... ...", "x = 1\ny = 1\nz = 1\n",
                 "it returns 0, 0 or 1", "the the"):
        assert repeated_phrase(fine) is None, fine
    messages = [{"role": "assistant", "content": looped, "tool_call": {"name": "Grep", "args": {"pattern": "a"}}},
                {"role": "tool_result", "content": looped},
                {"role": "assistant", "content": looped}, {"role": "assistant", "content": "fine"}]
    assert repeating_answers(messages) == 1  # final answers only: a thought before a call is not one
    rec = {"family": "find_callers", "resolved": False, "steps": 0, "valid_calls": 0, "first_call_correct": False,
           "edit_calls": 0, "edits_applied": 0, "repeating_answers": 1, "looping_replies": 0, "invented_spans": []}
    summary = {"policy": "model", **es.summarize([rec])}
    assert summary["overall"]["repeating_answers"] == summary["families"]["find_callers"]["repeating_answers"] == 1
    es.print_table(summary)
    assert "answers repeating a phrase: 1; replies that loop: 0" in capsys.readouterr().out
