"""Base configs shared by the files in `configs/` (ml_collections ConfigDicts; every field documented here).

Top level: task, seed, data, model, loss, matching, optim, train, sharding, distributed, evals, eval_split,
final_eval.
- sharding.num_devices: use the first N devices (0 = all);
- sharding.mesh: ordered (axis, size) pairs, −1 = remaining devices; sharding.rules: (regex, 'replicate'|'fsdp'|
  spec) for parameter/optimiser-state paths; sharding.batch_axes: axes the batch is split over;
  sharding.preset: 'rules' (use sharding.rules), 'data_parallel' or 'fsdp' (every state leaf of at least
  sharding.fsdp_min_size elements split over the fsdp/data axis) (see `mmjax.train.sharding`);
  sharding.all_pairs: 'xla' (the all-pairs set score as one block tensor, laid out by XLA) or 'rows' (sharded by
  image rows over batch_axes, sharding.all_pairs_chunk captions at a time per device, 0 = all; see
  `mmjax.sharded_similarity`, docs/scaling.md).
- train.num_epochs / num_steps (steps wins when > 0), log_every, eval_every (0 = never; eval_every_epoch=True:
  `evals_per_epoch` times per epoch), select_metric (the validation metric of the best checkpoint: "rsum" of the
  inference score, or e.g. "semantic/rsum"), checkpoint_every, keep_checkpoints, async_checkpoints, compute_dtype
  ('float32' | 'bfloat16'), progress_every_s, checkpoint_every_s (also save when this many seconds passed since the
  last save; 0 = off).
- val_evals (optional): the evaluators of each validation, when they differ from the retrieval entries of `evals`.
- distributed.coordinator ('host:port' or None), num_processes, process_id, cpu_collectives ('gloo').
"""

import ml_collections

from mmjax.flowclip.options import FlowCLIPOptions
from mmjax.losses import maxmatch_loss_config


def sharding_config():
    return ml_collections.ConfigDict(dict(mesh=(("data", -1),), rules=((".*", "replicate"),), batch_axes=("data",),
                                          num_devices=0, preset="rules", fsdp_min_size=2 ** 14,
                                          all_pairs="xla", all_pairs_chunk=0))


def train_config(**kw):
    base = dict(num_epochs=10, num_steps=0, log_every=10, eval_every=0, eval_every_epoch=False, evals_per_epoch=1,
                select_metric="rsum", checkpoint_every=200, checkpoint_every_s=0.0, keep_checkpoints=2,
                async_checkpoints=True, compute_dtype="float32", progress_every_s=10.0)
    base.update(kw)
    return ml_collections.ConfigDict(base)


def optim_config(**kw):
    """`config.optim` with every field `mmjax.train.optim.make_optimizer` reads (so each is overridable by flag)."""
    base = dict(name="adamw", lr=1e-3, weight_decay=1e-4, schedule="cosine", warmup_steps=0, clip_norm=1.0,
                lr_mults=(), final_frac=0.0, decay_regex=".*", boundaries=(), decay_factor=0.1, b1=0.9, b2=0.999,
                eps=1e-8, momentum=0.9)
    base.update(kw)
    return ml_collections.ConfigDict(base)


def distributed_config():
    return ml_collections.ConfigDict(dict(coordinator="", num_processes=1, process_id=0, cpu_collectives="gloo"))


def matching_config():
    """`config.matching`: assignment-solver options for S_H (`mmjax.matching.solve_with_aux`; the solver itself is
    `loss.solver`). docs/design.md#assignment-solvers."""
    return ml_collections.ConfigDict(dict(
        pad_penalty="auto",
        # The auction's defaults (mmjax.matching.auction.solve_auction), each overridable by flag.
        auction=dict(eps_start_frac=0.005, theta=0.1, tol_cert=1e-5, certificate="bellman_ford", eps_final=1e-3,
                     compaction=4.0, min_buffer=64, integer_eps=True, warm_start="dual", chunk_elems=2 ** 18,
                     repair_capacity_frac=0.01),
        sinkhorn=dict(tau=0.05, iters=20)))


def retrieval_evals(*, set_analysis: bool = True) -> dict:
    """`config.evals` for a set-retrieval run: R@K, set analysis (circular variance, single elements,
    element-similarity heatmap, embeddings) and the ShapesWorld compositional suites under the Real/Shuffle/Fixed
    controls. Scores follow the run's config: the similarity kind(s) and options come from `config.loss` and
    `config.matching` (MaxMatch: the top-k inference score and the exact assignment) unless an eval sets `kinds`,
    `kind` or `similarity_kw` itself (`mmjax.evaluation.run.resolve_evals`)."""
    evals = {"retrieval": {"type": "retrieval"}, "shapesworld_suites": {"type": "compositional"}}
    if set_analysis:
        evals["set_analysis"] = {"type": "set_analysis"}
    return evals


