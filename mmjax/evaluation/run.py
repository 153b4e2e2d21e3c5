"""Run a config's evaluators on an evaluation context, and write what they found.

`config.evals` is {name: {"type": evaluator, ...options}} (big_vision style; `mmjax.evaluation.registry`). Each
entry's options are completed with the run's scoring — the similarity kind and keyword options derived from
`config.loss` / `config.matching` (`mmjax.losses.similarity_options`) — where the entry does not set them, so
per-epoch validation and the final test evaluation, which both come through here, score alike
(docs/design.md#evaluation). An evaluator whose inputs the context lacks is skipped (its own `applies`).

This module knows nothing of training, nor of any one evaluator: the caller (`mmjax.experiment`) builds the context
(embedding functions and arrays of a split) and passes the scoring options.
"""

from __future__ import annotations

import json
import os

from mmjax.evaluation import registry
from mmjax.evaluation.evaluators.base import EvalEnv, RunScoring
from mmjax.provenance import environment

DEFAULT_EVALS = {"retrieval": {"type": "retrieval"}}


def resolve_evals(evals: dict | None, *, similarity: str | None = None,
                  similarity_kw: dict | None = None) -> dict:
    """{name: (evaluator type, its Options with the run's scoring filled in)}; a bad option raises `ValueError`
    naming `evals.<name>.<option>`."""
    scoring = RunScoring(similarity, dict(similarity_kw or {}))
    out = {}
    for name, options in dict(evals or DEFAULT_EVALS).items():
        options = options.to_dict() if hasattr(options, "to_dict") else dict(options)
        kind = options.pop("type", name)
        try:
            out[name] = (kind, registry.get(kind).make_options(options, scoring))
        except registry.InvalidOption as e:
            raise ValueError(f"config.evals.{name}.{e.field}: {e.message}") from None
    return out


def run_evals(evals: dict | None, context: dict, *, similarity: str | None = None,
              similarity_kw: dict | None = None, plot_dir: str | None = None) -> dict:
    """Runs every evaluator of `evals` that `context` can feed; returns {name: result, "evaluators": {name: type},
    "figures": {name: path}}."""
    env = EvalEnv(RunScoring(similarity, dict(similarity_kw or {})), plot_dir)
    results, types, figures = {}, {}, {}
    for name, (kind, options) in resolve_evals(evals, similarity=similarity, similarity_kw=similarity_kw).items():
        evaluator = registry.get(kind)
        if not evaluator.applies(options, context):
            continue
        results[name], types[name] = evaluator.run(options, context, env), kind
        figures.update(results[name].get("figures", {}) if isinstance(results[name], dict) else {})
    return {**results, "evaluators": types, "figures": figures}


def add_training_curves(results: dict, metrics_jsonl: str, plot_dir: str, out_dir: str) -> dict:
    """Draws the run's training curves from its metrics.jsonl after the results are written (a plot never costs the
    numbers: a failure is printed, and results.json stays as written); on success the figure joins `results` and
    results.json / results.md are written again."""
    if not os.path.exists(metrics_jsonl):
        return results
    from mmjax.evaluation.plots import plot_training_curves
    try:
        path = plot_training_curves(metrics_jsonl, os.path.join(plot_dir, "training_curves.png"))
    except Exception as e:  # noqa: BLE001 — the numbers are already on disk; say what failed and go on
        print(f"[evaluate] training curves from {metrics_jsonl} not drawn: {type(e).__name__}: {e}", flush=True)
        return results
    return write_results({**results, "figures": {**results.get("figures", {}), "training_curves": path}}, out_dir)


def to_json(x):
    if isinstance(x, dict):
        return {str(k): to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if hasattr(x, "tolist"):
        return x.tolist()
    return x


def write_results(results: dict, workdir: str) -> dict:
    """`results.json` (every number, and "environment": the package versions and platform they were computed with,
    `mmjax.provenance.environment()`) and `results.md` (the tables) in `workdir`; returns the JSON-able results."""
    results = to_json({**results, "environment": environment()})
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(workdir, "results.md"), "w") as f:
        f.write(summary_markdown(results))
    return results


def summary_markdown(results: dict) -> str:
    """The Markdown tables of every evaluator's result (each evaluator writes its own, `Evaluator.tables`)."""
    lines = []
    for name, kind in (results.get("evaluators") or {}).items():
        if name in results:
            lines += registry.get(kind).tables(name, results[name])
    return "\n".join(lines)
