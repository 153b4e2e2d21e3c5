"""`mmjax.config_validation.validate`: every bad setting is refused up front, naming its field and what is allowed;
every shipped config (each variant its docstring names) passes; the schema covers every field the configs set."""

import glob
import os
import re

import ml_collections
import pytest

from mmjax import matching
from mmjax.config_validation import (SCHEMA, ConfigError, ConfigPathError, check, check_resume,
                                     flat_config, outcome_diff, validate)
from mmjax.config_validation.schema import PRETRAINED
from tests.module_loader import ROOT, config_variants, load

CONFIG_FILES = sorted(glob.glob(str(ROOT / "configs" / "*.py")))


def cfg(name: str, variant: str = "") -> ml_collections.ConfigDict:
    return load(f"configs/{name}.py", f"cfg_{name}").get_config(variant)


def _set(c, path, value):
    *parents, leaf = path.split(".")
    node = c
    for key in parents:
        node = node[key]
    node[leaf] = value


# (config, variant, {field: bad value}, field named in the error, text of the allowed range/choices)
BAD = [
    ("maxmatch_shapes", "smoke", {"train.num_steps": -5}, "train.num_steps", "integer >= 0"),
    ("maxmatch_shapes", "smoke", {"train.num_steps": 2.5}, "train.num_steps", "integer >= 0"),
    ("maxmatch_shapes", "smoke", {"train.num_steps": 0, "train.num_epochs": 0}, "train.num_steps", "> 0 when"),
    ("maxmatch_shapes", "smoke", {"optim.lr": -1.0}, "optim.lr", "> 0"),
    ("maxmatch_shapes", "smoke", {"optim.lr": float("nan")}, "optim.lr", "finite number > 0"),
    ("maxmatch_shapes", "smoke", {"train.keep_checkpoints": 0}, "train.keep_checkpoints", ">= 1"),
    ("maxmatch_shapes", "smoke", {"train.log_every": 0}, "train.log_every", ">= 1"),
    ("maxmatch_shapes", "smoke", {"train.checkpoint_every": 0}, "train.checkpoint_every", ">= 1"),
    ("maxmatch_shapes", "smoke", {"train.async_checkpoints": "yes"}, "train.async_checkpoints", "True or False"),
    ("maxmatch_shapes", "smoke", {"train.compute_dtype": "float8"}, "train.compute_dtype", "'bfloat16'"),
    ("maxmatch_shapes", "smoke", {"data.batch_size": 0}, "data.batch_size", ">= 1"),
    # one image per batch: no in-batch negatives, so the triplet and InfoNCE losses are 0 at every step
    ("maxmatch_shapes", "smoke", {"data.batch_size": 1}, "data.batch_size", ">= 2: the losses of this task take"),
    ("clip_shapes", "smoke", {"data.batch_size": 1}, "data.batch_size", "negatives from the other images"),
    ("flowclip_shapes", "smoke", {"data.batch_size": 1}, "data.batch_size", ">= 2"),
    ("maxmatch_shapes", "smoke", {"data.region_drop_prob": 1.0}, "data.region_drop_prob", "< 1"),
    ("maxmatch_shapes", "smoke", {"data.preset": "huge"}, "data.preset", "'tiny'"),
    ("maxmatch_shapes", "smoke", {"data.val_split": "dev"}, "data.val_split", "ShapesWorld splits"),
    ("maxmatch_shapes", "smoke", {"seed": -1}, "seed", ">= 0"),
    ("maxmatch_shapes", "smoke", {"model.num_embeds": 0}, "model.num_embeds", ">= 1"),
    ("maxmatch_shapes", "smoke", {"model.embed_dim": 0}, "model.embed_dim", ">= 1"),
    ("maxmatch_shapes", "smoke", {"model.num_embeds": True}, "model.num_embeds", "integer >= 1"),   # bool ≠ count
    ("maxmatch_shapes", "smoke", {"loss.margin": float("inf")}, "loss.margin", "finite number >= 0"),
    ("maxmatch_shapes", "smoke", {"model.dropout": -0.1}, "model.dropout", ">= 0 and < 1"),
    ("maxmatch_shapes", "smoke", {"model.set_head": "slots"}, "model.set_head", "'pie'"),
    ("maxmatch_shapes", "smoke", {"model.spm.depth": 0}, "model.spm.depth", ">= 1"),
    ("maxmatch_shapes", "smoke", {"model.spm.pad_mode": "zero"}, "model.spm.pad_mode", "'reference'"),
    ("maxmatch_shapes", "smoke", {"model.image.bn_use_mask": 1}, "model.image.bn_use_mask", "True or False"),
    ("maxmatch_shapes", "smoke", {"model.text.global_pool": "cls"}, "model.text.global_pool", "'rnn'"),
    ("maxmatch_shapes", "smoke", {"data.mode": "pixels"}, "model.image.tower", "'cnn'"),
    ("maxmatch_shapes", "smoke", {"loss.similarity": "cosine"}, "loss.similarity", "'smooth_chamfer'"),
    ("maxmatch_shapes", "smoke", {"loss.solver": "simplex"}, "loss.solver", "'hungarian'"),
    ("maxmatch_shapes", "smoke", {"loss.solver": "sinkhorn"}, "loss.solver", "'auction'"),
    ("maxmatch_shapes", "smoke", {"loss.solver": "enumerate", "model.num_embeds": matching.ENUMERATE_MAX_K + 1},
     "loss.solver", f"K <= {matching.ENUMERATE_MAX_K}"),
    ("maxmatch_shapes", "smoke", {"loss.lambda_gd": -0.1}, "loss.lambda_gd", ">= 0"),
    ("maxmatch_shapes", "smoke", {"loss.con_temperature": 0.0}, "loss.con_temperature", "> 0"),
    ("maxmatch_shapes", "smoke", {"loss.reduction": "median"}, "loss.reduction", "'sum'"),
    ("maxmatch_shapes", "smoke", {"loss.margn": 0.2}, "loss.margn", "not a loss field"),
    ("maxmatch_shapes", "smoke", {"optim.name": "adagrad"}, "optim.name", "'sgd'"),
    ("maxmatch_shapes", "smoke", {"optim.schedule": "linear"}, "optim.schedule", "'cosine'"),
    ("maxmatch_shapes", "smoke", {"optim.clip_norm": -1.0}, "optim.clip_norm", ">= 0 or None"),
    ("maxmatch_shapes", "smoke", {"optim.warmup_steps": 100}, "optim.warmup_steps", "<= train.num_steps"),
    ("maxmatch_shapes", "smoke", {"optim.lr_mults": (("[unclosed", 0.1),)}, "optim.lr_mults", "regular expression"),
    ("maxmatch_shapes", "smoke", {"sharding.batch_axes": ("model",)}, "sharding.batch_axes", "'model'"),
    ("maxmatch_shapes", "smoke", {"sharding.mesh": (("data", -1), ("model", -1))}, "sharding.mesh", "-1 to one"),
    ("maxmatch_shapes", "smoke", {"sharding.mesh": (("data", 0),)}, "sharding.mesh", ">= 1 or -1"),
    ("maxmatch_shapes", "smoke", {"sharding.rules": ((".*", "shard"),)}, "sharding.rules", "'fsdp'"),
    ("maxmatch_shapes", "smoke", {"distributed.process_id": 1}, "distributed.process_id", "< distributed.num"),
    ("maxmatch_shapes", "smoke", {"distributed.num_processes": 2}, "distributed.coordinator", "host:port"),
    ("maxmatch_shapes", "smoke", {"evals.retrieval.kinds": ("maxmatch", "bogus")}, "evals.retrieval.kinds",
     "'maxmatch_topk'"),
    ("maxmatch_shapes", "smoke", {"evals.retrieval.type": "recall"}, "evals.retrieval.type", "'retrieval'"),
    ("maxmatch_shapes", "smoke", {"evals.retrieval.fold_count": (1,)}, "evals.retrieval.fold_count",
     "not an option of this evaluator"),
    ("maxmatch_shapes", "smoke", {"evals.retrieval.fold_counts": (1, 0)}, "evals.retrieval.fold_counts", ">= 1"),
    ("maxmatch_shapes", "smoke", {"evals.set_analysis.embedding_plot": "umap"}, "evals.set_analysis.embedding_plot",
     "'tsne'"),
    ("maxmatch_shapes", "smoke", {"matching": {"auction": {"theta": 1.5}}}, "matching.auction.theta", "< 1"),
    ("maxmatch_shapes", "smoke", {"matching": {"pad_penalty": -3.0}}, "matching.pad_penalty", "'auto'"),
    ("maxmatch_shapes", "smoke", {"task": "detector"}, "task", "'retrieval'"),
    ("clip_shapes", "smoke", {"model.heads": 3}, "model.heads", "divide model.width"),
    ("clip_shapes", "smoke", {"model.image_size": 32}, "model.image_size", "64"),
    ("clip_shapes", "smoke", {"model.patch_size": 0}, "model.patch_size", ">= 1"),
    ("clip_shapes", "smoke", {"optim.warmup_steps": -1}, "optim.warmup_steps", ">= 0"),
    ("flowclip_shapes", "smoke", {"flowclip.pool": "mean"}, "flowclip.pool", "'logsumexp'"),
    ("maxmatch_shapes", "smoke", {"loss.false_negatives": "drop"}, "loss.false_negatives", "'ignore'"),
    ("maxmatch_coco", "bigru", {"loss.false_negatives": "ignore"}, "loss.false_negatives", "only ShapesWorld"),
    ("flowclip_shapes", "smoke", {"flowclip.tau_p": 0.0}, "flowclip.tau_p", "> 0"),
    ("flowclip_shapes", "smoke", {"flowclip.cimr_kappa": "auto"}, "flowclip.cimr_kappa", "'logit_scale'"),
    ("flowclip_shapes", "smoke", {"flowclip.all_pairs": "fast"}, "flowclip.all_pairs", "'gram'"),
    ("flowclip_shapes", "smoke", {"flowclip.logit_scale_init": 200.0}, "flowclip.logit_scale_init",
     "<= flowclip.logit_scale_max"),
    ("flowclip_shapes", "smoke", {"data.name": "flickr"}, "data.name", "'coco'"),
    ("clip_hf_eval", "sugarcrepe", {"data.num_workers": -1}, "data.num_workers", ">= 0"),
    ("clip_hf_eval", "sugarcrepe", {"benchmarks.sugarcrepe.reader": "csv"}, "benchmarks.sugarcrepe.reader",
     "'winoground'"),
    ("clip_hf_eval", "sugarcrepe", {"benchmarks.sugarcrepe.kwargs.missing_images": "ignore"},
     "benchmarks.sugarcrepe.kwargs.missing_images", "'skip'"),
    ("clip_hf_eval", "", {"pretrained": "openclip"}, "pretrained", "'hf_clip'"),
]


