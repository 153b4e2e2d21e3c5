"""Run in a subprocess with 8 simulated CPU devices: the `sharding.preset=fsdp` train state of the MaxMatch smoke
model (which leaves are split, over which axis), and 3 SGD steps under data parallelism and under FSDP, both against
one device; prints JSON after "RESULT "."""

import json
import sys

import jax
import numpy as np

jax.config.update("jax_default_matmul_precision", "float32")

from mmjax.tasks import build_task  # noqa: E402
from mmjax.experiment import run as train_and_evaluate  # noqa: E402
from mmjax.train.export import load_exported  # noqa: E402
from mmjax.train.optim import make_optimizer  # noqa: E402
from mmjax.train.sharding import make_mesh, path_name, rules_for  # noqa: E402
from mmjax.train.state import create_train_state  # noqa: E402

sys.path.insert(0, ".")
from configs import maxmatch_shapes  # noqa: E402

MIN_SIZE = 512  # the smoke model is tiny: a low threshold so that most of its weights are large enough to split


# Hand-written rules: the large kernels split by "fsdp" over `data`, the embedding tables split over `model`
# (a tuple rule the step's gather must leave alone), the rest replicated.
HAND_RULES = ((".*embedding", (None, "model")), (".*kernel", "fsdp"), (".*", "replicate"))


def config(mesh, preset, num_devices=0, optimizer="sgd", rules=None):
    c = maxmatch_shapes.get_config("smoke")
    c.train.update(num_steps=3, eval_every=0, checkpoint_every=3, log_every=1, async_checkpoints=False)
    c.sharding.update(mesh=mesh, preset=preset, fsdp_min_size=MIN_SIZE, num_devices=num_devices)
    if rules is not None:
        c.sharding.rules = rules
    if optimizer == "sgd":  # see sharding_worker.py: SGD compares the gradients themselves
        c.optim.update(name="sgd", lr=0.05, schedule="constant")
    return c


def state_layout(root):
    """Every leaf of the FSDP train state: its size, the mesh axes it is split over, and its per-device shard."""
    c = config((("data", 8),), "fsdp", optimizer="config")  # the config's Adam: moments to shard
    task = build_task(c, f"{root}/layout")
    sample = task.prepare_batch(task.make_iterator((0, 0)).batch_at(0, 0))
    params_shape = jax.eval_shape(lambda r: task.init_variables(r, sample), jax.random.PRNGKey(0))["params"]
    tx, _ = make_optimizer(c.optim, params_shape, 3)
    mesh = make_mesh(tuple(c.sharding.mesh))
    state, _ = create_train_state(lambda r: task.init_variables(r, sample), tx, jax.random.PRNGKey(0), mesh,
                                  rules_for(c.sharding), c.sharding.fsdp_min_size)
    leaves = []
    for path, x in jax.tree_util.tree_leaves_with_path(state):
        spec = [a for a in x.sharding.spec if a is not None]
        leaves.append({"path": path_name(path), "size": int(x.size), "shape": list(x.shape), "axes": spec,
                       "shard": list(x.addressable_shards[0].data.shape)})
    return leaves


def losses_and_params(workdir, mesh, preset, num_devices=0, rules=None):
    train_and_evaluate(config(mesh, preset, num_devices, rules=rules), workdir)
    params, _ = load_exported(workdir)
    rows = [json.loads(line) for line in open(f"{workdir}/metrics.jsonl")]
    return ([r["loss/total"] for r in rows if "loss/total" in r],
            {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(params)})


def main(root):
    assert jax.device_count() == 8, jax.devices()
    out = {"layout": state_layout(root)}
    base_loss, base = losses_and_params(f"{root}/single", (("data", 1),), "rules", num_devices=1)
    for name, preset, mesh, rules in (("data_parallel", "data_parallel", (("data", 8),), None),
                                      ("fsdp", "fsdp", (("data", 8),), None),
                                      ("hand_rules", "rules", (("data", 4), ("model", 2)), HAND_RULES)):
        loss, params = losses_and_params(f"{root}/{name}", mesh, preset, rules=rules)
        out[name] = {"losses": loss, "base_losses": base_loss,
                     "loss_diff": max(abs(a - b) for a, b in zip(loss, base_loss)),
                     "param_diff": max(float(np.max(np.abs(params[k] - base[k]))) for k in base),
                     "same_keys": sorted(params) == sorted(base)}
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
