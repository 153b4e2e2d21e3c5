"""Training tasks by name (`config.task`): each builds its data, model and loss from the config.

A task provides
    source_train, pipeline                 the training `InMemorySource` and `PipelineConfig`
    init_variables(rng, batch) -> variables
    loss(params, extra, batch, rng, *, warmup) -> (loss, (metrics, new_extra))   pure, jitted by the trainer
    evaluate(params, extra) -> dict        host-side validation (must contain "rsum" for best-checkpointing)
    examples_per_step                      for throughput reports
"""

from mmjax.train.tasks.retrieval import RetrievalTask

TASKS = {"retrieval": RetrievalTask}


def build_task(config):
    name = config.task
    if name == "flowclip_head":
        from mmjax.train.tasks.flowclip_head import FlowCLIPHeadTask
        return FlowCLIPHeadTask(config)
    if name == "clip_pretrain":
        from mmjax.train.tasks.clip_pretrain import CLIPPretrainTask
        return CLIPPretrainTask(config)
    if name not in TASKS:
        raise ValueError(f"unknown config.task {name!r}; choose one of {sorted(TASKS) + ['flowclip_head', 'clip_pretrain']}")
    return TASKS[name](config)
