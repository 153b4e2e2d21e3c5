"""Set-to-set similarities over batches — `mmjax.similarity`.

Every score reduces one block C = V Tᵀ ∈ [−1, 1]^{K_V×K_T} of cosines between the L2-normalised elements of an image
set V and a caption set T, with validity masks μ^V, μ^T (n_V, n_T valid elements, m = min(n_V, n_T)):

    mil              max_{valid i,j} C_ij                                                        (PVSE)
    average          (1/(n_V n_T)) Σ_valid C_ij
    average_sigmoid  (1/(n_V n_T)) Σ_valid σ(a C_ij + b)                  (Set Div 'mp'; a=1, b=0 by default)
    chamfer          ½[(1/n_V) Σ_i max_j C_ij + (1/n_T) Σ_j max_i C_ij]                           (Set Div)
    smooth_chamfer   ½[(1/(α n_V)) Σ_i LSE_j(α C_ij) + (1/(α n_T)) Σ_j LSE_i(α C_ij)],  α = 16     (Set Div)
    maxmatch (S_H)   (1/m) Σ_{k matched, valid} f_s(C[k, π*(k)]),  π* = argmax_π Σ_k C̃[k, π(k)]      (MaxMatch)
    maxmatch_topk    (1/k) Σ_{(i,j) ∈ TopK_k(valid C)} f_s(C_ij),  k = m by default (inference; no one-to-one)
    sinkhorn_soft    (1/K) Σ_ij P_ij f_s(C_ij),  P = Sinkhorn(C/τ)                  (ablation; square, unmasked)

with f_s(x) = (exp(s x) − 1)/s (s = `s_h`, default 1; f_0(x) = x). π* is found on stop_gradient(C) (`match_on='cos'`) or
on stop_gradient(f_s(C)) (`'transformed'`) by `mmjax.matching.solve`; padded elements never match. Gradients reach C
only through the gathered matched cells: ∂S_H/∂C_ij = M*_ij exp(s C_ij)/m. Smooth-Chamfer keeps the reference's
additive bias (K equal entries c score c + log(K)/α). Masked cells use large *finite* penalties inside the reductions;
blocks are reduced in float32 whatever the input dtype (exp(16) overflows float16). Sets have K ≥ 1 elements (K = 0
is refused with a ValueError naming the shape).

All-pairs form: one matmul of the stacked (Ba·K_V) × (Bb·K_T) elements, reshaped to blocks [Ba, Bb, K_V, K_T]
(evaluation tiles it on the host: `mmjax.evaluation.embed.score_sets`).
Slab form (evaluation): the same GEMM on element-major rows gives C4[K_V, Ba, K_T, Bb]; `slab_similarity` reduces
its K_V·K_T [Ba, Bb] slabs elementwise in one fused pass (top-k by rounds of max / count ties / mask; S_H by
enumerating the assignments of max(K_V, K_T) ≤ 5 in the enumerate solver's order), with the same scores.

Non-finite values: only valid cells count. A NaN in a valid cell makes the pair's score NaN for every kind (for
`maxmatch` and `average_sigmoid` also ±inf: the assignment is undefined, and σ(±inf) would hide the bad value);
NaN/inf in masked (padding) cells never change a score, eagerly or under jit.

Empty sets: a pair in which either set has no valid element (its mask all False) scores NaN for every kind, eagerly
and under jit, so the NaN guards of retrieval and training see it (no finite stand-in such as −1e9 reaches a ranking).
The NaN is selected with `jnp.where` after the reduction, so the gradients of every other pair stay finite and the
cotangent reaching the empty pair's (finite, unused) reduction is exactly 0. Losses that drop padded examples mask
their scores with `jnp.where` before use (`mmjax.losses.ranking`), so an empty padded example never reaches a loss.

Kind names (`resolve_kind`, used by every function that takes a kind): the names above, in any case and with '-' or
' ' for '_' (`'smooth-Chamfer'`, `'MIL'`), or a paper's name from `KIND_ALIASES` (`'S_H'` → `'maxmatch'`,
`'S_topk'` → `'maxmatch_topk'`, `'PVSE'` → `'mil'`, `'Set-Div'` → `'smooth_chamfer'`, `'mp'` → `'average_sigmoid'`,
...). An unknown name raises ValueError with the closest known name ("did you mean ...?") and the list of kinds.
Configs (`loss.similarity`) take the canonical names only.

Unit rows (`pairwise_set_similarity(..., normalize=False)`, the default): the scores are defined on L2-normalised
elements. An eager call (concrete arrays) whose valid, finite, non-zero elements have norms further than
`unit_norm_tolerance(dtype)` (1e-3; 4 ulps of 1 for float16/bfloat16) from 1 raises ValueError naming the measured
norm range; under `jit` (traced inputs) nothing is checked and nothing is added to the graph. `normalize=True`
normalises the elements first (`mmjax.normalize.safe_normalize`; zero rows stay zero); `normalize=None` trusts the
caller (no check: dot products of raw vectors on purpose). Masked (padding) elements and all-zero elements are never
checked: a zero row has no direction to normalise.
"""

