"""Several cells at once, each in its own `python -m reproduce` process, under one deadline (reproduce/README.md).

`python -m reproduce` runs its cells one after another, which suits a 2-core machine. A machine with an accelerator
and many cores (or a lease of fixed length) runs the study faster with several cells side by side:

    python -m reproduce.parallel --tasks converged:sh_full:1,flowclip:fcs_P_flowclip_hnb:0 --jobs 8 \
        --work /tmp/pool --archive docs/reproduction/records [--deadline 480] [--grace 60]

A task is `budget:cell:seed` (`--tasks @FILE` reads one per line, `#` comments allowed), taken in the order given.
Each runs as `python -m reproduce --budget B --seeds 1 --first-seed K --cells C --out WORK/B__C__seedK --archive A
--no-report`: its own output directory (a grid directory holds one budget, and two processes must not share one),
one shared archive (records are written atomically, one file per cell and seed, so processes never write the same
file). At the deadline (seconds from the start) every running task is sent SIGTERM: training stops after its current
step with a checkpoint (`mmjax.train.preemption`), so the same task resumes later; a task still running after
`--grace` seconds more is killed. No task starts after `deadline − min_start` seconds. Each task's output goes to
WORK/logs/<task>.log; WORK/summary.json lists every task with its state (finished, preempted, failed, not started),
exit status and wall time, and the same table is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

from reproduce import paths

EXIT_PREEMPTED = 75   # mmjax.train.preemption.EXIT_PREEMPTED (not imported: this driver never imports jax)
POLL_S = 2.0


@dataclasses.dataclass
class Task:
    budget: str
    cell: str
    seed: int
    state: str = "not started"      # not started | running | finished | preempted | failed | killed
    returncode: int | None = None
    wall_s: float | None = None
    proc: subprocess.Popen | None = dataclasses.field(default=None, repr=False)
    t0: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.budget}__{self.cell}__seed{self.seed}"


def parse_tasks(spec: str) -> list[Task]:
    """`budget:cell:seed[,…]`, or `@FILE` with one such triple per line (blank lines and `# …` ignored)."""
    if spec.startswith("@"):
        with open(spec[1:]) as f:
            items = [line.split("#", 1)[0].strip() for line in f]
    else:
        items = [s.strip() for s in spec.split(",")]
    tasks = []
    for item in (i for i in items if i):
        parts = item.split(":")
        if len(parts) != 3 or not parts[2].isdigit():
            raise ValueError(f"task {item!r}: expected budget:cell:seed (e.g. converged:sh_full:1)")
        tasks.append(Task(parts[0], parts[1], int(parts[2])))
    keys = [t.key for t in tasks]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError(f"task(s) listed twice: {dup}")
    return tasks


def check_tasks(tasks: list[Task]) -> None:
    """Unknown budgets or cells fail before anything starts (not one process at a time, minutes in)."""
    from reproduce.grid import BUDGETS, SPEC_BY_NAME  # imports jax (via mmjax.similarity), once, in the driver
    bad = [t.key for t in tasks if t.budget not in BUDGETS or t.cell not in SPEC_BY_NAME]
    if bad:
        raise ValueError(f"unknown budget or cell in {bad}; budgets {BUDGETS}")


def task_command(task: Task, work: str, archive: str, python: str = sys.executable) -> list[str]:
    cmd = [python, "-m", "reproduce", "--budget", task.budget, "--seeds", "1", "--first-seed", str(task.seed),
           "--cells", task.cell, "--out", os.path.join(work, task.key), "--no-report"]
    return cmd + (["--archive", archive] if archive else [])


def _state_of(returncode: int, terminated: bool) -> str:
    if returncode == 0:
        return "finished"
    if returncode == EXIT_PREEMPTED:
        return "preempted"
    return "killed" if terminated else "failed"


def run_pool(tasks: list[Task], work: str, *, jobs: int, archive: str = "", deadline: float | None = None,
             grace: float = 60.0, min_start: float = 0.0, command=task_command, log=print,
             env: dict | None = None) -> list[Task]:
    """Runs `tasks` (in order) with at most `jobs` at a time; returns them with their final states."""
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    start = time.monotonic()
    stop_now = []  # SIGTERM / SIGINT to the driver: the deadline is now (the tasks checkpoint and stop)

    def on_signal(signum, frame):
        stop_now.append(signum)
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    queue, running = list(tasks), []
    stopping_at = None      # when SIGTERM went out (the deadline passed)
    last_line = 0.0

    def elapsed():
        return time.monotonic() - start

    def finish(t: Task, terminated: bool):
        t.returncode = t.proc.returncode
        t.wall_s = time.monotonic() - t.t0
        t.state = _state_of(t.returncode, terminated)
        t.proc = None
        done = sum(x.state == "finished" for x in tasks)
        log(f"[pool] {elapsed():6.0f} s  {t.key}: {t.state} (exit {t.returncode}, {t.wall_s:.0f} s); "
            f"{done} finished, {len(running)} running, {len(queue)} queued")

    while queue or running:
        if stop_now and (deadline is None or elapsed() < deadline):
            deadline = elapsed()
        for t in list(running):
            if t.proc.poll() is not None:
                running.remove(t)
                finish(t, stopping_at is not None)
        late = deadline is not None and elapsed() >= deadline - min_start
        while queue and len(running) < jobs and not late and stopping_at is None:
            t = queue.pop(0)
            logf = open(os.path.join(work, "logs", f"{t.key}.log"), "w")
            t.t0, t.state = time.monotonic(), "running"
            t.proc = subprocess.Popen(command(t, work, archive), cwd=paths.ROOT, stdout=logf,
                                      stderr=subprocess.STDOUT, env=env, start_new_session=True)
            logf.close()  # the child holds its own descriptor
            running.append(t)
            log(f"[pool] {elapsed():6.0f} s  started {t.key}")
        if late and stopping_at is None and queue and not running:
            break  # nothing may start any more and nothing runs
        if deadline is not None and elapsed() >= deadline and stopping_at is None and running:
            stopping_at = time.monotonic()
            log(f"[pool] deadline ({deadline:.0f} s): SIGTERM to {len(running)} running task(s); they checkpoint "
                f"and stop")
            for t in running:
                _signal(t.proc, signal.SIGTERM)
        if stopping_at is not None and time.monotonic() - stopping_at > grace:
            for t in running:
                _signal(t.proc, signal.SIGKILL)
        if not running and (stopping_at is not None or late):
            break
        if time.monotonic() - last_line > 60:
            last_line = time.monotonic()
            done = sum(x.state == "finished" for x in tasks)
            rate = done / max(elapsed(), 1e-9) * 3600
            log(f"[pool] {elapsed():6.0f} s  {done}/{len(tasks)} finished ({rate:.1f}/h), {len(running)} "
                f"running, {len(queue)} queued")
        time.sleep(POLL_S)
    for s, handler in previous.items():
        signal.signal(s, handler)
    return tasks


def _signal(proc: subprocess.Popen, sig) -> None:
    """SIGTERM to the task's own process only: its children are compilers (XLA's ptxas on a GPU), and a compiler
    killed mid-way fails the cell instead of letting it checkpoint (seen on the first GPU batch). SIGKILL, after
    the grace period, to the task's whole process group (its own session)."""
    try:
        if sig == signal.SIGKILL:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass


