"""The reproduction study: trains the MaxMatch ablation, baselines, knob cells and the Flow-CLIP grid over seeds at
several budgets, and reports the papers' claims decided by real tests (reproduce/README.md,
docs/reproduction/protocol.md).

    python -m reproduce --budget {smoke,default,long,converged,converged_x2} --seeds N --out DIR --archive RECORDS
    python -m reproduce --report-only --archive RECORDS --out DIR --publish docs/reproduction.md

Modules: `grid` (cells and budgets), `runner` (resumable execution with progress), `archive` (committed records),
`metrics` (flat numbers per cell), `stats` (the tests), `claims` (the source's statements and how each is decided),
`report` + `tables` + `figures` (Markdown, JSON, PNG), `provenance`, `curves`. `main(argv)` is the command line.
"""

from reproduce.claims import CLAIMS, decide
from reproduce.grid import BUDGETS, SPECS, make_grid

__all__ = ["CLAIMS", "decide", "BUDGETS", "SPECS", "make_grid", "main"]


def main(argv=None) -> int:
    from reproduce.__main__ import main as _main
    return _main(argv)
