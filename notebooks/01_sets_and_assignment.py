# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Sets and assignment — the math of MaxMatch, no training
#
# A MaxMatch embedding of an image or a caption is a **set** of K unit vectors. Two sets V (image, K_V elements) and
# T (caption, K_T elements) are compared through the block of cosines C = V Tᵀ. MaxMatch's score S_H solves a linear
# assignment on C and averages the matched cells:
#
# $$S_H(V, T) = \frac{1}{m} \sum_{k\ \text{matched}} f_s\big(C_{k,\pi^*(k)}\big), \qquad
#   \pi^* = \arg\max_\pi \sum_k C_{k,\pi(k)}, \qquad f_s(x) = \frac{e^{s x} - 1}{s},\ m = \min(n_V, n_T)$$
#
# This notebook looks at every set similarity of `mmjax.similarity` on the same pairs, runs each solver of
# `mmjax.matching` on one block, times a batch of blocks against a scipy loop, shows where `jax.grad` of S_H goes,
# and what happens with ties and padded (masked) elements. It runs on a CPU in about a minute.
#
# *Wall time at full size: 78 s for the whole notebook (executed with nbclient on 2026-12-03; 2 CPU cores, x86_64,
# jax CPU backend), with the 1-minute load average at 7.2 → 8.3: other jobs shared the two cores, so an idle machine
# is faster. The test size (`MMJAX_NOTEBOOK_SMOKE=1`) took 58 s at the same load, mostly start-up and compilation.*

# %%
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display
from scipy.optimize import linear_sum_assignment

import mmjax
from mmjax import matching
from mmjax.similarity import KINDS, block_similarity, pairwise_set_similarity

# notebooks/helpers.py is imported from the repository root: under Jupyter the kernel starts in notebooks/, whose
# parent is the root; run from elsewhere, the root is the checkout mmjax was imported from (PYTHONPATH or editable).
for _dir in (Path.cwd(), *Path.cwd().parents, Path(mmjax.__file__).resolve().parents[1]):
    if (_dir / "notebooks" / "helpers.py").is_file():
        sys.path.insert(0, str(_dir))
        break
from notebooks.helpers import index_ticks, show, table, unit  # noqa: E402

# Reference precision for float32 matmuls (accelerators would otherwise use TF32 / bf16 passes).
jax.config.update("jax_default_matmul_precision", "float32")
SMOKE = os.environ.get("MMJAX_NOTEBOOK_SMOKE") == "1"
BATCH = 64 if SMOKE else 2048  # blocks in the jit/vmap timing
TIMING_K = (4,) if SMOKE else (4, 6)  # block sizes timed (each one compiles three solvers)
ROUNDS = 5  # timing rounds, variants alternated within each round


print("jax", jax.__version__, "backend", jax.default_backend(), "| smoke" if SMOKE else "| full size")

# %% [markdown]
# ## 1. Every set similarity on the same pairs
#
# Three pairs of sets in D = 8:
# * **hand-made**: the caption's three elements are noisy copies of three of the image's four elements (the
#   image has one extra element, e.g. a background region);
# * **one-to-many**: every caption element is a copy of the *same* image element — a set that collapsed;
# * **random**: independent random unit vectors.
#
# `mil` (PVSE) only looks at the best cell, so it cannot tell "every caption element found its own partner" from
# "everything matches one element"; chamfer-style scores average per-row / per-column maxima (many-to-one allowed);
# S_H (`maxmatch`) pairs elements one-to-one, so the collapsed caption pays for it; `maxmatch_topk` (the paper's
# inference score, top-m cells without the one-to-one constraint) does not. Both apply f_s with s = 1, so a cosine
# of 1 scores e − 1 ≈ 1.72 (the scale is not [−1, 1]).

# %%
rng = np.random.default_rng(0)
D = 8
image = unit(rng.normal(size=(4, D)))
caption = unit(image[[2, 0, 3]] + 0.15 * rng.normal(size=(3, D)))
collapsed = unit(image[[0, 0, 0]] + 0.15 * rng.normal(size=(3, D)))
random_t = unit(rng.normal(size=(3, D)))
pairs = {"hand-made": caption, "one-to-many": collapsed, "random": random_t}

