"""pass@k, the unbiased estimator of Chen et al. 2021 (Codex, "Evaluating Large Language Models
Trained on Code", section 2.1).

For one problem with n samples of which c pass, pass@k = 1 - C(n-c, k) / C(n, k): the chance that
at least one of k samples drawn without replacement from the n passes. The binomials overflow
floats for n ~ 1000, so it is computed in the stable product form
1 - prod_{i=n-c+1..n} (1 - k / i), and is exactly 1.0 when n - c < k (every k-subset holds a pass).
Trade-off: the estimate is unbiased for every k <= n but its variance grows as k approaches n, so
k is only reported where n >= k (the k=100 column needs n >= 100 samples per problem).
"""

from __future__ import annotations

import math

DEFAULT_KS = (1, 10, 100)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: n samples, c correct (0 <= c <= n, 1 <= k <= n)."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(counts: list[tuple[int, int]], ks=DEFAULT_KS) -> dict[str, float]:
    """{"pass@k": mean over problems} for each k with k <= n for every problem; counts holds
    (n, c) per problem."""
    if not counts:
        return {}
    n_min = min(n for n, _ in counts)
    return {f"pass@{k}": sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
            for k in ks if k <= n_min}
