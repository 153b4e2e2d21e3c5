"""Load a repo file (a script, a config, another test module's helpers) as a module by path."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(relative: str, name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config_variants(path) -> list[str]:
    """'' plus every `configs/<file>:<variant>` its docstring names, plus the module's own variant tables."""
    import re
    path = Path(path)
    module = load(str(path.relative_to(ROOT)), "cfg_" + path.stem)
    found = {""} | set(re.findall(re.escape(path.name) + r":([\w,]+)", module.__doc__ or ""))
    found |= {v for v in getattr(module, "VARIANTS", ()) if v}
    if path.name.startswith("flowclip_"):
        from mmjax.train.defaults import FLOWCLIP_HEADS
        found |= {h + s for h in FLOWCLIP_HEADS for s in ("", ",smoke")}
    if path.name == "clip_hf_eval.py":
        found.add(",".join(module.BENCHMARKS))
    return sorted(found)


def shipped_configs():
    """[(file name, variant, ConfigDict)] for every config file under configs/ and every variant it names."""
    out = []
    for path in sorted((ROOT / "configs").glob("*.py")):
        module = load(str(path.relative_to(ROOT)), "cfg_" + path.stem)
        out += [(path.name, v, module.get_config(v)) for v in config_variants(path)]
    return out