rows = []
for kind in KINDS:
    row = [kind]
    for name, t in pairs.items():
        if kind == "sinkhorn_soft":  # needs square unmasked blocks: compare against the first 3 image elements
            s = pairwise_set_similarity(image[None, :3], t[None], kind)
        else:
            s = pairwise_set_similarity(image[None], t[None], kind)
        row.append(float(s[0, 0]))
    rows.append(row)
display(Markdown("**Set similarity of image set V (K_V = 4) and three caption sets (K_T = 3)**; "
                 "`sinkhorn_soft` uses V's first 3 elements (square blocks only)."))
display(table(["kind", *pairs], rows, fmt="{:.4f}"))

# %% [markdown]
# ## 2. One block, four solvers
#
# `mmjax.matching.solve(scores, method)` returns, for each row, the matched column (−1 = unmatched). The exact
# solvers (`enumerate`, `auction` with its certificate and exact repair, `hungarian`) must reach the scipy optimum.
# `mmjax.matching.sinkhorn_plan(scores, tau, iters)` returns a soft doubly-stochastic plan instead of indices (an
# ablation; it concentrates on the optimal permutation as τ → 0), so it is kept out of `solve`.

# %%
K = 5
block = np.asarray(unit(rng.normal(size=(K, D))) @ unit(rng.normal(size=(K, D))).T, np.float32)
r_opt, c_opt = linear_sum_assignment(block, maximize=True)
optimum = block[r_opt, c_opt].sum()

fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
rows = []
for ax, method in zip(axes, ("enumerate", "auction", "hungarian", "sinkhorn")):
    if method == "sinkhorn":
        plan = np.asarray(matching.sinkhorn_plan(jnp.asarray(block), tau=0.05, iters=20))
        im = ax.imshow(plan, cmap="magma", vmin=0, vmax=1)
        cbar_label = r"plan mass $P_{ij}$"
        cols = plan.argmax(axis=1)
        ax.set_title(f"sinkhorn plan P (τ=0.05)\nΣ P⊙C = {np.sum(plan * block):.4f}", fontsize=9)
        total = float(np.sum(plan * block))
    else:
        cols = np.asarray(matching.solve(jnp.asarray(block), method))
        im = ax.imshow(block, cmap="viridis", vmin=-1, vmax=1)
        cbar_label = r"cosine $C_{ij}$"
        total = float(block[np.arange(K), cols].sum())
        ax.set_title(f"{method}: Σ matched C = {total:.4f}", fontsize=9)
    ax.scatter(cols, np.arange(K), marker="s", s=260, facecolors="none", edgecolors="red", linewidths=2)
    index_ticks(ax, K, K)
    fig.colorbar(im, ax=ax, fraction=0.046, label=cbar_label)
    rows.append([method, str(cols.tolist()), total, "yes" if abs(total - optimum) < 1e-5 else "no (soft)"])
fig.suptitle("block C (cosines) with each solver's matched cells (red squares); right: Sinkhorn's soft plan P, "
             "red = its row-wise argmax", fontsize=10)
fig.tight_layout()
show(fig)
display(table(["solver", "cols (row → column)", "total", "= scipy optimum"],
              rows + [["scipy linear_sum_assignment", str(c_opt.tolist()), float(optimum), "—"]], fmt="{:.4f}"))

# %% [markdown]
# ## 3. A batch of blocks under `jit` / `vmap`, against a scipy loop
#
# Every solver is a single-problem function batched with `vmap` inside `solve`, so a whole batch
# `[B, K, K]` is one jitted call; an explicit `jax.vmap` over `solve` gives the same answer. Timings: the variants
# are alternated within each round (the machine is shared, so a variant run alone would see a different load), the
# table shows the median of the rounds, and the load average is printed with it.

# %%
def timed(fn):
    t = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t


