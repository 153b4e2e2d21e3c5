"""Hand-made evaluation results and cell records for the reproduction tests (no training, no evaluation).

`results(...)` has the shape `mmjax.experiment.evaluate` returns (retrieval per score and protocol, set analysis,
suites); `record(...)` the shape of a runner's `cell.json`; `converged_metrics(...)` the best-parameter metrics of a
converged-budget cell (its own inference score and every common score, semantic and source ground truth).
"""

import os
import re

from mmjax.similarity import inference_kind
from reproduce import grid, metrics

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PNG = b"\x89PNG\r\n\x1a\n"
MACHINE = "2 CPU core(s), x86_64 Linux, Python 3.11.9"
J = (-1.0, 0.0, 1.0, 0.5, -0.5)   # per-seed jitter: seeds 0–2 have sample std 1, seeds 0–4 std √0.625 ≈ 0.79


def recall(rsum: float) -> dict:
    return {**{k: rsum / 6 for k in metrics.RETRIEVAL_KEYS[:-1]}, "rsum": rsum, "i2t_medr": 2.0}


def results(scores: dict, *, semantic: dict | None = None, single=None, single_sem=None, cv_log=None,
            suites=None, matrix=None) -> dict:
    """scores / semantic: {kind: RSUM} under the source / semantic ground truth; single, single_sem: (full RSUM,
    [element RSUMs]); cv_log: mean ln CV of the image elements; suites: (real, shuffle, fixed) accuracy of every
    task; matrix: the element-similarity matrix."""
    res = {"split": "test", "retrieval": {k: {"all": recall(v), "score_seconds": 0.1} for k, v in scores.items()}}
    for k, v in (semantic or {}).items():
        res["retrieval"][k]["semantic"] = recall(v)
    sa = {}
    if cv_log is not None:
        sa["circular_variance"] = {side: {"set": {"mean_cv": 0.2, "mean_log_cv": cv_log},
                                          "residual": {"mean_cv": 0.3, "mean_log_cv": cv_log + 0.5}}
                                   for side in ("image", "text")}
    if single is not None:
        sa["single_element"] = {"kind": "x", "full": {"rsum": single[0]}, "elements": [{"rsum": e} for e in single[1]]}
        if single_sem is not None:
            sa["single_element"]["semantic"] = {"full": {"rsum": single_sem[0]},
                                                "elements": [{"rsum": e} for e in single_sem[1]]}
    if matrix is not None:
        sa["element_similarity"] = matrix
    if sa:
        res["set_analysis"] = sa
    if suites is not None:
        chance = {"order": 20.0}
        tasks = dict.fromkeys(metrics.BINDING_SUITES + metrics.ARO_SUITES)
        res["shapesworld_suites"] = {t: {"conditions": {cond: {"tasks": {t: {"n": 10, "accuracy": a,
                                                                             "chance": chance.get(t, 50.0)}}}
                                                        for cond, a in zip(metrics.CONDITIONS, suites)}}
                                     for t in tasks}
    return res


def converged_metrics(name: str, sem: float, src: float, *, scores: dict | None = None, **kw) -> dict:
    """cell_metrics of a converged cell scored with its inference score and every common score at (`sem`, `src`);
    `scores` = {kind: (sem, src)} overrides some of them."""
    sim = grid.SPEC_BY_NAME[name].similarity
    kinds = dict.fromkeys((inference_kind(sim), sim, *grid.COMMON_SCORES))
    values = {k: (scores or {}).get(k, (sem, src)) for k in kinds}
    res = results({k: v[1] for k, v in values.items()}, semantic={k: v[0] for k, v in values.items()}, **kw)
    return metrics.cell_metrics(res, sim)


def record(name: str, seed: int, m: dict, *, budget: str = "default", **extra) -> dict:
    spec = grid.SPEC_BY_NAME[name]
    epochs = {"converged": 10, "converged_x2": 20, "long": 10}.get(budget, 2)
    return {"name": name, "group": spec.group, "label": spec.label, "seed": seed, "budget": budget,
            "budget_detail": {"num_epochs": epochs, "num_steps": 0, "batch_size": 128, "preset": "default",
                              "validation": "every epoch"},
            "steps": {"final": 100, "best": 50}, "best_params": True, "notes": [],
            "wall_s": {"train": 3000.0, "eval": 600.0, "total": 3600.0}, "load_avg_end": [2.0, 2.0, 2.0],
            "machine": MACHINE, "stability": {"steps_logged": 10, "nonfinite_losses": 0, "final_loss": 1.0,
                                              "best_val_rsum": 300.0},
            "curves": {}, "metrics": {"best": m, "final": m}, "arrays": {"best": {}, "final": {}},
            "figures": {"best": {}, "final": {}}, **extra}


def assert_tables_are_rectangular(md: str) -> None:
    """Every Markdown table row has its header's number of cells (an unescaped | in a cell would add one)."""
    width = None
    for line in md.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line)) - 1
        width = width or cells
        assert cells == width, line


def section(md: str, heading: str) -> str:
    """The text of the `## heading` section up to the next `## `."""
    assert f"\n## {heading}\n" in md, heading
    return md.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def table_row(text: str, first_cell: str) -> str:
    rows = [line for line in text.splitlines() if line.startswith(f"| {first_cell} |")]
    assert len(rows) == 1, (first_cell, rows)
    return rows[0]