def retrieval_config(variant: str = "") -> ml_collections.ConfigDict:
    """MaxMatch on ShapesWorld regions (the project default, docs/design.md#shapesworld-presets `maxmatch_regions` with
    a 2-epoch CPU budget); `configs/*.py` adjust it per experiment."""
    c = ml_collections.ConfigDict()
    c.task = "retrieval"
    c.seed = 0
    # max_len 16: the longest ShapesWorld caption is 14 words + [CLS]/[SEP] (the spec's tokenizer default is 20).
    c.data = dict(name="shapesworld", preset="default", seed=0, mode="regions", val_split="val",
                  tokenizer="shapesworld", max_len=16, batch_size=128, augment=True, region_drop_prob=0.2,
                  caption_drop_prob=0.2, prefetch=2, path="", train_split="train", tokenizer_dir="")
    c.model = dict(
        embed_dim=256, set_head="spm", num_embeds=4, dropout=0.1,
        spm=dict(depth=2, share_weights=True, num_heads=4, head_dim=64, ff_mult=4, dropout=0.1, pad_mode="exclude"),
        image=dict(tower="region", pool="max", cnn_widths=(32, 64, 128, 256), bn_use_mask=True),
        text=dict(tower="bigru", word_dim=128, global_pool="rnn", bert_dir="", glove_path=""))
    c.loss = maxmatch_loss_config()
    c.matching = matching_config()
    c.optim = dict(name="adamw", lr=1e-3, weight_decay=1e-4, schedule="cosine", warmup_steps=0, clip_norm=1.0,
                   # Set Div: image side (non-CNN) and the text SPM at 0.1 × base rate.
                   # A pixels-mode CNN backbone trains at the base rate, as Set Div's does (first match wins).
                           lr_mults=((r"image_tower/backbone/.*", 1.0), (r"image_tower/.*", 0.1),
                                     (r"text_tower/set_head/.*", 0.1)))
    # Two epochs: the CPU budget of the main job (≤ 10 min on 2 cores); `configs/maxmatch_shapes.py:full` = 30.
    c.train = train_config(num_epochs=2, eval_every_epoch=True, log_every=20, checkpoint_every=500)
    c.sharding = sharding_config()
    c.distributed = distributed_config()
    c.eval_split = "test"
    c.final_eval = True  # train.py evaluates the test split after training (evaluate.py does it on demand)
    c.evals = retrieval_evals()
    if variant == "smoke":
        c.data.preset = "tiny"
        c.data.batch_size = 16
        c.data.max_len = 20
        c.model.embed_dim = 32
        c.model.text.word_dim = 32
        c.model.spm.update(depth=1, num_heads=2, head_dim=16)
        c.train.update(num_epochs=0, num_steps=6, log_every=2, eval_every=6, eval_every_epoch=False,
                       checkpoint_every=3, progress_every_s=0.0)
        c.final_eval = False
        c.loss.warmup_epochs = 0
    elif variant:
        raise ValueError(f"unknown config variant {variant!r}; known: '' (default), 'smoke'")
    return c


def clip_pretrain_config(variant: str = "") -> ml_collections.ConfigDict:
    """docs/design.md#shapesworld-presets `base_clip`: ViT (patch 8 on 64×64, width 256, 4 layers) + 4-layer causal text
    transformer, projections to 128, symmetric InfoNCE with learnable temperature, AdamW 5e-4, wd 0.1, cosine with 500
    warm-up steps, batch 512, 20 epochs.

    `variant`: comma-separated `regions` (`base_clip_regions`: the image tower a transformer over ShapesWorld's region
    vectors, `data.mode='regions'`; its local tokens are the per-region outputs), `token_align` (`loss.token_align`
    = 1: the late-interaction term that aligns words with local tokens, docs/design.md#token-alignment) and a size,
    `cpu` (the 2-core budget) or `smoke` (the test size), e.g. "regions,token_align,cpu"."""
    parts = [p for p in (variant or "").split(",") if p]
    unknown = [p for p in parts if p not in ("smoke", "cpu", "regions", "token_align")]
    if unknown or ("smoke" in parts and "cpu" in parts):
        raise ValueError(f"unknown config variant {variant!r}; known: '' (default), 'cpu', 'smoke', and 'regions' "
                         f"and 'token_align' with either")
    c = ml_collections.ConfigDict()
    c.task = "clip_pretrain"
    c.seed = 0
    c.data = dict(name="shapesworld", preset="default", seed=0, mode="pixels", language_prior="none", val_split="val",
                  batch_size=512, prefetch=2)
    c.model = dict(width=256, heads=4, vision_layers=4, text_layers=4, image_size=64, patch_size=8,
                   projection_dim=128, logit_scale_max=100.0)
    # λ_tok of the late-interaction alignment term (mmjax.losses.token_alignment); 0: the global InfoNCE alone.
    c.loss = dict(token_align=1.0 if "token_align" in parts else 0.0)
    c.optim = optim_config(name="adamw", lr=5e-4, weight_decay=0.1, schedule="cosine", warmup_steps=500, clip_norm=1.0)
    c.train = train_config(num_epochs=20, eval_every=0, log_every=20, checkpoint_every=500)
    c.sharding = sharding_config()
    c.distributed = distributed_config()
    c.eval_split = "test"
    c.evals = {"retrieval": {"type": "retrieval"}, "shapesworld_suites": {"type": "compositional"},
               "local_probes": {"type": "local_probes"}}  # what the frozen base's local tokens carry (the heads' input)
    if "regions" in parts:
        c.data.mode = "regions"
    if "smoke" in parts:
        c.data.preset = "tiny"
        c.data.batch_size = 32
        c.model.update(width=32, heads=2, vision_layers=1, text_layers=1, projection_dim=16)
        c.optim.warmup_steps = 2
        c.train.update(num_epochs=0, num_steps=4, log_every=2, eval_every=4, checkpoint_every=4, progress_every_s=0.0)
    elif "cpu" in parts:
        # The 2-core CPU budget (the reproduction grid's): the default size runs ~15 s per step of 512 here (3 h for
        # 20 epochs); width 128 with 2 + 2 layers and batch 256 cuts a step ~16×, and 4 epochs fit in minutes.
        c.data.batch_size = 256
        c.model.update(width=128, vision_layers=2, text_layers=2)
        c.optim.warmup_steps = 50
        c.train.num_epochs = 4
    return c


