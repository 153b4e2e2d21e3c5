"""What a test could detect (`reproduce.power`): the minimum detectable effect against a Monte Carlo of the t-test it
describes, the power at no effect, the projection to more seeds against Welch's test on samples built to the same
spread, and the report's table."""

import numpy as np
import pytest
from scipy import stats as st

from reproduce import claims as C
from reproduce import power, stats, tables
from tests.reproduce.helpers import assert_tables_are_rectangular

DRAWS = 20000


def _exact_sd(rng, n, mean, sd):
    """n values with exactly this mean and sample standard deviation."""
    z = rng.normal(size=n)
    z = (z - z.mean()) / z.std(ddof=1)
    return mean + sd * z


@pytest.mark.parametrize("n,alpha", [(3, 0.0294), (5, 0.0294), (5, 0.05)])
def test_the_mde_is_detected_with_80_percent_power_by_the_one_sample_t_test(n, alpha):
    sd = 2.0
    se, df = sd / np.sqrt(n), n - 1
    d = power.mde(se, df, alpha)
    x = np.random.default_rng(n).normal(d, sd, (DRAWS, n))     # the true effect at the MDE, seeds as drawn
    p = st.ttest_1samp(x, 0.0, axis=1).pvalue
    rate = float(np.mean(p < alpha))
    assert rate == pytest.approx(power.POWER, abs=3 * np.sqrt(0.8 * 0.2 / DRAWS))
    assert power.power(0.0, se, df, alpha) == pytest.approx(alpha)        # no effect: the test's own level
    assert power.power(d, se, df, alpha) == pytest.approx(power.POWER, abs=1e-8)
    assert power.mde(2 * se, df, alpha) == pytest.approx(2 * d)           # scales with the standard error


def test_projection_to_more_seeds_equals_welch_on_samples_of_the_same_spread():
    rng = np.random.default_rng(1)
    a3, b3 = _exact_sd(rng, 3, 10.0, 1.0), _exact_sd(rng, 3, 12.0, 3.0)
    a5, b5 = _exact_sd(rng, 5, 10.0, 1.0), _exact_sd(rng, 5, 12.0, 3.0)
    t3, t5 = stats.welch_test(a3, b3), stats.welch_test(a5, b5)
    se, df = power.at_seeds(t3.se, t3.df, 3, 5)
    assert se == pytest.approx(t5.se) and df == pytest.approx(t5.df)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        power.at_seeds(1.0, 1.0, 1, 5)
    assert power.mde(0.0, 2.0, 0.05) is None and power.mde(1.0, float("nan"), 0.05) is None


def test_the_report_table_says_where_the_source_falls_and_skips_what_has_no_test():
    claims = {c.id: c for c in C.CLAIMS}
    rows = [{"claim": claims["M1"], "result": {"verdict": "not reproduced", "n": [3, 3], "se": 2.0, "df": 4.0,
                                               "alpha": 0.0294, "ci": [-5.0, 6.0]}},
            {"claim": claims["S2"], "result": {"verdict": "reversed", "n": [3], "se": 0.2, "df": 2.0,
                                               "alpha": 0.0294, "ci": [10.0, 12.0]}},
            {"claim": claims["B1"], "result": {"verdict": "untestable", "n": [1, 3]},
             "knobs": [{"knob": "loss.lambda_con=0.5", "verdict": "not reproduced", "n": [3, 3], "se": 2.0,
                        "df": 4.0, "alpha": 0.0294, "ci": [-6.0, 6.0]},
                       {"knob": "loss.false_negatives='ignore'", "verdict": "missing"}]},
            {"claim": claims["M2a"], "result": {"verdict": "reversed", "n": [5, 5], "se": 1.0, "df": 8.0,
                                                "alpha": 0.0294, "ci": [-9.0, -2.0]}}]
    text = "\n".join(tables.power_section(rows, tables.markdown_table))
    assert_tables_are_rectangular(text)
    m1 = power.mde(2.0, 4.0, 0.0294)
    m1_5 = power.mde(*power.at_seeds(2.0, 4.0, 3, 5), 0.0294)
    assert f"| M1 | **not reproduced** | 3/3 | 2.00 | 4.0 | {m1:.2f} | {m1_5:.2f} | +1.66 | inside |" in text
    assert "| S2 | **reversed** | 3 | 0.20 | 2.0 | – | – |" in text            # decided by its margin
    assert "| B1 | **untestable** | 1/3 | – | – | – | – | +27.3 | – |" in text
    # its knob re-test follows it (the source's +27.3 lies above the re-test's interval); a missing one does not
    assert f"| B1, `loss.lambda_con=0.5` | **not reproduced** | 3/3 | 2.00 | 4.0 | {m1:.2f} | {m1_5:.2f} | +27.3 " \
           "| above |" in text
    assert "false_negatives" not in text
    assert f"| M2a | **reversed** | 5/5 | 1.00 | 8.0 | {power.mde(1.0, 8.0, 0.0294):.2f} | – | +4.53 | above |" in text
