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

from mmjax.tasks.retrieval import RetrievalTask

TASKS = {"retrieval": RetrievalTask}
# Evaluated from a pretrained checkpoint: no training run, so `evaluate_workdir` reads no export for them.
EVAL_ONLY_TASKS = ("hf_clip",)


def build_task(config, workdir: str = "."):
    name = config.task
    if name == "flowclip_head":
        from mmjax.tasks.flowclip_head import FlowCLIPHeadTask
        return FlowCLIPHeadTask(config, workdir)
    if name == "clip_pretrain":
        from mmjax.tasks.clip_pretrain import CLIPPretrainTask
        return CLIPPretrainTask(config)
    if name == "hf_clip":
        from mmjax.tasks.hf_clip import HFCLIPEvalTask
        return HFCLIPEvalTask(config, workdir)
    if name not in TASKS:
        known = sorted(TASKS) + ["flowclip_head", "clip_pretrain", "hf_clip"]
        raise ValueError(f"unknown config.task {name!r}; choose one of {known}")
    return TASKS[name](config)
