"""`lib.data.shuffled_batches`, the batch order of fine-tuning, instruction tuning and DPO: the
same batches, drawn with the same generator calls, as the loops' own code drew before it, so
every cached result trained with them stays valid."""
import numpy as np
import pytest

from lib.data import shuffled_batches


def finetune_order(n, steps, batch_size, seed):
    """The order lib.finetune.finetune drew, written as it was."""
    rng = np.random.default_rng(seed)
    passes = -(-steps * batch_size // n)
    order = np.concatenate([rng.permutation(n) for _ in range(passes)])
    return [order[step * batch_size:(step + 1) * batch_size] for step in range(steps)]


def posttrain_order(n, steps, batch_size, seed):
    """The order lib.posttrain's sft and dpo drew (its _batches), written as it was."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(n) for _ in range(-(-steps * batch_size // n))])
    return [order[s * batch_size:(s + 1) * batch_size] for s in range(steps)]


@pytest.mark.parametrize("n, steps, batch_size, seed", [(2048, 256, 16, 3), (32, 256, 16, 0), (1, 5, 1, 7),
                                                        (10, 3, 4, 1), (2500, 300, 16, 3), (2500, 80, 8, 3)])
def test_the_batches_are_the_loops_old_ones(n, steps, batch_size, seed):
    batches = shuffled_batches(n, steps, batch_size, seed)
    assert batches.shape == (steps, batch_size) and batches.dtype == np.int64
    for old in (finetune_order, posttrain_order):
        assert np.array_equal(batches, np.stack(old(n, steps, batch_size, seed)))


def test_each_pass_visits_every_example_once():
    batches = shuffled_batches(6, 6, 4, 0).reshape(4, 6)     # 24 draws: four passes over 6 examples
    assert all(sorted(row) == list(range(6)) for row in batches)


@pytest.mark.parametrize("args, name", [((0, 1, 1, 0), "n"), ((4, 0, 1, 0), "steps"), ((4, 1, 2.0, 0), "batch_size"),
                                        ((4, True, 1, 0), "steps")])
def test_bad_sizes_are_one_clear_error(args, name):
    with pytest.raises(ValueError, match=f"^{name} must be an integer >= 1, got"):
        shuffled_batches(*args)
