"""``seed_everything`` seeds every global generator a run draws from, and refuses bad seeds."""
import random

import numpy as np
import pytest
import torch

from avalanche_sdr.seeding import MAX_SEED, seed_everything


def _draws():
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_same_seed_same_draws_other_seed_other_draws():
    seed_everything(3)
    first = _draws()
    seed_everything(3)
    assert _draws() == first
    seed_everything(np.int64(3))  # numpy integers are seeds too
    assert _draws() == first
    seed_everything(4)
    assert all(a != b for a, b in zip(_draws(), first))


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (MAX_SEED + 1, ValueError), (1.0, TypeError),
                                        (True, TypeError), ("0", TypeError)])
def test_bad_seeds_are_refused(bad, error):
    with pytest.raises(error, match="seed must be"):
        seed_everything(bad)


def test_task_seeds_depend_on_the_seed_and_the_position_only():
    from avalanche_sdr.seeding import task_seed

    assert task_seed(5, 0) == 5 * 1_000_003 and task_seed(5, 3) == 5 * 1_000_003 + 3
    assert task_seed(MAX_SEED, 7) <= MAX_SEED
    assert len({task_seed(s, p) for s in range(3) for p in range(50)}) == 150
    for bad, error in [((-1, 0), ValueError), ((0, -1), ValueError), ((1.0, 0), TypeError), ((0, True), TypeError)]:
        with pytest.raises(error, match="seed must|position must"):
            task_seed(*bad)

