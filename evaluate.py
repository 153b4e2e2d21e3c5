"""Evaluate a finished run (or a pretrained model).

    python evaluate.py --config configs/maxmatch_shapes.py --workdir workdir/maxmatch_shapes [--split test]

Runs the evaluators of `config.evals` (retrieval R@K/RSUM scored as the config's loss scores, compositional suites
under the Real/Shuffle/Fixed image-replacement controls, set analysis with figures) on the run's exported parameters
and writes `results.json`, `results.md` and `plots/*.png` into the workdir. All logic lives in `mmjax.experiment`.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from absl import app, flags  # noqa: E402

from mmjax.config_validation.cli import define_config_file, parse_flags  # noqa: E402

_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "maxmatch_shapes.py")
define_config_file("config", _DEFAULT, "Experiment config file (path[:variant]).", lock_config=True)
flags.DEFINE_string("workdir", "workdir/maxmatch_shapes", "Workdir of a finished training run.")
flags.DEFINE_string("split", None, "Split to evaluate (default: config.eval_split, else 'test').")
flags.DEFINE_enum("params", "final", ["final", "best"], "Which exported parameters: the last step's ('final') or "
                  "those of the best validation RSUM ('best').")
flags.DEFINE_bool("allow_config_mismatch", False, "Evaluate even if model/data/scoring fields of the config differ "
                  "from those recorded in the run's export (the differing fields are printed).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from absl import logging
    logging.set_verbosity(logging.WARNING)  # keep Orbax's per-file INFO lines out of the output
    from mmjax.experiment import evaluate
    evaluate(flags.FLAGS.config, flags.FLAGS.workdir, split=flags.FLAGS.split,
             allow_config_mismatch=flags.FLAGS.allow_config_mismatch, params=flags.FLAGS.params)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)  # an unknown --config.<field>: one error naming it, exit 2
