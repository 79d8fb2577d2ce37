"""Which task seeds belong to whom. A task is a pure function of (family, seed, heldout), so the
split between training and evaluation is a split of seed ranges (and of names and phrasings:
heldout=True draws the held-out pools, which training never does):

- `train synth`: seed * 10**6 + i for its --seed and conversation i (below ATTEMPT_STRIDE for
  --seed < 10**5).
- `train rollouts`: ROLLOUT_SEED0 + seed * 10**6 + i, training names and phrasings.
- `evals agent`: EVAL_SEED0 + offset + i * FAMILY_SLOTS + k (k: the family's index in
  tasks.FAMILIES), held-out names and phrasings; with --split train it draws
  offset + i * FAMILY_SLOTS + k with training ones instead (the range `train synth` uses: the
  split for choosing settings, never for reporting). `eval_seed` is the one formula.
- A family that cannot use a project raises; every caller then retries on seed + k * ATTEMPT_STRIDE
  for k < ATTEMPTS (`attempt_seeds`), which keeps each range below the next: retries of training
  seeds stay below ROLLOUT_SEED0's, and of rollout seeds below EVAL_SEED0.
"""
from __future__ import annotations

FAMILY_SLOTS = 32  # eval seeds per task index, one per family: a new family moves no task's seed
ATTEMPTS, ATTEMPT_STRIDE = 4, 10**11  # project seeds of retries: seed + k * stride, k < ATTEMPTS
ROLLOUT_SEED0 = 5 * 10**11  # `train rollouts` seeds: above synth's seeds and their retries
EVAL_SEED0 = 10**12  # eval task seeds start here, far from every training seed


# `evals agent --split`: name -> (world, heldout). eval and real are for reporting (held-out names,
# phrasings, families or source modules); train and real-train for choosing settings.
SPLITS = {"eval": ("generated", True), "train": ("generated", False),
          "real": ("real", True), "real-train": ("real", False)}


def eval_seed(i: int, slot: int, offset: int = 0, heldout: bool = True) -> int:
    """The seed of task i of the family in `slot` (its index in tasks.FAMILIES) for `evals agent`
    and train synth's eval_tasks.jsonl; offset is --seed."""
    return (EVAL_SEED0 if heldout else 0) + offset + i * FAMILY_SLOTS + slot


def attempt_seeds(seed: int) -> list[int]:
    """The project seeds tried for task seed `seed`, in order (the first that builds is used)."""
    return [seed + k * ATTEMPT_STRIDE for k in range(ATTEMPTS)]
