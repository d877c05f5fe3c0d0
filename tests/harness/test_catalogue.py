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


def test_method_preset_rows_are_sdr_rows_of_the_librarys_presets():
    """Each row that is a library method preset names one of ``avalanche_sdr.training.METHODS``
    and is an SDR row; a task-free one is scored with its preset's routers. That they build
    the library's presets: tests/harness/test_method_preset_rows.py."""
    from avalanche_sdr import training

    presets = {name: entry.method_preset for name, entry in catalogue.METHODS.items() if entry.method_preset}
    assert sorted(presets.values()) == sorted(training.METHODS)
    for name, preset in presets.items():
        method = methods.METHODS[name]
        assert method.is_sdr, name
        if method.task_free:
            assert method.routers == tuple(training.METHODS[preset].routers), name
    assert catalogue.DEFAULT_METHODS == tuple(n for n in catalogue.METHODS if n not in presets)
    assert methods.SDR_ROUTER == catalogue.SDR_ROUTER
