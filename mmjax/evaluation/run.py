"""What `evaluate.py` runs: restore a finished run's exported parameters, build its task's evaluation context on a
split, run the evaluators named in `config.evals` ({name: {"type": evaluator, ...options}}, big_vision style), and
write `results.json` (nested by evaluator name), `results.md` (a summary table) and PNG plots into the workdir.
"""

from __future__ import annotations

import json
import os

from mmjax.evaluation.registry import run_evaluator
from mmjax.train.export import load_exported
from mmjax.tasks import EVAL_ONLY_TASKS, build_task

RETRIEVAL_KEYS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")


def _to_json(x):
    if isinstance(x, dict):
        return {str(k): _to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_json(v) for v in x]
    if hasattr(x, "tolist"):
        return x.tolist()
    return x


def summary_markdown(results: dict) -> str:
    lines = []
    for name, res in results.items():
        if not isinstance(res, dict):
            continue
        rows = []
        for score_name, by_protocol in res.items():
            if isinstance(by_protocol, dict):
                for protocol, m in by_protocol.items():
                    if isinstance(m, dict) and "rsum" in m:
                        rows.append(f"| {score_name} | {protocol} | " +
                                    " | ".join(f"{m[k]:.2f}" for k in RETRIEVAL_KEYS) + " |")
        if rows:
            lines += [f"### {name}", "", "| score | protocol | " + " | ".join(RETRIEVAL_KEYS) + " |",
                      "|---|---|" + "---|" * len(RETRIEVAL_KEYS), *rows, ""]
        for suite, r in res.items():
            if isinstance(r, dict) and "table" in r:
                lines += [f"### {name}: {suite}", "", r["table"], ""]
        tops = {k: v for k, v in res.items() if k.startswith(("top", "chance")) and isinstance(v, (int, float))}
        if tops:  # zero-shot classification
            lines += [f"### {name}", "", "| " + " | ".join(tops) + " |", "|" + "---|" * len(tops),
                      "| " + " | ".join(f"{v:.2f}" for v in tops.values()) + " |", ""]
        if "circular_variance" in res:
            lines += [f"### {name}: circular variance", "", "```", json.dumps(res["circular_variance"], indent=1),
                      "```", ""]
    return "\n".join(lines)


def evaluate_workdir(config, workdir: str, *, split: str | None = None) -> dict:
    variables = None  # evaluation-only tasks (a pretrained checkpoint) have no export
    if config.task not in EVAL_ONLY_TASKS:
        variables, info = load_exported(workdir)
        if info.get("task") != config.task:
            raise ValueError(f"{workdir} holds a {info.get('task')!r} run but the config is for {config.task!r}")
    split = split or config.get("eval_split", "test")
    task = build_task(config, workdir)
    context = task.eval_context(variables, split)
    plot_dir = os.path.join(workdir, "plots")
    results, figures = {}, {}
    for name, options in dict(config.get("evals", {"retrieval": {"type": "retrieval"}})).items():
        options = options.to_dict() if hasattr(options, "to_dict") else dict(options)
        kind = options.pop("type", name)
        if kind == "set_analysis":
            options.setdefault("out_dir", plot_dir)
            metrics = os.path.join(workdir, "metrics.jsonl")
            if os.path.exists(metrics):
                options.setdefault("metrics_jsonl", metrics)
        if kind == "compositional" and "records" not in context:
            continue
        if kind == "zeroshot":
            if not options.get("folder"):
                options.pop("folder", None)  # "" = no folder configured
            if not ({"folder", "tfds"} & set(options) or "labels" in context):
                continue  # no images to classify
        results[name] = run_evaluator(kind, options, context)
        figures.update(results[name].get("figures", {}) if isinstance(results[name], dict) else {})
    metrics_path = os.path.join(workdir, "metrics.jsonl")
    if os.path.exists(metrics_path) and "training_curves" not in figures:
        from mmjax.evaluation.plots import plot_training_curves
        figures["training_curves"] = plot_training_curves(metrics_path, os.path.join(plot_dir, "training_curves.png"))
    results = _to_json({"split": split, "task": config.task, **results, "figures": figures})
    with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(workdir, "results.md"), "w") as f:
        f.write(summary_markdown(results))
    return results
