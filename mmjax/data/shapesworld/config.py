"""ShapesWorld configuration (docs/design.md#shapesworld-config) and the fixed grammar vocabulary.

Every number of the data set is a field of `ShapesWorldConfig`; presets (`'default'`, `'tiny'`) only change
`split_sizes`. The word lists are part of the grammar (§4) and fixed: changing them changes the tokenizer
vocabulary (§7) and the meaning-vector ids, so they are module constants, not config fields.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

SHAPES = ("circle", "square", "triangle", "diamond", "cross", "star")
COLOURS = ("red", "green", "blue", "yellow", "purple", "cyan", "orange", "gray")
SIZES = ("small", "large")
# Relation ids are the index in this tuple; see `scene.relation_holds`.
RELATIONS = ("to the left of", "to the right of", "above", "below")
ROW_WORDS = ("top", "middle", "bottom")
COL_WORDS = ("left", "center", "right")

SPLIT_CODES = {"train": 0, "val": 1, "test": 2}
# Seed-sequence key of the dataset-level constants (§6): SeedSequence([seed, 9, 0]).
CONSTANTS_KEY = 9

# Caption types / negative types (ids as in §4 and §5).
TYPE_O, TYPE_P, TYPE_R = 0, 1, 2
TEMPLATES_PER_TYPE = (3, 2, 3)
NEG_TYPES = (
    "swap_att", "swap_size", "swap_obj", "rel_flip", "rel_swap", "replace_att", "replace_obj",
    "order_1", "order_2", "order_3", "order_4",
)
NEG_TYPE_ID = {name: i for i, name in enumerate(NEG_TYPES)}
MEANING_WIDTH = 10

DEFAULT_HELDOUT = (
    ("red", "circle"), ("green", "square"), ("blue", "triangle"), ("yellow", "diamond"),
    ("purple", "cross"), ("cyan", "star"), ("orange", "circle"), ("gray", "square"),
)
# The language prior of `typical_colour_prob` > 0: each shape's typical colour (no held-out pair among them).
TYPICAL_COLOUR = {"circle": "blue", "square": "yellow", "triangle": "purple", "diamond": "cyan", "cross": "orange",
                  "star": "gray"}
DEFAULT_TRAIN_NEG_TYPES = (
    ("swap_att", 0.3), ("swap_obj", 0.1), ("rel_flip", 0.2), ("replace_att", 0.2), ("replace_obj", 0.2),
)
ORDER_TRAIN_NEG_TYPES = DEFAULT_TRAIN_NEG_TYPES + tuple((f"order_{k}", 0.1) for k in (1, 2, 3, 4))
# Named language priors (`language_prior(...)`): ShapesWorld overrides that give negatives a cue a text-only model can
# learn. 'typical': skewed colour–shape co-occurrence (p = 0.8); 'order': word-order shuffles allowed as Flow-CLIP
# training negatives (weight 0.4 of 1.4: ≈ 29 % of the records that have one; an ungrammatical caption is never true).
LANGUAGE_PRIORS = {
    "none": {},
    "typical": {"typical_colour_prob": 0.8},
    "order": {"train_negative_types": ORDER_TRAIN_NEG_TYPES},
    "typical_order": {"typical_colour_prob": 0.8, "train_negative_types": ORDER_TRAIN_NEG_TYPES},
}


def language_prior(name: str) -> dict:
    """The ShapesWorldConfig overrides of a named language prior (LANGUAGE_PRIORS)."""
    if name not in LANGUAGE_PRIORS:
        raise ValueError(f"language prior must be one of {sorted(LANGUAGE_PRIORS)}, got {name!r}")
    return dict(LANGUAGE_PRIORS[name])


PRESET_SPLIT_SIZES = {
    "default": (("train", 20_000), ("val", 1_000), ("test", 1_000)),
    "tiny": (("train", 512), ("val", 64), ("test", 64)),
}


@dataclasses.dataclass(frozen=True)
class ShapesWorldConfig:
    """All ShapesWorld fields of docs/design.md#shapesworld-config (defaults are the project's)."""

    seed: int = 0
    grid: int = 3
    min_objects: int = 2
    max_objects: int = 4
    heldout_pairs: tuple[tuple[str, str], ...] = DEFAULT_HELDOUT  # (colour, shape)
    p_unseen: float = 0.5
    mode: str = "regions"  # 'regions' | 'pixels'
    image_size: int = 64
    num_regions: int = 10
    region_dim: int = 256
    variable_regions: bool = False
    captions_per_image: int = 5
    p_size_word: float = 0.5
    order_shuffles: int = 4
    order_retries: int = 10
    caption_type_weights: tuple[float, float, float] = (0.3, 0.3, 0.4)  # O, P, R for slots after the first three
    train_negative_types: tuple[tuple[str, float], ...] = DEFAULT_TRAIN_NEG_TYPES
    # A language prior (0 = none): an object takes its shape's typical colour (TYPICAL_COLOUR) with this probability,
    # else a uniform pair, in every split — so "a blue circle" is likelier true than "a red circle" before any image
    # is seen, and an attribute swap usually yields an atypical pair (see LANGUAGE_PRIORS).
    typical_colour_prob: float = 0.0
    exclude_heldout_in_train_negatives: bool = True
    split_sizes: tuple[tuple[str, int], ...] = PRESET_SPLIT_SIZES["default"]
    preset: str = "default"
    max_len: int = 20
    # Regions mode (§3.2).
    beta_box: float = 0.5
    region_noise: float = 0.3
    partial_gamma: tuple[float, float] = (0.3, 0.7)
    partial_shift: float = 0.1
    partial_scale: tuple[float, float] = (0.6, 1.2)
    background_box_size: tuple[float, float] = (0.1, 0.5)
    # Geometry shared by both modes (§3.1), in cell units.
    large_side: float = 0.80
    small_side: float = 0.50
    centre_jitter: float = 0.08
    # Pixels mode (§3.1).
    supersample: int = 4
    background_level: tuple[int, int] = (190, 235)
    background_offset: int = 15
    background_ramp: float = 15.0
    colour_jitter: int = 12
    pixel_noise_sigma: float = 3.0

    def __post_init__(self):
        if self.mode not in ("regions", "pixels"):
            raise ValueError(f"shapesworld.mode must be 'regions' or 'pixels', got {self.mode!r}")
        if self.grid != 3:
            # The position words (top/middle/bottom, left/center/right) of template O3 name exactly 3 cells per axis.
            raise ValueError("shapesworld.grid must be 3 (the O3 position vocabulary has 3 words per axis), "
                             f"got {self.grid}")
        if not 2 <= self.min_objects <= self.max_objects <= self.grid * self.grid:
            raise ValueError(
                f"shapesworld.min_objects/max_objects must satisfy 2 <= min <= max <= grid^2, got "
                f"{self.min_objects}, {self.max_objects}")
        if self.captions_per_image != 5:
            # The caption chooser guarantees >= 5 distinct readings only for 2-object scenes (§4).
            raise ValueError(f"shapesworld.captions_per_image must be 5, got {self.captions_per_image}")
        if self.order_shuffles != 4:
            raise ValueError("shapesworld.order_shuffles must be 4 (ARO's four perturbations), "
                             f"got {self.order_shuffles}")
        for colour, shape in self.heldout_pairs:
            if colour not in COLOURS or shape not in SHAPES:
                raise ValueError(f"shapesworld.heldout_pairs: unknown pair ({colour!r}, {shape!r})")
        if not 0.0 <= self.typical_colour_prob <= 1.0:
            raise ValueError(f"shapesworld.typical_colour_prob must be in [0, 1], got {self.typical_colour_prob}")
        for name, weight in self.train_negative_types:
            # order types are off by default (the spec's weights) and on in the 'order' language priors
            if name not in NEG_TYPE_ID or weight < 0:
                raise ValueError(f"shapesworld.train_negative_types: invalid entry ({name!r}, {weight})")
        if self.num_regions < self.max_objects:
            raise ValueError(f"shapesworld.num_regions ({self.num_regions}) < max_objects ({self.max_objects})")
        if self.seed < 0:
            raise ValueError(f"shapesworld.seed must be >= 0, got {self.seed}")

    @classmethod
    def from_preset(cls, preset: str = "default", **overrides) -> "ShapesWorldConfig":
        if preset not in PRESET_SPLIT_SIZES:
            raise ValueError(f"preset must be one of {sorted(PRESET_SPLIT_SIZES)}, got {preset!r}")
        fields = dict(split_sizes=PRESET_SPLIT_SIZES[preset], preset=preset)
        fields.update(overrides)
        return cls(**fields)

    def split_size(self, split: str) -> int:
        sizes: Mapping[str, int] = dict(self.split_sizes)
        if split not in sizes:
            raise ValueError(f"split must be one of {sorted(sizes)}, got {split!r}")
        return sizes[split]

    @property
    def heldout_ids(self) -> frozenset[tuple[int, int]]:
        """Held-out pairs as (colour_id, shape_id)."""
        return frozenset((COLOURS.index(c), SHAPES.index(s)) for c, s in self.heldout_pairs)


def split_code(split: str) -> int:
    if split not in SPLIT_CODES:
        raise ValueError(f"split must be one of {sorted(SPLIT_CODES)}, got {split!r}")
    return SPLIT_CODES[split]


def vocabulary_words() -> list[str]:
    """The sorted grammar words (33), i.e. the word tokenizer's vocabulary after the 5 specials (§7)."""
    words = {"a", "an", "and", "the", "there", "is", "in"}
    for phrase in RELATIONS + ROW_WORDS + COL_WORDS + SIZES + COLOURS + SHAPES:
        words.update(phrase.split())
    return sorted(words)
