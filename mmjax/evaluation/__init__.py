"""Evaluation: retrieval metrics (R@K, RSUM, folds), compositional suites, set analysis, plots."""

from mmjax.evaluation.compositional import evaluate_records, is_correct, summarize, task_metrics
from mmjax.evaluation.controls import evaluate_with_controls, replacement_indices
from mmjax.batching import batched_apply
from mmjax.evaluation.embed import embed_retrieval_model, evaluate_retrieval, score_sets
from mmjax.evaluation.registry import EVALUATORS, register, run_evaluator
from mmjax.evaluation.run import resolve_evals, run_evals, summary_markdown, write_results
from mmjax.evaluation.retrieval import recall_at_k, recall_at_k_folds, retrieval_ranks
from mmjax.evaluation.scorers import EmbeddingScorer, cosine_pairs, set_pairs, shapesworld_suites_context

__all__ = ["recall_at_k", "recall_at_k_folds", "retrieval_ranks",
           "EVALUATORS", "register", "run_evaluator", "run_evals", "resolve_evals", "summary_markdown", "write_results",
           "batched_apply", "embed_retrieval_model", "evaluate_retrieval", "score_sets",
           "evaluate_records", "is_correct", "summarize", "task_metrics",
           "evaluate_with_controls", "replacement_indices",
           "EmbeddingScorer", "cosine_pairs", "set_pairs", "shapesworld_suites_context"]