@pytest.mark.parametrize("name,variant,changes,field,allowed", BAD, ids=[f"{b[0]}-{b[3]}-{i}" for i, b in
                                                                         enumerate(BAD)])
def test_bad_setting_is_refused_naming_field_and_allowed_values(name, variant, changes, field, allowed):
    c = cfg(name, variant)
    validate(c, check_paths=False)   # the shipped config itself is fine
    c = c.to_dict()                  # a plain dict takes values a type-safe ConfigDict refuses (2.5 for an int)
    for path, value in changes.items():
        _set(c, path, value)
    with pytest.raises(ConfigError) as err:
        validate(c, check_paths=False)
    lines = [line for line in str(err.value).splitlines() if line.strip().startswith(f"config.{field} ")
             or line.strip().startswith(f"config.{field}:")]
    assert lines, f"config.{field} not named in:\n{err.value}"
    assert allowed in lines[0], lines[0]
    assert any(p == f"config.{field}" for p, _ in err.value.problems)


def test_all_problems_are_listed_at_once():
    c = cfg("maxmatch_shapes", "smoke")
    bad = {"train.num_steps": -5, "optim.lr": -1.0, "train.keep_checkpoints": 0, "model.embed_dim": 0,
           "loss.solver": "simplex", "train.compute_dtype": "float8", "sharding.batch_axes": ("model",)}
    for path, value in bad.items():
        _set(c, path, value)
    with pytest.raises(ConfigError) as err:
        validate(c, check_paths=False)
    assert sorted(p for p, _ in err.value.problems) == sorted(f"config.{p}" for p in bad)
    assert f"({len(bad)} problems)" in str(err.value)


