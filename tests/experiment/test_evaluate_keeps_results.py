"""Finished work is never lost to a plot: `mmjax.experiment.evaluate` writes results.json before it draws the
training curves, a truncated last line of metrics.jsonl (what a killed run leaves) is skipped with a warning naming
file and line, and a curves plot that fails costs nothing but the plot."""

import json
import os

import pytest

from mmjax import experiment
from mmjax.evaluation import plots
from mmjax.jsonl import JSONLWarning
from mmjax.train.defaults import retrieval_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    c = retrieval_config("smoke")
    c.train.update(num_steps=3, eval_every=3, checkpoint_every=3)
    c.evals = {"retrieval": {"type": "retrieval", "fold_counts": (1,)}}
    workdir = str(tmp_path_factory.mktemp("run"))
    experiment.run(c, workdir)
    return c, workdir


@pytest.mark.slow
def test_truncated_metrics_line_is_skipped_and_results_are_written(trained, tmp_path):
    c, workdir = trained
    with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
        f.write('{"step": 4, "loss/tot')  # a kill mid-write
    out = str(tmp_path / "eval")
    with pytest.warns(JSONLWarning, match=r"metrics\.jsonl:\d+: not a JSON object"):
        results = experiment.evaluate(c, workdir, verbose=False, out_dir=out)
    on_disk = json.load(open(os.path.join(out, "results.json")))
    assert on_disk["retrieval"] and on_disk["figures"]["training_curves"] == results["figures"]["training_curves"]


@pytest.mark.slow
def test_a_failing_curves_plot_keeps_the_results(trained, tmp_path, monkeypatch, capsys):
    c, workdir = trained

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(plots, "plot_training_curves", broken)
    out = str(tmp_path / "eval")
    results = experiment.evaluate(c, workdir, verbose=False, out_dir=out)
    assert "training_curves" not in results["figures"]
    assert json.load(open(os.path.join(out, "results.json")))["retrieval"]
    printed = capsys.readouterr().out
    assert "training curves from" in printed and "RuntimeError: disk full" in printed
