import numpy as np
import torch

from oodbench.losses import create
from tests.losses.conftest import log_softmax, run


def test_equals_the_soft_dice_formula(batch):
    logits, labels = batch
    p = np.exp(log_softmax(logits))
    c = logits.shape[1]
    t = np.eye(c)[labels]
    dices = [2 * (p[:, k] * t[:, k]).sum() / (p[:, k].sum() + t[:, k].sum())
             for k in range(c) if t[:, k].sum() > 0]
    value, _ = run(create("dice"), logits, labels)
    np.testing.assert_allclose(value, 1.0 - np.mean(dices), rtol=1e-12)


def test_perfect_and_uniform_predictions():
    labels = np.array([0, 1, 2])
    perfect, _ = run(create("dice"), np.eye(3) * 1e4, labels)
    np.testing.assert_allclose(perfect, 0.0, atol=1e-12)  # p = 1 - 2 e^-1e4 is 1.0 exactly
    # uniform p = 1/3: D_c = 2 (1/3) / (1 + 1) = 1/3 for each class
    uniform, _ = run(create("dice"), np.zeros((3, 3)), labels)
    np.testing.assert_allclose(uniform, 2.0 / 3.0, rtol=1e-12)


def test_float32_extreme_logits_stay_finite(batch):
    run(create("dice"), *batch, dtype=torch.float32)
