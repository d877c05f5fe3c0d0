"""Tests of the generic mixed-stream generator on tiny in-memory datasets."""

import numpy as np
import pytest
import torch
from avalanche.benchmarks.scenarios.generic_scenario import MaskedAttributeError
from avalanche.models import MultiHeadClassifier
from avalanche.models.dynamic_modules import avalanche_model_adaptation
from torch.utils.data import DataLoader

from avalanche_sdr.benchmarks import (
    ImageArrayDataset,
    dataset_tensors,
    experience_tensors,
    mixed_similarity_benchmark,
    sizes_from_class_counts,
    warm_start_order,
)

GROUPS = [[0, 1], [2, 3, 4], [5, 6]]


def make_dataset(counts, seed=0):
    """uint8 images [N, 1, 4, 4] whose first two pixels encode the sample index."""
    rng = np.random.default_rng(seed)
    labels = np.concatenate([np.full(n, c, dtype=np.int64) for c, n in enumerate(counts)])
    rng.shuffle(labels)
    images = rng.integers(0, 256, size=(len(labels), 1, 4, 4), dtype=np.uint8)
    images[:, 0, 0, 0] = np.arange(len(labels)) % 256
    images[:, 0, 0, 1] = np.arange(len(labels)) // 256
    return ImageArrayDataset(images, labels, classes=[f"c{c}" for c in range(len(counts))])


def decode_index(x):
    pixels = torch.round(x[:, 0, 0, :2] * 255).to(torch.int64)
    return (pixels[:, 0] + 256 * pixels[:, 1]).numpy()


@pytest.fixture(scope="module")
def data():
    return make_dataset([30, 31, 33, 30, 36, 30, 32]), make_dataset([9, 10, 9, 12, 9, 9, 9], seed=1)


@pytest.fixture(scope="module")
def bench(data):
    train, test = data
    return mixed_similarity_benchmark(train, test, GROUPS, 3, seed=0, n_warm_start=3)


def test_streams_tasks_and_labels(bench):
    T = len(GROUPS) * 3
    assert bench.n_tasks == T
    for stream in (bench.train_stream, bench.valid_stream, bench.test_stream):
        assert len(stream) == T
        for i, exp in enumerate(stream):
            k = bench.stream_groups[i]
            assert exp.task_label == i and exp.task_labels == [i]
            assert isinstance(exp.classes_in_this_experience, list)
            assert exp.classes_in_this_experience == list(range(len(GROUPS[k])))
            assert exp.group == k and exp.split == bench.stream_splits[i]
            assert sorted(set(exp.dataset.targets)) == list(range(len(GROUPS[k])))
    assert sorted(zip(bench.stream_groups, bench.stream_splits)) == [
        (k, r) for k in range(3) for r in range(3)
    ]
    assert bench.groups == GROUPS
    assert bench.class_names == [["c0", "c1"], ["c2", "c3", "c4"], ["c5", "c6"]]
    assert bench.group_names is None


def test_datasets_are_task_aware(bench):
    # Avalanche's task-aware plugins (LwF) read task_set and targets_task_labels.
    for stream in (bench.train_stream, bench.valid_stream, bench.test_stream):
        for i, exp in enumerate(stream):
            assert list(exp.dataset.task_set.keys()) == [i]
            assert set(exp.dataset.targets_task_labels) == {i}
            assert len(exp.dataset.task_set[i]) == len(exp.dataset)


def test_batches_are_float_images_and_int64_labels(bench):
    exp = bench.train_stream[4]
    x, y, t = next(iter(DataLoader(exp.dataset, batch_size=8, collate_fn=exp.dataset.collate_fn)))
    assert x.dtype == torch.float32 and x.shape == (8, 1, 4, 4)
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    assert y.dtype == torch.int64 and t.dtype == torch.int64
    assert torch.all(t == 4)


def test_images_and_local_labels_follow_sample_indices(bench, data):
    train, test = data
    for i in (0, 5, 8):
        k = bench.stream_groups[i]
        for stream, part, source in (
            (bench.train_stream, "train", train),
            (bench.valid_stream, "valid", train),
            (bench.test_stream, "test", test),
        ):
            x, y, t = experience_tensors(stream[i])
            idx = bench.sample_indices[i][part]
            np.testing.assert_array_equal(decode_index(x), idx)
            torch.testing.assert_close(x, source.data[torch.from_numpy(idx)].float() / 255)
            expected = [GROUPS[k].index(int(c)) for c in source.targets[torch.from_numpy(idx)]]
            assert y.tolist() == expected
            assert torch.all(t == i)


def test_splits_are_disjoint_and_use_all_images(bench, data):
    train, test = data
    for k, group in enumerate(GROUPS):
        positions = [i for i, g in enumerate(bench.stream_groups) if g == k]
        train_idx = [np.concatenate([bench.sample_indices[i]["train"], bench.sample_indices[i]["valid"]]) for i in positions]
        test_idx = [bench.sample_indices[i]["test"] for i in positions]
        for parts, source in ((train_idx, train), (test_idx, test)):
            joined = np.concatenate(parts)
            assert len(np.unique(joined)) == len(joined)
            expected = np.flatnonzero(np.isin(source.targets.numpy(), group))
            np.testing.assert_array_equal(np.sort(joined), expected)


