"""Load a trained run and use it: embed captions and images, score them as the run's evaluation does, retrieve.

    import mmjax; from mmjax.data.shapesworld import generate
    r = mmjax.load("workdir/maxmatch_shapes")       # a workdir (params="final" | "best") or an export dir alone
    hits = r.retrieve("a red circle", k=5, images=r.embed_images(generate("test")))  # hits.indices, hits.scores

`load(path, params)` reads one export (`mmjax.train.export`: `params/` + `export.json`, self-contained — the complete
config, the tokenizer spec, a head's base CLIP; docs/design.md#loading) and rebuilds its model with the project's
own factories (`mmjax.models.factory`, `mmjax.models.frozen_clip`, `mmjax.models.flowclip_head`). The `Retriever`:

    embed_texts(list[str]) -> Embeddings        tokenised with the run's own tokenizer and max_len
    embed_images(images, mask=None)             a `mmjax.data.shapesworld.generate` split, or the arrays the run's
                   -> Embeddings                image tower takes (regions [N, R, F] (+ mask), pixels uint8 [N,H,W,3]);
                                                a head on a Hugging Face CLIP: image paths, Pillow images or uint8
                                                arrays, preprocessed as its feature caches were
    score(images, texts) -> [n_images, n_texts] the run's inference score: set retrieval — the training
                                                similarity's `mmjax.similarity.inference_kind` with its options
                                                (`mmjax.losses.similarity_options`), tiled as evaluation tiles it;
                                                CLIP — cosine; Flow-CLIP heads — the head on the frozen base's
                                                features
    index(images=..., texts=...)                remembers a gallery for `retrieve`
    retrieve(query, k, images=None, texts=None) a caption string (or a text embedding) → the top-k images; an image
                   -> Hits(indices, scores, texts)  (an int: a row of the image gallery, or an image embedding) →
                                                the top-k captions. The gallery is the one passed, else the indexed
                                                one; ties go to the lower index.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from mmjax.train.export import EXPORTS, read_export

MODALITIES = ("image", "text")


@dataclasses.dataclass(frozen=True)
class Embeddings:
    """Rows of one modality: `arrays` share a leading axis (set models: {"set", "mask"?, "global", ...}; CLIP:
    {"global"}; Flow-CLIP heads: the frozen base's features); `texts` are the caption strings when known."""

    modality: str
    arrays: dict
    texts: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return int(np.shape(next(iter(self.arrays.values())))[0])

    def __getitem__(self, rows) -> "Embeddings":
        rows = np.arange(len(self))[rows]
        rows = np.atleast_1d(rows)
        texts = None if self.texts is None else tuple(self.texts[int(i)] for i in rows)
        return Embeddings(self.modality, {k: np.asarray(v)[rows] for k, v in self.arrays.items()}, texts)


class Hits(NamedTuple):
    indices: np.ndarray  # int [k], rows of the gallery, best first
    scores: np.ndarray  # float32 [k]
    texts: list[str] | None  # the captions of a text gallery whose strings are known


def resolve_export(path: str, params: str | None = None) -> str:
    """The export directory `load` reads: `path` itself when it holds export.json, else `path/export` (params None
    or 'final') or `path/export_best` ('best'). Errors name the missing file and what to do."""
    if params not in (None, "final", "best"):
        raise ValueError(f"params must be 'final' or 'best', got {params!r}")
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path} not found: pass a training workdir (holding export/) or an export directory")
    if os.path.isfile(os.path.join(path, "export.json")):
        name = os.path.basename(path)
        if params is not None and name in EXPORTS and (name == "export_best") != (params == "best"):
            raise ValueError(f"{path} is the {name}/ export itself; params={params!r} asks for the other one (pass "
                             f"the workdir, or that directory)")
        return path
    name = "export_best" if params == "best" else "export"
    export = os.path.join(path, name)
    if not os.path.isfile(os.path.join(export, "export.json")):
        if os.path.isdir(os.path.join(path, "checkpoints")) or os.path.isfile(os.path.join(path, "config.json")):
            what = ("the run has not finished (its last step writes export/): resume it with train.py"
                    if name == "export" else "the run validated no best model (config.train.eval_every = 0?)")
        else:
            what = "the directory holds neither export.json (an export) nor export/ (a training workdir)"
        raise FileNotFoundError(f"{os.path.join(export, 'export.json')} not found: {what}")
    return export


