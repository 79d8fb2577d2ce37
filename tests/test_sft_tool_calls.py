"""A tiny model SFT'd on CPU for a few hundred steps on `train synth` tool-use rollouts emits
well-formed tool calls (a known tool with known argument names, parsed from the raw model output:
no grammar mask) for >= 90% of held-out prompts (held-out project names and phrasings) of the
trained families, scored on the first reply to 144 prompts with their projects under each of three
paths, and for >= 80% of 144 prompts on new projects in the training wordings. Slow: synth, SFT and
the generations take tens of minutes on 2 cores.

Recipe: depth 2, width 192, vocab 2048, rows of 1024, 1,200 tool-use conversations of synth seed 3
(`--code-ratio 0`: the code-writing family is the one whose first reply has no tool call, and a
model this small sends unseen wordings to it), random init, 300 steps x 4 rows at lr-scale 5 after
30 steps of linear warmup (a random init wants ~10% of the steps as warmup).

Reproducible per machine and core count: the projects, whose path is in every system prompt, are
built under a fixed ROOT rather than pytest's numbered tmp dir (a moving path changes the
tokenizer, the training rows and the score), and pytest's durations in the data are pinned; the
printed hashes of the data and of the generated tokens match run to run. Not across machines or
core counts: other float rounding is another draw (a 1-core and a 2-core run of the same SFT
part within the first steps), and this recipe's held-out score varies over init seeds by a few
points, down to the floor, so elsewhere this test can land under 90% without a bug. The scores it prints on the
reference machine are in docs/BENCHMARKS.md. A broken format, mask or packing scores near 0.
"""
import hashlib
import json
import shutil
import warnings
from pathlib import Path

import pytest

from tiny_models import untimed

pytestmark = pytest.mark.slow

N_CONVS, CODE_RATIO, STEPS, WARMUP, SEQ, VOCAB, LR_SCALE, WIDTH = 1200, 0.0, 300, 30, 1024, 2048, 5, 192
PROMPTS_PER_FAMILY = 16
FLOOR, IN_DISTRIBUTION_FLOOR = 0.90, 0.80  # held-out and in-distribution shares of well-formed calls
# Fixed, not pytest's numbered tmp dir: project paths are in every system prompt, so a moving
# path changes the tokenizer and the training rows (and the score) from run to run.
ROOT = Path("/tmp/nanocode-sft-tool-calls")
# The held-out prompts are scored with their projects under three paths: the path is in the system
# prompt, and on one set of weights it alone moves the held-out count by tens of prompts, so one
# path is one more draw.
EVAL_BASES = [ROOT / "eval", ROOT / "users" / "alice" / "code", ROOT / "srv" / "projects"]


def pin_timings(path: Path) -> str:
    """Rewrite `path` with every pytest duration set to 0.00s; returns its sha256 (printed so two
    runs can be compared)."""
    text = untimed(path.read_text())
    path.write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def test_sft_tiny_model_emits_well_formed_tool_calls(monkeypatch):
    import jax

    from nanocode import checkpoint
    from nanocode.gpt import init_params
    from nanocode.load import load_engine
    from nanocode.tokenizer import train_tokenizer
    from tiny_models import tiny
    from nanocode.protocol import check_call
    from train.cli import main
    from tasks import TRAIN_FAMILIES, make_task

    shutil.rmtree(ROOT, ignore_errors=True)
    monkeypatch.setenv("NANOCODE_HOME", str(ROOT / "home"))
    synth = ROOT / "synth"
    assert main(["synth", "--n", str(N_CONVS), "--workers", "2", "--out", str(synth), "--n-eval", "0",
                 "--seed", "3", "--code-ratio", str(CODE_RATIO),
                 "--workdir", str(ROOT / "work")]) == 0
    print("synth data sha256:", pin_timings(synth / "train.jsonl"), pin_timings(synth / "val.jsonl"))
    rows = [json.loads(line) for line in open(synth / "train.jsonl")]
    texts = [m["content"] for r in rows for m in r["messages"]]
    texts += [json.dumps(m["tool_call"]) for r in rows for m in r["messages"] if m.get("tool_call")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = train_tokenizer(iter(texts), VOCAB)
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=SEQ, n_layer=2, n_embd=WIDTH, n_head=4,
               n_kv_head=4, head_dim=WIDTH // 4)
    base = ROOT / "base"
    checkpoint.save(base / "checkpoints", 0, init_params(cfg, jax.random.PRNGKey(0)), config=cfg,
                    tokenizer=tok)
    run = ROOT / "sft"
    assert main(["sft", "--from", str(base), "--data", str(synth / "train.jsonl"), "--val",
                 str(synth / "val.jsonl"), "--seq-len", str(SEQ), "--device-batch", "4", "--steps",
                 str(STEPS), "--warmup-steps", str(WARMUP), "--log-every", "50", "--eval-every", "1000",
                 "--lr-scale", str(LR_SCALE), "--sample-tokens", "0", "--run-dir", str(run)]) == 0

    engine = load_engine(run)
    seen = {m["content"] for r in rows for m in r["messages"] if m["role"] == "user"}

    def well_formed_share(heldout: bool, base: Path) -> float:
        good, total, verbatim, outputs = 0, 0, 0, hashlib.sha256()
        for family in TRAIN_FAMILIES:
            for seed in range(1000, 1000 + PROMPTS_PER_FAMILY):
                task = make_task(family, seed, heldout=heldout, base=str(base))
                verbatim += task.prompt in seen
                ids = tok.render_for_completion({"messages": [
                    {"role": "system", "content": task.system}, {"role": "user", "content": task.prompt}]})
                out = engine.generate(ids, max_tokens=min(200, SEQ - len(ids)))[0]
                outputs.update(str(out).encode())
                try:
                    call = tok.parse_tool_call(out)
                    good += call is not None and check_call(call["name"], call["args"]) is None
                except ValueError:
                    pass
                total += 1
        kind = "held-out names + phrasings" if heldout else "new projects, training wordings"
        print(f"{kind} under {base}: well-formed first tool calls {good}/{total} = {good / total:.0%} "
              f"({verbatim} prompt texts also in training; outputs sha256 {outputs.hexdigest()[:12]})")
        return good / total

    in_distribution = well_formed_share(heldout=False, base=EVAL_BASES[0])
    heldout = sum(well_formed_share(heldout=True, base=b) for b in EVAL_BASES) / len(EVAL_BASES)
    print(f"held-out, mean over {len(EVAL_BASES)} project paths: {heldout:.1%}")
    assert in_distribution >= IN_DISTRIBUTION_FLOOR and heldout >= FLOOR
