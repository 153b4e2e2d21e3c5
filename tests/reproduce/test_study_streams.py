"""scripts/study_streams.sh: every command it runs is one `python -m reproduce` accepts, and its cells build at their
budget (a typo would otherwise surface hours into a stream)."""

import os
import re
import shlex
import subprocess

from reproduce import grid
from reproduce.__main__ import parse_args

SCRIPT = os.path.join(grid.paths.ROOT, "scripts", "study_streams.sh")


def _commands():
    text = open(SCRIPT).read().replace("\\\n", " ")
    return [shlex.split(m) for m in re.findall(r"^\s*run (.+?)(?: ;;)?$", text, re.M)]


def test_every_command_parses_and_its_cells_build(tmp_path):
    commands = _commands()
    assert len(commands) == 11
    outs, runs = {}, []
    for argv in commands:
        args = parse_args(argv + ["--archive", "docs/reproduction/records", "--no-report"])
        cells = grid.make_grid(args.seeds, args.cells.split(","), first_seed=args.first_seed)
        outs.setdefault(args.out, set()).add(args.budget)
        for cell in cells:
            if cell.spec.only_seed is None:   # a Flow-CLIP base its heads share comes with each head's command
                runs.append((cell.name, cell.seed, args.budget))
            study = cell.spec.group == "fcstudy"
            assert study == (args.budget in grid.FLOWCLIP_STUDY_BUDGETS), (argv, cell.name)
            grid.build_config(cell, args.budget, str(tmp_path / re.sub(r"\W", "_", args.out)))
    # One budget per output directory (a directory refuses another budget's cells).
    assert all(len(b) == 1 for b in outs.values()), outs
    assert len(runs) == len(set(runs)), "a cell, seed and budget named twice would train twice"
    assert {n for n, _, b in runs if b == "converged" and n.endswith("_fn")} == \
        {"vse_fn", "setdiv_fn", "pvse_fn", "pvse_maxmatch_fn", "sh_full_fn"}   # the protocol's last runs


def test_unknown_stream_is_refused():
    r = subprocess.run(["bash", SCRIPT, "c"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown stream 'c'" in r.stderr
