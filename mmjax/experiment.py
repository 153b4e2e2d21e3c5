"""The composition root: config → task → training → export → evaluation, the one path `train.py` and
`evaluate.py` (and notebooks) go through.

    run(config, workdir)          train (resuming if the workdir holds checkpoints), validating with the config's
                                  retrieval evaluator on the val split; export; then, if `config.final_eval`,
                                  `evaluate` on `config.eval_split`
    evaluate(config, workdir)     the config's evaluators on a finished run's export (or on a pretrained model,
                                  `config.pretrained`), writing results.json / results.md / plots/*.png

Validation and evaluation are the same code with the same scoring: `mmjax.evaluation.run.run_evals` with the
similarity derived from `config.loss` / `config.matching` (`scoring`). This is the only module that drives both the
trainer (`mmjax.train`) and the evaluators (`mmjax.evaluation`); neither of those imports the other.
"""

from __future__ import annotations

import os

import jax

from mmjax.config_validation import check_export_matches, check_resume, recorded_config, validate
from mmjax.evaluation.evaluators.retrieval import flat_metrics
from mmjax.evaluation.run import DEFAULT_EVALS, add_training_curves, run_evals, write_results
from mmjax.losses import similarity_options
from mmjax.similarity import inference_kind
from mmjax.tasks import build_task
from mmjax.train.export import load_exported
from mmjax.train.loop import train
from mmjax.train.model_card import write_model_card


def scoring(config) -> dict:
    """{"similarity": kind, "similarity_kw": options} the run's evaluators score with (empty for models that
    score as a whole, e.g. CLIP cosine or Flow-CLIP heads)."""
    loss = config.get("loss")
    if loss is None or "similarity" not in loss:
        return {}
    return {"similarity": loss.similarity, "similarity_kw": similarity_options(loss, config.get("matching"))}


VALIDATION_TYPES = ("retrieval", "compositional")


def validation_evals(config) -> dict:
    """The evaluators run every validation: `config.val_evals` when the config sets it (e.g. only the score the
    checkpoint is selected on, or a compositional suite whose accuracy selects it), else the config's retrieval
    evaluator(s) exactly as configured. A retrieval evaluator comes first (its metrics are logged unprefixed)."""
    explicit = config.get("val_evals")
    evals = dict(explicit or config.get("evals") or DEFAULT_EVALS)
    types = VALIDATION_TYPES if explicit else ("retrieval",)
    chosen = {k: v for k, v in evals.items() if dict(v).get("type", k) in types}
    retrieval = [k for k, v in chosen.items() if dict(v).get("type", k) == "retrieval"]
    if not retrieval:
        raise ValueError("config.val_evals / config.evals has no 'retrieval' evaluator to validate with (set "
                         "config.train.eval_every=0 to train without validation)")
    return {k: chosen[k] for k in retrieval + [k for k in chosen if k not in retrieval]}


def make_validator(config, task):
    """validate(variables) -> flat metrics: the retrieval evaluator's (`retrieval.flat_metrics`: the inference score
    of the training similarity, `mmjax.similarity.inference_kind` — top-k for MaxMatch — unprefixed), and a
    compositional evaluator's as "<name>/<suite>/<condition>" and "<name>/<mean>/<condition>"
    (`compositional.flat_metrics`; then the validation builds the split's suites). `train.select_metric` (default
    "rsum"; e.g. "semantic/rsum", "shapesworld_suites/binding_mean/real") picks the best checkpoint."""
    from mmjax.evaluation.evaluators import compositional
    evals, score = validation_evals(config), scoring(config)
    split = config.data.get("val_split", "val")
    primary = inference_kind(score["similarity"]) if score.get("similarity") else None
    retrieval_name = next(iter(evals))
    suites = any(dict(v).get("type", k) == "compositional" for k, v in evals.items())

    def validate(variables):
        context = task.eval_context(variables, split, suites=suites)
        results = run_evals(evals, context, **score)
        out = flat_metrics(results[retrieval_name], primary=primary)
        for name in evals:
            if name != retrieval_name and name in results:  # compositional (skipped where the context has no suites)
                out.update({f"{name}/{k}": v for k, v in compositional.flat_metrics(results[name]).items()})
        return out

    return validate


