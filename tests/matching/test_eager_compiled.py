"""An eager `matching.solve` runs the solver as one compiled program per shape and options
(`mmjax.matching._solve_core_jit`): a repeated call reuses it instead of re-tracing the solver's loops op by op, and
gives the outputs a jitted call gives. Under a caller's trace (jit, vmap, grad) the solver stays in that trace."""

import jax
import numpy as np
import pytest

from mmjax import matching


def _blocks(seed, shape):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("method", ["auction", "hungarian", "enumerate"])
def test_repeated_eager_calls_compile_once_and_equal_jit(method):
    compiled = matching._solve_core_jit
    # A shape no other test uses, so the first call must add exactly one compiled program.
    a, b = _blocks(0, (3, 6, 7)), _blocks(1, (3, 6, 7))
    mask = (np.ones((3, 6), bool), np.ones((3, 7), bool))
    before = compiled._cache_size()
    cols_a, aux_a = matching.solve_with_aux(a, method, mask=mask)
    assert compiled._cache_size() == before + 1
    matching.solve_with_aux(b, method, mask=mask)
    assert compiled._cache_size() == before + 1  # same shape and options: the compiled program is reused
    jitted = jax.jit(lambda x: matching.solve_with_aux(x, method, mask=mask))(a)
    np.testing.assert_array_equal(np.asarray(cols_a), np.asarray(jitted[0]))
    for key, value in aux_a.items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(jitted[1][key]), err_msg=key)


def test_traced_calls_stay_in_the_callers_trace():
    compiled = matching._solve_core_jit
    before = compiled._cache_size()
    a = _blocks(2, (3, 3, 3))
    jax.jit(lambda x: matching.solve(x, "auction"))(a)
    jax.vmap(lambda x: matching.solve(x, "hungarian"))(a)
    assert compiled._cache_size() == before


def test_eager_checks_still_raise_before_compiling():
    a = _blocks(3, (2, 4, 4))
    a[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match="non-finite values in valid cells"):
        matching.solve(a, "auction")
    with pytest.raises(ValueError, match="not exactly representable in float32"):
        matching.solve(np.full((1, 2, 2), 2 ** 25 + 1, np.int32), "hungarian")
