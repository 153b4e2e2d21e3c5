"""Training tasks by name (`config.task`): each owns its model and its loss, and says how to embed a split.

A task implements `mmjax.train.task.Task` (what the trainer needs: `make_iterator`, `prepare_batch`,
`float_inputs`, `phases`, `init_variables`, `loss`, `examples_per_step`, `export_info`) and, for the experiment,

    eval_context(variables, split, *, suites=True) -> dict
                                           what `mmjax.evaluation` evaluators consume on `split` (embedding
                                           functions and arrays, or a score matrix; suites = the ShapesWorld
                                           compositional records and pair scorer)

Data sources, tokenizers, pretrained encoders and the ShapesWorld suites context live in `mmjax.data`,
`mmjax.models` and `mmjax.evaluation`; a task only wires them. Validation and the final evaluation both run the
config's evaluators on `eval_context` (`mmjax.experiment`).
"""

import importlib

# name -> "module:class"; modules are imported on use (the Flow-CLIP and CLIP tasks pull in more).
TASKS = {"retrieval": "mmjax.tasks.retrieval:RetrievalTask",
         "clip_pretrain": "mmjax.tasks.clip_pretrain:CLIPPretrainTask",
         "flowclip_head": "mmjax.tasks.flowclip_head:FlowCLIPHeadTask"}


def build_task(config, workdir: str = "."):
    name = config.get("task")
    if name not in TASKS:
        if config.get("pretrained"):
            raise ValueError(f"this config evaluates a pretrained model (config.pretrained="
                             f"{config.pretrained!r}) and has nothing to train: run evaluate.py with it")
        raise ValueError(f"unknown config.task {name!r}; choose one of {sorted(TASKS)}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)(config, workdir)