FLOWCLIP_HEADS = {"flowclip_cimr": (True, 0.1), "flowclip_hnb": (True, 0.0), "globalm_cimr": (False, 0.1),
                  "globalm_hnb": (False, 0.0)}


def flowclip_head_config(variant: str = "") -> ml_collections.ConfigDict:
    """Flow-CLIP heads on frozen features (docs/design.md#flowclip-training, LABCLIP recipe): Adam 1e-3, no weight decay
    or schedule, 5 epochs, batch 1024 (GPU) / 256 (CPU default here); `flowclip.*` = `mmjax.flowclip.FlowCLIPOptions`'s
    defaults (the project defaults).

    `variant`: comma-separated head (`FLOWCLIP_HEADS`: {Flow-CLIP, Global-M} × {HNB + CIMR, HNB}; default
    flowclip_cimr) and optionally `cpu` (the 2-core budget: batch 64, 300 steps) or `smoke` (the test size), e.g.
    "globalm_hnb,smoke", and `select_binding` (docs/design.md#flowclip-selection: validated 4 times per epoch on the
    validation split's suites under Real, the checkpoint selected on the binding mean, the claims' metric; with `cpu`
    its training length is the epochs', not 300 steps).
    """
    parts = [p for p in (variant or "").split(",") if p]
    unknown = [p for p in parts if p not in FLOWCLIP_HEADS and p not in ("smoke", "cpu", "select_binding")]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; known: {sorted(FLOWCLIP_HEADS)}, 'cpu', 'smoke' and "
                         "'select_binding'")
    head = next((p for p in parts if p in FLOWCLIP_HEADS), "flowclip_cimr")
    c = ml_collections.ConfigDict()
    c.task = "flowclip_head"
    c.seed = 0
    c.data = dict(name="shapesworld", clip_workdir="workdir/clip_shapes", cache_dir="", val_split="val",
                  batch_size=256)
    c.flowclip = FlowCLIPOptions().to_dict()  # every flowclip.* field at its one default (mmjax.flowclip.options)
    c.optim = optim_config(name="adam", lr=1e-3, schedule="constant", warmup_steps=0, clip_norm=None)
    c.train = train_config(num_epochs=5, eval_every=0, log_every=20, checkpoint_every=500)
    c.sharding = sharding_config()
    c.distributed = distributed_config()
    c.eval_caption_chunk = 512
    c.eval_split = "test"
    c.evals = {"retrieval": {"type": "retrieval"}, "shapesworld_suites": {"type": "compositional"}}
    c.flowclip.use_local, c.flowclip.lambda_cimr = FLOWCLIP_HEADS[head]
    if "cpu" in parts:
        # The 2-core CPU budget (the reproduction grid's): HNB and CIMR score all B² pairs of a batch, so a step of 256
        # takes ~15–25 s here (an epoch of 100 000 captions ≈ 2 h); batch 64 runs ≈ 1 s per step and 300 steps
        # (≈ 19 000 captions) fit in minutes. Validation at the middle and the end.
        c.data.batch_size = 64
        c.train.update(num_epochs=0, num_steps=300, eval_every=150, checkpoint_every=150)
    if "select_binding" in parts:
        c.val_evals = {"retrieval": {"type": "retrieval"},
                       "shapesworld_suites": {"type": "compositional", "conditions": ["real"], "blind": False}}
        c.train.update(select_metric=SELECT_BINDING, eval_every_epoch=True, evals_per_epoch=4)
        if "cpu" in parts:
            c.train.update(num_epochs=5, num_steps=0, checkpoint_every=500)
    if "smoke" in parts:
        c.data.batch_size = 32
        c.eval_caption_chunk = 64
        c.train.update(num_epochs=0, num_steps=4, log_every=2, eval_every=4, checkpoint_every=2, progress_every_s=0.0,
                       eval_every_epoch=False)
    return c


# The validation metric a `select_binding` head is selected on: the binding mean under Real on the validation split.
SELECT_BINDING = "shapesworld_suites/binding_mean/real"