def test_cross_rule_skipped_when_its_fields_are_invalid():
    # An unknown similarity is reported once; the enumerate-K rule (which reads it) does not add noise.
    c = cfg("maxmatch_shapes", "smoke")
    c.loss.similarity, c.loss.solver, c.model.num_embeds = "cosine", "enumerate", 9
    with pytest.raises(ConfigError) as err:
        validate(c, check_paths=False)
    assert [p for p, _ in err.value.problems] == ["config.loss.similarity"]
    c.loss.similarity = "mil"          # enumerate is then unused: nothing to refuse
    validate(c, check_paths=False)


def _variants(path: str) -> list[str]:
    return config_variants(path)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=[os.path.basename(p) for p in CONFIG_FILES])
def test_every_shipped_config_and_variant_validates(path):
    module = load(os.path.relpath(path, ROOT), "cfg_" + os.path.basename(path)[:-3])
    variants = _variants(path)
    assert "smoke" in " ".join(variants) or os.path.basename(path) in ("maxmatch_coco.py", "clip_hf_eval.py")
    for variant in variants:
        validate(module.get_config(variant), check_paths=False)


def test_schema_families_are_the_trainable_tasks():
    from mmjax.tasks import TASKS
    assert set(SCHEMA) - set(PRETRAINED) == set(TASKS)


