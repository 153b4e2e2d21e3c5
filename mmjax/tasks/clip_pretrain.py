"""A small CLIP-style dual encoder trained contrastively on ShapesWorld (docs/design.md#shapesworld-presets
`base_clip`, `base_clip_regions`).

The towers are `mmjax.models.clip.CLIPModel` (HF CLIP architecture: ViT with 8×8 patches on 64×64 pixels,
`data.mode='pixels'`) or `mmjax.models.region_clip.RegionCLIPModel` (a transformer over the region vectors,
`data.mode='regions'`), and a causal text transformer over the ShapesWorld word tokenizer, on ShapesWorld with an
optional language prior (`data.language_prior`, `mmjax.data.shapesworld.config.LANGUAGE_PRIORS`; recorded in the
export so the heads on this CLIP see the same data), pooled at [SEP] (the tokenizer's end token plays CLIP's
EOT; valid tokens are 1..eot−1 as for CLIP). Loss: symmetric multi-positive InfoNCE over logit_scale·cos with the
5 captions of each image as its positives (`mmjax.losses.infonce_loss`), learnable temperature (init 0.07,
clipped at 100), plus λ_tok (`loss.token_align`, default 0) times the same loss over the late-interaction scores of
the local tokens (`mmjax.losses.token_alignment`: what aligns a word with the image token of its object). After
training the parameters are exported (`mmjax.train.export`) and the model is frozen for the Flow-CLIP heads.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.data.shapesworld.config import language_prior
from mmjax.data.shapesworld.local_labels import patch_objects
from mmjax.data.shapesworld.suites import retrieval_positives
from mmjax.data.pipeline import BatchIterator, PipelineConfig, source_from_shapesworld, with_global_caption_image
from mmjax.losses import infonce_loss
from mmjax.losses.token_alignment import token_alignment_scores
from mmjax.batching import batched_apply
from mmjax.normalize import unit_normalize
from mmjax.models.factory import build_shapesworld_clip
from mmjax.models.frozen_clip import encode_image, image_inputs, normalise_pixels, pack_regions
from mmjax.train.export import full_config, tokenizer_spec
from mmjax.train.task import select_keys, single_phase


class CLIPPretrainTask:
    device_keys = ("images", "image_feats", "image_mask", "caption_ids", "caption_mask", "caption_image",
                   "example_valid")
    float_inputs = ("images", "image_feats")

    def __init__(self, config, workdir: str = "."):
        del workdir
        from mmjax.data import shapesworld
        self.config = config
        d = config.data
        self.mode = d.get("mode", "pixels")
        self.prior = d.get("language_prior", "none")
        # λ_tok (0: the plain CLIP loss). An export made before the field existed (the study's bases P and R) has no
        # `loss` section in its full_config, and `build_task` rebuilds the task from it: its loss was the plain one.
        self.token_align = float(config.get("loss", {}).get("token_align", 0.0))
        world = dict(preset=d.preset, seed=d.seed, mode=self.mode, **language_prior(self.prior))
        train = shapesworld.generate("train", **world)
        val = shapesworld.generate(d.val_split, **world)
        self.train_data = train  # the local probes fit on the training split's tokens
        self.tokenizer = shapesworld.ShapesWorld(train["config"]).tokenizer()
        self.source_train = source_from_shapesworld(train, self.tokenizer)
        self.source_val = source_from_shapesworld(val, self.tokenizer)
        self.val_positives = retrieval_positives(val)  # the semantic ground truth of every validation
        self.model = build_shapesworld_clip(config.model, self.tokenizer, regions=self.mode == "regions")
        self.clip_config = self.model.config
        self.examples_per_step = d.batch_size
        self.pipeline = PipelineConfig(batch_size=d.batch_size, seed=config.seed, augment=False, prefetch=d.prefetch)

    def make_iterator(self, start=(0, 0)):
        return BatchIterator(self.source_train, self.pipeline, start=start)

    def prepare_batch(self, host_batch: dict) -> dict:
        return select_keys(with_global_caption_image(host_batch), self.device_keys)

    def phases(self, steps_per_epoch: int):
        return single_phase()

    def export_info(self) -> dict:
        return {"task": "clip_pretrain", "clip_config": dataclasses.asdict(self.clip_config),
                "tokenizer": "shapesworld", "max_len": self.tokenizer.max_len, "preset": self.config.data.preset,
                "seed": self.config.data.seed, "mode": self.mode, "language_prior": self.prior,
                "full_config": full_config(self.config), "tokenizer_spec": tokenizer_spec(self.tokenizer)}

    def _image_args(self, batch) -> tuple:
        if self.mode == "pixels":
            return (normalise_pixels(batch["images"]),)
        return batch["image_feats"], batch["image_mask"]

    def init_variables(self, rng, batch):
        return self.model.init(rng, *self._image_args(batch), batch["caption_ids"],
                               batch["caption_mask"].astype(jnp.int32))

    def _forward(self, params, batch):
        out = self.model.apply({"params": params}, *self._image_args(batch), batch["caption_ids"],
                               batch["caption_mask"].astype(jnp.int32))
        cos = unit_normalize(out["image"]["global"]) @ unit_normalize(out["text"]["global"]).T
        return out, cos, jnp.minimum(out["logit_scale"], self.config.model.logit_scale_max)

    def loss(self, params, extra, batch, rng, phase):
        out, cos, scale = self._forward(params, batch)
        valid = batch["example_valid"]
        contrast = functools.partial(infonce_loss, caption_image=batch["caption_image"], temperature=1.0,
                                     image_valid=valid, caption_valid=valid[batch["caption_image"]])
        loss, parts = contrast(scale * cos)
        metrics = {"loss/i2t": parts["i2t"], "loss/t2i": parts["t2i"], "logit_scale": scale}
        if self.token_align > 0:  # mmjax.losses.token_alignment: words aligned with the image's local tokens
            image_valid = None if self.mode == "pixels" else batch["image_mask"].astype(bool)
            align, _ = contrast(scale * token_alignment_scores(out, image_valid))
            metrics["loss/global"], metrics["loss/token_align"] = loss, align
            loss = loss + self.token_align * align
        return loss, ({"loss/total": loss, **metrics}, extra)

    @functools.cached_property
    def _encoders(self):
        image = jax.jit(lambda v, x: encode_image(self.model, v, x, self.mode))
        text = jax.jit(lambda v, i, m: self.model.apply(v, i, m, method="encode_text"))
        return image, text

    def embed(self, variables, images, caption_ids, caption_mask):
        """Unit global embeddings (numpy) of images and captions, in batches."""
        image_fn, text_fn = self._encoders
        # jit=False: the encoders are already jitted; batches are padded to one shape, so they compile once.
        img = batched_apply(lambda x: image_fn(variables, x)["global"], (images,), name=None, jit=False)
        txt = batched_apply(lambda i, m: text_fn(variables, i, m)["global"],
                            (caption_ids, caption_mask.astype(np.int32)), batch_size=1024, name=None,
                            jit=False)
        return unit_normalize(img), unit_normalize(txt)

    def split_data(self, split):
        from mmjax.data import shapesworld
        d = self.config.data
        data = shapesworld.generate(split, preset=d.preset, seed=d.seed, mode=self.mode, **language_prior(self.prior))
        return data, source_from_shapesworld(data, self.tokenizer)

    def _source_images(self, src):
        """A source's images as the encoder takes them (`mmjax.models.frozen_clip.image_inputs`)."""
        return src.images if self.mode == "pixels" else pack_regions(src.images, src.image_mask)

    def eval_context(self, variables, split: str, *, suites: bool = True) -> dict:
        from mmjax.evaluation.blind import shapesworld_training_pairs, subsample
        from mmjax.evaluation.scorers import cosine_pairs, shapesworld_suites_context
        if split == self.config.data.val_split:
            data, src, positives = None, self.source_val, self.val_positives
        else:
            data, src = self.split_data(split)
            positives = retrieval_positives(data)
        n, c, t = src.caption_ids.shape
        images = self._source_images(src)
        img, txt = self.embed(variables, images, src.caption_ids.reshape(n * c, t), src.caption_mask.reshape(n * c, t))
        context = {"similarity": img @ txt.T, "caption_to_image": np.repeat(np.arange(n), c), "score_name": "cosine",
                   "semantic_positives": positives}
        if suites and data is not None:
            def encode_images(idx):
                return self.embed(variables, images[idx], src.caption_ids[idx, 0], src.caption_mask[idx, 0])[0]

            def encode_texts(captions):
                enc = self.tokenizer.encode(list(captions))
                return self.embed(variables, images[:1], enc.ids, enc.attention_mask)[1]

            context.update(shapesworld_suites_context(data, encode_images, encode_texts, cosine_pairs))
            pos, neg = shapesworld_training_pairs(self.train_data)  # the pairs heads on this CLIP train against

            def blind_pairs(max_pairs):
                idx = subsample(len(pos), max_pairs, self.config.seed)
                return encode_texts([pos[i] for i in idx]), encode_texts([neg[i] for i in idx])
            context.update(blind_pairs=blind_pairs, blind_encode_texts=encode_texts)
            context["local_probe_inputs"] = self.local_probe_inputs(variables, data)
        return context

    def local_probe_inputs(self, variables, test_data: dict) -> dict:
        """The `local_probes` evaluator's inputs: this CLIP's local image tokens (ViT patches or region outputs) and
        text tokens, and which object each image token lies on."""
        image_fn, text_fn = self._encoders
        grid = self.config.model.image_size // self.config.model.patch_size

        def encode_images(data, idx):
            return batched_apply(lambda x: {"patches": image_fn(variables, x)["patches"]},
                                 (image_inputs(data, self.mode)[idx],), name=None, jit=False)

        def token_objects(data):
            return patch_objects(data, grid) if self.mode == "pixels" else data["region_object"]

        def encode_texts(strings):
            enc = self.tokenizer.encode(list(strings))
            return batched_apply(lambda i, m: text_fn(variables, i, m),
                                 (enc.ids, enc.attention_mask.astype(np.int32)), batch_size=1024, name=None, jit=False)

        return {"encode_images": encode_images, "encode_texts": encode_texts, "train": self.train_data,
                "test": test_data, "token_objects": token_objects}
