"""What the library's figures show (`mmjax.evaluation.plots`), read off the matplotlib objects before they are saved:
element indices as integer ticks, labelled colourbars, one colour scale for compared heat maps, a colour key and a
marker key that match the element-embedding scatter, labelled axes; training curves with one panel per quantity (no
duplicate panels or series), validation values as points and the warm-up → hardest-negative switch marked."""

import json

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
import pytest

from mmjax.evaluation import plots
from tests.subprocess_env import subprocess_env


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions save, kept open: {file name: figure}."""
    kept, save = {}, plots._save

    def keep(fig, path):
        # built outside pyplot (plots.new_figure): no figure registered, so none is shown in a notebook
        assert not plt.get_fignums(), f"{path}: the figure was built through pyplot"
        kept[str(path).rsplit("/", 1)[-1]] = fig
        return save(fig, path)
    monkeypatch.setattr(plots, "_save", keep)
    return kept


def _tick_labels(ax, axis):
    return [t.get_text() for t in (ax.get_xticklabels() if axis == "x" else ax.get_yticklabels())]


def _colorbar_axes(fig, main):
    return [ax for ax in fig.axes if ax is not main and ax.get_label() == "<colorbar>"]


def test_heatmap_has_integer_element_ticks_a_labelled_colourbar_and_its_title(tmp_path, figures):
    m = np.arange(12, dtype=np.float32).reshape(3, 4) / 12
    plots.plot_similarity_heatmap(m, tmp_path / "h.png", title="S_H, Div+MMD: mean element similarity")
    fig = figures["h.png"]
    ax = fig.axes[0]
    assert _tick_labels(ax, "x") == ["0", "1", "2", "3"] and _tick_labels(ax, "y") == ["0", "1", "2"]
    assert ax.get_xlabel() == "caption element j" and ax.get_ylabel() == "image element i"
    assert "S_H, Div+MMD" in ax.get_title()
    (cbar,) = _colorbar_axes(fig, ax)
    assert "cosine similarity" in cbar.get_ylabel()
    assert ax.images[0].get_clim() == pytest.approx((0.0, 11 / 12))   # its own range without vmin/vmax


def test_heatmap_cell_text_stays_readable_on_bright_and_dark_cells(tmp_path, figures):
    plots.plot_similarity_heatmap(np.array([[0.0, 1.0]]), tmp_path / "h.png")
    texts = {t.get_text(): mcolors.to_rgb(t.get_color()) for t in figures["h.png"].axes[0].texts}
    assert texts["0.00"] == (1.0, 1.0, 1.0) and texts["1.00"] == (0.0, 0.0, 0.0)   # viridis: dark purple, yellow


def test_heatmaps_that_are_compared_share_one_colour_scale(tmp_path, figures):
    a, b = np.full((2, 2), 0.61), np.array([[0.1, 0.6], [0.5, 0.05]])
    lo, hi = plots.shared_range([a, b])
    assert (lo, hi) == pytest.approx((0.05, 0.61))
    for name, m in (("a.png", a), ("b.png", b)):
        plots.plot_similarity_heatmap(m, tmp_path / name, vmin=lo, vmax=hi)
    assert figures["a.png"].axes[0].images[0].get_clim() == figures["b.png"].axes[0].images[0].get_clim() == (lo, hi)
    plots.plot_similarity_heatmaps({"PVSE (MIL)": a, "S_H, Div+MMD": b}, tmp_path / "both.png")
    fig = figures["both.png"]
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["PVSE (MIL)", "S_H, Div+MMD"]
    for ax in panels:
        assert ax.images[0].get_clim() == pytest.approx((lo, hi))
    cbars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(cbars) == 1 and "one scale for all panels" in cbars[0].get_ylabel()
    assert plots.shared_range([np.full((2, 2), 0.3)]) == pytest.approx((-0.2, 0.8))   # a constant map still scales


def test_element_embeddings_have_a_colour_key_a_marker_key_and_labelled_axes(tmp_path, figures):
    rng = np.random.default_rng(0)
    img, txt = rng.normal(size=(12, 3, 8)), rng.normal(size=(12, 3, 8))
    for method in ("pca", "tsne"):
        plots.plot_element_embeddings(img, txt, tmp_path / f"{method}.png", method=method)
        ax = figures[f"{method}.png"].axes[0]
        assert ax.get_xlabel() and ax.get_ylabel()
        assert ("principal component 1" in ax.get_xlabel()) == (method == "pca")
        colour_key, marker_key = ax.artists[0], ax.get_legend()   # the colour key is kept as an extra artist
        assert [t.get_text() for t in colour_key.get_texts()] == ["k = 0", "k = 1", "k = 2"]
        scatter_colours = {(c.get_paths()[0].vertices.shape[0] > 5, tuple(np.round(c.get_facecolor()[0][:3], 3)))
                           for c in ax.collections}
        key_colours = [tuple(np.round(mcolors.to_rgb(h.get_color()), 3)) for h in colour_key.legend_handles]
        assert {c for _, c in scatter_colours} == set(key_colours)   # each element index drawn in its key's colour
        markers = [h.get_marker() for h in marker_key.legend_handles]
        assert markers == ["o", "x"] and "image" in marker_key.get_texts()[0].get_text()
        assert "caption" in marker_key.get_texts()[1].get_text()
        assert len(ax.collections) == 6   # one scatter per (modality, element index)


@pytest.mark.parametrize("steps,w,switch", [
    ([20, 40, 60, 80, 100], [1.0, 1.0, 0.8, 0.0, 0.0], (40, 80)),        # a switch inside one log interval
    ([20, 40, 60, 80], [1.0, 0.9, 0.5, 0.2], (20, 80)),                  # a ramp that has not ended
    ([20, 40, 60], [0.5, 0.0, 0.0], (0, 40)),                            # left 1 before the first log
    ([20, 40], [1.0, 1.0], None),                                         # still warming up
    ([2, 3, 4], [0.0, 0.0, 0.0], None),                                   # no warm-up logged at all
    ([20, 40, 60, 80], [1.0, None, 0.0, 0.0], (20, 60)),                  # a missing value is skipped
    ([], [], None)])
def test_switch_steps(steps, w, switch):
    assert plots.switch_steps(steps, w) == switch


def _span(patch) -> tuple[float, float]:
    """The x-extent, in data coordinates, of an axvspan (a Rectangle in recent matplotlib, a Polygon before)."""
    xs = [x for x, _ in patch.get_xy()] if hasattr(patch, "get_xy") and np.ndim(patch.get_xy()) == 2 else [
        patch.get_x(), patch.get_x() + patch.get_width()]
    return float(min(xs)), float(max(xs))


def _write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _maxmatch_rows():
    rows = []
    for s in range(20, 201, 20):
        w = 1.0 if s <= 80 else 0.5 if s == 100 else 0.0
        rows.append({"step": s, "loss/total": 2.0 - s / 200, "loss/triplet": 0.3, "loss/triplet_i2t": 0.2,
                     "loss/triplet_t2i": 0.1, "loss/all_negative_weight": w, "lr": 1e-3, "grad_norm": 1.0,
                     "steps_per_s": 3.0})
        if s % 100 == 0:   # validation: the run's score is maxmatch, logged under both names
            v = {"val/rsum": 300.0 + s / 10, "val/maxmatch/rsum": 300.0 + s / 10, "val/semantic/rsum": 400.0 + s,
                 "val/maxmatch/semantic/rsum": 400.0 + s, "val/i2t_r1": 30.0, "val/maxmatch/i2t_r1": 30.0,
                 "val/t2i_r1": 20.0, "val/maxmatch/t2i_r1": 20.0,
                 "val/i2t_r5": 1.0}
            rows.append({"step": s, **v})
    return rows


def test_training_curves_one_panel_per_quantity(tmp_path, figures):
    plots.plot_training_curves(_write(tmp_path / "metrics.jsonl", _maxmatch_rows()), tmp_path / "c.png")
    fig = figures["c.png"]
    panels = [ax for ax in fig.axes if ax.axison]
    titles = [ax.get_title() for ax in panels]
    assert len(titles) == len(set(titles)), titles                              # no duplicate panels
    assert titles[:2] == ["total loss", "triplet loss"]
    assert {"learning rate", "gradient norm (global L2)", "validation RSUM", "validation R@1, image → text",
            "validation R@1, text → image"} <= set(titles)
    assert not any("i2t" in t or "t2i" in t or "r5" in t or "steps_per_s" in t for t in titles)
    by_title = dict(zip(titles, panels))
    triplet = by_title["triplet loss"]
    assert [t.get_text() for t in triplet.get_legend().get_texts()] == ["both directions", "image → text",
                                                                        "text → image"]
    assert all(ax.get_ylabel() for ax in panels)
    rsum = by_title["validation RSUM"]
    assert len(rsum.lines) == 2                                   # val/rsum = val/maxmatch/rsum: drawn once
    for line in rsum.lines:                                       # validation values are points
        assert line.get_marker() not in (None, "None", "", " ") and line.get_linestyle() == ":"
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["maxmatch (the run's score): source GT",
                                                          "maxmatch (the run's score): semantic GT"]


def test_training_curves_mark_the_warm_up_to_hardest_negative_switch(tmp_path, figures):
    plots.plot_training_curves(_write(tmp_path / "metrics.jsonl", _maxmatch_rows()), tmp_path / "c.png")
    fig = figures["c.png"]
    panels = [ax for ax in fig.axes if ax.axison]
    for ax in panels:   # every panel shades steps 80–120 (last at 1 → first at 0)
        assert (80.0, 120.0) in [_span(p) for p in ax.patches], ax.get_title()
    weight = next(ax for ax in panels if ax.get_title().startswith("all-negative weight"))
    assert "warm-up → hardest negative" in [t.get_text() for t in weight.get_legend().get_texts()]
    assert "steps 80–120" in fig._suptitle.get_text()
    for ax in panels:   # steps are integers
        ticks = ax.get_xticks()
        assert np.allclose(ticks, np.round(ticks)), ax.get_title()


def test_clip_curves_put_both_directions_in_the_total_loss_panel(tmp_path, figures):
    rows = [{"step": s, "loss/total": 3.0, "loss/i2t": 3.1, "loss/t2i": 2.9, "logit_scale": 14.0} for s in (2, 4)]
    rows.append({"step": 4, "val/rsum": 50.0, "val/semantic/rsum": 90.0})
    plots.plot_training_curves(_write(tmp_path / "metrics.jsonl", rows), tmp_path / "c.png")
    fig = figures["c.png"]
    titles = [ax.get_title() for ax in fig.axes if ax.axison]
    assert titles == ["total loss", "logit scale", "validation RSUM"]
    assert "shaded" not in fig._suptitle.get_text()                         # no warm-up: nothing marked
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["source GT", "semantic GT"]


def test_curve_panels_keep_explicit_keys_and_the_empty_case(tmp_path, figures):
    panels = plots.curve_panels(["loss/div", "val/semantic_folds5/rsum", "val/folds5/rsum"])
    assert [p["title"] for p in panels] == ["Div loss (diversity)", "validation RSUM"]
    assert [label for _, label in panels[1]["series"]] == ["source GT, 5 folds", "semantic GT, 5 folds"]
    path = _write(tmp_path / "metrics.jsonl", [{"step": 1, "loss": 1.0}])
    plots.plot_training_curves(path, tmp_path / "none.png")
    assert [ax.get_title() for ax in figures["none.png"].axes] == ["(no metrics)"]


def test_figure_modules_leave_the_matplotlib_backend_alone(tmp_path):
    """Importing the library's figure modules keeps the process's backend (a notebook's inline one: switching it
    makes IPython drop its PNG formatter, and displayed figures come out as text); they still write PNGs, and they
    build their figures outside pyplot, so none is registered (or shown)."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import matplotlib\n"
            "from mmjax.evaluation import plots\n"
            "import reproduce.figures, reproduce.flowclip_figures\n"
            "import numpy as np\n"
            f"out = plots.plot_similarity_heatmap(np.eye(3, dtype=np.float32), {str(tmp_path / 'h.png')!r})\n"
            "import matplotlib.pyplot as plt\n"
            "print(matplotlib.get_backend(), open(out, 'rb').read(8) == b'\\x89PNG\\r\\n\\x1a\\n', "
            "len(plt.get_fignums()))\n")
    env = subprocess_env(env_extra={"MPLBACKEND": "svg"})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["svg", "True", "0"]   # the backend kept, a PNG written, no pyplot figure open
