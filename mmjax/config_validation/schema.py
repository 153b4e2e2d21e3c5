"""The config schema: per family, {field pattern: rule}, the required fields, the cross-field rules and the paths.

Families: the training tasks of `mmjax.tasks.TASKS` (`retrieval`, `clip_pretrain`, `flowclip_head`, built by
`mmjax/train/defaults.py`) and the pretrained evaluation `hf_clip` (`configs/clip_hf_eval.py`,
`config.pretrained`). A pattern is a dotted path with shell wildcards inside one segment (`evals.*.type`,
`loss.lambda_*`); a rule applies wherever its field is present, so fields that only some configs have (e.g.
`matching.*`, `model.spm.pad_mode`) are covered the same way. Choices come from the module that implements them
where it exports them; the others are spelt out next to the rule with the module that checks them.
"""

from __future__ import annotations

import dataclasses

from mmjax import matching, similarity
from mmjax.config_validation.rules import (BOOL, KAPPA, MAPPING, MESH, NAME, PAD_PENALTY, PROB, REGEX,
                                           SHARDING_RULE, STR, Choice, Each, Int, Num, pair)
from mmjax.data.shapesworld.config import LANGUAGE_PRIORS, PRESET_SPLIT_SIZES, SPLIT_CODES, ShapesWorldConfig
from mmjax.flowclip.options import METHODS as ALL_PAIRS_METHODS
from mmjax.flowclip.options import POOLS as FLOWCLIP_POOLS
from mmjax.losses import maxmatch_loss_config
from mmjax.matching.auction import CERTIFICATES


def _evaluators():
    from mmjax.evaluation.registry import EVALUATORS
    return tuple(EVALUATORS)


def _readers():
    from mmjax.evaluation.hf_clip import COMPOSITIONAL_READERS
    return COMPOSITIONAL_READERS


def _pad_modes():
    from mmjax.models.set_prediction import PAD_MODES
    return PAD_MODES


# 'sinkhorn' returns a soft plan, not an assignment, so S_H cannot use it (that is the `sinkhorn_soft` similarity).
ASSIGNMENT_SOLVERS = tuple(s for s in matching.SOLVERS if s != "sinkhorn")
COMPUTE_DTYPES = ("float32", "bfloat16")                     # mmjax.train.loop
SHAPESWORLD_SPLITS = tuple(SPLIT_CODES)
SHAPESWORLD_IMAGE_SIZE = {f.name: f.default for f in dataclasses.fields(ShapesWorldConfig)}["image_size"]
PRETRAINED = ("hf_clip",)                                    # mmjax.experiment (`config.pretrained`)

