"""Which config fields changed, among those that decide a run's outcome.

    outcome_diff(saved, current, *, only=None, ignore=()) -> sorted dotted paths that differ
    check_resume(saved, config)          ConfigError naming every such field, saved and current values
    recorded_config(config) -> dict      the config without its operational fields (what an export records)

Configs are compared as JSON (`config.to_json_best_effort()`, as `config.json` stores them), so tuples and lists
are equal. A field present on one side only differs. `OPERATIONAL` fields are never compared: they cannot change
the trained parameters. `RELOCATABLE` fields (paths to inputs) are compared only by whether they are set, since a
moved dataset is the same dataset. `ADDED_FIELDS` are fields added to the configs after runs were saved without
them; a side that lacks one is compared as holding the value that reproduces those runs.
"""

from __future__ import annotations

import fnmatch
import json

from mmjax.config_validation.rules import ConfigError

# Logging and progress, checkpoint cadence and retention, evaluation (which evaluators, when, on which split, in how
# many blocks or chunks), input prefetching and decoding threads, the device layout (a checkpoint restores onto any
# mesh) and the multi-process set-up. Patterns match whole dotted paths; here '*' spans dots. Fields since removed
# from the configs stay listed (`eval_max_blocks`, `train.fault_injection_kill_at_step`): config.json files saved
# before their removal still hold them.
OPERATIONAL = (
    "train.log_every", "train.eval_every", "train.eval_every_epoch", "train.evals_per_epoch", "train.checkpoint_every",
    "train.checkpoint_every_s",
    "train.keep_checkpoints", "train.async_checkpoints", "train.progress_every_s",
    "train.fault_injection_kill_at_step", "data.prefetch", "data.num_workers", "sharding.*", "distributed.*",
    "evals", "evals.*", "val_evals", "val_evals.*", "eval_split", "eval_max_blocks", "eval_caption_chunk",
    "final_eval", "benchmarks", "benchmarks.*", "flowclip.score_chunk_images",
)
RELOCATABLE = ("data.path", "data.tokenizer_dir", "data.cache_dir", "data.clip_dir", "data.clip_workdir",
               "data.head_workdir", "model.text.bert_dir", "model.text.glove_path")
# field -> the value every config saved before the field existed was trained with
ADDED_FIELDS = {"loss.false_negatives": "keep"}
_MISSING = object()


def _matches(path: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def flat_config(config) -> dict:
    """{dotted path: JSON value} of a ConfigDict or a JSON-like dict (an empty dict is a value)."""
    tree = (json.loads(config.to_json_best_effort()) if hasattr(config, "to_json_best_effort")
            else json.loads(json.dumps(config, default=repr)))
    out = {}

    def walk(x, prefix):
        if isinstance(x, dict) and x:
            for k, v in x.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        else:
            out[prefix] = x

    walk(tree, "")
    return out


def outcome_diff(saved, current, *, only=None, ignore=()) -> list[str]:
    """Sorted dotted paths whose values differ between `saved` and `current` (ConfigDicts or JSON dicts), leaving
    out `OPERATIONAL` fields and the `ignore` patterns; `only`: patterns restricting the comparison."""
    a, b = flat_config(saved), flat_config(current)
    skip = OPERATIONAL + tuple(ignore)
    diff = []
    for path in sorted(set(a) | set(b)):
        if _matches(path, skip) or (only is not None and not _matches(path, only)):
            continue
        x, y = (d.get(path, ADDED_FIELDS.get(path, _MISSING)) for d in (a, b))
        if x is _MISSING or y is _MISSING:
            diff.append(path)
        elif (bool(x) != bool(y)) if path in RELOCATABLE else (x != y):
            diff.append(path)
    return diff


def mismatch_problems(saved, current, paths) -> list[tuple[str, str]]:
    """[(config.<path>, "saved X, now Y")] for a `ConfigError`."""
    a, b = flat_config(saved), flat_config(current)
    show = lambda d, p: repr(d[p]) if p in d else "(absent)"
    return [(f"config.{p}", f"saved {show(a, p)}, now {show(b, p)}") for p in paths]


def recorded_config(config) -> dict:
    """The config as a nested JSON dict without its `OPERATIONAL` fields."""
    out = {}
    for path, value in flat_config(config).items():
        if not _matches(path, OPERATIONAL):
            *parents, leaf = path.split(".")
            node = out
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = value
    return out


def check_resume(saved, config) -> None:
    """Raises `ConfigError` naming every outcome field in which `config` differs from `saved`, the config the
    workdir's checkpoints were trained with; returns None when resuming continues the same run."""
    diff = outcome_diff(saved, config)
    if diff:
        raise ConfigError(mismatch_problems(saved, config, diff),
                          header="the config differs from the one this workdir was trained with, so resuming would "
                                 "mix two runs (use a new workdir, or set the saved values again)")
