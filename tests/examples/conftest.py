"""What the tests of the command lines share: running them as a user does, in
subprocesses, a few at a time.

A module queues its commands up front (:meth:`Commands.start`) and each test waits for
its own (``commands(name)``). At most :data:`MAX_RUNNING` run at once, started in
order as earlier ones finish (the one a test waits for first): argument errors end in
a fraction of a second, before torch is imported, but a command that reads data or
trains imports torch and Avalanche (seconds, ~1 GB each), and dozens of those at once
overload a small machine.
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from avalanche_sdr import cli

REPO_ROOT = Path(__file__).resolve().parents[2]

MAX_RUNNING = 2
"""Commands running at once (a command uses one torch thread)."""


def _command_env(**extra) -> dict:
    """The environment of a command under test: this checkout's package on
    ``PYTHONPATH`` (whatever copy is installed), one OpenMP thread, matplotlib without
    a display, no ``SDR_DEBUG``; ``extra`` on top."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop(cli.DEBUG_ENV, None)
    env.update(extra)
    return env


class _Running:
    """One started command: its process, output files and deadline."""

    def __init__(self, arguments, env, timeout: float):
        self.out = tempfile.TemporaryFile(mode="w+")  # files, not pipes: a command never blocks on output
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, *map(str, arguments)], cwd=REPO_ROOT, env=env,
                                     stdout=self.out, stderr=self.err, text=True)
        self.deadline = time.monotonic() + timeout

    def finish(self) -> tuple:
        """Wait until it ends (killed at the deadline): ``(returncode, stdout, stderr)``."""
        try:
            self.proc.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return self.proc.returncode, self._read(self.out), self._read(self.err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        self.err.close()

    @staticmethod
    def _read(file) -> str:
        file.seek(0)
        text = file.read()
        file.close()
        return text


class Commands:
    """Commands run from the repository root, at most ``max_running`` at once:
    :meth:`start` queues one, calling the object with its name waits for
    ``(returncode, stdout, stderr)``.

    :param timeout: seconds a command may run, from its own start (it is then killed
        and the waiting test fails with ``subprocess.TimeoutExpired``).
    """

    root = REPO_ROOT
    env = staticmethod(_command_env)

    @staticmethod
    def example(name: str) -> list:
        """The arguments of ``python`` that run ``examples/<name>.py``."""
        return [REPO_ROOT / "examples" / f"{name}.py"]

    def __init__(self, timeout: float, max_running: int = MAX_RUNNING):
        self.timeout = timeout
        self.max_running = max_running
        self.queued = {}  # name -> (arguments, env), in start order
        self.running = {}  # name -> _Running, in start order
        self.done = {}  # name -> (returncode, stdout, stderr)

    def start(self, name: str, arguments, env=None) -> None:
        """Queue ``python *arguments`` under ``name``; it starts when fewer than
        ``max_running`` commands run."""
        if name in self.queued or name in self.running or name in self.done:
            raise ValueError(f"a command named {name!r} was already started")
        self.queued[name] = (list(arguments), env or _command_env())
        self._start_queued()

    def __call__(self, name: str):
        if name not in self.done:
            if name in self.queued:  # wanted now: first in the queue
                self.queued = {name: self.queued.pop(name), **self.queued}
            while name not in self.running and name not in self.done:
                self._finish(next(iter(self.running)))  # the oldest: frees a slot
            if name in self.running:
                self._finish(name)
        if isinstance(self.done[name], Exception):
            raise self.done[name]
        return self.done[name]

    def _finish(self, name: str) -> None:
        """Wait for a running command; a timeout is kept for the test that asks for it."""
        try:
            self.done[name] = self.running.pop(name).finish()
        except subprocess.TimeoutExpired as timeout:
            self.done[name] = timeout
        self._start_queued()

    def _start_queued(self) -> None:
        for name, command in list(self.running.items()):  # collect the ones that ended
            if command.proc.poll() is not None:
                self.done[name] = self.running.pop(name).finish()  # no wait: it has ended
        while self.queued and len(self.running) < self.max_running:
            name = next(iter(self.queued))
            arguments, env = self.queued.pop(name)
            self.running[name] = _Running(arguments, env, self.timeout)

    def stop(self) -> None:
        """Kill the commands still running and forget the queued ones."""
        self.queued.clear()
        for command in self.running.values():
            command.kill()
        self.running.clear()


@pytest.fixture(scope="module")
def commands():
    """A module's :class:`Commands` (at most 2 at once, 600 s a command from its own
    start: the longest, a training smoke run, takes ~1 min on a loaded machine); what
    still runs at the end of the module is killed."""
    group = Commands(timeout=600)
    yield group
    group.stop()


@pytest.fixture(scope="session")
def fake_emnist():
    """``make(per_class_train=60, per_class_test=20, seed=0)``: see :func:`_fake_emnist`."""
    return _fake_emnist


def _fake_emnist(per_class_train: int = 60, per_class_test: int = 20, seed: int = 0):
    """(train, test) pairs of random 28x28 uint8 images ``[N, 28, 28]`` with labels ``[N]``,
    ``per_class_*`` images of each of EMNIST bymerge's 47 classes (for ``write_emnist_root``)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    parts = []
    for n in (per_class_train, per_class_test):
        labels = np.repeat(np.arange(47), n)
        parts.append((rng.integers(0, 256, size=(len(labels), 28, 28)), labels))
    return parts


EXAMPLES = ("quickstart", "fashion_mnist", "fashion_mnist_50", "emnist_100", "cifar10_10", "cifar100_40")
"""Every example script (``examples/<name>.py``), for the :func:`examples` fixture."""


@pytest.fixture
def examples(monkeypatch):
    """``{name: the script's globals}`` for every example, and ``"_common"``: their helper
    module, run as modules (not ``__main__``), with the examples' folder first on the
    import path as ``python examples/<name>.py`` has it."""
    import runpy

    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples"))
    monkeypatch.delitem(sys.modules, "_common", raising=False)
    loaded = {name: runpy.run_path(str(REPO_ROOT / "examples" / f"{name}.py"), run_name=f"example_{name}")
              for name in EXAMPLES}
    loaded["_common"] = sys.modules["_common"]
    return loaded
