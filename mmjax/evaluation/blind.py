"""The blind baseline: a text-only model of which caption is the true one (docs/design.md#blind-baseline).

A compositional record asks which of its captions describes the image. A model that never sees the image can still
beat chance when the negatives carry a cue of their own (an ungrammatical word order, an atypical colour for a
shape). The blind baseline measures that cue on the features a head reads: a pairwise logistic (Bradley–Terry)
model on frozen text features f, fitted on the training (positive, negative) caption pairs,

    P(a is the true caption, not b) = σ(wᵀ(f(a) − f(b))),     score(caption) = wᵀ f(caption),

maximising the mean log-likelihood minus (λ/2)‖w‖² by Newton's method (the objective is strictly convex, so the
optimum is unique; features are divided by the pair differences' root-mean-square per dimension first, so λ reads
the same for any feature scale). A share `holdout` of the pairs is kept out of the fit and its pair accuracy
reported beside the training one: a blind model that only memorised its pairs shows it there.

Under the image-replacement controls the blind model scores the same captions whatever the image, so its accuracy
is the level a head that ignores the image would reach under Shuffle and Fixed: CIMR's claim (the controls move
towards chance) is only testable where this column sits above chance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class BlindModel:
    w: np.ndarray            # [d] weights on the raw (unscaled) features
    l2: float
    n_train: int
    n_holdout: int
    train_accuracy: float    # % of training pairs with score(pos) > score(neg)
    holdout_accuracy: float  # the same on the held-out pairs (nan when there are none)

    def score(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(features, np.float64) @ self.w

    def summary(self) -> dict:
        return {"l2": self.l2, "n_train": self.n_train, "n_holdout": self.n_holdout,
                "train_pair_accuracy": self.train_accuracy, "holdout_pair_accuracy": self.holdout_accuracy}


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free


def _pair_accuracy(w, x) -> float:
    return float(100.0 * np.mean(x @ w > 0)) if len(x) else float("nan")


def fit_blind(pos: np.ndarray, neg: np.ndarray, *, l2: float = 1e-3, holdout: float = 0.2, seed: int = 0,
              max_iter: int = 50, tol: float = 1e-10) -> BlindModel:
    """Fits the pairwise logistic model (module docstring) on text features pos[i] (true) vs neg[i] (false)."""
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    if pos.ndim != 2 or pos.shape != neg.shape:
        raise ValueError(f"blind baseline: positive and negative features must both be [n, d], got {pos.shape} and "
                         f"{neg.shape}")
    if not (np.all(np.isfinite(pos)) and np.all(np.isfinite(neg))):
        raise ValueError("blind baseline: non-finite text features")
    if not 0.0 <= holdout < 1.0 or l2 <= 0:
        raise ValueError(f"blind baseline: holdout must be in [0, 1) and l2 > 0, got {holdout}, {l2}")
    n = len(pos)
    order = np.random.default_rng(seed).permutation(n)
    n_hold = int(round(holdout * n))
    held, train = order[:n_hold], order[n_hold:]
    if len(train) < 2:
        raise ValueError(f"blind baseline: {len(train)} training pair(s); at least 2 are needed")
    diff = pos - neg
    scale = np.sqrt(np.mean(diff[train] ** 2, axis=0))
    scale = np.where(scale > 0, scale, 1.0)
    x = diff[train] / scale
    d = x.shape[1]
    v = np.zeros(d)
    for _ in range(max_iter):
        p = _sigmoid(x @ v)  # P(pos beats neg) under the current weights
        grad = -x.T @ (1.0 - p) / len(x) + l2 * v
        hess = (x * (p * (1.0 - p))[:, None]).T @ x / len(x) + l2 * np.eye(d)
        step = np.linalg.solve(hess, grad)
        v -= step
        if float(step @ step) < tol:
            break
    w = v / scale
    return BlindModel(w=w, l2=l2, n_train=len(train), n_holdout=len(held),
                      train_accuracy=_pair_accuracy(w, diff[train]), holdout_accuracy=_pair_accuracy(w, diff[held]))


class BlindScorer:
    """A compositional-record scorer `(image_sources, captions) -> scores` that reads the captions only:
    `model.score(encode_texts(captions))`, each distinct caption encoded once."""

    def __init__(self, model: BlindModel, encode_texts: Callable[[list], np.ndarray]):
        self.model, self.encode_texts = model, encode_texts
        self.cache: dict = {}

    def __call__(self, image_sources: Sequence, captions: Sequence[str]) -> np.ndarray:
        del image_sources  # blind by construction
        todo = list(dict.fromkeys(c for c in captions if c not in self.cache))
        if todo:
            self.cache.update(zip(todo, self.model.score(np.asarray(self.encode_texts(todo)))))
        return np.asarray([self.cache[c] for c in captions], np.float32)


def fit_blind_on(pairs: Callable[[int], tuple[np.ndarray, np.ndarray]], *, max_pairs: int = 20_000,
                 **fit_kw) -> BlindModel:
    """`fit_blind` on `pairs(max_pairs)`: a context's training pairs as features, at most `max_pairs` of them (the
    first `max_pairs` of a seeded permutation, `subsample`)."""
    if max_pairs < 2:
        raise ValueError(f"blind baseline: max_pairs must be >= 2, got {max_pairs}")
    return fit_blind(*pairs(max_pairs), **fit_kw)


def subsample(n: int, max_pairs: int, seed: int = 0) -> np.ndarray:
    """Indices of the pairs `fit_blind_on` uses: all n in order when n ≤ max_pairs, else a seeded sample."""
    if n <= max_pairs:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[:max_pairs])


def shapesworld_training_pairs(data: dict) -> tuple[list[str], list[str]]:
    """(positive captions, negative captions) of a generated ShapesWorld split: each caption with the typed hard
    negative a Flow-CLIP head trains against (`train_neg_index`), the pairs the heads see."""
    pos, neg = [], []
    for i, caps in enumerate(data["captions"]):
        for j, caption in enumerate(caps):
            k = int(data["train_neg_index"][i, j])
            if k >= 0:
                pos.append(caption)
                neg.append(data["neg_text"][k])
    return pos, neg
