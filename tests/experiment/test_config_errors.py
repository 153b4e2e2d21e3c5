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


def test_bad_field_fails_before_any_data_or_compilation(tmp_path, monkeypatch):
    """The trainer's entry validates first: nothing is generated, compiled or written for an invalid config."""
    import jax

    from configs import maxmatch_shapes
    from mmjax.config_validation import ConfigError
    from mmjax.data import shapesworld
    from mmjax.experiment import run
    calls = []
    monkeypatch.setattr(shapesworld, "generate", lambda *a, **k: calls.append("generate"))
    monkeypatch.setattr(jax, "jit", lambda *a, **k: calls.append("jit"))
    c = maxmatch_shapes.get_config("smoke")
    c.loss.solver, c.model.num_embeds, c.train.keep_checkpoints = "enumerate", 9, 0
    with pytest.raises(ConfigError) as err:
        run(c, str(tmp_path / "w"))
    assert [p for p, _ in err.value.problems] == ["config.train.keep_checkpoints", "config.loss.solver"]
    assert calls == [] and not (tmp_path / "w").exists()


def test_bad_field_fails_in_the_cli_before_the_workdir_is_made(tmp_path):
    workdir = tmp_path / "w"
    proc = run_python(train_cmd("configs/maxmatch_shapes.py:smoke", str(workdir), "--config.train.num_steps=-5",
                                "--config.train.compute_dtype=float8"), check=False)
    assert proc.returncode != 0
    assert "config.train.num_steps = -5: must be an integer >= 0" in proc.stderr
    assert "config.train.compute_dtype = 'float8': must be one of ('float32', 'bfloat16')" in proc.stderr
    assert not workdir.exists()


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
