"""Mechanism oracle for the Flow-CLIP rows: can the heads, trained as the study trains them, show each claimed effect
where the effect is planted and known to be expressible? (docs/reproduction/flowclip_protocol.md, change list.)

A planted world of frozen features (numpy, seeded). Colour and shape embeddings e_c, e_s ∈ R^d (unit Gaussian
directions); an image holds two objects (c₁, s₁), (c₂, s₂) with distinct colours and shapes:

    image tokens   p_j = e_{c_j} + e_{s_j} + σ ε           (j = 1, 2: colour and shape bound per token)
                   + `n_background` noise tokens σ ε
    image global   v = Σ_j (e_{c_j} + e_{s_j}) + σ ε         (a bag: no binding)
    caption        tokens h_j = e_{c_j} + e_{s_j} + σ ε, global t = Σ_j (e_{c_j} + e_{s_j}) + σ ε

Colours are drawn with weights 1 for the common ones and `rare_weight` for the last `n_rare`. Each record has one
hard negative of one type, half each:

    swap      (c₁, s₂), (c₂, s₁): the same bag, so Global-M sits at chance by construction; the bound tokens carry
              the answer (the binding gain's mechanism)
    replace   c₁ → a colour absent from the image, rare with probability `prior` (else uniform over the absent
              ones): a caption-only cue (rare colour ⇒ negative) that a text-only model learns and that any image
              of common colours rewards under Shuffle/Fixed (the language prior CIMR's claim is about)

Heads: `FlowCLIPHead` + `head_objective`, Adam 1e-3, batch 64, constant rate, the project's Flow-CLIP defaults
(α, τ_p, κ, λ_CIMR = 0.1) — the study's head recipe on features where the answer is known. Controls follow
`mmjax.evaluation.controls` (its `replacement_indices`): Real = the record's image; Shuffle = a seeded derangement of
the test images; Fixed = one anchor image for every record but its own; accuracy = how often the positive scores
strictly higher.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mmjax.evaluation.blind import fit_blind
from mmjax.evaluation.controls import CONDITIONS, replacement_indices
from mmjax.flowclip import FlowCLIPOptions
from mmjax.models.flowclip_head import FlowCLIPHead, head_objective
from reproduce import paths, stats
from reproduce.flowclip_study import EQUIV_MARGIN, REMOVED_SHARE

# (local branch, λ_CIMR): the study's three heads, CIMR at the project's (the paper's) default weight
HEADS = {"globalm_hnb": (False, 0.0), "flowclip_hnb": (True, 0.0),
         "flowclip_cimr": (True, FlowCLIPOptions().lambda_cimr)}
TYPES = ("swap", "replace")
CHANCE = 50.0
# Declared in docs/reproduction/flowclip_protocol.md (change list, 2026-12-06) before the recorded run.
NOISES = (0.05, 0.1, 0.2, 0.3)
SEEDS = (0, 1, 2, 3, 4)
STEPS = 600
RECORD = os.path.join(paths.ROOT, "docs", "reproduction", "oracles", "flowclip_planted.json")


@dataclasses.dataclass(frozen=True)
class PlantedWorld:
    """The planted world's knobs (module docstring); `noise` is σ, the grid's axis."""
    dim: int = 32
    n_colours: int = 8
    n_shapes: int = 8
    n_rare: int = 2
    rare_weight: float = 0.1
    prior: float = 0.9
    noise: float = 0.1
    n_background: int = 2
    n_train: int = 4000
    n_test: int = 1000


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _encode(objects, colours, shapes, noise, rng, n_background=0):
    """objects int [n, 2, 2] (colour, shape) → tokens [n, 2 + n_background, d], global [n, d]."""
    bound = colours[objects[..., 0]] + shapes[objects[..., 1]]
    tokens = bound + noise * rng.standard_normal(bound.shape)
    if n_background:
        back = noise * rng.standard_normal((len(objects), n_background, bound.shape[-1]))
        tokens = np.concatenate([tokens, back], axis=1)
    glob = bound.sum(1) + noise * rng.standard_normal(bound.shape[::2])
    return tokens.astype(np.float32), glob.astype(np.float32)


def planted_world(world: PlantedWorld, seed: int) -> dict:
    """Features of `n_train + n_test` images, one positive and one typed hard negative caption each (module doc)."""
    rng = np.random.default_rng(seed)
    colours = _unit(rng.standard_normal((world.n_colours, world.dim)))
    shapes = _unit(rng.standard_normal((world.n_shapes, world.dim)))
    weights = np.ones(world.n_colours)
    weights[world.n_colours - world.n_rare:] = world.rare_weight
    rare = np.arange(world.n_colours - world.n_rare, world.n_colours)
    n = world.n_train + world.n_test
    objects = np.zeros((n, 2, 2), np.int64)
    for i in range(n):
        objects[i, :, 0] = rng.choice(world.n_colours, 2, replace=False, p=weights / weights.sum())
        objects[i, :, 1] = rng.choice(world.n_shapes, 2, replace=False)
    kind = rng.integers(0, 2, n)  # 0 swap, 1 replace
    negative = objects.copy()
    negative[kind == 0, 0, 1], negative[kind == 0, 1, 1] = objects[kind == 0, 1, 1], objects[kind == 0, 0, 1]
    for i in np.flatnonzero(kind == 1):
        absent = np.setdiff1d(np.arange(world.n_colours), objects[i, :, 0])
        absent_rare = np.intersect1d(absent, rare)
        pool = absent_rare if absent_rare.size and rng.random() < world.prior else absent
        negative[i, 0, 0] = rng.choice(pool)
    patches, image_global = _encode(objects, colours, shapes, world.noise, rng, world.n_background)
    pos_tokens, pos_global = _encode(objects, colours, shapes, world.noise, rng)
    neg_tokens, neg_global = _encode(negative, colours, shapes, world.noise, rng)
    valid = np.ones(pos_tokens.shape[:2], bool)
    return {"image": {"global": image_global, "patches": patches},
            "pos_text": {"global": pos_global, "tokens": pos_tokens, "valid": valid},
            "neg_text": {"global": neg_global, "tokens": neg_tokens, "valid": valid},
            "kind": kind, "n_train": world.n_train}


_Record = collections.namedtuple("_Record", "task identity")   # what `replacement_indices` reads of a record


def _take(tree, idx):
    return {k: v[idx] for k, v in tree.items()}


def train_head(world: dict, head_key: str, seed: int, steps: int, batch_size: int = 64):
    """(head, params, last metrics) after `steps` Adam steps on the training records (the study's recipe)."""
    use_local, lambda_cimr = HEADS[head_key]
    opts = FlowCLIPOptions(use_local=use_local, lambda_cimr=lambda_cimr)
    dim = world["image"]["global"].shape[-1]
    head = FlowCLIPHead(dim=dim, options=opts)
    optimizer = optax.adam(1e-3)
    params = head.init(jax.random.PRNGKey(seed), _take(world["image"], [0]), _take(world["pos_text"], [0]))["params"]
    opt_state = optimizer.init(params)

    @jax.jit
    def step(params, opt_state, batch, rng):
        (_, metrics), grads = jax.value_and_grad(head_objective, argnums=1, has_aux=True)(head, params, batch, rng)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics

    n = world["n_train"]
    order_rng = np.random.default_rng([seed, 1])
    order, metrics = order_rng.permutation(n), {}
    for k in range(steps):
        start = (k * batch_size) % (n - batch_size + 1)
        if start < batch_size and k:
            order = order_rng.permutation(n)
        idx = order[start:start + batch_size]
        batch = {"image": _take(world["image"], idx), "pos_text": _take(world["pos_text"], idx),
                 "neg_text": _take(world["neg_text"], idx), "image_ids": idx, "neg_valid": np.ones(len(idx), bool)}
        params, opt_state, metrics = step(params, opt_state, batch, jax.random.fold_in(jax.random.PRNGKey(seed), k))
    return head, params, {m: float(v) for m, v in metrics.items()}


def replacement_images(test: np.ndarray, seed: int) -> dict:
    """{condition: image row per test record}, by the library's rule (`mmjax.evaluation.controls`, every image its own
    identity, one task): Real its own; Shuffle a seeded derangement (never its own); Fixed one anchor (whose own
    record `controls` leaves out)."""
    records = [_Record(task="planted", identity=int(i)) for i in test]
    out = {}
    for cond in CONDITIONS:
        idx = replacement_indices(records, cond, seed=seed)
        if cond == "fixed":  # the library marks the anchor's own record −1; it keeps the anchor here and is left out
            idx = np.where(idx >= 0, idx, int(idx.max()))
        out[cond] = test[idx]
    return out


def controls(world: dict, head, params, seed: int = 0) -> dict:
    """{type: {condition: accuracy %}} on the test records (module docstring)."""
    test = np.arange(world["n_train"], len(world["kind"]))
    images = replacement_images(test, seed)

    @jax.jit
    def margins(image, pos, neg):
        score = jax.vmap(lambda i, p, q: head.apply({"params": params}, _one(i), _stack(p, q))[0])
        s = score(image, pos, neg)
        return s[:, 0] - s[:, 1]

    out = {}
    for cond, rows in images.items():
        m = np.asarray(margins(_take(world["image"], rows), _take(world["pos_text"], test),
                               _take(world["neg_text"], test)))
        keep = np.ones(len(test), bool) if cond != "fixed" else test != rows
        for t, name in enumerate(TYPES):
            sel = keep & (world["kind"][test] == t)
            out.setdefault(name, {})[cond] = float(100.0 * np.mean(m[sel] > 0))
    return out


def _one(tree):
    return {k: v[None] for k, v in tree.items()}


def _stack(a, b):
    return {k: jnp.stack([a[k], b[k]]) for k in a}


def blind_accuracy(world: dict) -> dict:
    """The blind baseline (`mmjax.evaluation.blind`) on the text globals: fitted on the training pairs, scored on
    the test records of each type ({type: %}, plus the held-out pair accuracy)."""
    n, pos, neg = world["n_train"], world["pos_text"]["global"], world["neg_text"]["global"]
    model = fit_blind(pos[:n], neg[:n])
    test_kind = world["kind"][n:]
    correct = model.score(pos[n:]) > model.score(neg[n:])
    return {**{name: float(100.0 * np.mean(correct[test_kind == t])) for t, name in enumerate(TYPES)},
            "holdout_pair_accuracy": model.holdout_accuracy}


def run(noises=NOISES, seeds=SEEDS, steps: int = STEPS, world: PlantedWorld = PlantedWorld(), log=print) -> dict:
    """Every (noise, seed): one planted world (seed), its blind baseline and the three heads' controls."""
    runs, t0, total, done = [], time.perf_counter(), len(noises) * len(seeds), 0
    for noise in noises:
        for seed in seeds:
            w = planted_world(dataclasses.replace(world, noise=noise), seed)
            entry = {"noise": noise, "seed": seed, "blind": blind_accuracy(w), "heads": {}}
            for key in HEADS:
                head, params, metrics = train_head(w, key, seed, steps)
                entry["heads"][key] = {"controls": controls(w, head, params, seed), "last_metrics": metrics}
            runs.append(entry)
            done += 1
            rate = (time.perf_counter() - t0) / done
            log(f"[oracle] noise {noise:g} seed {seed}: {done}/{total} worlds, {rate:.0f} s/world, "
                f"ETA {rate * (total - done) / 60:.1f} min")
    return {"world": dataclasses.asdict(world), "noises": list(noises), "seeds": list(seeds), "steps": steps,
            "batch_size": 64, "learning_rate": 1e-3, "heads": {k: {"use_local": u, "lambda_cimr": l}
                                                              for k, (u, l) in HEADS.items()},
            "runs": runs, "wall_s": time.perf_counter() - t0}


def summarise(record: dict) -> list[dict]:
    """Per noise level, the study's row quantities on the planted world (paired by seed, the study's tests)."""
    out = []
    for noise in record["noises"]:
        runs = [r for r in record["runs"] if r["noise"] == noise]
        acc = {k: {(t, c): [r["heads"][k]["controls"][t][c] for r in runs] for t in TYPES
                   for c in ("real", "shuffle", "fixed")} for k in HEADS}
        gain = stats.paired_test(acc["globalm_hnb"][("swap", "real")], acc["flowclip_hnb"][("swap", "real")])
        row = {"noise": noise, "n": len(runs), "binding": {
            "globalm": float(np.mean(acc["globalm_hnb"][("swap", "real")])),
            "flowclip": float(np.mean(acc["flowclip_hnb"][("swap", "real")])), "test": gain},
            "blind": float(np.mean([r["blind"]["replace"] for r in runs]))}
        for cond in ("shuffle", "fixed"):
            a, b = acc["flowclip_hnb"][("replace", cond)], acc["flowclip_cimr"][("replace", cond)]
            d = [(x - y) - REMOVED_SHARE * (x - CHANCE) for x, y in zip(a, b)]
            row[cond] = {"excess_hnb": float(np.mean(a)) - CHANCE, "excess_cimr": float(np.mean(b)) - CHANCE,
                         "test": stats.one_sample_test(d), "moved": stats.paired_test(a, b)}
        real = stats.paired_test(acc["flowclip_hnb"][("replace", "real")], acc["flowclip_cimr"][("replace", "real")])
        row["real"] = {"hnb": float(np.mean(acc["flowclip_hnb"][("replace", "real")])), "test": real,
                       "delta": float(np.mean(np.subtract(acc["flowclip_cimr"][("replace", "real")],
                                                          acc["flowclip_hnb"][("replace", "real")]))),
                       "verdict": stats.verdict(real, "equal", margin=EQUIV_MARGIN)}
        out.append(row)
    return out


def load(path: str = RECORD) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="Flow-CLIP mechanism oracle on planted features (module docstring).")
    p.add_argument("--out", default=RECORD, help="record path (JSON)")
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--seeds", type=int, default=len(SEEDS))
    args = p.parse_args(argv)
    from reproduce.runner import code_version  # the commit the record ran on, as the cells record it
    record = run(seeds=tuple(range(args.seeds)), steps=args.steps)
    record.update(code=code_version(), date=time.strftime("%Y-%m-%d"),
                  machine=f"{os.cpu_count()} CPU core(s), {platform.machine()} {platform.system()}, "
                          f"jax {jax.__version__} ({jax.default_backend()})")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    print(f"[oracle] wrote {args.out} ({record['wall_s'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
