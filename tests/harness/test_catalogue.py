"""benchmarks.catalogue (the names the harness's parsers offer, importable without
torch) agrees with benchmarks.methods (the streams, presets and methods themselves)."""
from benchmarks import catalogue, methods


def test_streams_agree():
    assert list(catalogue.STREAMS) == list(methods.STREAMS)
    for name, entry in catalogue.STREAMS.items():
        spec = methods.STREAMS[name]
        assert (entry.label, entry.needs_data_root, entry.backbone) == \
            (spec.label, spec.needs_data_root, spec.backbone), name


def test_presets_agree():
    assert catalogue.PRESETS == tuple(methods.PRESETS)


def test_methods_agree_in_order():
    assert list(catalogue.METHODS) == list(methods.METHODS)
    for name, entry in catalogue.METHODS.items():
        method = methods.METHODS[name]
        assert (entry.label, entry.task_free) == (method.label, method.task_free), name
    assert catalogue.TASK_FREE_METHODS == tuple(n for n, m in methods.METHODS.items() if m.task_free)
