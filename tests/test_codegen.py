"""evals/codegen.py on its own (tests/test_evals_model.py runs `evals humaneval` end to end on a tiny
model): where results go and how they are written, main's refusals, a --canonical / --stubs run on
local data through the real sandbox, and run_model's sampling plan — n samples per problem in
--batch rows per generate call with a seed per call, the budget cut to the room left, stop ids
(bos too in completion mode), completion mode for a base checkpoint and chat for a fine-tuned one,
a prompt longer than the context failed without sampling, each program run in the sandbox.

run_model loads a real checkpoint (numpy params in the model's shapes, a real BPE) and a real
Engine whose generate() answers scripted text instead of sampling (the samples are what is under
test, not the model), so nothing compiles and the file takes seconds."""
import json

import jax
import numpy as np
import pytest

from evals import codegen, sandbox, tasks
from evals.cli import build_parser
from nanocode import checkpoint
from nanocode.engine import Engine
from nanocode.load import load_model
from nanocode.gpt import init_params
from tiny_models import tiny, tiny_tokenizer

ADD = tasks.Problem("t/add", "function", 'def add(a, b):\n    """Add."""\n', "add",
                    "def check(c):\n    assert c(1, 2) == 3\n\ncheck(add)\n", "    return a + b\n")
SUB = tasks.Problem("t/sub", "function", 'def sub(a, b):\n    """Subtract."""\n', "sub",
                    "def check(c):\n    assert c(3, 2) == 1\n\ncheck(sub)\n", "    return a - b\n")
LONG = tasks.Problem("t/long", "function", 'def f():\n    """' + "word " * 1000 + '"""\n', "f", "f()\n")
LIMITS = sandbox.Limits(timeout=10)


def parse(*argv):
    args = build_parser().parse_args(["humaneval", *argv, "--quiet"])
    args.task = args.command  # as evals.cli.main sets it
    return args