import difflib
import functools
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np

from mmjax import matching
from mmjax.normalize import safe_normalize

KINDS = ("mil", "average", "average_sigmoid", "chamfer", "smooth_chamfer", "maxmatch", "maxmatch_topk",
         "sinkhorn_soft")

# The papers' and docs/design.md's names for the kinds (matched like the kinds: any case, '-' or ' ' for '_').
KIND_ALIASES = {
    "S_H": "maxmatch",                # MaxMatch's Maximal Pair Assignment similarity
    "S_topk": "maxmatch_topk",        # MaxMatch's inference without the one-to-one constraint
    "topk": "maxmatch_topk",
    "S_soft": "sinkhorn_soft",        # the entropic (Sinkhorn) ablation
    "sinkhorn": "sinkhorn_soft",
    "PVSE": "mil",                    # PVSE's multiple-instance (max over pairs) similarity
    "mean": "average",
    "mp": "average_sigmoid",          # Set Div's 'mp' variant
    "Set-Div": "smooth_chamfer",      # Set Div's default similarity
    "DivE": "smooth_chamfer",
}


def _spelling(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.strip()).lower()


_LOOKUP = {**{_spelling(a): k for a, k in KIND_ALIASES.items()}, **{k: k for k in KINDS}}


def resolve_kind(kind) -> str:
    """The canonical similarity kind (one of `KINDS`) for `kind`: a kind in any case, with '-' or ' ' for '_', or a
    name of `KIND_ALIASES` (`'S_H'` → `'maxmatch'`). Anything else raises ValueError with the closest known name."""
    if isinstance(kind, str) and _spelling(kind) in _LOOKUP:
        return _LOOKUP[_spelling(kind)]
    if not isinstance(kind, str):
        raise ValueError(f"similarity kind must be a string such as 'maxmatch', got {kind!r} "
                         f"({type(kind).__name__}); known kinds: {', '.join(KINDS)}")
    close = difflib.get_close_matches(_spelling(kind), list(_LOOKUP), n=1, cutoff=0.6)
    hint = f"did you mean {_LOOKUP[close[0]]!r}? " if close else ""
    aliases = ", ".join(f"{a!r} = {k!r}" for a, k in KIND_ALIASES.items())
    raise ValueError(f"unknown similarity kind {kind!r}; {hint}known kinds: {', '.join(KINDS)} "
                     f"(also accepted, any case: {aliases})")


def inference_kind(training_kind: str) -> str:
    """The score a model trained with `training_kind` is evaluated with: MaxMatch's top-k inference for a model
    trained with S_H ([paper]: one-to-one matching in training, top-k at inference; docs/design.md#topk-inference),
    the training similarity itself otherwise. The one place this rule lives (evaluation, suites and studies read it).
    Aliases resolve (`resolve_kind`); the answer is a canonical kind."""
    training_kind = resolve_kind(training_kind)
    return "maxmatch_topk" if training_kind == "maxmatch" else training_kind


def reported_kinds(training_kind: str) -> tuple[str, ...]:
    """The scores a retrieval evaluation reports for a training similarity: the inference score first, then the
    training similarity when it differs (MaxMatch: top-k inference and exact S_H). Canonical kinds."""
    training_kind = resolve_kind(training_kind)
    return tuple(dict.fromkeys((inference_kind(training_kind), training_kind)))


_NEG = -1e9  # finite stand-in for −∞ in masked maxima


