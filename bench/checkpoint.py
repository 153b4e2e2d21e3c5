"""Cost of verified checkpoints: save (+ wait) and restore through `Checkpointer` (crc32 per leaf, write probe,
verification on restore) against the same Orbax calls without them, alternated in one process.

    python bench/checkpoint.py [--rounds 7] [--sizes 1e6,8e6]

Prints per size: median seconds of each variant, the ratio verified/plain and the load average at each round; writes
bench/results/checkpoint.json.
"""

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from mmjax.train.checkpoint import Checkpointer, tree_checksums


def make_state(n):
    """An Adam-like state: params of n float32 values in 8 leaves, plus two moment copies."""
    keys = jax.random.split(jax.random.PRNGKey(0), 8)
    params = {f"p{i}": jax.random.normal(k, (n // 8,)) for i, k in enumerate(keys)}
    return {"params": params, "mu": jax.tree_util.tree_map(jnp.zeros_like, params),
            "nu": jax.tree_util.tree_map(jnp.ones_like, params), "step": jnp.int32(1)}


def abstract(state):
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sizes", default="1e6,8e6")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                  "checkpoint.json"))
    args = ap.parse_args()
    results = []
    for n in [int(float(s)) for s in args.sizes.split(",")]:
        state = make_state(n)
        jax.block_until_ready(state)
        root = tempfile.mkdtemp(prefix="bench_ckpt_")
        times = {"plain_save": [], "verified_save": [], "plain_restore": [], "verified_restore": [],
                 "checksum_only": []}
        loads = []
        try:
            plain = ocp.CheckpointManager(os.path.join(root, "plain"), options=ocp.CheckpointManagerOptions(
                max_to_keep=1, create=True))
            ckpt = Checkpointer(os.path.join(root, "verified"), keep=1)
            target = abstract(state)
            for r in range(1, args.rounds + 1):
                loads.append(os.getloadavg()[0])
                t = time.perf_counter()
                plain.save(r, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                      meta=ocp.args.JsonSave({"r": r})))
                plain.wait_until_finished()
                times["plain_save"].append(time.perf_counter() - t)
                t = time.perf_counter()
                ckpt.save(r, state, {"r": r})
                ckpt.wait()
                times["verified_save"].append(time.perf_counter() - t)
                t = time.perf_counter()
                out = plain.restore(r, args=ocp.args.Composite(state=ocp.args.StandardRestore(
                    jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, target)), meta=ocp.args.JsonRestore()))
                jax.block_until_ready(out["state"])
                times["plain_restore"].append(time.perf_counter() - t)
                t = time.perf_counter()
                restored, _ = ckpt.restore(target, r)
                jax.block_until_ready(restored)
                times["verified_restore"].append(time.perf_counter() - t)
                t = time.perf_counter()
                tree_checksums(state)
                times["checksum_only"].append(time.perf_counter() - t)
                print(f"  n={n:>9,d} round {r}: " + "  ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items()) +
                      f"  load {os.getloadavg()}", flush=True)
            plain.close()
            ckpt.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {"params": n, "state_bytes": 3 * n * 4, "rounds": args.rounds, "median_s": med,
               "save_ratio": med["verified_save"] / med["plain_save"],
               "restore_ratio": med["verified_restore"] / med["plain_restore"],
               "loadavg_1min_per_round": loads}
        results.append(row)
        print(f"n={n:,d} ({row['state_bytes'] / 2**20:.0f} MiB state): save plain {med['plain_save']:.3f}s  verified "
              f"{med['verified_save']:.3f}s  ratio {row['save_ratio']:.2f} | restore plain {med['plain_restore']:.3f}s "
              f" verified {med['verified_restore']:.3f}s  ratio {row['restore_ratio']:.2f} | crc32 alone "
              f"{med['checksum_only']:.3f}s | load {min(loads):.1f}-{max(loads):.1f}", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"device": jax.devices()[0].device_kind, "results": results}, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
