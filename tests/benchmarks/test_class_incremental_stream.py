"""``class_incremental_stream``: a benchmark's stream with task label 0, the same samples."""
import pytest
import torch
from avalanche.benchmarks.scenarios.generic_scenario import MaskedAttributeError
from torchvision import transforms

from avalanche_sdr.benchmarks import MixedDigits, class_incremental_stream, experience_tensors


@pytest.fixture(scope="module")
def digits_bm():
    return MixedDigits(seed=0, original_class_ids=True)


def test_same_samples_and_labels_with_task_label_zero(digits_bm):
    stream = class_incremental_stream(digits_bm)
    assert stream.name == "test" and len(stream) == len(digits_bm.test_stream)
    for i, (new, old) in enumerate(zip(stream, digits_bm.test_stream)):
        assert new.current_experience == i
        assert new.task_label == 0 and new.task_labels == [0]
        assert new.classes_in_this_experience == old.classes_in_this_experience
        assert len(new.dataset) == len(old.dataset)
        for k in (0, len(old.dataset) - 1):
            (x, y, t), (x_old, y_old, t_old) = new.dataset[k], old.dataset[k]
            assert torch.equal(x, x_old) and y == y_old and t == 0 and t_old == i
        x, y, t = experience_tensors(new)
        assert bool((t == 0).all()) and set(y.tolist()) == set(digits_bm.task_class_ids(i))


def test_hidden_ground_truth_stays_hidden(digits_bm):
    new = class_incremental_stream(digits_bm)[3]
    assert new.logging().group == digits_bm.stream_groups[3]
    assert new.logging().split == digits_bm.stream_splits[3]
    with pytest.raises(MaskedAttributeError):
        new.eval().group


def test_name_other_streams_and_the_benchmark_link(digits_bm):
    stream = class_incremental_stream(digits_bm, "valid", name="valid_ci")
    assert stream.name == "valid_ci" and len(stream) == len(digits_bm.valid_stream)
    assert stream[0].origin_stream.benchmark is digits_bm
    with pytest.raises(AttributeError):
        class_incremental_stream(digits_bm, "holdout")


def test_transform_groups_are_kept():
    transformed = MixedDigits(seed=0, original_class_ids=True, eval_transform=transforms.Lambda(lambda x: 1 - x))
    new, old = class_incremental_stream(transformed)[0], transformed.test_stream[0]
    assert torch.equal(new.dataset.eval()[0][0], old.dataset.eval()[0][0])
    assert torch.equal(new.dataset.eval()[0][0], 1 - new.dataset.train()[0][0])  # the eval group applies


def test_local_labels_are_refused():
    with pytest.raises(ValueError, match="original_class_ids=True"):
        class_incremental_stream(MixedDigits(seed=0))
