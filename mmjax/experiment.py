"""What `train.py` runs: training, then (if `config.final_eval`) the config's evaluators on its test split, ending
with the results table and the paths of the plots."""

import os

from mmjax.tasks import build_task
from mmjax.train.loop import train


def run(config, workdir: str, *, hooks=()) -> dict:
    task = build_task(config, workdir)

    def validate(variables):
        return task.evaluate(variables["params"], {k: v for k, v in variables.items() if k != "params"})

    result = train(config, workdir, task, validate=validate, hooks=hooks)
    val = result["final_val"]
    if val:
        print("\nValidation results (last step):")
        for k, v in val.items():
            if "/" not in k:
                print(f"  {k:12s} {v:8.2f}")
    if config.get("final_eval"):
        import jax
        from mmjax.evaluation.run import evaluate_workdir
        if jax.process_index() == 0:
            results = evaluate_workdir(config, workdir)
            print(f"\nTest results ({results['split']} split) — {os.path.join(workdir, 'results.json')}\n")
            print(open(os.path.join(workdir, "results.md")).read())
            for name, path in results.get("figures", {}).items():
                print(f"plot ({name}): {path}")
    return result
