"""Optional image loading for records (readers themselves only check that files exist)."""

from __future__ import annotations

from mmjax.data.records import BBox, CompositionalRecord


def open_image(image: str | CompositionalRecord, bbox: BBox | None = None):
    """Open an image as RGB with Pillow and crop it to ``bbox = (x, y, w, h)``.

    A record supplies both its path and its bbox. The crop box is ``(x, y, x + w, y + h)``, exactly ARO's
    ``Image.crop`` call (Pillow fills any part outside the image with black, as there).
    """
    from PIL import Image  # noqa: PLC0415  (Pillow is only needed when images are actually decoded)

    if isinstance(image, CompositionalRecord):
        image, bbox = image.image, image.bbox if bbox is None else bbox
    with Image.open(image) as im:
        im = im.convert("RGB")
    if bbox is not None:
        x, y, w, h = bbox
        im = im.crop((x, y, x + w, y + h))
    return im
