"""benchmarks.table2.catalogue (the names the harness's parsers offer, importable without
torch) agrees with benchmarks.table2.methods (the streams, presets and methods themselves)."""
from benchmarks.table2 import catalogue, methods, variants


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
        assert (entry.label, entry.task_free, entry.is_sdr) == (method.label, method.task_free, method.is_sdr), name
    assert catalogue.TASK_FREE_METHODS == tuple(n for n, m in methods.METHODS.items() if m.task_free)


def test_swept_baselines_are_the_baselines_with_sweep_rows():
    assert catalogue.SWEPT_BASELINES == tuple(
        n for n, m in methods.METHODS.items() if not m.is_sdr and variants.sweep_rows(variants.Row(n)))


def test_method_presets_name_harness_rows():
    """Each --method preset's rows are harness methods (an SDR row; its task-free row a
    task-free SDR row) under a reuse the harness knows. That they are the library's
    presets: tests/harness/test_harness_method_option.py."""
    for name, entry in catalogue.METHOD_PRESETS.items():
        assert methods.METHODS[entry.method].is_sdr and not methods.METHODS[entry.method].task_free, name
        assert entry.reuse in catalogue.REUSES, name
        if entry.task_free_method is not None:
            assert methods.METHODS[entry.task_free_method].is_sdr, name
            assert methods.METHODS[entry.task_free_method].task_free, name
    assert methods.SDR_ROUTER == catalogue.SDR_ROUTER
