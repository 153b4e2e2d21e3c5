"""Training entry point (thin absl main). The trainer is being built (issue: Training); until it lands this
command explains that and exits non-zero rather than pretending to train."""

import sys

if __name__ == "__main__":
  sys.exit("train.py: the trainer is not yet available in this revision of mmjax "
           "(matching, similarity, losses, models and data are; see README).")
