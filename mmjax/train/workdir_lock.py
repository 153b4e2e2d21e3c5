"""One training run per workdir: a lock file the lead process holds while it trains.

    <workdir>/LOCK = {"host": …, "pid": …, "start": "<ISO time>", "argv": […]}

A scheduler that launches a job twice (or a user who starts a second run in a busy workdir) must not get two
processes writing the same checkpoints: the second run refuses at start, naming the holder. The lock is created with
O_CREAT | O_EXCL (atomic on POSIX file systems, NFS v3+ included), so two runs starting together cannot both win. A
lock left by a process that died without releasing it (SIGKILL, OOM, a lost node) is stale: when it names this host
and its pid is gone, the new run takes it over with a warning; a lock from another host cannot be checked from here,
so the run refuses and says how to clear it.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import warnings

LOCK_NAME = "LOCK"


class WorkdirLockedError(RuntimeError):
    """Another run holds the workdir; the message names it and says how to clear a stale lock."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class WorkdirLock:
    """`with WorkdirLock(workdir): …` — held for the duration of a training run (module docstring)."""

    def __init__(self, workdir: str):
        self.path = os.path.join(os.path.abspath(workdir), LOCK_NAME)
        self.held = False

    def _holder(self) -> dict | None:
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError):
            return {}  # unreadable: a lock being written, or a broken file — treated as held by an unknown process

    def acquire(self) -> "WorkdirLock":
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        me = {"host": socket.gethostname(), "pid": os.getpid(),
              "start": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "argv": list(sys.argv)}
        for _ in range(2):  # the second try follows the removal of a stale lock
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is None:
                    continue  # released between our open and our read
                if holder.get("host") == me["host"] and isinstance(holder.get("pid"), int) \
                        and not _alive(holder["pid"]):
                    warnings.warn(f"{self.path}: taking over a stale lock of pid {holder['pid']} (started "
                                  f"{holder.get('start')}), which is no longer running", stacklevel=2)
                    os.remove(self.path)
                    continue
                who = (f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('start')} "
                       f"({' '.join(holder.get('argv') or [])})" if holder else "an unreadable lock")
                raise WorkdirLockedError(
                    f"{os.path.dirname(self.path)} is in use by {who}: two runs in one workdir would write the same "
                    f"checkpoints. Use another --workdir, or wait for that run; if it is gone (e.g. its host "
                    f"died), delete {self.path}.")
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return self
        raise WorkdirLockedError(f"{self.path}: could not take the lock")

    def release(self) -> None:
        if self.held:
            holder = self._holder()
            if holder and holder.get("pid") == os.getpid():
                os.remove(self.path)
            self.held = False

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
