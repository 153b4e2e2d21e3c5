"""Evaluation entry point (thin absl main). Not yet available in this revision; exits non-zero with a message."""

import sys

if __name__ == "__main__":
  sys.exit("evaluate.py: the evaluators are not yet available in this revision of mmjax.")
