"""``shuffle_repeat_labels``: every task after the first of its group carries its local
labels in a seeded other order, consistently in its train, validation and test data;
the ground truth is in ``label_permutations`` / ``label_matching``; the default streams
are unchanged."""

import inspect

import numpy as np
import pytest
import torch

from avalanche_sdr.benchmarks import MixedDigits, MixedFashionMNIST, experience_tensors, mixed_similarity_benchmark
from avalanche_sdr.benchmarks.image_arrays import ImageArrayDataset
from avalanche_sdr.benchmarks.mixed_stream import _PRESET_STREAM_OPTIONS, label_permutations
# tests/benchmarks is on sys.path (pytest's prepend mode): the digest of the default
# stream, as built before either option existed, is defined there once.
from test_original_class_ids import DIGITS_SEED0_DIGEST, PRESETS, STREAMS, stream_digest


def first_of_group(bm):
    seen, first = set(), []
    for k in bm.stream_groups:
        first.append(k not in seen)
        seen.add(k)
    return first


def assert_shuffled_of(default, shuffled):
    """``shuffled`` is ``default`` with class ``groups[k][j]`` of experience i labelled
    ``label_permutations[i][j]``: same images, order, task labels, groups, splits."""
    assert default.shuffle_repeat_labels is False and shuffled.shuffle_repeat_labels is True
    assert all(p == list(range(len(p))) for p in default.label_permutations)
    assert shuffled.groups == default.groups and shuffled.stream_groups == default.stream_groups
    assert shuffled.stream_splits == default.stream_splits and shuffled.n_warm_start == default.n_warm_start
    for a, b in zip(default.sample_indices, shuffled.sample_indices):
        for part in ("train", "valid", "test"):
            np.testing.assert_array_equal(a[part], b[part])
    first = first_of_group(shuffled)
    for i, permutation in enumerate(shuffled.label_permutations):
        c = len(shuffled.groups[shuffled.stream_groups[i]])
        assert sorted(permutation) == list(range(c))
        assert (permutation == list(range(c))) == (first[i] or c == 1)  # shuffled exactly when repeated
        for part in ("train", "valid", "test"):
            per_class = default.task_sizes[i][f"{part}_per_class"]
            assert shuffled.task_sizes[i][f"{part}_per_class"] == [per_class[permutation.index(label)]
                                                                    for label in range(c)]
        ids = shuffled.task_class_ids(i)
        assert [ids[label] for label in permutation] == default.task_class_ids(i)
    for name in STREAMS:
        for i, (exp_d, exp_s) in enumerate(zip(getattr(default, name), getattr(shuffled, name))):
            x, y, t = experience_tensors(exp_d)
            x_s, y_s, t_s = experience_tensors(exp_s)
            assert torch.equal(x, x_s) and torch.equal(t, t_s)
            assert y_s.dtype == torch.int64
            assert torch.equal(y_s, torch.tensor(shuffled.label_permutations[i])[y])  # same map in every stream
            assert exp_s.task_labels == exp_d.task_labels == [i]
            assert exp_s.classes_in_this_experience == exp_d.classes_in_this_experience
            assert exp_s.group == exp_d.group and exp_s.split == exp_d.split  # ground truth unchanged
            # Every label's images are those of one original class.
            ids = torch.tensor(shuffled.task_class_ids(i))
            assert torch.equal(ids[y_s], torch.tensor(default.task_class_ids(i))[y])


def test_default_digits_streams_are_unchanged():
    assert stream_digest(MixedDigits(seed=0, shuffle_repeat_labels=False)) == DIGITS_SEED0_DIGEST
    assert stream_digest(MixedDigits(seed=0)) == DIGITS_SEED0_DIGEST


def test_digits_shuffled():
    default, shuffled = MixedDigits(seed=0), MixedDigits(seed=0, shuffle_repeat_labels=True)
    assert_shuffled_of(default, shuffled)
    assert stream_digest(shuffled) != DIGITS_SEED0_DIGEST
    # Two-class groups: every repeat swaps its labels.
    first = first_of_group(shuffled)
    assert [p for p, f in zip(shuffled.label_permutations, first) if not f] == [[1, 0]] * 5
    again = MixedDigits(seed=0, shuffle_repeat_labels=True)
    assert again.label_permutations == shuffled.label_permutations
    assert stream_digest(again) == stream_digest(shuffled)


