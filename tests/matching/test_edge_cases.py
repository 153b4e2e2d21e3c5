"""Edge cases of `mmjax.matching.solve`: magnitudes far from 1, empty batches, non-float32 dtypes, overflowing
padding penalties, NaN totals under jit, option checking. Each test failed on the code before the fixes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from mmjax import matching
from mmjax.matching import solve_auction

try:                                                     # jax >= 0.4.3x exposes it at the top level
    enable_x64 = jax.enable_x64
except AttributeError:                                   # pragma: no cover
    from jax.experimental import enable_x64

SCALES = [1e-8, 1e-6, 1e-4, 1e-2, 1.0, 1e2, 1e4, 1e6, 1e8]
PER_SCALE = 6
METHOD_KS = [(method, k) for method in ("enumerate", "hungarian", "auction", "auto") for k in (2, 4, 9, 16)
             if not (method == "enumerate" and k > matching.ENUMERATE_MAX_K)]
# (rows, cols) as a function of K, and the mask kind.
VARIANTS = {
    "square": (lambda k: (k, k), None),
    "square_rowcol": (lambda k: (k, k), "rowcol"),
    "wide": (lambda k: (max(1, k - 3), k), None),
    "tall_cell": (lambda k: (k, max(1, k // 2)), "cell"),
}


def masked_optimum(c, cell):
    """Maximum-cardinality, then maximum-total matching of the valid cells (float64), via scipy."""
    c = np.asarray(c, np.float64)
    rows, cols = np.flatnonzero(cell.any(1)), np.flatnonzero(cell.any(0))
    if len(rows) == 0 or len(cols) == 0:
        return 0.0, 0
    sub = c[np.ix_(rows, cols)]
    ok = cell[np.ix_(rows, cols)]
    # Invalid cells: a penalty larger than any valid total, so scipy maximises the valid cardinality first.
    big = 4.0 * (np.abs(sub[ok]).sum() + 1.0)
    r, q = linear_sum_assignment(np.where(ok, sub, -big), maximize=True)
    keep = ok[r, q]
    return sub[r[keep], q[keep]].sum(), int(keep.sum())


def guaranteed_tolerance(c_max, k, padded):
    """The documented bound on OPT − total in score units (mmjax.matching.auction, .padding, .scaling).

    The auction's certificate accepts gap ≤ 1e-5·max(1, span(A)), A the padded benefit; padding holds −(2K+1)·max(1,
    c_max), so span(A) ≤ (2K+1)·max(1, c_max) + c_max (≤ 2·c_max unpadded). Blocks with c_max < 2⁻¹⁰ are solved in
    units of c_max (exact power-of-two rescaling), which makes the bound relative there. The exact solvers meet the
    same bound: in a padded block their float32 totals resolve no better than the penalty's rounding. Plus float32
    rounding of K-term totals.
    """
    unit = c_max if c_max < 2.0 ** -10 else 1.0
    span = (2 * k + 1) * max(unit, c_max) + c_max if padded else 2 * c_max
    return 1e-5 * max(unit, span) + 1e-6 * k * c_max


def check_against_scipy(a, cell, cols, tol_of=guaranteed_tolerance):
    k = max(a.shape[-2:])
    for b in range(len(a)):
        want, card = masked_optimum(a[b], cell[b])
        matched = [(i, int(j)) for i, j in enumerate(cols[b]) if j >= 0]
        assert len(matched) == card, f"block {b}: {len(matched)} pairs, maximum cardinality is {card}"
        assert all(cell[b, i, j] for i, j in matched), f"block {b}: an invalid cell was matched"
        assert len({j for _, j in matched}) == len(matched), f"block {b}: a column was matched twice"
        got = sum(float(a[b, i, j]) for i, j in matched)
        c_max = float(np.abs(np.where(cell[b], a[b], 0)).max()) if cell[b].any() else 0.0
        padded = a.shape[-1] != a.shape[-2] or not cell[b].all()
        assert abs(got - want) <= tol_of(c_max, k, padded), (b, got, want, c_max, tol_of(c_max, k, padded))


@functools.lru_cache(maxsize=None)
def _jitted(method, mask_kind):
    if mask_kind is None:
        return jax.jit(lambda x: matching.solve(x, method))
    if mask_kind == "rowcol":
        return jax.jit(lambda x, r, c: matching.solve(x, method, (r, c)))
    return jax.jit(lambda x, c: matching.solve(x, method, c))


# ---- 1. magnitudes 1e-8 … 1e8: every solver optimal (the auction's certificate was absolute below span 1) -------


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("method, k", METHOD_KS)
def test_optimal_at_every_magnitude(method, k, variant):
    shape_of, mask_kind = VARIANTS[variant]
    n, m = shape_of(k)
    rng = np.random.default_rng([k, n, m, len(method)])
    unit = rng.normal(size=(len(SCALES), PER_SCALE, n, m))
    a = (unit * np.asarray(SCALES)[:, None, None, None]).reshape((-1, n, m)).astype(np.float32)
    if mask_kind is None:
        masks, cell = (), np.ones(a.shape, bool)
    elif mask_kind == "rowcol":
        masks = (rng.random((len(a), n)) < 0.75, rng.random((len(a), m)) < 0.75)
        cell = masks[0][:, :, None] & masks[1][:, None, :]
    else:
        masks = (rng.random(a.shape) < 0.75,)
        cell = masks[0]
    cols = np.asarray(_jitted(method, mask_kind)(a, *masks))
    # Before the fix the certificate's bound was absolute (1e-5·(2K+2) for padded blocks): errors of 10–80% of the
    # span at 1e-6, and with padding also from the exact solvers (penalty 2K + 1 ≫ scores of 1e-8).
    check_against_scipy(a, cell, cols)


@pytest.mark.parametrize("k", [4, 16])
def test_auction_certifies_only_optimal_matchings_at_tiny_scale(k):
    # Direct solve_auction (no padding, no repair): a certified problem must be optimal at 1e-6 as at 1.
    rng = np.random.default_rng(k)
    a = (rng.normal(size=(64, k, k)) * 1e-6).astype(np.float32)
    res = solve_auction(a)
    ok = ~np.asarray(res.needs_repair)
    assert ok.mean() > 0.8                                # relative tolerances: certified as often as at scale 1
    tot = a.astype(np.float64)[np.arange(64)[:, None], np.arange(k), np.asarray(res.perm)].sum(-1)
    want = np.array([x[linear_sum_assignment(x, maximize=True)].sum() for x in a.astype(np.float64)])
    span = (a.max((1, 2)) - a.min((1, 2))).astype(np.float64)
    assert np.all(want[ok] - tot[ok] <= 1e-5 * span[ok])
    assert np.all(np.asarray(res.gap)[ok] <= 1e-5 * span[ok])   # the gap is reported in the input's units


# ---- 2. empty batch -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["enumerate", "hungarian", "auction", "auto"])
@pytest.mark.parametrize("shape, masked", [((0, 3, 3), False), ((0, 2, 5), True), ((2, 0, 4, 4), True)])
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_empty_batch_returns_empty_result(method, shape, masked, mode):
    a = np.zeros(shape, np.float32)
    mask = (np.ones(shape[:-1], bool), np.ones(shape[:-2] + shape[-1:], bool)) if masked else None
    fn = (lambda x: matching.solve_with_aux(x, method, mask))
    cols, aux = jax.jit(fn)(a) if mode == "jit" else fn(a)
    assert cols.shape == shape[:-1] and cols.dtype == jnp.int32
    assert aux["total"].shape == shape[:-2] and aux["total"].dtype == jnp.float32
    for key in ("repaired_frac", "incomplete_frac", "gap_max", "nonfinite_frac", "inexact_frac"):
        assert aux[key].shape == () and float(aux[key]) == 0.0, key
    assert matching.solve(a, method, mask).shape == shape[:-1]


def test_empty_batch_direct_auction():
    res = solve_auction(np.zeros((0, 4, 4), np.float32))
    assert res.perm.shape == (0, 4) and res.needs_repair.shape == (0,) and res.gap.shape == (0,)


# ---- 3. integer / float64 inputs: no silent change of the problem -------------------------------------------------


def test_int32_beyond_float32_precision_is_refused_eagerly_and_under_jit():
    a = np.array([[2 ** 25 + 2, 1], [0, -2 ** 25]], np.int32)    # optimum: identity, total 2 (float32 would say 1)
    with pytest.raises(ValueError, match="int32.*not exactly representable in float32"):
        matching.solve(a, "hungarian")
    batch = np.stack([a, np.array([[3, 1], [0, 2]], np.int32)])
    for method in ("enumerate", "hungarian", "auction"):
        cols, aux = jax.jit(lambda x, method=method: matching.solve_with_aux(x, method))(batch)
        assert np.asarray(cols[0]).tolist() == [-1, -1]           # refused, never silently matched
        assert np.isnan(float(aux["total"][0]))
        assert np.asarray(cols[1]).tolist() == [0, 1] and float(aux["total"][1]) == 5.0
        assert float(aux["inexact_frac"]) == 0.5


@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.uint8])
def test_exactly_representable_integers_are_solved(dtype):
    a = np.random.default_rng(0).integers(0, 100, size=(20, 4, 4)).astype(dtype)
    cols, aux = matching.solve_with_aux(a, "hungarian")
    want = [x[linear_sum_assignment(x, maximize=True)].sum() for x in a.astype(np.int64)]
    np.testing.assert_array_equal(np.asarray(aux["total"]), want)
    assert float(aux["inexact_frac"]) == 0.0


def test_int32_extremes_do_not_look_exact():
    # 2**31 - 1 -> float32 2**31 -> (saturating cast) 2**31 - 1: must still count as changed.
    a = np.array([[2 ** 31 - 1, 0], [0, 0]], np.int32)
    with pytest.raises(ValueError, match="int32"):
        matching.solve(a, "enumerate")


def test_float64_under_x64_is_refused_when_float32_changes_it():
    with enable_x64(True):
        a = np.array([[1e8 + 1, 0.0], [0.0, 1e8]], np.float64)   # float32: 1e8 + 1 -> 1e8
        with pytest.raises(ValueError, match="float64"):
            matching.solve(a, "hungarian")
        big = np.array([[1e39, 0.0], [0.0, 1.0]], np.float64)     # beyond float32's range: was all −1, no error
        with pytest.raises(ValueError, match="float64"):
            matching.solve(big, "auction")
        cols, aux = jax.jit(lambda x: matching.solve_with_aux(x, "hungarian"))(jnp.asarray(big))
        assert np.asarray(cols).tolist() == [-1, -1] and np.isnan(float(aux["total"]))
        exact = np.array([[0.5, 2.0], [1.0, 0.25]], np.float64)   # representable: solved as float32
        assert np.asarray(matching.solve(exact, "hungarian")).tolist() == [1, 0]


# ---- 4. huge magnitudes: the padding penalty must not overflow -----------------------------------------------------


@pytest.mark.parametrize("method", ["enumerate", "hungarian", "auction"])
@pytest.mark.parametrize("shape, mask_kind", [((3, 5), None), ((5, 2), None), ((4, 4), "rowcol"), ((4, 4), None)])
def test_huge_scores_do_not_overflow(method, shape, mask_kind):
    n, m = shape
    rng = np.random.default_rng(n * 10 + m)
    a = np.clip(rng.normal(size=(24, n, m)) * 1e38, -3.3e38, 3.3e38).astype(np.float32)
    a[:8] /= 1e3                                         # and some just above the old limit 3.4e38/(2K + 1)
    if mask_kind == "rowcol":
        masks = (rng.random((24, n)) < 0.75, rng.random((24, m)) < 0.75)
        cell = masks[0][:, :, None] & masks[1][:, None, :]
    else:
        masks, cell = (), np.ones(a.shape, bool)
    cols = np.asarray(_jitted(method, mask_kind)(a, *masks))
    check_against_scipy(a, cell, cols)
    eager = np.asarray(matching.solve(a, method, tuple(masks) if masks else None))
    check_against_scipy(a, cell, eager)


def test_huge_scores_enumerate_fast_path():
    # Square unmasked K <= 8 blocks take the one-GEMM path, whose K-term totals overflowed for |C| > 3.4e38/K.
    a = np.array([[[3e38, 3e38], [3e38, 2.7e38]]], np.float32)   # identity 5.7e38 < swap 6e38 (both > float32 max)
    assert np.asarray(matching.solve(a, "enumerate")).tolist() == [[1, 0]]
    rng = np.random.default_rng(1)
    b = np.clip(rng.normal(size=(32, 4, 4)) * 2e38, -3.3e38, 3.3e38).astype(np.float32)
    cols = np.asarray(jax.jit(lambda x: matching.solve(x, "enumerate"))(b))
    check_against_scipy(b, np.ones(b.shape, bool), cols)


# ---- 5. non-finite problems under jit: total NaN -------------------------------------------------------------------


@pytest.mark.parametrize("method", ["enumerate", "hungarian", "auction"])
@pytest.mark.parametrize("masked", [False, True])
def test_nonfinite_problem_total_is_nan_under_jit(method, masked):
    a = np.random.default_rng(0).normal(size=(3, 4, 4)).astype(np.float32)
    a[1, 2, 3] = np.nan
    mask = (np.ones((3, 4), bool), np.ones((3, 4), bool)) if masked else None
    cols, aux = jax.jit(lambda x: matching.solve_with_aux(x, method, mask))(a)   # unmasked enumerate: fast path
    total = np.asarray(aux["total"])
    assert np.isnan(total[1]) and np.all(np.isfinite(total[[0, 2]]))
    assert np.all(np.asarray(cols[1]) == -1)


# ---- 6. options ---------------------------------------------------------------------------------------------------


def test_unknown_options_are_rejected_naming_the_valid_ones():
    a = np.zeros((2, 3, 3), np.float32)
    with pytest.raises(TypeError, match="valid options: pad_penalty, auction, sinkhorn, backend, auto_table"):
        matching.solve(a, "hungarian", pad_penalt=3.0)
    with pytest.raises(TypeError, match="valid options"):
        matching.solve_with_aux(a, "hungarian", tol_cert=1e-6)
    with pytest.raises(TypeError, match="valid auction options: eps_start_frac"):
        matching.solve(a, "auction", auction=dict(tol=1e-6))
    with pytest.raises(TypeError, match="valid sinkhorn options: tau, iters"):
        matching.solve(a, "hungarian", sinkhorn=dict(temperature=0.1))
    # Every option is documented in solve's docstring.
    for name in matching.OPTIONS + matching.AUCTION_OPTIONS + matching.SINKHORN_OPTIONS:
        assert name in matching.solve.__doc__, name
