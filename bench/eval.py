"""Retrieval scoring (`mmjax.evaluation.embed.score_sets`) vs the bare similarity GEMM, variants alternated.

    python bench/eval.py [--quick] [--images 5000] [--captions-per-image 5] [--k 4] [--dim 1024] [--rounds 5]
                         [--with-block]

Synthetic unit-norm sets: N images × K elements and 5N captions × K elements, D dims (full: 5 000 × 25 000, K = 4,
D = 1 024, i.e. a (20 000 × 1 024) · (1 024 × 100 000) GEMM; `--quick` = 1 000 × 5 000). Variants, each compiled and
warmed up on the first image chunk (same compiled shapes), then timed once per round, rounds alternating the
variants in this one process (the machine is shared: ratios come from medians over rounds, and the load average is
printed with every measurement):

- `gemm`: the bare all-element cosine matmul in the scorer's image-chunk × caption-tile tiling, each tile reduced to
  one sum behind an optimisation barrier (so XLA cannot skip or fuse it), plus, when its float32 output fits in
  2 GiB, `gemm1`: one untiled matmul. The reference is the faster of the two medians.
- `topk` / `exact`: `score_sets` with `'maxmatch_topk'` / `'maxmatch'` (full [N, 5N] matrix copied to the host),
  which run in the element-major slab form (`mmjax.similarity.slab_similarity`);
- `--with-block`: the same two kinds in the block form [chunk, tile, K, K] (`pairwise_set_similarity`: `lax.top_k`,
  the enumerate solver), i.e. the scorer before the slab form, for the side-by-side ratio.

Ratios: the ratio of medians, and the median over rounds of the per-round ratio (paired: variants of one round
saw about the same load). `--kernel-rounds R` (default 15) also times one image chunk of each variant's compiled
kernel (the bare GEMM with the same barrier, the slab and block reductions) alternated R times: short, paired
measurements that isolate the set reduction from the host loop. Targets: topk ≤ 1.3× and exact ≤ 1.6× the bare GEMM.
The result is stored under its size ("1000x5000", ...) in bench/results/eval.json (or --out), other sizes kept.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import mmjax.evaluation.embed as embed  # noqa: E402
from mmjax.evaluation.retrieval import recall_at_k  # noqa: E402
from mmjax.similarity import pairwise_set_similarity, slab_cosines, slab_similarity  # noqa: E402

TARGETS = {"topk": 1.3, "exact": 1.6}


def _sets(rng, n, k, d):
    x = rng.standard_normal((n, k, d), dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def gemm_tiled(a, b, image_chunk, caption_tile):
    """Σ over tiles of sum(A_chunk B_tileᵀ): the same FLOPs and tiling as the scorer, without the set reduction."""
    d = a.shape[-1]
    image_chunk, caption_tile = min(image_chunk, a.shape[0]), min(caption_tile, b.shape[0])  # as score_sets
    n_tiles = math.ceil(b.shape[0] / caption_tile)
    b_p = np.concatenate([b, np.zeros((n_tiles * caption_tile - b.shape[0],) + b.shape[1:], b.dtype)])
    b_t = jnp.asarray(b_p.reshape(n_tiles, -1, d))

    @jax.jit
    def chunk(x):
        # The barrier keeps XLA from fusing the reduction into the dot (a fused loop is not a GEMM on CPU).
        return jnp.sum(jax.lax.map(lambda y: jnp.sum(jax.lax.optimization_barrier(x.reshape(-1, d) @ y.T)), b_t))

    def run(x_all):
        total = 0.0
        for s in range(0, x_all.shape[0], image_chunk):
            x = x_all[s:s + image_chunk]
            if x.shape[0] < image_chunk:
                x = np.concatenate([x, np.zeros((image_chunk - x.shape[0],) + x.shape[1:], x.dtype)])
            total += float(chunk(jnp.asarray(x)))
        return total
    return run


def kernel_rounds(img, cap, image_chunk, caption_tile, rounds):
    """Per-chunk compiled kernels alternated `rounds` times → per-variant median s and median paired ratio to gemm."""
    d = img.shape[-1]
    x = jnp.asarray(img[:image_chunk])
    y = jnp.asarray(cap[:caption_tile])
    y_em = jnp.asarray(np.ascontiguousarray(np.swapaxes(cap[:caption_tile], 0, 1)))
    kernels = {
        "gemm": (jax.jit(lambda a, b: jnp.sum(jax.lax.optimization_barrier(a.reshape(-1, d) @ b.reshape(-1, d).T))),
                 y),
        "topk": (jax.jit(lambda a, b: slab_similarity(slab_cosines(a, b), "maxmatch_topk")), y_em),
        "exact": (jax.jit(lambda a, b: slab_similarity(slab_cosines(a, b), "maxmatch")), y_em),
        "topk_block": (jax.jit(lambda a, b: pairwise_set_similarity(a, b, "maxmatch_topk")), y),
        "exact_block": (jax.jit(lambda a, b: pairwise_set_similarity(a, b, "maxmatch")), y),
    }
    for fn, b in kernels.values():
        jax.block_until_ready(fn(x, b))
    times = {name: [] for name in kernels}
    for r in range(rounds):
        for name, (fn, b) in kernels.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(x, b))
            times[name].append(time.perf_counter() - t0)
        print(f"kernel round {r}: " + " ".join(f"{k} {v[-1]:.3f}" for k, v in times.items())
              + f"  load {os.getloadavg()}", flush=True)
    ref = np.array(times["gemm"])
    return {"chunk": [int(x.shape[0]), int(y.shape[0])], "times_s": times,
            "median_s": {k: float(np.median(v)) for k, v in times.items()},
            "paired_ratio": {k: float(np.median(np.array(v) / ref)) for k, v in times.items()}}


def block_form():
    """Context in which score_sets uses the block form for every kind (the scorer before the slab form)."""
    return mock.patch.object(embed, "slab_supported", lambda *a, **k: False)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--images", type=int, default=None)
    p.add_argument("--captions-per-image", type=int, default=5)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--image-chunk", type=int, default=256)
    p.add_argument("--caption-tile", type=int, default=32768)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--with-block", action="store_true", help="also time the block form of both kinds")
    p.add_argument("--kernel-rounds", type=int, default=15, help="per-chunk kernel rounds (0: skip)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "eval.json"))
    args = p.parse_args()
    n = args.images or (1000 if args.quick else 5000)
    n_cap = n * args.captions_per_image
    rng = np.random.default_rng(0)
    img, cap = _sets(rng, n, args.k, args.dim), _sets(rng, n_cap, args.k, args.dim)
    c2i = np.repeat(np.arange(n), args.captions_per_image)
    chunking = dict(image_chunk=args.image_chunk, caption_tile=args.caption_tile)
    print(f"{n} images × {n_cap} captions, K={args.k}, D={args.dim}: GEMM {n * args.k} × {n_cap * args.k} × "
          f"{args.dim} ({2 * n * n_cap * args.k ** 2 * args.dim / 1e12:.2f} TFLOP); backend {jax.default_backend()}; "
          f"load {os.getloadavg()}", flush=True)

    scores = {}

    def scorer(name, kind, block=False):
        def run(x):
            if block:
                with block_form():
                    out = embed.score_sets(x, cap, kind, **chunking)
            else:
                out = embed.score_sets(x, cap, kind, **chunking)
            if x.shape[0] == n:
                scores[name] = out
        return run

    variants = {"gemm": gemm_tiled(img, cap, **chunking)}
    if n * n_cap * args.k ** 2 * 4 <= 2 << 30:  # one untiled GEMM when its float32 output fits in 2 GiB
        b2 = jnp.asarray(cap.reshape(-1, args.dim))
        full = jax.jit(lambda x, y: x.reshape(-1, y.shape[-1]) @ y.T)
        variants["gemm1"] = lambda x: full(jnp.asarray(x), b2).block_until_ready()
    variants.update(topk=scorer("topk", "maxmatch_topk"), exact=scorer("exact", "maxmatch"))
    if args.with_block:
        variants.update(topk_block=scorer("topk_block", "maxmatch_topk", True),
                        exact_block=scorer("exact_block", "maxmatch", True))
    warm = img[:min(n, args.image_chunk)]
    for name, fn in variants.items():
        t0 = time.perf_counter()
        fn(img if name == "gemm1" else warm)  # compile + warm-up (gemm1 compiles for its full shape)
        print(f"warm-up {name}: {time.perf_counter() - t0:.1f} s", flush=True)

    times = {name: [] for name in variants}
    loads = []
    for r in range(args.rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn(img)
            times[name].append(time.perf_counter() - t0)
            loads.append(os.getloadavg())
            print(f"round {r} {name:12s} {times[name][-1]:8.2f} s  load {loads[-1]}", flush=True)

    med = {name: float(np.median(t)) for name, t in times.items()}
    t_ref = min(med["gemm"], med.get("gemm1", math.inf))
    ref_rounds = np.minimum(times["gemm"], times.get("gemm1", times["gemm"]))
    paired = {name: float(np.median(np.array(t) / ref_rounds)) for name, t in times.items()}
    result = {"images": n, "captions": n_cap, "k": args.k, "dim": args.dim, **chunking, "rounds": args.rounds,
              "backend": jax.default_backend(), "jax": jax.__version__, "machine": platform.machine(),
              "cpus": os.cpu_count(), "load_averages": loads, "times_s": times, "median_s": med, "reference_s": t_ref,
              "ratios": {name: med[name] / t_ref for name in med},
              "paired_ratios": paired}
    if args.kernel_rounds:
        result["kernel"] = kernel_rounds(img, cap, args.image_chunk, args.caption_tile, args.kernel_rounds)
    for name in ("topk", "exact"):
        t0 = time.perf_counter()
        metrics = recall_at_k(scores[name], c2i)
        result[f"{name}_metrics_s"], result[f"{name}_rsum"] = time.perf_counter() - t0, metrics["rsum"]
        if f"{name}_block" in scores:
            result[f"{name}_max_abs_diff_vs_block"] = float(np.abs(scores[name] - scores[f"{name}_block"]).max())
    print(f"\nmedians over {args.rounds} rounds (reference = {t_ref:.2f} s):")
    for name in variants:
        target = TARGETS.get(name)
        print(f"  {name:12s} {med[name]:8.2f} s  {med[name] / t_ref:5.2f}× GEMM, paired {paired[name]:5.2f}×"
              + (f"  (target ≤ {target}×)" if target else ""))
    if "kernel" in result:
        kern = result["kernel"]
        print(f"one chunk {kern['chunk'][0]} × {kern['chunk'][1]} sets, {args.kernel_rounds} paired rounds:")
        for name, t in kern["median_s"].items():
            print(f"  {name:12s} {t:8.3f} s  paired {kern['paired_ratio'][name]:5.2f}× GEMM")
    for name in ("topk", "exact"):
        extra = result.get(f"{name}_max_abs_diff_vs_block")
        print(f"  {name} R@K metrics {result[f'{name}_metrics_s']:.2f} s, rsum {result[f'{name}_rsum']:.2f}"
              + ("" if extra is None else f", max |slab − block| {extra:.1e}"))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    stored = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            stored = json.load(f)
    runs = stored.get("runs", {})  # a file from before this layout (one flat run) is replaced
    runs[f"{n}x{n_cap}"] = result
    with open(args.out, "w") as f:
        json.dump({"benchmark": "retrieval_scoring_vs_gemm", "runs": runs}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
