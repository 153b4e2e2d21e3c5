"""Evaluation: retrieval metrics (R@K, RSUM, folds), compositional suites, set analysis, plots."""

from mmjax.evaluation.retrieval import recall_at_k, recall_at_k_folds, retrieval_ranks

__all__ = ["recall_at_k", "recall_at_k_folds", "retrieval_ranks"]
