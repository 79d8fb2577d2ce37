"""Inference speed of nanocode/engine.py on a preset with random weights: warm-up (compile) cost per
prefill bucket, time to first token, prefill tokens/s, decode tokens/s at batch 1 and 8 (streaming
per-token steps and the fused while_loop), and the per-turn prefill cost of a 10-turn conversation
with and without KV-cache reuse (its first round compiles and is not counted). Medians of
--repeats runs. The persistent compilation cache is on,
so a second run shows cache-load rather than compile times.

    python bench/infer.py                    # cpu-d4, seq 512: prompts of 256
    python bench/infer.py --seq-len 2048     # prompts of 256, 1024 and 2048

Reference (nanochat's PyTorch engine, d4 CPU shape, this machine): ~590 tokens/s decode at batch 1
(1.7 ms/token), ~10,700 tokens/s prefill, TTFT ~26 ms for a 256-token prompt. torch (optional) is
imported inside torch_prefill, so --no-torch runs without it.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from nanocode import engine as eng  # noqa: E402
from nanocode.common import enable_compilation_cache  # noqa: E402
from nanocode.config import preset  # noqa: E402
from nanocode.gpt import init_params  # noqa: E402

REFERENCE = {"decode_b1": 590.0, "prefill": 10_700.0, "ttft_256_ms": 26.0}


def main():
    args = parse_args()
    enable_compilation_cache()
    over = {"sequence_len": args.seq_len} if args.seq_len else {}
    if args.window_pattern:
        over["window_pattern"] = args.window_pattern
    if args.vocab_size:
        over["vocab_size"] = args.vocab_size
    cfg = preset(args.preset, **over)
    params = init_params(cfg, jax.random.PRNGKey(0))
    engine = eng.Engine(params, cfg)
    rng = np.random.RandomState(0)
    rows = []  # (metric, value, unit, reference or "")

    def row(name, value, unit, ref=""):
        rows.append((name, value, unit, ref))
        print(f"  {name:<44} {value:>10.2f} {unit:<9} {ref}", flush=True)

    def prompt(n):  # (1, n) random ids; every section draws from the one generator, in turn
        return rng.randint(0, cfg.vocab_size, (1, n)).astype(np.int32)

    print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    print(f"{args.preset}: layers {cfg.n_layer}, width {cfg.n_embd}, vocab {cfg.vocab_size}, "
          f"max_len {engine.max_len}, windows {cfg.window_pattern}, buckets {engine.buckets}, "
          f"backend {jax.default_backend()}", flush=True)

    # warm-up: first call per bucket (compile, or load from the persistent cache)
    for b, secs in engine.warmup().items():
        row(f"warm-up prefill bucket {b}", secs * 1000, "ms")
    prefill_rows(engine, cfg, prompt, row, args.repeats, args.no_torch)
    decode_rows(engine, params, cfg, prompt, row, args.repeats, args.decode_tokens)
    conversation_rows(engine, prompt, row)

    print("\n| metric | value | unit | reference |\n|---|---:|---|---|")
    for name, value, unit, ref in rows:
        print(f"| {name.strip()} | {value:,.2f} | {unit} | {ref} |")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="cpu-d4")
    ap.add_argument("--seq-len", type=int, help="context (max_len); default the preset's")
    ap.add_argument("--window-pattern", default=None, help="override the preset's (e.g. L)")
    ap.add_argument("--vocab-size", type=int, help="override the preset's (e.g. 8192: the v5e preset's d6)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--no-torch", action="store_true", help="skip the torch prefill reference")
    return ap.parse_args()


def prefill_rows(engine, cfg, prompt, row, repeats: int, no_torch: bool) -> None:
    """Time to first token and prefill tokens/s for prompts of 256, 1024 and 2048 tokens (those
    that fit max_len): a fresh cache per run, allocated outside the timing; median of `repeats`."""
    key, greedy = jax.random.PRNGKey(0), eng.Sampling()
    for n in (256, 1024, 2048):
        if n > engine.max_len:
            continue
        ids = prompt(n)

        def ttft():
            cache = engine.new_cache(1)
            jax.block_until_ready(cache)
            t = time.perf_counter()
            logits, _ = engine.prefill(cache, ids, 0)
            int(eng._sample_first(logits, key, greedy, None)[0])
            return time.perf_counter() - t

        ttft()  # compile this prompt's chunk plan and the sampler
        secs = statistics.median(ttft() for _ in range(repeats))
        ref = f"nanochat ~{REFERENCE['ttft_256_ms']:.0f} ms" if n == 256 else ""
        row(f"time to first token, {n}-token prompt", secs * 1000, "ms", ref)
        if no_torch:
            ref = f"nanochat ~{REFERENCE['prefill']:,.0f}" if n == 256 else ""
        else:
            ref_secs = torch_prefill(cfg, ids, repeats)
            ref = f"torch nanochat forward {n / ref_secs:,.0f} tok/s, ratio {ref_secs / secs:.2f}x"
        row(f"prefill, {n}-token prompt", n / secs, "tok/s", ref)


def decode_rows(engine, params, cfg, prompt, row, repeats: int, N: int) -> None:
    """Decode tokens/s of N new tokens at batch 1 and 8 after a short prompt: per-token streaming
    steps (a host sync per token, as a streaming consumer does) and the fused while_loop."""
    key, greedy = jax.random.PRNGKey(0), eng.Sampling()
    P = min(64, engine.max_len - N)
    for B in (1, 8):
        logits0, cache0 = engine.prefill(engine.new_cache(B), np.repeat(prompt(P), B, 0), 0)

        def fresh():
            c = jax.tree.map(jnp.copy, cache0)
            jax.block_until_ready(c)
            return c

        def stream(cache):
            tok = eng._sample_first(logits0, key, greedy, None)
            t = time.perf_counter()
            for i in range(N):
                np.asarray(tok)  # the host sync a streaming consumer does per token
                tok, _, cache = eng._decode_step(params, cfg, cache, tok, key, np.int32(i + 1),
                                                 None, greedy, engine.kv_bucket(P + i + 1))
            np.asarray(tok)
            return time.perf_counter() - t

        def fused(cache):
            t = time.perf_counter()
            engine.decode(cache, logits0, P, N)
            return time.perf_counter() - t

        for name, fn in (("streaming steps", stream), ("fused while_loop", fused)):
            fn(fresh())  # compile
            secs = statistics.median(fn(fresh()) for _ in range(repeats))
            ref = f"nanochat ~{REFERENCE['decode_b1']:.0f}" if B == 1 else ""
            row(f"decode batch {B}, {name}", B * N / secs, "tok/s", ref)
            row("  per step", secs / N * 1000, "ms")


def conversation_rows(engine, prompt, row) -> None:
    """A 10-turn conversation (user turns of ~max_len / 10 tokens, 16-token replies): the per-turn
    prefill cost with KV-cache reuse and with the history re-prefilled; round 0 compiles, uncounted."""
    U = max(8, engine.max_len // 10 - 16 - 1)
    turns = [prompt(U)[0].tolist() for _ in range(10)]
    for reuse, rnd in ((True, 0), (True, 1), (False, 0), (False, 1)):  # round 0 compiles
        costs, history, s = [], [], engine.decoder()
        for user in turns:
            new = user if reuse else history + user
            if not reuse:
                s = engine.decoder()
            t = time.perf_counter()
            s.append(new)
            s.logits.block_until_ready()
            costs.append(time.perf_counter() - t)
            reply = list(s.generate(max_tokens=16, stop=()))
            history += user + reply
        if rnd == 0:
            continue
        label = "with cache reuse" if reuse else "re-prefilling history"
        row(f"10 turns, {label}: median turn prefill", statistics.median(costs) * 1000, "ms")
        row(f"10 turns, {label}: last turn prefill", costs[-1] * 1000, "ms")
        row(f"10 turns, {label}: total prefill", sum(costs) * 1000, "ms")


def torch_prefill(cfg, ids, repeats: int) -> float:
    """Median seconds of nanochat's prefill in torch: the full forward over the prompt with
    nanochat's math (tests/nanochat_reference.py), no grad, all logits, as nanochat's Engine
    prefill does (its KV-cache writes are not modelled)."""
    import torch
    sys.path.insert(0, str(ROOT / "tests"))
    from nanochat_reference import nanochat_forward, nanochat_state_dict

    mc = dict(sequence_len=cfg.sequence_len, vocab_size=cfg.vocab_size, n_layer=cfg.n_layer,
              n_head=cfg.n_head, n_kv_head=cfg.n_kv_head, n_embd=cfg.n_embd,
              window_pattern=cfg.window_pattern)
    sd = nanochat_state_dict(mc)
    x = torch.as_tensor(ids, dtype=torch.long)
    times = []
    with torch.no_grad():
        for i in range(repeats + 1):
            t = time.perf_counter()
            nanochat_forward(sd, mc, x)[:, -1].argmax(-1).item()
            if i:
                times.append(time.perf_counter() - t)
    return statistics.median(times)


if __name__ == "__main__":
    main()
