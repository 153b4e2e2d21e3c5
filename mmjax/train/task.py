"""What the trainer needs of a task: the `Task` protocol and the training `Phase`s.

`mmjax.train.train` knows nothing of retrieval, CLIP pre-training or Flow-CLIP heads; a task (`mmjax.tasks`)
provides

    make_iterator(start=(epoch, step))     a resumable batch iterator (`.position`, `.steps_per_epoch`,
                                           `.batch_at(epoch, step)`, `.close()`; `mmjax.data.pipeline.BatchIterator`)
    prepare_batch(host_batch) -> dict      the arrays the step consumes, from one host batch of this process's rows
                                           (e.g. caption→image indices made global over processes)
    float_inputs                           batch keys cast to `train.compute_dtype` with the parameters (bfloat16)
    phases(steps_per_epoch) -> [Phase]     the stretches of training compiled as separate step functions
    init_variables(rng, batch) -> variables
    loss(params, extra, batch, rng, phase) -> (loss, (metrics, new_extra))   pure, jitted by the trainer; `phase`
                                           is `Phase.value(step)` of the step's phase (static or traced)
    examples_per_step                      for throughput reports
    export_info() -> dict                  what downstream jobs need to rebuild the model (into export.json)

A `Phase` covers steps [start, stop) (stop None: to the end). Its `value(step)` runs inside the jitted step with
the traced `state.step`: it may return a static Python value (the VSE0 warm-up flag: its own compiled step) or an
array computed from the step (the hard-negative ramp weight, so a resumed run recomputes it exactly).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    start: int
    stop: int | None
    value: Callable[[Any], Any]

    def covers(self, step: int) -> bool:
        return self.start <= step and (self.stop is None or step < self.stop)


def single_phase(value: Any = None) -> tuple[Phase, ...]:
    """One phase for the whole run, whose loss always receives `value` (tasks without a schedule)."""
    return (Phase("train", 0, None, lambda step: value),)


@runtime_checkable
class Task(Protocol):
    examples_per_step: int
    float_inputs: tuple[str, ...]

    def make_iterator(self, start: tuple[int, int] = (0, 0)): ...

    def prepare_batch(self, host_batch: dict) -> dict: ...

    def phases(self, steps_per_epoch: int) -> Sequence[Phase]: ...

    def init_variables(self, rng, batch: dict) -> dict: ...

    def loss(self, params, extra, batch: dict, rng, phase): ...

    def export_info(self) -> dict: ...


def select_keys(batch: dict, keys: Sequence[str]) -> dict:
    """The entries of `batch` named in `keys` that it has (the arrays a step consumes)."""
    return {k: batch[k] for k in keys if k in batch}
