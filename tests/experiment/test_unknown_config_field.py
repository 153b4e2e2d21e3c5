"""An override of an unknown config field (`--config.model.k=abc`) prints one error naming the field and the known
fields of its sub-config and exits with status 2 — before any work, for both mains, with or without `--config`.
It used to print a 53-line traceback ending in `AttributeError: "'k'"`."""

import pytest

from mmjax.config_validation.cli import unknown_override
from tests.module_loader import load
from tests.train.helpers import run_python

MODEL_FIELDS = "dropout, embed_dim, image, num_embeds, set_head, spm, text"


@pytest.mark.parametrize("main,config", [("train.py", ["--config=configs/maxmatch_shapes.py:smoke"]),
                                         ("train.py", []),      # the default config: parsed while defining the flag
                                         ("evaluate.py", ["--config", "configs/maxmatch_shapes.py:smoke"])])
def test_unknown_field_is_one_error_naming_it_and_the_known_fields(tmp_path, main, config):
    workdir = tmp_path / "w"
    proc = run_python([main, *config, f"--workdir={workdir}", "--config.model.k=abc"], check=False, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert (f"unknown config field in --config.model.k=abc: config.model has no field 'k'; known fields of "
            f"config.model: {MODEL_FIELDS}") in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 3
    assert not workdir.exists()


def test_misspelt_top_level_and_leaf_fields(tmp_path):
    proc = run_python(["train.py", "--config=configs/maxmatch_shapes.py:smoke", f"--workdir={tmp_path / 'w'}",
                       "--config.modle.num_embeds=3", "--config.train.num_steps.x=1"], check=False, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "config has no field 'modle' (did you mean 'model'?)" in proc.stderr


def test_unknown_override_walks_the_config():
    c = load("configs/maxmatch_shapes.py", "cfg_unknown_override").get_config("smoke")
    assert unknown_override(c, "model.num_embeds") is None
    assert unknown_override(c, "loss.margin") is None
    assert unknown_override(c, "model.k").startswith("config.model has no field 'k'; known fields of config.model: ")
    assert "did you mean 'num_steps'" in unknown_override(c, "train.num_stepz")
    assert unknown_override(c, "train.num_steps.x").startswith("config.train.num_steps is int")
