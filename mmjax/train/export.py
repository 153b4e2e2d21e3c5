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

def export_params(workdir: str, params, info: dict) -> str:
    """Writes `params` and `export.json` (= `info`)."""
    path = os.path.abspath(os.path.join(workdir, "export"))
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(os.path.join(path, "params"), jax.device_get(params), force=True)
    ckpt.wait_until_finished()
    if jax.process_index() == 0:
        with open(os.path.join(path, "export.json"), "w") as f:
            json.dump(info, f, indent=2)
    return path


def load_exported(workdir: str):
    """(params as numpy tree, info dict) from `export_params`; clear error if the run never finished."""
    path = os.path.abspath(os.path.join(workdir, "export"))
    info_path = os.path.join(path, "export.json")
    if not os.path.exists(info_path):
        raise FileNotFoundError(f"{info_path} not found: train the upstream config to completion first "
                                f"(its final step writes the export)")
    with open(info_path) as f:
        info = json.load(f)
    params = ocp.StandardCheckpointer().restore(os.path.join(path, "params"))
    return jax.tree_util.tree_map(np.asarray, params), info
