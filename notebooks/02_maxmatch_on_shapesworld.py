# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · MaxMatch on ShapesWorld — a complete training run in a few minutes
#
# ShapesWorld is the project's synthetic data set: scenes of 2–4 coloured shapes on a 3 × 3 grid, each with five
# captions that describe *different* objects, pairs or relations (one image, many correct readings). In
# `'regions'` mode an image is 10 feature vectors, like detector region features, which trains fast on a CPU.
#
# This notebook builds a small MaxMatch model from a config, writes a jitted training step from library pieces
# (model apply + `mmjax.losses.maxmatch_objective` + optax), trains it with a live loss curve, evaluates it (R@K,
# element-similarity heat map, circular variance, a retrieval gallery), then retrains the same budget with a
# different set similarity and compares the two runs.

# %%
import copy
import functools
import os
import time

import jax
import matplotlib.pyplot as plt
import numpy as np
import optax
from IPython.display import Markdown, display

from mmjax.data import shapesworld
from mmjax.data.pipeline import BatchIterator, PipelineConfig, source_from_shapesworld
from mmjax.data.shapesworld.draw import plot_scenes, scene_image
from mmjax.data.shapesworld.suites import retrieval_suite
from mmjax.evaluation import embed_retrieval_model, evaluate_retrieval
from mmjax.evaluation.gallery import plot_gallery
from mmjax.evaluation.set_analysis import circular_variance_summary, element_similarity_matrix
from mmjax.losses import maxmatch_objective
from mmjax.models.factory import count_params, init_retrieval_model, retrieval_image_inputs
from mmjax.train.defaults import retrieval_config

jax.config.update("jax_default_matmul_precision", "float32")
SMOKE = os.environ.get("MMJAX_NOTEBOOK_SMOKE") == "1"
# Default size: ~1–2 min of training per run on a laptop CPU. Smoke (CI): seconds.
N_TRAIN, N_TEST, BATCH, STEPS, DIM = (64, 32, 16, 6, 32) if SMOKE else (2048, 250, 64, 150, 64)
PLOT_EVERY = 2 if SMOKE else 25


def show(fig):
    """Display a figure once and free it (explicit, so it works under any matplotlib backend)."""
    display(fig)
    plt.close(fig)


def table(header, rows, fmt="{:.2f}"):
    cell = lambda v: fmt.format(v) if isinstance(v, (float, np.floating)) else str(v)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return Markdown("\n".join(lines))


print(f"{'smoke' if SMOKE else 'full'} size: {N_TRAIN} train / {N_TEST} test images, {STEPS} steps of {BATCH} "
      f"images × 5 captions, D = {DIM}; load average {os.getloadavg()[0]:.2f}")

# %% [markdown]
# ## 1. Data
#
# `shapesworld.generate(split, limit=n)` returns the first n images of a split (deterministic from the seed). The
# pictures below are drawn from the scene graphs (`mmjax.data.shapesworld.draw`): regions mode has no pixels.

# %%
t0 = time.perf_counter()
train = shapesworld.generate("train", limit=N_TRAIN)
test = shapesworld.generate("test", limit=N_TEST)
print(f"generated in {time.perf_counter() - t0:.1f} s; regions {train['regions'].shape}, "
      f"{sum(len(c) for c in train['captions'])} training captions")
show(plot_scenes(train, range(8), cols=4, title="ShapesWorld training scenes and their five captions"))

# %% [markdown]
# ## 2. Model from a config
#
# `retrieval_config('smoke')` is the tiny test configuration of the training script; we widen it a little. The
# model is a `SetRetrievalModel`: a region tower and a Bi-GRU text tower, each followed by a set-prediction module
# giving K = 4 unit elements. `init_retrieval_model` builds and initialises it from one pipeline batch.

