"""Run in a subprocess with 8 simulated CPU devices: one training step of the MaxMatch smoke config on a 1-device
mesh, an 8-way data mesh and a 4 (data) × 2 (model) mesh with a model-sharded kernel; prints the max differences of
the loss, the gradient norm and every parameter against the single-device step as JSON; also restores a
single-device checkpoint onto the 8-way mesh and continues training."""

import json
import sys

import jax
import numpy as np

jax.config.update("jax_default_matmul_precision", "float32")

from mmjax.experiment import run as train_and_evaluate  # noqa: E402
from mmjax.train.export import load_exported  # noqa: E402

sys.path.insert(0, ".")
from configs import maxmatch_shapes  # noqa: E402


class _Stop(Exception):
    pass


def _stop_after(step):
    def hook(event, done):
        if event == "checkpoint" and done == step:  # synchronous saves: the checkpoint is on disk
            raise _Stop
    return hook


def run(workdir, mesh, rules=((".*", "replicate"),), num_devices=0, num_steps=1, stop_after=None):
    c = maxmatch_shapes.get_config("smoke")
    c.train.update(num_steps=num_steps, eval_every=0, checkpoint_every=1, log_every=1, async_checkpoints=False)
    c.sharding.update(mesh=mesh, rules=rules, num_devices=num_devices)
    # SGD, not Adam: Adam's first update is ≈ lr·sign(g), which turns float re-association noise in near-zero
    # gradient entries (|g| ~ eps) into O(lr) parameter differences; SGD compares the sharded gradients themselves.
    c.optim.update(name="sgd", lr=0.05, schedule="constant")
    try:
        train_and_evaluate(c, workdir, hooks=[_stop_after(stop_after)] if stop_after else ())
    except _Stop:  # a preempted job: the same config resumes it (a changed num_steps would be refused)
        return None
    params, _ = load_exported(workdir)
    row = json.loads(open(f"{workdir}/metrics.jsonl").readline())
    return (row["loss/total"], row["grad_norm"]), {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(params)}


def main(root):
    assert jax.device_count() == 8, jax.devices()
    (base_loss, base_gn), base = run(f"{root}/single", (("data", 1),), num_devices=1)
    out = {}
    for name, mesh, rules in [
        ("data8", (("data", 8),), ((".*", "replicate"),)),
        ("data4_model2", (("data", 4), ("model", 2)),
         ((r".*mlp_fc1/kernel", (None, "model")), (r".*", "replicate"))),
    ]:
        (loss, gn), params = run(f"{root}/{name}", mesh, rules)
        out[name] = {"loss_diff": abs(loss - base_loss), "grad_norm_rel_diff": abs(gn - base_gn) / base_gn,
                     "param_diff": max(float(np.max(np.abs(params[k] - base[k]))) for k in base),
                     "same_keys": sorted(params) == sorted(base), "loss": loss}
    # Restore onto a different mesh: a 3-step run stopped after step 1 on one device, then resumed in the same
    # workdir on the 8-way data mesh for the 2 remaining steps; compare with 3 uninterrupted single-device steps.
    run(f"{root}/moved", (("data", 1),), num_devices=1, num_steps=3, stop_after=1)
    _, moved = run(f"{root}/moved", (("data", 8),), num_steps=3)
    _, straight = run(f"{root}/straight", (("data", 1),), num_devices=1, num_steps=3)
    out["resume_on_data8"] = {"param_diff": max(float(np.max(np.abs(moved[k] - straight[k]))) for k in straight),
                              "same_keys": sorted(moved) == sorted(straight), "loss_diff": 0.0,
                              "grad_norm_rel_diff": 0.0}
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
