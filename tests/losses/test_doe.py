"""DOE's loss object: the warm-up objective CE + OE (weight 1, as the official doe_final.py),
its options and errors (the optimisation step is tested in tests/train/test_doe.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from oodbench.errors import InvalidInputError
from oodbench.losses import create


def test_warmup_objective_is_ce_plus_oe():
    g = torch.Generator().manual_seed(0)
    z, z_out = torch.randn(8, 4, generator=g), torch.randn(16, 4, generator=g)
    y = torch.randint(0, 4, (8,), generator=g)
    official_oe = -(z_out.mean(1) - torch.logsumexp(z_out, dim=1)).mean()
    torch.testing.assert_close(create("doe")(z, y, z_out), F.cross_entropy(z, y) + official_oe)


def test_defaults_and_errors():
    doe = create("doe")
    assert (doe.warmup, doe.gammas, doe.average, doe.clip_norm) == (5, [0.1, 0.01, 0.001, 0.0001], 0.6, 1.0)
    with pytest.raises(InvalidInputError, match="needs a batch of outlier images"):
        doe(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))
    for options, message in (({"warmup": -1}, "warmup"), ({"gammas": []}, "gammas"),
                             ({"average": 1.0}, "average"), ({"clip_norm": 0}, "clip_norm")):
        with pytest.raises(InvalidInputError, match=message):
            create("doe", **options)
