"""Training tasks by name (`config.task`): each owns its model and its loss, and says how to embed a split.

A task provides
    make_iterator(start=(epoch, step))     a resumable batch iterator (`.position`, `.steps_per_epoch`,
                                           `.batch_at(epoch, step)`, `.close()`), e.g.
                                           `mmjax.data.pipeline.BatchIterator`
    device_keys                            batch keys the step consumes
    init_variables(rng, batch) -> variables
    loss(params, extra, batch, rng, *, warmup) -> (loss, (metrics, new_extra))   pure, jitted by the trainer;
                                           `warmup`: True / False (static) or the traced all-negative weight of
                                           the hard-negative ramp (`mmjax.losses.maxmatch_objective`)
    eval_context(variables, split, *, suites=True) -> dict
                                           what `mmjax.evaluation` evaluators consume on `split` (embedding
                                           functions and arrays, or a score matrix; suites = the ShapesWorld
                                           compositional records and pair scorer)
    examples_per_step                      for throughput reports
    export_info() -> dict                  (optional) what downstream jobs need to rebuild the model

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
