"""Training-step time of the MaxMatch region model: S_H ('maxmatch') vs smooth-Chamfer, same model, same batch;
and (`--main-job`) the main job's step split into parts.

    python bench/models.py [--quick] [--steps 3] [--kinds maxmatch smooth_chamfer]
    python bench/models.py --main-job [--quick] [--steps 5]

`--main-job`: configs/maxmatch_shapes.py (`:smoke` with --quick) on a synthetic batch of its shapes (128 images ×
10 regions × 256, 5 captions each, 16 tokens, prefix masks of 6–16 tokens). Parts, each one jitted forward +
backward: text tower (Bi-GRU + SPM, train mode), the Bi-GRU alone (the tower without its set head), image tower,
objective (`maxmatch_objective`: S_H + all loss terms, gradient w.r.t. the tower outputs), optimiser update (the
config's AdamW + clipping), and the full `mmjax.train.loop.make_train_step` step. All parts alternate in each round;
wall and CPU time and the 1-minute load average are recorded per round (the machine is shared). Results go to
models.json["main_job"].

Model (full size, docs/design.md#set-prediction-module, docs/design.md#region-tower): RegionTower(fc 2048→D + MLP-BN
residual, max-pool global, SPM K = 4, L = 4 shared, 4 heads × 512) on B images × 36 regions × 2048; text = bag-of-words
tower (embedding 300-d, vocabulary 1000, 12 tokens, SPM with sine PE over the word embeddings) on 5B captions — a cheap
stand-in for the Bi-GRU so the comparison is not dominated by a sequential RNN on CPU. Loss = triplet with hardest
negatives and multi-positive caption sets (docs/design.md#triplet-loss, margin 0.2) over
`mmjax.similarity.pairwise_set_similarity(img, txt, kind)` [B × 5B]. One jitted forward + backward (train mode: dropout,
BatchNorm statistics) per step; the time is the median over `--steps` after one compile and one warm-up step, the
variants timed in alternation. Also times the similarity + loss alone (forward + backward w.r.t. the two sets) to show
its share. Writes bench/results/models.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from mmjax.losses import triplet_loss  # noqa: E402
from mmjax.models.image_towers import RegionTower  # noqa: E402
from mmjax.models.retrieval import SetRetrievalModel  # noqa: E402
from mmjax.models.set_prediction import SetPredictionModule  # noqa: E402
from mmjax.models.text_towers import BagOfWordsTextTower  # noqa: E402

FULL = dict(batch=128, regions=36, feat_dim=2048, embed_dim=1024, num_embeds=4, depth=4, heads=4, head_dim=512,
            tokens=12, vocab=1000, word_dim=300)
QUICK = dict(batch=16, regions=36, feat_dim=256, embed_dim=128, num_embeds=4, depth=2, heads=4, head_dim=32,
             tokens=12, vocab=200, word_dim=64)
CAPTIONS_PER_IMAGE = 5
MARGIN = 0.2


def build(cfg):
    def spm(pe):
        return SetPredictionModule(num_embeds=cfg["num_embeds"], depth=cfg["depth"], num_heads=cfg["heads"],
                                   head_dim=cfg["head_dim"], pos_encoding=pe)

    model = SetRetrievalModel(
        image_tower=RegionTower(embed_dim=cfg["embed_dim"], pool="max", set_head=spm("none")),
        text_tower=BagOfWordsTextTower(vocab_size=cfg["vocab"], embed_dim=cfg["embed_dim"],
                                       word_dim=cfg["word_dim"], set_head=spm("sine")))
    rng = np.random.default_rng(0)
    b, c = cfg["batch"], CAPTIONS_PER_IMAGE * cfg["batch"]
    feats = jnp.asarray(rng.normal(size=(b, cfg["regions"], cfg["feat_dim"])), jnp.float32)
    region_mask = jnp.asarray(rng.random((b, cfg["regions"])) > 0.2).at[:, 0].set(True)  # region drop 0.2
    lengths = rng.integers(5, cfg["tokens"] + 1, size=c)
    ids = jnp.asarray(rng.integers(1, cfg["vocab"], size=(c, cfg["tokens"])))
    token_mask = jnp.asarray(np.arange(cfg["tokens"])[None] < lengths[:, None])
    caption_image = jnp.asarray(np.arange(c) // CAPTIONS_PER_IMAGE)
    variables = jax.jit(model.init)(jax.random.PRNGKey(0), feats, region_mask, ids, token_mask)
    return model, variables, (feats, region_mask, ids, token_mask, caption_image)


def make_step(model, pairwise_set_similarity, kind):
    def loss_fn(params, batch_stats, batch, key):
        feats, region_mask, ids, token_mask, caption_image = batch
        out, updates = model.apply({"params": params, "batch_stats": batch_stats}, feats, region_mask, ids,
                                   token_mask, train=True, mutable=["batch_stats"], rngs={"dropout": key})
        scores = pairwise_set_similarity(out["image"]["set"], out["text"]["set"], kind)
        return triplet_loss(scores, caption_image, margin=MARGIN)[0], updates["batch_stats"]

    return jax.jit(jax.value_and_grad(loss_fn, has_aux=True))


def make_similarity_step(pairwise_set_similarity, kind):
    def loss_fn(img, txt, caption_image):
        return triplet_loss(pairwise_set_similarity(img, txt, kind), caption_image, margin=MARGIN)[0]

    return jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1)))


def time_interleaved(fns: dict, args: dict, steps: int) -> dict:
    """Median wall time per function; the functions are run in alternation so that load drift on a shared CPU
    hits all of them alike. Each is compiled and warmed up first (compile time reported). The 1-minute load
    average is recorded after every round."""
    stats, loads = {}, []
    for name, fn in fns.items():
        t = time.perf_counter()
        jax.block_until_ready(fn(*args[name]))  # compile + first run
        stats[name] = {"compile_s": time.perf_counter() - t, "times": [], "cpu": []}
        jax.block_until_ready(fn(*args[name]))  # warm-up
    for round_ in range(steps):
        for name, fn in fns.items():
            t, c = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn(*args[name]))
            stats[name]["times"].append(time.perf_counter() - t)
            stats[name]["cpu"].append(time.process_time() - c)
        loads.append(os.getloadavg()[0])
        print(f"  round {round_ + 1}/{steps}: load average {loads[-1]:.2f}", flush=True)
    return {name: {"median_s": float(np.median(s["times"])), "min_s": float(np.min(s["times"])),
                   "cpu_median_s": float(np.median(s["cpu"])), "compile_s": s["compile_s"], "steps": steps,
                   "load_avg_1min": loads} for name, s in stats.items()}


def write_results(path: str, update: dict):
    """Merge `update` into the JSON at `path` (the two modes of this script keep each other's results)."""
    report = {}
    if os.path.exists(path):
        with open(path) as f:
            report = json.load(f)
    report.update(update)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {path}")


# ---------------------------------------------------------------- --main-job: the step split into parts
def main_job(args):
    import importlib.util

    import optax

    from mmjax.losses import maxmatch_objective
    from mmjax.tasks.retrieval import RetrievalTask
    from mmjax.train.loop import make_train_step
    from mmjax.train.optim import make_optimizer
    from mmjax.train.state import TrainState

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("maxmatch_shapes", os.path.join(root, "configs", "maxmatch_shapes.py"))
    cfg_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cfg_module)
    config = cfg_module.get_config("smoke" if args.quick else "")
    task = RetrievalTask(config)  # tokenizer + model only; no data is generated
    tower = task.model.text_tower
    bare_tower = tower.clone(set_head=None)  # the Bi-GRU alone: what the set head adds is the difference

    rng = np.random.default_rng(0)
    b, t = config.data.batch_size, config.data.max_len
    c = CAPTIONS_PER_IMAGE * b
    regions, feat_dim = 10, 256  # ShapesWorld default preset: 10 region slots × 256
    lengths = rng.integers(min(6, t), t + 1, size=c)
    batch = {"image_feats": jnp.asarray(rng.normal(size=(b, regions, feat_dim)), jnp.float32),
             "image_mask": jnp.asarray(rng.random((b, regions)) > 0.2).at[:, 0].set(True),
             "caption_ids": jnp.asarray(rng.integers(1, task.tokenizer.vocab_size, size=(c, t)), jnp.int32),
             "caption_mask": jnp.asarray(np.arange(t)[None] < lengths[:, None]),
             "caption_image": jnp.asarray(np.arange(c) // CAPTIONS_PER_IMAGE, jnp.int32),
             "example_valid": jnp.ones((b,), bool)}
    key = jax.random.PRNGKey(1)
    variables = jax.jit(task.init_variables)(jax.random.PRNGKey(0), batch)
    params, extra = variables["params"], {k: v for k, v in variables.items() if k != "params"}
    tx, _ = make_optimizer(config.optim, params, total_steps=1000)
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, extra=extra, opt_state=tx.init(params),
                       rng=jax.random.PRNGKey(2))
    out = jax.jit(lambda v: task.model.apply(v, batch["image_feats"], batch["image_mask"], batch["caption_ids"],
                                             batch["caption_mask"]))(variables)

    def tower_step(tower):
        def loss(p, ids, mask, k):
            o = tower.apply({"params": p}, ids, mask, train=True, rngs={"dropout": k})
            return jnp.sum(o["set"] * 0.01) + jnp.sum(jnp.sin(o["global"]))
        return jax.jit(jax.value_and_grad(loss))

    def image_step(p, stats, feats, mask, k):
        def loss(p):
            o, upd = task.model.image_tower.apply({"params": p, "batch_stats": stats}, feats, mask, train=True,
                                                  mutable=["batch_stats"], rngs={"dropout": k})
            return jnp.sum(o["set"] * 0.01) + jnp.sum(jnp.sin(o["global"])), upd
        return jax.value_and_grad(loss, has_aux=True)(p)

    def objective_step(img, txt, masks, caption_image, valid):
        def loss(img, txt):
            return maxmatch_objective({**img, **masks[0]}, {**txt, **masks[1]}, caption_image, config.loss,
                                      image_valid=valid, caption_valid=valid[caption_image])[0]
        return jax.value_and_grad(loss, argnums=(0, 1))(img, txt)

    floats = lambda d: {k: v for k, v in d.items() if v is not None and jnp.issubdtype(v.dtype, jnp.floating)}
    rest = lambda d: {k: v for k, v in d.items() if k not in floats(d)}
    grads = jax.tree_util.tree_map(lambda p: 1e-3 * jnp.ones_like(p), params)
    text_args = (params["text_tower"], batch["caption_ids"], batch["caption_mask"], key)
    bare_params = {k: v for k, v in params["text_tower"].items() if k != "set_head"}
    fns = {"text_tower": tower_step(tower), "bigru_only": tower_step(bare_tower),
           "image_tower": jax.jit(image_step),
           "objective": jax.jit(objective_step),
           "optimizer": jax.jit(lambda g, s, p: optax.apply_updates(p, tx.update(g, s, p)[0])),
           "step": jax.jit(make_train_step(task, tx, task.phases(1)[-1]))}
    fn_args = {"text_tower": text_args, "bigru_only": (bare_params,) + text_args[1:],
               "image_tower": (params["image_tower"], extra["batch_stats"]["image_tower"], batch["image_feats"],
                               batch["image_mask"], key),
               "objective": (floats(out["image"]), floats(out["text"]), (rest(out["image"]), rest(out["text"])),
                             batch["caption_image"], batch["example_valid"]),
               "optimizer": (grads, state.opt_state, params),
               "step": (state, batch, key)}
    print(f"main job ({'smoke' if args.quick else 'default'} config): {b} images × {c} captions × {t} tokens; "
          f"load average before {os.getloadavg()}", flush=True)
    timed = time_interleaved(fns, fn_args, args.steps)
    ms = lambda name, stat="median_s": timed[name][stat] * 1e3
    step = ms("step")
    print(f"{'part (fwd+bwd)':>26} | {'median ms':>9} | {'CPU ms':>9} | share of the step")
    for part, name in [("text tower (Bi-GRU + SPM)", "text_tower"), ("  of which Bi-GRU alone", "bigru_only"),
                       ("image tower", "image_tower"), ("objective", "objective"), ("optimiser update", "optimizer"),
                       ("full step", "step")]:
        print(f"{part:>26} | {ms(name):9.1f} | {ms(name, 'cpu_median_s'):9.1f} | {ms(name) / step:6.1%}")
    loads = [x for v in timed.values() for x in v["load_avg_1min"]]
    print(f"load average (1 min) over the rounds: {min(loads):.2f}–{max(loads):.2f}")
    write_results(args.out, {"main_job": {
        "config": {"variant": "smoke" if args.quick else "default", "images": b, "captions": c, "tokens": t,
                   "embed_dim": config.model.embed_dim, "word_dim": config.model.text.word_dim},
        "machine": machine(), "results": timed}})


