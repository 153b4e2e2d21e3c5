"""The smoke configs train a few steps on ShapesWorld tiny and leave checkpoints, metrics and an export."""

import glob
import json
import os

import numpy as np
import pytest

from mmjax.jsonl import read_jsonl
from tests.train.helpers import exported_leaves, run_python, train_cmd


def _check_workdir(workdir, steps):
    rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
    train_rows = [r for r in rows if "loss/total" in r]
    assert train_rows and all(np.isfinite(r["loss/total"]) for r in train_rows)
    assert any("val/rsum" in r for r in rows)
    assert glob.glob(os.path.join(workdir, "tensorboard", "events.out.tfevents.*"))
    assert str(steps) in os.listdir(os.path.join(workdir, "checkpoints"))
    assert os.listdir(os.path.join(workdir, "best"))
    summary = json.load(open(os.path.join(workdir, "train_summary.json")))
    assert summary["steps"] == steps and 0 <= summary["final_val"]["rsum"] <= 600
    assert exported_leaves(workdir)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["configs/maxmatch_shapes.py:smoke", "configs/pvse_shapes.py:smoke"])
def test_retrieval_smoke_configs(tmp_path, config):
    workdir = str(tmp_path / "run")
    proc = run_python(train_cmd(config, workdir))
    assert "Validation results" in proc.stdout
    _check_workdir(workdir, 6)
    if config.startswith("configs/maxmatch"):
        _check_evaluate(config, workdir, ("maxmatch", "maxmatch_topk"))


def _check_evaluate(config, workdir, score_names):
    proc = run_python(["evaluate.py", f"--config={config}", f"--workdir={workdir}"])
    results = json.load(open(os.path.join(workdir, "results.json")))
    for name in score_names:
        metrics = results["retrieval"][name]["all"]
        assert set(metrics) >= {"i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum"}
        assert 0 <= metrics["rsum"] <= 600
    suites = results["shapesworld_suites"]
    assert {"binding", "relation", "order", "replace_att"} <= set(suites)
    assert set(suites["binding"]["conditions"]) == {"real", "shuffle", "fixed"}
    for path in results["figures"].values():
        assert os.path.getsize(path) > 1000 and path.endswith(".png")
    assert "plot (" in proc.stdout and os.path.exists(os.path.join(workdir, "results.md"))


@pytest.mark.slow
def test_clip_then_flowclip_head_smoke(tmp_path):
    clip_dir, head_dir = str(tmp_path / "clip"), str(tmp_path / "head")
    run_python(train_cmd("configs/clip_shapes.py:smoke", clip_dir))
    _check_workdir(clip_dir, 4)
    _check_evaluate("configs/clip_shapes.py:smoke", clip_dir, ("cosine",))
    probes = json.load(open(os.path.join(clip_dir, "results.json")))["local_probes"]  # the base's patches, probed
    assert set(probes["probes"]) == {"colour", "shape", "size", "cell", "on_object"}
    assert probes["tokens_per_image"] == 64 and probes["grounding"]["n"] > 0
    assert all(0 <= p["accuracy"] <= 100 and 0 < p["majority"] <= 100 for p in probes["probes"].values())
    assert "word → token grounding" in open(os.path.join(clip_dir, "results.md")).read()
    run_python(train_cmd("configs/flowclip_shapes.py:flowclip_cimr,smoke", head_dir,
                         f"--config.data.clip_workdir={clip_dir}"))
    _check_workdir(head_dir, 4)
    meta = json.load(open(os.path.join(head_dir, "feature_cache", "train", "meta.json")))
    assert meta["num_images"] == 512
    leaves = exported_leaves(head_dir)
    assert {k for k in leaves if k.endswith("['W']")}  # the ICER residual map was trained and exported
    _check_evaluate("configs/flowclip_shapes.py:flowclip_cimr,smoke", head_dir, ("flowclip",))
    for workdir in (clip_dir, head_dir):  # the blind (text-only) baseline beside every compositional table
        suites = json.load(open(os.path.join(workdir, "results.json")))["shapesworld_suites"]
        blind = next(iter(suites.values()))
        assert blind["blind_model"]["n_train"] > 0 and 0 <= blind["blind_model"]["train_pair_accuracy"] <= 100
        assert set(blind["blind"]["tasks"]) == set(blind["conditions"]["real"]["tasks"])
        assert "blind (text only)" in open(os.path.join(workdir, "results.md")).read()


@pytest.mark.slow
def test_region_token_base_then_a_head_on_it(tmp_path):
    """`configs/clip_shapes.py:regions`: the image tower reads region vectors; its local tokens (one per region
    slot) are what the local probes read and what a Flow-CLIP head's cache holds."""
    clip_dir, head_dir = str(tmp_path / "clip"), str(tmp_path / "head")
    prior = "--config.data.language_prior=typical_order"  # the export records it; the head's data follows
    run_python(train_cmd("configs/clip_shapes.py:regions,smoke", clip_dir, prior))
    run_python(["evaluate.py", "--config=configs/clip_shapes.py:regions,smoke", f"--workdir={clip_dir}", prior])
    probes = json.load(open(os.path.join(clip_dir, "results.json")))["local_probes"]
    assert probes["tokens_per_image"] == 10  # ShapesWorld's R region slots
    # Region vectors hold their object's colour linearly (by construction), so even a barely trained tower keeps it.
    assert probes["probes"]["colour"]["accuracy"] > probes["probes"]["colour"]["majority"] + 30
    export = json.load(open(os.path.join(clip_dir, "export", "export.json")))
    assert (export["mode"], export["language_prior"]) == ("regions", "typical_order")
    # a head selected on the claims' metric: the validation split's binding mean under Real
    run_python(train_cmd("configs/flowclip_shapes.py:flowclip_cimr,select_binding,smoke", head_dir,
                         f"--config.data.clip_workdir={clip_dir}"))
    meta = json.load(open(os.path.join(head_dir, "feature_cache", "train", "meta.json")))
    assert meta["arrays"]["img_patches"]["shape"][1] == 10
    val = [r for r in read_jsonl(os.path.join(head_dir, "metrics.jsonl")) if "val/rsum" in r]
    key = "val/shapesworld_suites/binding_mean/real"
    assert val and all(0 <= r[key] <= 100 and "val/shapesworld_suites/binding/real" in r for r in val)
    best = json.load(open(os.path.join(head_dir, "export_best", "export.json")))
    assert best["val_rsum"] == pytest.approx(max(r[key] for r in val))
    assert {k for k in exported_leaves(head_dir) if k.endswith("['W']")}