COMMON = {
    "seed": Int(ge=0), "data.batch_size": Int(ge=1), "data.prefetch": Int(ge=0), "data.seed": Int(ge=0),
    "eval_split": NAME, "eval_caption_chunk": Int(ge=1), "final_eval": BOOL,
    # mmjax.evaluation.registry: the evaluator types; each checks its own options (`_eval_options` below)
    "evals": MAPPING, "evals.*": MAPPING, "evals.*.type": Choice(_evaluators),
    "val_evals": MAPPING, "val_evals.*": MAPPING, "val_evals.*.type": Choice(_evaluators),
    # mmjax.similarity.block_similarity options of an evaluator (the run's own are derived from config.loss)
    "evals.*.similarity_kw.alpha": Num(gt=0), "evals.*.similarity_kw.s_h": Num(),
    "evals.*.similarity_kw.match_on": Choice(("cos", "transformed")),
    "evals.*.similarity_kw.solver": Choice(ASSIGNMENT_SOLVERS), "evals.*.similarity_kw.topk_k": Int(ge=1),
}
TRAINING = {
    **COMMON,
    "train.num_epochs": Int(ge=0), "train.num_steps": Int(ge=0), "train.log_every": Int(ge=1),
    "train.eval_every": Int(ge=0), "train.eval_every_epoch": BOOL, "train.evals_per_epoch": Int(ge=1),
    "train.select_metric": NAME, "train.checkpoint_every": Int(ge=1), "train.checkpoint_every_s": Num(ge=0),
    "train.keep_checkpoints": Int(ge=1), "train.async_checkpoints": BOOL,
    "train.compute_dtype": Choice(COMPUTE_DTYPES), "train.progress_every_s": Num(ge=0),
    # mmjax.train.optim
    "optim.name": Choice(("adamw", "adam", "sgd")), "optim.lr": Num(gt=0), "optim.weight_decay": Num(ge=0),
    "optim.schedule": Choice(("cosine", "constant", "step")), "optim.warmup_steps": Int(ge=0),
    "optim.clip_norm": Num(ge=0, none_ok=True), "optim.lr_mults": Each(pair(REGEX, Num(ge=0))),
    "optim.b1": Num(ge=0, lt=1), "optim.b2": Num(ge=0, lt=1), "optim.eps": Num(gt=0),
    "optim.momentum": Num(ge=0, lt=1), "optim.final_frac": Num(ge=0, le=1), "optim.decay_factor": Num(gt=0),
    "optim.boundaries": Each(Int(ge=0)), "optim.decay_regex": REGEX,
    # mmjax.train.sharding and the multi-process set-up
    "sharding.num_devices": Int(ge=0), "sharding.mesh": MESH, "sharding.rules": Each(pair(REGEX, SHARDING_RULE)),
    "sharding.batch_axes": Each(NAME, nonempty=True),
    "sharding.preset": Choice(("rules", "data_parallel", "fsdp")), "sharding.fsdp_min_size": Int(ge=0),
    "sharding.all_pairs": Choice(("xla", "rows")), "sharding.all_pairs_chunk": Int(ge=0),
    "distributed.coordinator": STR, "distributed.num_processes": Int(ge=1), "distributed.process_id": Int(ge=0),
    "distributed.cpu_collectives": Choice(("gloo", "mpi")),
}
MATCHING = {   # mmjax.matching.solve_with_aux options (`config.matching`)
    "matching.pad_penalty": PAD_PENALTY,
    "matching.auction.eps_start_frac": Num(gt=0, le=1), "matching.auction.theta": Num(gt=0, lt=1),
    "matching.auction.tol_cert": Num(gt=0), "matching.auction.max_iters_per_phase": Int(ge=1, none_ok=True),
    "matching.auction.loop": Choice(("while", "scan")), "matching.auction.certificate": Choice(CERTIFICATES),
    "matching.auction.eps_final": Num(gt=0, none_ok=True), "matching.auction.max_rounds": Int(ge=1, none_ok=True),
    "matching.auction.repair_capacity_frac": Num(gt=0, le=1),
    "matching.auction.compaction": Num(gt=1), "matching.auction.min_buffer": Int(ge=1),
    "matching.auction.integer_eps": BOOL, "matching.auction.warm_start": Choice(("dual", "none")),
    "matching.auction.chunk_elems": Int(ge=1, none_ok=True),
    "matching.sinkhorn.tau": Num(gt=0), "matching.sinkhorn.iters": Int(ge=1),
}
SCHEMA = {
    "retrieval": {
        **TRAINING, **MATCHING,
        "data.name": Choice(("shapesworld", "precomp")), "data.preset": Choice(tuple(PRESET_SPLIT_SIZES)),
        "data.mode": Choice(("regions", "pixels")), "data.tokenizer": Choice(("shapesworld", "bert")),
        "data.max_len": Int(ge=2), "data.augment": BOOL, "data.region_drop_prob": PROB,
        "data.caption_drop_prob": PROB, "data.val_split": NAME, "data.train_split": NAME,
        # mmjax.models.factory and the towers it builds
        "model.embed_dim": Int(ge=1), "model.set_head": Choice(("spm", "pie", "none")),
        "model.num_embeds": Int(ge=1), "model.dropout": PROB,
        "model.spm.depth": Int(ge=1), "model.spm.share_weights": BOOL, "model.spm.num_heads": Int(ge=1),
        "model.spm.head_dim": Int(ge=1), "model.spm.ff_mult": Int(ge=1), "model.spm.dropout": PROB,
        "model.spm.pad_mode": Choice(_pad_modes),
        "model.image.tower": Choice(("region", "cnn")), "model.image.pool": Choice(("max", "gpo")),
        "model.image.cnn_widths": Each(Int(ge=1), nonempty=True), "model.image.bn_use_mask": BOOL,
        "model.text.tower": Choice(("bigru", "bow", "bert")), "model.text.word_dim": Int(ge=1),
        "model.text.global_pool": Choice(("rnn", "max", "cls")),
        # mmjax.losses.objective, ranking, regularisers
        "loss.similarity": Choice(similarity.KINDS), "loss.s_h": Num(),
        "loss.match_on": Choice(("cos", "transformed")), "loss.solver": Choice(ASSIGNMENT_SOLVERS),
        "loss.alpha": Num(gt=0), "loss.margin": Num(ge=0), "loss.hard_negative": Choice(("max", "all")),
        "loss.warmup_epochs": Int(ge=0), "loss.hard_negative_ramp_epochs": Num(ge=0),
        "loss.warmup_reduction": Choice(("mean", "sum")),
        "loss.reduction": Choice(("mean", "sum")), "loss.lambda_*": Num(ge=0), "loss.con_temperature": Num(gt=0),
        "loss.score_units": Choice(("native", "cosine")), "loss.false_negatives": Choice(("keep", "ignore")),
        "loss.delta_gd": Num(), "loss.delta_isd": Num(), "loss.gd_isd_shape": Choice(("exp", "hinge")),
        "loss.gd_isd_scale": Num(gt=0), "loss.gd_target": Choice(("final", "residual")),
        "loss.isd_target": Choice(("final", "residual")), "loss.gd_stop_grad_global": BOOL,
        "loss.div_type": Choice(("uniformity", "gram")), "loss.mmd_gamma": Num(gt=0),
        "loss.modality_reduce": Choice(("sum", "mean")),
    },
    "clip_pretrain": {
        **TRAINING,
        "data.name": Choice(("shapesworld",)), "data.preset": Choice(tuple(PRESET_SPLIT_SIZES)),
        "data.val_split": Choice(SHAPESWORLD_SPLITS), "data.mode": Choice(("pixels", "regions")),
        "data.language_prior": Choice(tuple(LANGUAGE_PRIORS)),
        # mmjax.models.factory.build_shapesworld_clip
        "model.width": Int(ge=1), "model.heads": Int(ge=1), "model.vision_layers": Int(ge=1),
        "model.text_layers": Int(ge=1), "model.image_size": Int(ge=1), "model.patch_size": Int(ge=1),
        "model.projection_dim": Int(ge=1), "model.logit_scale_max": Num(gt=0),
        # mmjax.losses.token_alignment
        "loss.token_align": Num(ge=0),
    },
    "flowclip_head": {
        **TRAINING,
        "data.name": Choice(("shapesworld", "coco")), "data.val_split": NAME,
        # mmjax.flowclip.options.FlowCLIPOptions
        "flowclip.alpha": Num(ge=0), "flowclip.tau_p": Num(gt=0), "flowclip.pool": Choice(FLOWCLIP_POOLS),
        "flowclip.lambda_cimr": Num(ge=0), "flowclip.cimr_kappa": KAPPA, "flowclip.cimr_kappa_stop_grad": BOOL,
        "flowclip.mask_invalid_negatives": BOOL, "flowclip.use_local": BOOL, "flowclip.donor_tries": Int(ge=1),
        "flowclip.score_chunk_images": Int(ge=0), "flowclip.score_chunk_bytes": Int(ge=1),
        "flowclip.all_pairs": Choice(ALL_PAIRS_METHODS),
        "flowclip.max_tokens": Int(ge=1), "flowclip.logit_scale_init": Num(gt=0),
        "flowclip.logit_scale_max": Num(gt=0),
    },
    "hf_clip": {
        **COMMON,
        # mmjax.evaluation.hf_clip
        "data.head_workdir": STR, "data.num_workers": Int(ge=0), "benchmarks": MAPPING,
        "benchmarks.*.reader": Choice(_readers),
        "benchmarks.*.kwargs.missing_images": Choice(("error", "skip")),
    },
}
_TRAIN_REQUIRED = ("seed", "data.batch_size", "train.num_epochs", "train.num_steps", "train.log_every",
                   "train.checkpoint_every", "train.keep_checkpoints", "train.compute_dtype", "optim.lr",
                   "sharding.mesh", "sharding.batch_axes")
