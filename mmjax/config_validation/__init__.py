"""Config validation before any compute, and the config comparison behind the resume and export checks
(docs/design.md#config-validation).

    validate(config, *, check_paths=True, stage="train")
        every field of the config against `schema.SCHEMA` (family -> {field pattern: rule}), then the cross-field
        rules `schema.CROSS_RULES`, then (with `check_paths`) the files and directories of `schema.PATHS` read at
        `stage` ('train' | 'eval'); raises one `ConfigError` (a ValueError; also a FileNotFoundError when files
        are missing) listing every problem as `config.<field> = <value>: <what is allowed>`. Reads no data and
        compiles nothing, so a bad setting fails in milliseconds, before data generation.
    outcome_diff(saved, current) -> [dotted field]
        the fields whose values differ between two configs, leaving out the operational ones (`diff.OPERATIONAL`)
    check_resume(saved, config)
        `ConfigError` naming every such field (the workdir's config.json against the config now)
    check_export_matches(info, config, allow_mismatch=False)
        `ConfigError` naming every model/data/scoring field in which `config` differs from the exported run's

The family is `config.task` (a training task of `mmjax.tasks.TASKS`) or `config.pretrained` (an evaluation-only
config such as `configs/clip_hf_eval.py`).
"""

from __future__ import annotations

import fnmatch
import os

from mmjax.config_validation.diff import (OPERATIONAL, RELOCATABLE, check_resume, flat_config, mismatch_problems,
                                          outcome_diff, recorded_config)
from mmjax.config_validation.export_check import check_export_matches
from mmjax.config_validation.rules import ConfigError, ConfigPathError
from mmjax.config_validation.schema import CROSS_RULES, PATHS, PRETRAINED, REQUIRED, SCHEMA

__all__ = ["validate", "check", "check_export_matches", "ConfigError", "ConfigPathError", "outcome_diff",
           "check_resume", "flat_config", "mismatch_problems", "recorded_config", "OPERATIONAL", "RELOCATABLE",
           "SCHEMA"]

_MISSING = object()


def _plain(config) -> dict:
    return config.to_dict() if hasattr(config, "to_dict") else dict(config)


def _get(tree, path: str):
    for key in path.split("."):
        if not isinstance(tree, dict) or key not in tree:
            return _MISSING
        tree = tree[key]
    return tree


def _expand(tree, pattern: str, prefix=()):
    """(path, value) of every field matching `pattern` (shell wildcards within one dotted segment)."""
    head, _, rest = pattern.partition(".")
    if not isinstance(tree, dict):
        return
    wild = any(ch in head for ch in "*?[")
    for key in ([k for k in tree if fnmatch.fnmatchcase(str(k), head)] if wild else [head] * (head in tree)):
        if rest:
            yield from _expand(tree[key], rest, prefix + (str(key),))
        else:
            yield ".".join(prefix + (str(key),)), tree[key]


def _path_problem(kind: str, value):
    paths = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if paths is None or not all(isinstance(p, str) for p in paths):
        return "must be a path (string) or a tuple of paths"
    test, what = {"dir": (os.path.isdir, "directory"), "file": (os.path.isfile, "file"),
                  "exists": (os.path.exists, "path")}[kind]
    missing = [p for p in paths if p and not test(p)]
    return f"{what} not found: {missing[0]!r}" if missing else None


def _family(c) -> tuple[str, object]:
    if "task" in c or "pretrained" not in c:
        return "task", c.get("task", _MISSING)
    return "pretrained", c["pretrained"]


def validate(config, *, check_paths: bool = True, stage: str = "train") -> None:
    """Returns None for a valid config; otherwise raises `ConfigError` listing every problem (module docstring)."""
    if stage not in ("train", "eval"):
        raise ValueError(f"stage must be 'train' or 'eval', got {stage!r}")
    c = _plain(config)
    problems, bad, files_missing = [], set(), False

    def add(path, value, message):
        problems.append((f"config.{path}", message if value is _MISSING else f"= {value!r}: {message}"))
        bad.add(path)

    key, family = _family(c)
    families = tuple(f for f in SCHEMA if f not in PRETRAINED) if key == "task" else PRETRAINED
    if family not in families:
        add(key, family, f"must be one of {families}")
        raise ConfigError(problems)
    for pattern, rule in SCHEMA[family].items():
        for path, value in _expand(c, pattern):
            message = rule(value)
            if message:
                add(path, value, message)
    for path in REQUIRED[family]:
        if _get(c, path) is _MISSING:
            add(path, _MISSING, "is required but missing")
    for only, needs, rule in CROSS_RULES:
        if only in (None, family) and not any(_get(c, p) is _MISSING or p in bad for p in needs):
            for path, message in rule(c):
                add(path, _get(c, path), message)
    if check_paths:
        for pattern, kind, required, stages in PATHS:
            if stage not in stages:
                continue
            for path, value in list(_expand(c, pattern)) or ([(pattern, _MISSING)] if "*" not in pattern else []):
                # A tuple of paths with an empty entry (e.g. What's Up's two files) is as unset as ''.
                if value is _MISSING or not value or (isinstance(value, (list, tuple)) and not all(value)):
                    if required is not None and required(c):
                        add(path, value, f"is not set, and this run reads it: set --config.{path}")
                        files_missing = True
                elif message := _path_problem(kind, value):
                    add(path, value, message)
                    files_missing = files_missing or "not found" in message
    if problems:
        raise (ConfigPathError if files_missing else ConfigError)(problems)


def check(config) -> None:
    """The former `mmjax.train.config_checks.check`: `validate` for training, with the path checks."""
    validate(config, check_paths=True, stage="train")
