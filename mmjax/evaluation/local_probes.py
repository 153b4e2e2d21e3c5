"""Local-feature probes of a frozen base on ShapesWorld (docs/design.md#local-probes): what its image tokens say about
the object under them, and whether a colour or shape word's nearest token lies on the object it names.

    shapesworld_local_probes(encode_images, encode_texts, train, test, token_objects) -> {
        "probes":    {colour | shape | size | cell | on_object: {"accuracy", "majority", "shuffled", ...}},
        "grounding": {"accuracy", "chance_uniform", "chance_area", "n"},
        "tokens_per_image": T}

`encode_images(data, indices)` returns the base's raw local features of those images of a generated split `data` as
{"patches": [n, T, d]} (the Flow-CLIP feature convention: ViT patch states or region outputs); `encode_texts(strings)` returns {"tokens":
[n, L, d], "valid": [n, L]}; `token_objects(data)` maps a generated split to the object under each image token, int
[N, T] (−1: none; `mmjax.data.shapesworld.local_labels`). Probes are fitted on tokens of the first
`max_train_images` training images and scored on tokens of the first `max_test_images` test images. "shuffled" is
the same probe fitted on the training labels permuted across tokens: a control that must sit at the majority rate
(it measures what the probe itself can make of nothing).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mmjax.data.shapesworld.local_labels import ATTRIBUTES, named_objects, token_labels
from mmjax.evaluation.probes import grounding_accuracy, linear_probe


def _tokens(encode_images, data: dict, n: int) -> np.ndarray:
    return np.asarray(encode_images(data, np.arange(n))["patches"], np.float32)


def shapesworld_local_probes(encode_images: Callable, encode_texts: Callable, train: dict, test: dict,
                             token_objects: Callable[[dict], np.ndarray], *, max_train_images: int = 2000,
                             max_test_images: int = 1000, ridge: float = 1e-3, seed: int = 0) -> dict:
    n_tr, n_te = min(max_train_images, len(train["captions"])), min(max_test_images, len(test["captions"]))
    x_tr, x_te = _tokens(encode_images, train, n_tr), _tokens(encode_images, test, n_te)
    obj_tr, obj_te = token_objects(train)[:n_tr], token_objects(test)[:n_te]
    if obj_tr.shape != x_tr.shape[:2] or obj_te.shape != x_te.shape[:2]:
        raise ValueError(f"token_objects gives {obj_tr.shape} / {obj_te.shape} for tokens {x_tr.shape[:2]} / "
                         f"{x_te.shape[:2]}: the base's tokens and the token→object map disagree")
    lab_tr, lab_te = token_labels(train, obj_tr), token_labels(test, obj_te)
    lab_tr["on_object"], lab_te["on_object"] = (obj_tr >= 0).astype(int), (obj_te >= 0).astype(int)
    d = x_tr.shape[-1]
    rng = np.random.default_rng(seed)
    probes = {}
    for name in ATTRIBUTES + ("on_object",):
        keep_tr = lab_tr[name].reshape(-1) >= 0
        keep_te = lab_te[name].reshape(-1) >= 0
        xa, ya = x_tr.reshape(-1, d)[keep_tr], lab_tr[name].reshape(-1)[keep_tr]
        xb, yb = x_te.reshape(-1, d)[keep_te], lab_te[name].reshape(-1)[keep_te]
        result = linear_probe(xa, ya, xb, yb, ridge=ridge)
        result["shuffled"] = linear_probe(xa, rng.permutation(ya), xb, yb, ridge=ridge)["accuracy"]
        probes[name] = result
    return {"probes": probes, "grounding": _grounding(encode_texts, x_te, obj_te, test, n_te),
            "tokens_per_image": int(x_tr.shape[1]), "images": {"train": n_tr, "test": n_te}}


def _grounding(encode_texts, x_te, obj_te, test: dict, n_te: int) -> dict:
    words = [(i, k, pos, objs) for i, k, pos, objs in named_objects(test) if i < n_te]
    if not words:
        return {"accuracy": float("nan"), "chance_uniform": float("nan"), "chance_area": float("nan"), "n": 0}
    captions = sorted({(i, k) for i, k, _, _ in words})
    row = {c: j for j, c in enumerate(captions)}
    enc = encode_texts([test["captions"][i][k] for i, k in captions])
    text_tokens = np.asarray(enc["tokens"], np.float32)
    keep = [w for w in words if w[2] < text_tokens.shape[1]]  # words past the cached token length are not scored
    vectors = np.stack([text_tokens[row[(i, k)], pos] for i, k, pos, _ in keep])
    images = np.stack([x_te[i] for i, _, _, _ in keep])
    on_target = np.stack([np.isin(obj_te[i], objs) for i, _, _, objs in keep])
    return grounding_accuracy(vectors, images, on_target)
