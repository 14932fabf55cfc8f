"""Input coercion and the error messages of the metrics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oodbench.errors import EmptyInputError, InvalidInputError, NonFiniteError, OodbenchError
from oodbench.metrics._validate import as_bool, as_class_indices, as_scores, check_tpr


@pytest.mark.parametrize(
    "value",
    [
        [1, 2, 3],
        (1.0, 2.0, 3.0),
        np.array([1, 2, 3], dtype=np.int8),
        np.array([1, 2, 3], dtype=np.float16),
        torch.tensor([1, 2, 3], dtype=torch.bfloat16),
        torch.tensor([1, 2, 3], dtype=torch.float16, requires_grad=True),
        torch.tensor([1, 2, 3], dtype=torch.int64),
    ],
)
def test_scores_become_float64(value):
    scores = as_scores(value, "s")
    assert scores.dtype == np.float64
    np.testing.assert_array_equal(scores, [1.0, 2.0, 3.0])


def test_bf16_and_fp16_values_are_kept_exactly():
    t = torch.randn(1000, dtype=torch.float32)
    for dtype in (torch.bfloat16, torch.float16):
        np.testing.assert_array_equal(as_scores(t.to(dtype), "s"), t.to(dtype).double().numpy())


def test_infinities_are_scores():
    np.testing.assert_array_equal(as_scores([-np.inf, 0, np.inf], "s"), [-np.inf, 0, np.inf])


def test_nan_message_says_how_many_and_where():
    x = np.zeros(100)
    x[[2, 5, 7, 8, 9, 40, 99]] = np.nan
    with pytest.raises(NonFiniteError) as info:
        as_scores(x, "id_scores")
    message = str(info.value)
    assert "id_scores contains 7 NaN value(s) out of 100" in message
    assert "[2, 5, 7, 8, 9, ...]" in message
    assert isinstance(info.value, OodbenchError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "value, error, pattern",
    [
        ([], EmptyInputError, "s is empty"),
        (np.zeros((0,)), EmptyInputError, "s is empty"),
        (3.0, InvalidInputError, "got a scalar"),
        (np.zeros((2, 3)), InvalidInputError, r"shape \(2, 3\)"),
        (["x"], InvalidInputError, "real numbers"),
        ([1 + 2j], InvalidInputError, "real numbers"),
        ([1, None], InvalidInputError, "real numbers"),
    ],
)
def test_bad_scores(value, error, pattern):
    with pytest.raises(error, match=pattern):
        as_scores(value, "s")


def test_bool_coercion():
    np.testing.assert_array_equal(as_bool([1, 0, 1.0], "c"), [True, False, True])
    np.testing.assert_array_equal(as_bool(torch.tensor([True, False]), "c"), [True, False])
    with pytest.raises(InvalidInputError, match=r"1 value\(s\) are neither.*\[1\]"):
        as_bool([1, 2, 0], "c")
    with pytest.raises(InvalidInputError, match="booleans"):
        as_bool(["yes"], "c")


def test_class_indices():
    assert as_class_indices(torch.tensor([3, 1], dtype=torch.int32), "p").dtype == np.int64
    with pytest.raises(InvalidInputError, match="argmax"):
        as_class_indices(np.zeros(3, dtype=np.float32), "p")


@pytest.mark.parametrize("good", [0, 0.5, 1, 1.0])
def test_tpr_in_unit_interval(good):
    assert check_tpr(good) == float(good)


@pytest.mark.parametrize("bad", [95, -1e-9, 1.0000001, float("nan")])
def test_tpr_outside_unit_interval(bad):
    with pytest.raises(InvalidInputError, match="tpr must be a fraction"):
        check_tpr(bad)
