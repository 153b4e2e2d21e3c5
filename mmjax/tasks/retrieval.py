"""Set-based retrieval training (MaxMatch, Set Div, PVSE, VSE∞) on ShapesWorld or precomputed features.

Data (`config.data`): `name='shapesworld'` (preset, seed, mode) generates the splits in memory; `name='precomp'`
reads SCAN/VSE precomputed region features (`path`, with `train_split`/`val_split`) through
`mmjax.data.readers.precomp`. Text is tokenised by the ShapesWorld word tokenizer, a word tokenizer built from the
training captions (`tokenizer='words'`), or a BERT WordPiece directory (`tokenizer='bert'`, `model.text.bert_dir`).
The loss is `mmjax.losses.maxmatch_objective` with `config.loss`; validation embeds each modality once and reports
R@K/RSUM for the training similarity and, for MaxMatch, both the exact-assignment and top-k inference scores.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.data.pipeline import BatchIterator, InMemorySource, PipelineConfig, source_from_shapesworld
from mmjax.evaluation.retrieval import recall_at_k
from mmjax.losses import maxmatch_objective
from mmjax.models.factory import build_retrieval_model


def _shapesworld_tokenizer(cfg):
    from mmjax.data import shapesworld
    sw_cfg = shapesworld.ShapesWorldConfig.from_preset(cfg.preset, seed=cfg.seed, mode=cfg.mode, max_len=cfg.max_len)
    return shapesworld.ShapesWorld(sw_cfg).tokenizer()


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
            if data_cfg.get("tokenizer", "shapesworld") == "bert":
                from mmjax.data.tokenizers import load_tokenizer
                tok = load_tokenizer("bert", directory=config.model.text.bert_dir, max_len=data_cfg.max_len)
            else:
                tok = _shapesworld_tokenizer(data_cfg)
            self.regions = data_cfg.mode == "regions"
        elif data_cfg.name == "precomp":
            if not os.path.isdir(data_cfg.path):
                raise FileNotFoundError(f"config.data.path: precomputed-feature directory not found: {data_cfg.path}")
            from mmjax.data.tokenizers import load_tokenizer
            tok_dir = data_cfg.get("tokenizer_dir") or config.model.text.bert_dir
            if not os.path.isdir(tok_dir):
                raise FileNotFoundError(f"config.data.tokenizer_dir / model.text.bert_dir: WordPiece tokenizer "
                                        f"directory not found: {tok_dir!r}")
            tok = load_tokenizer("bert", directory=tok_dir, max_len=data_cfg.max_len)
            self.regions = True
        else:
            raise ValueError(f"config.data.name must be 'shapesworld' or 'precomp', got {data_cfg.name!r}")
        self.tokenizer = tok
        self.model = build_retrieval_model(config.model, tok.vocab_size, bert_module)
        self.glove = None
        glove_path = config.model.text.get("glove_path")
        if glove_path:  # word embeddings initialised from a GloVe-format text file (Bi-GRU / bag-of-words towers)
            from mmjax.models.glove import read_glove
            vocab = tok.vocab if hasattr(tok, "vocab") else tok.hf.get_vocab()
            self.glove, found = read_glove(glove_path, vocab, dim=config.model.text.word_dim)
            print(f"[train] GloVe: {int(found.sum())}/{len(found)} vocabulary words found in {glove_path}", flush=True)
        self.examples_per_step = config.data.batch_size
        self.pipeline = PipelineConfig(batch_size=data_cfg.batch_size, seed=config.seed, augment=data_cfg.augment,
                                       region_drop_prob=data_cfg.region_drop_prob,
                                       caption_drop_prob=data_cfg.caption_drop_prob, prefetch=data_cfg.prefetch)
        self._splits = {}

    def split_data(self, split: str):
        """(raw generated data or None, tokenised `InMemorySource`) of a split, generated/read once."""
        if split not in self._splits:
            d = self.config.data
            if d.name == "shapesworld":
                from mmjax.data import shapesworld
                data = shapesworld.generate(split, preset=d.preset, seed=d.seed, mode=d.mode, max_len=d.max_len)
                self._splits[split] = (data, source_from_shapesworld(data, self.tokenizer))
            else:
                name = {"train": d.train_split, "val": d.val_split}.get(split, split)
                self._splits[split] = (None, _precomp_source(d, name, self.tokenizer))
        return self._splits[split]

    @property
    def source_train(self):
        return self.split_data("train")[1]

    @property
    def source_val(self):
        return self.split_data(self.config.data.val_split)[1]

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
        if self.glove is not None:
            from mmjax.models.text_towers import replace_word_embeddings
            variables = dict(variables, params=replace_word_embeddings(variables["params"], self.glove))
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

    # ---- validation / evaluation ----------------------------------------------------------------------------
    def similarity_kinds(self):
        """(kind, kwargs) pairs evaluated: the training similarity; for MaxMatch the exact and top-k scores."""
        loss_cfg = self.config.loss
        if loss_cfg.similarity == "maxmatch":
            return [("maxmatch", {"s_h": loss_cfg.s_h}), ("maxmatch_topk", {"s_h": loss_cfg.s_h})]
        kw = {"alpha": loss_cfg.alpha} if loss_cfg.similarity == "smooth_chamfer" else {}
        return [(loss_cfg.similarity, kw)]

    @functools.cached_property
    def _embed_images(self):
        return jax.jit(lambda v, x, m: self.model.apply(v, x, m, method="embed_images"))

    @functools.cached_property
    def _embed_captions(self):
        return jax.jit(lambda v, x, m: self.model.apply(v, x, m, method="embed_captions"))

    def eval_context(self, variables, split: str) -> dict:
        """Context for `mmjax.evaluation.registry` evaluators on `split` (embedding functions, data, suites)."""
        from mmjax.evaluation.scorers import EmbeddingScorer, set_pairs
        data, src = self.split_data(split)
        # Variables are an argument (partial of a jitted function), not constants baked into the program.
        embed_img = functools.partial(self._embed_images, variables)
        embed_txt = functools.partial(self._embed_captions, variables)
        n, c, t = src.caption_ids.shape
        context = {"embed_images": embed_img, "embed_captions": embed_txt, "images": src.images,
                   "image_mask": src.image_mask, "captions": src.caption_ids.reshape(n * c, t),
                   "caption_mask": src.caption_mask.reshape(n * c, t), "caption_to_image": np.repeat(np.arange(n), c)}
        if data is not None:
            from mmjax.data.shapesworld.suites import build_suites

            from mmjax.evaluation.embed import batched_apply

            # Fixed-size padded batches: one compilation, whatever the number of distinct items per call.
            def encode_images(records):
                idx = np.array([r.meta["image_index"] for r in records])
                mask = None if src.image_mask is None else src.image_mask[idx]
                return _keep_sets(batched_apply(embed_img, (src.images[idx], mask), batch_size=256, name=None,
                                                jit=False))

            def encode_texts(captions):
                enc = self.tokenizer.encode(list(captions))
                return _keep_sets(batched_apply(embed_txt, (enc.ids, enc.attention_mask), batch_size=256,
                                                name=None, jit=False))

            kind, kw = self.similarity_kinds()[-1]
            context["records"] = build_suites(data)
            context["score_fn"] = EmbeddingScorer(encode_images, encode_texts, set_pairs(kind, **kw))
        return context

    def evaluate(self, params, extra) -> dict:
        """Validation R@K / RSUM for every similarity kind (the first kind's keys unprefixed)."""
        from mmjax.evaluation import embed
        context = self.eval_context({"params": params, **extra}, self.config.data.val_split)
        img = embed.keep_set_arrays(embed.batched_apply(context["embed_images"],
                                                        (context["images"], context["image_mask"]),
                                                        name="val images", jit=False))
        txt = embed.keep_set_arrays(embed.batched_apply(context["embed_captions"],
                                                        (context["captions"], context["caption_mask"]),
                                                        name="val captions", jit=False))
        out = {}
        for i, (kind, kw) in enumerate(self.similarity_kinds()):
            sim = embed.score_sets(img["set"], txt["set"], kind, img.get("mask"), txt.get("mask"), **kw)
            metrics = recall_at_k(sim, context["caption_to_image"])
            out.update({(k if i == 0 else f"{kind}/{k}"): v for k, v in metrics.items()})
        return out


def _keep_sets(out):
    return {k: np.asarray(out[k]) for k in ("set", "mask") if out.get(k) is not None}
