"""Field rules of the config schema: each is a function `value -> None (valid) | str (what is allowed)`.

    Num(ge=, gt=, le=, lt=, integer=, none_ok=)   a finite real (an integer with `integer`) within the bounds
    Choice(choices)                               one of a tuple (or of what a function returns: lazy imports)
    Each(rule, nonempty=)                         a list/tuple whose items all satisfy `rule`
    BOOL, STR, NAME (non-empty string), MAPPING, REGEX, MESH, pair(first, second), SHARDING_RULE, KAPPA
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re


class ConfigError(ValueError):
    """An invalid config; `problems` = [(field path, message)], every one of them in the message."""

    def __init__(self, problems, header: str = "invalid config"):
        self.problems = list(problems)
        n = len(self.problems)
        lines = "\n".join(f"  {path}{' ' if msg.startswith('= ') else ': '}{msg}" for path, msg in self.problems)
        super().__init__(f"{header} ({n} problem{'s' * (n != 1)}):\n{lines}")


class ConfigPathError(ConfigError, FileNotFoundError):
    """A `ConfigError` with a missing file or directory among its problems (so also a FileNotFoundError)."""


@dataclasses.dataclass(frozen=True)
class Num:
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    integer: bool = False
    none_ok: bool = False

    def __call__(self, v):
        if v is None and self.none_ok:
            return None
        kind = numbers.Integral if self.integer else numbers.Real
        # bool is an int subclass: `True` is not a count; non-finite values are never valid settings.
        if (isinstance(v, kind) and not isinstance(v, bool) and math.isfinite(v) and
                (self.ge is None or v >= self.ge) and (self.gt is None or v > self.gt) and
                (self.le is None or v <= self.le) and (self.lt is None or v < self.lt)):
            return None
        bounds = [f"{op} {b:g}" for op, b in ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt))
                  if b is not None]
        what = ("an integer" if self.integer else "a finite number") + (" " + " and ".join(bounds) if bounds else "")
        return f"must be {what}{' or None' if self.none_ok else ''}"


def Int(**bounds) -> Num:
    return Num(integer=True, **bounds)


PROB = Num(ge=0, lt=1)   # dropout and drop probabilities


@dataclasses.dataclass(frozen=True)
class Choice:
    choices: object

    def options(self) -> tuple:
        return tuple(self.choices() if callable(self.choices) else self.choices)

    def __call__(self, v):
        opts = self.options()
        return None if isinstance(v, (str, bool, type(None))) and v in opts else f"must be one of {opts}"


@dataclasses.dataclass(frozen=True)
class Each:
    rule: object
    nonempty: bool = False

    def __call__(self, v):
        if not isinstance(v, (list, tuple)) or (self.nonempty and not v):
            return f"must be a {'non-empty ' * self.nonempty}list"
        for i, x in enumerate(v):
            problem = self.rule(x)
            if problem:
                return f"item {i} ({x!r}) {problem}"
        return None


def BOOL(v):
    return None if isinstance(v, bool) else "must be True or False"


def STR(v):
    return None if isinstance(v, str) else "must be a string"


def NAME(v):
    return None if isinstance(v, str) and v else "must be a non-empty string"


def MAPPING(v):
    return None if isinstance(v, dict) else "must be a mapping {name: value}"


def REGEX(v):
    if not isinstance(v, str):
        return "must be a regular expression (string)"
    try:
        re.compile(v)
    except re.error as e:
        return f"must be a regular expression ({e})"
    return None


def pair(first, second):
    def check(v):
        if not isinstance(v, (list, tuple)) or len(v) != 2:
            return "must be a pair"
        return first(v[0]) or second(v[1])
    return check


def _axis_size(s):
    return None if isinstance(s, int) and not isinstance(s, bool) and (s >= 1 or s == -1) else \
        "size must be an integer >= 1 or -1"


def MESH(v):
    """((axis, size), ...) as `mmjax.train.sharding.make_mesh` takes it: unique names, one size may be -1."""
    problem = Each(pair(NAME, _axis_size), nonempty=True)(v)
    if problem:
        return problem
    names = [a for a, _ in v]
    if len(set(names)) != len(names):
        return f"has duplicate axis names {names}"
    return "may give size -1 to one axis only" if sum(s == -1 for _, s in v) > 1 else None


def SHARDING_RULE(v):
    """A `mmjax.train.sharding.spec_for` rule value."""
    axis = lambda a: a is None or isinstance(a, str) or (isinstance(a, (list, tuple)) and
                                                         all(isinstance(x, str) for x in a))
    if v in ("replicate", "fsdp") or (isinstance(v, (list, tuple)) and all(axis(a) for a in v)):
        return None
    return "must be 'replicate', 'fsdp' or a PartitionSpec tuple of axis names / None"


def KAPPA(v):
    """`flowclip.cimr_kappa` (mmjax.flowclip.options.FlowCLIPOptions): 'logit_scale' (κ = 1/τ_c) or a number."""
    return None if v == "logit_scale" or Num(gt=0)(v) is None else "must be 'logit_scale' or a finite number > 0"


def PAD_PENALTY(v):
    """`matching.pad_penalty` (mmjax.matching.solve): 'auto' or a finite positive penalty."""
    return None if v == "auto" or Num(gt=0)(v) is None else "must be 'auto' or a finite number > 0"
