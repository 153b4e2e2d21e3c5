"""Training logs: JSONL metrics, TensorBoard event files, and a progress line with rates and ETA.

`metrics.jsonl` holds one JSON object per logging step: {"step": int, "time": float, <metric>: float, ...}; validation
entries carry keys prefixed "val/". TensorBoard events are written with tensorboardX (no TensorFlow needed).

A resumed run replays the steps after its checkpoint, so the writer first drops what the interrupted run logged after
`resume_step` (rows with a larger step, and a last line cut short by a kill) — every step appears once — and tells
TensorBoard to purge its events from `resume_step + 1` on.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

from mmjax.jsonl import read_jsonl


def summary_writer_class():
    """tensorboardX's `SummaryWriter`, imported without PyTorch. tensorboardX imports torch whenever it is installed
    (to accept torch tensors): about 2.5 s of every `train.py` start and torch's memory in a JAX process that logs
    Python floats. torch is made unimportable for that one import and importable again right after; a process that
    already imported torch keeps it."""
    block = "torch" not in sys.modules
    if block:
        sys.modules["torch"] = None  # `import torch` raises ImportError: tensorboardX takes its no-torch path
    try:
        from tensorboardX import SummaryWriter
    finally:
        if block:
            del sys.modules["torch"]
    return SummaryWriter


class MetricWriter:

    def __init__(self, workdir: str, *, enabled: bool = True, resume_step: int | None = None):
        """resume_step: the step the run starts from (0 = fresh); None = append to whatever is there."""
        self.enabled = enabled
        self.path = os.path.join(workdir, "metrics.jsonl")
        self._tb = None
        if enabled:
            os.makedirs(workdir, exist_ok=True)
            if resume_step is not None:
                self._truncate(resume_step)
            self._tb = summary_writer_class()(os.path.join(workdir, "tensorboard"),
                                              purge_step=None if resume_step is None else resume_step + 1)

    def _truncate(self, resume_step: int):
        """Keeps the rows with step <= resume_step (written before the checkpoint the run resumes from); a line cut
        short by a kill mid-write is dropped with a warning naming it (`mmjax.jsonl`)."""
        if not os.path.exists(self.path):
            return
        kept, dropped = [], 0
        with open(self.path) as f:
            total = sum(1 for line in f if line.strip())
        for row, line in read_jsonl(self.path, keep_lines=True):
            if isinstance(row.get("step"), int) and row["step"] <= resume_step:
                kept.append(line if line.endswith("\n") else line + "\n")
        dropped = total - len(kept)
        if dropped:
            # Write-then-rename: a kill here leaves either the old file or the new one, never half of it.
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                f.writelines(kept)
            os.replace(tmp, self.path)

    def write(self, step: int, metrics: dict):
        if not self.enabled:
            return
        row = {"step": int(step), "time": time.time()}
        row.update({k: float(v) for k, v in metrics.items()})
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                self._tb.add_scalar(k, float(v), int(step))
        self._tb.flush()

    def close(self):
        if self._tb is not None:
            self._tb.close()


def read_metrics(path: str) -> list[dict]:
    """The rows of a metrics.jsonl; a broken line is skipped with a warning naming file and line."""
    return read_jsonl(path)


class Progress:
    """Training progress on the one progress facility (`mmjax.batching.progress`, a tqdm bar): steps done of the
    total, steps/s, elapsed<remaining, with examples/s and the last logged loss in the postfix. Refreshed at most
    every `every` seconds; `enabled=False` (non-lead processes) prints nothing."""

    def __init__(self, total_steps: int, start_step: int, examples_per_step: int, *, every: float = 5.0,
                 enabled: bool = True):
        from mmjax.batching import progress
        self.examples = examples_per_step
        self.bar = progress(total_steps, "[train]" if enabled else None, unit="step", initial=start_step,
                            mininterval=every)
        self.t0, self.start = time.time(), start_step

    def update(self, step: int, loss: float | None = None, force: bool = False):
        rate = (step - self.start) / max(time.time() - self.t0, 1e-9)
        post = {"ex/s": f"{rate * self.examples:.1f}"}
        if loss is not None:
            post["loss"] = f"{loss:.4f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(step - self.bar.n)
        if force:
            self.bar.refresh()

    def close(self):
        self.bar.close()
