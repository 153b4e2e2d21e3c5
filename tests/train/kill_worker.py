"""Test-only entry script: a training run that SIGKILLs itself at a chosen point, injected from outside the loop.

    python tests/train/kill_worker.py CONFIG WORKDIR EVENT STEP [--config.x.y=v ...]

Runs `mmjax.experiment.run(config, workdir, hooks=[kill])` where `kill(event, step)` sends SIGKILL to this process
when (event, step) == (EVENT, STEP) — events are those the loop fires ("step", "checkpoint", "best", "export").
EVENT "checkpoint_committed" / "best_committed" first waits (≤ 60 s) until that save is committed on disk (the
step directory has its final name), then kills: "right after the save", whichever way the async write raced.
EVENT "unwritable@<event>" replaces `checkpoints/` by a file there instead of killing (the run goes on and must stop
at its next save). EVENT "sigterm@<event>" sends SIGTERM instead (a scheduler's preemption notice: the run must stop
after that step with a checkpoint and exit with `EXIT_PREEMPTED`). Every hook call is printed as
"[kill_worker] event EVENT STEP".
EVENT "none" never kills (the same entry point for the uninterrupted reference run). The kill is a real SIGKILL:
no `finally`, no atexit, async saves in flight are abandoned — what an OOM killer or a pre-empted node does.
"""

import os
import shutil
import signal
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv):
    if len(argv) < 5:
        raise SystemExit(f"usage: {argv[0]} CONFIG WORKDIR EVENT STEP [--config.x.y=v ...]")
    config_arg, workdir, event, step = argv[1], argv[2], argv[3], int(argv[4])
    from absl import flags, logging
    from ml_collections import config_flags
    config_flags.DEFINE_config_file("config", None, "config file (path[:variant])", lock_config=True)
    flags.FLAGS([argv[0], f"--config={config_arg}", *argv[5:]])
    logging.set_verbosity(logging.WARNING)
    from mmjax.experiment import run

    action, _, event = event.rpartition("@")
    wanted, _, committed = event.partition("_")
    directory = os.path.join(workdir, "best" if wanted == "best" else "checkpoints", str(step))

    def kill(ev, st):
        print(f"[kill_worker] event {ev} {st}", flush=True)
        if ev == wanted and st == step:
            if committed:
                deadline = time.time() + 60
                while not os.path.isdir(directory) and time.time() < deadline:
                    time.sleep(0.01)
                if not os.path.isdir(directory):
                    raise SystemExit(f"[kill_worker] {directory} was not committed within 60 s")
            if action == "unwritable":
                # Root ignores permission bits, so make checkpoints/ unwritable for anyone: a file in its place.
                ckpt_dir = os.path.join(workdir, "checkpoints")
                shutil.rmtree(ckpt_dir)
                open(ckpt_dir, "w").close()
                print(f"[kill_worker] {ckpt_dir} made unwritable at ({ev}, {st})", flush=True)
                return
            if action == "sigterm":
                print(f"[kill_worker] SIGTERM at ({ev}, {st})", flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            print(f"[kill_worker] SIGKILL at ({ev}, {st})", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    from mmjax.train import EXIT_PREEMPTED, TrainingPreempted
    try:
        result = run(flags.FLAGS.config, workdir, hooks=[kill])
    except TrainingPreempted as e:
        print(f"[kill_worker] preempted: {e}", flush=True)
        raise SystemExit(EXIT_PREEMPTED)
    print(f"[kill_worker] finished; this run started at step {result['start_step']}", flush=True)


if __name__ == "__main__":
    main(sys.argv)