# %%
config = retrieval_config("smoke")
config.model.embed_dim = DIM
config.model.text.word_dim = DIM
config.model.spm.update(depth=1, num_heads=2, head_dim=DIM // 2)
config.loss.warmup_epochs = 0  # no VSE0 warm-up: one compiled step function per run

tokenizer = shapesworld.ShapesWorld(train["config"]).tokenizer()
source = source_from_shapesworld(train, tokenizer)
pipeline = PipelineConfig(batch_size=BATCH, seed=0, prefetch=0)
sample = BatchIterator(source, pipeline).batch_at(0, 0)
model, variables0 = init_retrieval_model(config.model, tokenizer.vocab_size, jax.random.PRNGKey(0), sample)
print(f"{count_params(variables0['params']):,} parameters; collections: {sorted(variables0)}")
print(f"K = {config.model.num_embeds} set elements per image / caption; similarity: {config.loss.similarity}")

# %% [markdown]
# ## 3. A training step written from library pieces
#
# The step applies the model in training mode (dropout on, BatchNorm statistics updated), computes the MaxMatch
# objective — hardest-negative triplet on S_H + multi-positive InfoNCE + GD / ISD / Div / MMD regularisers — and
# takes one AdamW step with gradient clipping. `loss_cfg` is captured by the closure, so each loss configuration
# compiles its own step.

# %%
DEVICE_KEYS = ("image_feats", "image_mask", "caption_ids", "caption_mask", "caption_image")


def make_train_step(loss_cfg, optimizer):
    @jax.jit
    def train_step(params, extra, opt_state, batch, rng):
        images, image_mask = retrieval_image_inputs(batch)

        def loss_fn(p):
            out, updates = model.apply({"params": p, **extra}, images, image_mask, batch["caption_ids"],
                                       batch["caption_mask"], train=True, mutable=list(extra),
                                       rngs={"dropout": rng})
            loss, metrics = maxmatch_objective(out["image"], out["text"], batch["caption_image"], loss_cfg)
            return loss, (metrics, updates)

        (_, (metrics, updates)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        metrics["grad_norm"] = optax.global_norm(grads)
        deltas, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, deltas), updates, opt_state, metrics

    return train_step


def plot_history(history, title):
    fig, ax = plt.subplots(figsize=(7, 3))
    steps = [h["step"] for h in history]
    for key, style in (("loss/total", "-"), ("loss/triplet", "--"), ("loss/contrastive", ":")):
        if key in history[0]:
            ax.plot(steps, [h[key] for h in history], style, label=key)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def train(loss_cfg, name):
    """Trains from the shared initial variables for STEPS steps; returns (variables, history, seconds)."""
    optimizer = optax.chain(optax.clip_by_global_norm(1.0),
                            optax.adamw(optax.cosine_decay_schedule(1e-3, STEPS), weight_decay=1e-4))
    step_fn = make_train_step(loss_cfg, optimizer)
    params = variables0["params"]
    extra = {k: v for k, v in variables0.items() if k != "params"}
    opt_state = optimizer.init(params)
    batches = BatchIterator(source, pipeline)
    history, handle, t0 = [], None, time.perf_counter()
    for step in range(STEPS):
        batch = {k: v for k, v in next(batches).items() if k in DEVICE_KEYS}
        params, extra, opt_state, metrics = step_fn(params, extra, opt_state, batch,
                                                    jax.random.fold_in(jax.random.PRNGKey(1), step))
        history.append({"step": step, **{k: float(v) for k, v in metrics.items()}})
        if (step + 1) % PLOT_EVERY == 0 or step + 1 == STEPS:  # live curve: redraw in place
            fig = plot_history(history, f"{name}: step {step + 1}/{STEPS}, {time.perf_counter() - t0:.0f} s")
            if handle is None:
                handle = display(fig, display_id=True)
            else:
                handle.update(fig)
            plt.close(fig)
    return {"params": params, **extra}, history, time.perf_counter() - t0


variables, history, seconds = train(config.loss, "MaxMatch (S_H)")
print(f"trained {STEPS} steps in {seconds:.0f} s (first step includes compilation); "
      f"final loss {history[-1]['loss/total']:.3f}; load average {os.getloadavg()[0]:.2f}")

# %% [markdown]
# ## 4. Evaluation on the test split
#
# Each modality is embedded once (`embed_retrieval_model`), then every image set is scored against every caption
# set. MaxMatch reports two scores: `maxmatch` (exact assignment S_H, as trained) and `maxmatch_topk` (the paper's
# inference score: mean of the top-m cells, no one-to-one constraint). R@K uses the COCO convention: only the
# generating image / captions count as correct.

# %%
suite = retrieval_suite(test)
n_test, c, t = len(test["captions"]), 5, tokenizer.max_len
test_ids = tokenizer.encode(suite["captions"])
caption_to_image = suite["caption_image"]


def embed(variables):
    return embed_retrieval_model(model, variables, test["regions"], test["region_mask"], test_ids.ids,
                                 test_ids.attention_mask, batch_size=128)


def evaluate(variables, kinds, **similarity_kw):
    img, txt = embed(variables)
    res = evaluate_retrieval(img, txt, caption_to_image, kinds=kinds, fold_counts=(1,), return_scores=True,
                             similarity_kw=similarity_kw)
    return img, txt, res


img_sets, txt_sets, results = evaluate(variables, ("maxmatch", "maxmatch_topk"))
KEYS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")
display(Markdown(f"**R@K on {n_test} test images × 5 captions** (percent)"))
display(table(["score", *KEYS], [[k, *(results[k]["all"][m] for m in KEYS)] for k in ("maxmatch", "maxmatch_topk")]))

# %% [markdown]
# ### Element-similarity matrix and circular variance
#
# The heat map is the mean cosine between image element i and caption element j over matching (image, caption)
# pairs, index-aligned (MaxMatch paper Fig. 4): a strong diagonal would mean elements specialise by index. Circular
# variance CV = 1 − ‖mean of the unit elements‖ measures how spread a set is (0 = all elements identical).

# %%
matrix = element_similarity_matrix(img_sets, txt_sets, caption_to_image)
cv = circular_variance_summary(img_sets, txt_sets)
fig, ax = plt.subplots(figsize=(4.2, 3.6))
im = ax.imshow(matrix, cmap="viridis")
for i in range(matrix.shape[0]):
    for j in range(matrix.shape[1]):
        ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", color="w", fontsize=8)
ax.set_xlabel("caption element j")
ax.set_ylabel("image element i")
ax.set_title("mean element cosine over matching pairs", fontsize=9)
fig.colorbar(im, ax=ax, fraction=0.046)
show(fig)
display(table(["modality", "elements", "mean CV", "mean ln CV"],
              [[m, key, v["mean_cv"], v["mean_log_cv"]] for m in cv for key, v in cv[m].items()], fmt="{:.3f}"))

# %% [markdown]
# ### Retrieval gallery
#
# Top-5 answers for three caption queries and two image queries, scored with S_H. Green frame: the source ground
# truth; orange: another image on which the caption is also true (ShapesWorld's semantic ground truth — "a red
# circle" can be true of many scenes); gray: wrong.

# %%
fig, _ = plot_gallery(results["scores"]["maxmatch"], caption_to_image, suite["captions"],
                      functools.partial(scene_image, test), caption_queries=[0, 7, 13], image_queries=[1, 4],
                      positives=suite["semantic"])
show(fig)

# %% [markdown]
# ## 5. Experiment: swap the set similarity
#
# Same model, initial parameters, data order and step budget; only `loss.similarity` changes from MaxMatch's
# one-to-one S_H to Set Div's `smooth_chamfer` (α = 16, many-to-one soft maxima). Each run is evaluated with its own
# training similarity. One seed and a short budget: differences of a few RSUM points are within run-to-run noise
# (not measured here) — this is a template for an experiment, not a result.

# %%
chamfer_cfg = copy.deepcopy(config.loss)
chamfer_cfg.similarity = "smooth_chamfer"
variables_c, history_c, seconds_c = train(chamfer_cfg, "smooth-Chamfer")
img_c, txt_c, results_c = evaluate(variables_c, ("smooth_chamfer",), alpha=chamfer_cfg.alpha)
cv_c = circular_variance_summary(img_c, txt_c)

runs = [("MaxMatch S_H", results["maxmatch"]["all"], cv, history, seconds),
        ("smooth-Chamfer", results_c["smooth_chamfer"]["all"], cv_c, history_c, seconds_c)]
display(Markdown(f"**Same budget ({STEPS} steps × {BATCH} images), test R@K with each run's own similarity**"))
display(table(["run", *KEYS, "image CV", "text CV", "final loss", "train s"],
              [[name, *(r[m] for m in KEYS), v["image"]["set"]["mean_cv"], v["text"]["set"]["mean_cv"],
                h[-1]["loss/total"], f"{s:.0f}"] for name, r, v, h, s in runs]))

fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
for name, r, _, h, _ in runs:
    axes[0].plot([x["step"] for x in h], [x["loss/triplet"] for x in h], label=name)
axes[0].set_xlabel("step")
axes[0].set_ylabel("triplet loss (own similarity)")
axes[0].set_title("training curves", fontsize=9)
axes[0].legend(fontsize=8)
x = np.arange(len(KEYS) - 1)
for k, (name, r, *_) in enumerate(runs):
    axes[1].bar(x + 0.4 * k - 0.2, [r[m] for m in KEYS[:-1]], width=0.4, label=f"{name} (RSUM {r['rsum']:.0f})")
axes[1].set_xticks(x, KEYS[:-1])
axes[1].set_ylabel("recall (%)")
axes[1].set_title("test R@K", fontsize=9)
axes[1].legend(fontsize=8)
fig.suptitle("MaxMatch S_H vs smooth-Chamfer, same budget", fontsize=10)
fig.tight_layout()
show(fig)
