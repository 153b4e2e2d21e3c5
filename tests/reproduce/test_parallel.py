"""reproduce.parallel: the task list, the pool's states under a deadline, and the task command (no jax in the tasks:
each is a small Python stand-in that finishes, fails, or checkpoints and stops on SIGTERM as a real cell does)."""

import json
import os
import sys

import pytest

from reproduce import parallel

# A stand-in task: argv = (seconds to run, exit status); on SIGTERM it exits 75, as a training cell that checkpoints.
STAND_IN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(75))\n"
    "t, rc = float(sys.argv[1]), int(sys.argv[2])\n"
    "print('started', flush=True)\n"
    "time.sleep(t)\n"
    "sys.exit(rc)\n"
)
PLAN = {"a": (0.1, 0), "b": (0.1, 3), "c": (30.0, 0), "d": (0.1, 0), "e": (0.1, 0)}


def _command(task, work, archive):
    seconds, rc = PLAN[task.cell]
    return [sys.executable, "-c", STAND_IN, str(seconds), str(rc)]


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch):
    monkeypatch.setattr(parallel, "POLL_S", 0.05)


def test_parse_tasks_inline_and_file(tmp_path):
    tasks = parallel.parse_tasks("converged:sh_full:1, flowclip:fcs_P_flowclip_hnb:0")
    assert [(t.budget, t.cell, t.seed) for t in tasks] == [("converged", "sh_full", 1),
                                                           ("flowclip", "fcs_P_flowclip_hnb", 0)]
    f = tmp_path / "tasks.txt"
    f.write_text("# heaviest first\nflowclip:fcs_P_flowclip_hnb:0  # P head\n\nconverged:vse:2\n")
    assert [t.key for t in parallel.parse_tasks(f"@{f}")] == ["flowclip__fcs_P_flowclip_hnb__seed0",
                                                              "converged__vse__seed2"]


@pytest.mark.parametrize("spec, needle", [("converged:sh_full", "budget:cell:seed"),
                                          ("converged:sh_full:x", "budget:cell:seed"),
                                          ("converged:vse:1,converged:vse:1", "listed twice")])
def test_parse_tasks_refuses_bad_lists(spec, needle):
    with pytest.raises(ValueError, match=needle):
        parallel.parse_tasks(spec)


def test_check_tasks_names_the_unknown_cell():
    with pytest.raises(ValueError, match="converged__nosuch__seed0"):
        parallel.check_tasks(parallel.parse_tasks("converged:sh_full:0,converged:nosuch:0"))


def test_task_command_runs_one_cell_in_its_own_directory(tmp_path):
    t = parallel.Task("converged", "sh_full", 2)
    cmd = parallel.task_command(t, str(tmp_path), "docs/reproduction/records", python="py")
    assert cmd[:3] == ["py", "-m", "reproduce"]
    assert "--no-report" in cmd
    rest = [a for a in cmd[3:] if a != "--no-report"]
    flags = dict(zip(rest[::2], rest[1::2]))
    assert flags["--budget"] == "converged" and flags["--seeds"] == "1" and flags["--first-seed"] == "2"
    assert flags["--cells"] == "sh_full" and flags["--archive"] == "docs/reproduction/records"
    assert flags["--out"] == os.path.join(str(tmp_path), "converged__sh_full__seed2")


def test_pool_states_without_deadline(tmp_path):
    tasks = parallel.parse_tasks("x:a:0,x:b:0,x:d:0")
    parallel.run_pool(tasks, str(tmp_path), jobs=2, command=_command, log=lambda *_: None)
    assert [t.state for t in tasks] == ["finished", "failed", "finished"]
    assert [t.returncode for t in tasks] == [0, 3, 0]
    assert (tmp_path / "logs" / "x__a__seed0.log").read_text() == "started\n"


def test_pool_deadline_preempts_the_running_and_starts_nothing_late(tmp_path):
    # one slot: a finishes; c runs into the deadline and is preempted (exit 75); d and e never start
    tasks = parallel.parse_tasks("x:a:0,x:c:0,x:d:0,x:e:0")
    parallel.run_pool(tasks, str(tmp_path), jobs=1, deadline=2.0, grace=10.0, command=_command,
                      log=lambda *_: None)
    assert [t.state for t in tasks] == ["finished", "preempted", "not started", "not started"]
    assert tasks[1].returncode == parallel.EXIT_PREEMPTED and 1.5 < tasks[1].wall_s < 10


def test_pool_min_start_keeps_new_tasks_from_starting(tmp_path):
    tasks = parallel.parse_tasks("x:a:0,x:d:0")
    parallel.run_pool(tasks, str(tmp_path), jobs=1, deadline=1.0, min_start=5.0, command=_command,
                      log=lambda *_: None)
    assert [t.state for t in tasks] == ["not started", "not started"]


def test_main_writes_summary_and_refuses_unknown_cells(tmp_path, capsys):
    assert parallel.main(["--tasks", "converged:nosuch:0", "--jobs", "1", "--work", str(tmp_path)]) == 2
    assert "nosuch" in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()


def test_summary_table():
    t = parallel.Task("converged", "vse", 1, state="preempted", returncode=75, wall_s=12.3)
    assert "| converged__vse__seed1 | preempted | 75 | 12 |" in parallel.summary([t])
    assert json.dumps(parallel.Task("a", "b", 0).key) == '"a__b__seed0"'
