"""The reproduction grid: which cells are trained, from which config, at which budget (reproduce/README.md).

A cell is (name, a config builder applied to a base config from `configs/`, seed). Everything a cell does not name
stays as its base config has it, so the ablation cells differ only in the fields their builder sets:

    ablation   `configs/maxmatch_shapes.py` (triplet + InfoNCE base, same model, data, optimiser and budget) with
               similarity ∈ {MIL, smooth-Chamfer, S_H} and regularisers Div + MMD, or Div + MMD + GD + ISD (the
               paper's ablation adds GD + ISD on top of Div + MMD; its 444.10 / 446.53 rows carry both)
    baselines  PVSE (MIL), Set Div (smooth-Chamfer), VSE∞ (K = 1) in their reference recipes (`configs/*_shapes.py`),
               and PVSE with MaxMatch's similarity and GD + ISD (the plug-in experiment)
    flowclip   the frozen ShapesWorld CLIP (`configs/clip_shapes.py`) and {Global-M, Flow-CLIP} × {HNB, HNB + CIMR}
               heads on it; the heads of seed k use the CLIP of seed k (each seed replicates the whole pipeline) and
               share its feature cache
    fcstudy    the Flow-CLIP study (docs/reproduction/flowclip_protocol.md): two frozen bases with a language prior
               (P: the pixel ViT, R: region tokens; seed 0 only) and the four heads on each, selected on the
               validation binding mean, every head seed on the base's seed 0; run by name (`--cells`) at the
               'flowclip_pilot' and 'flowclip' budgets only
    knobs      claim cells with one reconstructed project default changed (`CellSpec.variant_of` names the cell,
               `CellSpec.knob` the change): GD + ISD with the hinge shape φ(x) = [x]_+ instead of exp(5x)
               (docs/design.md#gd-loss); the other reading of the source's GD/ISD numbers (reading B: δ = 0.8 for
               both margins, shape scale 0.5); δ_gd = 0.8 alone; the S_H cells' margin and temperature in cosine
               units (`loss.score_units='cosine'`); the report re-checks the claims with them

Budgets: 'default' = the main-job budget with validation every epoch, so every cell has a best-on-validation
export: the retrieval configs' default variant (2 epochs), and the `cpu` variants of the Flow-CLIP grid (the CLIP:
width 128, 2 + 2 layers, 4 epochs of batch 256; the heads: 300 steps of batch 64, validated at 150 and 300) — the
configs' own defaults (20 CLIP epochs at width 256, 5 head epochs of batch 256) take hours per cell on 2 cores;
'smoke' = the configs' `smoke` variants (ShapesWorld `tiny`, small models) cut to `SMOKE_STEPS` steps with one
validation at the end; 'long' = the default budget with `LONG_FACTOR` × the training length (epochs, or steps and
validation interval for the heads), for the cells whose verdict may depend on the budget (run with `--cells`);
'converged' = the retrieval cells trained `CONVERGED_EPOCHS` epochs with `VALIDATIONS_PER_EPOCH` validations per epoch,
the best checkpoint selected on the metric the MaxMatch claims use (`SELECT_METRIC`: semantic RSUM of the cell's
inference score) and the test split scored under every common score (`COMMON_SCORES`) — the budget the headline
verdicts come from (docs/reproduction/protocol.md); 'converged_x2' = the same with twice the epochs, the check that
the converged budget has converged.
Every cell evaluates the test split itself (`final_eval` off); the data seed is fixed, the seed varies init and
batch order (`config.seed`). Every retrieval cell ramps hardest negatives in over `HARD_NEGATIVE_RAMP_EPOCHS` after the
VSE0 warm-up (`loss.hard_negative_ramp_epochs`), the stability choice of docs/design.md#vse0-warmup.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable

from mmjax.similarity import inference_kind

from reproduce import paths

BUDGETS = ("smoke", "default", "long", "converged", "converged_x2", "flowclip_pilot", "flowclip")
# The Flow-CLIP study (group 'fcstudy', docs/reproduction/flowclip_protocol.md): its bases and heads at the configs'
# `select_binding,cpu` budget (the pilot: 5 head epochs), then the heads at the epochs the pilot sets.
FLOWCLIP_STUDY_BUDGETS = ("flowclip_pilot", "flowclip")
# Set from the pilot's validation curves before the study's heads run (protocol change list, 2026-12-03): both
# pilot heads were still rising at the cap, so E = 5 (flowclip_study.plateau_epoch on their records).
FLOWCLIP_HEAD_EPOCHS: int | None = 5
LONG_FACTOR = 5   # the long budget: 5 × the default training length (steps or epochs), same cadence per epoch
CONVERGED_EPOCHS = {"converged": 10, "converged_x2": 20}
VALIDATIONS_PER_EPOCH = 2
SELECT_METRIC = "semantic/rsum"   # the validation metric of the best checkpoint at the converged budgets
# A converged cell also checkpoints every this many seconds: its 500-step cadence is ~25 min on two shared CPU cores,
# and a stream stopped with its session (no SIGTERM) lost up to that much per cell. Operational: resume ignores it.
CONVERGED_CHECKPOINT_S = 300.0
# Every retrieval cell's test split is scored under each of these at the converged budgets (the common-score
# sensitivity table), besides its own inference score; top-k with k = m = min(n_V, n_T) (4 here).
COMMON_SCORES = ("maxmatch", "maxmatch_topk", "smooth_chamfer", "mil")
SMOKE_STEPS = 4
HARD_NEGATIVE_RAMP_EPOCHS = 1.0
CONFIG_DIR = paths.CONFIG_DIR  # the repository's configs/ (`--config-dir` overrides it per run)
GROUPS = ("ablation", "baselines", "flowclip", "knobs", "fcstudy")


@dataclasses.dataclass(frozen=True)
class CellSpec:
    name: str
    group: str
    label: str
    config_file: str                    # configs/<config_file>.py
    variant: str = ""                   # the config variant before the budget's ('smoke' is appended)
    adjust: Callable | None = None      # adjust(config) -> None, the fields this cell changes
    similarity: str | None = None       # training similarity (None: the model scores as a whole)
    needs_clip: bool = False
    variant_of: str = ""                # knobs: the claim cell this one stands in for, with `knob` changed
    knob: str = ""                      # knobs: the changed default, as the config field says it
    clip_cell: str = "clip"             # heads: the CLIP cell they sit on
    clip_seed: int | None = None        # heads: that cell's seed (None: the head's own seed)
    only_seed: int | None = None        # a cell trained for this seed alone (a base its heads share)
    archive_export: bool = False        # --archive keeps its export too (reproduce.base_exports): a frozen base
    head_epochs_scale: int = 1          # fcstudy heads: trains this many times the study's E epochs (a budget check)


@dataclasses.dataclass(frozen=True)
class Cell:
    spec: CellSpec
    seed: int

    @property
    def name(self) -> str:
        return self.spec.name

    def workdir(self, out: str) -> str:
        return os.path.join(out, "cells", self.spec.name, f"seed{self.seed}")


def _loss(**fields):
    def adjust(c):
        c.loss.update(fields)
    return adjust


_DIV_MMD = dict(lambda_gd=0.0, lambda_isd=0.0)        # Div and MMD stay at the base config's weights
_GD_ISD = dict(lambda_gd=0.1, lambda_isd=0.1)
_HINGE = dict(gd_isd_shape="hinge")                   # the knob: GD/ISD shape [x]_+ instead of exp(5x)
# The alternative reading of the source's GD/ISD numbers (λ = 0.1, δ = 0.6 or 0.8, "= 0.5" beside a widget with two
# shape parameters): 0.5 is the shared shape's scale, not the ISD margin; δ = 0.8 for both margins.
_READING_B = dict(delta_gd=0.8, delta_isd=0.8, gd_isd_scale=0.5)
_COSINE_UNITS = dict(score_units="cosine")            # margin and InfoNCE temperature in cosine units for S_H cells
_DELTA_08 = dict(delta_gd=0.8)                        # the source's other GD margin, project shape otherwise
# In-batch false negatives kept out of the ranking losses' negatives (protocol change list, 2026-12-04): the
# triplet-only cells (VSE∞, Set Div, PVSE + MaxMatch) collapse once hardest negatives come in, and on ShapesWorld
# every image of a 128-image batch has another image's caption true of it.
_IGNORE_FN = dict(false_negatives="ignore")
FALSE_NEGATIVES_KNOB = "loss.false_negatives='ignore'"
# MaxMatch's L_con (λ_con = 0.5, the term the five ablation cells have and the collapsing cells lack) added to the
# cells of B1, B2 and P1 that lack it: the PVSE plug-in with every MaxMatch loss ("our similarity and losses"), and
# the baselines with the stabiliser MaxMatch's recipe has (protocol change list, 2026-12-04).
CON_KNOB = "loss.lambda_con=0.5"
# Knob variants that are existing cells: Set Div with L_con is the sc_divmmd cell field for field
# (tests/reproduce/test_grid_runner.py), so it needs no run of its own.
KNOB_ALIASES = {CON_KNOB: {"setdiv": "sc_divmmd"}}
# Knobs that change the training of every cell (not only of the cells with GD/ISD or S_H): a row is re-tested with
# one only when each of its cells has that knob's variant, never a knob cell against a default one.
RECIPE_KNOBS = (FALSE_NEGATIVES_KNOB,)

READING_B_KNOB = "loss.delta_gd=0.8, loss.delta_isd=0.8, loss.gd_isd_scale=0.5"
FCSTUDY_PRIOR = "typical_order"   # the Flow-CLIP study's language prior (docs/reproduction/flowclip_protocol.md)
# The study's frozen bases (name, what its local tokens are, configs/clip_shapes.py variant): G was added after P and
# R failed gate 1 on word → token grounding (flowclip_protocol.md change list, 2026-12-04).
FCSTUDY_2E_SUFFIX = "_2e"          # a study head trained 2E epochs (`CellSpec.head_epochs_scale`)
FCSTUDY_BASES = (("P", "pixel ViT", ""), ("R", "region tokens", "regions"),
                 ("G", "region tokens aligned with words", "regions,token_align"))


def _prior(name: str):
    def adjust(c):
        c.data.language_prior = name
    return adjust

SPECS: tuple[CellSpec, ...] = (
    CellSpec("mil_divmmd", "ablation", "MIL, Div+MMD", "maxmatch_shapes", adjust=_loss(similarity="mil", **_DIV_MMD),
             similarity="mil"),
    CellSpec("sc_divmmd", "ablation", "smooth-Chamfer, Div+MMD", "maxmatch_shapes",
             adjust=_loss(similarity="smooth_chamfer", alpha=16.0, **_DIV_MMD), similarity="smooth_chamfer"),
    CellSpec("sh_divmmd", "ablation", "S_H, Div+MMD", "maxmatch_shapes",
             adjust=_loss(similarity="maxmatch", **_DIV_MMD), similarity="maxmatch"),
    CellSpec("sc_full", "ablation", "smooth-Chamfer, Div+MMD+GD+ISD", "maxmatch_shapes",
             adjust=_loss(similarity="smooth_chamfer", alpha=16.0, **_GD_ISD), similarity="smooth_chamfer"),
    CellSpec("sh_full", "ablation", "S_H, Div+MMD+GD+ISD (MaxMatch)", "maxmatch_shapes",
             adjust=_loss(similarity="maxmatch", **_GD_ISD), similarity="maxmatch"),
    CellSpec("pvse", "baselines", "PVSE (MIL)", "pvse_shapes", similarity="mil"),
    CellSpec("setdiv", "baselines", "Set Div (smooth-Chamfer)", "setdiv_shapes", similarity="smooth_chamfer"),
    CellSpec("vse", "baselines", "VSE∞ (K = 1)", "vse_shapes", similarity="average"),
    CellSpec("pvse_maxmatch", "baselines", "PVSE + MaxMatch (S_H, GD+ISD)", "pvse_shapes",
             adjust=_loss(similarity="maxmatch", **_GD_ISD), similarity="maxmatch"),
    CellSpec("clip", "flowclip", "frozen CLIP (cosine)", "clip_shapes"),
    CellSpec("globalm_hnb", "flowclip", "Global-M, HNB", "flowclip_shapes", "globalm_hnb", needs_clip=True),
    CellSpec("globalm_cimr", "flowclip", "Global-M, HNB+CIMR", "flowclip_shapes", "globalm_cimr", needs_clip=True),
    CellSpec("flowclip_hnb", "flowclip", "Flow-CLIP, HNB", "flowclip_shapes", "flowclip_hnb", needs_clip=True),
    CellSpec("flowclip_cimr", "flowclip", "Flow-CLIP, HNB+CIMR", "flowclip_shapes", "flowclip_cimr", needs_clip=True),
    *(CellSpec(f"fcs_base_{b}", "fcstudy", f"base {b} ({what}, {FCSTUDY_PRIOR} prior)", "clip_shapes",
               variant, adjust=_prior(FCSTUDY_PRIOR), only_seed=0, archive_export=True)
      for b, what, variant in FCSTUDY_BASES),
    *(CellSpec(f"fcs_{b}_{head}", "fcstudy", f"{label}, base {b}", "flowclip_shapes", f"{head},select_binding",
               needs_clip=True, clip_cell=f"fcs_base_{b}", clip_seed=0)
      for b, _, _ in FCSTUDY_BASES
      for head, label in (("globalm_hnb", "Global-M, HNB"), ("globalm_cimr", "Global-M, HNB+CIMR"),
                          ("flowclip_hnb", "Flow-CLIP, HNB"), ("flowclip_cimr", "Flow-CLIP, HNB+CIMR"))),
    # The Global-M heads on G at 2E epochs (flowclip_protocol.md change list, 2026-12-05): they were still rising at
    # E, so the binding rows are re-tested against a Global-M that trained twice as long (a sensitivity check).
    *(CellSpec(f"fcs_G_{head}{FCSTUDY_2E_SUFFIX}", "fcstudy", f"{label}, base G, 2E epochs", "flowclip_shapes",
               f"{head},select_binding", needs_clip=True, clip_cell="fcs_base_G", clip_seed=0, head_epochs_scale=2)
      for head, label in (("globalm_hnb", "Global-M, HNB"), ("globalm_cimr", "Global-M, HNB+CIMR"))),
)


def _knob_variant(spec: CellSpec, suffix: str, what: str, knob: str, **loss_fields) -> CellSpec:
    """`spec` with `loss_fields` changed on top of its own adjustments: the knob cell `<name>_<suffix>`, labelled
    "<spec's label> (<what>)" ("VSE∞ (K = 1, with L_con)" where the label already ends in a parenthesis)."""
    def adjust(c):
        if spec.adjust is not None:
            spec.adjust(c)
        c.loss.update(loss_fields)
    label = f"{spec.label[:-1]}, {what})" if spec.label.endswith(")") else f"{spec.label} ({what})"
    return dataclasses.replace(spec, name=f"{spec.name}_{suffix}", group="knobs", label=label,
                               adjust=adjust, variant_of=spec.name, knob=knob)


def _variants(bases, suffix: str, what: str, knob: str, **loss_fields) -> tuple[CellSpec, ...]:
    return tuple(_knob_variant(next(s for s in SPECS if s.name == base), suffix, what, knob, **loss_fields)
                 for base in bases)


SPECS += (_variants(("sc_full", "sh_full"), "hinge", "hinge", "loss.gd_isd_shape='hinge'", **_HINGE)
          + _variants(("sc_full", "sh_full"), "b", "reading B", READING_B_KNOB, **_READING_B)
          + _variants(("sh_divmmd", "sh_full"), "cos", "cosine units", "loss.score_units='cosine'", **_COSINE_UNITS)
          + _variants(("sc_full", "sh_full"), "d08", "δ_gd 0.8", "loss.delta_gd=0.8", **_DELTA_08)
          + _variants(("vse", "setdiv", "pvse", "pvse_maxmatch", "sh_full"), "fn", "false negatives ignored",
                      FALSE_NEGATIVES_KNOB, **_IGNORE_FN)
          + _variants(("pvse_maxmatch", "vse", "pvse"), "con", "with L_con", CON_KNOB, lambda_con=0.5))
SPEC_BY_NAME = {s.name: s for s in SPECS}


def clip_of(cell: Cell) -> Cell:
    """The CLIP cell a head sits on: its `clip_cell` at `clip_seed` (or the head's own seed)."""
    spec = cell.spec
    return Cell(SPEC_BY_NAME[spec.clip_cell], cell.seed if spec.clip_seed is None else spec.clip_seed)


def knob_variants() -> dict[str, dict[str, str]]:
    """{knob: {claim cell: the cell that changes it}} over the `knobs` group and `KNOB_ALIASES`."""
    out: dict[str, dict[str, str]] = {knob: dict(alias) for knob, alias in KNOB_ALIASES.items()}
    for s in SPECS:
        if s.variant_of:
            out.setdefault(s.knob, {})[s.variant_of] = s.name
    return out


# Config modules loaded when a grid process launched (`hold_configs`), by absolute path: the process builds every
# later cell from the files as they were then, the version its records name, not as the checkout has them hours later.
_HELD_CONFIGS: dict[str, object] = {}


def hold_configs(names, config_dir: str = CONFIG_DIR) -> dict[str, str]:
    """Loads the config files `names` now and keeps them for `load_config_module` (this process only). Returns
    {file: error} for those that cannot be loaded: they are read again when their cell starts and fail it there."""
    errors = {}
    for name in names:
        path = os.path.abspath(os.path.join(config_dir, f"{name}.py"))
        try:
            _HELD_CONFIGS[path] = _read_config_module(name, config_dir)
        except Exception as e:  # noqa: BLE001 — one bad config fails its own cells, as before, not the grid
            errors[path] = f"{type(e).__name__}: {e}"
    return errors


def load_config_module(name: str, config_dir: str = CONFIG_DIR):
    """The config file `configs/<name>.py` as a module: the one held at launch (`hold_configs`), else read now."""
    held = _HELD_CONFIGS.get(os.path.abspath(os.path.join(config_dir, f"{name}.py")))
    return held if held is not None else _read_config_module(name, config_dir)


def _read_config_module(name: str, config_dir: str):
    path = os.path.join(config_dir, f"{name}.py")
    if not os.path.exists(path):
        raise FileNotFoundError(f"config file {path} not found (the reproduction reads the repository's configs/)")
    spec = importlib.util.spec_from_file_location(f"_reproduce_configs_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _retrieval_evals(spec: CellSpec, config, budget: str) -> dict:
    """Every retrieval cell is scored with its own similarity, exact S_H and top-k inference (at the converged
    budgets: its inference score and every one of `COMMON_SCORES`, on the whole test split); set analysis where the
    model has sets (single elements under the training similarity at the quick budgets, as their records were made,
    and under the inference score at the converged ones). The compositional suites are left to the Flow-CLIP grid."""
    converged = budget in CONVERGED_EPOCHS
    if converged:
        kinds = tuple(dict.fromkeys((inference_kind(spec.similarity), spec.similarity, *COMMON_SCORES)))
        evals = {"retrieval": {"type": "retrieval", "kinds": kinds, "fold_counts": (1,)}}
    else:
        kinds = tuple(dict.fromkeys((spec.similarity, "maxmatch_topk", "maxmatch")))
        evals = {"retrieval": {"type": "retrieval", "kinds": kinds}}
    if config.model.set_head != "none":
        evals["set_analysis"] = {"type": "set_analysis", **({} if converged else {"kind": spec.similarity})}
    return evals


def build_config(cell: Cell, budget: str, out: str, *, config_dir: str = CONFIG_DIR, clip_out: str = ""):
    """The cell's full config at `budget` (its workdir is `cell.workdir(out)`). A Flow-CLIP head sits on the CLIP
    cell of its seed in `clip_out` (another grid's directory, e.g. long-budget heads on the default-budget CLIP) or,
    by default, in `out`."""
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {BUDGETS}, got {budget!r}")
    spec = cell.spec
    study = budget in FLOWCLIP_STUDY_BUDGETS
    if (spec.group == "fcstudy") != study and budget != "smoke":
        raise ValueError(f"cell {cell.name!r} ({spec.group}) does not run at the {budget!r} budget; the Flow-CLIP "
                         f"study's cells run at {FLOWCLIP_STUDY_BUDGETS} (and smoke), the others not")
    size = "smoke" if budget == "smoke" else "cpu" if spec.group in ("flowclip", "fcstudy") else ""
    variant = ",".join(p for p in (spec.variant, size) if p)
    c = load_config_module(spec.config_file, config_dir).get_config(variant)
    if spec.adjust is not None:
        spec.adjust(c)
    c.seed = int(cell.seed)
    c.final_eval = False
    if budget == "smoke":
        c.train.update(num_epochs=0, num_steps=SMOKE_STEPS, eval_every=SMOKE_STEPS, eval_every_epoch=False,
                       checkpoint_every=SMOKE_STEPS, log_every=2)
    elif budget in CONVERGED_EPOCHS:
        if c.task != "retrieval":
            raise ValueError(f"the {budget!r} budget is defined for the retrieval cells, not {cell.name!r}")
        c.train.update(num_epochs=CONVERGED_EPOCHS[budget], eval_every_epoch=True,
                       evals_per_epoch=VALIDATIONS_PER_EPOCH, select_metric=SELECT_METRIC,
                       checkpoint_every_s=CONVERGED_CHECKPOINT_S)
        # Validation scores only what selects the checkpoint: the cell's inference score, whole val split.
        c.val_evals = {"retrieval": {"type": "retrieval", "kinds": (inference_kind(spec.similarity),),
                                     "fold_counts": (1,)}}
    elif study:  # the configs' own budgets (`select_binding,cpu`: 5 epochs), the study's heads at the pilot's epochs
        c.train.eval_every_epoch = True
        if spec.head_epochs_scale != 1 and budget != "flowclip":
            raise ValueError(f"cell {cell.name!r} trains {spec.head_epochs_scale} × the study's head epochs; it runs "
                             "at the 'flowclip' budget only")
        if budget == "flowclip" and c.task == "flowclip_head":
            if FLOWCLIP_HEAD_EPOCHS is None:
                raise ValueError("the Flow-CLIP study's head budget is set by its pilot (--budget flowclip_pilot; "
                                 "docs/reproduction/flowclip_protocol.md); reproduce/grid.py FLOWCLIP_HEAD_EPOCHS "
                                 "is not set yet")
            c.train.num_epochs = FLOWCLIP_HEAD_EPOCHS * spec.head_epochs_scale
    elif c.train.num_steps:  # a step budget (the Flow-CLIP heads' `cpu` variant) keeps its own validation cadence
        c.train.eval_every_epoch = False
        if budget == "long":
            c.train.update(num_steps=LONG_FACTOR * c.train.num_steps, eval_every=LONG_FACTOR * c.train.eval_every)
    else:
        c.train.eval_every_epoch = True  # validation each epoch picks the best checkpoint
        if budget == "long":
            c.train.num_epochs = LONG_FACTOR * c.train.num_epochs
    if c.task == "retrieval":
        c.evals = _retrieval_evals(spec, c, budget)
        # Stability choice for every retrieval cell alike (docs/design.md#vse0-warmup): hardest negatives come in over
        # one epoch after the VSE0 warm-up instead of at once, where the triplet-only Set Div recipe collapses.
        c.loss.hard_negative_ramp_epochs = HARD_NEGATIVE_RAMP_EPOCHS
    if spec.needs_clip:
        clip_dir = clip_of(cell).workdir(clip_out or out)
        c.data.clip_workdir = os.path.abspath(clip_dir)
        c.data.cache_dir = os.path.abspath(os.path.join(clip_dir, "feature_cache"))
    return c


def make_grid(seeds: int, names=None, *, with_clip: bool = True, first_seed: int = 0) -> list[Cell]:
    """Cells of seeds first_seed, …, first_seed + seeds − 1 in run order: seed-major (a finished seed is a complete
    replicate), each head's frozen base (`clip_of`: its own seed, or the one `clip_seed` its heads share whatever
    seeds they run) just before the first head that needs it, unless `with_clip` is False (heads on another grid's
    CLIP). `first_seed` lets a one-seed grid sit on a seed other than 0 (e.g. long-budget heads on the one
    default-budget CLIP whose export this machine still has)."""
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    if first_seed < 0:
        raise ValueError(f"--first-seed must be >= 0, got {first_seed}")
    names = list(names) if names else [s.name for s in SPECS if s.group != "fcstudy"]  # the study: by name
    unknown = [n for n in names if n not in SPEC_BY_NAME]
    if unknown:
        raise ValueError(f"unknown cell name(s) {unknown}; known: {sorted(SPEC_BY_NAME)}")
    order = [s for s in SPECS if s.name in names]
    cells = [Cell(s, k) for k in range(first_seed, first_seed + seeds) for s in order
             if s.only_seed is None or s.only_seed == k]
    if not with_clip:
        return cells
    out: list[Cell] = []
    for c in cells:  # one rule for both kinds of base: it runs before the first head that needs it, once
        base = clip_of(c) if c.spec.needs_clip else None
        if base is not None and base not in out:
            out.append(base)
        if c not in out:
            out.append(c)
    return out


def budget_summary(config) -> dict:
    """Steps/epochs, batch size, data preset and validation cadence of a built cell config (for the report)."""
    t = config.train
    return {"num_epochs": int(t.num_epochs), "num_steps": int(t.num_steps),
            "batch_size": int(config.data.batch_size), "preset": config.data.get("preset", "(frozen CLIP cache)"),
            "validation": (("every epoch" if int(t.get("evals_per_epoch", 1)) == 1
                            else f"{int(t.evals_per_epoch)} per epoch") if t.get("eval_every_epoch")
                           else f"every {int(t.eval_every)} steps"),
            **({"select_metric": t.select_metric} if t.get("select_metric", "rsum") != "rsum" else {})}