def test_all_data_sizes_and_valid_fraction(bench):
    for i, sizes in enumerate(bench.task_sizes):
        per_class = np.array(sizes["train_per_class"]) + np.array(sizes["valid_per_class"])
        # 30..36 images a class over 3 splits: 10..12 per part, 1 of them validation.
        assert np.all((per_class >= 10) & (per_class <= 12))
        assert sizes["valid_per_class"] == [1] * len(per_class)
        assert sizes["train"] == sum(sizes["train_per_class"]) == len(bench.train_stream[i].dataset)
        assert sizes["valid"] == len(bench.valid_stream[i].dataset)
        assert sizes["test"] == len(bench.test_stream[i].dataset)
        assert sizes["scaled"] is False


def test_fixed_sizes_per_group(data):
    train, test = data
    bm = mixed_similarity_benchmark(
        train, test, GROUPS, 3, seed=1,
        train_per_task=[16, 24, 16], valid_per_task=[2, 3, 2], test_per_task=[6, 9, 6],
    )
    for k, sizes in zip(bm.stream_groups, bm.task_sizes):
        c = len(GROUPS[k])
        assert sizes["train_per_class"] == [8] * c
        assert sizes["valid_per_class"] == [1] * c
        assert sizes["test_per_class"] == [3] * c
    # valid_per_task=None on top of a fixed train size: 10 % of train+valid.
    bm = mixed_similarity_benchmark(train, test, GROUPS, 3, train_per_task=[18, 27, 18], valid_fraction=0.1)
    assert all(s["valid_per_class"] == [1] * len(s["valid_per_class"]) for s in bm.task_sizes)


def test_same_seed_same_stream_other_seed_other_order(data):
    train, test = data
    a = mixed_similarity_benchmark(train, test, GROUPS, 3, seed=7)
    b = mixed_similarity_benchmark(train, test, GROUPS, 3, seed=7)
    c = mixed_similarity_benchmark(train, test, GROUPS, 3, seed=8)
    assert a.stream_groups == b.stream_groups and a.stream_splits == b.stream_splits
    for sa, sb in zip(a.sample_indices, b.sample_indices):
        for part in ("train", "valid", "test"):
            np.testing.assert_array_equal(sa[part], sb[part])
    assert list(zip(a.stream_groups, a.stream_splits)) != list(zip(c.stream_groups, c.stream_splits))
    orders = {tuple(warm_start_order(5, 2, 3, seed)) for seed in range(10)}
    assert len(orders) == 10


def test_warm_start_tasks_are_pairwise_dissimilar():
    for seed in range(30):
        for n_ws in range(0, 6):
            order = warm_start_order(5, 4, n_ws, seed)
            assert sorted(order) == [(k, r) for k in range(5) for r in range(4)]
            groups = [k for k, _ in order[:n_ws]]
            assert len(set(groups)) == n_ws


def test_warm_start_rule_is_the_documented_one():
    seed, K, R, n_ws = 3, 4, 3, 3
    tasks = [(k, r) for k in range(K) for r in range(R)]
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    permuted = [tasks[i] for i in rng.permutation(len(tasks))]
    warm, seen = [], set()
    for task in permuted:
        if len(warm) < n_ws and task[0] not in seen:
            seen.add(task[0])
            warm.append(task)
    expected = warm + [t for t in permuted if t not in warm]
    assert warm_start_order(K, R, n_ws, seed) == expected


def test_too_many_warm_start_tasks_raise(data):
    train, test = data
    with pytest.raises(ValueError, match="n_warm_start=4"):
        mixed_similarity_benchmark(train, test, GROUPS, 2, n_warm_start=4)


def test_hidden_attributes_raise_in_train_and_eval_mode(bench):
    for stream in (bench.train_stream, bench.valid_stream, bench.test_stream):
        exp = stream[2]
        assert exp.logging().group == bench.stream_groups[2]
        assert exp.logging().split == bench.stream_splits[2]
        for masked in (exp.train(), exp.eval()):
            with pytest.raises(MaskedAttributeError):
                masked.group
            with pytest.raises(MaskedAttributeError):
                masked.split
            assert masked.task_label == 2  # task labels stay visible


def test_too_few_images_name_the_class_and_counts(data):
    train, test = data
    with pytest.raises(ValueError, match=r"class 0 \('c0'\) of group 0 has 30 training images.*36 are needed"):
        mixed_similarity_benchmark(
            train, test, GROUPS, 3, train_per_task=[20, 30, 20], valid_per_task=[4, 6, 4]
        )
    with pytest.raises(ValueError, match=r"class 2 \('c2'\) of group 1 has 9 test images"):
        mixed_similarity_benchmark(train, test, GROUPS, 3, test_per_task=[2, 12, 2])


