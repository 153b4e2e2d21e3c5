"""The verdict rule: real tests with degrees of freedom, p-values and confidence intervals (reproduce/README.md).

Every claim row is one estimate Δ over per-seed values and one test:

    difference   Δ = mean(b) − mean(a) over independent seeds        Welch's t:  SE² = s_a²/n_a + s_b²/n_b,
                 (unpaired: the cells share no trained base)            ν = SE⁴ / Σ (s_j²/n_j)² / (n_j − 1)
    paired       Δ = mean_k (b_k − a_k) over the seeds both ran       t = Δ / (s_d/√n),  ν = n − 1
                 (the Flow-CLIP heads of seed k sit on one CLIP)
    contrast     Δ = Σ_j w_j mean(c_j) over cells c_j (e.g. the      Welch–Satterthwaite: SE² = Σ w_j² s_j²/n_j,
                 interaction (d − c) − (b − a))                         ν = SE⁴ / Σ (w_j² s_j²/n_j)² / (n_j − 1)
    one sample   Δ = mean(x) of a per-seed quantity (e.g. a cell's     t = Δ / (s/√n),  ν = n − 1
                 full-set RSUM − its weakest element's)

with t = Δ/SE, the two-sided p-value 2·P(T_ν > |t|) and the (1 − α) confidence interval Δ ± t_{1−α/2, ν}·SE.

Directional claims ('increase' / 'decrease', the source's sign): **reproduced** when p < α and Δ has the source's
sign; **reversed** when p < α and Δ has the other sign; **not reproduced** otherwise (no difference the test can tell
from seed noise). Equivalence claims ('equal', "no loss"/"≈"; margin m declared in the claim): TOST — **reproduced**
when both one-sided tests reject at α (the (1 − 2α) interval lies inside (−m, m)); **reversed** when the (1 − 2α)
interval lies wholly outside it (a difference larger than the margin); **not reproduced** otherwise. Fewer values
than a test needs (2 per sample; 2 pairs; 2 per cell of a contrast) or zero spread: **inconclusive**. A cell or
metric that was not produced: **missing**. Under the null (no effect, Gaussian seed noise) a directional verdict
other than 'not reproduced' comes out with probability α, whatever the number of seeds (tests/reproduce/test_stats.py
simulates it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as _st

ALPHA = 0.05
DIRECTIONS = ("increase", "decrease", "equal")
# 'untestable': set by the report, not by a test, when a cell of the comparison collapsed (reproduce.report)
VERDICTS = ("reproduced", "not reproduced", "reversed", "inconclusive", "untestable", "missing")


@dataclasses.dataclass(frozen=True)
class TestResult:
    """One test: the estimate, its standard error, degrees of freedom, t, two-sided p and the (1 − α) interval."""
    kind: str            # 'welch' | 'paired' | 'contrast' | 'one_sample'
    delta: float
    se: float
    df: float
    t: float
    p: float
    ci: tuple[float, float]
    alpha: float
    n: tuple[int, ...]   # values per sample (cells of a contrast; pairs; the one sample)

    def interval(self, level_alpha: float) -> tuple[float, float]:
        """The (1 − level_alpha) interval of Δ (TOST uses 1 − 2α)."""
        h = float(_st.t.ppf(1 - level_alpha / 2, self.df)) * self.se
        return self.delta - h, self.delta + h


def _finite(values) -> np.ndarray:
    v = np.asarray([float(x) for x in values if x is not None and math.isfinite(float(x))], np.float64)
    return v


def _result(kind, delta, se, df, alpha, n) -> TestResult | None:
    if not (se > 0 and math.isfinite(se) and df > 0):
        return None
    t = delta / se
    p = float(2 * _st.t.sf(abs(t), df))
    h = float(_st.t.ppf(1 - alpha / 2, df)) * se
    return TestResult(kind, float(delta), float(se), float(df), float(t), p, (delta - h, delta + h), alpha,
                      tuple(int(x) for x in n))


def contrast_test(samples: Sequence[Sequence[float]], weights: Sequence[float], *, alpha: float = ALPHA,
                  kind: str = "contrast") -> TestResult | None:
    """Welch–Satterthwaite test of Δ = Σ_j w_j mean(samples_j) (module docstring); None when a sample has fewer
    than 2 values or every sample has zero spread."""
    xs = [_finite(s) for s in samples]
    if len(xs) != len(weights) or any(len(x) < 2 for x in xs):
        return None
    parts = [w * w * x.var(ddof=1) / len(x) for w, x in zip(weights, xs)]
    var = sum(parts)
    if var <= 0:
        return None
    df = var * var / sum(p * p / (len(x) - 1) for p, x in zip(parts, xs) if p > 0)
    delta = sum(w * x.mean() for w, x in zip(weights, xs))
    return _result(kind, delta, math.sqrt(var), df, alpha, [len(x) for x in xs])


def welch_test(a, b, *, alpha: float = ALPHA) -> TestResult | None:
    """Welch's t-test of Δ = mean(b) − mean(a)."""
    return contrast_test([a, b], [-1.0, 1.0], alpha=alpha, kind="welch")


