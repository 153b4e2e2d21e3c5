"""The all-pairs set score over a global batch, sharded by image rows and chunked over captions.

    S[i, n] = sim(V_i, T_n),   i < B images, n < M captions (M = 5B on COCO/ShapesWorld)

`pairwise_set_similarity` builds it from one [B, M, K_V, K_T] block tensor plus one solver state per block, and a
jitted step leaves that tensor's layout to XLA's sharding propagation. Here it is laid out on purpose
(`jax.shard_map` over the mesh's batch axes, n devices):

    device d holds image rows R_d (B/n sets) and caption rows C_d (M/n sets);
    T = all_gather_d(C_d)                            [M, K_T, D] — linear in B (the sets, not their products)
    S[R_d, :] = concat_c sim(V_{R_d}, T_c)           caption chunks c of `chunk` sets, one at a time (`lax.map`),
                                                     each rematerialised in the backward pass (`jax.checkpoint`)

so one device holds at most [B/n, chunk, K_V, K_T] cosines and one chunk's solver state, never the whole block
tensor; what remains quadratic in the global batch is S's own rows, B/n × M floats per device (4·5B²/n bytes).
S comes back sharded by rows, P(batch_axes, None); the ranking losses reduce it along rows (local) and along
columns (an all-reduce of [M] vectors that XLA inserts). Gradients: all_gather's transpose is a reduce-scatter,
so each caption's gradient is summed over every device that scored it — equal to the single-device gradient.

The same layout serves any all-pairs mean over two batch-sharded point sets (`sharded_pair_mean`: the MMD terms,
whose (5B·K)² caption-caption kernel is the largest quadratic term of a step that has it):

    mean_w k = Σ_ij w_i v_j k(x_i, y_j) / max(Σ_i w_i · Σ_j v_j, 1),   rows i on their device, columns j gathered
               and taken `chunk` at a time; the partial sums meet in one psum.

The VSE0 warm-up's image-to-text hinge sum pairs every anchor caption n with its image's whole row,
H = Σ_n a_n Σ_m N[i_n, m] [δ + S[i_n, m] − s_n]_+ (`mmjax.losses.ranking`), an [M, M] matrix when formed at once
(25·B² floats: the largest tensor of a warm-up step). `sharded_anchor_hinge_sum` streams it where the rows live:

    device d sorts the gathered anchors by image (a permutation of M indices), walks them `chunk` at a time and
    scores a chunk only if one of its anchors has its image among R_d (`lax.cond`; the others cost a branch);
    one psum joins the partial sums.

so a device holds [chunk, M] hinges at a time, and visits about M/n anchors.

The mesh comes from `mesh=` or from the context (`jax.set_mesh(mesh)`, which `mmjax.train` enters around its step).
Config: `sharding.all_pairs = 'rows'` and `sharding.all_pairs_chunk` (docs/scaling.md).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from mmjax.similarity import _check_sets, check_unit_norm, prepare_sets, pairwise_set_similarity, resolve_kind

ALL_PAIRS_LAYOUTS = ("xla", "rows")


@dataclasses.dataclass(frozen=True)
class AllPairsLayout:
    """How a training step lays out the all-pairs score (`config.sharding.all_pairs*`).

    kind 'xla': one block tensor, layout left to XLA (the form every earlier run used); 'rows': sharded by image rows
    over `axes`, `chunk` captions at a time per device (0 = all gathered captions in one chunk)."""
    kind: str = "xla"
    axes: tuple[str, ...] = ("data",)
    chunk: int = 0

    def __post_init__(self):
        if self.kind not in ALL_PAIRS_LAYOUTS:
            raise ValueError(f"sharding.all_pairs must be one of {ALL_PAIRS_LAYOUTS}, got {self.kind!r}")
        if int(self.chunk) < 0:
            raise ValueError(f"sharding.all_pairs_chunk must be >= 0 (0 = one chunk), got {self.chunk}")

    @classmethod
    def from_config(cls, sharding_config) -> "AllPairsLayout":
        get = sharding_config.get if hasattr(sharding_config, "get") else (lambda k, d=None: d)
        return cls(kind=get("all_pairs", "xla"), axes=tuple(get("batch_axes", ("data",))),
                   chunk=int(get("all_pairs_chunk", 0)))

    def pair_mean(self, kernel, x, y, wx, wy, *, same: bool, points_per_set: int = 1):
        """`sharded_pair_mean` under this layout, over points that come `points_per_set` to a set (the elements of
        sets of K: K), so a chunk holds the elements of at most `chunk` sets: the largest divisor of y's point count
        not above chunk·points_per_set (the sum is the same for every chunk size; only memory changes)."""
        if self.kind == "xla":
            raise ValueError("AllPairsLayout('xla').pair_mean: the 'xla' layout computes the whole kernel")
        m = y.shape[0]
        bound = self.chunk * points_per_set if self.chunk else m
        chunk = next(c for c in range(min(bound, m), 0, -1) if m % c == 0)
        return sharded_pair_mean(kernel, x, y, wx, wy, same=same, axes=self.axes, chunk=chunk)

    def anchor_hinge_sum(self, scores, neg, caption_image, s_pos, anchor, margin):
        """`sharded_anchor_hinge_sum` under this layout (`chunk` anchors at a time; 0 = all)."""
        if self.kind == "xla":
            raise ValueError("AllPairsLayout('xla').anchor_hinge_sum: the 'xla' layout gathers the rows at once")
        return sharded_anchor_hinge_sum(scores, neg, caption_image, s_pos, anchor, margin, axes=self.axes,
                                        chunk=self.chunk)

    def replicate(self, x):
        """`x` (a per-caption vector: caption→image indices, validity) replicated on every device under 'rows', so
        the [B, M] masks built from it take the score's row layout instead of resharding the score; as is for
        'xla'."""
        if self.kind == "xla" or x is None:
            return x
        return jax.lax.with_sharding_constraint(x, P())

    def score(self, a, b, kind, a_mask=None, b_mask=None, **options):
        if self.kind == "xla":
            return pairwise_set_similarity(a, b, kind, a_mask, b_mask, **options)
        return sharded_pairwise_set_similarity(a, b, kind, a_mask, b_mask, axes=self.axes, chunk=self.chunk,
                                               **options)


def _context_mesh(mesh, axes):
    if mesh is None:
        mesh = jax.sharding.get_abstract_mesh()
        if mesh.empty:
            raise ValueError("sharded_pairwise_set_similarity needs a mesh: pass mesh=, or call it under "
                             "`with jax.set_mesh(mesh):` (mmjax.train does so around its step)")
    missing = [a for a in axes if a not in mesh.axis_names]
    if missing:
        raise ValueError(f"sharded_pairwise_set_similarity: axes {missing} are not axes of the mesh "
                         f"{dict(mesh.shape)}")
    return mesh


def _check_divisible(fn: str, mesh, axes, **sizes) -> None:
    """Each named leading size must split evenly over the devices along `axes`."""
    n = 1
    for ax in axes:
        n *= mesh.shape[ax]
    for name, size in sizes.items():
        if size % n:
            raise ValueError(f"{fn}: {name} has {size} rows, not divisible by the {n} devices of mesh axes {axes}")


def _chunk_size(chunk: int, m: int) -> int:
    if chunk == 0 or chunk >= m:
        return m
    if m % chunk:
        largest = next(c for c in range(chunk, 0, -1) if m % c == 0)
        raise ValueError(f"sharding.all_pairs_chunk={chunk} does not divide the {m} gathered captions; the largest "
                         f"chunk that does is {largest}")
    return chunk


def sharded_pairwise_set_similarity(a, b, kind: str, a_mask=None, b_mask=None, *, mesh=None, axes=("data",),
                                    chunk: int = 0, normalize: bool | None = False, **options):
    """S [Ba, Bb] as `pairwise_set_similarity(a, b, kind, a_mask, b_mask, **options)`, computed per device on its
    image rows against the gathered captions, `chunk` captions at a time (module docstring); returned sharded by
    rows over `axes`. Ba and Bb must be divisible by the number of devices along `axes`; `chunk` (0 = all) must
    divide Bb."""
    kind = resolve_kind(kind)
    axes = tuple(axes)
    mesh = _context_mesh(mesh, axes)
    given = (a, b, a_mask, b_mask)
    a, b = jnp.asarray(a), jnp.asarray(b)
    a_mask = None if a_mask is None else jnp.asarray(a_mask, bool)
    b_mask = None if b_mask is None else jnp.asarray(b_mask, bool)
    _check_sets(a, b, a_mask, b_mask)
    if normalize is False:
        check_unit_norm("a", given[0], given[2], fn="sharded_pairwise_set_similarity")
        check_unit_norm("b", given[1], given[3], fn="sharded_pairwise_set_similarity")
    else:
        a = prepare_sets("a", a, a_mask, normalize, fn="sharded_pairwise_set_similarity")
        b = prepare_sets("b", b, b_mask, normalize, fn="sharded_pairwise_set_similarity")
    _check_divisible("sharded_pairwise_set_similarity", mesh, axes, images=a.shape[0], captions=b.shape[0])
    c = _chunk_size(int(chunk), b.shape[0])
    # Masks travel as arrays (all True when absent) so every shard_map input has a batch dimension.
    am = jnp.ones(a.shape[:2], bool) if a_mask is None else a_mask
    bm = jnp.ones(b.shape[:2], bool) if b_mask is None else b_mask
    masked = a_mask is not None or b_mask is not None
    spec = P(axes)

    @jax.checkpoint
    def score_chunk(rows, rows_mask, cols, cols_mask):
        if not masked:
            rows_mask = cols_mask = None
        return pairwise_set_similarity(rows, cols, kind, rows_mask, cols_mask, normalize=None, **options)

    def local(rows, rows_mask, cols, cols_mask):
        cols = jax.lax.all_gather(cols, axes, tiled=True)
        cols_mask = jax.lax.all_gather(cols_mask, axes, tiled=True)
        m = cols.shape[0]
        chunks = (cols.reshape(m // c, c, *cols.shape[1:]), cols_mask.reshape(m // c, c, *cols_mask.shape[1:]))
        blocks = jax.lax.map(lambda xs: score_chunk(rows, rows_mask, *xs), chunks)  # [m/c, rows, c]
        return jnp.moveaxis(blocks, 0, 1).reshape(rows.shape[0], m)

    return jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec, spec), out_specs=P(axes, None),
                         check_vma=False)(a, am, b, bm)


def sharded_pair_mean(kernel, x, y, wx, wy, *, same: bool = False, mesh=None, axes=("data",), chunk: int = 0):
    """Σ_ij wx_i wy_j k(x_i, y_j) / max(Σ wx · Σ wy, 1) for points x [N_x, D], y [N_y, D] (rows split over `axes`)
    and weights wx [N_x], wy [N_y]; `kernel(x_rows, y_cols) -> [rows, cols]`. `same=True` (y is x): the diagonal
    k(x_i, x_i) is the constant 1, outside the gradient path, as in `mmjax.losses.mmd`. Each device sums its rows
    against the gathered columns, `chunk` columns at a time (0 = all), each chunk rematerialised in the backward pass;
    one psum joins the devices. N_x and N_y must be divisible by the devices along `axes`."""
    axes = tuple(axes)
    mesh = _context_mesh(mesh, axes)
    _check_divisible("sharded_pair_mean", mesh, axes, x=x.shape[0], y=y.shape[0])
    c = _chunk_size(int(chunk), y.shape[0])
    spec = P(axes)

    def local(xr, wr, yc, wc):
        rows = xr.shape[0]
        yc = jax.lax.all_gather(yc, axes, tiled=True)
        wc = jax.lax.all_gather(wc, axes, tiled=True)
        first_row = _linear_axis_index(axes, mesh) * rows
        m = yc.shape[0]

        @jax.checkpoint
        def chunk_sum(ys, ws, start):
            k = kernel(xr, ys)
            if same:
                diag = (first_row + jnp.arange(rows))[:, None] == (start + jnp.arange(c))[None, :]
                k = jnp.where(diag, 1.0, k)
            return jnp.sum(k * wr[:, None] * ws[None, :])

        parts = jax.lax.map(lambda xs: chunk_sum(*xs), (yc.reshape(m // c, c, -1), wc.reshape(m // c, c),
                                                        jnp.arange(0, m, c)))
        return jax.lax.psum(jnp.sum(parts), axes)

    total = jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec, spec), out_specs=P(), check_vma=False)(
        x, wx, y, wy)
    return total / jnp.maximum(jnp.sum(wx) * jnp.sum(wy), 1.0)


def _linear_axis_index(axes, mesh):
    """This device's position along the flattened `axes` (row-major, as `P(axes)` splits a dimension)."""
    index = 0
    for ax in axes:
        index = index * mesh.shape[ax] + jax.lax.axis_index(ax)
    return index


