"""Benchmark: one Flow-CLIP head training step (HNB, HNB + CIMR) against Global-M's, with XLA's FLOP count.

Each head is `mmjax.models.FlowCLIPHead` trained the study's way (`head_objective`, Adam 1e-3, one jitted step) on
random unit features of the study's CPU head size: batch B = 64 images with one positive and one hard-negative
caption each, N = 10 region tokens (base G), L = 20 caption tokens, d = 128. The step is compiled once, run 3 times
to warm up, then timed `--steps` times (median); the heads alternate over `--rounds` rounds. FLOPs are XLA's
`cost_analysis()` of the same step compiled with all images in one scoring chunk (`score_chunk_images = B`): XLA
counts a loop body once, so the timed step, whose local scores run chunk by chunk under `lax.map` (the default
32 MiB budget gives 2 chunks at B = 64), would be undercounted. The rate column says whether a head is arithmetic-
or overhead-bound.

    python bench/flowclip_head.py [--rounds 2] [--steps 20] [--batch 64] [--out bench/results/flowclip_head.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import jax
import numpy as np
import optax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from mmjax.flowclip import FlowCLIPOptions  # noqa: E402
from mmjax.models.flowclip_head import FlowCLIPHead, head_objective  # noqa: E402

HEADS = {"globalm_hnb": (False, 0.0), "globalm_cimr": (False, 0.1), "flowclip_hnb": (True, 0.0),
         "flowclip_cimr": (True, 0.1)}


def make_batch(b: int, n: int, l_tok: int, d: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)

    def unit(*shape):
        x = rng.standard_normal(shape)
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    def captions():
        valid = np.arange(l_tok)[None] < rng.integers(4, l_tok + 1, (b, 1))  # padded captions
        return {"global": unit(b, d), "tokens": unit(b, l_tok, d), "valid": valid}

    return {"image": {"global": unit(b, d), "patches": unit(b, n, d)}, "pos_text": captions(),
            "neg_text": captions(), "image_ids": np.arange(b), "neg_valid": np.ones(b, bool)}


def compiled_step(name: str, batch: dict, d: int, **options):
    use_local, lambda_cimr = HEADS[name]
    head = FlowCLIPHead(dim=d, options=FlowCLIPOptions(use_local=use_local, lambda_cimr=lambda_cimr, **options))
    first = lambda tree: {k: v[:1] for k, v in tree.items()}
    params = head.init(jax.random.PRNGKey(0), first(batch["image"]), first(batch["pos_text"]))["params"]
    optimizer = optax.adam(1e-3)

    def step(params, opt_state, batch, rng):
        (_, metrics), grads = jax.value_and_grad(head_objective, argnums=1, has_aux=True)(head, params, batch, rng)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics

    state = (params, optimizer.init(params))
    t = time.perf_counter()
    compiled = jax.jit(step).lower(*state, batch, jax.random.PRNGKey(1)).compile()
    compile_s = time.perf_counter() - t
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return compiled, state, compile_s, float((cost or {}).get("flops", float("nan")))


def time_step(compiled, state, batch, steps: int) -> float:
    params, opt_state = state
    for k in range(3):
        params, opt_state, _ = compiled(params, opt_state, batch, jax.random.PRNGKey(k))
    jax.block_until_ready(params)
    times = []
    for k in range(steps):
        t = time.perf_counter()
        params, opt_state, _ = compiled(params, opt_state, batch, jax.random.PRNGKey(k))
        jax.block_until_ready(params)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--regions", type=int, default=10)
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                 "flowclip_head.json"))
    args = p.parse_args()
    batch = make_batch(args.batch, args.regions, args.tokens, args.dim)
    built = {name: compiled_step(name, batch, args.dim) for name in HEADS}
    # Global-M has no local branch, so no chunks: its timed step's count is already whole.
    one_chunk = {name: compiled_step(name, batch, args.dim, score_chunk_images=args.batch)[3] if HEADS[name][0]
                 else built[name][3] for name in HEADS}
    medians = {name: [] for name in HEADS}
    for r in range(args.rounds):
        for name, (compiled, state, _, _) in built.items():
            medians[name].append(time_step(compiled, state, batch, args.steps))
        print(f"round {r + 1}/{args.rounds} done; load average {os.getloadavg()[0]:.2f}", flush=True)
    base = statistics.median(medians["globalm_hnb"])
    rows = []
    print(f"B = {args.batch}, N = {args.regions}, L = {args.tokens}, d = {args.dim}; medians of {args.steps} steps")
    print(f"{'head':>14} | {'step ms':>8} | {'vs globalm_hnb':>14} | {'MFLOP':>8} | {'GFLOP/s':>7} | compile s")
    for name, (_, _, compile_s, _) in built.items():
        flops = one_chunk[name]
        step_s = statistics.median(medians[name])
        rows.append({"head": name, "step_s": step_s, "rounds_s": medians[name], "ratio": step_s / base,
                     "flops": flops, "gflop_per_s": flops / step_s / 1e9, "compile_s": compile_s})
        print(f"{name:>14} | {1e3 * step_s:8.2f} | {step_s / base:13.1f}× | {flops / 1e6:8.1f} | "
              f"{flops / step_s / 1e9:7.1f} | {compile_s:.1f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"sizes": vars(args), "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                                                    "jax": jax.__version__}, "rows": rows}, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
