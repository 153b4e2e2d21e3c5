"""Config overrides on the command line (`--config.a.b=v`, ml_collections' `config_flags`) that name no field.

ml_collections reports an override of an unknown field with a long traceback ending in `AttributeError: "'k'"`,
naming neither the override nor the fields that exist. The mains (train.py, evaluate.py) define their config flag
with `define_config_file` and parse with `parse_flags` (absl's `app.run(main, flags_parser=parse_flags)`): such an
override then prints one error naming the field and the known fields of its sub-config, and exits with status 2
before anything runs. Valid command lines are parsed exactly as before (the helpers only catch the failure).
"""

from __future__ import annotations

import difflib
import re
import sys

EXIT_USAGE = 2  # a bad command line


def define_config_file(name: str, default: str, help_string: str, **kwargs):
    """`config_flags.DEFINE_config_file`, whose unknown-field overrides exit with one clear error (module
    docstring). Without `--<name>=path` on the command line, ml_collections parses the overrides here already."""
    from ml_collections import config_flags
    try:
        return config_flags.DEFINE_config_file(name, default, help_string, **kwargs)
    except (AttributeError, KeyError) as err:
        _exit_if_unknown_field(err, sys.argv, name, default)
        raise


def parse_flags(argv, *, name: str = "config", default: str | None = None):
    """absl's `parse_flags_with_usage` (the default `flags_parser` of `app.run`), with unknown config fields
    reported as one error naming the field and its sub-config's known fields (exit status 2)."""
    from absl import app, flags
    try:
        return app.parse_flags_with_usage(argv)
    except (AttributeError, KeyError) as err:
        if default is None:
            default = flags.FLAGS[name].default_as_str.strip("'") if name in flags.FLAGS else None
        _exit_if_unknown_field(err, argv, name, default)
        raise


def unknown_override(config, override: str) -> str | None:
    """The problem with the dotted `override` path (e.g. 'model.k') in `config`, or None when every segment is
    a field. Paths with an index (`a[0]`) are not inspected."""
    if "[" in override:
        return None
    node, here = config, "config"
    for key in override.split("."):
        fields = _fields(node)
        if fields is None:
            return f"{here} is {type(node).__name__} {node!r}, not a config: it has no field {key!r}"
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return (f"{here} has no field {key!r}{hint}; known fields of {here}: "
                    f"{', '.join(sorted(map(str, fields)))}")
        node, here = node[key], f"{here}.{key}"
    return None


def load_config_file(path: str):
    """`get_config(*variant)` of the config file `path[:variant]`, loaded as config_flags loads it."""
    import importlib.util

    file, *variant = path.split(":", 1)
    spec = importlib.util.spec_from_file_location("_mmjax_cli_config", file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a config module from {file!r}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(*variant)


def _fields(node):
    if hasattr(node, "keys") and hasattr(node, "__getitem__"):
        return list(node.keys())
    return None


def _overrides(argv, name: str) -> list[tuple[str, str]]:
    """(argument as given, dotted field path) of every `--name.path[=value]` / `--noname.path` in argv."""
    out = []
    for arg in argv[1:]:
        m = re.match(rf"^--?(?:no)?{re.escape(name)}\.([^=]+)", arg)
        if m:
            out.append((arg, m.group(1)))
    return out


def _config_path(argv, name: str, default):
    """The config file (path[:variant]) named on the command line, else the flag's default."""
    path = default
    for i, arg in enumerate(argv[1:], start=1):
        m = re.match(rf"^--?{re.escape(name)}(=(.*))?$", arg)
        if m:
            path = m.group(2) if m.group(1) else (argv[i + 1] if i + 1 < len(argv) else path)
    return path


def _exit_if_unknown_field(err, argv, name: str, default) -> None:
    """Print one error and exit(2) if an override of argv names an unknown field; return (the caller re-raises
    `err`) when the failure is something else."""
    overrides = _overrides(argv, name)
    path = _config_path(argv, name, default)
    if not overrides or not path:
        return
    try:
        config = load_config_file(path)
    except Exception:  # the config itself does not load: let the original error speak
        return
    problems = [(arg, p) for arg, field in overrides if (p := unknown_override(config, field))]
    if not problems:
        return
    lines = [f"FATAL Flags parsing error: unknown config field in {arg}: {p}" for arg, p in problems]
    sys.stderr.write("\n".join(lines) + f"\n(config file: {path}; overrides must name existing fields)\n")
    sys.stderr.flush()
    sys.exit(EXIT_USAGE)