REQUIRED = {
    "retrieval": _TRAIN_REQUIRED + ("data.name", "model.embed_dim", "model.set_head", "model.num_embeds",
                                    "model.image.tower", "model.text.tower", "loss.similarity"),
    "clip_pretrain": _TRAIN_REQUIRED + ("data.preset", "model.width", "model.heads", "model.image_size",
                                        "model.patch_size"),
    "flowclip_head": _TRAIN_REQUIRED + ("data.name", "flowclip.max_tokens"),
    "hf_clip": ("data.clip_dir",),
}


# ------------------------------------------------------------------------------------------ cross-field rules
# Each takes the config as a plain dict and yields (field, message); it runs only when the fields it needs are
# present and passed their own rules.

def get(tree, path: str, default=None):
    for key in path.split("."):
        if not isinstance(tree, dict) or key not in tree:
            return default
        tree = tree[key]
    return tree


def _length_set(c):
    if c["train"]["num_steps"] == 0 and c["train"]["num_epochs"] == 0:
        yield "train.num_steps", "must be > 0 when train.num_epochs = 0 (one of them sets the length of training)"


def _batch_axes(c):
    names = [a for a, _ in c["sharding"]["mesh"]]
    unknown = [a for a in c["sharding"]["batch_axes"] if a not in names]
    if unknown:
        yield "sharding.batch_axes", f"names axes {unknown} that sharding.mesh does not have (its axes: {names})"


