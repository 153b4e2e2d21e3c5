"""The evaluators `config.evals` names by `type`, one module each (`base.Evaluator`); listed in
`mmjax.evaluation.registry.EVALUATORS`."""
