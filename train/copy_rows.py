"""Pretraining rows that teach a tiny model to copy, at short and at long range.

A model trained on a few million tokens of text and code does not learn on its own to copy a name
it saw earlier; an agent does little else (a path from a Grep result, an old_string from a Read,
a function name from the user). Two kinds of row pay for that skill in the loss:

- copy rows (`copy_row`): BOS and a random run of 8-128 ordinary tokens repeated to fill the row.
  Nothing predicts the first run and every repeat is free to a model that looks back, so they grow
  induction heads quickly, but only at short range (the repeat distance is the run's length).
- span rows (`plant_spans`): a natural row of text or code in which a few made-up identifiers and
  paths (`zeppel_kit/vorax.py`, `mend_quilo`, in backticks, as names appear in tool output and
  answers) are planted twice, the second time 64 to ~1,800 tokens after the first. The names are
  new compositions of syllables, so only the first mention predicts the second; the text between
  is ordinary, as a tool result is in an agent's context.

Both are pure functions of an RNG the loader seeds from its state, so resume stays exact.
bench/induction.py measures what they buy: copy accuracy of a planted name by distance.
"""
from __future__ import annotations

import numpy as np

SYLLABLES = tuple(c + v for c in "bdfgklmnprstvxz" for v in "aeiou") + ("qu", "th", "sh", "ch")
MIN_DISTANCE, MAX_DISTANCE = 64, 1800


def copy_row(row: np.ndarray, bos: int, rng: np.random.Generator) -> None:
    """In place: BOS, then a run of 8-128 random ordinary tokens (ids below BOS, the first special)
    repeated to fill the row."""
    run = rng.integers(0, bos, int(rng.integers(8, 129)))
    row[0] = bos
    row[1:] = np.resize(run, len(row) - 1)


def _word(rng: np.random.Generator) -> str:
    return "".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), int(rng.integers(2, 4))))


def span_text(rng: np.random.Generator) -> str:
    """A made-up name as an agent meets one: an identifier, a call, a module path or a test path."""
    name = "_".join(_word(rng) for _ in range(int(rng.integers(1, 3))))
    kind = int(rng.integers(0, 4))
    if kind == 0:
        return name
    if kind == 1:
        return f"{name}("
    if kind == 2:
        return f"{_word(rng)}{rng.choice(['kit', 'lib', 'py', ''])}/{name}.py"
    return f"tests/test_{name}.py"


def plant_spans(row: np.ndarray, rng: np.random.Generator, encode, spans: tuple[int, int] = (2, 6)) -> int:
    """In place: plant `spans` (low, high) made-up names in a natural row (row[0] is BOS, kept),
    each twice at a distance of MIN_DISTANCE..MAX_DISTANCE tokens (capped by the row), without
    overlaps. Returns how many were planted (a short row may take fewer)."""
    n = len(row)
    taken = np.zeros(n, dtype=bool)
    taken[0] = True
    planted = 0
    for _ in range(int(rng.integers(spans[0], spans[1] + 1))):
        ids = np.asarray(encode(f" `{span_text(rng)}`"), dtype=row.dtype)
        k = len(ids)
        longest = min(MAX_DISTANCE, n - 2 * k)
        if longest < max(MIN_DISTANCE, k):
            break
        for _attempt in range(4):
            d = int(rng.integers(max(MIN_DISTANCE, k), longest + 1))
            first = int(rng.integers(1, n - d - k + 1))
            second = first + d
            if not (taken[first:first + k].any() or taken[second:second + k].any()):
                row[first:first + k] = ids
                row[second:second + k] = ids
                taken[first:first + k] = taken[second:second + k] = True
                planted += 1
                break
    return planted
