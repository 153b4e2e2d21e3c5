"""Where the study finds the repository: from this package's own location, never from inside the mmjax package.

`reproduce/` sits at the repository root beside `bench/` and `scripts/`, so its parent directory is the root
(`ROOT`): the checkout whose commit a cell record names (`runner.code_version`) and whose history the report's Code
line asks git about (`provenance.compare`). `CONFIG_DIR` is the repository's `configs/`, the default of
`--config-dir` (`grid.build_config`).
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(ROOT, "configs")