def machine():
    return {"platform": platform.platform(), "processor": platform.processor(), "cpu_count": os.cpu_count(),
            "jax": jax.__version__, "backend": jax.default_backend()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small model (D=128, B=16) for a smoke run")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--kinds", nargs="+", default=["maxmatch", "smooth_chamfer"])
    parser.add_argument("--main-job", action="store_true",
                        help="per-part table of the main job's step (text tower, image tower, objective, optimiser)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                      "models.json"))
    args = parser.parse_args()
    if args.main_job:
        return main_job(args)
    from mmjax.similarity import pairwise_set_similarity  # the lead's module; fails loudly if absent

    cfg = QUICK if args.quick else FULL
    model, variables, batch = build(cfg)
    params, batch_stats = variables["params"], variables["batch_stats"]
    key = jax.random.PRNGKey(1)
    out = jax.jit(lambda v: model.apply(v, *batch[:4]))(variables)
    img_set, txt_set = out["image"]["set"], out["text"]["set"]
    fns, fn_args = {}, {}
    for kind in args.kinds:
        fns[("train_step", kind)] = make_step(model, pairwise_set_similarity, kind)
        fn_args[("train_step", kind)] = (params, batch_stats, batch, key)
        fns[("similarity_and_loss", kind)] = make_similarity_step(pairwise_set_similarity, kind)
        fn_args[("similarity_and_loss", kind)] = (img_set, txt_set, batch[4])
    timed = time_interleaved(fns, fn_args, args.steps)
    results = {kind: {part: timed[(part, kind)] for part in ("train_step", "similarity_and_loss")}
               for kind in args.kinds}
    for kind, r in results.items():
        print(f"{kind:>16}: train step {r['train_step']['median_s'] * 1e3:9.1f} ms "
              f"(compile {r['train_step']['compile_s']:.1f} s)   "
              f"similarity+loss fwd+bwd {r['similarity_and_loss']['median_s'] * 1e3:8.2f} ms", flush=True)
    report = {"config": {**cfg, "captions": CAPTIONS_PER_IMAGE * cfg["batch"], "quick": args.quick},
              "machine": machine(), "results": results}
    if "maxmatch" in results and "smooth_chamfer" in results:
        ratio = {f"{part}_{stat}": results["maxmatch"][part][f"{stat}_s"] / results["smooth_chamfer"][part][f"{stat}_s"]
                 for part in ("train_step", "similarity_and_loss") for stat in ("median", "min")}
        report["ratio_maxmatch_over_smooth_chamfer"] = ratio
        print("ratio maxmatch / smooth_chamfer (median, min): "
              f"train step {ratio['train_step_median']:.3f}, {ratio['train_step_min']:.3f} (target ≤ 1.10); "
              f"similarity+loss {ratio['similarity_and_loss_median']:.3f}, {ratio['similarity_and_loss_min']:.3f}")
    write_results(args.out, report)


if __name__ == "__main__":
    main()
