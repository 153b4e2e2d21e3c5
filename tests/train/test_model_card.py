"""Every export carries `model_card.md` (`mmjax.train.model_card`): what was trained, how it scores, its test metrics
once evaluate.py ran, and its intended use and limits. The end-to-end check (a trained run, evaluate.py, the card in
a copied export) is `tests/test_load.py::test_the_export_carries_its_model_card`."""

import json
import os

import numpy as np
import pytest

from mmjax.train.export import export_params, full_config, read_export
from mmjax.train.model_card import config_name, render, write_model_card
from tests.module_loader import load

COMMAND = ("python train.py --config=configs/maxmatch_shapes.py:smoke --workdir=/tmp/run "
           "--config.train.num_steps=4 --config.data.max_len=16")
PARAMS = {"params": {"w": np.ones(3, np.float32)}}


@pytest.fixture(scope="module")
def config():
    c = load("configs/maxmatch_shapes.py", "_maxmatch_shapes_config").get_config("smoke")
    c.train.num_steps, c.data.max_len = 4, 16
    return c


def _info(config, **extra):
    return {"task": "retrieval", "step": 4, "config": full_config(config), "full_config": full_config(config),
            "tokenizer_spec": {"kind": "word", "max_len": 16, "vocab": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                                        "a", "circle", "red"]},
            "command": COMMAND, **extra}


def test_export_writes_a_card_naming_task_config_steps_and_seed(tmp_path, config):
    path = export_params(str(tmp_path), PARAMS, _info(config))
    card = open(os.path.join(path, "model_card.md")).read()
    assert card.startswith("# Model card: `retrieval` — `configs/maxmatch_shapes.py:smoke`")
    assert "--config.train.num_steps=4 --config.data.max_len=16" in card  # the overrides
    assert "| training | 4 steps, batch 16, seed 0 |" in card
    assert "preset `tiny`" in card and "16 positions" in card
    assert "`maxmatch_topk`" in card and "training similarity `maxmatch`" in card  # the inference score
    assert "the final parameters, step 4" in card
    assert "Intended use and limits" in card and "synthetic ShapesWorld" in card
    # not evaluated yet: the card says how, with the run's own flags
    assert ("python evaluate.py --config=configs/maxmatch_shapes.py:smoke --workdir=/tmp/run "
            "--config.train.num_steps=4") in card
    _, info = read_export(path)  # the provenance the card reads is in export.json
    assert info["command"] == COMMAND and "git_commit" in info["code_version"]


def test_an_evaluation_writes_its_tables_into_the_card(tmp_path, config):
    info = _info(config)
    tables = "### retrieval\n\n| score | protocol | rsum |\n|---|---|---|\n| maxmatch_topk | all | 50.00 |\n"
    path = write_model_card(str(tmp_path / "export_best"), info,
                            {"split": "test", "params": "best", "step": 4, "tables": tables,
                             "results_path": "/tmp/run/results.json"})
    card = open(path).read()
    assert "| maxmatch_topk | all | 50.00 |" in card and "split `test`, best parameters (step 4)" in card
    assert "Not evaluated yet" not in card
    assert "the best validation parameters" in card
    assert render(info) != card  # written again without an evaluation, the section goes back


def test_a_card_for_other_tasks_and_bare_exports(tmp_path):
    bare = render({"task": "retrieval", "step": 1})  # exported without a config or command: still a card
    assert "config | not recorded" in bare and "Intended use" in bare
    head = render({"task": "flowclip_head", "dim": 8, "full_config": {"flowclip": {"use_local": False},
                                                                      "data": {"name": "shapesworld"}}})
    assert "`global_m`" in head and "base/" in head
    precomp = render({"task": "retrieval", "full_config": {"data": {"name": "precomp", "path": "/data/coco"},
                                                           "loss": {"similarity": "smooth_chamfer"}}})
    assert "precomputed region features" in precomp and "`smooth_chamfer`" in precomp
    assert "ShapesWorld benchmark" not in precomp


def test_config_name_reads_the_config_flag():
    assert config_name(COMMAND) == "configs/maxmatch_shapes.py:smoke"
    assert config_name("python train.py --config configs/vse_shapes.py") == "configs/vse_shapes.py"
    assert config_name("python -m pytest tests") is None


def test_a_card_that_cannot_be_written_costs_no_export(tmp_path, config, monkeypatch, capsys):
    from mmjax.train import export
    monkeypatch.setattr(export, "write_model_card", lambda *a: 1 / 0)
    path = export_params(str(tmp_path), PARAMS, _info(config))
    assert json.load(open(os.path.join(path, "export.json")))["task"] == "retrieval"
    assert "model_card.md not written: ZeroDivisionError" in capsys.readouterr().out
