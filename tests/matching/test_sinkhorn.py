import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from mmjax import matching


def test_plan_is_doubly_stochastic():
    a = np.random.default_rng(0).uniform(-1, 1, size=(16, 4, 4)).astype(np.float32)
    plan = np.asarray(matching.solve(a, "sinkhorn", sinkhorn=dict(tau=0.5, iters=50)))
    np.testing.assert_allclose(plan.sum(-1), 1.0, atol=1e-4)
    np.testing.assert_allclose(plan.sum(-2), 1.0, atol=1e-5)
    assert np.all(plan >= 0)


def test_value_approaches_optimum_as_temperature_falls():
    a = np.random.default_rng(1).uniform(-1, 1, size=(32, 5, 5)).astype(np.float32)
    opt = np.array([x[linear_sum_assignment(x, maximize=True)].sum() for x in a.astype(np.float64)])
    gaps = []
    for tau in (1.0, 0.3, 0.1, 0.03):
        plan = np.asarray(matching.solve(a, "sinkhorn", sinkhorn=dict(tau=tau, iters=400)))
        value = (plan * a).sum(axis=(-2, -1))
        assert np.all(value <= opt + 1e-4)  # a doubly-stochastic plan never beats the assignment optimum
        gaps.append(float(np.mean(opt - value)))
    assert all(g1 > g2 for g1, g2 in zip(gaps, gaps[1:])), gaps
    assert gaps[-1] < 0.05 * gaps[0]


def test_sinkhorn_rejects_masks_and_rectangles():
    with pytest.raises(ValueError, match="square unmasked"):
        matching.solve(np.zeros((3, 4), np.float32), "sinkhorn")
    with pytest.raises(ValueError, match="square unmasked"):
        matching.solve(np.zeros((3, 3), np.float32), "sinkhorn", np.ones((3, 3), bool))
