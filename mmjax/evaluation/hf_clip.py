"""Evaluation of a pretrained Hugging Face CLIP (optionally with a trained Flow-CLIP / Global-M head) on
compositional benchmarks read from their official files and on zero-shot classification.

    python evaluate.py --config configs/clip_hf_eval.py:sugarcrepe --workdir out/clip_b32 \
        --config.data.clip_dir=/models/clip-vit-base-patch32 \
        --config.benchmarks.sugarcrepe.path=/data/sugar-crepe/data \
        --config.benchmarks.sugarcrepe.image_root=/data/coco/val2017

There is no training run (`config.pretrained = 'hf_clip'`, no `config.task`): `mmjax.experiment.evaluate` builds
this evaluation's context instead of a task's, and the workdir only receives `results.json` / `results.md`. Scores:

* plain CLIP (`data.head_workdir` empty): cosine of the projected image and text embeddings ("global"), pair by pair;
* with a finished `flowclip_head` run in `data.head_workdir`: the exported head (`mmjax.models.FlowCLIPHead` with
  the run's recorded `FlowCLIPOptions`, as in its training) on the CLIP's raw features — image {"global", "patches"}, text {"global", "tokens", "valid"} with
  the first `flowclip.max_tokens` positions, as the training caches hold them. Compositional pairs are scored one
  pair at a time (`score_pairs` vmapped over 1 × 1 problems, equal to the diagonal of the all-pairs matrix) because a
  batch's distinct images × distinct captions matrix would cost ~n times more; zero-shot scores the full matrix.
  Features are rounded to float16 first because the head was trained on float16 caches
  (`scripts/cache_clip_features.py`).

`context()` gives the compositional evaluator "records" ({benchmark: records}, one entry per
`config.benchmarks` item, read with `mmjax.data.readers.<reader>(path, image_root, **kwargs)`) and "score_fn" (an
`EmbeddingScorer`: each record's image is cropped to its bbox when it has one, preprocessed as CLIP does at the
checkpoint's `vision_config.image_size` and encoded once), and the zero-shot evaluator "score_matrix_fn"
(images batch of paths or uint8 arrays, prompts) -> [B, P].
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np

from mmjax.batching import batched_apply, pad_rows
from mmjax.data import readers
from mmjax.data.clip_preprocess import preprocess_batch
from mmjax.data.tokenizers import check_texts
from mmjax.evaluation.scorers import EmbeddingScorer, cosine_pairs, pair_diagonal
from mmjax.evaluation.tiled import tiled_scores
from mmjax.normalize import unit_normalize
from mmjax.flowclip import FlowCLIPOptions
from mmjax.models.feature_cache import clip_encoders
from mmjax.models.flowclip_head import FlowCLIPHead
from mmjax.models.hf import load_hf_clip

# Readers that return a `CompositionalDataset`; the others (karpathy, precomp) feed retrieval, not this task.
COMPOSITIONAL_READERS = ("abc6k", "aro", "clevr_pug", "negclip_tsv", "sugarcrepe", "whatsup", "winoground")
HEAD_FEATURE_DTYPE = np.float16  # the dtype of the feature caches the heads are trained on
SCORE_BLOCK = 256  # captions (matrix) or pairs per head-scoring call: fixed shapes, one compilation each


def _rows(tree: dict, start: int, stop: int, size: int) -> dict:
    """Rows [start, stop) of every array, padded to `size` rows by repeating the last one (a real row, so padded
    text rows keep valid tokens and the scorer never sees an all-masked caption)."""
    return pad_rows({k: v[start:stop] for k, v in tree.items()}, size)


def _concat(parts: list[dict]) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


class HFCLIPEvaluation:
    """See the module docstring. `config.data`: clip_dir, head_workdir ('' = plain CLIP cosine), batch_size
    (images / texts per encoder call), num_workers (image decoding threads); `config.benchmarks`.
    `head_export`: (variables, export info) of the `flowclip_head` run in `data.head_workdir`, read by the caller
    (`mmjax.experiment`), or None."""

    def __init__(self, config, workdir: str = ".", head_export=None):
        self.config = config
        d = config.data
        clip_dir = d.get("clip_dir", "")
        if not clip_dir:
            raise ValueError("config.data.clip_dir is empty: set it to a Hugging Face CLIP directory "
                             "(config.json, model.safetensors, tokenizer files)")
        if not os.path.isdir(clip_dir):
            raise FileNotFoundError(f"config.data.clip_dir: no directory {clip_dir}")
        self.benchmarks = self._benchmark_specs(config.get("benchmarks", {}))
        self.batch_size = int(d.get("batch_size", 64))
        if self.batch_size < 1:
            raise ValueError(f"config.data.batch_size must be >= 1, got {self.batch_size}")
        num_workers = int(d.get("num_workers", 4))
        self._executor = ThreadPoolExecutor(num_workers) if num_workers > 1 else None
        os.makedirs(workdir, exist_ok=True)  # no training run created it; results are written there
        self.workdir = workdir

        self.model, params, self.tokenizer = load_hf_clip(clip_dir)
        self.clip_dir = clip_dir
        self.image_size = self.model.config.vision_config.image_size
        self._encode_pixels, self._encode_strings = clip_encoders(self.model, params, self.tokenizer,
                                                                  batch_size=self.batch_size)
        self._variables = {"params": params}
        self._text_ids_fn = jax.jit(functools.partial(self.model.apply, method="encode_text"))
        self.head_workdir = d.get("head_workdir", "")
        if bool(self.head_workdir) != (head_export is not None):
            raise ValueError("config.data.head_workdir and the head export must be given together")
        self.head_params, self.flowclip = (self._load_head(self.head_workdir, *head_export) if head_export
                                           else (None, None))
        self.head = None if self.flowclip is None else FlowCLIPHead(self.model.config.projection_dim, self.flowclip)
        self._head_matrix_fn = self._head_pairs_fn = None  # jitted on first use
        self.score_name = ("cosine" if self.flowclip is None
                           else "flowclip" if self.flowclip.use_local else "global_m")

    # ------------------------------------------------------------------------------------------------ config

    @staticmethod
    def _benchmark_specs(benchmarks) -> dict[str, dict]:
        """Validated {name: {"reader", "path", "image_root", "kwargs"}} (errors name the config field)."""
        specs = {}
        for name, spec in dict(benchmarks).items():
            spec = spec.to_dict() if hasattr(spec, "to_dict") else dict(spec)
            where = f"config.benchmarks.{name}"
            unknown = sorted(set(spec) - {"reader", "path", "image_root", "kwargs"})
            if unknown:
                raise ValueError(f"{where}: unknown field(s) {unknown}; expected reader, path, image_root, kwargs")
            reader = spec.get("reader")
            if reader not in COMPOSITIONAL_READERS:
                raise ValueError(f"{where}.reader = {reader!r}; choose one of {COMPOSITIONAL_READERS}")
            path = spec.get("path")
            paths = [path] if isinstance(path, str) else list(path or [])
            if not paths or not all(isinstance(p, str) and p for p in paths):
                raise ValueError(f"{where}.path is empty: set it to the benchmark's official file(s), e.g. "
                                 f"--{where}.path=/data/...")
            if not spec.get("image_root"):
                raise ValueError(f"{where}.image_root is empty: set it to the directory the file's images are "
                                 f"relative to")
            specs[name] = {"reader": reader, "path": path if isinstance(path, str) else tuple(paths),
                           "image_root": spec["image_root"], "kwargs": dict(spec.get("kwargs") or {})}
        return specs

    def _load_head(self, head_workdir: str, variables, info):
        """(head params, `FlowCLIPOptions`) of a finished `flowclip_head` run's export."""
        if info.get("task") != "flowclip_head":
            raise ValueError(f"config.data.head_workdir: {head_workdir} holds a {info.get('task')!r} run, "
                             f"not a 'flowclip_head' one")
        if "flowclip" not in info:
            raise ValueError(f"config.data.head_workdir: {head_workdir}/export/export.json has no 'flowclip' "
                             f"options")
        dim = self.model.config.projection_dim
        params = variables["params"]
        missing = [k for k in ("M", "M_tok", "W", "log_logit_scale") if k not in params]
        if missing:
            raise ValueError(f"config.data.head_workdir: the export of {head_workdir} lacks head parameter(s) "
                             f"{missing}")
        if info.get("dim", dim) != dim or np.shape(params["M"]) != (dim, dim):
            raise ValueError(f"config.data.head_workdir: the head of {head_workdir} is {np.shape(params['M'])} "
                             f"but the CLIP of {self.clip_dir} projects to {dim} dimensions: a head works only "
                             f"on the CLIP whose features it was trained on")
        return ({k: np.asarray(v, np.float32) for k, v in params.items()},
                FlowCLIPOptions.from_mapping(info["flowclip"]))

    # ------------------------------------------------------------------------------------------------ encoding

    def encode_images(self, images) -> dict:
        """Paths, uint8 arrays or `CompositionalRecord`s (cropped to their own bbox) -> image features."""
        parts = []
        for s in range(0, len(images), self.batch_size):
            block = preprocess_batch(list(images[s:s + self.batch_size]), self.image_size, executor=self._executor)
            parts.append(self._encode_pixels(block))
        return self._keep_image(_concat(parts))

    def encode_texts(self, strings) -> dict:
        strings = list(strings)
        check_texts(strings)  # a NUL character: ValueError naming the caption's index
        parts = [self._encode_strings(strings[s:s + self.batch_size])
                 for s in range(0, len(strings), self.batch_size)]
        return self._keep_text(_concat(parts))

    def encode_token_ids(self, ids, attention_mask) -> dict:
        """Token ids and attention mask [n, L] (`HFTokenizer('clip')` at the full context, as `encode_texts`
        tokenises) -> the text features `encode_texts` returns."""
        out = batched_apply(functools.partial(self._text_ids_fn, self._variables),
                            (np.asarray(ids, np.int32), np.asarray(attention_mask).astype(np.int32)),
                            batch_size=self.batch_size, name=None, jit=False)
        return self._keep_text(jax.tree_util.tree_map(np.asarray, out))

    def _keep_image(self, out: dict) -> dict:
        if self.flowclip is None:
            return {"global": out["global"]}
        return {k: out[k].astype(HEAD_FEATURE_DTYPE) for k in ("global", "patches")}

    def _keep_text(self, out: dict) -> dict:
        if self.flowclip is None:
            return {"global": out["global"]}
        length = self.flowclip.max_tokens
        return {"global": out["global"].astype(HEAD_FEATURE_DTYPE),
                "tokens": out["tokens"][:, :length].astype(HEAD_FEATURE_DTYPE),
                "valid": out["valid"][:, :length]}

    # ------------------------------------------------------------------------------------------------ scoring

    def _head_score(self, img, txt):
        """The head's all-pairs scores [Bi, Bt] (features cast to float32 inside the scorer)."""
        return self.head.apply({"params": self.head_params}, img, txt)

    def score_matrix(self, img: dict, txt: dict) -> np.ndarray:
        """[n_images, n_texts] scores: cosine, or the head in fixed-size tiles (`tiled_scores`: one compilation)."""
        if self.flowclip is None:
            a, b = unit_normalize(np.asarray(img["global"])), unit_normalize(np.asarray(txt["global"]))
            return (a @ b.T).astype(np.float32)
        if self._head_matrix_fn is None:
            self._head_matrix_fn = jax.jit(self._head_score)
        return tiled_scores(self._head_matrix_fn, img, txt, image_block=self.batch_size, text_block=SCORE_BLOCK)

    def score_head_pairs(self, img: dict, txt: dict) -> np.ndarray:
        """[n] head scores of image row p against caption row p (blocks of `SCORE_BLOCK` pairs)."""
        if self._head_pairs_fn is None:
            self._head_pairs_fn = jax.jit(lambda i, t: pair_diagonal(self._head_score, i, t))
        n = len(img["global"])
        out = np.empty(n, np.float32)
        for s in range(0, n, SCORE_BLOCK):
            block = self._head_pairs_fn(_rows(img, s, s + SCORE_BLOCK, SCORE_BLOCK),
                                        _rows(txt, s, s + SCORE_BLOCK, SCORE_BLOCK))
            out[s:s + SCORE_BLOCK] = np.asarray(block)[:min(SCORE_BLOCK, n - s)]
        return out

    def pair_scorer(self) -> EmbeddingScorer:
        """Compositional pair scorer (pairs mode): cosine, or the head pair by pair (module docstring)."""
        if self.flowclip is None:
            return EmbeddingScorer(self.encode_images, self.encode_texts,
                                   lambda img, txt: cosine_pairs(img["global"], txt["global"]))
        return EmbeddingScorer(self.encode_images, self.encode_texts, self.score_head_pairs)

    def zeroshot_score_fn(self):
        """(images batch: paths or uint8 arrays, prompts) -> [B, P]; prompt features are encoded once."""
        prompt_cache: dict = {}

        def score(images, prompts):
            key = tuple(prompts)
            if key not in prompt_cache:
                prompt_cache.clear()  # one prompt set per evaluation: keep only the latest
                prompt_cache[key] = self.encode_texts(key)
            return self.score_matrix(self.encode_images(list(images)), prompt_cache[key])

        return score

    # ------------------------------------------------------------------------------------------------ evaluation

    def read_benchmarks(self) -> dict[str, list]:
        """{benchmark name: list of `CompositionalRecord`} from the official files of `config.benchmarks`."""
        out = {}
        for name, spec in self.benchmarks.items():
            reader = getattr(readers, spec["reader"])
            dataset = reader(spec["path"], spec["image_root"], **spec["kwargs"])
            records = list(getattr(dataset, "records", dataset))
            if not records:
                raise ValueError(f"config.benchmarks.{name}: {spec['path']} gave no records "
                                 f"(skipped: {dict(getattr(dataset, 'skipped', {}))})")
            print(f"[hf_clip] {name}: {len(records)} records from {spec['path']}", flush=True)
            out[name] = records
        return out

    def context(self) -> dict:
        """Evaluator context (`mmjax.evaluation.registry`); every benchmark file is a test set of its own."""
        context = {"score_name": self.score_name, "score_matrix_fn": self.zeroshot_score_fn()}
        if self.benchmarks:
            context["records"] = self.read_benchmarks()
            context["score_fn"] = self.pair_scorer()
        return context