timing_rows = []
for k in TIMING_K:
    blocks = jnp.asarray(rng.uniform(-1, 1, size=(BATCH, k, k)).astype(np.float32))
    host = np.asarray(blocks)
    ref = np.stack([linear_sum_assignment(b, maximize=True)[1] for b in host])
    solvers = {m: jax.jit(lambda x, m=m: matching.solve(x, m)) for m in ("enumerate", "auction", "hungarian")}
    for m, fn in solvers.items():  # compile (not timed) and check against scipy
        cols = np.asarray(fn(blocks))
        got = np.take_along_axis(host, cols[..., None], -1).sum((1, 2))
        want = np.take_along_axis(host, ref[..., None], -1).sum((1, 2))
        assert np.allclose(got, want, atol=1e-5), m
    vmapped = jax.jit(jax.vmap(lambda b: matching.solve(b, "hungarian")))
    assert np.array_equal(np.asarray(vmapped(blocks)), np.asarray(solvers["hungarian"](blocks)))
    variants = {**{f"jax {m}": (lambda f=fn: f(blocks)) for m, fn in solvers.items()},
                "scipy loop": lambda: [linear_sum_assignment(b, maximize=True) for b in host]}
    times = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, fn in variants.items():
            times[name].append(timed(fn))
    load = os.getloadavg()[0]
    scipy_ms = 1e3 * np.median(times["scipy loop"])
    for name, ts in times.items():
        ms = 1e3 * np.median(ts)
        timing_rows.append([k, BATCH, name, f"{ms:.2f}", f"{scipy_ms / ms:.1f}×", f"{load:.2f}"])
display(Markdown(f"**Median of {ROUNDS} alternated rounds** (every jax result checked against scipy's optimum; "
                 "explicit `jax.vmap` = batched call)"))
display(table(["K", "blocks", "variant", "ms / batch", "speed-up vs scipy", "load avg (1 min)"], timing_rows))

# %% [markdown]
# ## 4. Where the gradient of S_H goes
#
# π* is found on `stop_gradient(C)`, so S_H is differentiated only through the gathered matched cells:
# ∂S_H/∂C_ij = M*_ij · e^{s C_ij} / m. Below: the gradient w.r.t. the block C (non-zero exactly on the matched cells),
# then the gradient w.r.t. each image element — element i receives only its partner's direction. Smooth-Chamfer,
# for contrast, sends gradient to every cell.

# %%
v = jnp.asarray(unit(rng.normal(size=(4, D))))
t = jnp.asarray(unit(rng.normal(size=(4, D))))
c = v @ t.T
s_h = lambda c: block_similarity(c, "maxmatch", s_h=1.0)
g_c = np.asarray(jax.grad(s_h)(c))
g_chamfer = np.asarray(jax.grad(lambda c: block_similarity(c, "smooth_chamfer"))(c))
cols = np.asarray(matching.solve(c, "hungarian"))
matched = np.zeros((4, 4), bool)
matched[np.arange(4), cols] = True
assert np.array_equal(g_c != 0, matched)
np.testing.assert_allclose(g_c[matched], np.exp(np.asarray(c)[matched]) / 4, rtol=1e-5)

g_v = np.asarray(jax.grad(lambda v: s_h(v @ t.T))(v))
expected_v = np.exp(np.asarray(c)[np.arange(4), cols])[:, None] * np.asarray(t)[cols] / 4
np.testing.assert_allclose(g_v, expected_v, rtol=1e-5, atol=1e-7)

fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
for ax, g, title, label in ((axes[0], g_c, "∂S_H/∂C (MaxMatch)", r"$\partial S_H / \partial C_{ij}$"),
                            (axes[1], g_chamfer, "∂S/∂C (smooth-Chamfer, α=16)", r"$\partial S / \partial C_{ij}$")):
    im = ax.imshow(g, cmap="Blues", vmin=0)
    ax.scatter(cols, np.arange(4), marker="s", s=300, facecolors="none", edgecolors="red", linewidths=2)
    ax.set_title(title + "; red = S_H's matched cells", fontsize=9)
    index_ticks(ax, 4, 4)
    fig.colorbar(im, ax=ax, fraction=0.046, label=label)
