"""Two-tower set retrieval model: an image tower and a text tower, either optional.

    out = model.apply(variables, images, image_mask, captions, caption_mask, train=False)
    out['image'] = {'set': [B,K,D], 'residual': [B,K,D] | None, 'global': ĝ [B,D], 'mask': [B,K], 'attention': …}
    out['text']  = the same for the cB captions

Evaluators embed one modality at a time:

    model.apply(variables, feats, mask, method='embed_images')
    model.apply(variables, ids, mask, method='embed_captions')

Training (BatchNorm in the region/grid towers, dropout everywhere):

    out, updates = model.apply(variables, ..., train=True, mutable=['batch_stats'], rngs={'dropout': key})

The single-vector VSE∞-style baseline is the same model with `set_head=None` in both towers (K = 1, s = ĝ) and
usually `pool='gpo'` in the image tower. The set similarity and losses live in `mmjax.similarity` / `mmjax.losses`.
"""

from __future__ import annotations

import flax.linen as nn


class SetRetrievalModel(nn.Module):
    """Attributes: image_tower (`RegionTower`, `GridTower`, … or None), text_tower (`BiGRUTextTower`, `BertTextTower`,
    … or None). Tower call signature: `tower(x, mask, train=...)` returning the dict of `mmjax.models.towers`."""

    image_tower: nn.Module | None = None
    text_tower: nn.Module | None = None

    def __call__(self, images=None, image_mask=None, captions=None, caption_mask=None, train: bool = False):
        if images is None and captions is None:
            raise ValueError("pass images and/or captions")
        out = {}
        if images is not None:
            out["image"] = self.embed_images(images, image_mask, train=train)
        if captions is not None:
            out["text"] = self.embed_captions(captions, caption_mask, train=train)
        return out

    def embed_images(self, images, image_mask=None, train: bool = False) -> dict:
        """Image sets from region features [B,R,F] + mask [B,R], or pixels / grid maps (mask None)."""
        if self.image_tower is None:
            raise ValueError("this SetRetrievalModel has no image_tower")
        return self.image_tower(images, image_mask, train=train)

    def embed_captions(self, captions, caption_mask, train: bool = False) -> dict:
        """Caption sets from token ids [N,T] + mask [N,T]."""
        if self.text_tower is None:
            raise ValueError("this SetRetrievalModel has no text_tower")
        return self.text_tower(captions, caption_mask, train=train)
