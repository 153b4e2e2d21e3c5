"""The models behind `mmjax.load`: one backend per exported task, rebuilt from the export alone.

Each backend reads only its export directory (export.json's complete config and tokenizer spec, `params/`, a head's
`base/`), builds the model with the factory the task trains it with, and embeds and scores exactly as the task's
evaluation context does (same jitted functions, batch sizes and tiling), so `Retriever.score` equals the score
matrix behind the run's results.json:

    retrieval       `mmjax.models.factory.build_retrieval_model`; sets scored by `mmjax.evaluation.embed.score_sets`
                    with `inference_kind(loss.similarity)` and `similarity_options(loss, matching)`
    clip_pretrain   the exported CLIP (`clip_config`, `mmjax.models.frozen_clip.encode_image`); cosine of unit globals
    flowclip_head   `FlowCLIPHead` on the features of the frozen CLIP copied into `base/`, stored as the feature caches
                    store them (float16), tiled by `mmjax.evaluation.tiled.tiled_scores`; a head trained on a
                    Hugging Face CLIP's caches (COCO) scores through `mmjax.evaluation.hf_clip.HFCLIPEvaluation` on
                    the CLIP directory export.json names (`base.hf_clip_dir`, or `mmjax.load(..., hf_clip_dir=)`)

A backend offers `tokenizer`, `score_name`, `image_inputs(images, mask)`, `embed_images(inputs)`,
`embed_texts(ids, mask)` and `score(image_arrays, text_arrays)`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
from collections.abc import Mapping

import jax
import ml_collections
import numpy as np

from mmjax.batching import batched_apply
from mmjax.normalize import unit_normalize
from mmjax.train.export import load_tokenizer_spec, read_export

FEATURE_DTYPE = np.float16  # the storage dtype of the feature caches the heads train and evaluate on


def build_backend(export_dir: str, variables, info: dict, *, hf_clip_dir: str | None = None):
    builders = {"retrieval": SetRetrievalBackend, "clip_pretrain": CLIPBackend, "flowclip_head": FlowCLIPHeadBackend}
    task = info.get("task")
    if task not in builders:
        raise ValueError(f"{os.path.join(export_dir, 'export.json')}: task {task!r} cannot be loaded; mmjax.load "
                         f"knows {sorted(builders)}")
    base = info.get("base") or {}
    if task == "flowclip_head" and (hf_clip_dir or "hf_clip_dir" in base):
        return HFCLIPHeadBackend(export_dir, variables, info, hf_clip_dir)
    if hf_clip_dir:
        raise ValueError(f"mmjax.load(hf_clip_dir=...) is for Flow-CLIP heads trained on a Hugging Face CLIP; "
                         f"{export_dir} holds a {task!r} run")
    return builders[task](export_dir, variables, info)


def export_config(export_dir: str, info: dict) -> ml_collections.ConfigDict:
    """The run's config from export.json: "full_config", else (older exports) the recorded "config"."""
    config = info.get("full_config") or info.get("config")
    if not isinstance(config, dict):
        raise ValueError(f"{os.path.join(export_dir, 'export.json')} records no config (field 'full_config'): "
                         f"re-export the run with this version of mmjax")
    return ml_collections.ConfigDict(config)


def export_tokenizer(export_dir: str, info: dict, config):
    """The run's tokenizer: export.json's "tokenizer_spec"; exports written before it was recorded fall back on
    the ShapesWorld word tokenizer of the max_len they recorded."""
    if info.get("tokenizer_spec"):
        return load_tokenizer_spec(info["tokenizer_spec"], export_dir)
    from mmjax.data.tokenizers import load_tokenizer
    data = config.get("data") or {}
    if info.get("tokenizer") == "shapesworld" and "max_len" in info:
        return load_tokenizer("shapesworld", max_len=int(info["max_len"]))
    if data.get("name") == "shapesworld" and data.get("tokenizer", "shapesworld") == "shapesworld" \
            and "max_len" in data:
        return load_tokenizer("shapesworld", max_len=int(data["max_len"]))
    raise ValueError(f"{os.path.join(export_dir, 'export.json')} records no tokenizer (field 'tokenizer_spec'): "
                     f"re-export the run with this version of mmjax")


