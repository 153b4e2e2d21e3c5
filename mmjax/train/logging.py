"""Training logs: JSONL metrics, TensorBoard event files, and a progress line with rates and ETA.

`metrics.jsonl` holds one JSON object per logging step: {"step": int, "time": float, <metric>: float, ...}; validation
entries carry keys prefixed "val/". TensorBoard events are written with tensorboardX (no TensorFlow needed).
"""

import json
import math
import os
import sys
import time


class MetricWriter:

    def __init__(self, workdir: str, *, enabled: bool = True):
        self.enabled = enabled
        self.path = os.path.join(workdir, "metrics.jsonl")
        self._tb = None
        if enabled:
            os.makedirs(workdir, exist_ok=True)
            from tensorboardX import SummaryWriter
            self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

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
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Progress:
    """A one-line progress report: step/total, steps/s, examples/s, ETA (printed every `every` seconds)."""

    def __init__(self, total_steps: int, start_step: int, examples_per_step: int, *, every: float = 5.0,
                 enabled: bool = True, stream=sys.stdout):
        self.total, self.start, self.examples = total_steps, start_step, examples_per_step
        self.every, self.enabled, self.stream = every, enabled, stream
        self.t0 = time.time()
        self.last = 0.0

    def update(self, step: int, loss: float | None = None, force: bool = False):
        now = time.time()
        if not self.enabled or (not force and now - self.last < self.every):
            return
        self.last = now
        done = step - self.start
        rate = done / max(now - self.t0, 1e-9)
        eta = (self.total - step) / rate if rate > 0 else float("inf")
        loss_txt = "" if loss is None else f"  loss {loss:.4f}"
        eta_txt = f"{eta:6.0f}s" if math.isfinite(eta) else "     ?"
        print(f"[train] step {step}/{self.total}  {rate:6.2f} steps/s  {rate * self.examples:8.1f} ex/s  "
              f"ETA {eta_txt}{loss_txt}", file=self.stream, flush=True)
