"""Exported parameters of a finished run: `<workdir>/export/` holds the final params (Orbax), `export.json` and
`model_card.md`. Downstream jobs — e.g. Flow-CLIP heads on a frozen ShapesWorld CLIP, `mmjax.load` — read this
instead of the full training state; evaluation checks with `mmjax.config_validation.check_export_matches` that its
config describes the exported model (docs/design.md#config-validation).

export.json holds the caller's `info`: the task, the step, "config" (the run's config without its operational
fields, what evaluation compares), and what a task's `export_info` adds so that the directory rebuilds the model on
its own (docs/design.md#loading):

    full_config      the complete config as a plain dict (`full_config`: `build_task` works from it)
    tokenizer_spec   the run's tokenizer (`tokenizer_spec`): a word tokenizer's vocabulary and max_len, or an HF
                     tokenizer's kind and max_len, its files copied into `<export>/tokenizer/`
    base             a Flow-CLIP head's frozen CLIP: its export is copied into `<export>/base/`

plus "environment" (`mmjax.provenance.environment()`), "command" (the command line that exported it) and
"code_version" (`mmjax.train.model_card.code_version`).
"""

import json
import os
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp

from mmjax.provenance import environment
from mmjax.train.checkpoint import barrier_prefix
from mmjax.train.model_card import code_version, launch_command, write_model_card

EXPORTS = ("export", "export_best")  # the final parameters; those of the best validation RSUM
TOKENIZER_FILES = ("vocab.txt", "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json")


def full_config(config) -> dict:
    """The complete config (operational fields included) as a JSON-able dict, for export.json's "full_config"."""
    return json.loads(config.to_json_best_effort()) if hasattr(config, "to_json_best_effort") else dict(config)


def tokenizer_spec(tokenizer) -> dict:
    """What rebuilds `tokenizer` (`mmjax.data.tokenizers`) without the run's data: {"kind": "word", "max_len",
    "vocab"} for the word tokenizer, {"kind": "bert" | "clip", "max_len", "directory"} for an HF one (its files are
    copied into the export by `export_params`)."""
    if hasattr(tokenizer, "hf"):
        return {"kind": tokenizer.kind, "max_len": int(tokenizer.max_len),
                "directory": os.path.abspath(tokenizer.hf.name_or_path)}
    return {"kind": "word", "max_len": int(tokenizer.max_len), "vocab": list(tokenizer.vocab)}


def load_tokenizer_spec(spec: dict, export_dir: str):
    """The tokenizer of a `tokenizer_spec` recorded in the export at `export_dir`."""
    from mmjax.data.tokenizers import WORD_SPECIALS, WordTokenizer, load_tokenizer
    where = os.path.join(export_dir, "export.json")
    if spec.get("kind") == "word":
        vocab = list(spec["vocab"])
        tok = WordTokenizer(vocab[len(WORD_SPECIALS):], max_len=int(spec["max_len"]))
        if tok.vocab != vocab:
            raise ValueError(f"{where}: tokenizer_spec.vocab is not a word-tokenizer vocabulary (specials "
                             f"{list(WORD_SPECIALS)} first, then sorted words)")
        return tok
    if spec.get("kind") in ("bert", "clip"):
        directory = os.path.join(export_dir, spec["directory"])  # relative: inside the export
        return load_tokenizer(spec["kind"], directory=directory, max_len=int(spec["max_len"]))
    raise ValueError(f"{where}: unknown tokenizer_spec.kind {spec.get('kind')!r} (expected 'word', 'bert' or 'clip')")


def _copy_tokenizer(spec: dict, path: str) -> dict:
    """An HF tokenizer's files copied into `<path>/tokenizer/`; the spec then names that directory (relative)."""
    source = spec.get("directory")
    if not source or not os.path.isabs(source):
        return spec
    target = os.path.join(path, "tokenizer")
    os.makedirs(target, exist_ok=True)
    copied = [f for f in TOKENIZER_FILES if os.path.isfile(os.path.join(source, f))]
    if not copied:
        raise FileNotFoundError(f"tokenizer directory {source} holds none of {TOKENIZER_FILES}: cannot copy the run's "
                                f"tokenizer into the export")
    for f in copied:
        shutil.copyfile(os.path.join(source, f), os.path.join(target, f))
    return {**spec, "directory": "tokenizer"}


