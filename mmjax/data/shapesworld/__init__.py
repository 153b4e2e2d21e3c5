"""ShapesWorld: the embedded synthetic image–text data set (docs/design.md#shapesworld).

`generate(split, *, preset='default'|'tiny', seed, mode='regions'|'pixels', **config_overrides)` returns a dict:

    image_ids        (N,) int64            split_code·10⁷ + index
    images           (N,H,W,3) uint8       pixels mode only
    regions          (N,R,F) float32       regions mode only, with region_boxes (N,R,4) f32, region_mask (N,R) bool,
                                           region_kind (N,R) int32 (0 object, 1 partial, 2 background, −1 padding),
                                           region_object (N,R) int32 (object index or −1)
    captions         list of N lists of 5 str (5 distinct readings per image)
    caption_meaning  (N,5,10) int32        [type, template, c1, s1, z1, c2, s2, z2, rel, cell], −1 = absent
    caption_unseen   (N,5) bool            caption mentions a held-out colour–shape pair
    has_unseen       (N,) bool
    scenes           list of N `Scene`     scene graphs (use with `truth(meaning, scene)`)
    obj_count (N,), obj_shape/obj_colour/obj_size/obj_row/obj_col (N,max_objects) int32 (−1 pad),
    obj_box (N,max_objects,4) f32          the scene graphs as padded arrays
    neg_text         list of M str         every typed hard negative of every caption, flattened
    neg_image, neg_caption, neg_type (M,) int32; neg_meaning (M,10) int32 (−1 rows for order negatives)
    neg_table        (N,5,11) int32        index into neg_text by (image, caption, negative type id), −1 = absent
    train_neg_index  (N,5) int32           index into neg_text of each caption's Flow-CLIP training negative, −1
    config           the `ShapesWorldConfig` used
"""

from mmjax.data.shapesworld.captions import render, truth
from mmjax.data.shapesworld.config import (
    COLOURS, NEG_TYPES, SHAPES, SIZES, ShapesWorldConfig, vocabulary_words)
from mmjax.data.shapesworld.generator import IMAGE_ID_STRIDE, ShapesWorld
from mmjax.data.shapesworld.scene import Scene


def generate(split: str, *, preset: str = "default", seed: int = 0, mode: str = "regions",
             limit: int | None = None, progress: bool = False, **overrides) -> dict:
    """Generate a whole split in memory (see the module docstring for the returned layout)."""
    cfg = ShapesWorldConfig.from_preset(preset, seed=seed, mode=mode, **overrides)
    data = ShapesWorld(cfg).arrays(split, limit=limit, progress=progress)
    data["config"] = cfg
    return data


__all__ = [
    "COLOURS", "IMAGE_ID_STRIDE", "NEG_TYPES", "SHAPES", "SIZES", "Scene", "ShapesWorld", "ShapesWorldConfig",
    "generate", "render", "truth", "vocabulary_words",
]
