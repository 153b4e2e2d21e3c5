"""`loss.false_negatives='ignore'` through the retrieval task (docs/design.md#false-negatives): its batches carry
`caption_true`, its jitted loss keeps those pairs out of the negatives (the refusal of a source that cannot tell:
tests/data/test_pair_truth.py)."""

import jax
import numpy as np

from mmjax import losses


def _task(**loss):
    from configs import vse_shapes
    from mmjax.tasks.retrieval import RetrievalTask
    config = vse_shapes.get_config("smoke")
    config.data.batch_size = 16
    config.loss.update(loss)
    return RetrievalTask(config), config


def test_the_task_loss_ignores_the_batch_pairs_and_equals_the_objective():
    task, config = _task(false_negatives="ignore")
    batch = task.prepare_batch(task.make_iterator().batch_at(0, 0))
    ignore = batch["caption_true"] & ~(batch["caption_image"][None, :] == np.arange(16)[:, None])
    assert ignore.any()                                            # the batch has false negatives to ignore
    variables = task.init_variables(jax.random.PRNGKey(0), batch)
    params, extra = variables["params"], {k: v for k, v in variables.items() if k != "params"}
    loss = jax.jit(lambda p, b: task.loss(p, extra, b, jax.random.PRNGKey(1), False)[0])
    got = loss(params, batch)
    kept = loss(params, {**batch, "caption_true": np.zeros_like(batch["caption_true"])})
    assert abs(float(got) - float(kept)) > 1e-4                    # the mask reaches the loss

    out, _ = task.model.apply(variables, *task._image_inputs(batch), batch["caption_ids"], batch["caption_mask"],
                              train=True, mutable=list(extra.keys()), rngs={"dropout": jax.random.PRNGKey(1)})
    ref, _ = losses.maxmatch_objective(out["image"], out["text"], batch["caption_image"], config.loss, warmup=False,
                                       image_valid=batch["example_valid"],
                                       caption_valid=batch["example_valid"][batch["caption_image"]],
                                       ignore_pairs=batch["caption_true"])
    np.testing.assert_allclose(got, ref, rtol=2e-5)


def test_keep_adds_nothing_to_the_batch():
    task, _ = _task()
    assert "caption_true" not in task.prepare_batch(task.make_iterator().batch_at(0, 0))