def _quiet(fn, *args, **kw):
    """`fn` with its progress line (score_sets' bar) kept off stdout: a retriever call is not an evaluation."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kw)


class SetRetrievalBackend:
    """Set (MaxMatch / PVSE / VSE∞ ...) retrieval models of the `retrieval` task."""

    def __init__(self, export_dir: str, variables, info: dict):
        from mmjax.losses import similarity_options
        from mmjax.models.factory import build_retrieval_model
        from mmjax.similarity import inference_kind
        self.config = config = export_config(export_dir, info)
        self.tokenizer = export_tokenizer(export_dir, info, config)
        bert = None
        if config.model.text.tower == "bert":
            if "bert_config" not in info:
                raise ValueError(f"{os.path.join(export_dir, 'export.json')}: a 'bert' text tower needs "
                                 f"'bert_config' (re-export the run with this version of mmjax)")
            from mmjax.models.bert import BertConfig, BertModel
            bert = BertModel(BertConfig.from_dict(info["bert_config"]))
        model = build_retrieval_model(config.model, self.tokenizer.vocab_size, bert)
        self.variables = variables
        self.regions = config.data.name == "precomp" or config.data.get("mode") == "regions"
        self.score_name = inference_kind(config.loss.similarity)
        self.similarity_kw = similarity_options(config.loss, config.get("matching"))
        # As `RetrievalTask`: the variables are an argument of the jitted functions, not constants in them.
        self._images = functools.partial(jax.jit(lambda v, x, m: model.apply(v, x, m, method="embed_images")),
                                         variables)
        self._texts = functools.partial(jax.jit(lambda v, x, m: model.apply(v, x, m, method="embed_captions")),
                                        variables)

    def image_inputs(self, images, mask=None) -> tuple:
        if isinstance(images, Mapping):  # a generated ShapesWorld split
            key, mask_key = ("regions", "region_mask") if self.regions else ("images", None)
            if key not in images:
                raise KeyError(f"this run's image tower takes {key!r} (data.mode = "
                               f"{self.config.data.get('mode')!r}); the split has {sorted(images)}: generate it "
                               f"with mode={'regions' if self.regions else 'pixels'!r}")
            return np.asarray(images[key]), None if mask_key is None else np.asarray(images[mask_key], bool)
        x = np.asarray(images)
        if self.regions:
            if x.ndim != 3:
                raise ValueError(f"region features must be [N, R, F], got shape {x.shape}")
            return x, np.ones(x.shape[:2], bool) if mask is None else np.asarray(mask, bool)
        if x.ndim != 4 or mask is not None:
            raise ValueError(f"pixel images must be [N, H, W, 3] without a mask, got shape {x.shape}")
        return x, None

    def embed_images(self, inputs) -> dict:
        from mmjax.evaluation.embed import keep_set_arrays
        return keep_set_arrays(batched_apply(self._images, inputs, name=None))

    def embed_texts(self, ids, mask) -> dict:
        from mmjax.evaluation.embed import keep_set_arrays
        return keep_set_arrays(batched_apply(self._texts, (ids, mask), name=None))

    def score(self, img: dict, txt: dict) -> np.ndarray:
        from mmjax.evaluation.embed import score_sets
        return _quiet(score_sets, img["set"], txt["set"], self.score_name, img.get("mask"), txt.get("mask"),
                      **self.similarity_kw)


class CLIPBackend:
    """The ShapesWorld CLIP of a `clip_pretrain` export; `batch_size` None: `CLIPPretrainTask.embed`'s batches."""

    score_name = "cosine"

    def __init__(self, export_dir: str, variables, info: dict, *, batch_size: int | None = None):
        from mmjax.models.clip import CLIPConfig, CLIPModel
        from mmjax.models.frozen_clip import encode_image
        from mmjax.models.region_clip import RegionCLIPModel
        self.tokenizer = export_tokenizer(export_dir, info, export_config(export_dir, info))
        self.mode = info.get("mode", "pixels")  # exports made before the region base are pixel CLIPs
        config = CLIPConfig.from_dict(info["clip_config"])
        model = CLIPModel(config) if self.mode == "pixels" else RegionCLIPModel(config)
        variables = {"params": variables["params"]}
        self._image_fn = functools.partial(jax.jit(lambda v, x: encode_image(model, v, x, self.mode)), variables)
        self._text_fn = functools.partial(jax.jit(lambda v, i, m: model.apply(v, i, m, method="encode_text")),
                                          variables)
        self.image_batch, self.text_batch = batch_size or 256, batch_size or 1024

    def image_inputs(self, images, mask=None) -> tuple:
        from mmjax.models.frozen_clip import image_inputs, pack_regions
        if isinstance(images, Mapping):
            return (image_inputs(images, self.mode),)
        x = np.asarray(images)
        if self.mode == "pixels":
            if x.ndim != 4 or mask is not None:
                raise ValueError(f"pixel images must be uint8 [N, H, W, 3] without a mask, got shape {x.shape}")
            return (x,)
        if x.ndim != 3:
            raise ValueError(f"region features must be [N, R, F], got shape {x.shape}")
        return (pack_regions(x, np.ones(x.shape[:2], bool) if mask is None else np.asarray(mask, bool)),)

    def features(self, inputs) -> dict:
        """The base's raw {"global", "patches"} (what a head's feature cache holds)."""
        return batched_apply(self._image_fn, inputs, batch_size=self.image_batch, name=None, jit=False)

    def text_features(self, ids, mask) -> dict:
        return batched_apply(self._text_fn, (ids, np.asarray(mask).astype(np.int32)), batch_size=self.text_batch,
                             name=None, jit=False)

    def embed_images(self, inputs) -> dict:
        return {"global": unit_normalize(self.features(inputs)["global"])}

    def embed_texts(self, ids, mask) -> dict:
        return {"global": unit_normalize(self.text_features(ids, mask)["global"])}

    def score(self, img: dict, txt: dict) -> np.ndarray:
        return img["global"] @ txt["global"].T