def test_out_dir_and_write_results(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert codegen.out_dir(None, "tiny") == tmp_path / "home" / "evals" / "tiny"
    assert codegen.out_dir("~/results", "tiny") == tmp_path / "user" / "results"
    records = [{"task_id": "t/é", "n": 1}, {"task_id": "t/2", "n": 2}]
    path = codegen.write_results(tmp_path / "a" / "b", "humaneval_step3", records, {"pass@1": 0.5})
    assert path == tmp_path / "a" / "b" / "humaneval_step3.json"
    assert json.loads(path.read_text()) == {"pass@1": 0.5}
    lines = (tmp_path / "a" / "b" / "humaneval_step3.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x) for x in lines] == records and "t/é" in lines[0]


@pytest.mark.parametrize("argv, says", [
    ((), "needs --model PATH|TAG"),
    (("--canonical", "--n", "0"), "--n and --k must be >= 1"),
    (("--canonical", "--k", "1", "0"), "--n and --k must be >= 1"),
    (("--model", "tiny", "--n", "3"), "3 identical greedy samples"),
    (("--canonical", "--data", "/no/such/file.jsonl"), "no such file"),
])
def test_main_refuses_bad_arguments_and_writes_nothing(tmp_path, capsys, argv, says):
    assert codegen.main(parse(*argv, "--out", str(tmp_path / "out"))) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_main_canonical_and_stubs_on_local_data(tmp_path, capsys):
    data = tmp_path / "he.jsonl"
    data.write_text("".join(json.dumps({"task_id": p.task_id, "prompt": p.prompt, "entry_point": p.entry_point,
                                        "test": p.test.replace(f"\n\ncheck({p.entry_point})\n", "\n"),
                                        "canonical_solution": p.solution}) + "\n" for p in (ADD, SUB)))
    out = tmp_path / "out"
    assert codegen.main(parse("--canonical", "--data", str(data), "--k", "1", "5", "--out", str(out))) == 0
    summary = json.loads((out / "humaneval_canonical.json").read_text())
    assert (summary["problems"], summary["solved"], summary["pass@1"], summary["k"]) == (2, 2, 1.0, [1])
    assert summary["statuses"] == {"passed": 2} and summary["data"] == str(data)
    assert (summary["model"], summary["mode"], summary["n"]) == ("canonical", "canonical", 1)
    rows = [json.loads(x) for x in (out / "humaneval_canonical.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["n"], r["c"]) for r in rows] == [("t/add", 1, 1), ("t/sub", 1, 1)]
    assert rows[0]["samples"][0]["solution"] == ADD.solution and "completion" not in rows[0]["samples"][0]
    assert "canonical" in capsys.readouterr().out
    assert codegen.main(parse("--stubs", "--data", str(data), "--out", str(out))) == 0
    stubs = json.loads((out / "humaneval_stubs.json").read_text())
    assert (stubs["solved"], stubs["pass@1"], stubs["statuses"]) == (0, 0.0, {"failed": 2})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two run directories holding one checkpoint each (step 3): `base` and `sft` (stage in the
    metadata), a real BPE that knows the test's code; base has a 512-token context, sft 4,096 (the
    chat prompt opens with the agent's system message, ~1,500 tokens in this tiny vocabulary)."""
    tok = tiny_tokenizer(["def add(a, b):\n    return a + b\n" * 20, "```python\nreturn a - b\n```\n" * 10], 300)
    root = tmp_path_factory.mktemp("runs")
    for stage, context in (("base", 512), ("sft", 4096)):
        cfg = tiny(vocab_size=320, sequence_len=context, n_layer=1)
        shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
        params = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
        checkpoint.save(root / stage / "checkpoints", 3, params, config=cfg, tokenizer=tok, metadata={"stage": stage})
    return root


@pytest.fixture
def scripted(monkeypatch):
    """Engine.generate answers `answers[task prompt]` (+ a stop id) for every row and records each
    call; returns (calls, answers)."""
    calls, answers = [], {}

    def generate(self, prompts, n=1, max_tokens=None, stop=None, temperature=0.0, top_k=0, top_p=1.0,
                 seed=0):
        text = self.tokenizer.decode(prompts)
        key = next(k for k in answers if k in text)
        calls.append({"key": key, "prompt": text, "n": n, "max_tokens": max_tokens, "stop": list(stop), "seed": seed,
                      "temperature": temperature, "room": self.max_len - len(prompts)})
        return [self.tokenizer.encode(answers[key]) + [stop[0]] for _ in range(n)]
    monkeypatch.setattr(Engine, "generate", generate)
    return calls, answers


def test_run_model_samples_n_per_problem_in_batches_and_runs_each(runs, scripted):
    calls, answers = scripted
    answers.update({"def add": "    return a + b\n", "def sub": "    return a + b\n\n\ndef other():\n"})
    sampling = codegen.CompletionSampling(n=5, temperature=0.8, top_k=7, max_tokens=64, seed=11)
    rows, info = codegen.run_model([ADD, LONG, SUB], str(runs / "base"), LIMITS, sampling, batch=2, quiet=True)
    assert [(r["task_id"], r["n"], r["c"]) for r in rows] == [("t/add", 5, 5), ("t/long", 5, 0), ("t/sub", 5, 0)]
    assert [(c["key"], c["n"], c["seed"]) for c in calls] == [
        ("def add", 2, 11), ("def add", 2, 13), ("def add", 1, 15),  # seed + 1000003 * problem + row
        ("def sub", 2, 11 + 2 * 1000003), ("def sub", 2, 13 + 2 * 1000003), ("def sub", 1, 15 + 2 * 1000003)]
    tok = load_model(runs / "base").tokenizer
    assert all(c["max_tokens"] == 64 and c["temperature"] == 0.8 and tok.bos_id in c["stop"] for c in calls)
    long = rows[1]["samples"]
    assert {(s["status"], s["stderr_tail"], s["completion"]) for s in long} == \
        {("failed", "prompt longer than the model's context", "")}
    sub = rows[2]["samples"][0]
    assert sub["completion"] == answers["def sub"]  # the stop id is not in the text
    assert sub["solution"] == "    return a + b\n\n"  # cut at the next top-level def
    assert sub["status"] == "failed" and "AssertionError" in sub["stderr_tail"]
    assert info == {"model": "base", "checkpoint": str(runs / "base" / "checkpoints"), "step": 3,
                    "stage": "base", "mode": "completion", "n": 5, "temperature": 0.8, "top_k": 7,
                    "top_p": 1.0, "max_tokens": 64, "seed": 11}


def test_run_model_chats_with_a_finetuned_checkpoint_within_the_room_left(runs, scripted):
    calls, answers = scripted
    answers["Complete this Python function"] = "here:\n```python\ndef sub(a, b):\n    return a - b\n```\n"
    sampling = codegen.CompletionSampling(n=1, max_tokens=100000)
    rows, info = codegen.run_model([SUB], str(runs / "sft"), LIMITS, sampling, quiet=True)
    assert info["mode"] == "chat" and info["stage"] == "sft"
    (call,) = calls
    tok = load_model(runs / "sft").tokenizer
    want = tok.render_for_completion(tasks.chat_conversation(SUB))  # the agent's system message first
    assert call["prompt"] == tok.decode(want) and call["max_tokens"] == call["room"] == 4096 - len(want)
    assert tok.bos_id not in call["stop"]
    (sample,) = rows[0]["samples"]
    assert sample["solution"] == "def sub(a, b):\n    return a - b\n" and sample["status"] == "passed"
    assert rows[0]["c"] == 1
