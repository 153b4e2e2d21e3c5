"""Zero-shot classification with class-name prompts (docs/design.md#zero-shot, paper Tab. 7).

For C classes and T templates the P = C·T prompts are ordered class-major (prompt c·T + t = template t of class c).
Score-level ensembling (`eval.zeroshot.ensemble = 'score'`, valid for every head because the Flow-CLIP score is not
linear in the text embedding):

    logit[b, c] = (1/T) Σ_t s(image_b, template_t(class_c));   prediction = argmax_c (ties: lowest index)

Top-1 and top-5 accuracy (percent) over the images. The scorer is a matrix function
`score_matrix_fn(images_batch, prompts) -> [B, P]` (cache the prompt embeddings inside it: they are the same for
every batch). Embedding-level ensembling (CLIP's averaged normalised text embedding) is Global-M/CLIP-only; pass
`templates=("{}",)`-style single prompts built by the caller for it.

Images come from the caller (array or list of paths), from a folder `root/<class_name>/*.{jpg,png,...}`
(`load_image_folder`; "_" in folder names becomes a space) or from TFDS when `tensorflow_datasets` is installed
(`load_tfds`, e.g. 'cifar10', 'cifar100', 'imagenet2012' with data prepared locally — nothing is downloaded).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from mmjax.batching import progress

# A subset of the CLIP prompt templates (openai/CLIP notebooks "Prompt_Engineering_for_ImageNet").
DEFAULT_TEMPLATES = ("a photo of a {}.", "a blurry photo of a {}.", "a photo of the large {}.",
                     "a photo of the small {}.", "a bad photo of a {}.", "a good photo of a {}.",
                     "a close-up photo of a {}.", "a low resolution photo of a {}.")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def class_prompts(class_names: Sequence[str], templates: Sequence[str] = DEFAULT_TEMPLATES) -> list[str]:
    return [t.format(c) for c in class_names for t in templates]


def topk_accuracy(logits, labels, ks=(1, 5)) -> dict:
    """Percent of rows whose label is among the k best classes (stable order: ties go to the lower class index)."""
    logits = np.asarray(logits)
    labels = np.asarray(labels)
    order = np.argsort(-logits, axis=1, kind="stable")
    return {f"top{k}": float(100.0 * np.mean(np.any(order[:, :k] == labels[:, None], axis=1)))
            for k in ks if k <= logits.shape[1]}


def zeroshot_classify(score_matrix_fn: Callable, images, labels, class_names: Sequence[str], *,
                      templates: Sequence[str] = DEFAULT_TEMPLATES, batch_size: int = 256,
                      return_logits: bool = False) -> dict:
    """Top-1/top-5 accuracy of score-level-ensembled class prompts (module docstring)."""
    prompts = class_prompts(class_names, templates)
    n_c, n_t = len(class_names), len(templates)
    labels = np.asarray(labels, np.int64)
    n = len(labels)
    logits = np.empty((n, n_c), np.float32)
    bar = progress(n, "[eval] zero-shot", unit="image")
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        s = np.asarray(score_matrix_fn(images[start:stop], prompts), np.float32)
        if s.shape != (stop - start, len(prompts)):
            raise ValueError(f"score_matrix_fn returned {s.shape}, expected {(stop - start, len(prompts))}")
        logits[start:stop] = s.reshape(stop - start, n_c, n_t).mean(axis=-1)
        bar.update(stop - start)
    bar.close()
    out = {"n": n, "classes": n_c, "templates": n_t, "chance_top1": 100.0 / n_c,
           **topk_accuracy(logits, labels)}
    if return_logits:
        out["logits"] = logits
    return out


def load_image_folder(root) -> tuple[list[str], np.ndarray, list[str]]:
    """(image paths, labels, class names) from `root/<class>/<image>`; classes sorted by folder name."""
    folders = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if not folders:
        raise ValueError(f"{root}: no class folders")
    paths, labels = [], []
    for c, name in enumerate(folders):
        for f in sorted(os.listdir(os.path.join(root, name))):
            if f.lower().endswith(IMAGE_EXTENSIONS):
                paths.append(os.path.join(root, name, f))
                labels.append(c)
    return paths, np.asarray(labels, np.int64), [d.replace("_", " ") for d in folders]


def load_tfds(name: str, split: str = "test", *, data_dir=None, image_key: str = "image",
              label_key: str = "label"):
    """(images sequence, labels, class names) from a locally prepared TFDS data set (no download)."""
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:  # optional dependency
        raise RuntimeError("tensorflow_datasets is not installed; use an image folder instead") from e
    builder = tfds.builder(name, data_dir=data_dir)
    source = builder.as_data_source(split=split)
    names = [c.replace("_", " ") for c in builder.info.features[label_key].names]
    labels = np.asarray([source[i][label_key] for i in range(len(source))], np.int64)

    class _Images:
        def __len__(self):
            return len(source)

        def __getitem__(self, s):
            return np.stack([source[i][image_key] for i in range(*s.indices(len(source)))])

    return _Images(), labels, names
