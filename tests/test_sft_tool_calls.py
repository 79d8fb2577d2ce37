"""Issue 6 acceptance on CPU: a tiny model SFT'd for a few hundred steps on `train synth` data emits
well-formed tool calls (a known tool with known argument names, parsed from the raw model output:
no grammar mask) for held-out prompts (held-out project names and phrasings) of the trained
families, scored on the first reply. ~6-7 minutes on 2 idle cores (synth 600 conversations
~2.5 min, SFT 300 steps ~3 min): slow.

Recipe: depth 2, width 128, vocab 2048, rows of 1024, 600 conversations of synth seed 3 (code
share 0.1, the training phrasings of synth_text.PHRASES), 300 steps x 4 rows (~4 epochs),
lr-scale 5. Measured 2026-11-29 on 72 prompts (8 per family): this test 64/72 = 89% (val loss
1.01, 8.4 min on 2 busy cores); synth seed 2: 67/72 = 93% (val loss 1.49). Seed 2 with other
settings: lr-scale 10: 65/72 (val 1.41); lr-scale 20: 64/72 (val 1.64); width 256 at lr-scale 20:
54/72; seed 3 with 400 steps: 53/72 although its val loss fell to 0.78 (val loss measures the
training phrasings, not the held-out ones); the old recipe (500 conversations, code share 0.15,
the shorter phrasing list, lr-scale 20): 66/72, and 31-33/36 on 4 prompts per family. So the
recipe sits at ~89-93%, around the issue's 90% target but not robustly above it; FLOOR (85%, 62/72)
is set below the measured range so a regression fails the test but run-to-run noise should not.
The failures left are held-out phrasings answered with prose only or with a run-on call (no
<|tool_call_end|>).
"""
import json
import warnings

import pytest

pytestmark = pytest.mark.slow

N_CONVS, CODE_RATIO, STEPS, SEQ, VOCAB, LR_SCALE = 600, 0.1, 300, 1024, 2048, 5
PROMPTS_PER_FAMILY = 8
FLOOR = 0.85  # measured 0.89-0.93; the target is 0.90


def test_sft_tiny_model_emits_well_formed_tool_calls(tmp_path, monkeypatch):
    import jax

    from nanocode import checkpoint
    from nanocode.engine import Engine
    from nanocode.gpt import init_params
    from nanocode.tokenizer import train_tokenizer
    from tiny_models import tiny
    from tools.dispatch import check_call
    from train.cli import main
    from train.synth import TRAIN_FAMILIES, make_task

    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    synth = tmp_path / "synth"
    assert main(["synth", "--n", str(N_CONVS), "--workers", "2", "--out", str(synth), "--n-eval", "0",
                 "--seed", "3", "--code-ratio", str(CODE_RATIO),
                 "--workdir", str(tmp_path / "work")]) == 0
    rows = [json.loads(line) for line in open(synth / "train.jsonl")]
    texts = [m["content"] for r in rows for m in r["messages"]]
    texts += [json.dumps(m["tool_call"]) for r in rows for m in r["messages"] if m.get("tool_call")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = train_tokenizer(iter(texts), VOCAB)
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=SEQ, n_layer=2, n_embd=128, n_head=4,
               n_kv_head=4, head_dim=32)
    base = tmp_path / "base"
    checkpoint.save(base / "checkpoints", 0, init_params(cfg, jax.random.PRNGKey(0)), config=cfg,
                    tokenizer=tok)
    run = tmp_path / "sft"
    assert main(["sft", "--from", str(base), "--data", str(synth / "train.jsonl"), "--val",
                 str(synth / "val.jsonl"), "--seq-len", str(SEQ), "--device-batch", "4", "--steps",
                 str(STEPS), "--log-every", "50", "--eval-every", "1000", "--lr-scale", str(LR_SCALE),
                 "--sample-tokens", "0", "--run-dir", str(run)]) == 0

    engine = Engine.from_checkpoint(run / "checkpoints")
    good, total = 0, 0
    for family in TRAIN_FAMILIES:
        for seed in range(1000, 1000 + PROMPTS_PER_FAMILY):
            task = make_task(family, seed, heldout=True, base=str(tmp_path / "eval"))
            ids = tok.render_for_completion({"messages": [{"role": "system", "content": task.system},
                                                          {"role": "user", "content": task.prompt}]})
            out = engine.generate(ids, max_tokens=min(200, SEQ - len(ids)))[0]
            try:
                call = tok.parse_tool_call(out)
                good += call is not None and check_call(call["name"], call["args"]) is None
            except ValueError:
                pass
            total += 1
    print(f"well-formed first tool calls: {good}/{total} = {good / total:.0%}")
    assert good / total >= FLOOR
