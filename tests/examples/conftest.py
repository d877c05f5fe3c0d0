"""What the tests of the command lines share: running them as a user does, in
subprocesses started together (each imports torch and most import Avalanche: seconds
apiece), each test waiting for its own."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from avalanche_sdr import cli

REPO_ROOT = Path(__file__).resolve().parents[2]


def _command_env(**extra) -> dict:
    """The environment of a command under test: this checkout's package on
    ``PYTHONPATH`` (whatever copy is installed), one OpenMP thread, matplotlib without
    a display, no ``SDR_DEBUG``; ``extra`` on top."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop(cli.DEBUG_ENV, None)
    env.update(extra)
    return env


class Commands:
    """Commands running at once from the repository root: :meth:`start` one, call the
    object with its name to wait for ``(returncode, stdout, stderr)``."""

    root = REPO_ROOT
    env = staticmethod(_command_env)

    @staticmethod
    def example(name: str) -> list:
        """The arguments of ``python`` that run ``examples/<name>.py``."""
        return [REPO_ROOT / "examples" / f"{name}.py"]

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.procs = {}
        self.done = {}

    def start(self, name: str, arguments, env=None) -> None:
        """Start ``python *arguments`` under ``name``."""
        self.procs[name] = subprocess.Popen(
            [sys.executable, *map(str, arguments)], cwd=REPO_ROOT, env=env or _command_env(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def __call__(self, name: str):
        if name not in self.done:
            out, err = self.procs[name].communicate(timeout=self.timeout)
            self.done[name] = (self.procs[name].returncode, out, err)
        return self.done[name]

    def stop(self) -> None:
        """Kill the commands still running."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.fixture(scope="module")
def commands():
    """A module's :class:`Commands` (timeout 300 s a command); what still runs at the
    end of the module is killed."""
    group = Commands(timeout=300)
    yield group
    group.stop()
