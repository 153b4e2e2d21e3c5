"""Run in a subprocess with 8 simulated CPU devices (issue #28 item 2): the all-pairs set score sharded by image rows
and chunked over captions (`mmjax.sharded_similarity`) against the single-device score — values and gradients of
the score and of the whole MaxMatch objective in every triplet phase — its compiled per-device memory on meshes of
1, 2, 4 and 8 devices at a fixed global batch, and 3 training steps with `sharding.all_pairs=rows` against the
default layout; prints JSON after "RESULT "."""

import functools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

jax.config.update("jax_default_matmul_precision", "float32")

from mmjax.experiment import run as train_and_evaluate  # noqa: E402
from mmjax.losses import maxmatch_objective  # noqa: E402
from mmjax.sharded_similarity import AllPairsLayout, sharded_pairwise_set_similarity  # noqa: E402
from mmjax.similarity import pairwise_set_similarity  # noqa: E402
from mmjax.train.sharding import make_mesh  # noqa: E402

sys.path.insert(0, ".")
from configs import maxmatch_shapes  # noqa: E402

KINDS = ("maxmatch", "maxmatch_topk", "smooth_chamfer", "mil")
B, PER_IMAGE, K, D = 16, 5, 3, 8
M = B * PER_IMAGE


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    a = unit(rng.normal(size=(B, K, D))).astype(np.float32)
    b = unit(rng.normal(size=(M, K, D))).astype(np.float32)
    am = rng.random((B, K)) > 0.25
    bm = rng.random((M, K)) > 0.25
    am[:, 0] = bm[:, 0] = True
    return a, b, am, bm, rng.normal(size=(B, M)).astype(np.float32)


def max_diff(x, y):
    return float(max(np.abs(np.asarray(u) - np.asarray(v)).max() for u, v in
                     zip(jax.tree_util.tree_leaves(x), jax.tree_util.tree_leaves(y))))


