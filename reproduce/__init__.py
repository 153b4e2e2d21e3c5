"""Reproduction runner: trains and evaluates the MaxMatch ablation / baselines and the Flow-CLIP grid over seeds,
then writes a report comparing the papers' claims with ours (reproduce/README.md).

    python -m reproduce --budget {smoke,default,long} --seeds N --out DIR

Modules: `grid` (cells and budgets), `runner` (resumable execution with progress), `metrics` (flat numbers per
cell, seed statistics), `claims` (paper claims and the verdict rule), `report` (markdown + JSON), `figures` (PNG bar
charts). `main(argv)` is the command line.
"""

from reproduce.claims import CLAIMS, verdict
from reproduce.grid import BUDGETS, SPECS, make_grid

__all__ = ["CLAIMS", "verdict", "BUDGETS", "SPECS", "make_grid", "main"]


def main(argv=None) -> int:
    from reproduce.__main__ import main as _main
    return _main(argv)
