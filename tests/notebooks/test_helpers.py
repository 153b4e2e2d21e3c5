"""`notebooks/helpers.py`, the display helpers the notebooks share: Markdown tables, unit rows, figure display."""

import matplotlib

matplotlib.use("Agg")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("IPython", reason="IPython not installed (pip install -r requirements-notebooks.txt)")

from notebooks import helpers  # noqa: E402


def test_table_renders_markdown_with_one_float_format():
    md = helpers.table(["kind", "score", "n"], [["maxmatch", 1.23456, 3], ["mil", np.float32(0.5), np.int64(12)]],
                       fmt="{:.2f}")
    assert md.data == ("| kind | score | n |\n"
                       "|---|---|---|\n"
                       "| maxmatch | 1.23 | 3 |\n"
                       "| mil | 0.50 | 12 |")


def test_table_cells_integers_zero_d_arrays_pipes_and_bools():
    md = helpers.table(["a|b", "x"], [[np.array(2.5), True], ["c|d\ne", np.array(7)]], fmt="{:.1f}")
    lines = md.data.splitlines()
    assert lines[0] == "| a\\|b | x |"
    assert lines[2] == "| 2.5 | True |"
    assert lines[3] == "| c\\|d e | 7 |"
    assert helpers.table(["v"], [[1 / 3]]).data.splitlines()[-1] == "| 0.333 |"  # the default format


def test_table_rejects_ragged_rows():
    with pytest.raises(ValueError, match="row 1 has 1 cells, the header 2"):
        helpers.table(["a", "b"], [[1, 2], [3]])


def test_unit_normalises_rows_numpy_and_jax():
    x = [[3.0, 4.0], [0.0, 0.0], [-2.0, 0.0]]
    u = helpers.unit(x)
    assert isinstance(u, np.ndarray) and u.dtype == np.float32
    np.testing.assert_allclose(u, [[0.6, 0.8], [0.0, 0.0], [-1.0, 0.0]])  # a zero row stays zero, not NaN
    batch = np.random.default_rng(0).normal(size=(2, 5, 8))
    np.testing.assert_allclose(np.linalg.norm(helpers.unit(batch), axis=-1), 1.0, rtol=1e-6)

    j = helpers.unit(jnp.asarray(x))
    assert isinstance(j, jax.Array)
    np.testing.assert_allclose(np.asarray(j), u, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.jit(helpers.unit)(jnp.asarray(x))), u, rtol=1e-6)  # traced


def test_show_displays_and_closes(monkeypatch):
    shown = []
    monkeypatch.setattr(helpers, "display", shown.append)
    fig, ax = plt.subplots()
    helpers.index_ticks(ax, 3, 4)
    assert list(ax.get_xticks()) == [0, 1, 2, 3] and list(ax.get_yticks()) == [0, 1, 2]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("caption element j", "image element i")
    helpers.show(fig)
    assert shown == [fig] and not plt.fignum_exists(fig.number)


def test_root_is_the_repository_root():
    assert (helpers.ROOT / "configs" / "maxmatch_shapes.py").is_file()
    assert (helpers.ROOT / "notebooks" / "helpers.py").is_file()
