"""Benchmark: Flow-CLIP all-pairs scorer (`mmjax.flowclip.score_pairs`, Gram form) vs a naive broadcast
implementation of Algorithm 1 that materialises [Bi, Bt, L, d] tensors (written here, independent of the library).

Sizes: Bi = Bt = B ∈ {64, 128}, L = 16, d = 512, N ∈ {49 (ViT-B/32), 196 (ViT-B/16)}. Forward pass, jitted, float32,
matmul precision 'float32'. Variants: `gram` (image chunk from the default byte budget, `chunk_for_budget`),
`gram32` (fixed chunk of 32 images, the previous default) and `naive`.

Peak memory: each variant in a fresh subprocess, glibc's mmap threshold fixed at 64 KiB (MALLOC_MMAP_THRESHOLD_, so
every large buffer is mmapped and unmapped when freed, and RSS tracks live memory), compiled and run once; then the
kernel's peak-RSS counter is reset (`5` > /proc/self/clear_refs) and one more call runs; peak = VmHWM after it −
VmRSS before it (an error if not positive). Time: one process per size alternating the variants for `--rounds`
rounds (≥ 5), medians, load average printed with every measurement.

    python bench/flowclip.py [--quick] [--rounds 5] [--budget-mib 32] [--out bench/results/flowclip.json]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import platform
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
from mmjax.flowclip.all_pairs import chunk_for_budget  # noqa: E402
from mmjax.flowclip.options import DEFAULTS  # noqa: E402

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


def scorer(impl, b, n, budget):
    if impl == "naive":
        return functools.partial(naive_scores, alpha=ALPHA, tau_p=TAU)
    chunk = 32 if impl == "gram32" else chunk_for_budget(budget, b, b, L_TOK, n, D)
    return functools.partial(fc.score_pairs, alpha=ALPHA, tau_p=TAU, method="gram", chunk_size=chunk)


def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_worker(impl, b, n, budget, out_path):
    """Fresh process: compile, run once, reset the peak-RSS counter, run again; peak = VmHWM − VmRSS before."""
    params, image, text = jax.device_put(make_inputs(b, n))
    compiled = jax.jit(scorer(impl, b, n, budget)).lower(params, image, text).compile()
    mem = compiled.memory_analysis()
    compiled(params, image, text).block_until_ready()  # warm-up (first-call allocations, thread pools)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    rss_before = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    start = time.perf_counter()
    out = compiled(params, image, text).block_until_ready()
    seconds = time.perf_counter() - start
    peak = (_status_kib("VmHWM") - rss_before) * 1024
    if peak <= 0:
        raise RuntimeError(f"{impl} B={b} N={n}: peak-RSS increase {peak} B <= 0; the measurement is broken")
    np.save(out_path, np.asarray(out))
    return {"peak_bytes": peak, "rss_before_bytes": rss_before * 1024, "seconds_one_run": seconds,
            "xla_temp_bytes": int(mem.temp_size_in_bytes), "load": os.getloadavg()}


def run_memory(impl, b, n, budget, tmpdir):
    out_path = os.path.join(tmpdir, f"{impl}_{b}_{n}.npy")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", impl, str(b), str(n), "--budget-bytes",
           str(budget), "--worker-out", out_path]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"memory worker {impl} B={b} N={n} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), np.load(out_path)


def time_alternating(b, n, impls, budget, rounds):
    """Median seconds per variant, variants alternated within each round (one process, shared machine)."""
    params, image, text = jax.device_put(make_inputs(b, n))
    fns = {impl: jax.jit(scorer(impl, b, n, budget)) for impl in impls}
    for fn in fns.values():
        fn(params, image, text).block_until_ready()
    times = {impl: [] for impl in impls}
    for r in range(rounds):
        for impl, fn in fns.items():
            start = time.perf_counter()
            fn(params, image, text).block_until_ready()
            times[impl].append(time.perf_counter() - start)
            print(f"  time B={b} N={n} round {r} {impl:6s} {times[impl][-1]:7.3f} s  load {os.getloadavg()}",
                  flush=True)
    return {impl: {"median_s": statistics.median(t), "times": t} for impl, t in times.items()}


def naive_bytes_estimate(b, n):
    """Four live [B, B, L, d] float32 tensors (c, r, q̃, q_res)."""
    return 4 * b * b * L_TOK * D * 4


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="B = 64 only")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget-bytes", type=int, default=DEFAULTS.score_chunk_bytes,
                        help="chunk_budget_bytes of the 'gram' variant")
    parser.add_argument("--max-naive-gb", type=float, default=4.0,
                        help="skip the naive scorer when its estimated memory exceeds this (shared machine)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "flowclip.json"))
    parser.add_argument("--worker", nargs=3, metavar=("IMPL", "B", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        impl, b, n = args.worker
        print(json.dumps(memory_worker(impl, int(b), int(n), args.budget_bytes, args.worker_out)))
        return
    batches = [64] if args.quick else [64, 128]
    budget = args.budget_bytes
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        for n in (49, 196):
            for b in batches:
                impls = ["gram", "gram32"]
                if naive_bytes_estimate(b, n) <= args.max_naive_gb * 2**30:
                    impls.append("naive")
                row = {"B": b, "N": n, "L": L_TOK, "d": D, "budget_bytes": budget,
                       "chunk": chunk_for_budget(budget, b, b, L_TOK, n, D), "memory": {}}
                outs = {}
                for impl in impls:
                    row["memory"][impl], outs[impl] = run_memory(impl, b, n, budget, tmpdir)
                    print(f"  memory B={b} N={n} {impl:6s} peak {row['memory'][impl]['peak_bytes'] / 2**20:8.1f} MiB"
                          f"  load {row['memory'][impl]['load']}", flush=True)
                row["time"] = time_alternating(b, n, impls, budget, args.rounds)
                row["max_abs_diff_gram_vs_gram32"] = float(np.abs(outs["gram"] - outs["gram32"]).max())
                if "naive" in impls:
                    row["max_abs_diff_gram_vs_naive"] = float(np.abs(outs["gram"] - outs["naive"]).max())
                    for impl in ("gram", "gram32"):
                        row[f"mem_ratio_naive_over_{impl}"] = (row["memory"]["naive"]["peak_bytes"]
                                                               / row["memory"][impl]["peak_bytes"])
                        row[f"speedup_{impl}"] = row["time"]["naive"]["median_s"] / row["time"][impl]["median_s"]
                rows.append(row)
    print(f"\nbudget {budget / 2**20:.0f} MiB; peak MiB (ratio naive/variant), median s (speed-up vs naive)")
    print(f"{'B':>4} {'N':>4} {'C':>3} | {'gram':>16} {'gram32':>16} {'naive':>8} | {'gram s':>12} {'gram32 s':>12} "
          f"{'naive s':>8} | max|diff|")
    for row in rows:
        mem, tim = row["memory"], row["time"]
        cell = lambda impl: (f"{mem[impl]['peak_bytes'] / 2**20:7.1f} ({row.get(f'mem_ratio_naive_over_{impl}', 0):5.1f}×)")  # noqa: E731
        tcell = lambda impl: f"{tim[impl]['median_s']:6.2f} ({row.get(f'speedup_{impl}', 0):4.2f}×)"  # noqa: E731
        naive_mem = f"{mem['naive']['peak_bytes'] / 2**20:8.1f}" if "naive" in mem else "     —  "
        naive_t = f"{tim['naive']['median_s']:8.2f}" if "naive" in tim else "     —  "
        print(f"{row['B']:>4} {row['N']:>4} {row['chunk']:>3} | {cell('gram'):>16} {cell('gram32'):>16} {naive_mem} | "
              f"{tcell('gram'):>12} {tcell('gram32'):>12} {naive_t} | "
              f"{row.get('max_abs_diff_gram_vs_naive', float('nan')):.1e}")
    result = {"benchmark": "flowclip_all_pairs", "backend": jax.default_backend(),
              "device": str(jax.devices()[0]), "cpu_count": os.cpu_count(), "machine": platform.machine(),
              "jax": jax.__version__, "quick": args.quick, "rounds": args.rounds, "budget_bytes": budget,
              "memory_metric": "fresh process per variant, MALLOC_MMAP_THRESHOLD_=65536; after compile + one run, "
                               "clear_refs=5 resets VmHWM; peak = VmHWM after one more call - VmRSS before it",
              "rows": rows}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
