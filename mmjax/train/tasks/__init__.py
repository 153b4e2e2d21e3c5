"""Training tasks by name (`config.task`): each builds its data, model and loss from the config.

A task provides
    make_iterator(start=(epoch, step))     a resumable batch iterator (`.position`, `.steps_per_epoch`,
                                           `.batch_at(epoch, step)`, `.close()`), e.g. `mmjax.data.pipeline.BatchIterator`
    device_keys                            batch keys the step consumes
    init_variables(rng, batch) -> variables
    loss(params, extra, batch, rng, *, warmup) -> (loss, (metrics, new_extra))   pure, jitted by the trainer
    evaluate(params, extra) -> dict        host-side validation (must contain "rsum" for best-checkpointing)
    examples_per_step                      for throughput reports
"""

from mmjax.train.tasks.retrieval import RetrievalTask

TASKS = {"retrieval": RetrievalTask}


def build_task(config, workdir: str = "."):
    name = config.task
    if name == "flowclip_head":
        from mmjax.train.tasks.flowclip_head import FlowCLIPHeadTask
        return FlowCLIPHeadTask(config, workdir)
    if name == "clip_pretrain":
        from mmjax.train.tasks.clip_pretrain import CLIPPretrainTask
        return CLIPPretrainTask(config)
    if name not in TASKS:
        raise ValueError(f"unknown config.task {name!r}; choose one of {sorted(TASKS) + ['flowclip_head', 'clip_pretrain']}")
    return TASKS[name](config)