def f_s(x, s):
    """(exp(s x) − 1)/s, and x when s = 0."""
    return x if s == 0 else jnp.expm1(s * x) / s


def _masks(c, row_mask, col_mask):
    k_v, k_t = c.shape[-2:]
    row = jnp.ones(c.shape[:-2] + (k_v,), bool) if row_mask is None else jnp.broadcast_to(row_mask, c.shape[:-1])
    col = jnp.ones(c.shape[:-2] + (k_t,), bool) if col_mask is None else jnp.broadcast_to(
        col_mask, c.shape[:-2] + (k_t,))
    return row, col, row[..., :, None] & col[..., None, :]


def _count(mask):
    return jnp.maximum(jnp.sum(mask, axis=-1), 1).astype(jnp.float32)


def _check_nonempty_blocks(shape, what: str):
    if len(shape) < 2 or 0 in tuple(shape)[-2:]:
        raise ValueError(f"{what} must have K_V >= 1 and K_T >= 1 elements per set, got shape {tuple(shape)} "
                         f"(a set with no elements has no score; mask elements out instead)")


def _nan_where(score, *conditions):
    """`score` with NaN where any of `conditions` (None = never) holds; the score itself when none is given, so a
    call without masks or checks compiles exactly as before."""
    conditions = [m for m in conditions if m is not None]
    if not conditions:
        return score
    return jnp.where(functools.reduce(jnp.logical_or, conditions), jnp.nan, score)