def test_scale_to_available_shrinks_a_group_equally():
    train = make_dataset([40, 40, 40, 13, 40])
    test = make_dataset([12, 12, 12, 12, 5], seed=2)
    groups = [[0, 1], [2, 3, 4]]
    bm = mixed_similarity_benchmark(
        train, test, groups, 2, train_per_task=[16, 24], valid_per_task=[4, 6],
        test_per_task=[8, 12], scale_to_available=True, n_warm_start=2,
    )
    for k, sizes in zip(bm.stream_groups, bm.task_sizes):
        if k == 0:
            assert sizes["train_per_class"] == [8, 8] and sizes["valid_per_class"] == [2, 2]
            assert sizes["test_per_class"] == [4, 4] and sizes["scaled"] is False
        else:
            # class 3 holds 13 images: 6 per split, kept 4:1 -> 5 train + 1 valid.
            assert sizes["train_per_class"] == [5, 5, 5] and sizes["valid_per_class"] == [1, 1, 1]
            # class 4 holds 5 test images: 2 per split.
            assert sizes["test_per_class"] == [2, 2, 2] and sizes["scaled"] is True
    with pytest.raises(ValueError, match=r"class 3 \('c3'\) of group 1 has 13 training images; 2 splits x \(8 train \+ 2 valid\) = 20 are needed"):
        mixed_similarity_benchmark(
            train, test, groups, 2, train_per_task=[16, 24], valid_per_task=[4, 6], n_warm_start=2
        )


def test_bad_arguments_raise(data):
    train, test = data
    with pytest.raises(ValueError, match="multiple of its 3 classes"):
        mixed_similarity_benchmark(train, test, GROUPS, 2, train_per_task=10)
    with pytest.raises(ValueError, match="class 1 appears in group 0 and again in group 1"):
        mixed_similarity_benchmark(train, test, [[0, 1], [1, 2]], 2, n_warm_start=2)
    with pytest.raises(ValueError, match="class 9"):
        mixed_similarity_benchmark(train, test, [[0, 9]], 2, n_warm_start=1)
    with pytest.raises(ValueError, match="n_splits"):
        mixed_similarity_benchmark(train, test, GROUPS, 0)
    with pytest.raises(TypeError, match="targets"):
        mixed_similarity_benchmark([(torch.zeros(1, 2, 2), 0)], test, GROUPS, 2)


def test_empty_validation_keeps_task_labels(data):
    train, test = data
    bm = mixed_similarity_benchmark(train, test, GROUPS, 2, valid_fraction=0.0)
    for i, exp in enumerate(bm.valid_stream):
        assert len(exp.dataset) == 0 and exp.task_label == i
    assert all(s["valid"] == 0 for s in bm.task_sizes)


def test_experiences_work_with_multihead_classifier(bench):
    model = MultiHeadClassifier(in_features=4, initial_out_features=2)
    for exp in bench.train_stream:
        avalanche_model_adaptation(model, exp)
    for i, exp in enumerate(bench.test_stream):
        out = model(torch.randn(2, 4), torch.full((2,), i))
        assert out.shape[1] >= len(exp.classes_in_this_experience)


def test_dataset_tensors_after_subset_and_concat(bench):
    a, b = bench.train_stream[0].dataset, bench.train_stream[1].dataset
    mixed = a.subset([3, 0, 2]).concat(b)
    x, y, t = dataset_tensors(mixed, batch_size=5)
    assert x.shape == (3 + len(b), 1, 4, 4)
    assert t[:3].tolist() == [0, 0, 0] and torch.all(t[3:] == 1)
    np.testing.assert_array_equal(decode_index(x[:3]), bench.sample_indices[0]["train"][[3, 0, 2]])


def test_sizes_from_class_counts_give_paper_table3():
    assert sizes_from_class_counts([[0, 1]] * 5, 5000, 1000, 2) == ([4500] * 5, [500] * 5, [1000] * 5)
    assert sizes_from_class_counts([[0] * 5], 500, 100, 2) == ([1125], [125], [250])
    assert sizes_from_class_counts([[0] * 5, [1, 2]], 2400, 400, 10) == (
        [1080, 432], [120, 48], [200, 80]
    )


@pytest.mark.parametrize("sizes, match", [
    (dict(train_per_task=0), r"train_per_task=0 for group 0 must be a positive multiple"),
    (dict(test_per_task=0), r"test_per_task=0 for group 0 must be a positive multiple"),
    (dict(train_per_task=2.5), r"train_per_task must be an int, or a sequence of ints with one per group; got 2.5"),
    (dict(train_per_task=[4, 2.0]), r"train_per_task must be an int"),
    (dict(valid_per_task=True), r"valid_per_task must be an int"),
    (dict(valid_per_task=-2), r"valid_per_task=-2 for group 0 must be a non-negative multiple"),
])
def test_image_counts_that_cannot_act_are_refused(sizes, match):
    data = make_dataset([20, 20, 20, 20])
    with pytest.raises(ValueError, match=match):
        mixed_similarity_benchmark(data, data, [[0, 1], [2, 3]], 2, n_warm_start=1, **sizes)
    assert len(mixed_similarity_benchmark(data, data, [[0, 1], [2, 3]], 2, n_warm_start=1, valid_per_task=0,
                                          train_per_task=4, test_per_task=2).train_stream) == 4
