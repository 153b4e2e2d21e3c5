"""What a frozen base's local tokens carry: linear probes and word→token grounding (docs/design.md#local-probes).

Flow-CLIP's local branch can only use evidence the base's local tokens (ViT patches, region outputs) hold. Before a
claim about that branch is tested, these two measurements say whether the evidence is there at all:

- **Linear probe** (`linear_probe`): ridge least squares from token features to one-hot labels,

      W = argmin ‖[X 1] W − Y‖² + λ‖W‖² = ([X 1]ᵀ[X 1] + λ I)⁻¹ [X 1]ᵀ Y,     ŷ = argmax_c ([x 1] W)_c

  fitted on the training tokens (features standardised with the training mean and spread), scored on held-out
  tokens; reported with the majority-class rate of the held-out labels (the accuracy of knowing nothing). A token
  that carries a label is probed far above that rate; a token that does not, at it.
- **Grounding** (`grounding_accuracy`): for a word that names an object (a colour or shape word), is the base's local
  token most similar to it (cosine) one that lies on the named object? Reported with two chance levels: 1/N (N valid
  tokens; a uniform pick) and the fraction of valid tokens lying on the object (a pick that ignores the word but
  favours object tokens by area).

Pure numpy (float64), no JAX: a probe is a small linear solve over host arrays.
"""

from __future__ import annotations

import numpy as np


def _design(x: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    z = (np.asarray(x, np.float64) - mean) / scale
    return np.concatenate([z, np.ones((len(z), 1))], axis=1)


def fit_linear_probe(x: np.ndarray, y: np.ndarray, *, num_classes: int | None = None, ridge: float = 1e-3) -> dict:
    """The probe {"W", "mean", "scale", "classes"} of features x [n, d] and integer labels y [n] (module docstring)."""
    x, y = np.asarray(x, np.float64), np.asarray(y)
    if x.ndim != 2 or y.shape != (len(x),):
        raise ValueError(f"x must be [n, d] and y [n]; got {x.shape} and {y.shape}")
    if len(x) == 0:
        raise ValueError("no training tokens to fit a probe on")
    classes = np.arange(num_classes) if num_classes is not None else np.unique(y)
    index = {int(c): i for i, c in enumerate(classes)}
    if any(int(v) not in index for v in np.unique(y)):
        raise ValueError(f"labels {sorted(set(np.unique(y).tolist()) - set(index))} are not among the classes")
    mean, scale = x.mean(0), x.std(0) + 1e-8
    a = _design(x, mean, scale)
    targets = np.zeros((len(y), len(classes)))
    targets[np.arange(len(y)), [index[int(v)] for v in y]] = 1.0
    gram = a.T @ a + ridge * len(a) * np.eye(a.shape[1])
    w = np.linalg.solve(gram, a.T @ targets)
    return {"W": w, "mean": mean, "scale": scale, "classes": classes}


def predict(probe: dict, x: np.ndarray) -> np.ndarray:
    return probe["classes"][np.argmax(_design(x, probe["mean"], probe["scale"]) @ probe["W"], axis=1)]


def linear_probe(x_train, y_train, x_test, y_test, *, ridge: float = 1e-3) -> dict:
    """{"accuracy", "majority" (the held-out majority-class rate), "n_train", "n_test", "num_classes"} in percent."""
    y_test = np.asarray(y_test)
    classes = np.unique(np.concatenate([np.asarray(y_train), y_test]))
    probe = fit_linear_probe(x_train, y_train, ridge=ridge)
    seen = np.isin(y_test, probe["classes"])
    pred = predict(probe, np.asarray(x_test))
    _, counts = np.unique(y_test, return_counts=True)
    return {"accuracy": 100.0 * float(np.mean(pred == y_test)) if len(y_test) else float("nan"),
            "majority": 100.0 * float(counts.max() / len(y_test)) if len(y_test) else float("nan"),
            "n_train": int(len(y_train)), "n_test": int(len(y_test)), "num_classes": int(len(classes)),
            "unseen_test_labels": int((~seen).sum())}


def grounding_accuracy(words: np.ndarray, tokens: np.ndarray, on_target: np.ndarray,
                       valid: np.ndarray | None = None) -> dict:
    """Words [m, d], each image's local tokens [m, N, d], on_target bool [m, N] (token lies on the object the word
    names), valid bool [m, N] (default all): {"accuracy", "chance_uniform", "chance_area", "n"} in percent."""
    words, tokens, on_target = np.asarray(words, np.float64), np.asarray(tokens, np.float64), np.asarray(on_target)
    valid = np.ones(on_target.shape, bool) if valid is None else np.asarray(valid, bool)
    if tokens.shape[:2] != on_target.shape or words.shape != (tokens.shape[0], tokens.shape[2]):
        raise ValueError(f"words [m, d], tokens [m, N, d] and on_target [m, N] must agree; got {words.shape}, "
                         f"{tokens.shape}, {on_target.shape}")
    keep = (on_target & valid).any(1)  # a word whose object covers no valid token cannot be grounded
    words, tokens, on_target, valid = words[keep], tokens[keep], on_target[keep], valid[keep]
    w = words / np.maximum(np.linalg.norm(words, axis=-1, keepdims=True), 1e-12)
    t = tokens / np.maximum(np.linalg.norm(tokens, axis=-1, keepdims=True), 1e-12)
    cos = np.where(valid, np.einsum("md,mnd->mn", w, t), -np.inf)
    hit = on_target[np.arange(len(cos)), np.argmax(cos, axis=1)]
    n_valid = valid.sum(1)
    return {"accuracy": 100.0 * float(hit.mean()) if len(hit) else float("nan"),
            "chance_uniform": 100.0 * float(np.mean(1.0 / n_valid)) if len(hit) else float("nan"),
            "chance_area": 100.0 * float(np.mean((on_target & valid).sum(1) / n_valid)) if len(hit) else float("nan"),
            "n": int(len(hit)), "dropped": int((~keep).sum())}
