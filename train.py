"""Train a model from a config file.

    python train.py                                                   # MaxMatch on ShapesWorld (configs/maxmatch_shapes.py)
    python train.py --config configs/NAME.py[:variant] --workdir DIR [--config.train.num_steps=100 ...]

All logic lives in `mmjax.experiment`; this file only parses flags. The workdir receives Orbax checkpoints, metrics.jsonl,
TensorBoard events and, after the final evaluation, the results table.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "maxmatch_shapes.py")
config_flags.DEFINE_config_file("config", _DEFAULT, "Experiment config file (path[:variant]).", lock_config=True)
flags.DEFINE_string("workdir", "workdir/maxmatch_shapes", "Directory for checkpoints, logs and results.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from absl import logging
    logging.set_verbosity(logging.WARNING)  # keep Orbax's per-file INFO lines out of the progress output
    from mmjax.experiment import run
    run(flags.FLAGS.config, flags.FLAGS.workdir)


if __name__ == "__main__":
    app.run(main)
