"""Losses for set-based image–text matching — `mmjax.losses` (pure functions; equations in each module).

Ranking (`ranking.py`), over scores S[N_images, N_captions] and `caption_image[N_captions]`:
  - `triplet_loss(scores, caption_image, *, margin, hard_negative='max'|'all', reduction, image_ids, image_valid,
    caption_valid) -> (loss, {"i2t", "t2i"})` — hardest-negative triplet and the VSE0 all-negative warm-up form.
  - `infonce_loss(scores, caption_image, *, temperature, ...) -> (loss, {"i2t", "t2i"})` — symmetric multi-positive.
  - `positive_mask(caption_image, num_images, image_ids=None) -> bool[N_i, N_t]`.
Set regularisers (`regularisers.py`), over sets [N, K, D] and optional masks [N, K]:
  - `div_uniformity(residuals, mask)` (Set Div), `div_gram(residuals, mask)` (PVSE),
  - `gd_loss(elements, global_embedding, mask, *, delta, shape, scale, stop_grad_global)` (MaxMatch GD),
  - `isd_loss(elements, mask, *, delta, shape, scale)` (MaxMatch ISD), `phi(x, shape, scale)`.
Distribution matching (`mmd.py`): `mmd_loss(x, y, *, gamma, x_mask, y_mask)`.
Objective (`objective.py`): `maxmatch_objective(image, text, caption_image, cfg, *, warmup, ...) -> (loss, metrics)`
and `maxmatch_loss_config()` with the project defaults.
"""

from mmjax.losses.mmd import mmd_loss
from mmjax.losses.objective import maxmatch_loss_config, maxmatch_objective, similarity_options
from mmjax.losses.ranking import infonce_loss, positive_mask, triplet_loss
from mmjax.losses.regularisers import div_gram, div_uniformity, gd_loss, isd_loss, phi

__all__ = ["triplet_loss", "infonce_loss", "positive_mask", "div_uniformity", "div_gram", "gd_loss", "isd_loss",
           "phi", "mmd_loss", "maxmatch_objective", "maxmatch_loss_config", "similarity_options"]
