"""Exported parameters of a finished run: `<workdir>/export/` holds the final params (Orbax) and `export.json`
(the task, the model config needed to rebuild the module, the step and the run's config without its operational
fields, "config", which the caller puts in `info`). Downstream jobs — e.g. Flow-CLIP heads on a frozen ShapesWorld
CLIP — read this instead of the full training state; evaluation checks with
`mmjax.config_validation.check_export_matches` that its config describes the exported model
(docs/design.md#config-validation)."""

import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from mmjax.provenance import environment

EXPORTS = ("export", "export_best")  # the final parameters; those of the best validation RSUM


def export_params(workdir: str, params, info: dict, *, name: str = "export") -> str:
    """Writes `params` and `export.json` (= `info` + "environment": the package versions and platform,
    `mmjax.provenance.environment()`) into `<workdir>/<name>/` (`name` in `EXPORTS`); export.json is written last,
    so its presence means the export is complete."""
    if name not in EXPORTS:
        raise ValueError(f"export name must be one of {EXPORTS}, got {name!r}")
    path = os.path.abspath(os.path.join(workdir, name))
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(os.path.join(path, "params"), jax.device_get(params), force=True)
    ckpt.wait_until_finished()
    if jax.process_index() == 0:
        with open(os.path.join(path, "export.json"), "w") as f:
            json.dump({**info, "environment": info.get("environment") or environment()}, f, indent=2)
    return path


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
    try:
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{info_path}: not valid JSON ({err}); the export is damaged — re-export the run "
                         f"(or delete {path} and finish the run again)") from err
    if not isinstance(info, dict):
        raise ValueError(f"{info_path}: expected a JSON object (the export's info), got {type(info).__name__}")
    params = ocp.StandardCheckpointer().restore(os.path.join(path, "params"))
    return jax.tree_util.tree_map(np.asarray, params), info