# Free-form fields: paths, reader options and evaluator options (checked by the path rules, the readers and each
# evaluator's `Options` — config validation asks the evaluator: `schema._eval_options`).
FREE_FORM = ("data.path", "data.tokenizer_dir", "data.cache_dir", "data.clip_dir", "data.clip_workdir",
             "data.head_workdir", "model.text.bert_dir", "model.text.glove_path", "benchmarks.*.path",
             "benchmarks.*.image_root", "benchmarks.*.kwargs.*", "evals.*.*", "task", "pretrained")


def test_schema_covers_every_field_of_the_shipped_configs():
    import fnmatch
    uncovered = set()
    for path in CONFIG_FILES:
        module = load(os.path.relpath(path, ROOT), "cfg_" + os.path.basename(path)[:-3])
        for variant in _variants(path):
            c = module.get_config(variant)
            family = SCHEMA[c.get("task") or c.get("pretrained")]
            for field in flat_config(c):
                covered = any(all(fnmatch.fnmatchcase(f, p) for f, p in zip(field.split("."), pat.split(".")))
                              and field.count(".") == pat.count(".") for pat in family)
                if not covered and not any(fnmatch.fnmatchcase(field, p) for p in FREE_FORM):
                    uncovered.add(f"{os.path.basename(path)}: {field}")
    assert not uncovered, sorted(uncovered)


def test_missing_paths_are_named_and_are_file_not_found(tmp_path):
    c = cfg("maxmatch_coco", "bigru")
    with pytest.raises(ConfigPathError) as err:
        validate(c)
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, ValueError)
    assert sorted(p for p, _ in err.value.problems) == ["config.data.path", "config.data.tokenizer_dir"]
    c.data.path, c.data.tokenizer_dir = str(tmp_path / "nope"), str(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"config\.data\.path = .*directory not found"):
        check(c)
    c.data.path = str(tmp_path)
    validate(c)


def test_paths_read_only_in_training_are_not_needed_to_evaluate(tmp_path):
    c = cfg("flowclip_shapes", "smoke")
    c.data.clip_workdir = str(tmp_path / "no_clip")
    with pytest.raises(ConfigPathError, match=r"config\.data\.clip_workdir"):
        validate(c, stage="train")
    validate(c, stage="eval")
    c = cfg("maxmatch_shapes", "smoke")
    c.model.text.glove_path = str(tmp_path / "glove.txt")
    with pytest.raises(ConfigPathError, match=r"config\.model\.text\.glove_path"):
        validate(c)
    validate(c, stage="eval")
    (tmp_path / "glove.txt").write_text("red 0.1 0.2\n")
    validate(c)


def test_hf_clip_benchmark_paths(tmp_path):
    c = cfg("clip_hf_eval", "sugarcrepe,whatsup_coco")
    c.data.clip_dir = str(tmp_path)
    with pytest.raises(ConfigPathError) as err:
        validate(c, stage="eval")
    assert sorted(p for p, _ in err.value.problems) == [
        f"config.benchmarks.{b}.{f}" for b in ("sugarcrepe", "whatsup_coco") for f in ("image_root", "path")]
    c.benchmarks.sugarcrepe.update(path=str(tmp_path), image_root=str(tmp_path))
    c.benchmarks.whatsup_coco.update(path=(str(tmp_path), str(tmp_path / "two.json")), image_root=str(tmp_path))
    with pytest.raises(ConfigPathError, match=r"config\.benchmarks\.whatsup_coco\.path = .*two\.json"):
        validate(c, stage="eval")
    (tmp_path / "two.json").write_text("[]")
    validate(c, stage="eval")


# ------------------------------------------------------------------------------------------------ outcome_diff

