"""Base configs shared by the files in `configs/` (ml_collections ConfigDicts; every field documented here).

Top level: task, seed, data, model, loss, optim, train, sharding, distributed, eval_max_blocks.
- sharding.mesh: ordered (axis, size) pairs, −1 = remaining devices; sharding.rules: (regex, 'replicate'|'fsdp'|
  spec) for parameter/optimiser-state paths; sharding.batch_axes: axes the batch is split over (see
  `mmjax.train.sharding`).
- train.num_epochs / num_steps (steps wins when > 0), log_every, eval_every (0 = never), checkpoint_every,
  keep_checkpoints, async_checkpoints, compute_dtype ('float32' | 'bfloat16'), progress_every_s.
- distributed.coordinator ('host:port' or None), num_processes, process_id, cpu_collectives ('gloo').
"""

import ml_collections

from mmjax.losses import maxmatch_loss_config


def sharding_config():
    return ml_collections.ConfigDict(dict(mesh=(("data", -1),), rules=((".*", "replicate"),), batch_axes=("data",)))


def train_config(**kw):
    base = dict(num_epochs=10, num_steps=0, log_every=10, eval_every=0, checkpoint_every=200, keep_checkpoints=2,
                async_checkpoints=True, compute_dtype="float32", progress_every_s=10.0)
    base.update(kw)
    return ml_collections.ConfigDict(base)


def distributed_config():
    return ml_collections.ConfigDict(dict(coordinator="", num_processes=1, process_id=0, cpu_collectives="gloo"))


def retrieval_config(variant: str = "") -> ml_collections.ConfigDict:
    """MaxMatch on ShapesWorld regions (the project default); `configs/*.py` adjust it per experiment."""
    c = ml_collections.ConfigDict()
    c.task = "retrieval"
    c.seed = 0
    c.data = dict(name="shapesworld", preset="default", seed=0, mode="regions", val_split="val",
                  tokenizer="shapesworld", max_len=20, batch_size=128, augment=True, region_drop_prob=0.2,
                  caption_drop_prob=0.2, prefetch=2, path="", train_split="train")
    c.model = dict(
        embed_dim=256, set_head="spm", num_embeds=4, dropout=0.1,
        spm=dict(depth=2, share_weights=True, num_heads=4, head_dim=64, ff_mult=4, dropout=0.1),
        image=dict(tower="region", pool="max", cnn_widths=(32, 64, 128, 256)),
        text=dict(tower="bigru", word_dim=300, global_pool="rnn", bert_dir=""))
    c.loss = maxmatch_loss_config()
    c.optim = dict(name="adamw", lr=1e-3, weight_decay=1e-4, schedule="cosine", warmup_steps=0, clip_norm=1.0,
                   # Set Div: image side (non-CNN) and the text SPM at 0.1 × base rate.
                   lr_mults=((r"image_tower/.*", 0.1), (r"text_tower/set_head/.*", 0.1)))
    c.train = train_config(num_epochs=8, eval_every=0, log_every=20, checkpoint_every=500)
    c.sharding = sharding_config()
    c.distributed = distributed_config()
    c.eval_max_blocks = 1 << 18
    if variant == "smoke":
        c.data.preset = "tiny"
        c.data.batch_size = 16
        c.model.embed_dim = 32
        c.model.text.word_dim = 32
        c.model.spm.update(depth=1, num_heads=2, head_dim=16)
        c.train.update(num_epochs=0, num_steps=6, log_every=2, eval_every=6, checkpoint_every=3,
                       progress_every_s=0.0)
        c.loss.warmup_epochs = 0
    elif variant:
        raise ValueError(f"unknown config variant {variant!r}; known: '' (default), 'smoke'")
    return c
