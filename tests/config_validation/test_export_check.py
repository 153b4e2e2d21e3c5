"""`mmjax.train.export`: the export records the run's config (less its operational fields), and evaluation with a
config that describes another model is refused, naming every differing field, unless explicitly allowed."""

import json
import os

import ml_collections
import numpy as np
import pytest

from mmjax.config_validation import ConfigError
from mmjax.config_validation import check_export_matches, recorded_config
from mmjax.train.export import export_params, load_exported
from tests.module_loader import load


def cfg(name: str, variant: str = "smoke") -> ml_collections.ConfigDict:
    return load(f"configs/{name}.py", f"cfg_{name}").get_config(variant)


def changed(c, **changes):
    out = ml_collections.ConfigDict(c.to_dict())
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = out
        for key in parents:
            node = node[key]
        node[leaf] = value
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny export of the MaxMatch smoke config: (workdir, params, config)."""
    workdir = str(tmp_path_factory.mktemp("run"))
    config = cfg("maxmatch_shapes")
    params = {"params": {"dense": {"kernel": np.arange(6, dtype=np.float32).reshape(2, 3),
                                   "bias": np.zeros(3, np.float32)}}}
    export_params(workdir, params, {"task": config.task, "step": 6, "config": recorded_config(config)})
    return workdir, params, config


def test_export_records_the_config_without_operational_fields(exported):
    workdir, params, config = exported
    loaded, info = load_exported(workdir)
    np.testing.assert_array_equal(loaded["params"]["dense"]["kernel"], params["params"]["dense"]["kernel"])
    assert info["task"] == "retrieval" and info["step"] == 6
    on_disk = json.load(open(os.path.join(workdir, "export", "export.json")))["config"]
    assert on_disk == info["config"]
    assert on_disk["model"]["spm"]["depth"] == config.model.spm.depth
    assert on_disk["loss"]["similarity"] == "maxmatch" and on_disk["data"]["preset"] == "tiny"
    assert on_disk["model"]["image"]["cnn_widths"] == list(config.model.image.cnn_widths)
    for section, field in (("train", "log_every"), ("train", "checkpoint_every"), ("data", "prefetch")):
        assert field not in on_disk[section]
    assert "sharding" not in on_disk and "distributed" not in on_disk and "evals" not in on_disk
    assert on_disk["train"]["num_steps"] == config.train.num_steps   # outcome fields stay


def test_same_config_passes(exported):
    workdir, _, config = exported
    _, info = load_exported(workdir)
    assert check_export_matches(info, config) == []
    # training-only and operational differences do not matter to evaluation
    other = changed(config, data__batch_size=8, data__augment=False, train__num_steps=99, loss__margin=0.5,
                    loss__lambda_gd=0.0, optim__lr=1.0, model__dropout=0.0, model__spm__dropout=0.0,
                    train__log_every=1, eval_split="val", data__prefetch=0)
    assert check_export_matches(info, other) == []


def test_changed_model_field_is_refused_naming_it(exported):
    workdir, _, config = exported
    _, info = load_exported(workdir)
    other = changed(config, model__spm__depth=config.model.spm.depth + 1)
    with pytest.raises(ConfigError) as err:
        check_export_matches(info, other)
    assert err.value.problems == [("config.model.spm.depth",
                                   f"saved {config.model.spm.depth}, now {config.model.spm.depth + 1}")]
    assert "config.model.spm.depth" in str(err.value)
    assert check_export_matches(info, other, allow_mismatch=True) == ["model.spm.depth"]


def test_every_differing_field_is_named(exported):
    workdir, _, config = exported
    _, info = load_exported(workdir)
    other = changed(config, model__embed_dim=64, data__preset="default", loss__s_h=2.0, loss__similarity="chamfer",
                    model__text__tower="bow")
    with pytest.raises(ConfigError) as err:
        check_export_matches(info, other)
    assert [p for p, _ in err.value.problems] == [
        "config.data.preset", "config.loss.s_h", "config.loss.similarity", "config.model.embed_dim",
        "config.model.text.tower"]


def test_export_without_recorded_config(tmp_path):
    config = cfg("maxmatch_shapes")
    export_params(str(tmp_path), {"params": {"w": np.ones(2, np.float32)}}, {"task": "retrieval", "step": 1})
    _, info = load_exported(str(tmp_path))
    assert "config" not in info
    with pytest.raises(ConfigError, match="records no config"):
        check_export_matches(info, config)
    assert check_export_matches(info, config, allow_mismatch=True) == []


def test_flowclip_head_options(tmp_path):
    config = cfg("flowclip_shapes", "flowclip_cimr,smoke")
    export_params(str(tmp_path), {"params": {"M": np.eye(2, dtype=np.float32)}},
                  {"task": "flowclip_head", "config": recorded_config(config)})
    _, info = load_exported(str(tmp_path))
    # the training objective's options do not change how the exported head scores; its scoring options do
    assert check_export_matches(info, changed(config, flowclip__lambda_cimr=0.0, flowclip__donor_tries=1,
                                              data__clip_workdir="/elsewhere/clip")) == []
    with pytest.raises(ConfigError, match=r"config\.flowclip\.use_local"):
        check_export_matches(info, changed(config, flowclip__use_local=False))
