"""Small display helpers shared by the notebooks in this folder (not part of the `mmjax` library).

    from notebooks.helpers import show, table, unit

`show(fig)` displays a matplotlib figure once and frees it; `table(header, rows, fmt)` renders rows as a Markdown
table (every float cell through one format); `unit(x)` scales the rows of `x` to unit length; `index_ticks(ax, ...)`
puts one integer tick per element index on a heat map's axes; `ROOT` is the repository root.

The notebooks find this module from the repository root: each puts the root on `sys.path` first (the kernel's
directory is `notebooks/` under Jupyter; the test runs them from a temporary directory with the root on PYTHONPATH).
"""

from __future__ import annotations

import numbers
import pathlib
import sys

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository root (configs/, train.py)


def show(fig) -> None:
    """Display `fig` once and close it (explicit, so it works under any matplotlib backend, inline or not)."""
    display(fig)
    plt.close(fig)


def _cell(value, fmt: str) -> str:
    if isinstance(value, (bool, np.bool_)):
        text = str(bool(value))
    elif isinstance(value, numbers.Integral):
        text = str(int(value))
    elif isinstance(value, numbers.Real):
        text = fmt.format(float(value))
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")  # a cell is one line; a pipe would split it


def table(header, rows, fmt: str = "{:.3f}") -> Markdown:
    """A Markdown table of `header` and `rows`. Floats (Python or NumPy, also 0-d arrays) are written with `fmt`,
    integers as integers, anything else with `str`; `|` in a cell is escaped. Every row must be as long as the
    header."""
    header = [str(h) for h in header]
    lines = ["| " + " | ".join(_cell(h, fmt) for h in header) + " |", "|" + "---|" * len(header)]
    for i, row in enumerate(rows):
        row = list(row)
        if len(row) != len(header):
            raise ValueError(f"row {i} has {len(row)} cells, the header {len(header)}: {row!r}")
        row = [v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v for v in row]
        lines.append("| " + " | ".join(_cell(v, fmt) for v in row) + " |")
    return Markdown("\n".join(lines))


def unit(x, eps: float = 1e-12):
    """`x` with each row (last axis) scaled to unit L2 norm; a zero row stays zero. NumPy in (lists too) → float32
    NumPy out; a JAX array (also inside `jit`) stays a JAX array."""
    jax = sys.modules.get("jax")  # only a caller that imported jax can pass a JAX array (or a tracer)
    if jax is not None and isinstance(x, jax.Array):
        return x / jax.numpy.maximum(jax.numpy.linalg.norm(x, axis=-1, keepdims=True), eps)
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


def index_ticks(ax, n_rows: int, n_cols: int, *, xlabel: str = "caption element j",
                ylabel: str = "image element i") -> None:
    """One integer tick per row / column of an `imshow`n block, and the axis labels (element indices)."""
    ax.set_xticks(range(n_cols))
    ax.set_yticks(range(n_rows))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