def block_similarity(c, kind: str, row_mask=None, col_mask=None, *, alpha: float = 16.0, s_h: float = 1.0,
                     match_on: str = "cos", solver: str = "auto", solver_options=None, topk_k=None,
                     sigmoid_a: float = 1.0, sigmoid_b: float = 0.0, sinkhorn_tau: float = 0.05,
                     sinkhorn_iters: int = 20, sinkhorn_grad: str = "plan_fixed"):
    """Reduces blocks `c[..., K_V, K_T]` (masks `row_mask[..., K_V]`, `col_mask[..., K_T]`) to scores `[...]`.

    A block whose valid rows or valid columns are all masked out (an empty set) scores NaN for every kind (module
    docstring); K_V = 0 or K_T = 0 is refused. `kind` may be an alias (`resolve_kind`)."""
    kind = resolve_kind(kind)
    _check_nonempty_blocks(jnp.shape(c), "block_similarity: c")
    c = c.astype(jnp.float32)
    row, col, cell = _masks(c, row_mask, col_mask)
    n_v, n_t = _count(row), _count(col)
    # Without masks no set can be empty: no extra op (the scores compile exactly as without this rule).
    empty = None if row_mask is None and col_mask is None else ~(jnp.any(row, -1) & jnp.any(col, -1))
    if kind == "mil":
        return _nan_where(jnp.max(jnp.where(cell, c, _NEG), axis=(-2, -1)), empty)
    if kind == "average":
        return _nan_where(jnp.sum(jnp.where(cell, c, 0.0), axis=(-2, -1)) / (n_v * n_t), empty)
    if kind == "average_sigmoid":
        # σ(±inf) is finite: a non-finite valid cell must still make the pair NaN, as for every other kind.
        bad = jnp.any(cell & ~jnp.isfinite(c), axis=(-2, -1))
        score = jnp.sum(jnp.where(cell, jax.nn.sigmoid(sigmoid_a * c + sigmoid_b), 0.0), axis=(-2, -1)) / (n_v * n_t)
        return _nan_where(score, bad, empty)
    if kind == "chamfer":
        masked = jnp.where(cell, c, _NEG)
        rows = jnp.sum(jnp.where(row, jnp.max(masked, axis=-1), 0.0), axis=-1) / n_v
        cols = jnp.sum(jnp.where(col, jnp.max(masked, axis=-2), 0.0), axis=-1) / n_t
        return _nan_where(0.5 * (rows + cols), empty)
    if kind == "smooth_chamfer":
        scaled = jnp.where(cell, alpha * c, _NEG)
        rows = jnp.sum(jnp.where(row, jax.nn.logsumexp(scaled, axis=-1), 0.0), axis=-1) / (alpha * n_v)
        cols = jnp.sum(jnp.where(col, jax.nn.logsumexp(scaled, axis=-2), 0.0), axis=-1) / (alpha * n_t)
        return _nan_where(0.5 * (rows + cols), empty)
    if kind == "maxmatch":
        if match_on not in ("cos", "transformed"):
            raise ValueError(f"match_on must be 'cos' or 'transformed', got {match_on!r}")
        if solver in matching.SOFT_PLANS:
            raise ValueError(f"solver={solver!r} gives a soft plan, not an assignment, so S_H cannot use it; the "
                             f"entropic relaxation is kind='sinkhorn_soft' (options sinkhorn_tau, sinkhorn_iters)")
        # Only valid cells may matter: padding cells are zeroed before the solver (whose eager check would reject a
        # NaN there), and a non-finite valid cell makes the whole pair NaN (the solver would leave it unmatched).
        bad = jnp.any(cell & ~jnp.isfinite(c), axis=(-2, -1))
        safe = jnp.where(cell & ~bad[..., None, None], c, 0.0)
        target = jax.lax.stop_gradient(safe if match_on == "cos" else f_s(safe, s_h))
        mask = None if row_mask is None and col_mask is None else (row, col)
        cols = matching.solve(target, solver, mask, **(solver_options or {}))
        matched = cols >= 0
        picked = jnp.take_along_axis(safe, jnp.clip(cols, 0, c.shape[-1] - 1)[..., None], axis=-1)[..., 0]
        score = jnp.sum(jnp.where(matched, f_s(picked, s_h), 0.0), axis=-1) / _count(matched)
        return _nan_where(score, bad, empty)
    if kind == "maxmatch_topk":
        k_v, k_t = c.shape[-2:]
        flat = jnp.where(cell, c, _NEG).reshape(c.shape[:-2] + (k_v * k_t,))
        m = jnp.minimum(jnp.sum(row, -1), jnp.sum(col, -1))
        if topk_k is None:
            k_static, k_eff = min(k_v, k_t), m
        else:
            k_static = min(int(topk_k), k_v * k_t)
            k_eff = jnp.minimum(k_static, jnp.sum(row, -1) * jnp.sum(col, -1))
        top = jax.lax.top_k(flat, k_static)[0]
        take = jnp.arange(k_static) < k_eff[..., None]
        score = jnp.sum(jnp.where(take, f_s(top, s_h), 0.0), axis=-1) / jnp.maximum(k_eff, 1).astype(jnp.float32)
        # lax.top_k's order of NaN differs eager vs jit; a NaN in a valid cell always makes the pair NaN.
        return _nan_where(score, jnp.any(cell & jnp.isnan(c), axis=(-2, -1)), empty)
    if kind == "sinkhorn_soft":
        if row_mask is not None or col_mask is not None or c.shape[-1] != c.shape[-2]:
            raise ValueError(f"sinkhorn_soft needs square unmasked blocks, got {c.shape[-2:]} with masks")
        if sinkhorn_grad not in ("plan_fixed", "unroll"):
            raise ValueError(f"sinkhorn_grad must be 'plan_fixed' or 'unroll', got {sinkhorn_grad!r}")
        src = jax.lax.stop_gradient(c) if sinkhorn_grad == "plan_fixed" else c
        plan = matching.sinkhorn_plan(src, sinkhorn_tau, sinkhorn_iters)  # [..., K, K], batched
        return jnp.sum(plan * f_s(c, s_h), axis=(-2, -1)) / c.shape[-1]
    raise ValueError(f"unknown similarity kind {kind!r}; choose one of {KINDS}")


def check_batch_of_sets(name: str, shape, spec: str = "[B, K, D]", fn: str = "") -> None:
    """Refuses anything but a batch of sets `spec` (3 dims), naming a single set [K, D] as such."""
    shape = tuple(shape)
    where = f"{fn}: " if fn else ""
    if len(shape) == 2:
        raise ValueError(f"{where}{name} must be {spec} (a batch of sets), got shape {shape}: a single set; add a "
                         f"batch axis ({name}[None])")
    if len(shape) != 3:
        raise ValueError(f"{where}{name} must be {spec} (a batch of sets), got shape {shape}")


