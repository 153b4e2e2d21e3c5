"""What an evaluator is: its options, when it applies to a context, how it runs, and the tables it writes.

An evaluator type (`config.evals.<name>.type`, big_vision style) is one module of this package that defines

    Options     a frozen dataclass of the options `config.evals.<name>` may set. A field left None takes the
                default of the library function the evaluator calls (one owner per default); `__post_init__`
                refuses a bad value with `InvalidOption(field, message)`; an optional
                `with_scoring(scoring) -> Options` fills what the run's scoring decides (e.g. the similarity kinds).
    EVALUATOR = Evaluator(Options, run, applies, tables)

and is listed by one line of `mmjax.evaluation.registry.EVALUATORS`. `run(options, context, env)` returns a
JSON-serialisable dict (figures as {"figures": {name: png path}}); `applies(options, context)` says whether the
context can feed it (otherwise it is skipped, e.g. no compositional records on a validation split);
`tables(name, result)` returns the Markdown lines of results.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any


class InvalidOption(ValueError):
    """A bad evaluator option: `field` names it, the message says what is allowed."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclasses.dataclass(frozen=True)
class RunScoring:
    """The run's scoring function: the similarity kind its loss trains (None for models scored as a whole, e.g.
    CLIP cosine or Flow-CLIP heads) and that kind's keyword options (`mmjax.losses.similarity_options`)."""

    similarity: str | None = None
    similarity_kw: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class EvalEnv:
    """What an evaluator may use beyond its options and context: the run's scoring and the plot directory (None:
    no figures)."""

    scoring: RunScoring = RunScoring()
    plot_dir: str | None = None


def always(options, context) -> bool:
    return True


def no_tables(name: str, result: dict) -> list[str]:
    return []


@dataclasses.dataclass(frozen=True)
class Evaluator:
    options: type
    run: Callable[[Any, dict, EvalEnv], dict]
    applies: Callable[[Any, dict], bool] = always
    tables: Callable[[str, dict], list[str]] = no_tables

    def make_options(self, raw: Mapping[str, Any] | None, scoring: RunScoring = RunScoring()):
        """The options of a `config.evals` entry (without its "type"), checked, with the run's scoring filled
        in. Raises `InvalidOption` naming the field."""
        raw = dict(raw or {})
        raw.pop("type", None)
        known = [f.name for f in dataclasses.fields(self.options)]
        for key in raw:
            if key not in known:
                raise InvalidOption(key, f"is not an option of this evaluator; known: {known}")
        options = self.options(**raw)
        with_scoring = getattr(options, "with_scoring", None)
        return with_scoring(scoring) if with_scoring else options


def given(options) -> dict[str, Any]:
    """The options that are set (not None), as keyword arguments of the library function they configure."""
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
            if getattr(options, f.name) is not None}


# ---- checks for Options.__post_init__ -------------------------------------------------------------------------

def check_int(field: str, value, *, ge: int = 1) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < ge):
        raise InvalidOption(field, f"must be an int >= {ge}, got {value!r}")


def check_choices(field: str, values, choices: Sequence) -> None:
    """`values`: None, or a non-empty sequence of members of `choices`."""
    if values is None:
        return
    if isinstance(values, str) or not isinstance(values, Sequence) or not values:
        raise InvalidOption(field, f"must be a non-empty list of {tuple(choices)}, got {values!r}")
    bad = [v for v in values if v not in choices]
    if bad:
        raise InvalidOption(field, f"has {bad}; choose from {tuple(choices)}")


def check_type(field: str, value, types, what: str) -> None:
    if value is not None and not isinstance(value, types):
        raise InvalidOption(field, f"must be {what}, got {value!r}")


def as_tuple(options, *fields: str) -> None:
    """Freezes list-valued fields of a frozen dataclass into tuples (configs give lists or tuples)."""
    for name in fields:
        value = getattr(options, name)
        if isinstance(value, list):
            object.__setattr__(options, name, tuple(value))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> list[str]:
    return ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(map(str, r)) + " |" for r in rows)]