def score_equality(mesh):
    """Σ w·S and its gradients w.r.t. both sides' sets: sharded + chunked (jitted, inputs split over the mesh) vs
    the plain function on one device."""
    a, b, am, bm, w = inputs()
    split = NamedSharding(mesh, P("data"))
    out = {}
    for kind in KINDS:
        def plain(a, b):
            return jnp.sum(w * pairwise_set_similarity(a, b, kind, am, bm, normalize=None))

        def sharded(a, b, am, bm):
            s = sharded_pairwise_set_similarity(a, b, kind, am, bm, mesh=mesh, chunk=M // 4, normalize=None)
            return jnp.sum(w * s), s

        v0, g0 = jax.value_and_grad(plain, (0, 1))(a, b)
        f = jax.jit(jax.value_and_grad(sharded, (0, 1), has_aux=True), in_shardings=(split,) * 4)
        (v1, s), g1 = f(*(jax.device_put(x, split) for x in (a, b, am, bm)))
        out[kind] = {"value": [float(v0), float(v1)], "grad_diff": max_diff(g0, g1),
                     "score_spec": str(s.sharding.spec), "score_shard": list(s.addressable_shards[0].data.shape)}
    return out


def objective_equality(mesh):
    """The MaxMatch objective (triplet in all three phases + InfoNCE + GD + ISD + Div + MMD) and its gradients w.r.t. every
    model output: `all_pairs=AllPairsLayout('rows', chunk=20)` under `jax.set_mesh` vs one device."""
    a, b, am, bm, _ = inputs(1)
    rng = np.random.default_rng(2)
    image = {"set": a, "residual": rng.normal(size=a.shape).astype(np.float32),
             "global": unit(rng.normal(size=(B, D))).astype(np.float32)}
    text = {"set": b, "residual": rng.normal(size=b.shape).astype(np.float32),
            "global": unit(rng.normal(size=(M, D))).astype(np.float32)}
    caption_image = np.repeat(np.arange(B), PER_IMAGE).astype(np.int32)
    cfg = dict(similarity="maxmatch", lambda_con=0.5, lambda_gd=0.1, lambda_isd=0.1, lambda_div=0.01, lambda_mmd=0.5)
    layout = AllPairsLayout("rows", ("data",), chunk=M // 4)
    split = NamedSharding(mesh, P("data"))
    out = {}
    for phase, warmup in (("warmup", True), ("ramp", 0.4), ("hardest", False)):
        def loss(image, text, all_pairs):
            return maxmatch_objective({**image, "mask": am}, {**text, "mask": bm}, caption_image, cfg, warmup=warmup,
                                      all_pairs=all_pairs)[0]

        v0, g0 = jax.value_and_grad(loss)(image, text, None)
        sharded = jax.jit(jax.value_and_grad(lambda i, t: loss(i, t, layout)), in_shardings=(split, split))
        with jax.set_mesh(mesh):
            v1, g1 = sharded(jax.device_put(image, split), jax.device_put(text, split))
        out[phase] = {"value": [float(v0), float(v1)], "grad_diff": max_diff(g0, g1)}
    return out


def mmd_equality(mesh):
    """MMD between masked element sets through `sharded_pair_mean` (rows over 8 devices, 3 column chunks) vs the
    whole kernel matrices, values and gradients."""
    from mmjax.losses.mmd import mmd_loss
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(48, D)).astype(np.float32), rng.normal(size=(240, D)).astype(np.float32)
    y[7] = x[5]                                           # a collapsed pair: the distance floor, not the diagonal
    wx, wy = (rng.random(48) > 0.3).astype(np.float32), (rng.random(240) > 0.3).astype(np.float32)
    layout = AllPairsLayout("rows", ("data",), chunk=16)
    v0, g0 = jax.value_and_grad(lambda x, y: mmd_loss(x, y, x_mask=wx, y_mask=wy), (0, 1))(x, y)
    split = NamedSharding(mesh, P("data"))
    f = jax.jit(jax.value_and_grad(lambda x, y: mmd_loss(x, y, x_mask=wx, y_mask=wy, pair_mean=functools.partial(
        layout.pair_mean, points_per_set=1)), (0, 1)), in_shardings=(split, split))
    with jax.set_mesh(mesh):
        v1, g1 = f(x, y)
    return {"value": [float(v0), float(v1)], "grad_diff": max_diff(g0, g1)}


def hinge_equality(mesh):
    """The warm-up's image-to-text hinge sum streamed over each device's rows (`sharded_anchor_hinge_sum`: anchors
    in a shuffled image order, invalid captions, a chunk of 7 that does not divide the 80 anchors) vs the [M, M]
    rows at once, values and gradients w.r.t. S and s_n; and the compiled per-device temporary memory of both
    (value and gradient, 8 devices, 128 images × 640 captions)."""
    from mmjax.losses.ranking import dense_anchor_hinge_sum
    from mmjax.sharded_similarity import sharded_anchor_hinge_sum
    rng = np.random.default_rng(4)
    s = rng.normal(size=(B, M)).astype(np.float32)
    image_of = rng.permutation(np.repeat(np.arange(B), PER_IMAGE)).astype(np.int32)
    anchor = rng.random(M) > 0.2
    neg = (image_of[None, :] != np.arange(B)[:, None]) & anchor[None, :]
    s_pos = rng.normal(size=M).astype(np.float32)
    rows, vec = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P("data"))

    def dense(s, s_pos):
        return dense_anchor_hinge_sum(s, neg, image_of, s_pos, anchor, 0.2)

    def streamed(s, s_pos, neg, image_of, anchor):
        return sharded_anchor_hinge_sum(s, neg, image_of, s_pos, anchor, 0.2, mesh=mesh, chunk=7)

    v0, g0 = jax.value_and_grad(dense, (0, 1))(s, s_pos)
    f = jax.jit(jax.value_and_grad(streamed, (0, 1)), in_shardings=(rows, vec, rows, vec, vec))
    v1, g1 = f(s, s_pos, neg, image_of, anchor)
    out = {"value": [float(v0), float(v1)], "grad_diff": max_diff(g0, g1)}
    b_img, m = 128, 640
    shapes = (jax.ShapeDtypeStruct((b_img, m), jnp.float32), jax.ShapeDtypeStruct((m,), jnp.float32),
              jax.ShapeDtypeStruct((b_img, m), jnp.bool_), jax.ShapeDtypeStruct((m,), jnp.int32),
              jax.ShapeDtypeStruct((m,), jnp.bool_))
    at_once = jax.jit(jax.value_and_grad(lambda s, p, n, i, a: dense_anchor_hinge_sum(s, n, i, p, a, 0.2), (0, 1)),
                      in_shardings=(rows, vec, rows, vec, vec))
    stream = jax.jit(jax.value_and_grad(lambda s, p, n, i, a: sharded_anchor_hinge_sum(
        s, n, i, p, a, 0.2, mesh=mesh, chunk=40), (0, 1)), in_shardings=(rows, vec, rows, vec, vec))
    out["memory"] = {name: fn.lower(*shapes).compile().memory_analysis().temp_size_in_bytes
                     for name, fn in (("at_once", at_once), ("streamed", stream))}
    return out


