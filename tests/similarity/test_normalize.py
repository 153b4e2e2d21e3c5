"""`mmjax.normalize`: rows whose ‖x‖² overflows are still normalised (not zeroed), and every ordinary row gives
bitwise the old formula — values and gradients, numpy and jax, eagerly and under jit (a training study runs on it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax.normalize import safe_normalize, unit_normalize


def old_unit_numpy(x, eps=1e-12):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


def old_unit_jax(x, eps=1e-12):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def old_safe(x, axis=-1):
    sq = jnp.sum(x * x, axis=axis, keepdims=True)
    return x * jax.lax.rsqrt(jnp.maximum(sq, 1e-12))


def _bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def ordinary(seed, shape, dtype=np.float32):
    """Normal features at several scales (unit vectors, tiny, large-but-ordinary), a zero row and one-hot rows."""
    rng = np.random.default_rng(seed)
    scale = rng.choice([1e-8, 1e-3, 1.0, 30.0, 1e6], size=shape[:-1] + (1,))
    x = rng.normal(size=shape) * scale
    x.reshape(-1, shape[-1])[0] = 0.0
    x.reshape(-1, shape[-1])[1] = np.eye(shape[-1])[0]
    unit = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-30)
    x.reshape(-1, shape[-1])[2:4] = unit.reshape(-1, shape[-1])[2:4]
    return x.astype(dtype)


SHAPES = [(16, 64), (5, 4, 32), (3, 7, 1024), (6, 1)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, jnp.bfloat16])
@pytest.mark.parametrize("jit", [False, True])
def test_ordinary_rows_are_bitwise_the_old_formula_values_and_gradients(shape, dtype, jit):
    wrap = jax.jit if jit else (lambda f: f)
    with jax.enable_x64(dtype == np.float64):
        x = jnp.asarray(ordinary(0, shape, np.float64), dtype)
        w = jnp.asarray(np.random.default_rng(1).normal(size=shape), dtype)
        for new, old in ((unit_normalize, old_unit_jax), (safe_normalize, old_safe)):
            np.testing.assert_array_equal(_bits(wrap(new)(x)), _bits(wrap(old)(x)))
            g_new = wrap(jax.grad(lambda z: jnp.sum(new(z) * w).astype(jnp.float32)))(x)
            g_old = wrap(jax.grad(lambda z: jnp.sum(old(z) * w).astype(jnp.float32)))(x)
            np.testing.assert_array_equal(_bits(g_new), _bits(g_old))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ordinary_numpy_rows_are_bitwise_the_old_formula(shape, dtype):
    x = ordinary(2, shape, dtype)
    got = unit_normalize(x)
    assert isinstance(got, np.ndarray) and got.dtype == dtype
    np.testing.assert_array_equal(_bits(got), _bits(old_unit_numpy(x)))


def test_safe_normalize_other_axis_is_bitwise_the_old_formula():
    x = jnp.asarray(ordinary(3, (6, 32, 5)))
    for axis in (0, 1, -2):
        np.testing.assert_array_equal(_bits(safe_normalize(x, axis=axis)), _bits(old_safe(x, axis=axis)))


HUGE = np.array([[3e19, 4e19, 0.0], [-1e38, 1e38, 1e38], [2e25, 0.0, 0.0], [1.0, 2.0, 2.0]], np.float32)
WANT = np.array([[0.6, 0.8, 0.0], [-1, 1, 1] / np.sqrt(3), [1.0, 0.0, 0.0], [1 / 3, 2 / 3, 2 / 3]], np.float32)


@pytest.mark.parametrize("form", ["numpy", "jax", "jit", "safe", "safe_jit"])
def test_huge_rows_normalise_instead_of_turning_into_zeros(form):
    """‖x‖² overflows float32 for |x| ≳ 1.8e19: the row used to become x / inf = 0 and score 0.0."""
    fn = {"numpy": unit_normalize, "jax": lambda x: unit_normalize(jnp.asarray(x)),
          "jit": jax.jit(unit_normalize), "safe": lambda x: safe_normalize(jnp.asarray(x)),
          "safe_jit": jax.jit(safe_normalize)}[form]
    with np.errstate(over="ignore"):
        got = np.asarray(fn(HUGE))
    np.testing.assert_allclose(got, WANT, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, rtol=1e-6)


def test_huge_rows_have_the_exact_gradient_of_the_scale_invariant_normalisation():
    w = jnp.asarray(np.random.default_rng(4).normal(size=(3,)), jnp.float32)
    x = jnp.asarray([3.0, 4.0, 1.0], jnp.float32)
    for fn in (unit_normalize, safe_normalize):
        g_small = jax.grad(lambda z: jnp.sum(fn(z) * w))(x)
        g_huge = jax.grad(lambda z: jnp.sum(fn(z) * w))(x * 1e20)   # d/dx u(x) is homogeneous of degree −1
        np.testing.assert_allclose(np.asarray(g_huge) * 1e20, np.asarray(g_small), rtol=1e-5)


def test_non_finite_rows_keep_the_plain_formula():
    x = np.array([[np.inf, 1.0, 1.0], [np.nan, 1.0, 1.0], [0.0, 0.0, 0.0]], np.float32)
    with np.errstate(invalid="ignore"):
        want = old_unit_numpy(x)
    for got in (unit_normalize(x), np.asarray(unit_normalize(jnp.asarray(x)))):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