class FlowCLIPHeadBackend:
    """A Flow-CLIP / Global-M head on the frozen ShapesWorld CLIP copied into its export's `base/`."""

    def __init__(self, export_dir: str, variables, info: dict):
        from mmjax.flowclip import FlowCLIPOptions
        from mmjax.models.flowclip_head import FlowCLIPHead
        where = os.path.join(export_dir, "export.json")
        base = info.get("base") or {}
        if "export" not in base:
            raise ValueError(f"{where} names no base CLIP (field 'base'): re-export the head with this version")
        base_dir = os.path.join(export_dir, base["export"])
        base_variables, base_info = read_export(base_dir)
        self.base = CLIPBackend(base_dir, base_variables, base_info, batch_size=64)  # FrozenShapesWorldCLIP's
        self.tokenizer = self.base.tokenizer
        config = export_config(export_dir, info)
        self.options = FlowCLIPOptions.from_mapping(info["flowclip"])
        head = FlowCLIPHead(int(info["dim"]), self.options)
        self.score_name = "flowclip" if self.options.use_local else "global_m"
        self.caption_chunk = int(config.get("eval_caption_chunk", 512))
        self._score = functools.partial(jax.jit(lambda p, i, t: head.apply({"params": p}, i, t)),
                                        variables["params"])

    def image_inputs(self, images, mask=None) -> tuple:
        return self.base.image_inputs(images, mask)

    def embed_images(self, inputs) -> dict:
        out = self.base.features(inputs)
        return {k: np.asarray(out[k], FEATURE_DTYPE) for k in ("global", "patches")}

    def embed_texts(self, ids, mask) -> dict:
        out = self.base.text_features(ids, mask)
        n = self.options.max_tokens
        return {"global": np.asarray(out["global"], FEATURE_DTYPE),
                "tokens": np.asarray(out["tokens"])[:, :n].astype(FEATURE_DTYPE),
                "valid": np.asarray(out["valid"], bool)[:, :n]}

    def score(self, img: dict, txt: dict) -> np.ndarray:
        from mmjax.evaluation.tiled import tiled_scores
        n_img = len(img["global"])
        return tiled_scores(self._score, img, txt, image_block=n_img, text_block=self.caption_chunk)


