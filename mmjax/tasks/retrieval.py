"""Set-based retrieval training (MaxMatch, Set Div, PVSE, VSE∞) on ShapesWorld or precomputed features.

Data and tokenizer: `mmjax.data.sources.RetrievalSplits` (`config.data`); pretrained text weights (BERT, GloVe):
`mmjax.models.pretrained`; model: `mmjax.models.factory.build_retrieval_model` (`config.model`). The loss is
`mmjax.losses.maxmatch_objective` with `config.loss` and the `config.matching` solver options. `eval_context` gives
the evaluators each modality's embedding function and inputs, and for ShapesWorld the compositional suites scored
with the run's inference similarity (top-k for MaxMatch, else the training similarity).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.data.pipeline import BatchIterator, PipelineConfig, with_global_caption_image
from mmjax.data.shapesworld.suites import retrieval_positives
from mmjax.data.sources import RetrievalSplits
from mmjax.batching import batched_apply
from mmjax.evaluation.embed import keep_set_arrays
from mmjax.evaluation.scorers import set_pairs, shapesworld_suites_context
from mmjax.losses import maxmatch_objective, similarity_options
from mmjax.models.factory import build_retrieval_model
from mmjax.models.pretrained import load_pretrained_text
from mmjax.sharded_similarity import AllPairsLayout
from mmjax.similarity import inference_kind
from mmjax.train.export import full_config, tokenizer_spec
from mmjax.train.task import Phase, select_keys


def hard_negative_phases(warmup_epochs: float, ramp_epochs: float, steps_per_epoch: int) -> tuple[Phase, ...]:
    """VSE0 warm-up (`loss.warmup_epochs`: `warmup` True, all negatives), the hard-negative ramp
    (`loss.hard_negative_ramp_epochs`: the all-negative weight w = 1 − (step − start + 1) / length clipped to [0, 1],
    a pure function of the step, so a resumed run recomputes it), then hardest negatives (False)
    (docs/design.md#vse0-warmup). Empty phases are left out."""
    warmup = int(warmup_epochs * steps_per_epoch)
    ramp = int(round(ramp_epochs * steps_per_epoch))

    def ramp_weight(step):
        return 1.0 - jnp.clip((step - warmup + 1).astype(jnp.float32) / ramp, 0.0, 1.0)

    phases = (Phase("warmup", 0, warmup, lambda step: True), Phase("ramp", warmup, warmup + ramp, ramp_weight),
              Phase("hard", warmup + ramp, None, lambda step: False))
    return tuple(p for p in phases if p.stop is None or p.stop > p.start)


class RetrievalTask:
    device_keys = ("image_feats", "image_mask", "images", "caption_ids", "caption_mask", "caption_image",
                   "example_valid")
    float_inputs = ("image_feats", "images")

    def __init__(self, config, workdir: str = "."):
        del workdir
        self.config = config
        d = config.data
        self.data = RetrievalSplits(d, config.model.text.get("bert_dir", ""))
        self.tokenizer = self.data.tokenizer
        self.regions = self.data.regions
        self.pretrained = load_pretrained_text(config.model.text, self.tokenizer)
        self.model = build_retrieval_model(config.model, self.tokenizer.vocab_size, self.pretrained.bert_module)
        if d.name == "precomp":  # read train and dev now: a dev split of another feature size fails before training
            self.data.split("train"), self.data.split(d.val_split)
        self.examples_per_step = d.batch_size
        # loss.false_negatives='ignore': each batch carries caption_true, the pairs kept out of the negatives
        self.ignore_false_negatives = config.loss.get("false_negatives", "keep") == "ignore"
        if self.ignore_false_negatives:
            self.device_keys = (*type(self).device_keys, "caption_true")
        self.pipeline = PipelineConfig(batch_size=d.batch_size, seed=config.seed, augment=d.augment,
                                       region_drop_prob=d.region_drop_prob, caption_drop_prob=d.caption_drop_prob,
                                       prefetch=d.prefetch, pair_truth=self.ignore_false_negatives)

    def split_data(self, split: str):
        """(raw generated data or None, tokenised `InMemorySource`) of a split, generated/read once."""
        return self.data.split(split)

    @property
    def source_train(self):
        return self.split_data("train")[1]

    @property
    def source_val(self):
        return self.split_data(self.config.data.val_split)[1]

    def make_iterator(self, start=(0, 0)):
        return BatchIterator(self.source_train, self.pipeline, start=start)

    def prepare_batch(self, host_batch: dict) -> dict:
        return select_keys(with_global_caption_image(host_batch), self.device_keys)

    def phases(self, steps_per_epoch: int) -> tuple[Phase, ...]:
        loss = self.config.loss
        return hard_negative_phases(loss.get("warmup_epochs", 0), loss.get("hard_negative_ramp_epochs", 0.0),
                                    steps_per_epoch)

    def export_info(self) -> dict:
        """What rebuilds the model from the export alone (`mmjax.load`): the complete config, the tokenizer and,
        for the 'bert' tower, the BERT architecture (its weights are in the exported parameters)."""
        info = {"full_config": full_config(self.config), "tokenizer_spec": tokenizer_spec(self.tokenizer)}
        if self.pretrained.bert_module is not None:
            info["bert_config"] = dataclasses.asdict(self.pretrained.bert_module.config)
        return info

    # ---- model inputs ---------------------------------------------------------------------------------------
    def _image_inputs(self, batch):
        if self.regions:
            return batch["image_feats"], batch["image_mask"]
        return batch["images"], None

    def init_variables(self, rng, batch):
        images, mask = self._image_inputs(batch)
        variables = self.model.init({"params": rng, "dropout": rng}, images, mask, batch["caption_ids"],
                                    batch["caption_mask"], train=False)
        return self.pretrained.apply(variables)

    def loss(self, params, extra, batch, rng, phase):
        """`phase`: True in the VSE0 warm-up, the traced all-negative weight in the ramp, False after
        (`mmjax.losses.maxmatch_objective`'s `warmup`)."""
        images, mask = self._image_inputs(batch)
        out, updates = self.model.apply({"params": params, **extra}, images, mask, batch["caption_ids"],
                                        batch["caption_mask"], train=True, mutable=list(extra.keys()),
                                        rngs={"dropout": rng})
        valid = batch["example_valid"]
        loss, metrics = maxmatch_objective(out["image"], out["text"], batch["caption_image"], self.config.loss,
                                           warmup=phase, image_valid=valid,
                                           caption_valid=valid[batch["caption_image"]],
                                           matching=self.config.get("matching"),
                                           all_pairs=AllPairsLayout.from_config(self.config.sharding),
                                           ignore_pairs=batch.get("caption_true"))
        return loss, (metrics, updates)

    # ---- evaluation ----------------------------------------------------------------------------------------
    @functools.cached_property
    def _embed_images(self):
        return jax.jit(lambda v, x, m: self.model.apply(v, x, m, method="embed_images"))

    @functools.cached_property
    def _embed_captions(self):
        return jax.jit(lambda v, x, m: self.model.apply(v, x, m, method="embed_captions"))

    def _positives(self, split: str, data: dict):
        """The split's semantic ground truth, computed once (validation asks for the same split every time)."""
        cache = self.__dict__.setdefault("_positives_by_split", {})
        if split not in cache:
            cache[split] = retrieval_positives(data)
        return cache[split]

    def eval_context(self, variables, split: str, *, suites: bool = True) -> dict:
        """Context for `mmjax.evaluation` evaluators on `split` (embedding functions, inputs; ShapesWorld suites)."""
        data, src = self.split_data(split)
        # Variables are an argument (partial of a jitted function), not constants baked into the program.
        embed_img = functools.partial(self._embed_images, variables)
        embed_txt = functools.partial(self._embed_captions, variables)
        n, c, t = src.caption_ids.shape
        context = {"embed_images": embed_img, "embed_captions": embed_txt, "images": src.images,
                   "image_mask": src.image_mask, "captions": src.caption_ids.reshape(n * c, t),
                   "caption_mask": src.caption_mask.reshape(n * c, t), "caption_to_image": np.repeat(np.arange(n), c)}
        if data is not None:  # ShapesWorld: also the semantic ground truth (every image a caption is true of)
            context["semantic_positives"] = self._positives(split, data)
        if suites and data is not None:
            def encode_images(idx):
                mask = None if src.image_mask is None else src.image_mask[idx]
                return keep_set_arrays(batched_apply(embed_img, (src.images[idx], mask), name=None, jit=False))

            def encode_texts(captions):
                enc = self.tokenizer.encode(list(captions))
                return keep_set_arrays(batched_apply(embed_txt, (enc.ids, enc.attention_mask), name=None,
                                                     jit=False))

            loss = self.config.loss
            kind = inference_kind(loss.similarity)  # MaxMatch: top-k
            score = set_pairs(kind, **similarity_options(loss, self.config.get("matching")))
            context.update(shapesworld_suites_context(data, encode_images, encode_texts, score))
        return context