def _check_sets(a, b, a_mask, b_mask):
    check_batch_of_sets("a", a.shape, "[Ba, K, D]")
    check_batch_of_sets("b", b.shape, "[Bb, K', D]")
    for name, x in (("a", a), ("b", b)):
        if x.shape[1] == 0:
            raise ValueError(f"{name} must have K >= 1 elements per set, got shape {x.shape} (K = 0: a set with no "
                             f"elements has no score; mask elements out instead)")
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"embedding dimension mismatch: a has D={a.shape[-1]} (shape {a.shape}), "
                         f"b has D={b.shape[-1]} (shape {b.shape})")
    for name, mask, x in (("a_mask", a_mask, a), ("b_mask", b_mask, b)):
        if mask is not None and tuple(mask.shape) != x.shape[:2]:
            raise ValueError(f"{name} must have shape {x.shape[:2]} to match its set, got {tuple(mask.shape)}")


def block_cosines(a, b):
    """C[i, n, k, j] = a[i, k] · b[n, j] from one (Ba·K_V) × (Bb·K_T) matmul, in float32."""
    ba, k_v, d = a.shape
    bb, k_t, _ = b.shape
    c = jnp.matmul(a.reshape(ba * k_v, d), b.reshape(bb * k_t, d).T, preferred_element_type=jnp.float32)
    return c.reshape(ba, k_v, bb, k_t).transpose(0, 2, 1, 3)


UNIT_NORM_TOL = 1e-3  # |‖x‖ − 1| allowed for a float32 "unit" element (module docstring)


def unit_norm_tolerance(dtype) -> float:
    """|‖x‖ − 1| accepted as unit norm for elements of `dtype`: 1e-3, or 4 ulps of 1 where that is larger (float16
    4e-3, bfloat16 3.1e-2: a unit row rounded to the dtype)."""
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        return UNIT_NORM_TOL
    return max(UNIT_NORM_TOL, 4 * float(jnp.finfo(dtype).eps))


def _is_traced(*xs) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in xs)


@jax.jit
def _norm_stats(x, valid):
    """(min norm, max norm, largest |norm − 1|, flat index of that element) over the checked elements: valid, finite
    and not all-zero; (inf, −inf, 0, 0) when there are none. One reduction on device, four scalars back."""
    x = x.astype(jnp.float32)
    norms = jnp.sqrt(jnp.sum(x * x, axis=-1))
    checked = valid & jnp.all(jnp.isfinite(x), axis=-1) & jnp.any(x != 0, axis=-1)
    dev = jnp.where(checked, jnp.abs(norms - 1.0), 0.0)
    return (jnp.min(jnp.where(checked, norms, jnp.inf)), jnp.max(jnp.where(checked, norms, -jnp.inf)),
            jnp.max(dev), jnp.argmax(dev.reshape(-1)))


