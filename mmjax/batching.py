"""Fixed-shape batched application of a function over arrays, and progress reporting — one of each for the library.

`batched_apply(fn, inputs, batch_size)` cuts the leading axis into batches of exactly `batch_size` rows: the last one
is padded by repeating its last row (`pad_rows`), never with zeros — an all-zero row can be NaN after a masked
normaliser or an all-padding attention — and the padding is sliced off the outputs again. Every call therefore has
one shape and a jitted `fn` compiles once, whatever the number of rows.

`progress(total, name)` is a `tqdm` bar (rate and ETA) or a no-op for `name=None`: a live bar on a terminal, a widget
in a notebook, and one plain line per refresh when stdout is a log file or a pipe.

Silencing: every bar of the library goes through `progress`, so `set_progress(False)` (e.g. at the top of a notebook)
turns all of them off — embedding, scoring, the compositional and zero-shot evaluators — and `set_progress(True)`
back on; it returns the previous setting. The public helpers of `mmjax.evaluation.embed` (and `batched_apply`) also
take `progress=False` for one call.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence

import jax
import numpy as np
from tqdm.auto import tqdm


def pad_rows(x, n: int):
    """`x` with its leading axis padded to `n` rows by repeating the last row (works on any pytree of arrays)."""
    def pad(a):
        a = np.asarray(a)
        if a.shape[0] > n:
            raise ValueError(f"cannot pad {a.shape[0]} rows down to {n}")
        if a.shape[0] == n:
            return a
        return np.concatenate([a, np.repeat(a[-1:], n - a.shape[0], axis=0)], axis=0)
    return jax.tree_util.tree_map(pad, x)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EMPTY_BAR = re.compile(r"(^|\s)0%\|")


class _LineWriter:
    """A file-like sink that hands each finished tqdm line to `log` (for callers that collect log lines)."""

    def __init__(self, log: Callable[[str], None]):
        self.log = log

    def write(self, text: str) -> None:
        # Cursor moves (nested bars) mean nothing in a log; the 0 % line of a new bar carries no information.
        text = _ANSI.sub("", text).strip("\r\n ")
        if text and not _EMPTY_BAR.search(text):
            self.log(text)

    def flush(self) -> None:
        pass


_PROGRESS = {"enabled": True}


def set_progress(enabled: bool) -> bool:
    """Turns every progress bar of the library on or off (module docstring); returns the previous setting, so
    `previous = set_progress(False)` ... `set_progress(previous)` restores it."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_progress takes True or False, got {enabled!r}")
    previous, _PROGRESS["enabled"] = _PROGRESS["enabled"], enabled
    return previous


def progress_enabled() -> bool:
    """Whether progress bars are shown (`set_progress`)."""
    return _PROGRESS["enabled"]


def progress(total: int, name: str | None, *, unit: str = "it", initial: int = 0,
             log: Callable[[str], None] | None = None, **kwargs):
    """A tqdm bar over `total` units (rate, elapsed<remaining) on stdout, or line by line to `log`
    (`name=None`, or `set_progress(False)`: disabled, same interface, nothing written)."""
    if name is not None and not _PROGRESS["enabled"]:
        name = None
    if log is None and not sys.stdout.isatty():  # a log file or pipe: one line per refresh, no carriage returns
        log = _print_line
    return tqdm(total=total, initial=initial, desc=name, unit=unit, disable=name is None,
                file=sys.stdout if log is None else _LineWriter(log), mininterval=kwargs.pop("mininterval", 10.0),
                dynamic_ncols=log is None, **kwargs)


def _print_line(text: str) -> None:
    print(text, flush=True)


_progress_bar = progress  # for functions whose `progress` keyword shadows this function


def batched_apply(fn: Callable, inputs: Sequence, *, batch_size: int = 256, name: str | None = "embed",
                  jit: bool = True, progress: bool = True):
    """Applies `fn(*batch)` to fixed-size batches of `inputs` (arrays sharing the leading axis; None passes through)
    and concatenates the outputs (any pytree of arrays with a leading batch axis; None leaves are dropped).

    Batches hold exactly `batch_size` rows (module docstring), so `fn` is traced once; `jit=False` when `fn` is
    already jitted. `name` labels the progress bar (None or `progress=False`: silent; `set_progress`).
    """
    arrays = [None if x is None else np.asarray(x) for x in inputs]
    sizes = {x.shape[0] for x in arrays if x is not None}
    if len(sizes) != 1:
        raise ValueError(f"inputs must share one leading dimension, got {sorted(sizes)}")
    n = sizes.pop()
    if n == 0:
        raise ValueError("nothing to apply the function to (0 rows)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    call = jax.jit(fn) if jit else fn
    outs = []
    with _progress_bar(n, name if progress else None, unit="row") as bar:
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            batch = [None if x is None else pad_rows(x[start:stop], batch_size) for x in arrays]
            out = call(*batch)
            outs.append(jax.tree_util.tree_map(lambda y, v=stop - start: np.asarray(y)[:v], out))
            bar.update(stop - start)
    return jax.tree_util.tree_map(lambda *ys: np.concatenate(ys, axis=0), *outs)