cos_to_partner = np.sum(unit(g_v) * np.asarray(t)[cols], axis=1)
axes[2].bar(np.arange(4), np.linalg.norm(g_v, axis=1), color="tab:blue")
for i, cp in enumerate(cos_to_partner):
    axes[2].text(i, 0.004, f"cos to t_{cols[i]}\n{cp:.3f}", ha="center", fontsize=8, color="w")
axes[2].set_title("‖∂S_H/∂v_i‖: each along its partner t_π(i)", fontsize=9)
axes[2].set_xticks(range(4))
axes[2].set_xlabel("image element i")
axes[2].set_ylabel("gradient norm")
fig.tight_layout()
show(fig)
print("matched cells:", [(i, int(j)) for i, j in enumerate(cols)], "| non-zero gradient cells:",
      [tuple(map(int, ij)) for ij in np.argwhere(g_c != 0)])

# %% [markdown]
# ## 5. Ties and masks
#
# **Ties.** With every cell equal, every permutation is optimal. Each solver is deterministic but different solvers
# may choose different permutations — compare totals, never permutations.
#
# **Masks.** Set embeddings of variable size are padded; padded elements must never be matched while a valid
# partner exists. Below, an image set with 2 valid elements of 4 and a caption set with 3 valid of 4; the padded
# cells are given the *highest* scores (0.99) to tempt the solver. The solver matches m = min(2, 3) = 2 valid pairs,
# padded rows come back −1, and S_H with the masks equals S_H of the sliced valid block (the masked cells use a large
# finite penalty, never ±inf).

# %%
tie = jnp.full((4, 4), 0.5)
rows = []
for method in ("enumerate", "auction", "hungarian"):
    cols = np.asarray(matching.solve(tie, method))
    rows.append([method, str(cols.tolist()), float(np.asarray(tie)[np.arange(4), cols].sum())])
display(table(["solver (all cells 0.5)", "cols", "total"], rows, fmt="{:.2f}"))

block = rng.uniform(-0.5, 0.5, size=(4, 4)).astype(np.float32)
row_mask = np.array([True, True, False, False])
col_mask = np.array([True, False, True, True])
block[~row_mask, :] = 0.99
block[:, ~col_mask] = 0.99
rows = []
for method in ("enumerate", "auction", "hungarian"):
    cols = np.asarray(matching.solve(jnp.asarray(block), method, mask=(row_mask, col_mask)))
    assert (cols[~row_mask] == -1).all() and col_mask[cols[row_mask]].all()
    rows.append([method, str(cols.tolist())])
masked = float(block_similarity(jnp.asarray(block), "maxmatch", jnp.asarray(row_mask), jnp.asarray(col_mask)))
sliced = float(block_similarity(jnp.asarray(block[row_mask][:, col_mask]), "maxmatch"))
display(table(["solver (masked)", "cols (−1 = padded row)"], rows))
print(f"S_H with masks = {masked:.6f}; S_H of the sliced valid block = {sliced:.6f}")
assert abs(masked - sliced) < 1e-6

fig, ax = plt.subplots(figsize=(4.6, 3.8))
im = ax.imshow(block, cmap="viridis", vmin=-1, vmax=1)
cols = np.asarray(matching.solve(jnp.asarray(block), "hungarian", mask=(row_mask, col_mask)))
for i in range(4):
    for j in range(4):
        if not (row_mask[i] and col_mask[j]):
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="w", lw=0))
ax.scatter(cols[row_mask], np.flatnonzero(row_mask), marker="s", s=300, facecolors="none", edgecolors="red",
           linewidths=2)
ax.set_title("masked block: hatched = padded (score 0.99), red = matched", fontsize=9)
index_ticks(ax, 4, 4)
fig.colorbar(im, ax=ax, fraction=0.046, label=r"score $C_{ij}$")
show(fig)
