"""COCO-5K-sized retrieval scoring vs the bare similarity GEMM.

    python bench/eval.py [--quick] [--images 5000] [--captions-per-image 5] [--k 4] [--dim 1024]

Synthetic unit-norm sets: N images × K elements and 5N captions × K elements, D dims (full: 5 000 × 25 000, K = 4,
D = 1 024, i.e. a (20 000 × 1 024) · (1 024 × 100 000) GEMM). Times, each after one compile/warm-up run:

- `gemm`: the bare all-element cosine matmul, computed in the same image-chunk × caption-tile tiling (so the float32
  cosine matrix never has to exist whole), each tile reduced to a single sum so XLA cannot skip it;
- `topk` and `exact`: `mmjax.evaluation.embed.score_sets` with `'maxmatch_topk'` / `'maxmatch'` (the full
  [N, 5N] score matrix copied to the host), and the R@K metrics on it (`recall_at_k`).

Targets: topk ≤ 1.5× and exact ≤ 2× the GEMM (the faster of the tiled GEMM and, when its float32 output fits
in 2 GiB, one untiled matmul). `--quick` = 1 000 × 5 000 (K = 4, D = 1 024). Writes
bench/results/eval.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from mmjax.evaluation.embed import score_sets  # noqa: E402
from mmjax.evaluation.retrieval import recall_at_k  # noqa: E402


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

    total = 0.0
    for s in range(0, a.shape[0], image_chunk):
        x = a[s:s + image_chunk]
        if x.shape[0] < image_chunk:
            x = np.concatenate([x, np.zeros((image_chunk - x.shape[0],) + x.shape[1:], x.dtype)])
        total += float(chunk(jnp.asarray(x)))
    return total


def timed(fn, repeats):
    fn()  # compile + warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--images", type=int, default=None)
    p.add_argument("--captions-per-image", type=int, default=5)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--image-chunk", type=int, default=256)
    p.add_argument("--caption-tile", type=int, default=32768)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "eval.json"))
    args = p.parse_args()
    n = args.images or (1000 if args.quick else 5000)
    n_cap = n * args.captions_per_image
    rng = np.random.default_rng(0)
    img, cap = _sets(rng, n, args.k, args.dim), _sets(rng, n_cap, args.k, args.dim)
    c2i = np.repeat(np.arange(n), args.captions_per_image)
    chunking = dict(image_chunk=args.image_chunk, caption_tile=args.caption_tile)
    print(f"{n} images × {n_cap} captions, K={args.k}, D={args.dim}: GEMM {n * args.k} × {n_cap * args.k} × "
          f"{args.dim} ({2 * n * n_cap * args.k ** 2 * args.dim / 1e12:.2f} TFLOP); backend {jax.default_backend()}")
    t_gemm = timed(lambda: gemm_tiled(img, cap, **chunking), args.repeats)
    print(f"gemm   {t_gemm:8.2f} s  (tiled like the scorer)")
    if n * n_cap * args.k ** 2 * 4 <= 2 << 30:  # one untiled GEMM when its float32 output fits in 2 GiB
        a2, b2 = jnp.asarray(img.reshape(-1, args.dim)), jnp.asarray(cap.reshape(-1, args.dim))
        full = jax.jit(lambda x, y: x @ y.T)
        t_full = timed(lambda: full(a2, b2).block_until_ready(), args.repeats)
        print(f"gemm1  {t_full:8.2f} s  (one untiled matmul, output on device)")
        result_extra = {"gemm_untiled_s": t_full}
    else:
        result_extra = {}
    result = {"images": n, "captions": n_cap, "k": args.k, "dim": args.dim, **chunking, "gemm_s": t_gemm,
              "backend": jax.default_backend(), "jax": jax.__version__, "machine": platform.machine(),
              "cpus": os.cpu_count(), **result_extra}
    for name, kind in (("topk", "maxmatch_topk"), ("exact", "maxmatch")):
        holder = {}

        def run(kind=kind, holder=holder):
            holder["sim"] = score_sets(img, cap, kind, **chunking)

        t = timed(run, args.repeats)
        t0 = time.perf_counter()
        metrics = recall_at_k(holder["sim"], c2i)
        t_metrics = time.perf_counter() - t0
        t_ref = min(t_gemm, result.get("gemm_untiled_s", t_gemm))  # the faster bare GEMM is the reference
        result[f"{name}_s"], result[f"{name}_ratio"] = t, t / t_ref
        result[f"{name}_metrics_s"] = t_metrics
        result[f"{name}_rsum"] = metrics["rsum"]
        print(f"{name:6s} {t:8.2f} s  ratio {t / t_ref:5.2f}× GEMM (target {1.5 if name == 'topk' else 2.0}×); "
              f"R@K metrics {t_metrics:.2f} s")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
