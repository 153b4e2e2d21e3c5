"""Preemption: SIGTERM / SIGINT stop training at a step boundary with a checkpoint, not mid-step with nothing saved.

Cluster schedulers (SLURM, Kubernetes, TPU maintenance events) send SIGTERM some seconds before they kill a job. While
`StopSignals` is active the handler only records the signal; the trainer checks it after every step, and on a
request it finishes the step in flight, writes a checkpoint of that step, waits until it is on disk, prints where it
stopped and raises `TrainingPreempted`, which `train.py` turns into the exit code `EXIT_PREEMPTED` (75, EX_TEMPFAIL:
"try again"). Restarting with the same command resumes from that step and ends bitwise equal to an uninterrupted
run. In a multi-process run every process must save the same step: each step the processes OR their requests
(`agree_later`, a tiny all-reduce read one step later, so no host waits for its devices to learn them), and a signal
that reaches one host stops all of them after the same step, the one after the step in flight. A second
signal while the checkpoint is being written is ignored (the save is the point); SIGKILL cannot be caught — that is
what the periodic checkpoints (`train.checkpoint_every`, `train.checkpoint_every_s`) are for.
"""

from __future__ import annotations

import functools
import signal
import threading

import numpy as np

EXIT_PREEMPTED = 75
STOP = 1          # `agree` bits: a stop was requested,
TIME_DUE = 2      # a time-based checkpoint is due (`train.checkpoint_every_s`)


class TrainingPreempted(Exception):
    """Training stopped on a signal after saving a checkpoint; the message names the step and the checkpoint."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


class StopSignals:
    """`with StopSignals() as stop: … stop.requested …` — SIGTERM and SIGINT set `requested` (the signal's name)
    instead of ending the process; the previous handlers come back on exit. Outside the main thread (where Python
    cannot install handlers) it does nothing and `requested` stays None."""

    def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)):
        self.signals = tuple(signals)
        self.requested: str | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.requested is None:
            self.requested = signal.Signals(signum).name
            print(f"[train] {self.requested} received: stopping after the current step, with a checkpoint",
                  flush=True)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc):
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()


def agree(bits: int) -> int:
    """The OR of every process's `bits` (STOP, TIME_DUE), so all processes act on the same step."""
    import jax
    if jax.process_count() == 1:
        return bits
    from jax.experimental import multihost_utils
    return int(np.bitwise_or.reduce(np.asarray(multihost_utils.process_allgather(np.int32(bits))).reshape(-1)))


@functools.lru_cache(maxsize=None)
def _or_over_devices():
    """The sharding of one int32 per device and a program that ORs them into a value every device holds."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()), ("processes",), axis_types=(jax.sharding.AxisType.Auto,))
    program = jax.jit(lambda bits: jnp.max(bits & STOP) | jnp.max(bits & TIME_DUE),
                      out_shardings=NamedSharding(mesh, P()))
    return NamedSharding(mesh, P("processes")), program


class Agreement:
    """The OR of every process's bits, still being computed on the devices; `result()` waits for it."""

    def __init__(self, value):
        self._value = value

    def result(self) -> int:
        return int(np.asarray(self._value.addressable_data(0)))


def agree_later(bits: int) -> Agreement:
    """`agree` without waiting: the OR is queued on the devices behind the step just dispatched (an all-reduce of one
    int32 per device) and read with `.result()` after the next step has been dispatched.

    `agree` converts the all-gather's result to numpy at once, so the host waits until the step before it has run:
    every step, the devices would idle while the host prepares and dispatches the next one. The trainer sends each
    step's requests with `agree_later` and acts on them one step later; every process sends and reads at the same
    steps, so all still act on the same one. Call it on every process in the same order (it is a collective)."""
    import jax
    sharding, program = _or_over_devices()
    local = np.full((jax.local_device_count(),), bits, np.int32)
    return Agreement(program(jax.make_array_from_process_local_data(sharding, local)))