def _host_norm_stats(x, valid, rows: int = 4096):
    """`_norm_stats` on the host, in float64, `rows` sets at a time (memory-mapped caches are read once, in chunks)."""
    x = np.asarray(x)
    lo, hi, worst, at = np.inf, -np.inf, 0.0, 0
    per_row = int(np.prod(x.shape[1:-1], dtype=np.int64))
    for start in range(0, x.shape[0], rows):
        chunk = np.asarray(x[start:start + rows], np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            norms = np.sqrt(np.sum(chunk * chunk, axis=-1))
        checked = valid[start:start + rows] & np.all(np.isfinite(chunk), axis=-1) & np.any(chunk != 0, axis=-1)
        if not checked.any():
            continue
        dev = np.where(checked, np.abs(norms - 1.0), 0.0)
        lo, hi = min(lo, norms[checked].min()), max(hi, norms[checked].max())
        if dev.max() > worst:
            worst, at = dev.max(), start * per_row + int(np.argmax(dev.reshape(-1)))
    return lo, hi, worst, at


def check_unit_norm(name: str, x, mask=None, *, fn: str = "pairwise_set_similarity") -> None:
    """Raises ValueError when the valid, finite, non-zero elements of the concrete set batch `x [B, K, D]` (validity
    `mask [B, K]`, None = all) are not unit-norm within `unit_norm_tolerance` (module docstring); traced inputs
    (under jit) are not checked. Host (numpy) arrays are checked on the host; device arrays by one reduction whose
    four scalars come back (one small transfer per call)."""
    if _is_traced(x, mask):
        return
    shape = np.shape(x)
    if isinstance(x, np.ndarray) or not isinstance(x, jax.Array):
        valid = np.ones(shape[:-1], bool) if mask is None else np.asarray(mask, bool)
        lo, hi, dev, at = _host_norm_stats(x, valid)
    else:
        valid = jnp.ones(shape[:-1], bool) if mask is None else jnp.asarray(mask, bool)
        lo, hi, dev, at = (v.item() for v in jax.device_get(_norm_stats(x, valid)))
    tol = unit_norm_tolerance(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)
    if not dev > tol:
        return
    index = tuple(int(i) for i in np.unravel_index(int(at), shape[:-1]))
    raise ValueError(
        f"{fn}: the valid elements of {name} are not unit-norm: their L2 norms range over [{lo:.4g}, {hi:.4g}] "
        f"(largest |norm - 1| = {dev:.3g} at {name}[{', '.join(map(str, index))}] > {tol:.0e}). The similarities "
        f"are defined on unit rows (cosines): pass normalize=True to L2-normalise the elements here, or normalise "
        f"them first (mmjax.normalize.unit_normalize); normalize=None skips this check (raw dot products on purpose)")


def prepare_sets(name: str, x, mask, normalize, *, fn: str = "pairwise_set_similarity"):
    """`x` for scoring under the `normalize` contract (module docstring): True → `safe_normalize` (integer inputs
    become float32 first), False → checked when concrete (`check_unit_norm`), None → as given."""
    if normalize is None:
        return x
    if normalize is True:
        x = jnp.asarray(x)
        return safe_normalize(x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32))
    if normalize is False:
        check_unit_norm(name, x, mask, fn=fn)
        return x
    raise ValueError(f"{fn}: normalize must be True, False or None, got {normalize!r}")


def pairwise_set_similarity(a, b, kind: str, a_mask=None, b_mask=None, *, normalize: bool | None = False, **kw):
    """Scores `[Ba, Bb]` between sets `a[Ba, K, D]` and `b[Bb, K', D]` (unit rows) for `kind` (module docstring;
    aliases such as `'S_H'` resolve by `resolve_kind`).

    K, K' >= 1 (K = 0 raises ValueError naming the shape); a single set [K, D] is refused with a hint to add the
    batch axis; a set whose mask is all False scores NaN against every set of the other side.

    normalize: False (default) — the elements must be unit rows: an eager call raises ValueError naming the measured
    norm range when valid elements are further than `unit_norm_tolerance` from norm 1 (nothing is checked under
    jit); True — L2-normalise the elements first (`mmjax.normalize.safe_normalize`); None — use them as given, no
    check (dot products of raw vectors on purpose)."""
    kind = resolve_kind(kind)
    given = (a, b, a_mask, b_mask)
    a, b = jnp.asarray(a), jnp.asarray(b)
    a_mask = None if a_mask is None else jnp.asarray(a_mask, bool)
    b_mask = None if b_mask is None else jnp.asarray(b_mask, bool)
    _check_sets(a, b, a_mask, b_mask)
    if normalize is False:  # checked on the caller's arrays: host (numpy) input is checked on the host
        check_unit_norm("a", given[0], given[2])
        check_unit_norm("b", given[1], given[3])
    else:
        a, b = prepare_sets("a", a, a_mask, normalize), prepare_sets("b", b, b_mask, normalize)
    c = block_cosines(a, b)
    row = None if a_mask is None else a_mask[:, None, :]
    col = None if b_mask is None else b_mask[None, :, :]
    if (row is None) != (col is None):
        row = jnp.ones(a.shape[:2], bool)[:, None, :] if row is None else row
        col = jnp.ones(b.shape[:2], bool)[None, :, :] if col is None else col
    return block_similarity(c, kind, row, col, **kw)


# ---- element-major ("slab") form for evaluation at the GEMM bound ---------------------------------------------
# The all-pairs GEMM of element-major rows (a[:, k] stacked over k, b[:, j] stacked over j) is C4[K_V, Ba, K_T, Bb]:
# cell (k, j) of every block is one [Ba, Bb] slab with contiguous rows. A reduction over the K_V·K_T cells is then
# a chain of elementwise ops across slabs, which XLA fuses into one pass over C4 with no transpose, gather or
# sort (`lax.top_k` over a minor axis of 16 cells ran 1.7× slower than the whole exact scorer).

