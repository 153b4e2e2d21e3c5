"""Benchmark: Flow-CLIP all-pairs scorer (`mmjax.flowclip.score_pairs`, Gram form, chunked) vs a naive broadcast
implementation of Algorithm 1 that materialises [Bi, Bt, L, d] tensors (written here, independent of the library).

Sizes: Bi = Bt = B ∈ {128, 256}, L = 16, d = 512, N ∈ {49 (ViT-B/32), 196 (ViT-B/16)}. Forward pass, jitted,
float32, matmul precision 'float32'. Each measurement runs in a fresh subprocess. Time = median wall time of
`repeats` runs after one warm-up. Peak memory = increase of the process's peak RSS (ru_maxrss) during the first
(warm-up) run, i.e. what executing the compiled program allocates beyond inputs and compilation. XLA's
`memory_analysis()` temp size is stored too, but on CPU it undercounts: the fused dot kernels allocate their scratch
outside XLA's buffer assignment (naive B=128: 0.17 GB reported vs 2.3 GB measured). Naive runs whose estimated
memory exceeds `--max-naive-gb` are skipped (this machine is shared).

    python bench/flowclip.py [--quick] [--repeats 3] [--out bench/results/flowclip.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_default_matmul_precision", "float32")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

import mmjax.flowclip as fc  # noqa: E402

ALPHA, TAU, L_TOK, D = 1.0, 0.02, 16, 512


def _unit(x):
    return x / jnp.sqrt(jnp.maximum(jnp.sum(x * x, -1, keepdims=True), 1e-12))


def naive_scores(params, image, text, *, alpha, tau_p):
    """Algorithm 1 by broadcasting over all pairs: every [Bi, Bt, L, ·] intermediate is materialised."""
    v = _unit(image["global"])
    t = _unit(_unit(text["global"]) @ params["M"].T)
    s_global = v @ t.T
    p_hat = _unit(image["patches"])  # [Bi, N, d]
    valid = text["valid"]
    h = jnp.where(valid[..., None], text["tokens"], jnp.zeros((D,)).at[0].set(1.0))
    q = _unit(_unit(h) @ params["M_tok"].T)  # [Bt, L, d]
    n = p_hat.shape[1]
    a = jnp.einsum("tld,ind->itln", q, p_hat)  # [Bi, Bt, L, N]
    e = jax.nn.relu(a - a.mean(-1, keepdims=True))
    c = jnp.einsum("itln,ind->itld", e, p_hat) / n  # [Bi, Bt, L, d]
    r = c - jnp.sum(c * q[None], -1, keepdims=True) * q[None]
    q_res = _unit(q[None] + r @ params["W"].T)  # [Bi, Bt, L, d]
    a_res = jnp.einsum("itld,ind->itln", q_res, p_hat)
    delta = tau_p * (jax.nn.logsumexp(a_res / tau_p, -1) - jax.nn.logsumexp(a / tau_p, -1))
    count = jnp.maximum(valid.sum(-1), 1)
    s_local = jnp.sum(jnp.where(valid[None], delta, 0.0), -1) / count[None]
    return s_global + alpha * s_local


def make_inputs(b, n, seed=0):
    rng = np.random.default_rng(seed)
    valid = np.arange(L_TOK)[None, :] < rng.integers(4, L_TOK + 1, size=(b, 1))  # padded captions
    image = {"global": rng.normal(size=(b, D)).astype(np.float32),
             "patches": rng.normal(size=(b, n, D)).astype(np.float32)}
    text = {"global": rng.normal(size=(b, D)).astype(np.float32),
            "tokens": rng.normal(size=(b, L_TOK, D)).astype(np.float32), "valid": valid}
    params = {"M": np.eye(D, dtype=np.float32) + 0.02 * rng.normal(size=(D, D)).astype(np.float32),
              "M_tok": np.eye(D, dtype=np.float32) + 0.02 * rng.normal(size=(D, D)).astype(np.float32),
              "W": (rng.normal(size=(D, D)) / np.sqrt(D)).astype(np.float32)}
    return params, image, text


def worker(impl, b, n, chunk, repeats, out_path):
    """One measurement in a fresh process: compile, run once (peak RSS), time `repeats` runs, save the output."""
    params, image, text = jax.device_put(make_inputs(b, n))
    if impl == "gram":
        fn = functools.partial(fc.score_pairs, alpha=ALPHA, tau_p=TAU, method="gram", chunk_size=chunk)
    else:
        fn = functools.partial(naive_scores, alpha=ALPHA, tau_p=TAU)
    compiled = jax.jit(fn).lower(params, image, text).compile()
    mem = compiled.memory_analysis()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = compiled(params, image, text).block_until_ready()  # warm-up, and the peak-memory run
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compiled(params, image, text).block_until_ready()
        times.append(time.perf_counter() - start)
    np.save(out_path, np.asarray(out))
    return {"seconds": statistics.median(times), "times": times, "peak_rss_delta_bytes": rss_after - rss_before,
            "xla_temp_bytes": int(mem.temp_size_in_bytes), "xla_output_bytes": int(mem.output_size_in_bytes)}


def run_worker(impl, b, n, chunk, repeats, tmpdir):
    out_path = os.path.join(tmpdir, f"{impl}_{b}_{n}.npy")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", impl, str(b), str(n), "--chunk", str(chunk),
           "--repeats", str(repeats), "--worker-out", out_path]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1]), np.load(out_path)


def naive_bytes_estimate(b, n):
    """Four live [B, B, L, d] float32 tensors (c, r, q̃, q_res); matches the measured RSS at B = 128 within 10%."""
    return 4 * b * b * L_TOK * D * 4


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="B = 128 only, one timed run")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=32, help="flowclip.score_chunk_images")
    parser.add_argument("--max-naive-gb", type=float, default=4.0,
                        help="skip running the naive scorer when its estimated memory exceeds this (shared machine)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "flowclip.json"))
    parser.add_argument("--worker", nargs=3, metavar=("IMPL", "B", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        impl, b, n = args.worker
        print(json.dumps(worker(impl, int(b), int(n), args.chunk, args.repeats, args.worker_out)))
        return
    batches = [128] if args.quick else [128, 256]
    repeats = 1 if args.quick else args.repeats

    rows = []
    print(f"{'B':>4} {'N':>4} | {'gram s':>8} {'naive s':>8} {'speedup':>7} | {'gram MB':>8} {'naive MB':>9} "
          f"{'mem ratio':>9} | max|diff|")
    with tempfile.TemporaryDirectory() as tmpdir:
        for n in (49, 196):
            for b in batches:
                gram, gram_out = run_worker("gram", b, n, args.chunk, repeats, tmpdir)
                row = {"B": b, "N": n, "L": L_TOK, "d": D, "chunk": args.chunk, "gram": gram}
                if naive_bytes_estimate(b, n) <= args.max_naive_gb * 2**30:
                    naive, naive_out = run_worker("naive", b, n, args.chunk, repeats, tmpdir)
                    row.update(naive=naive, speedup=naive["seconds"] / gram["seconds"],
                               mem_ratio=naive["peak_rss_delta_bytes"] / gram["peak_rss_delta_bytes"],
                               max_abs_diff=float(np.abs(gram_out - naive_out).max()))
                else:
                    row.update(naive=None, speedup=None, mem_ratio=None, max_abs_diff=None,
                               naive_estimated_bytes=naive_bytes_estimate(b, n))
                rows.append(row)
                fmt = lambda x, f: "  not run" if x is None else format(x, f)  # noqa: E731
                naive_mb = (row["naive"]["peak_rss_delta_bytes"] if row["naive"] else None)
                print(f"{b:>4} {n:>4} | {gram['seconds']:8.3f} "
                      f"{fmt(row['naive'] and row['naive']['seconds'], '8.3f')} {fmt(row['speedup'], '7.2f')} | "
                      f"{gram['peak_rss_delta_bytes'] / 2**20:8.1f} {fmt(naive_mb and naive_mb / 2**20, '9.1f')} "
                      f"{fmt(row['mem_ratio'], '9.1f')} | {fmt(row['max_abs_diff'], '.2e')}", flush=True)

    result = {"benchmark": "flowclip_all_pairs", "backend": jax.default_backend(),
              "device": str(jax.devices()[0]), "cpu_count": os.cpu_count(), "machine": platform.machine(),
              "jax": jax.__version__, "quick": args.quick, "repeats": repeats,
              "memory_metric": "peak RSS increase (ru_maxrss) during the first run in a fresh process; "
                               "xla_temp_bytes from memory_analysis() is also stored but undercounts on CPU "
                               "(fused dot kernels allocate scratch outside XLA's buffer assignment)",
              "rows": rows}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
