"""Config validation before any compute: paths that must exist, values that must be in range."""

import os


def check(config):
    data = config.data
    if data.get("name") == "precomp" and not os.path.isdir(data.path):
        raise FileNotFoundError(f"config.data.path: directory not found: {data.path!r}")
    model = config.get("model")
    if model is not None and model.get("text") is not None and model.text.get("tower") == "bert":
        if not os.path.isdir(model.text.bert_dir):
            raise FileNotFoundError(f"config.model.text.bert_dir: directory not found: {model.text.bert_dir!r}")
    if model is not None and model.get("text") is not None and model.text.get("glove_path"):
        if not os.path.isfile(model.text.glove_path):
            raise FileNotFoundError(f"config.model.text.glove_path: file not found: {model.text.glove_path!r}")
    for key in ("cache_dir", "clip_dir", "clip_workdir"):
        path = data.get(key)
        if path and not os.path.exists(path):
            raise FileNotFoundError(f"config.data.{key}: path not found: {path!r}")
    if data.batch_size < 1:
        raise ValueError(f"config.data.batch_size must be >= 1, got {data.batch_size}")
    train = config.train
    if not train.num_steps and not train.num_epochs:
        raise ValueError("config.train: set num_epochs or num_steps")
    for key in ("log_every", "checkpoint_every"):
        if train[key] < 1:
            raise ValueError(f"config.train.{key} must be >= 1, got {train[key]}")