def _changed(base, changes):
    c = ml_collections.ConfigDict(base.to_dict())
    for path, value in changes.items():
        _set(c, path, value)
    return c


def test_outcome_diff_same_config_and_its_json_round_trip():
    import json
    c = cfg("maxmatch_shapes", "smoke")
    assert outcome_diff(c, c) == []
    saved = json.loads(c.to_json_best_effort(indent=2))    # config.json: tuples came back as lists
    assert outcome_diff(saved, c) == [] and outcome_diff(c, saved) == []


OPERATIONAL_CHANGES = {
    "train.log_every": 7, "train.eval_every": 0, "train.eval_every_epoch": True, "train.checkpoint_every": 1,
    "train.keep_checkpoints": 9, "train.async_checkpoints": False, "train.progress_every_s": 60.0,
    "data.prefetch": 0, "sharding.mesh": (("data", 2), ("model", -1)),
    "sharding.batch_axes": ("data", "model"), "sharding.num_devices": 4, "distributed.num_processes": 2,
    "distributed.coordinator": "10.0.0.1:1234", "eval_split": "val", "eval_max_blocks": 7, "final_eval": True,
    "evals.retrieval.kinds": ("maxmatch",),
}
OUTCOME_CHANGES = {"seed": 1, "model.spm.depth": 3, "loss.margin": 0.3, "optim.lr": 5e-4, "data.seed": 2,
                   "train.num_steps": 12, "train.compute_dtype": "bfloat16", "loss.solver": "hungarian"}


def test_outcome_diff_ignores_operational_fields_and_names_the_others():
    c = cfg("maxmatch_shapes", "smoke")
    assert outcome_diff(c, _changed(c, OPERATIONAL_CHANGES)) == []
    changed = _changed(c, {**OPERATIONAL_CHANGES, **OUTCOME_CHANGES})
    assert outcome_diff(c, changed) == sorted(OUTCOME_CHANGES)
    assert outcome_diff(c, changed, only=("model.*", "loss.*")) == ["loss.margin", "loss.solver", "model.spm.depth"]
    assert outcome_diff(c, changed, ignore=("train.*", "optim.*")) == [
        "data.seed", "loss.margin", "loss.solver", "model.spm.depth", "seed"]


def test_outcome_diff_paths_compare_by_being_set_and_new_fields_count():
    c = cfg("maxmatch_coco", "bigru")
    c.data.path = "/data/a"
    assert outcome_diff(c, _changed(c, {"data.path": "/mnt/copy/a"})) == []          # moved
    assert outcome_diff(c, _changed(c, {"model.text.glove_path": "/g.txt"})) == ["model.text.glove_path"]
    added = _changed(c, {})
    added.model.spm.pad_mode = "reference"                                          # a field the saved run lacks
    assert outcome_diff(c, added) == ["model.spm.pad_mode"]
    assert outcome_diff(added, c) == ["model.spm.pad_mode"]


def test_fields_removed_from_the_configs_do_not_block_resume():
    # A config.json saved before `eval_max_blocks` left the configs still holds it: an operational difference.
    c = cfg("maxmatch_shapes", "smoke")
    saved = c.to_dict()
    saved.update(eval_max_blocks=1 << 18)
    saved["train"]["fault_injection_kill_at_step"] = 3
    assert outcome_diff(saved, c) == []
    saved["model"]["old_field"] = 1                  # a removed outcome field is a difference
    assert outcome_diff(saved, c) == ["model.old_field"]


def test_a_field_added_later_compares_as_the_value_older_runs_were_trained_with():
    # loss.false_negatives came after runs were saved without it; they treated every other caption as a negative
    c = cfg("maxmatch_shapes", "smoke")
    saved = c.to_dict()
    del saved["loss"]["false_negatives"]
    assert outcome_diff(saved, c) == [] and outcome_diff(c, saved) == []
    assert outcome_diff(saved, _changed(c, {"loss.false_negatives": "ignore"})) == ["loss.false_negatives"]


def test_check_resume_names_fields_with_both_values():
    c = cfg("maxmatch_shapes", "smoke")
    check_resume(c.to_dict(), _changed(c, OPERATIONAL_CHANGES))
    with pytest.raises(ConfigError) as err:
        check_resume(c.to_dict(), _changed(c, {"model.spm.depth": 3, "train.log_every": 1}))
    assert err.value.problems == [("config.model.spm.depth", "saved 1, now 3")]