def memory_by_mesh():
    """Compiled per-device temporary memory of Σ S and its gradient at a fixed global batch (64 images, 320 captions,
    K = 4, S_H by the auction), for 1, 2, 4 and 8 devices: sharded by rows with 4 caption chunks, and the block
    tensor form on one device."""
    b_img, k, d = 64, 4, 32
    a = jax.ShapeDtypeStruct((b_img, k, d), jnp.float32)
    b = jax.ShapeDtypeStruct((5 * b_img, k, d), jnp.float32)
    opts = dict(solver="auction", normalize=None)
    out = {}
    plain = jax.jit(jax.grad(lambda a, b: jnp.sum(pairwise_set_similarity(a, b, "maxmatch", **opts)), (0, 1)))
    out["xla_1"] = plain.lower(a, b).compile().memory_analysis().temp_size_in_bytes
    for n in (1, 2, 4, 8):
        mesh = make_mesh((("data", n),), jax.devices()[:n])
        split = NamedSharding(mesh, P("data"))
        f = jax.jit(jax.grad(lambda a, b: jnp.sum(sharded_pairwise_set_similarity(
            a, b, "maxmatch", mesh=mesh, chunk=5 * b_img // 4, **opts)), (0, 1)), in_shardings=(split, split))
        out[f"rows_{n}"] = f.lower(a, b).compile().memory_analysis().temp_size_in_bytes
    return out


def training_losses(root):
    """3 SGD steps of the smoke model on 8 devices with the default all-pairs layout and with 'rows' (2 chunks)."""
    out = {}
    for layout in ("xla", "rows"):
        c = maxmatch_shapes.get_config("smoke")
        c.train.update(num_steps=3, eval_every=0, checkpoint_every=3, log_every=1, async_checkpoints=False)
        c.optim.update(name="sgd", lr=0.05, schedule="constant")
        c.sharding.update(mesh=(("data", 8),), all_pairs=layout,
                          all_pairs_chunk=c.data.batch_size * 5 // 2 if layout == "rows" else 0)
        train_and_evaluate(c, f"{root}/{layout}")
        rows = [json.loads(line) for line in open(f"{root}/{layout}/metrics.jsonl")]
        out[layout] = [r["loss/total"] for r in rows if "loss/total" in r]
    return out


if __name__ == "__main__":
    assert jax.device_count() == 8, jax.devices()
    mesh = make_mesh((("data", 8),))
    result = {"score": score_equality(mesh), "objective": objective_equality(mesh),
              "mmd": mmd_equality(mesh), "hinge": hinge_equality(mesh), "memory": memory_by_mesh(),
              "training": training_losses(sys.argv[1])}
    print("RESULT " + json.dumps(result))
