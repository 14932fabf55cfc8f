"""UM / UMAP flooding loss against the official formula (utils/custom_loss.py), the sign of its
gradient on either side of L_hat, and its one-line errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from oodbench.errors import InvalidInputError
from oodbench.losses import create


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(16, 5, generator=g, dtype=torch.float64) * 2, torch.randint(0, 5, (16,), generator=g)


@pytest.mark.parametrize("name", ["um", "umap"])
@pytest.mark.parametrize(("constraint", "beta"), [(0.3, 1.0), (5.0, 1.0), (1.0, 0.5)])
def test_matches_the_official_flooding(name, constraint, beta):
    z, y = _batch()
    ours = create(name, constraint=constraint, beta=beta)(z, y)
    ce = beta * F.cross_entropy(z, y)  # CustomLoss: beta * CE, then |loss - UM| + UM
    torch.testing.assert_close(ours, (ce - constraint).abs() + constraint)


def test_gradient_flips_sign_below_the_constraint():
    z, y = _batch(1)
    ce_value = float(F.cross_entropy(z, y))
    z_ce = z.clone().requires_grad_(True)
    F.cross_entropy(z_ce, y).backward()
    for constraint, sign in ((0.5 * ce_value, 1.0), (2.0 * ce_value, -1.0)):
        zz = z.clone().requires_grad_(True)
        create("um", constraint=constraint)(zz, y).backward()
        torch.testing.assert_close(zz.grad, sign * z_ce.grad)  # descent above, ascent below L_hat


@pytest.mark.parametrize(("options", "message"), [
    ({"constraint": -1.0}, "constraint must be >= 0 or 'estimate'"),
    ({"constraint": "auto"}, "constraint must be >= 0 or 'estimate'"),
    ({"beta": 0.0}, "beta must be > 0"),
    ({"estimate_keep": 0.0}, r"estimate_keep must be in \(0, 1\] \(the mask fraction"),
    ({"estimate_keep": 1.5}, r"estimate_keep must be in \(0, 1\] \(the mask fraction"),
])
def test_errors(options, message):
    with pytest.raises(InvalidInputError, match=message) as err:
        create("um", **options)
    assert "\n" not in str(err.value)
    for keep in (0.0, -0.2, 1.01):
        with pytest.raises(InvalidInputError, match=r"keep must be in \(0, 1\] \(the mask fraction"):
            create("umap", keep=keep)
    assert create("umap", keep=1.0).keep == 1.0


def test_unestimated_constraint_is_an_error_not_plain_ce():
    z, y = _batch()
    with pytest.raises(InvalidInputError, match="has not been estimated"):
        create("um")(z, y)


#: the official mask fractions (tmlr-group/Unleashing-Mask @ 1640ce6; ``prune_rate`` is the
#: fraction *kept*, utils/conv_type.py:18 zeroes the lowest ``int((1 - k) n)`` scores): the
#: loss-constraint estimate's random masks, configs/estimate_loss/estimate_loss_cifar10.yaml:32
#: ``prune_rate: 0.965``; UMAP's learned masks, configs/smallscale/densenet_cifar10_UMAP.yaml:35
#: ``prune_rate: 0.8``; beta, args.py:101 ``--beta`` default 1.0
OFFICIAL_ESTIMATE_KEEP, OFFICIAL_UMAP_KEEP, OFFICIAL_BETA = 0.965, 0.8, 1.0


def test_defaults_are_the_official_ones():
    for name in ("um", "umap"):
        loss = create(name)
        assert loss.estimate_keep == OFFICIAL_ESTIMATE_KEEP, name
        assert loss.beta == OFFICIAL_BETA, name
        assert loss.constraint == "estimate", name
    assert create("umap").keep == OFFICIAL_UMAP_KEEP
