"""`sharding.preset=fsdp` on 8 simulated devices (issue #28 item 1): every train-state leaf — parameters and their
optimiser moments — with at least `fsdp_min_size` elements is split 8 ways over the data axis, smaller ones are
replicated, and 3 SGD steps give the losses and parameters of data parallelism and of one device."""

import json

import numpy as np
import pytest

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
@pytest.mark.parametrize("name", ["data_parallel", "fsdp"])
def test_fsdp_and_data_parallel_train_like_one_device(result, name):
    r = result[name]
    assert r["same_keys"] and len(r["losses"]) == 3, r
    assert r["loss_diff"] < 1e-5, r
    assert r["param_diff"] < 1e-5, r
