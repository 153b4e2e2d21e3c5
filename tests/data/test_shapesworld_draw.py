"""`mmjax.data.shapesworld.draw`: clean scene pictures and the scene grid.

Oracle: the scene graph itself — every object's box centre must carry that object's base colour (with a small
tolerance for the box-downsampled edges), the background elsewhere; pixels-mode splits return their own pixels.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mmjax.data import shapesworld  # noqa: E402
from mmjax.data.shapesworld.draw import BACKGROUND, caption_block, draw_scene, plot_scenes, scene_image  # noqa: E402
from mmjax.data.shapesworld.render import BASE_RGB  # noqa: E402
from mmjax.data.shapesworld.scene import Scene  # noqa: E402


@pytest.fixture(scope="module")
def regions():
    return shapesworld.generate("train", preset="tiny", limit=6)


def test_draw_scene_places_each_object_in_its_colour(regions):
    size = 96
    for scene in regions["scenes"]:
        img = draw_scene(scene, size=size)
        assert img.shape == (size, size, 3) and img.dtype == np.uint8
        covered = np.zeros((size, size), bool)
        for o in range(scene.num_objects):
            x0, y0, x1, y1 = scene.box[o]
            cx, cy = int((x0 + x1) / 2 * size), int((y0 + y1) / 2 * size)
            # Every shape (cross, star included) covers its box centre.
            np.testing.assert_allclose(img[cy, cx].astype(int), BASE_RGB[scene.colour[o]], atol=2)
            covered[int(y0 * size):int(np.ceil(y1 * size)), int(x0 * size):int(np.ceil(x1 * size))] = True
        # Far from every object box and from the grid lines: untouched background.
        corner = img[:3, :3].reshape(-1, 3)
        if not covered[:3, :3].any():
            np.testing.assert_array_equal(corner, np.broadcast_to(BACKGROUND, corner.shape))
        assert (np.abs(img.astype(int) - BACKGROUND).sum(-1) > 30).sum() > 0


def test_draw_scene_shapes_differ_and_background_is_flat():
    box = np.array([[0.2, 0.2, 0.8, 0.8]])
    pics = [draw_scene(Scene((s,), (7,), (1,), (1,), (1,), box, False), size=64, grid=False) for s in range(6)]
    # A pixel counts as covered when it is closer to gray than to the background (half the full contrast), so the
    # count estimates the shape's area.
    half = np.abs(BASE_RGB[7] - BACKGROUND).sum() / 2
    fill = [int((np.abs(p.astype(int) - BACKGROUND).sum(-1) > half).sum()) for p in pics]
    # Square fills its box, circle π/4 of it, diamond and triangle half, star and cross less: all distinct.
    assert len(set(fill)) == 6
    assert fill[0] == pytest.approx(np.pi / 4 * 0.6 ** 2 * 64 ** 2, rel=0.03)
    assert fill[1] > fill[0] > fill[3] and fill[1] == pytest.approx(0.6 ** 2 * 64 ** 2, rel=0.03)
    empty = draw_scene(Scene((), (), (), (), (), np.zeros((0, 4)), False), size=32, grid=False)
    np.testing.assert_array_equal(empty, np.broadcast_to(np.array(BACKGROUND, np.uint8), (32, 32, 3)))


def test_scene_image_uses_pixels_when_present(regions):
    pixels = shapesworld.generate("train", preset="tiny", limit=2, mode="pixels")
    np.testing.assert_array_equal(scene_image(pixels, 1), pixels["images"][1])
    np.testing.assert_array_equal(scene_image(regions, 1, size=48), draw_scene(regions["scenes"][1], size=48))
    with pytest.raises(IndexError, match="out of range"):
        scene_image(regions, 6)
    with pytest.raises(ValueError, match="size"):
        draw_scene(regions["scenes"][0], size=4)


def test_plot_scenes_layout_and_captions(regions):
    fig = plot_scenes(regions, [0, 2, 5], cols=2, title="grid")
    axes = fig.axes
    assert len(axes) == 4 and not axes[3].axison
    np.testing.assert_array_equal(axes[1].images[0].get_array(), scene_image(regions, 2, size=96))
    label = axes[1].get_xlabel()
    for cap in regions["captions"][2]:
        assert cap.split()[-1] in label
    assert caption_block(["a b", "c"], marks=["x", "y"]) == "x a b\ny c"
    plt.close(fig)
    with pytest.raises(ValueError, match="empty"):
        plot_scenes(regions, [])
