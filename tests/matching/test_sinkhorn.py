import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from mmjax import matching


def test_plan_is_doubly_stochastic():
    a = np.random.default_rng(0).uniform(-1, 1, size=(16, 4, 4)).astype(np.float32)
    plan = np.asarray(matching.sinkhorn_plan(a, tau=0.5, iters=50))
    assert plan.shape == a.shape and plan.dtype == np.float32
    np.testing.assert_allclose(plan.sum(-1), 1.0, atol=1e-4)
    np.testing.assert_allclose(plan.sum(-2), 1.0, atol=1e-5)
    assert np.all(plan >= 0)


def test_value_approaches_optimum_as_temperature_falls():
    a = np.random.default_rng(1).uniform(-1, 1, size=(32, 5, 5)).astype(np.float32)
    opt = np.array([x[linear_sum_assignment(x, maximize=True)].sum() for x in a.astype(np.float64)])
    gaps = []
    for tau in (1.0, 0.3, 0.1, 0.03):
        plan = np.asarray(matching.sinkhorn_plan(a, tau=tau, iters=400))
        value = (plan * a).sum(axis=(-2, -1))
        assert np.all(value <= opt + 1e-4)  # a doubly-stochastic plan never beats the assignment optimum
        gaps.append(float(np.mean(opt - value)))
    assert all(g1 > g2 for g1, g2 in zip(gaps, gaps[1:])), gaps
    assert gaps[-1] < 0.05 * gaps[0]


def test_sinkhorn_rejects_rectangles():
    with pytest.raises(ValueError, match="square unmasked"):
        matching.sinkhorn_plan(np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="square unmasked"):
        matching.sinkhorn_plan(np.zeros((2, 3, 4), np.float32))


def test_solve_refuses_sinkhorn_pointing_to_sinkhorn_plan():
    """Every `solve` returns int32 columns; the soft plan is `sinkhorn_plan`'s (tests/test_api_errors.py too)."""
    a = np.zeros((2, 3, 3), np.float32)
    assert "sinkhorn" not in matching.SOLVERS and "sinkhorn" in matching.SOFT_PLANS
    with pytest.raises(ValueError, match=r"call mmjax\.matching\.sinkhorn_plan\(scores, tau=0\.5, iters=50\)"):
        matching.solve(a, "sinkhorn", sinkhorn=dict(tau=0.5, iters=50))
    with pytest.raises(ValueError, match="soft plan"):
        matching.solve_with_aux(a, "sinkhorn")