def _copy_base(base: dict, path: str) -> dict:
    """A Flow-CLIP head's frozen CLIP export copied into `<path>/base/` (once per source export)."""
    source = base.get("export")
    if not source or not os.path.isabs(source):
        return base
    target = os.path.join(path, "base")
    src_info, dst_info = os.path.join(source, "export.json"), os.path.join(target, "export.json")
    if not os.path.isfile(src_info):
        raise FileNotFoundError(f"{src_info} not found: the frozen CLIP the heads train on has no export")
    same = os.path.isfile(dst_info) and open(src_info, "rb").read() == open(dst_info, "rb").read()
    if not same:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
    return {**base, "export": "base", "source": source}


def export_params(workdir: str, params, info: dict, *, name: str = "export") -> str:
    """Writes `params`, `model_card.md` and `export.json` (= `info` + "environment", "command", "code_version"; an
    HF tokenizer's files and a head's base CLIP copied in, module docstring) into `<workdir>/<name>/` (`name` in
    `EXPORTS`); export.json is written last, so its presence means the export is complete."""
    if name not in EXPORTS:
        raise ValueError(f"export name must be one of {EXPORTS}, got {name!r}")
    path = os.path.abspath(os.path.join(workdir, name))
    ckpt = ocp.StandardCheckpointer(multiprocessing_options=barrier_prefix(name))  # its own barrier keys
    ckpt.save(os.path.join(path, "params"), jax.device_get(params), force=True)
    ckpt.wait_until_finished()
    if jax.process_index() == 0:
        info = {**info, "environment": info.get("environment") or environment(),
                "command": info.get("command") or launch_command(),
                "code_version": info.get("code_version") or code_version()}
        if "tokenizer_spec" in info:
            info["tokenizer_spec"] = _copy_tokenizer(info["tokenizer_spec"], path)
        if "base" in info:
            info["base"] = _copy_base(info["base"], path)
        try:  # the card describes the export; a failure to write it must not cost the parameters
            write_model_card(path, info)
        except Exception as e:  # noqa: BLE001
            print(f"[export] {os.path.join(path, 'model_card.md')} not written: {type(e).__name__}: {e}", flush=True)
        with open(os.path.join(path, "export.json"), "w") as f:
            json.dump(info, f, indent=2)
    return path


def read_export(path: str):
    """(params as numpy tree, info dict) of the export directory `path` (export.json + params/); a clear error
    naming the file when it is missing or damaged."""
    path = os.path.abspath(path)
    info_path = os.path.join(path, "export.json")
    if not os.path.exists(info_path):
        raise FileNotFoundError(f"{info_path} not found: {path} is not an export directory (export.json + params/); "
                                f"pass a training workdir's export/ or export_best/")
    try:
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{info_path}: not valid JSON ({err}); the export is damaged — re-export the run "
                         f"(or delete {path} and finish the run again)") from err
    if not isinstance(info, dict):
        raise ValueError(f"{info_path}: expected a JSON object (the export's info), got {type(info).__name__}")
    if not os.path.isdir(os.path.join(path, "params")):
        raise FileNotFoundError(f"{os.path.join(path, 'params')} not found: the export beside {info_path} has no "
                                f"parameters (copy the whole directory)")
    params = ocp.StandardCheckpointer().restore(os.path.join(path, "params"))
    return jax.tree_util.tree_map(np.asarray, params), info


def load_exported(workdir: str, *, name: str = "export"):
    """(params as numpy tree, info dict) from `export_params`; clear error if the run never wrote that export."""
    if name not in EXPORTS:
        raise ValueError(f"export name must be one of {EXPORTS}, got {name!r}")
    path = os.path.abspath(os.path.join(workdir, name))
    info_path = os.path.join(path, "export.json")
    if not os.path.exists(info_path):
        what = ("train the upstream config to completion first (its final step writes the export)"
                if name == "export" else "the run validated no best model (config.train.eval_every = 0?)")
        raise FileNotFoundError(f"{info_path} not found: {what}")
    return read_export(path)
