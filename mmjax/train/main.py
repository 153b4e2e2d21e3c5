"""What `train.py` runs: training, then the config's final evaluation and a printed results table."""

from mmjax.train.loop import train_and_evaluate


def run(config, workdir: str) -> dict:
    result = train_and_evaluate(config, workdir)
    val = result["final_val"]
    if val:
        print("\nValidation results:")
        for k, v in val.items():
            print(f"  {k:24s} {v:8.2f}")
    return result
