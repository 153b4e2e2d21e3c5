"""Evaluators by `type` (`config.evals.<name>.type`, big_vision style): one line per evaluator module.

Each module defines its `Options` and `EVALUATOR` (`mmjax.evaluation.evaluators.base`): the options it takes (and
their checks), when it applies to an evaluation context, how it runs and the tables it writes. Adding an evaluator
is its module plus one line here (or `register(name, evaluator)` at run time, e.g. a plug-in or a test);
`mmjax.evaluation.run.run_evals` and `mmjax.config_validation` need no change.
"""

from __future__ import annotations

import importlib

from mmjax.evaluation.evaluators.base import EvalEnv, Evaluator, InvalidOption, RunScoring

EVALUATORS: dict[str, str | Evaluator] = {
    "retrieval": "mmjax.evaluation.evaluators.retrieval",
    "compositional": "mmjax.evaluation.evaluators.compositional",
    "zeroshot": "mmjax.evaluation.evaluators.zeroshot",
    "set_analysis": "mmjax.evaluation.evaluators.set_analysis",
    "local_probes": "mmjax.evaluation.evaluators.local_probes",
}


def register(name: str, evaluator: str | Evaluator) -> None:
    """Adds (or replaces) evaluator `name`: an `Evaluator`, or the path of a module that defines `EVALUATOR`."""
    EVALUATORS[name] = evaluator


def get(name: str) -> Evaluator:
    if name not in EVALUATORS:
        raise ValueError(f"unknown evaluator {name!r}; choose one of {sorted(EVALUATORS)}")
    entry = EVALUATORS[name]
    return importlib.import_module(entry).EVALUATOR if isinstance(entry, str) else entry


def option_problems(name: str, options) -> list[tuple[str, str]]:
    """[(option, what is wrong)] of one `config.evals` entry of evaluator `name` (config validation)."""
    try:
        get(name).make_options(options)
    except InvalidOption as e:
        return [(e.field, e.message)]
    except TypeError as e:  # a dataclass refusing a value it cannot take
        return [("", str(e))]
    return []


def run_evaluator(name: str, options: dict | None, context: dict, *, scoring: RunScoring = RunScoring(),
                  plot_dir: str | None = None) -> dict:
    """Runs evaluator `name` with `options` (a `config.evals` entry) on `context`; its result (JSON-ready)."""
    evaluator = get(name)
    return evaluator.run(evaluator.make_options(options, scoring), context,
                         EvalEnv(scoring=scoring, plot_dir=plot_dir))
