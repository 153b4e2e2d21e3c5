"""Optimisers and learning-rate schedules from config (`config.optim`).

    optim.name          'adamw' | 'adam' | 'sgd'
    optim.lr            base learning rate
    optim.schedule      'cosine' (annealed per step to `lr·final_frac` over all steps) | 'constant' | 'step'
    optim.warmup_steps  linear warm-up from 0 (0 = none; the Set Div recipe has none)
    optim.boundaries, optim.decay_factor   'step' schedule: lr·decay_factorⁱ after the i-th boundary (in steps)
    optim.weight_decay  decoupled weight decay (AdamW), applied to every parameter matched by `decay_regex`
    optim.lr_mults      ((regex, multiplier), ...): per-group learning rates, first match wins, default 1
                        (Set Div: ×0.1 for image-side non-CNN parameters and the text set-prediction module)
    optim.clip_norm     global gradient-norm clip over all parameters (None = off)
    optim.b1, b2, eps, momentum

Per-group rates use `optax.multi_transform` with one labelled copy of the optimiser per distinct multiplier; the global
norm clip is applied before the split, like `torch.nn.utils.clip_grad_norm_` over all parameters.
"""

import re

import jax
import optax

from mmjax.train.sharding import path_name


def make_schedule(cfg, total_steps: int):
    lr = float(cfg.lr)
    warmup = int(cfg.get("warmup_steps", 0) or 0)
    kind = cfg.get("schedule", "cosine")
    decay_steps = max(1, total_steps - warmup)
    if kind == "cosine":
        main = optax.cosine_decay_schedule(lr, decay_steps, alpha=float(cfg.get("final_frac", 0.0)))
    elif kind == "constant":
        main = optax.constant_schedule(lr)
    elif kind == "step":
        boundaries = {int(b) - warmup: float(cfg.get("decay_factor", 0.1)) for b in cfg.get("boundaries", ())}
        main = optax.piecewise_constant_schedule(lr, boundaries)
    else:
        raise ValueError(f"optim.schedule must be 'cosine', 'constant' or 'step', got {kind!r}")
    if warmup:
        return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), main], [warmup])
    return main


def _base(cfg, schedule, mult: float, decay_mask):
    lr = lambda step: schedule(step) * mult
    name = cfg.get("name", "adamw")
    if name == "adamw":
        return optax.adamw(lr, b1=cfg.get("b1", 0.9), b2=cfg.get("b2", 0.999), eps=cfg.get("eps", 1e-8),
                           weight_decay=float(cfg.get("weight_decay", 1e-4)), mask=decay_mask)
    if name == "adam":
        return optax.adam(lr, b1=cfg.get("b1", 0.9), b2=cfg.get("b2", 0.999), eps=cfg.get("eps", 1e-8))
    if name == "sgd":
        return optax.sgd(lr, momentum=cfg.get("momentum", 0.9))
    raise ValueError(f"optim.name must be 'adamw', 'adam' or 'sgd', got {name!r}")


def make_optimizer(cfg, params, total_steps: int):
    """(optax.GradientTransformation, schedule) for `params` (used only for its tree structure and names)."""
    schedule = make_schedule(cfg, total_steps)
    mults = tuple((str(p), float(m)) for p, m in cfg.get("lr_mults", ()) or ())
    decay_regex = cfg.get("decay_regex", ".*")
    names = jax.tree_util.tree_map_with_path(lambda path, _: path_name(path), params)
    decay_mask = jax.tree_util.tree_map(lambda n: re.fullmatch(decay_regex, n) is not None, names)

    def mult_of(name):
        for pattern, m in mults:
            if re.fullmatch(pattern, name):
                return m
        return 1.0

    labels = jax.tree_util.tree_map(lambda n: f"x{mult_of(n):g}", names)
    distinct = sorted(set(jax.tree_util.tree_leaves(labels)))
    if distinct == ["x1"]:
        tx = _base(cfg, schedule, 1.0, decay_mask)
    else:
        tx = optax.multi_transform({lab: _base(cfg, schedule, float(lab[1:]), decay_mask) for lab in distinct}, labels)
    clip = cfg.get("clip_norm", None)
    if clip:
        tx = optax.chain(optax.clip_by_global_norm(float(clip)), tx)
    return tx, schedule