def summary(tasks: list[Task]) -> str:
    rows = ["| task | state | exit | wall (s) |", "|---|---|---|---|"]
    rows += [f"| {t.key} | {t.state} | {'' if t.returncode is None else t.returncode} | "
             f"{'' if t.wall_s is None else f'{t.wall_s:.0f}'} |" for t in tasks]
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m reproduce.parallel", description=__doc__.split("\n\n")[1])
    p.add_argument("--tasks", required=True, help="budget:cell:seed[,…] or @FILE (one per line), in run order")
    p.add_argument("--jobs", type=int, required=True, help="tasks at a time")
    p.add_argument("--work", required=True, help="directory of the tasks' output directories and logs")
    p.add_argument("--archive", default="", help="the committed records (docs/reproduction/records), shared")
    p.add_argument("--deadline", type=float, default=None, help="seconds from the start after which running "
                   "tasks get SIGTERM (they checkpoint and stop)")
    p.add_argument("--grace", type=float, default=60.0, help="seconds after SIGTERM before SIGKILL")
    p.add_argument("--min-start", type=float, default=0.0, help="no task starts later than deadline − this")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    try:
        tasks = parse_tasks(args.tasks)
        check_tasks(tasks)
    except (OSError, ValueError) as e:
        print(f"python -m reproduce.parallel: error: {e}", file=sys.stderr)
        return 2
    run_pool(tasks, args.work, jobs=args.jobs, archive=args.archive, deadline=args.deadline, grace=args.grace,
             min_start=args.min_start)
    table = summary(tasks)
    print(table, flush=True)
    with open(os.path.join(args.work, "summary.json"), "w") as f:
        json.dump([{"task": t.key, "state": t.state, "returncode": t.returncode, "wall_s": t.wall_s}
                   for t in tasks], f, indent=1)
    return 0 if all(t.state == "finished" for t in tasks) else 1


if __name__ == "__main__":
    sys.exit(main())
