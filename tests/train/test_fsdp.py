"""`sharding.preset=fsdp` on 8 simulated devices (issue #28 item 1): every train-state leaf — parameters and their
optimiser moments — with at least `fsdp_min_size` elements is split 8 ways over the data axis, smaller ones are
replicated, and 3 SGD steps give the losses and parameters of data parallelism and of one device — as do hand-written
rules with an "fsdp" entry beside a model-parallel one. In-process: the layout the forward pass reads the parameters
in (`forward_shardings`) gathers exactly the leaves stored under "fsdp" rules."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, AxisType, PartitionSpec as P

from mmjax.train.sharding import PRESETS, forward_shardings, tree_shardings

from tests.train.helpers import run_python


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    proc = run_python(["tests/train/fsdp_worker.py", str(tmp_path_factory.mktemp("fsdp"))], devices=8)
    return json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])


@pytest.mark.slow
def test_fsdp_shards_every_large_parameter_and_its_optimiser_state(result):
    from tests.train.fsdp_worker import MIN_SIZE
    leaves = result["layout"]
    split = [x for x in leaves if x["axes"]]
    assert split, "nothing was sharded"
    for x in leaves:
        if x["size"] >= MIN_SIZE and any(d % 8 == 0 for d in x["shape"]):
            assert x["axes"] == ["data"], x                                   # split over the data axis ...
            assert int(np.prod(x["shard"])) * 8 == x["size"], x              # ... 8 ways: 1/8 on each device
        else:
            assert not x["axes"], x                                           # small or indivisible: replicated
    # Adam's two moments follow their parameter: each split parameter has its mu and nu split the same way.
    params = {x["path"][len("params/"):]: x["shard"] for x in split if x["path"].startswith("params/")}
    moments = [x for x in split if x["path"].startswith("opt_state/")]
    assert params and len(moments) >= 2 * len(params), (len(params), len(moments))
    for name, shard in params.items():
        twins = [x for x in moments if x["path"].endswith("/" + name)]
        assert len(twins) == 2 and all(t["shard"] == shard for t in twins), (name, twins)

@pytest.mark.slow
@pytest.mark.parametrize("name", ["data_parallel", "fsdp", "hand_rules"])
def test_fsdp_and_data_parallel_train_like_one_device(result, name):
    r = result[name]
    assert r["same_keys"] and len(r["losses"]) == 3, r
    assert r["loss_diff"] < 1e-5, r
    assert r["param_diff"] < 1e-5, r


def test_forward_layout_gathers_only_the_leaves_stored_under_fsdp_rules():
    mesh = AbstractMesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    f32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    params = {"embed": {"kernel": f32(64, 32)}, "head": {"kernel": f32(32, 16), "bias": f32(16)},
              "small": {"kernel": f32(4, 4)}}
    rules = (("embed/.*", "fsdp"), ("head/kernel", (None, "model")), (".*", "replicate"))
    spec = lambda tree: jax.tree_util.tree_map(lambda s: s.spec, tree)
    stored, forward = spec(tree_shardings(params, rules, mesh, 64)), spec(forward_shardings(params, rules, mesh, 64))
    assert stored["embed"]["kernel"] == P("data", None) and forward["embed"]["kernel"] == P()   # gathered
    assert stored["head"]["kernel"] == forward["head"]["kernel"] == P(None, "model")           # model split kept
    assert forward["head"]["bias"] == forward["small"]["kernel"] == P()
    assert forward_shardings(params, PRESETS["data_parallel"], mesh, 64) is None    # nothing split: no constraint
    preset = spec(forward_shardings(params, PRESETS["fsdp"], mesh, 64))
    assert all(x == P() for x in jax.tree_util.tree_leaves(preset, is_leaf=lambda x: isinstance(x, P)))