def sharded_anchor_hinge_sum(scores, neg, caption_image, s_pos, anchor, margin, *, mesh=None, axes=("data",),
                             chunk: int = 0):
    """H = Σ_n a_n Σ_m N[i_n, m] [δ + S[i_n, m] − s_n]_+ (`mmjax.losses.ranking.dense_anchor_hinge_sum`) for S and N
    [B, M] split by rows over `axes` and per-caption i_n, s_n, a_n [M]; each device streams the anchors whose image
    is among its rows, `chunk` at a time (0 = all M), each chunk rematerialised in the backward pass (module
    docstring). B and M must be divisible by the devices along `axes`."""
    axes = tuple(axes)
    mesh = _context_mesh(mesh, axes)
    _check_divisible("sharded_anchor_hinge_sum", mesh, axes, images=scores.shape[0], captions=scores.shape[1])
    m = scores.shape[1]
    c = m if chunk <= 0 else min(int(chunk), m)
    pad = -m % c
    spec = P(axes)

    def local(s_rows, neg_rows, image_of, s_n, a_n):
        rows = s_rows.shape[0]
        first_row = _linear_axis_index(axes, mesh) * rows
        # The per-caption vectors arrive split like the captions and are gathered here, so that their cotangents
        # (s_n's) go back through all_gather's transpose, a reduce-scatter summing every device's share.
        image_of, s_n, a_n = (jax.lax.all_gather(v, axes, tiled=True) for v in (image_of, s_n, a_n))
        order = jnp.argsort(image_of, stable=True)
        row = image_of[order] - first_row
        mine = a_n[order] & (row >= 0) & (row < rows)
        s_n = s_n[order]
        row, mine, s_n = (jnp.pad(v, (0, pad)) for v in (row, mine, s_n))

        def chunk_sum(r, ok, s):
            r = jnp.clip(r, 0, rows - 1)
            w = neg_rows[r] & ok[:, None]
            return jnp.sum(jnp.where(w, jax.nn.relu(margin + s_rows[r] - s[:, None]), 0.0))

        @jax.checkpoint   # around the branch too: a checkpoint inside it still kept [chunk, M] residuals per chunk
        def visit(xs):
            return jax.lax.cond(jnp.any(xs[1]), chunk_sum, lambda *_: jnp.zeros((), s_rows.dtype), *xs)

        parts = jax.lax.map(visit, (row.reshape(-1, c), mine.reshape(-1, c), s_n.reshape(-1, c)))
        return jax.lax.psum(jnp.sum(parts), axes)

    return jax.shard_map(local, mesh=mesh, in_specs=(P(axes, None), P(axes, None), spec, spec, spec), out_specs=P(),
                         check_vma=False)(scores, neg, caption_image, s_pos, anchor)
