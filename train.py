"""Train a model from a config file.

    python train.py                                                   # MaxMatch on ShapesWorld (configs/maxmatch_shapes.py)
    python train.py --config configs/NAME.py[:variant] --workdir DIR [--config.train.num_steps=100 ...]

All logic lives in `mmjax.experiment`; this file only parses flags. The workdir receives Orbax checkpoints, metrics.jsonl,
TensorBoard events and, after the final evaluation, the results table.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from absl import app, flags  # noqa: E402

from mmjax.config_validation.cli import define_config_file, parse_flags  # noqa: E402

_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "maxmatch_shapes.py")
define_config_file("config", _DEFAULT, "Experiment config file (path[:variant]).", lock_config=True)
flags.DEFINE_string("workdir", "workdir/maxmatch_shapes", "Directory for checkpoints, logs and results.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from absl import logging
    logging.set_verbosity(logging.WARNING)  # keep Orbax's per-file INFO lines out of the progress output
    from mmjax.experiment import run
    from mmjax.train import EXIT_PREEMPTED, TrainingPreempted, WorkdirLockedError
    try:
        run(flags.FLAGS.config, flags.FLAGS.workdir)
    except TrainingPreempted:  # SIGTERM/SIGINT: the step in flight was saved and said so (docs/reliability.md#preemption)
        sys.exit(EXIT_PREEMPTED)
    except WorkdirLockedError as busy:  # another run holds the workdir: refuse without a traceback
        sys.stderr.write(f"FATAL WorkdirLockedError: {busy}\n")
        sys.exit(1)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)  # an unknown --config.<field>: one error naming it, exit 2
