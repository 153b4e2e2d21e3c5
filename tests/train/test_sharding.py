"""One step on 8 simulated devices (data, data×model meshes) equals the single-device step; a checkpoint written on
one device restores onto the 8-device mesh and training continues as if uninterrupted."""

import json

import pytest

from tests.train.helpers import run_python


@pytest.mark.slow
def test_sharded_step_matches_single_device(tmp_path):
    proc = run_python(["tests/train/sharding_worker.py", str(tmp_path)], devices=8)
    result = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    for name in ("data8", "data4_model2", "resume_on_data8"):
        r = result[name]
        assert r["same_keys"]
        assert r["loss_diff"] < 1e-5, r
        assert r["grad_norm_rel_diff"] < 1e-5, r
        assert r["param_diff"] < 1e-5, r