def _processes(c):
    d = c["distributed"]
    if d["process_id"] >= d["num_processes"]:
        yield "distributed.process_id", f"must be < distributed.num_processes = {d['num_processes']}"
    if d["num_processes"] > 1 and not d.get("coordinator"):
        yield "distributed.coordinator", "must be 'host:port' when distributed.num_processes > 1"


def _warmup_steps(c):
    if 0 < c["train"]["num_steps"] < c["optim"]["warmup_steps"]:
        yield "optim.warmup_steps", f"must be <= train.num_steps = {c['train']['num_steps']}"


NEGATIVE_TASKS = ("retrieval", "clip_pretrain", "flowclip_head")  # losses with in-batch negatives


def _in_batch_negatives(c):
    # mmjax.losses.ranking (triplet, InfoNCE) and the Flow-CLIP contrastive terms take their negatives from the
    # other images of the batch: with one image per step there are none, and every such loss is 0 at every step.
    if c["data"]["batch_size"] < 2:
        yield "data.batch_size", ("must be >= 2: the losses of this task take their negatives from the other images "
                                  "of the batch, so with one image per batch the triplet and InfoNCE losses are 0 "
                                  "at every step and nothing is learned")


def _enumerate_k(c):
    # S_H matches K × K blocks, K the set size; 'enumerate' scores all K! permutations (mmjax.matching.enumerate).
    k = 1 if c["model"]["set_head"] == "none" else c["model"]["num_embeds"]
    if c["loss"]["solver"] == "enumerate" and c["loss"]["similarity"] == "maxmatch" and k > matching.ENUMERATE_MAX_K:
        yield "loss.solver", (f"'enumerate' supports K <= {matching.ENUMERATE_MAX_K} but model.num_embeds = {k}; "
                              f"use 'auto', 'hungarian' or 'auction'")


def _loss_fields(c):
    known = set(maxmatch_loss_config().keys())   # mmjax.losses.maxmatch_objective refuses other fields
    for key in sorted(set(c["loss"]) - known):
        yield f"loss.{key}", f"is not a loss field; known: {sorted(known)}"


def _false_negatives(c):
    # the pipeline's caption_true needs captions whose truth on any image is known (ShapesWorld's meanings)
    if c["loss"].get("false_negatives", "keep") == "ignore" and c["data"]["name"] != "shapesworld":
        yield "loss.false_negatives", (f"'ignore' needs to know which captions are true of which images, which only "
                                       f"ShapesWorld does; data.name = {c['data']['name']!r}")


def _retrieval_towers(c):
    data, model = c["data"], c["model"]
    pools = {"bigru": ("rnn", "max"), "bert": ("cls", "max")}.get(model["text"]["tower"])   # text_towers.py
    if pools and model["text"].get("global_pool", pools[0]) not in pools:
        yield "model.text.global_pool", f"must be one of {pools} for model.text.tower = {model['text']['tower']!r}"
    pixels = data["name"] == "shapesworld" and data.get("mode") == "pixels"
    tower = "cnn" if pixels else "region"   # pixels feed the CNN tower, region features the region tower
    if model["image"]["tower"] != tower:
        source = "data.mode = 'pixels'" if pixels else f"data.name = {data['name']!r} (region features)"
        yield "model.image.tower", f"must be {tower!r} for {source}"


def _shapesworld_splits(c):
    if c["data"]["name"] == "shapesworld":
        for path in ("data.val_split", "eval_split"):
            if get(c, path, "val") not in SHAPESWORLD_SPLITS:
                yield path, f"must be one of the ShapesWorld splits {SHAPESWORLD_SPLITS}"