def load(path: str, params: str | None = None, *, hf_clip_dir: str | None = None) -> "Retriever":
    """A `Retriever` for the export at `path` (`resolve_export`): a training workdir with `params` 'final' (default)
    or 'best', or an export directory copied anywhere on its own. `hf_clip_dir`: for a Flow-CLIP head trained on a
    Hugging Face CLIP's features, that CLIP's directory on this machine (default: the one export.json names)."""
    from mmjax.retriever.models import build_backend
    export = resolve_export(path, params)
    variables, info = read_export(export)
    return Retriever(build_backend(export, variables, info, hf_clip_dir=hf_clip_dir), info, export)


class Retriever:
    """A trained run's encoders and inference score (module docstring)."""

    def __init__(self, backend, info: dict, path: str):
        self.backend, self.info, self.path = backend, info, path
        self.task = info.get("task")
        self.tokenizer = backend.tokenizer
        self.max_len = int(backend.tokenizer.max_len)
        self.score_name = backend.score_name
        self._gallery: dict[str, Embeddings] = {}

    def __repr__(self) -> str:
        return (f"Retriever({self.task}, score {self.score_name!r}, step {self.info.get('step')}, "
                f"max_len {self.max_len}, {self.path})")

    # ---- embedding ---------------------------------------------------------------------------------------------
    def embed_texts(self, texts: Sequence[str]) -> Embeddings:
        if isinstance(texts, str):
            raise TypeError("embed_texts takes a list of captions, got one str (wrap it in a list)")
        texts = [str(t) for t in texts]
        if not texts:
            raise ValueError("embed_texts: no captions given")
        enc = self.tokenizer.encode(texts)
        return Embeddings("text", self.backend.embed_texts(enc.ids, enc.attention_mask), tuple(texts))

    def embed_images(self, images, mask=None) -> Embeddings:
        inputs = self.backend.image_inputs(images, mask)
        if len(inputs[0]) == 0:
            raise ValueError("embed_images: no images given")
        return Embeddings("image", self.backend.embed_images(inputs))

    def _as(self, modality: str, x) -> Embeddings:
        if isinstance(x, Embeddings):
            if x.modality != modality:
                raise ValueError(f"expected {modality} embeddings, got {x.modality} embeddings")
            return x
        if modality == "text":
            return self.embed_texts([x] if isinstance(x, str) else x)
        return self.embed_images(x)

    # ---- scoring and retrieval -----------------------------------------------------------------------------
    def score(self, images, texts) -> np.ndarray:
        """float32 [n_images, n_texts] in the run's inference score; embeddings, or raw inputs embedded here."""
        return np.asarray(self.backend.score(self._as("image", images).arrays, self._as("text", texts).arrays),
                          np.float32)

    def index(self, *, images=None, texts=None) -> "Retriever":
        """Remembers the gallery `retrieve` searches when it is given none (embeddings or raw inputs)."""
        if images is not None:
            self._gallery["image"] = self._as("image", images)
        if texts is not None:
            self._gallery["text"] = self._as("text", texts)
        return self

    def _gallery_of(self, modality: str, given) -> Embeddings:
        if given is not None:
            return self._as(modality, given)
        if modality not in self._gallery:
            raise ValueError(f"no {modality} gallery to search: pass {modality}s=... or call index({modality}s=...)")
        return self._gallery[modality]

    def retrieve(self, query, k: int = 5, *, images=None, texts=None) -> Hits:
        """The top-k of the other modality's gallery for one query (module docstring); k is capped at its size."""
        if isinstance(query, (int, np.integer)):
            query = self._gallery_of("image", images)[int(query)]
        elif isinstance(query, str):
            query = self._as("text", query)
        elif not isinstance(query, Embeddings):
            raise TypeError(f"retrieve: query must be a caption (str), an image index (int) or Embeddings, got "
                            f"{type(query).__name__}")
        if len(query) != 1:
            raise ValueError(f"retrieve takes one query; got {len(query)} rows (use score() for many)")
        if query.modality == "text":
            gallery = self._gallery_of("image", images)
            scores = self.score(gallery, query)[:, 0]
        else:
            gallery = self._gallery_of("text", texts)
            scores = self.score(query, gallery)[0]
        order = np.argsort(-scores, kind="stable")[:max(1, int(k))]
        texts_out = None if gallery.texts is None else [gallery.texts[int(i)] for i in order]
        return Hits(order, scores[order], texts_out)
