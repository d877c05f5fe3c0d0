"""Fixtures of the harness tests."""
import pytest

from benchmarks.table2 import executors


@pytest.fixture
def faked_runs(monkeypatch):
    """``fake(result)``: from then on the harness's local executor runs nothing; each spec
    it is given gets ``result(spec)`` in this process. ``fake`` returns the list of the specs
    asked for, filled as the harness asks."""

    def fake(result):
        ran = []

        def local_results(todo, jobs):
            for spec in todo:
                ran.append(spec)
                yield spec, result(spec)

        monkeypatch.setattr(executors, "local_results", local_results)
        return ran

    return fake
