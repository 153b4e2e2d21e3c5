"""Training-step time of the MaxMatch region model: S_H ('maxmatch') vs smooth-Chamfer, same model, same batch.

    python bench/models.py [--quick] [--steps 3] [--kinds maxmatch smooth_chamfer]

Model (full size, `maxmatch.md` §4–5): RegionTower(fc 2048→D + MLP-BN residual, max-pool global, SPM K = 4,
L = 4 shared, 4 heads × 512) on B images × 36 regions × 2048; text = bag-of-words tower (embedding 300-d, vocabulary
1000, 12 tokens, SPM with sine PE over the word embeddings) on 5B captions — a cheap stand-in for the Bi-GRU so the
comparison is not dominated by a sequential RNN on CPU. Loss = triplet with hardest negatives and multi-positive caption
sets (`maxmatch.md` §3.1, margin 0.2) over `mmjax.similarity.pairwise_set_similarity(img, txt, kind)` [B × 5B].
One jitted forward + backward (train mode: dropout, BatchNorm statistics) per step; the time is the median over
`--steps` after one compile and one warm-up step, the variants timed in alternation. Also times the similarity +
loss alone (forward + backward w.r.t. the two sets) to show its share. Writes bench/results/models.json.
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
    hits all of them alike. Each is compiled and warmed up first (compile time reported)."""
    stats = {}
    for name, fn in fns.items():
        t = time.perf_counter()
        jax.block_until_ready(fn(*args[name]))  # compile + first run
        stats[name] = {"compile_s": time.perf_counter() - t, "times": []}
        jax.block_until_ready(fn(*args[name]))  # warm-up
    for _ in range(steps):
        for name, fn in fns.items():
            t = time.perf_counter()
            jax.block_until_ready(fn(*args[name]))
            stats[name]["times"].append(time.perf_counter() - t)
    return {name: {"median_s": float(np.median(s["times"])), "min_s": float(np.min(s["times"])),
                   "compile_s": s["compile_s"], "steps": steps} for name, s in stats.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small model (D=128, B=16) for a smoke run")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--kinds", nargs="+", default=["maxmatch", "smooth_chamfer"])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                      "models.json"))
    args = parser.parse_args()
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
              "machine": {"platform": platform.platform(), "processor": platform.processor(),
                          "cpu_count": os.cpu_count(), "jax": jax.__version__, "backend": jax.default_backend()},
              "results": results}
    if "maxmatch" in results and "smooth_chamfer" in results:
        ratio = {f"{part}_{stat}": results["maxmatch"][part][f"{stat}_s"] / results["smooth_chamfer"][part][f"{stat}_s"]
                 for part in ("train_step", "similarity_and_loss") for stat in ("median", "min")}
        report["ratio_maxmatch_over_smooth_chamfer"] = ratio
        print("ratio maxmatch / smooth_chamfer (median, min): "
              f"train step {ratio['train_step_median']:.3f}, {ratio['train_step_min']:.3f} (target ≤ 1.10); "
              f"similarity+loss {ratio['similarity_and_loss_median']:.3f}, {ratio['similarity_and_loss_min']:.3f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
