"""The notebooks in `notebooks/`: each jupytext source (`*.py`, percent format) executes top to bottom in a fresh
kernel at the smoke size (`MMJAX_NOTEBOOK_SMOKE=1`) without a cell error, and each committed `*.ipynb` (executed at
full size, outputs kept) holds exactly the code cells of its `.py` — no drift between the reviewed source and the
rendered notebook. The committed outputs render as text (no progress-bar widgets), the notebooks share
`notebooks/helpers.py` (tested in test_helpers.py), and each opening cell states its measured full-size wall time.

Needs `requirements-notebooks.txt` (jupytext, nbclient, nbformat, ipykernel); skipped with a reason otherwise.
"""

import os
import pathlib
import re

import pytest

jupytext = pytest.importorskip("jupytext", reason="jupytext not installed (pip install -r requirements-notebooks.txt)")
nbclient = pytest.importorskip("nbclient", reason="nbclient not installed (pip install -r requirements-notebooks.txt)")
pytest.importorskip("ipykernel", reason="ipykernel not installed (pip install -r requirements-notebooks.txt)")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
NAMES = [p.stem for p in SOURCES]


def test_three_notebooks_are_paired():
    assert NAMES == ["01_sets_and_assignment", "02_maxmatch_on_shapesworld", "03_flowclip_scoring"]
    for src in SOURCES:
        assert src.with_suffix(".ipynb").exists(), f"{src.name} has no committed .ipynb next to it"


def code_cells(nb):
    return [c.source.strip() for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("name", NAMES)
def test_ipynb_matches_py_source(name):
    src = jupytext.read(ROOT / "notebooks" / f"{name}.py")
    rendered = jupytext.read(ROOT / "notebooks" / f"{name}.ipynb")
    assert code_cells(rendered) == code_cells(src), (
        f"notebooks/{name}.ipynb is out of date with {name}.py: run `jupytext --sync notebooks/{name}.py` "
        "and re-execute it")
    outputs = [o for c in rendered.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{name}.ipynb was committed without figures"
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, f"{name}.ipynb was committed with an error output: {errors[0].get('ename')}"


@pytest.mark.parametrize("name", NAMES)
def test_ipynb_outputs_render_as_text(name):
    """Progress bars are off in the committed notebooks (`mmjax.batching.set_progress(False)`): no widget outputs
    (they render as JSON outside a live Jupyter) and no tqdm rate lines in the text."""
    rendered = jupytext.read(ROOT / "notebooks" / f"{name}.ipynb")
    assert "widgets" not in rendered.metadata, f"{name}.ipynb carries widget state"
    for cell in rendered.cells:
        for o in cell.get("outputs", []):
            assert "application/vnd.jupyter.widget-view+json" not in o.get("data", {}), f"{name}: widget output"
            text = o.get("text", "") if o.get("output_type") == "stream" else ""
            assert not re.search(r"\d(it|row)?/s\b|\|[#█▏▎▍▌▋▊▉ ]+\|", text), f"{name}: progress bar output {text!r}"


@pytest.mark.parametrize("name", NAMES)
def test_source_uses_shared_helpers_and_states_wall_time(name):
    """The display helpers live in notebooks/helpers.py (not redefined per notebook), and the opening Markdown cell
    states the measured full-size wall time."""
    src = (ROOT / "notebooks" / f"{name}.py").read_text(encoding="utf-8")
    assert "from notebooks.helpers import" in src
    assert not re.search(r"^def (show|table|unit)\(", src, re.M), f"{name}.py redefines a helper of helpers.py"
    nb = jupytext.read(ROOT / "notebooks" / f"{name}.py")
    opening = next(c.source for c in nb.cells if c.cell_type == "markdown")
    assert re.search(r"[Ww]all time at full size", opening), f"{name}.py: the opening cell states no wall time"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes_at_smoke_size(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MMJAX_NOTEBOOK_SMOKE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # The kernel must import this checkout's mmjax, whatever the working directory.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = jupytext.read(ROOT / "notebooks" / f"{name}.py")
    # kernel 'python3' is ipykernel on this interpreter (jupyter_client substitutes sys.executable for it).
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{name} produced no figure"

