"""Training — `mmjax.train`: sharding rules, optimisers, state, Orbax checkpoints, export and the loop.

`train(config, workdir, task, *, validate=None, hooks=())` runs one pure jitted step `(state, batch, rng) ->
(state, metrics)` over a mesh; the task (`mmjax.tasks`) supplies model, loss and data, the caller the validation
(`mmjax.experiment`). Nothing here imports `mmjax.evaluation` or `mmjax.tasks`.
"""

from mmjax.train.export import export_params, load_exported
from mmjax.train.loop import train
from mmjax.train.preemption import EXIT_PREEMPTED, TrainingPreempted
from mmjax.train.workdir_lock import WorkdirLockedError

__all__ = ["EXIT_PREEMPTED", "TrainingPreempted", "WorkdirLockedError", "export_params", "load_exported", "train"]
