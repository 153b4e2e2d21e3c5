"""Ahead-of-time sizing of the COCO-size training steps on simulated meshes (issue #28 item 3).

    python bench/scaling.py [--quick] [--models maxmatch,flowclip] [--meshes 8,64,256]
        [--batches 1024,4096,16384,32768] [--shardings data_parallel,fsdp] [--all-pairs xla,rows]
        [--out bench/results/scaling.json]

Nothing runs on the devices: each step is `jax.jit(step, in_shardings, out_shardings).lower(abstract args)
.compile()` on `--xla_force_host_platform_device_count` CPU devices (the script re-executes itself with the flag),
and the numbers are read from the compiled program: per-device memory (`memory_analysis()`: arguments + outputs −
aliased + temporaries), FLOPs per device (`cost_analysis()`), and the bytes each collective kind moves per device
(the result shapes of every all-reduce / all-gather / reduce-scatter / all-to-all / collective-permute in the
optimised HLO; inside a loop body an op counts once per trip when XLA annotates the trip count, else once).

Models (the real modules, abstract parameters — no weights are read):
- objective: the MaxMatch objective alone on sets of D = 1024, K = 4 (gradient w.r.t. both sides' sets): the part of
  the step whose memory has a B² term, sized cheaply so that its curve is visible on its own.
- maxmatch: `configs/maxmatch_coco.py:bert` — RegionTower (36 BUTD regions × 2048 → D = 1024, SPM K = 4, depth 4,
  4 × 512) and BERT-base (12 × 768, vocabulary 30 522, 40 tokens) with its SPM; 5 captions per image; the objective
  of the config (S_H by the auction, hardest negatives after the warm-up, InfoNCE, GD, ISD, Div; `--phase` hardest);
  AdamW. `--all-pairs xla` is the one-block-tensor score, `rows` the sharded chunked one
  (`mmjax.sharded_similarity`, `--chunk` captions per device at a time).
- flowclip: `configs/flowclip_coco.py:flowclip_cimr` — the Flow-CLIP head (ICER + Global-M, HNB + CIMR) on
  ViT-B/32-shaped cached features: d = 512, 50 patch tokens, 32 text tokens, one positive and one negative caption per
  record; Adam. Its all-pairs score is the head's own (`mmjax.flowclip`); `--all-pairs` does not apply.
Global batch B = images per step (MaxMatch: 5B captions; Flow-CLIP: B records). `--quick`: small models (D = 64,
2-layer BERT of width 64, K = 4; a head of width 32; the objective at D = 64) at mesh 8, batch 64: the case CI runs
(tests/scripts/test_bench_scaling.py).

Writes JSON rows (one per model × mesh × sharding × layout × batch) and prints a table with ratios against the first
batch of each series; docs/scaling.md is written from the JSON by `bench/scaling_report.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _reexec(max_devices: int):
    """Re-run this script with the device-count flag set before jax is imported."""
    flag = f"--xla_force_host_platform_device_count={max_devices}"
    if flag in os.environ.get("XLA_FLAGS", ""):
        return
    env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + flag).strip(), JAX_PLATFORMS="cpu")
    sys.exit(subprocess.call([sys.executable, *sys.argv], env=env))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--models", default="objective,maxmatch,flowclip")
    p.add_argument("--meshes", default="8,64,256")
    p.add_argument("--batches", default="1024,4096,16384,32768")
    p.add_argument("--shardings", default="data_parallel,fsdp")
    p.add_argument("--all-pairs", default="xla,rows")
    p.add_argument("--chunk", type=int, default=0, help="captions per chunk per device for rows (0 = min(5B, 1280))")
    p.add_argument("--phase", default="hardest", choices=("warmup", "hardest"),
                   help="MaxMatch triplet phase: hardest negatives, or the VSE0 all-negative warm-up (rows labelled "
                        "'<model>_warmup')")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "scaling.json"))
    a = p.parse_args(argv)
    if a.quick:
        a.meshes, a.batches = "8", "64"
    a.models = a.models.split(",")
    a.meshes = [int(x) for x in a.meshes.split(",")]
    a.batches = [int(x) for x in a.batches.split(",")]
    a.shardings = a.shardings.split(",")
    a.all_pairs = a.all_pairs.split(",")
    return a


# ---- collectives in the optimised HLO --------------------------------------------------------------------------

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"f64": 8, "s64": 8, "u64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
          "s8": 1, "u8": 1, "pred": 1}
_SHAPE = re.compile(r"\b(f64|s64|u64|f32|s32|u32|bf16|f16|s16|u16|s8|u8|pred)\[([0-9,]*)\]")
_OP = re.compile(r"=\s*(.*?)\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")


def shape_bytes(text: str) -> int:
    total = 0
    for dtype, dims in _SHAPE.findall(text):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * _BYTES[dtype]
    return total


def collective_bytes(hlo: str) -> dict:
    """Bytes of each collective kind's results per device, from the optimised HLO text. Ops inside a while body
    count once per known trip (`known_trip_count` backend config of the loop that calls the body)."""
    trips = {}
    for m in re.finditer(r"while\(.*?\), condition=%?([\w.\-]+), body=%?([\w.\-]+).*?known_trip_count[^0-9]*(\d+)",
                         hlo):
        trips[m.group(2)] = int(m.group(3))
    out = {k: 0 for k in COLLECTIVES}
    computation = None
    for line in hlo.splitlines():
        head = re.match(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if head and "=" not in line.split("{")[0]:
            computation = head.group(1)
            continue
        m = _OP.search(line)
        if m and "-done" not in line.split("=")[1][:40]:
            out[m.group(2)] += shape_bytes(m.group(1)) * trips.get(computation, 1)
    return out


# ---- the models ------------------------------------------------------------------------------------------------

def maxmatch_setup(quick: bool, batch: int, layout, phase: str):
    import jax
    import jax.numpy as jnp
    from configs import maxmatch_coco
    from mmjax.losses import maxmatch_objective
    from mmjax.models.bert import BertConfig, BertModel
    from mmjax.models.factory import build_retrieval_model

    c = maxmatch_coco.get_config("bert")
    bert = BertConfig()
    regions, feat, tokens = 36, 2048, c.data.max_len
    if quick:
        c.model.update(embed_dim=64)
        c.model.spm.update(depth=1, num_heads=2, head_dim=16)
        bert = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=128)
        regions, feat, tokens = 8, 64, 12
    model = build_retrieval_model(c.model, bert.vocab_size, BertModel(bert))
    caps = 5 * batch
    batch_shapes = {"image_feats": ((batch, regions, feat), jnp.float32), "image_mask": ((batch, regions), bool),
                    "caption_ids": ((caps, tokens), jnp.int32), "caption_mask": ((caps, tokens), bool),
                    "caption_image": ((caps,), jnp.int32), "example_valid": ((batch,), bool)}

    class Task:
        float_inputs = ("image_feats",)

        def init_variables(self, rng, b):
            return model.init({"params": rng, "dropout": rng}, b["image_feats"], b["image_mask"], b["caption_ids"],
                              b["caption_mask"], train=False)

        def loss(self, params, extra, b, rng, warmup):
            out, updates = model.apply({"params": params, **extra}, b["image_feats"], b["image_mask"],
                                       b["caption_ids"], b["caption_mask"], train=True, mutable=list(extra.keys()),
                                       rngs={"dropout": rng})
            valid = b["example_valid"]
            loss, metrics = maxmatch_objective(out["image"], out["text"], b["caption_image"], c.loss, warmup=warmup,
                                               image_valid=valid, caption_valid=valid[b["caption_image"]],
                                               matching=c.get("matching"), all_pairs=layout)
            return loss, (metrics, updates)

    return Task(), batch_shapes, c.optim, phase == "warmup"


def flowclip_setup(quick: bool, batch: int):
    import jax.numpy as jnp
    from configs import flowclip_coco
    from mmjax.flowclip import FlowCLIPOptions, flowclip_objective
    from mmjax.models.flowclip_head import FlowCLIPHead

    c = flowclip_coco.get_config("flowclip_cimr")
    options = FlowCLIPOptions.from_mapping(c.flowclip)
    d, patches, tokens = (32, 10, 8) if quick else (512, 50, int(options.max_tokens))
    head = FlowCLIPHead(d, options)
    f = jnp.float32
    batch_shapes = {"img_global": ((batch, d), f), "img_patches": ((batch, patches, d), f),
                    "pos_global": ((batch, d), f), "pos_tokens": ((batch, tokens, d), f),
                    "pos_valid": ((batch, tokens), bool), "neg_global": ((batch, d), f),
                    "neg_tokens": ((batch, tokens, d), f), "neg_token_valid": ((batch, tokens), bool),
                    "neg_valid": ((batch,), bool), "image_ids": ((batch,), jnp.int32)}

    def texts(b, prefix, valid):
        return {"global": b[f"{prefix}_global"], "tokens": b[f"{prefix}_tokens"], "valid": b[valid]}

    class Task:
        float_inputs = ()

        def init_variables(self, rng, b):
            return head.init(rng, {"global": b["img_global"], "patches": b["img_patches"]},
                             texts(b, "pos", "pos_valid"))

        def loss(self, params, extra, b, rng, phase):
            v = {"params": params}
            scale = head.apply(v, method="logit_scale")
            objective_batch = {"image": {"global": b["img_global"], "patches": b["img_patches"]},
                               "pos_text": texts(b, "pos", "pos_valid"), "neg_text": texts(b, "neg", "neg_token_valid"),
                               "image_ids": b["image_ids"], "neg_valid": b["neg_valid"]}
            loss, metrics = flowclip_objective(lambda i, t: head.apply(v, i, t, return_local=True), scale,
                                               objective_batch, rng, options)
            return loss, (metrics, extra)

    return Task(), batch_shapes, c.optim, None


def compile_and_measure(mesh, jitted, *abstract_args) -> dict:
    """Lower and compile `jitted` on `abstract_args` under `mesh`; per-device memory (arguments + outputs − donated +
    temporaries), FLOPs, collective bytes from the optimised HLO, and the compile time."""
    import jax
    t0 = time.perf_counter()
    with jax.set_mesh(mesh):
        compiled = jitted.lower(*abstract_args).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return {"bytes_per_device": int(mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
                                    + mem.temp_size_in_bytes),
            "argument_bytes": int(mem.argument_size_in_bytes), "output_bytes": int(mem.output_size_in_bytes),
            "alias_bytes": int(mem.alias_size_in_bytes), "temp_bytes": int(mem.temp_size_in_bytes),
            "flops_per_device": float(cost.get("flops", float("nan"))) if cost else None,
            "collective_bytes": collective_bytes(compiled.as_text()), "compile_s": round(compile_s, 1)}


# ---- one compiled step -----------------------------------------------------------------------------------------

def size_step(model: str, mesh_size: int, sharding: str, all_pairs: str, batch: int, args) -> dict:
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from mmjax.sharded_similarity import AllPairsLayout
    from mmjax.train.loop import make_train_step
    from mmjax.train.optim import make_optimizer
    from mmjax.train.sharding import FSDP_MIN_SIZE, PRESETS, make_mesh, tree_shardings
    from mmjax.train.state import TrainState, split_variables
    from mmjax.train.task import Phase

    mesh = make_mesh((("data", mesh_size),), jax.devices()[:mesh_size])
    if model == "maxmatch":
        chunk = args.chunk or min(5 * batch, 1280)
        layout = AllPairsLayout(all_pairs, ("data",), chunk if all_pairs == "rows" else 0)
        task, shapes, optim, phase_value = maxmatch_setup(args.quick, batch, layout, args.phase)
    else:
        task, shapes, optim, phase_value = flowclip_setup(args.quick, batch)
    batch_sharding = NamedSharding(mesh, P("data"))
    abstract_batch = {k: jax.ShapeDtypeStruct(s, dt, sharding=batch_sharding) for k, (s, dt) in shapes.items()}
    host_batch = {k: jax.ShapeDtypeStruct(s, dt) for k, (s, dt) in shapes.items()}

    def init(rng, b):
        return split_variables(task.init_variables(rng, b))

    params_shape, extra_shape = jax.eval_shape(init, jax.random.PRNGKey(0), host_batch)
    tx, _ = make_optimizer(optim, params_shape, 1000)
    state_shape = jax.eval_shape(lambda p, e: TrainState(step=jax.numpy.zeros((), jax.numpy.int32), params=p,
                                                         extra=e, opt_state=tx.init(p), rng=jax.random.PRNGKey(0)),
                                 params_shape, extra_shape)
    shardings = tree_shardings(state_shape, PRESETS[sharding], mesh, FSDP_MIN_SIZE)
    abstract_state = jax.tree_util.tree_map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                                            state_shape, shardings)
    replicated = NamedSharding(mesh, P())
    step = jax.jit(make_train_step(task, tx, Phase("sized", 0, None, lambda s: phase_value),
                                   gather_params=sharding == "fsdp"),
                   in_shardings=(shardings, {k: batch_sharding for k in shapes}, replicated),
                   out_shardings=(shardings, replicated), donate_argnums=(0,))
    rng = jax.ShapeDtypeStruct((2,), np.uint32, sharding=replicated)
    n_params = int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(params_shape)))
    label = model if model != "maxmatch" or args.phase == "hardest" else "maxmatch_warmup"
    return {"model": label, "mesh": mesh_size, "sharding": sharding, "all_pairs": all_pairs if model == "maxmatch"
            else "head", "batch": batch, "chunk": layout.chunk if model == "maxmatch" else None, "params": n_params,
            **compile_and_measure(mesh, step, abstract_state, abstract_batch, rng)}


def size_objective(mesh_size: int, all_pairs: str, batch: int, args) -> dict:
    """The MaxMatch objective alone (config maxmatch_coco's loss on sets of D = 1024, K = 4; gradient w.r.t. both
    sides' sets, batch-sharded): the part of the step whose memory has a B² term."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    from configs import maxmatch_coco
    from mmjax.losses import maxmatch_objective
    from mmjax.sharded_similarity import AllPairsLayout
    from mmjax.train.sharding import make_mesh

    c = maxmatch_coco.get_config("bert")
    d, k = (64, 4) if args.quick else (c.model.embed_dim, c.model.num_embeds)
    mesh = make_mesh((("data", mesh_size),), jax.devices()[:mesh_size])
    chunk = args.chunk or min(5 * batch, 1280)
    layout = AllPairsLayout(all_pairs, ("data",), chunk if all_pairs == "rows" else 0)
    split = NamedSharding(mesh, P("data"))

    def sets(n):
        return {"set": jax.ShapeDtypeStruct((n, k, d), jnp.float32, sharding=split),
                "residual": jax.ShapeDtypeStruct((n, k, d), jnp.float32, sharding=split),
                "global": jax.ShapeDtypeStruct((n, d), jnp.float32, sharding=split)}

    caption_image = jax.ShapeDtypeStruct((5 * batch,), jnp.int32, sharding=split)

    def loss(image, text, caption_image):
        return maxmatch_objective(image, text, caption_image, c.loss, warmup=args.phase == "warmup",
                                  matching=c.get("matching"), all_pairs=layout)[0]

    return {"model": "objective" if args.phase == "hardest" else "objective_warmup", "mesh": mesh_size,
            "sharding": "data_parallel", "all_pairs": all_pairs, "batch": batch, "chunk": layout.chunk, "params": 0,
            **compile_and_measure(mesh, jax.jit(jax.grad(loss, (0, 1))), sets(batch), sets(5 * batch), caption_image)}


def machine() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (f"{os.cpu_count()} CPU core(s), {platform.machine()} {platform.system()}, Python "
            f"{platform.python_version()}, load average {load[0]:.1f} at start")


def gib(x):
    return x / 2 ** 30


def main(argv=None):
    args = parse_args(argv)
    _reexec(max(args.meshes))
    import jax
    jax.config.update("jax_default_matmul_precision", "float32")
    from mmjax.batching import set_progress
    set_progress(False)
    rows, t_start = [], time.time()
    # sharding outermost: a partial run (the JSON is rewritten after every case) covers both models first
    plan = [("objective", n, "data_parallel", a, b) for n in args.meshes for a in args.all_pairs
            for b in args.batches if b % n == 0 and "objective" in args.models]
    plan += [(m, n, s, a, b) for s in args.shardings for m in args.models if m != "objective" for n in args.meshes
             for a in (args.all_pairs if m == "maxmatch" else ["head"]) for b in args.batches if b % n == 0]
    print(f"[scaling] {len(plan)} compiled steps on {jax.device_count()} simulated devices; {machine()}", flush=True)
    for i, (m, n, s, a, b) in enumerate(plan, 1):
        try:
            row = size_objective(n, a, b, args) if m == "objective" else size_step(m, n, s, a, b, args)
        except Exception as e:  # noqa: BLE001 - a case that does not compile is a result, recorded with its reason
            row = {"model": m, "mesh": n, "sharding": s, "all_pairs": a, "batch": b,
                   "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        rows.append(row)
        elapsed = time.time() - t_start
        eta = elapsed / i * (len(plan) - i)
        if "error" in row:
            print(f"[scaling] {i}/{len(plan)} {m} mesh {n} {s} {a} B={b}: {row['error']}", flush=True)
        else:
            coll = gib(sum(row["collective_bytes"].values()))
            print(f"[scaling] {i}/{len(plan)} {m:8s} mesh {n:3d} {s:13s} {a:4s} B={b:6d}: "
                  f"{gib(row['bytes_per_device']):8.2f} GiB/device, "
                  f"{row['flops_per_device'] / 1e9:10.1f} GFLOP/device, "
                  f"collectives {coll:7.2f} GiB, compile {row['compile_s']:.0f}s (elapsed {elapsed / 60:.1f} min, "
                  f"ETA {eta / 60:.1f} min)", flush=True)
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"machine": machine(), "argv": sys.argv[1:], "quick": args.quick, "rows": rows,
                       "wall_s": round(time.time() - t_start, 1)}, f, indent=1)
    # side-by-side ratios: memory against the first batch of each series
    print("\nmodel     mesh sharding      layout  batch   GiB/device  ×first-batch")
    first = {}
    for r in rows:
        if "error" in r:
            continue
        key = (r["model"], r["mesh"], r["sharding"], r["all_pairs"])
        base = first.setdefault(key, r["bytes_per_device"])
        print(f"{r['model']:9s} {r['mesh']:4d} {r['sharding']:13s} {r['all_pairs']:6s} {r['batch']:6d} "
              f"{gib(r['bytes_per_device']):11.3f}  {r['bytes_per_device'] / base:8.2f}")
    print(f"[scaling] wrote {args.out} in {(time.time() - t_start) / 60:.1f} min")
    return rows


if __name__ == "__main__":
    main()