def run(config, workdir: str, *, hooks=()) -> dict:
    """Trains `config` in `workdir` and, if `config.final_eval`, evaluates it; prints the tables and plot paths.
    `hooks` go to the trainer (`mmjax.train.train`; tests inject faults with them)."""
    validate(config)  # before any data generation or compilation
    task = build_task(config, workdir)
    export_info = {"task": config.task, "config": recorded_config(config)}
    result = train(config, workdir, task, validate=make_validator(config, task), hooks=hooks,
                   export_info=export_info, check_resume=check_resume)
    val = result["final_val"]
    if val and jax.process_index() == 0:
        print("\nValidation results (last step; semantic = every image a caption is true of counts):")
        for k, v in val.items():
            if "/" not in k or k.startswith("semantic/"):
                print(f"  {k:20s} {v:8.2f}")
    if config.get("final_eval") and jax.process_index() == 0:
        result["results"] = evaluate(config, workdir, task=task)
    return result


def evaluate(config, workdir: str, *, split: str | None = None, task=None, verbose: bool = True,
             allow_config_mismatch: bool = False, params: str = "final", out_dir: str | None = None) -> dict:
    """Runs `config.evals` on the exported parameters in `workdir` (or on `config.pretrained`) and writes the
    results into `out_dir` (default `workdir`); returns them. `params`: 'final' (the last step's export) or 'best'
    (the parameters of the best validation RSUM, the protocol of VSE∞ and Set Div). The config must describe the
    exported model (model, data and scoring fields as recorded at export) unless `allow_config_mismatch`."""
    validate(config, stage="eval")
    if params not in ("final", "best"):
        raise ValueError(f"params must be 'final' or 'best', got {params!r}")
    out_dir = out_dir or workdir
    if config.get("pretrained"):
        context, split = _pretrained_context(config, workdir), "benchmarks"
    else:
        variables, info = load_exported(workdir, name="export" if params == "final" else "export_best")
        if info.get("task") != config.task:
            raise ValueError(f"{workdir} holds a {info.get('task')!r} run but the config is for {config.task!r}")
        differing = check_export_matches(info, config, allow_mismatch=allow_config_mismatch)
        if differing:
            print(f"[evaluate] WARNING: evaluating with config fields that differ from the export: {differing}",
                  flush=True)
        split = split or config.get("eval_split", "test")
        task = task or build_task(config, workdir)
        context = task.eval_context(variables, split)
    plot_dir = os.path.join(out_dir, "plots")
    results = run_evals(config.get("evals"), context, **scoring(config), plot_dir=plot_dir)
    header = {"split": split, "task": config.get("task") or config.get("pretrained")}
    if not config.get("pretrained"):
        header.update(params=params, step=info.get("step"))
    results = write_results({**header, **results}, out_dir)  # the numbers first, then the curves plot
    results = add_training_curves(results, os.path.join(workdir, "metrics.jsonl"), plot_dir, out_dir)
    if not config.get("pretrained"):
        _refresh_model_card(os.path.join(workdir, "export" if params == "final" else "export_best"), info, header,
                            out_dir)
    if verbose:
        print(f"\nResults ({split}, {params} parameters) — {os.path.join(out_dir, 'results.json')}\n")
        print(open(os.path.join(out_dir, "results.md")).read())
        for name, path in results.get("figures", {}).items():
            print(f"plot ({name}): {path}")
    return results


def _refresh_model_card(export_dir: str, info: dict, header: dict, out_dir: str) -> None:
    """The evaluated export's model_card.md written again with the tables of results.md (`mmjax.train.model_card`);
    a card that cannot be written is reported, never fatal (the results are on disk)."""
    try:
        with open(os.path.join(out_dir, "results.md"), encoding="utf-8") as f:
            tables = f.read()
        write_model_card(export_dir, info, {**header, "tables": tables,
                                            "results_path": os.path.abspath(os.path.join(out_dir, "results.json"))})
    except OSError as e:
        print(f"[evaluate] model card of {export_dir} not refreshed: {e}", flush=True)


def _pretrained_context(config, workdir: str) -> dict:
    if config.pretrained != "hf_clip":
        raise ValueError(f"config.pretrained must be 'hf_clip', got {config.pretrained!r}")
    from mmjax.evaluation.hf_clip import HFCLIPEvaluation
    head_workdir = config.data.get("head_workdir", "")
    head = load_exported(head_workdir) if head_workdir else None
    return HFCLIPEvaluation(config, workdir, head_export=head).context()