SLAB_KINDS = ("maxmatch", "maxmatch_topk")
SLAB_MAX_K = 5  # exact S_H enumerates max(K_V, K_T)! permutations; the default enumerate solver's range


def element_major(x):
    """[B, K, D] → [K, B, D] (element-major rows for `slab_cosines`)."""
    return jnp.swapaxes(jnp.asarray(x), 0, 1)


def slab_cosines(a, b_em):
    """C4[k, i, j, n] = a[i, k] · b[n, j] for a [Ba, K_V, D] and b_em [K_T, Bb, D], one GEMM, float32."""
    ba, k_v, d = a.shape
    k_t, bb, _ = b_em.shape
    a_em = element_major(a).reshape(k_v * ba, d)
    c = jnp.matmul(a_em, b_em.reshape(k_t * bb, d).T, preferred_element_type=jnp.float32)
    return c.reshape(k_v, ba, k_t, bb)


def slab_supported(kind: str, k_v: int, k_t: int, *, solver: str = "auto", solver_options=None, **_) -> bool:
    """Whether `slab_similarity` computes `kind` (or its alias) with these options exactly as `block_similarity`
    does."""
    kind = resolve_kind(kind)
    if kind == "maxmatch_topk":
        return True
    if kind != "maxmatch" or solver_options or max(k_v, k_t) > SLAB_MAX_K:
        return False
    # Other exact solvers may break ties between optimal assignments differently; enumerate's rule is mirrored.
    return solver == "enumerate" or (solver == "auto" and matching.choose_auto(max(k_v, k_t)) == "enumerate")


def _slab_valid(a_mask, b_mask, k, j):
    if a_mask is None and b_mask is None:
        return None
    row = True if a_mask is None else a_mask[:, k][:, None]
    col = True if b_mask is None else b_mask[:, j][None, :]
    return row & col


def _counts(a_mask, b_mask, k_v, k_t):
    n_v = jnp.float32(k_v) if a_mask is None else jnp.sum(a_mask, -1).astype(jnp.float32)[:, None]
    n_t = jnp.float32(k_t) if b_mask is None else jnp.sum(b_mask, -1).astype(jnp.float32)[None, :]
    return n_v, n_t


def _slab_topk(cells, valid, n_v, n_t, k_static, topk_k, s_h):
    """Σ of the k largest valid cells by k rounds of (max, count ties, mask all equal) — values as `lax.top_k`."""
    k_eff = jnp.minimum(n_v, n_t) if topk_k is None else jnp.minimum(jnp.float32(k_static), n_v * n_t)
    x = [c if v is None else jnp.where(v, c, _NEG) for c, v in zip(cells, valid)]
    taken = acc = jnp.float32(0.0)
    for r in range(k_static):
        top = functools.reduce(jnp.maximum, x)  # NaN-propagating
        hits = [xi == top for xi in x]
        take = jnp.clip(jnp.minimum(sum(h.astype(jnp.float32) for h in hits), k_eff - taken), 0.0)
        acc = acc + take * f_s(top, s_h)  # a NaN top takes 0 copies, and 0·NaN keeps the pair NaN
        taken = taken + take
        if r + 1 < k_static:
            x = [jnp.where(h, _NEG, xi) for h, xi in zip(hits, x)]
    return acc / jnp.maximum(k_eff, 1.0)


@functools.lru_cache(maxsize=None)
def _pair_sets(k_v: int, k_t: int) -> tuple:
    """Distinct in-range cell sets {(i, π(i))} of the permutations π of max(K_V, K_T), first occurrence in
    lexicographic order of π — the order in which the enumerate solver breaks ties."""
    seen = {}
    for perm in itertools.permutations(range(max(k_v, k_t))):
        cells = tuple((i, j) for i, j in enumerate(perm) if i < k_v and j < k_t)
        seen.setdefault(cells, None)
    return tuple(seen)


