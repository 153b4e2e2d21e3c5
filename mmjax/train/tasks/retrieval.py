"""Set-based retrieval training (MaxMatch, Set Div, PVSE, VSE∞) on ShapesWorld or precomputed features.

Data (`config.data`): `name='shapesworld'` (preset, seed, mode) generates the splits in memory; `name='precomp'`
reads SCAN/VSE precomputed region features (`path`, with `train_split`/`val_split`) through
`mmjax.data.readers.precomp`. Text is tokenised by the ShapesWorld word tokenizer, a word tokenizer built from the
training captions (`tokenizer='words'`), or a BERT WordPiece directory (`tokenizer='bert'`, `model.text.bert_dir`).
The loss is `mmjax.losses.maxmatch_objective` with `config.loss`; validation embeds each modality once and reports
R@K/RSUM for the training similarity and, for MaxMatch, both the exact-assignment and top-k inference scores.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.data.pipeline import BatchIterator, InMemorySource, PipelineConfig, source_from_shapesworld
from mmjax.evaluation.retrieval import recall_at_k
from mmjax.losses import maxmatch_objective
from mmjax.models.factory import build_retrieval_model
from mmjax.similarity import pairwise_set_similarity_chunked


def _shapesworld(cfg, split):
    from mmjax.data import shapesworld
    data = shapesworld.generate(split, preset=cfg.preset, seed=cfg.seed, mode=cfg.mode, max_len=cfg.max_len)
    tok = shapesworld.ShapesWorld(data["config"]).tokenizer()
    return data, tok


def _precomp_source(cfg, split, tokenizer):
    from mmjax.data import readers
    ds = readers.precomp(cfg.path, split=split)
    feats = np.asarray(ds.features, np.float32)
    n, c = feats.shape[0], len(ds.captions) // feats.shape[0]
    enc = tokenizer.encode(list(ds.captions))
    shape = (n, c, -1)
    return InMemorySource(
        images=feats, image_mask=np.ones(feats.shape[:2], bool), image_ids=np.asarray(ds.image_ids).astype(np.int64)
        if np.asarray(ds.image_ids).dtype.kind in "iu" else np.arange(n, dtype=np.int64),
        caption_ids=enc.ids.reshape(shape), caption_mask=enc.attention_mask.reshape(shape),
        caption_valid=enc.valid_mask.reshape(shape), pad_id=tokenizer.pad_id, mask_id=tokenizer.mask_id,
        random_token_ids=np.setdiff1d(np.arange(tokenizer.vocab_size), sorted(tokenizer.special_ids)))


class RetrievalTask:
    device_keys = ("image_feats", "image_mask", "images", "caption_ids", "caption_mask", "caption_image",
                   "example_valid")

    def __init__(self, config):
        self.config = config
        data_cfg = config.data
        bert_module = self.bert_params = None
        if config.model.text.tower == "bert":
            from mmjax.models.hf import load_hf_bert
            bert_module, self.bert_params, _ = load_hf_bert(config.model.text.bert_dir, with_tokenizer=False)
        if data_cfg.name == "shapesworld":
            train, tok = _shapesworld(data_cfg, "train")
            val, _ = _shapesworld(data_cfg, data_cfg.val_split)
            if data_cfg.get("tokenizer", "shapesworld") == "bert":
                from mmjax.data.tokenizers import load_tokenizer
                tok = load_tokenizer("bert", directory=config.model.text.bert_dir, max_len=data_cfg.max_len)
            self.source_train = source_from_shapesworld(train, tok)
            self.source_val = source_from_shapesworld(val, tok)
        elif data_cfg.name == "precomp":
            if not os.path.isdir(data_cfg.path):
                raise FileNotFoundError(f"config.data.path: precomputed-feature directory not found: {data_cfg.path}")
            from mmjax.data.tokenizers import load_tokenizer
            tok_dir = data_cfg.get("tokenizer_dir") or config.model.text.bert_dir
            if not os.path.isdir(tok_dir):
                raise FileNotFoundError(f"config.data.tokenizer_dir / model.text.bert_dir: WordPiece tokenizer "
                                        f"directory not found: {tok_dir!r}")
            tok = load_tokenizer("bert", directory=tok_dir, max_len=data_cfg.max_len)
            self.source_train = _precomp_source(data_cfg, data_cfg.train_split, tok)
            self.source_val = _precomp_source(data_cfg, data_cfg.val_split, tok)
        else:
            raise ValueError(f"config.data.name must be 'shapesworld' or 'precomp', got {data_cfg.name!r}")
        self.tokenizer = tok
        self.model = build_retrieval_model(config.model, tok.vocab_size, bert_module)
        self.regions = self.source_train.is_regions
        self.captions_per_image = self.source_train.caption_ids.shape[1]
        self.examples_per_step = config.data.batch_size
        self.pipeline = PipelineConfig(batch_size=data_cfg.batch_size, seed=config.seed, augment=data_cfg.augment,
                                       region_drop_prob=data_cfg.region_drop_prob,
                                       caption_drop_prob=data_cfg.caption_drop_prob, prefetch=data_cfg.prefetch)

    def make_iterator(self, start=(0, 0)):
        return BatchIterator(self.source_train, self.pipeline, start=start)

    # ---- model inputs ---------------------------------------------------------------------------------------
    def _image_inputs(self, batch):
        if self.regions:
            return batch["image_feats"], batch["image_mask"]
        return batch["images"], None

    def init_variables(self, rng, batch):
        images, mask = self._image_inputs(batch)
        variables = self.model.init({"params": rng, "dropout": rng}, images, mask, batch["caption_ids"],
                                    batch["caption_mask"], train=False)
        if self.bert_params is not None:
            variables = jax.tree_util.tree_map(lambda x: x, variables)
            variables["params"]["text_tower"]["bert"] = jax.tree_util.tree_map(jnp.asarray, self.bert_params)
        return variables

    def loss(self, params, extra, batch, rng, *, warmup: bool):
        images, mask = self._image_inputs(batch)
        out, updates = self.model.apply({"params": params, **extra}, images, mask, batch["caption_ids"],
                                        batch["caption_mask"], train=True, mutable=list(extra.keys()),
                                        rngs={"dropout": rng})
        valid = batch["example_valid"]
        loss, metrics = maxmatch_objective(out["image"], out["text"], batch["caption_image"], self.config.loss,
                                           warmup=warmup, image_valid=valid,
                                           caption_valid=valid[batch["caption_image"]])
        return loss, (metrics, updates)

    # ---- validation -----------------------------------------------------------------------------------------
    def embed_split(self, params, extra, source, batch_size: int = 256):
        """Eval-mode sets of every image and caption of `source` (jitted, fixed-size padded batches)."""
        variables = {"params": params, **extra}
        embed_img = jax.jit(lambda v, x, m: self.model.apply(v, x, m, method="embed_images"))
        embed_txt = jax.jit(lambda v, x, m: self.model.apply(v, x, m, method="embed_captions"))

        def run(fn, arrays):
            n = len(arrays[0])
            outs = []
            for start in range(0, n, batch_size):
                chunk = [None if a is None else a[start:start + batch_size] for a in arrays]
                pad = batch_size - len(chunk[0])
                chunk = [None if a is None else np.concatenate([a, np.repeat(a[-1:], pad, 0)]) for a in chunk]
                o = fn(variables, *chunk)
                outs.append((np.asarray(o["set"])[:batch_size - pad],
                             None if o.get("mask") is None else np.asarray(o["mask"])[:batch_size - pad]))
            sets = np.concatenate([s for s, _ in outs])
            masks = None if outs[0][1] is None else np.concatenate([m for _, m in outs])
            return sets, masks

        img_sets, img_masks = run(embed_img, [source.images, source.image_mask])
        n, c, t = source.caption_ids.shape
        txt_sets, txt_masks = run(embed_txt, [source.caption_ids.reshape(n * c, t),
                                              source.caption_mask.reshape(n * c, t)])
        return img_sets, img_masks, txt_sets, txt_masks

    def evaluate(self, params, extra) -> dict:
        img, img_m, txt, txt_m = self.embed_split(params, extra, self.source_val)
        n, c = self.source_val.caption_ids.shape[:2]
        caption_to_image = np.repeat(np.arange(n), c)
        loss_cfg = self.config.loss
        kinds = [loss_cfg.similarity]
        if loss_cfg.similarity == "maxmatch":
            kinds = ["maxmatch", "maxmatch_topk"]
        out = {}
        for kind in kinds:
            kw = {"s_h": loss_cfg.s_h} if kind.startswith("maxmatch") else {}
            if kind == "smooth_chamfer":
                kw["alpha"] = loss_cfg.alpha
            sim = jax.jit(lambda a, b, am, bm: pairwise_set_similarity_chunked(
                a, b, kind, am, bm, max_blocks=self.config.eval_max_blocks, **kw))(img, txt, img_m, txt_m)
            metrics = recall_at_k(np.asarray(sim), caption_to_image)
            prefix = "" if kind == kinds[0] else f"{kind}/"
            out.update({f"{prefix}{k}": v for k, v in metrics.items()})
        return out
