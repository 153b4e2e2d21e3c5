"""`model_card.md` of an export: what was trained, how it scores, its test metrics and what it is (not) for.

Written by `mmjax.train.export.export_params` with the export (from export.json's info: the task, the config, the
step, the command line, the code version), and written again by `mmjax.experiment.evaluate` with the evaluation's
tables (results.md) once evaluate.py has run, so a copied export directory carries its own numbers. Everything on
the card is read from export.json, so rewriting it never changes what it says about training.

    write_model_card(export_dir, info, evaluation=None) -> path
    code_version() -> {"mmjax", "git_commit", "git_dirty"}     (recorded in export.json)
    launch_command() -> str                                    (recorded in export.json)
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys

from mmjax.provenance import package_versions
from mmjax.similarity import inference_kind

CARD = "model_card.md"
SHOWN_PACKAGES = ("mmjax", "jax", "jaxlib", "flax", "optax", "numpy")


def launch_command() -> str:
    """The command line of this process, as a user would retype it."""
    return shlex.join(["python", *sys.argv]) if sys.argv and sys.argv[0] else ""


@functools.lru_cache(maxsize=1)
def code_version() -> dict:
    """{"mmjax": installed version, "git_commit": HEAD of the checkout the package runs from (None outside one),
    "git_dirty": whether tracked files differ from it}; git is asked with a short timeout and never fails a run."""
    out = {"mmjax": package_versions(("mmjax",))["mmjax"], "git_commit": None, "git_dirty": None}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        run = functools.partial(subprocess.run, cwd=root, capture_output=True, text=True, timeout=5)
        head = run(["git", "rev-parse", "HEAD"])
        if head.returncode == 0:
            out["git_commit"] = head.stdout.strip()
            status = run(["git", "status", "--porcelain", "--untracked-files=no"])
            out["git_dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def config_name(command: str) -> str | None:
    """`configs/NAME.py[:variant]` from a train.py / evaluate.py command line, None when it names no config."""
    args = shlex.split(command or "")
    for i, arg in enumerate(args):
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
        if arg == "--config" and i + 1 < len(args):
            return args[i + 1]
    return None


def _overrides(command: str) -> list[str]:
    return [a for a in shlex.split(command or "") if a.startswith("--config.")]


def _evaluate_command(command: str) -> str:
    """The evaluate.py command of a train.py command line (same config and overrides), or a template."""
    args = shlex.split(command or "")
    if len(args) >= 2 and os.path.basename(args[1]) == "train.py":
        return shlex.join(["python", os.path.join(os.path.dirname(args[1]), "evaluate.py"), *args[2:]])
    return "python evaluate.py --config <the training config> --workdir <the run's workdir>"


def _model_line(task: str, cfg: dict, info: dict) -> str:
    model = cfg.get("model", {})
    if task == "retrieval":
        head = {"spm": "set prediction module", "pie": "PIE (PVSE)", "none": "single vector"}.get(
            model.get("set_head"), model.get("set_head"))
        return (f"image tower `{model.get('image', {}).get('tower')}`, text tower "
                f"`{model.get('text', {}).get('tower')}`, {head} with K = {model.get('num_embeds')} embeddings of "
                f"D = {model.get('embed_dim')}")
    if task == "clip_pretrain":
        return (f"ShapesWorld CLIP ({info.get('mode', 'pixels')}): width {model.get('width')}, "
                f"{model.get('vision_layers')} image / {model.get('text_layers')} text layers, projection "
                f"{model.get('projection_dim')}")
    if task == "flowclip_head":
        return (f"Flow-CLIP head (use_local = {cfg.get('flowclip', {}).get('use_local')}) of dimension "
                f"{info.get('dim')} on a frozen ShapesWorld CLIP (copied into `base/`)")
    return f"`{task}`"


def _data_line(cfg: dict, info: dict) -> str:
    data = cfg.get("data", {})
    spec = info.get("tokenizer_spec") or {}
    tokens = f"; captions tokenised to {spec['max_len']} positions ({spec['kind']} tokenizer)" if spec else ""
    if data.get("name") == "shapesworld":
        return (f"ShapesWorld (synthetic), preset `{data.get('preset', info.get('preset'))}`, data seed "
                f"{data.get('seed', info.get('seed'))}, mode `{data.get('mode', info.get('mode', 'pixels'))}`"
                f"{tokens}")
    if data.get("name") == "precomp":
        return f"precomputed region features from `{data.get('path')}`{tokens}"
    return f"`{data.get('name')}`{tokens}"


def inference_line(task: str, cfg: dict) -> str:
    """How the exported model scores an (image, caption) pair at inference."""
    if task == "retrieval":
        loss = cfg.get("loss", {})
        trained = loss.get("similarity")
        if trained is None:
            return "the set similarity of `config.loss.similarity` (not recorded)"
        opts = ", ".join(f"{k} = {loss[k]}" for k in ("s_h", "alpha", "match_on", "solver") if k in loss)
        return (f"`{inference_kind(trained)}` between the image's and the caption's embedding sets "
                f"(`mmjax.similarity.inference_kind` of the training similarity `{trained}`; {opts})")
    if task == "clip_pretrain":
        return "cosine of the unit global image and text embeddings"
    if task == "flowclip_head":
        local = cfg.get("flowclip", {}).get("use_local", True)
        return (f"the head's `{'flowclip' if local else 'global_m'}` score of the frozen CLIP's features "
                f"({'global + local token matching' if local else 'global bilinear'})")
    return "(unknown task)"


LIMITS = {
    "shapesworld": (
        "A research model trained on the synthetic ShapesWorld benchmark: rendered coloured shapes on a grid (or "
        "their region vectors), captions from a small grammar of {n} words. It is meant for studying set-based "
        "image–text matching and compositional binding, and for reproducing the project's tables. It knows "
        "nothing of natural images or free text: words outside the grammar become [UNK], longer captions are "
        "refused, and its scores are comparable only within this model. Short runs (smoke tests, a few steps) "
        "score near chance. Do not use it to make decisions about people or real-world content."),
    "other": (
        "A research model for image–text retrieval trained with mmjax on precomputed features. Its inputs must "
        "come from the same feature extractor and tokenizer it was trained with; it inherits the biases of its "
        "training captions and images, and its scores are comparable only within this model. It is meant for "
        "research and benchmark comparisons, not for decisions about people or real-world content."),
}


def render(info: dict, evaluation: dict | None = None, *, export_name: str = "export") -> str:
    """The card's Markdown (module docstring). `evaluation`: {"split", "params", "step", "tables" (Markdown),
    "results_path"} of the last evaluate.py run, or None."""
    task = info.get("task", "?")
    cfg = info.get("full_config") or info.get("config") or {}
    command = info.get("command", "")
    name = config_name(command)
    train = cfg.get("train", {})
    steps = info.get("step")
    which = "the best validation" if export_name == "export_best" else "the final"
    selected = f", selected on validation {info['val_rsum']:.2f}" if "val_rsum" in info else ""
    budget = (f"{train['num_steps']} steps" if train.get("num_steps") else
              f"{train.get('num_epochs')} epochs" if train.get("num_epochs") else "?")
    code = info.get("code_version") or {}
    versions = (info.get("environment") or {}).get("packages") or {}
    git = (f", git `{code['git_commit'][:12]}`{' (uncommitted changes)' if code.get('git_dirty') else ''}"
           if code.get("git_commit") else "")
    pkgs = ", ".join(f"{p} {versions[p]}" for p in SHOWN_PACKAGES if versions.get(p))
    overrides = _overrides(command)
    rows = [("task", f"`{task}`"),
            ("config", (f"`{name}`" if name else "not recorded") + (f" with `{' '.join(overrides)}`" if overrides
                                                                     else "")),
            ("model", _model_line(task, cfg, info)),
            ("data", _data_line(cfg, info)),
            ("training", f"{budget}, batch {cfg.get('data', {}).get('batch_size', '?')}, seed {cfg.get('seed', '?')}"),
            ("parameters", f"{which} parameters, step {steps}{selected}"),
            ("code", f"{pkgs}{git}")]
    lines = [f"# Model card: `{task}`" + (f" — `{name}`" if name else ""), "",
             "An export of an mmjax training run: `params/` (Orbax), `export.json` (the complete config, tokenizer "
             "and provenance) and this card. It loads on its own:", "",
             "```python", "import mmjax", "r = mmjax.load(\"path/to/this/directory\")",
             "scores = r.score(r.embed_images(images), r.embed_texts([\"a red circle\"]))", "```", "",
             "## What was trained", "", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    if command:
        lines += ["Exported by:", "", "```", command, "```", ""]
    lines += ["## Inference score", "", inference_line(task, cfg) + ".", "", "## Test metrics", ""]
    if evaluation:
        lines += [f"evaluate.py on split `{evaluation.get('split')}`, {evaluation.get('params')} parameters (step "
                  f"{evaluation.get('step')}); every number in `{evaluation.get('results_path')}`.", "",
                  evaluation.get("tables", "").strip() or "(no tables)", ""]
    else:
        lines += [f"Not evaluated yet: `{_evaluate_command(command)}` writes results.md and this section.", ""]
    data_name = "shapesworld" if cfg.get("data", {}).get("name", "shapesworld") == "shapesworld" else "other"
    vocab = (info.get("tokenizer_spec") or {}).get("vocab")
    n_words = len(vocab) - 5 if vocab else "a few dozen"
    lines += ["## Intended use and limits", "", LIMITS[data_name].format(n=n_words), ""]
    return "\n".join(lines)


def write_model_card(export_dir: str, info: dict, evaluation: dict | None = None) -> str:
    """Writes `<export_dir>/model_card.md` (`render`); returns its path."""
    path = os.path.join(export_dir, CARD)
    os.makedirs(export_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(info, evaluation, export_name=os.path.basename(os.path.normpath(export_dir))))
    return path
