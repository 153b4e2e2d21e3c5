"""Optimiser construction from config, and the trainer's guards (non-finite loss, bf16 compute)."""

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from mmjax.train.optim import make_optimizer, make_schedule
from tests.train.helpers import run_python, train_cmd


def cfg(**kw):
    base = dict(name="adamw", lr=1.0, weight_decay=0.0, schedule="cosine", warmup_steps=0, clip_norm=None,
                lr_mults=())
    base.update(kw)
    return ml_collections.ConfigDict(base)


def test_schedules():
    cos = make_schedule(cfg(lr=2.0), 100)
    np.testing.assert_allclose([cos(0), cos(50), cos(100)], [2.0, 1.0, 0.0], atol=1e-6)
    warm = make_schedule(cfg(lr=1.0, warmup_steps=10, schedule="constant"), 100)
    np.testing.assert_allclose([warm(0), warm(5), warm(10), warm(60)], [0.0, 0.5, 1.0, 1.0], atol=1e-6)
    step = make_schedule(cfg(lr=1.0, schedule="step", boundaries=(30, 60), decay_factor=0.1), 100)
    np.testing.assert_allclose([step(10), step(40), step(70)], [1.0, 0.1, 0.01], rtol=1e-6)
    with pytest.raises(ValueError, match="optim.schedule"):
        make_schedule(cfg(schedule="linear"), 10)


def test_per_group_learning_rates_and_clipping():
    params = {"image_tower": {"w": jnp.ones(3)}, "text_tower": {"w": jnp.ones(3)}}
    grads = {"image_tower": {"w": jnp.ones(3)}, "text_tower": {"w": jnp.ones(3)}}
    tx, _ = make_optimizer(cfg(name="sgd", momentum=0.0, schedule="constant", lr=1.0,
                               lr_mults=((r"image_tower/.*", 0.1),)), params, 10)
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(updates["image_tower"]["w"], -0.1)
    np.testing.assert_allclose(updates["text_tower"]["w"], -1.0)
    tx, _ = make_optimizer(cfg(name="sgd", momentum=0.0, schedule="constant", lr=1.0, clip_norm=1.0), params, 10)
    updates, _ = tx.update(grads, tx.init(params), params)
    norm = float(jnp.sqrt(sum(jnp.sum(u ** 2) for u in jax.tree_util.tree_leaves(updates))))
    assert norm == pytest.approx(1.0, rel=1e-5)  # global norm √6 clipped to 1


@pytest.mark.slow
def test_non_finite_loss_stops_with_clear_message(tmp_path):
    workdir = str(tmp_path / "nan")
    proc = run_python(train_cmd("configs/maxmatch_shapes.py:smoke", workdir, "--config.optim.name=sgd",
                                "--config.optim.lr=1e30", "--config.optim.clip_norm=0", "--config.train.log_every=1",
                                "--config.train.num_steps=6", "--config.train.checkpoint_every=1"), check=False)
    assert proc.returncode != 0
    assert "non-finite loss" in proc.stderr and "last good checkpoint" in proc.stderr
    assert not os.path.exists(os.path.join(workdir, "export"))


@pytest.mark.slow
def test_bfloat16_compute_trains(tmp_path):
    workdir = str(tmp_path / "bf16")
    run_python(train_cmd("configs/maxmatch_shapes.py:smoke", workdir, "--config.train.compute_dtype=bfloat16"))
    rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl")) if "loss/total" in line]
    assert all(np.isfinite(r["loss/total"]) for r in rows)


def test_ramp_weight_follows_the_state_step():
    """The retrieval phases (`hard_negative_phases`): warm-up hands the task True, the ramp w = 1 − (step − start +
    1)/length clipped to [0, 1] computed from the state's step inside the jitted step (so a resumed run continues the
    ramp), then False; `make_train_step` runs each phase's value."""
    import optax
    from mmjax.tasks.retrieval import hard_negative_phases
    from mmjax.train.loop import make_train_step
    from mmjax.train.state import TrainState

    class WeightTask:  # loss = w · x: the gradient step is visible, and the metric is the weight the step saw
        float_inputs = ()

        def loss(self, params, extra, batch, rng, phase):
            w = jnp.asarray(phase, jnp.float32)
            return w * params["x"], ({"w": w}, extra)

    tx = optax.sgd(0.0)
    state = lambda s: TrainState(step=jnp.int32(s), params={"x": jnp.float32(1.0)}, extra={},
                                 opt_state=tx.init({"x": jnp.float32(1.0)}), rng=jax.random.PRNGKey(0))
    warmup, ramp, hard = hard_negative_phases(1, 0.4, steps_per_epoch=10)
    assert [(p.name, p.start, p.stop) for p in (warmup, ramp, hard)] == [("warmup", 0, 10), ("ramp", 10, 14),
                                                                         ("hard", 14, None)]
    ramp_step = jax.jit(make_train_step(WeightTask(), tx, ramp))
    seen = [float(ramp_step(state(s), {}, jax.random.PRNGKey(0))[1]["w"]) for s in (9, 10, 11, 13, 14)]
    np.testing.assert_allclose(seen, [1.0, 0.75, 0.5, 0.0, 0.0])
    for phase, w in ((warmup, 1.0), (hard, 0.0)):
        step = jax.jit(make_train_step(WeightTask(), tx, phase))
        assert float(step(state(0), {}, jax.random.PRNGKey(0))[1]["w"]) == w
    assert [p.name for p in hard_negative_phases(0, 0.0, 10)] == ["hard"]  # empty phases are left out