class HFCLIPHeadBackend:
    """A Flow-CLIP / Global-M head on the Hugging Face CLIP whose features it trained on (COCO caches from
    scripts/cache_clip_features.py): encoded and scored by `HFCLIPEvaluation`, the evaluator of
    configs/clip_hf_eval.py, so scores equal that evaluation's. The CLIP (hundreds of MB) is not copied into the
    export: export.json names its directory (`base.hf_clip_dir`); `hf_clip_dir` overrides it on another machine.
    Images: paths, Pillow images or uint8 arrays [H, W, 3] (a list, or an array [N, H, W, 3]; a ShapesWorld split
    gives its "images"), preprocessed as the caches were (`mmjax.data.clip_preprocess`)."""

    def __init__(self, export_dir: str, variables, info: dict, hf_clip_dir: str | None = None):
        from mmjax.data.tokenizers import HFTokenizer
        from mmjax.evaluation.hf_clip import HFCLIPEvaluation
        recorded = (info.get("base") or {}).get("hf_clip_dir")
        clip_dir = hf_clip_dir or recorded
        where = os.path.join(export_dir, "export.json")
        if not clip_dir:
            raise ValueError(f"{where} names no base CLIP (field 'base'): pass mmjax.load(..., hf_clip_dir=...)")
        if not os.path.isdir(clip_dir):
            source = "hf_clip_dir=" if hf_clip_dir else f"{where} field base.hf_clip_dir"
            raise FileNotFoundError(f"the head's Hugging Face CLIP directory {clip_dir} ({source}) does not exist "
                                    f"here: pass mmjax.load(..., hf_clip_dir=<the CLIP its caches were encoded "
                                    f"with>)")
        config = ml_collections.ConfigDict({"data": {"clip_dir": clip_dir, "head_workdir": export_dir,
                                                     "batch_size": 64, "num_workers": 1}, "benchmarks": {}})
        self.evaluation = _quiet(HFCLIPEvaluation, config, export_dir, head_export=(variables, info))
        self.clip_dir = clip_dir
        self.score_name = self.evaluation.score_name
        context = self.evaluation.model.config.text_config.max_position_embeddings
        self.tokenizer = HFTokenizer(clip_dir, "clip", context)  # the evaluator's padding: the full context

    def image_inputs(self, images, mask=None) -> tuple:
        if mask is not None:
            raise ValueError("a head on a Hugging Face CLIP takes whole images: no mask")
        if isinstance(images, Mapping):
            if "images" not in images:
                raise ValueError(f"a head on a Hugging Face CLIP takes pixels; the split has no 'images' (keys "
                                 f"{sorted(images)})")
            images = images["images"]
        if isinstance(images, np.ndarray) and images.ndim == 3:
            raise ValueError(f"images must be a list of images or an array [N, H, W, 3], got one image of shape "
                             f"{images.shape} (wrap it in a list)")
        return (list(images),)

    def embed_images(self, inputs) -> dict:
        return self.evaluation.encode_images(inputs[0])

    def embed_texts(self, ids, mask) -> dict:
        return self.evaluation.encode_token_ids(ids, mask)

    def score(self, img: dict, txt: dict) -> np.ndarray:
        return self.evaluation.score_matrix(img, txt)
