"""ShapesWorld evaluation suites (docs/design.md#shapesworld-suites) as `CompositionalRecord`s plus the retrieval suite.

Compositional tasks (gold index 0, strict ties — the evaluator applies the policy):
    binding            [pos, swap_att]  P/R captions; subgroup = caption type 'P' | 'R'
    binding_swap_obj   [pos, swap_obj]  R captions
    binding_swap_size  [pos, swap_size]
    relation           [pos, rel_flip]  R captions (main)
    relation_rel_swap  [pos, rel_swap]
    order              [pos, order_1..4] captions with all four perturbations (chance 20%)
    replace_att        [pos, replace_att]
    replace_obj        [pos, replace_obj]
`image` / `image_id` are the str image id; `meta` holds `image_index` (row in the split arrays), `caption_index`,
`caption_type` ('O'|'P'|'R'), `unseen` (caption mentions a held-out pair; report overall / seen / unseen) and the
negative's `neg_type`. The Real / Shuffle / Fixed image-replacement controls are applied by the evaluator on
`image_id` (docs/design.md#image-replacement-controls).
"""

from __future__ import annotations

import numpy as np

from mmjax.data.records import CompositionalRecord
from mmjax.data.shapesworld.config import NEG_TYPE_ID, TYPE_O, TYPE_P, TYPE_R

TYPE_NAMES = ("O", "P", "R")
PAIR_TASKS = (
    ("binding", "swap_att"), ("binding_swap_obj", "swap_obj"), ("binding_swap_size", "swap_size"),
    ("relation", "rel_flip"), ("relation_rel_swap", "rel_swap"),
    ("replace_att", "replace_att"), ("replace_obj", "replace_obj"),
)
ORDER_TYPES = tuple(NEG_TYPE_ID[f"order_{k}"] for k in (1, 2, 3, 4))
# Means over suites the Flow-CLIP claims read (the compositional evaluator reports them as "means"): the stand-in for
# the paper's five-task binding mean (attribute-binding swaps), and for ARO's four tasks (relation, attribution, order).
SUITE_MEANS = {"binding_mean": ("binding", "binding_swap_obj", "binding_swap_size"),
               "aro_mean": ("relation", "binding", "order")}


def build_suites(data: dict) -> dict[str, list[CompositionalRecord]]:
    """Compositional suites of one generated split (`generate(...)` / `ShapesWorld.arrays(...)` output)."""
    suites: dict[str, list[CompositionalRecord]] = {name: [] for name, _ in PAIR_TASKS}
    suites["order"] = []
    table, neg_text = data["neg_table"], data["neg_text"]
    for i, caps in enumerate(data["captions"]):
        image = str(int(data["image_ids"][i]))
        for k, pos in enumerate(caps):
            typ = int(data["caption_meaning"][i, k, 0])
            meta = {"image_index": i, "caption_index": k, "caption_type": TYPE_NAMES[typ],
                    "unseen": bool(data["caption_unseen"][i, k])}
            for task, neg_name in PAIR_TASKS:
                j = table[i, k, NEG_TYPE_ID[neg_name]]
                if j >= 0:
                    suites[task].append(CompositionalRecord(
                        image=image, captions=(pos, neg_text[j]), correct=0, task=task,
                        subgroup=TYPE_NAMES[typ] if task == "binding" else None, image_id=image,
                        meta={**meta, "neg_type": neg_name}))
            order = table[i, k, list(ORDER_TYPES)]
            if np.all(order >= 0):
                suites["order"].append(CompositionalRecord(
                    image=image, captions=(pos, *(neg_text[j] for j in order)), correct=0, task="order",
                    image_id=image, meta={**meta, "neg_type": "order"}))
    return suites


def retrieval_suite(data: dict) -> dict:
    """COCO-style retrieval: captions [N·5], caption_image [N·5], and both ground truths as bool [N·5, N]:
    `source` (only the generating image) and `semantic` (every image on which the caption is true)."""
    n = len(data["captions"])
    captions = [c for caps in data["captions"] for c in caps]
    caption_image = np.repeat(np.arange(n), len(data["captions"][0]) if n else 0)
    source = np.zeros((len(captions), n), bool)
    source[np.arange(len(captions)), caption_image] = True
    semantic = semantic_positives(data["caption_meaning"].reshape(-1, data["caption_meaning"].shape[-1]), data)
    return {"captions": captions, "caption_image": caption_image, "image_ids": data["image_ids"],
            "source": source, "semantic": semantic}


def retrieval_positives(data: dict) -> np.ndarray:
    """The semantic retrieval ground truth of a split, bool [N images, N·5 captions] (caption n = image n // 5's
    reading n % 5): True where the caption is true of the image (`mmjax.evaluation.retrieval`, `positives=`)."""
    meanings = data["caption_meaning"]
    return semantic_positives(meanings.reshape(-1, meanings.shape[-1]), data).T


SCENE_KEYS = ("obj_colour", "obj_shape", "obj_size", "obj_row", "obj_col")


def pair_truth(data: dict, caption_rows: np.ndarray, image_rows: np.ndarray) -> np.ndarray:
    """bool [len(image_rows), len(caption_rows)·C]: whether reading c of example caption_rows[k] (column k·C + c, a
    training batch's caption layout) is true of the scene of example image_rows[i]. The training pipeline's
    `caption_true` (`mmjax.data.pipeline`; used by `loss.false_negatives='ignore'`)."""
    meanings = data["caption_meaning"][caption_rows]
    scenes = {k: data[k][image_rows] for k in SCENE_KEYS}
    return semantic_positives(meanings.reshape(-1, meanings.shape[-1]), scenes).T


def semantic_positives(meanings: np.ndarray, data: dict) -> np.ndarray:
    """truth(meaning, scene_j) for every meaning and every image of `data`, vectorised over images: bool [M, N]."""
    colour, shape, size = data["obj_colour"], data["obj_shape"], data["obj_size"]  # [N, O], −1 padded
    row, col = data["obj_row"], data["obj_col"]
    out = np.zeros((len(meanings), colour.shape[0]), bool)
    for q, m in enumerate(meanings):
        typ, tpl, c1, s1, z1, c2, s2, z2, rel, cell = (int(v) for v in m)
        a = (colour == c1) & (shape == s1) & ((size == z1) | (z1 < 0))  # [N, O]
        if typ == TYPE_O:
            if tpl == 2:
                a &= row * 3 + col == cell
            out[q] = a.any(axis=1)
            continue
        b = (colour == c2) & (shape == s2) & ((size == z2) | (z2 < 0))
        pair = a[:, :, None] & b[:, None, :]
        pair &= ~np.eye(a.shape[1], dtype=bool)[None]
        if typ == TYPE_R:
            ra, rb = (row[:, :, None], row[:, None, :]) if rel in (2, 3) else (col[:, :, None], col[:, None, :])
            pair &= (ra < rb) if rel in (0, 2) else (ra > rb)
        elif typ != TYPE_P:
            raise ValueError(f"meaning {q} has type {typ}; expected 0, 1 or 2")
        out[q] = pair.any(axis=(1, 2))
    return out