def one_sample_test(x, *, alpha: float = ALPHA, kind: str = "one_sample") -> TestResult | None:
    """t-test of Δ = mean(x) against 0 (ν = n − 1)."""
    x = _finite(x)
    if len(x) < 2:
        return None
    return _result(kind, x.mean(), x.std(ddof=1) / math.sqrt(len(x)), len(x) - 1, alpha, [len(x)])


def paired_test(a, b, *, alpha: float = ALPHA) -> TestResult | None:
    """Paired t-test of Δ = mean_k (b_k − a_k); `a[k]`, `b[k]` are one seed (None/NaN on either side drops it)."""
    if len(a) != len(b):
        raise ValueError(f"paired values need one entry per seed on both sides, got {len(a)} and {len(b)}")
    d = [float(y) - float(x) for x, y in zip(a, b) if x is not None and y is not None
         and math.isfinite(float(x)) and math.isfinite(float(y))]
    return one_sample_test(d, alpha=alpha, kind="paired")


def verdict(test: TestResult | None, direction: str, *, margin: float | None = None) -> str:
    """The verdict of one test for a claim of `direction` (module docstring); `margin` for 'equal' claims."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if test is None:
        return "inconclusive"
    if direction == "equal":
        if margin is None or margin <= 0:
            raise ValueError("an 'equal' claim needs a positive equivalence margin")
        lo, hi = test.interval(2 * test.alpha)
        if -margin < lo and hi < margin:
            return "reproduced"
        if hi <= -margin or lo >= margin:
            return "reversed"
        return "not reproduced"
    if test.p >= test.alpha:
        return "not reproduced"
    return "reproduced" if (test.delta > 0) == (direction == "increase") else "reversed"


def tost_p(test: TestResult, margin: float) -> float:
    """The TOST p-value: the larger of the two one-sided p-values for Δ > −m and Δ < m."""
    p_low = float(_st.t.sf((test.delta + margin) / test.se, test.df))
    p_high = float(_st.t.cdf((test.delta - margin) / test.se, test.df))
    return max(p_low, p_high)


def one_seed_move_band(a, b, *, alpha: float = ALPHA) -> tuple[float, float] | None:
    """Half-width of the (1 − α) band of a one-seed difference's move between two budgets under seed noise alone,
    and its degrees of freedom: D = (b′ − a′) − (b − a), four independent runs of seed SD σ, so SD(D) = 2σ; σ is the
    cells' pooled seed SD at the first budget, s_p² = ((n_a − 1)s_a² + (n_b − 1)s_b²)/ν, ν = n_a + n_b − 2, and the
    band is ± t_{1−α/2, ν}·2·s_p. Runs that share a seed are correlated, which narrows the true band: this one
    errs wide. None with fewer than 2 values in a cell or no spread."""
    xa, xb = _finite(a), _finite(b)
    if len(xa) < 2 or len(xb) < 2:
        return None
    df = len(xa) + len(xb) - 2
    sp = math.sqrt(((len(xa) - 1) * xa.var(ddof=1) + (len(xb) - 1) * xb.var(ddof=1)) / df)
    return (float(_st.t.ppf(1 - alpha / 2, df)) * 2 * sp, float(df)) if sp > 0 else None


def pocock_alpha(looks: int, alpha: float = ALPHA) -> float:
    """Nominal per-look level of a Pocock group-sequential design with `looks` equally spaced analyses (overall
    type-I error `alpha`; two looks at α = 0.05: 0.0294 — Pocock 1977, Table 1)."""
    table = {1: alpha, 2: {0.05: 0.0294, 0.01: 0.0056}, 3: {0.05: 0.0221, 0.01: 0.0041}}
    if looks not in table or (looks > 1 and alpha not in table[looks]):
        raise ValueError(f"no Pocock level tabulated for {looks} looks at α = {alpha}")
    return table[looks] if looks == 1 else table[looks][alpha]
