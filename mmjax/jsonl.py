"""JSON-lines files (`metrics.jsonl`, feature-cache records): read row by row, skipping what a killed writer leaves.

A run killed mid-write leaves a last line cut short; a disk that filled up can leave a broken one in the middle.
`read_jsonl` keeps every line that parses to a JSON object and skips the others with a warning naming the file and
the line number — finished work (a run's metrics, an evaluation's curves) is never lost to one bad line, and the
skip is never silent. `strict=True` raises instead, naming the same place (for files that must be whole, e.g. a
feature cache's records).
"""

from __future__ import annotations

import json
import warnings


class JSONLWarning(UserWarning):
    pass


def read_jsonl(path: str, *, strict: bool = False, keep_lines: bool = False) -> list:
    """The JSON objects of `path`, one per non-empty line, in order (module docstring). With `keep_lines`, a list of
    (row, raw line) pairs instead (for rewriting a file without re-serialising its rows)."""
    out = []
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError(f"a JSON {type(row).__name__}, not an object")
            except ValueError as e:  # json.JSONDecodeError is a ValueError
                message = f"{path}:{number}: not a JSON object ({e}); line skipped"
                if strict:
                    raise ValueError(message.replace("; line skipped", "")) from e
                warnings.warn(message, JSONLWarning, stacklevel=2)
                continue
            out.append((row, line) if keep_lines else row)
    return out
