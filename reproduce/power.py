"""What a test could see: the smallest effect it detects with a given power, at the spread the seeds showed.

A "not reproduced" verdict says the test could not tell Δ from seed noise; how large an effect it *could* have told
apart is the other half of that sentence. For a t-test with standard error SE and ν degrees of freedom at two-sided
level α, the power against a true effect δ is

    power(δ) = P(|T'| > t_{1−α/2, ν}),    T' ~ noncentral t(ν, λ = δ / SE)

and the minimum detectable effect MDE is the δ > 0 with power(δ) = 0.8 (`POWER`). It is computed at the observed SE
(a post-hoc planning figure: it inherits the noise of the seeds' spread, and says nothing about the effect itself).
`at_seeds` projects SE and ν to another seed count with the same per-seed spread: with n seeds in every cell,
SE ∝ 1/√n for each of the tests here, and ν scales as (n − 1) (one-sample and paired: ν = n − 1; Welch and its
contrasts with equal n: ν = (n − 1) · (Σ s_j²)² / Σ s_j⁴, whose spread factor does not depend on n).
"""

from __future__ import annotations

import math

from scipy import optimize
from scipy import stats as _st

POWER = 0.8


def power(delta: float, se: float, df: float, alpha: float) -> float:
    """Two-sided t-test power against a true effect `delta` (module docstring)."""
    crit = float(_st.t.ppf(1 - alpha / 2, df))
    nc = delta / se
    upper, lower = float(_st.nct.sf(crit, df, nc)), float(_st.nct.cdf(-crit, df, nc))
    # scipy's noncentral t returns NaN far out in a tail whose mass is below 1e-20: that mass is 0 here
    return (upper if math.isfinite(upper) else float(nc > 0)) + (lower if math.isfinite(lower) else float(nc < 0))


def mde(se: float, df: float, alpha: float, target: float = POWER) -> float | None:
    """The smallest δ > 0 with `power(δ) = target`; None without a usable SE or ν."""
    if not (se and se > 0 and math.isfinite(se) and df and df > 0 and math.isfinite(df)):
        return None
    hi = se * (float(_st.t.ppf(1 - alpha / 2, df)) + 10.0)
    while power(hi, se, df, alpha) < target:   # ν near 1 has heavy tails: widen until the root is bracketed
        hi *= 2.0
    return float(optimize.brentq(lambda d: power(d, se, df, alpha) - target, 0.0, hi, xtol=1e-10 * se))


def at_seeds(se: float, df: float, n: int, n_new: int) -> tuple[float, float]:
    """(SE, ν) of the same test with `n_new` seeds per cell instead of `n`, at the same per-seed spread."""
    if n < 2 or n_new < 2:
        raise ValueError(f"a t-test needs at least 2 seeds per cell, got {n} → {n_new}")
    return se * math.sqrt(n / n_new), df * (n_new - 1) / (n - 1)