def _clip_shapes(c):
    m = c["model"]
    if m["width"] % m["heads"]:
        yield "model.heads", f"must divide model.width = {m['width']}"
    if m["image_size"] % m["patch_size"]:
        yield "model.patch_size", f"must divide model.image_size = {m['image_size']}"
    if m["image_size"] != SHAPESWORLD_IMAGE_SIZE:
        yield "model.image_size", f"must be {SHAPESWORLD_IMAGE_SIZE}, the size of ShapesWorld images"


def _eval_options(c):
    from mmjax.evaluation.registry import option_problems
    for group in ("evals", "val_evals"):
        yield from _group_options(c, group, option_problems)


def _group_options(c, group, option_problems):
    for name, options in (c.get(group) or {}).items():
        if not isinstance(options, dict):
            continue
        kind = options.get("type", name)
        if kind not in _evaluators():
            if "type" not in options:  # a present but unknown type is reported by its own rule
                yield f"{group}.{name}.type", f"is missing and {name!r} names no evaluator; choose one of {_evaluators()}"
            continue
        for option, message in option_problems(kind, options):
            yield (f"{group}.{name}.{option}" if option else f"{group}.{name}"), message


def _logit_scale(c):
    if c["flowclip"]["logit_scale_init"] > c["flowclip"]["logit_scale_max"]:
        yield "flowclip.logit_scale_init", f"must be <= flowclip.logit_scale_max = {c['flowclip']['logit_scale_max']}"


# (family, or None for every family; fields that must be present and valid; rule)
CROSS_RULES = (
    (None, ("train.num_steps", "train.num_epochs"), _length_set),
    (None, ("sharding.mesh", "sharding.batch_axes"), _batch_axes),
    (None, ("distributed.num_processes", "distributed.process_id"), _processes),
    (None, ("train.num_steps", "optim.warmup_steps"), _warmup_steps),
    (None, ("data.name",), _shapesworld_splits),
    (None, (), _eval_options),
    *((task, ("data.batch_size",), _in_batch_negatives) for task in NEGATIVE_TASKS),
    ("retrieval", ("loss.solver", "loss.similarity", "model.set_head", "model.num_embeds"), _enumerate_k),
    ("retrieval", ("loss",), _loss_fields),
    ("retrieval", ("loss", "data.name"), _false_negatives),
    ("retrieval", ("data.name", "model.text.tower", "model.image.tower"), _retrieval_towers),
    ("clip_pretrain", ("model.width", "model.heads", "model.image_size", "model.patch_size"), _clip_shapes),
    ("flowclip_head", ("flowclip.logit_scale_init", "flowclip.logit_scale_max"), _logit_scale),
)


# ---------------------------------------------------------------------------------------------------- paths

def _is(name):
    return lambda c: c.get("task", c.get("pretrained")) == name


BOTH = ("train", "eval")
# (field pattern, 'dir' | 'file' | 'exists', required when (None: optional, '' = unset), stages that read it)
PATHS = (
    ("data.path", "dir", lambda c: _is("retrieval")(c) and get(c, "data.name") == "precomp", BOTH),
    ("model.text.bert_dir", "dir", lambda c: _is("retrieval")(c) and (get(c, "model.text.tower") == "bert" or (
        get(c, "data.name") == "shapesworld" and get(c, "data.tokenizer") == "bert")), BOTH),
    ("data.tokenizer_dir", "dir", lambda c: get(c, "data.name") == "precomp" and not get(c, "model.text.bert_dir"),
     BOTH),
    ("model.text.glove_path", "file", None, ("train",)),   # read once, to initialise the word embeddings
    ("data.cache_dir", "dir", lambda c: _is("flowclip_head")(c) and get(c, "data.name") == "coco", BOTH),
    # Evaluation re-encodes with the CLIP recorded in the training cache, whatever the config says now.
    ("data.clip_workdir", "dir", lambda c: _is("flowclip_head")(c) and get(c, "data.name") == "shapesworld"
     and not get(c, "data.cache_dir"), ("train",)),
    ("data.clip_dir", "dir", _is("hf_clip"), BOTH),
    ("data.head_workdir", "dir", None, BOTH),
    ("benchmarks.*.path", "exists", _is("hf_clip"), BOTH),
    ("benchmarks.*.image_root", "dir", _is("hf_clip"), BOTH),
)