def make_dataset(counts, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.concatenate([np.full(n, c, dtype=np.int64) for c, n in enumerate(counts)])
    images = rng.integers(0, 256, size=(len(labels), 1, 3, 3), dtype=np.uint8)
    return ImageArrayDataset(images, labels)


GROUPS = [[7, 0, 3, 5], [1, 6, 2], [4]]  # 4, 3 and 1 classes, not in sorted order


@pytest.mark.parametrize("in_memory", [True, False], ids=["in_memory", "lazy"])
def test_generic_groups_of_several_sizes(in_memory):
    train, test = make_dataset([40] * 8), make_dataset([12] * 8, seed=1)
    options = dict(seed=5, n_warm_start=3, in_memory=in_memory)
    default = mixed_similarity_benchmark(train, test, GROUPS, 4, **options)
    shuffled = mixed_similarity_benchmark(train, test, GROUPS, 4, shuffle_repeat_labels=True, **options)
    assert_shuffled_of(default, shuffled)
    repeats = [p for p, f in zip(shuffled.label_permutations, first_of_group(shuffled)) if not f and len(p) > 1]
    assert len(repeats) == 6 and len({tuple(p) for p in repeats}) > 2  # several different orders
    for seed in (6, 7):
        other = mixed_similarity_benchmark(train, test, GROUPS, 4, seed=seed, n_warm_start=3,
                                           shuffle_repeat_labels=True)
        assert other.label_permutations != shuffled.label_permutations or other.stream_groups != shuffled.stream_groups


def test_label_matching_is_the_ground_truth_of_a_class_permutation():
    train, test = make_dataset([40] * 8), make_dataset([12] * 8, seed=1)
    bm = mixed_similarity_benchmark(train, test, GROUPS, 4, seed=5, n_warm_start=3, shuffle_repeat_labels=True)
    for i in range(bm.n_tasks):
        for e in range(bm.n_tasks):
            if bm.stream_groups[i] != bm.stream_groups[e]:
                with pytest.raises(ValueError, match="groups"):
                    bm.label_matching(i, e)
                continue
            matching = bm.label_matching(i, e)
            # Class labelled k in experience i is labelled matching[k] in experience e.
            assert [bm.task_class_ids(e)[matching[k]] for k in range(len(matching))] == bm.task_class_ids(i)
            assert bm.label_matching(e, i) == [matching.index(k) for k in range(len(matching))]
    with pytest.raises(IndexError):
        bm.label_matching(0, bm.n_tasks)


def test_permutations_use_their_own_generator():
    order = [(0, 0), (1, 0), (0, 1), (0, 2), (1, 1)]
    groups = [[0, 1, 2], [3, 4]]
    np.random.seed(0)
    torch_state, np_state = torch.get_rng_state(), np.random.get_state()
    first = label_permutations(order, groups, seed=3, shuffle=True)
    assert torch.equal(torch_state, torch.get_rng_state())
    assert np.array_equal(np_state[1], np.random.get_state()[1]) and np_state[2] == np.random.get_state()[2]
    assert first[:2] == [[0, 1, 2], [0, 1]] and first[4] == [1, 0]
    assert all(p != [0, 1, 2] and sorted(p) == [0, 1, 2] for p in first[2:4])
    np.random.seed(1)
    assert label_permutations(order, groups, seed=3, shuffle=True) == first
    assert label_permutations(order, groups, seed=3, shuffle=False) == [[0, 1, 2], [0, 1], [0, 1, 2], [0, 1, 2], [0, 1]]


def test_shuffle_with_original_class_ids_is_refused():
    with pytest.raises(ValueError, match="original_class_ids"):
        MixedDigits(seed=0, shuffle_repeat_labels=True, original_class_ids=True)
    with pytest.raises(ValueError, match="must be a bool"):
        MixedDigits(seed=0, shuffle_repeat_labels=1)


def _tiny_loader(n_classes):
    def load(*args, **kwargs):
        return tuple(make_dataset([n] * n_classes, seed) for n, seed in ((50, 0), (10, 1)))
    return load


def test_a_file_preset_forwards_the_option(monkeypatch):
    from avalanche_sdr.benchmarks import sources

    monkeypatch.setattr(sources, "load_fashion_mnist", _tiny_loader(10))
    options = dict(n_splits=3, seed=1, train_per_task=20, valid_per_task=4, test_per_task=4)
    assert_shuffled_of(MixedFashionMNIST("unused", **options),
                       MixedFashionMNIST("unused", shuffle_repeat_labels=True, **options))


def test_every_preset_takes_and_documents_the_option():
    assert "shuffle_repeat_labels" in _PRESET_STREAM_OPTIONS
    for preset in PRESETS:
        parameter = inspect.signature(preset).parameters["shuffle_repeat_labels"]
        assert parameter.default is False and parameter.kind is inspect.Parameter.KEYWORD_ONLY
        assert ":param shuffle_repeat_labels:" in preset.__doc__
    assert ":param shuffle_repeat_labels:" in mixed_similarity_benchmark.__doc__
