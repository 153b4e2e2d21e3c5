"""Bad configs fail with a clear error before any compute."""

import json

import pytest

from tests.train.helpers import run_python, train_cmd


def test_unknown_config_key_is_rejected(tmp_path):
    proc = run_python(train_cmd("configs/maxmatch_shapes.py:smoke", str(tmp_path), "--config.train.num_stepz=3"),
                      check=False)
    assert proc.returncode != 0
    assert "num_stepz" in proc.stderr


def test_unknown_variant_is_rejected(tmp_path):
    proc = run_python(train_cmd("configs/maxmatch_shapes.py:smok", str(tmp_path)), check=False)
    assert proc.returncode != 0 and "unknown variant" in proc.stderr


def test_missing_paths_named(tmp_path):
    from configs import maxmatch_coco
    from mmjax.experiment import run as train_and_evaluate
    c = maxmatch_coco.get_config("bigru")
    c.data.path = str(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="config.data.path"):
        train_and_evaluate(c, str(tmp_path / "w"))
    from configs import flowclip_shapes
    c = flowclip_shapes.get_config("smoke")
    c.data.clip_workdir = str(tmp_path / "no_clip")
    with pytest.raises(FileNotFoundError, match="clip_workdir"):
        train_and_evaluate(c, str(tmp_path / "w2"))


WORKER = r"""
import json, sys
sys.path.insert(0, ".")
from configs import maxmatch_shapes
from mmjax.experiment import run as train_and_evaluate
errors = {}
for name, overrides in [("batch", dict(batch_size=12)), ("model_axis", None), ("too_many", None)]:
    c = maxmatch_shapes.get_config("smoke")
    if name == "batch":
        c.data.batch_size = 12
    elif name == "model_axis":
        c.sharding.mesh = (("data", 1), ("model", 16))
    else:
        c.sharding.num_devices = 9
    try:
        train_and_evaluate(c, sys.argv[1] + "/" + name)
        errors[name] = None
    except ValueError as e:
        errors[name] = str(e)
print("RESULT " + json.dumps(errors))
"""


def test_device_related_errors_on_8_devices(tmp_path):
    proc = run_python(["-c", WORKER, str(tmp_path)], devices=8)
    errors = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert "batch_size=12 is not divisible by the 8 devices" in errors["batch"]
    assert "needs a multiple of 16 devices" in errors["model_axis"]
    assert "num_devices=9" in errors["too_many"]