def _slab_maxmatch(cells, valid, k_v, k_t, n_v, n_t, s_h, match_on):
    """S_H by enumeration: the first assignment maximising (#valid matched pairs, Σ target) in enumerate's order."""
    masked = valid[0] is not None
    ij = [(i, j) for i in range(k_v) for j in range(k_t)]
    keep = (lambda x, v: jnp.where(v, x, 0.0)) if masked else (lambda x, v: x)  # padding cells count 0
    fc = {cell: f_s(c, s_h) for cell, c in zip(ij, cells)}
    tgt = {cell: keep(c if match_on == "cos" else fc[cell], v) for cell, c, v in zip(ij, cells, valid)}
    fc = {cell: keep(fc[cell], v) for cell, v in zip(ij, valid)}
    ok = {cell: v.astype(jnp.float32) for cell, v in zip(ij, valid)} if masked else None
    best = None
    for pairs in _pair_sets(k_v, k_t):
        total, fsum = sum(tgt[p] for p in pairs), sum(fc[p] for p in pairs)
        n_pairs = sum(ok[p] for p in pairs) if masked else None
        if best is None:
            best = (total, fsum, n_pairs)
            continue
        b_total, b_fsum, b_n = best
        better = total > b_total if not masked else (n_pairs > b_n) | ((n_pairs == b_n) & (total > b_total))
        best = (jnp.where(better, total, b_total), jnp.where(better, fsum, b_fsum),
                None if not masked else jnp.where(better, n_pairs, b_n))
    # Non-finite valid cells: the assignment is undefined, the pair is NaN (0·x is NaN exactly for x = ±inf, NaN).
    probe = sum(keep(c * 0.0, v) for c, v in zip(cells, valid))
    return best[1] / jnp.maximum(jnp.minimum(n_v, n_t), 1.0) + probe


def slab_similarity(c4, kind: str, a_mask=None, b_mask=None, *, s_h: float = 1.0, match_on: str = "cos",
                    solver: str = "auto", solver_options=None, topk_k=None, **_):
    """Scores [Ba, Bb] from C4 [K_V, Ba, K_T, Bb] (`slab_cosines`) for `kind` in SLAB_KINDS; equals
    `block_similarity` on the same cells (module docstring), including ties and NaN handling.

    Options of other kinds (`alpha`, ...) are ignored, as `block_similarity` ignores them; `slab_supported` says
    whether `kind` (aliases resolve, `resolve_kind`) and the solver options are covered. C4 holds cosines, so unit
    rows are the caller's business (`slab_cosines` of unit sets; `pairwise_set_similarity` checks them).
    """
    kind = resolve_kind(kind)
    if c4.ndim != 4:
        raise ValueError(f"slab_similarity: c4 must be [K_V, Ba, K_T, Bb], got shape {c4.shape}")
    k_v, _, k_t, _ = c4.shape
    if k_v == 0 or k_t == 0:
        raise ValueError(f"slab_similarity: c4 must have K_V >= 1 and K_T >= 1, got shape {c4.shape} "
                         f"[K_V, Ba, K_T, Bb] (a set with no elements has no score; mask elements out instead)")
    if not slab_supported(kind, k_v, k_t, solver=solver, solver_options=solver_options):
        raise ValueError(f"slab_similarity does not cover kind={kind!r} with solver={solver!r}, "
                         f"solver_options={solver_options!r}, K_V={k_v}, K_T={k_t}; use pairwise_set_similarity")
    if match_on not in ("cos", "transformed"):
        raise ValueError(f"match_on must be 'cos' or 'transformed', got {match_on!r}")
    cells = [c4[k, :, j, :] for k in range(k_v) for j in range(k_t)]
    valid = [_slab_valid(a_mask, b_mask, k, j) for k in range(k_v) for j in range(k_t)]
    n_v, n_t = _counts(a_mask, b_mask, k_v, k_t)
    out_shape = (c4.shape[1], c4.shape[3])
    if kind == "maxmatch_topk":
        k_static = min(k_v, k_t) if topk_k is None else min(int(topk_k), k_v * k_t)
        score = _slab_topk(cells, valid, n_v, n_t, k_static, topk_k, s_h)
    else:
        score = _slab_maxmatch(cells, valid, k_v, k_t, n_v, n_t, s_h, match_on)
    # An empty set (mask all False) scores NaN, as in `block_similarity`; without masks nothing is added.
    empty_v = None if a_mask is None else n_v == 0
    empty_t = None if b_mask is None else n_t == 0
    return jnp.broadcast_to(_nan_where(score, empty_v, empty_t), out_shape)
