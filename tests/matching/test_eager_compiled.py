"""An eager `matching.solve` runs the solver as one compiled program per shape and options
(`mmjax.matching._solve_core_jit`): a repeated call reuses it instead of re-tracing the solver's loops op by op, and
gives the outputs a jitted call gives. Under a caller's trace (jit, vmap, grad) the solver stays in that trace.

Compiles are counted from jax's own compile log, not from the jitted function's cache size: that cache is an LRU
shared by every jitted function in the process (8192 entries), so late in a long pytest worker a new entry evicts an
old one and the size stops growing."""

import logging

import jax
import jax.extend
import numpy as np
import pytest

from mmjax import matching


def _blocks(seed, shape):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _solver_traces(records):
    """How many times jax traced `_solve_core` as a jitted program of its own, from the `jax.log_compiles` log."""
    return sum("Finished tracing _solve_core for jit" in r.getMessage() for r in records)


@pytest.mark.parametrize("method", ["auction", "hungarian", "enumerate"])
def test_repeated_eager_calls_compile_once_and_equal_jit(method, caplog):
    # A shape no other test uses, so the first call must trace the solver exactly once.
    a, b = _blocks(0, (3, 6, 7)), _blocks(1, (3, 6, 7))
    mask = (np.ones((3, 6), bool), np.ones((3, 7), bool))
    caplog.set_level(logging.WARNING, logger="jax")
    with jax.log_compiles(True):
        cols_a, aux_a = matching.solve_with_aux(a, method, mask=mask)
        assert _solver_traces(caplog.records) == 1
        caplog.clear()
        matching.solve_with_aux(b, method, mask=mask)
        # Same shape and options: the compiled program is reused (nothing at all is traced or compiled again).
        assert [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()
                or "Finished tracing" in r.getMessage()] == []
    jitted = jax.jit(lambda x: matching.solve_with_aux(x, method, mask=mask))(a)
    np.testing.assert_array_equal(np.asarray(cols_a), np.asarray(jitted[0]))
    for key, value in aux_a.items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(jitted[1][key]), err_msg=key)


def _nested_jit_names(jaxpr):
    """Names of the jitted sub-programs anywhere in a jaxpr (nested ones included)."""
    names = []
    for eqn in jaxpr.eqns:
        if "name" in eqn.params and "jaxpr" in eqn.params:
            names.append(eqn.params["name"])
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names += _nested_jit_names(sub)
    return names


def test_traced_calls_stay_in_the_callers_trace():
    a = _blocks(2, (3, 3, 3))
    # Positive control: an eager-style call to the compiled solver does show up as a nested program.
    row, col, cell = matching.normalise_masks(a, None)
    control = jax.make_jaxpr(lambda x: matching._solve_core_jit(x, row, col, cell, None, method="auction",
                                                                unmasked=True, pad_penalty="auto", auction=()))(a)
    assert "_solve_core" in _nested_jit_names(control.jaxpr)
    for traced in (jax.make_jaxpr(lambda x: matching.solve(x, "auction"))(a),
                   jax.make_jaxpr(jax.vmap(lambda x: matching.solve(x, "hungarian")))(a)):
        assert "_solve_core" not in _nested_jit_names(traced.jaxpr)


def test_eager_checks_still_raise_before_compiling():
    a = _blocks(3, (2, 4, 4))
    a[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match="non-finite values in valid cells"):
        matching.solve(a, "auction")
    with pytest.raises(ValueError, match="not exactly representable in float32"):
        matching.solve(np.full((1, 2, 2), 2 ** 25 + 1, np.int32), "hungarian")
