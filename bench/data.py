"""ShapesWorld generation and input-pipeline throughput (images/s), regions and pixels modes.

    python bench/data.py [--gen-images 1000] [--steps 50] [--batch-size 128] [--train-step MODULE:FN]

Prints a side-by-side table and writes bench/results/data.json. `--train-step` is the hook for the training step-time
comparison: FN(batch) is called on every pipeline batch (its wall time is reported next to the pipeline's), so one
can check that the pipeline keeps the step fed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mmjax.data.pipeline import BatchIterator, PipelineConfig, source_from_shapesworld  # noqa: E402
from mmjax.data.shapesworld import ShapesWorld, ShapesWorldConfig  # noqa: E402


def _load_step(spec: str | None):
    if not spec:
        return None
    module, fn = spec.split(":")
    return getattr(importlib.import_module(module), fn)


def bench_generation(mode: str, n: int) -> dict:
    world = ShapesWorld(ShapesWorldConfig(mode=mode))
    world.example("train", 0)  # warm caches (constants, imports)
    t = time.perf_counter()
    data = world.arrays("train", limit=n)
    dt = time.perf_counter() - t
    return {"mode": mode, "images": n, "seconds": dt, "images_per_s": n / dt,
            "negatives_per_image": len(data["neg_text"]) / n, "data": data}


def bench_pipeline(data: dict, steps: int, batch_size: int, prefetch: int, train_step=None) -> dict:
    world = ShapesWorld()
    source = source_from_shapesworld(data, world.tokenizer(), with_negatives=True)
    bs = min(batch_size, len(data["captions"]))
    cfg = PipelineConfig(batch_size=bs, prefetch=prefetch, process_index=0, process_count=1)
    it = BatchIterator(source, cfg)
    next(it)  # start the prefetch thread
    step_time = 0.0
    t = time.perf_counter()
    for _ in range(steps):
        batch = next(it)
        if train_step is not None:
            s = time.perf_counter()
            train_step(batch)
            step_time += time.perf_counter() - s
    dt = time.perf_counter() - t
    it.close()
    out = {"batch_size": bs, "steps": steps, "prefetch": prefetch, "seconds": dt,
           "images_per_s": steps * bs / dt, "ms_per_batch": 1e3 * dt / steps}
    if train_step is not None:
        out["train_step_ms"] = 1e3 * step_time / steps
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gen-images", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--train-step", default=None, help="MODULE:FN called on every batch (training step-time hook)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "data.json"))
    args = ap.parse_args()
    train_step = _load_step(args.train_step)
    results = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "rows": []}
    print(f"{'mode':8s} {'gen img/s':>10s} {'neg/img':>8s} {'pipe img/s (sync)':>18s} {'pipe img/s (prefetch 2)':>24s}")
    for mode in ("regions", "pixels"):
        n = args.gen_images if mode == "regions" else max(args.batch_size, args.gen_images // 4)
        gen = bench_generation(mode, n)
        data = gen.pop("data")
        sync = bench_pipeline(data, args.steps, args.batch_size, 0, train_step)
        pref = bench_pipeline(data, args.steps, args.batch_size, 2, train_step)
        results["rows"].append({"generation": gen, "pipeline_sync": sync, "pipeline_prefetch": pref})
        print(f"{mode:8s} {gen['images_per_s']:10.0f} {gen['negatives_per_image']:8.1f} "
              f"{sync['images_per_s']:18.0f} {pref['images_per_s']:24.0f}")
        if train_step is not None:
            print(f"         train step {pref['train_step_ms']:.1f} ms vs pipeline {pref['ms_per_batch']:.1f} ms/batch")
    t = time.perf_counter()
    ShapesWorld(ShapesWorldConfig.from_preset("tiny")).arrays("train")
    results["tiny_train_regions_seconds"] = time.perf_counter() - t
    print(f"tiny train split (512 images, regions): {results['tiny_train_regions_seconds']:.2f} s")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
