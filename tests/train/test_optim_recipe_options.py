"""``OptimSettings``' recipe options ``nesterov`` and ``min_lr`` (oodbench.train.optim): what
they change, where they are refused (no silent no-op), how records keep earlier keys, and how a
training config's changes drop a recipe's value that would no longer apply."""

from __future__ import annotations

import math

import pytest
import torch

from oodbench.errors import InvalidInputError
from oodbench.train.config import TrainSettings
from oodbench.train.method_defaults import DOE
from oodbench.train.optim import FINETUNE, OptimSettings, lr_factor


def test_nesterov_reaches_the_sgd_optimiser():
    net = torch.nn.Linear(2, 2)
    assert FINETUNE.make_optimizer(net.parameters()).param_groups[0]["nesterov"] is False
    on = OptimSettings(nesterov=True).make_optimizer(net.parameters())
    assert on.param_groups[0]["nesterov"] is True


def test_min_lr_is_where_the_cosine_ends():
    """factor(s) = f + (1 - f) * cos_part with f = min_lr / lr: 1 at the start, f at the end,
    and the plain cosine's midpoint 0.5 lifted to f + (1 - f) / 2."""
    f = 0.25
    assert lr_factor(0, 100, 0, "cosine", floor=f) == 1.0
    assert lr_factor(100, 100, 0, "cosine", floor=f) == pytest.approx(f, abs=1e-15)
    assert lr_factor(50, 100, 0, "cosine", floor=f) == pytest.approx(f + (1 - f) / 2, abs=1e-15)
    assert lr_factor(50, 100, 0, "cosine") == pytest.approx(0.5 * (1 + math.cos(math.pi / 2)))


@pytest.mark.parametrize(("settings", "names"), [
    ({"optimizer": "adamw", "nesterov": True}, ("nesterov", "sgd")),
    ({"schedule": "constant", "min_lr": 1e-6}, ("min_lr", "cosine")),
    ({"lr": 0.01, "min_lr": 0.01}, ("min_lr", "lr=0.01")),
    ({"min_lr": -1.0}, ("min_lr",)),
    ({"nesterov": 1}, ("nesterov",)),
])
def test_a_recipe_option_that_would_do_nothing_is_refused(settings, names):
    with pytest.raises(InvalidInputError) as err:
        OptimSettings(**settings)
    assert all(n in str(err.value) for n in names)


def test_records_leave_the_options_out_at_their_defaults():
    assert "nesterov" not in FINETUNE.as_dict() and "min_lr" not in FINETUNE.as_dict()
    assert DOE.optim.as_dict()["nesterov"] is True and DOE.optim.as_dict()["min_lr"] == 1e-6


def test_a_config_changing_the_schedule_or_optimiser_drops_the_recipes_option():
    assert TrainSettings(loss="doe").optim() == DOE.optim
    constant = TrainSettings(loss="doe", schedule="constant").optim()
    assert constant.min_lr == 0.0 and constant.nesterov is True
    adamw = TrainSettings(loss="doe", optimizer="adamw").optim()
    assert adamw.nesterov is False and adamw.min_lr == 1e-6
    assert TrainSettings(loss="doe", nesterov=False).optim().nesterov is False
    assert TrainSettings(loss="doe", min_lr=1e-4).optim().min_lr == 1e-4


def test_a_method_with_its_own_warm_up_keeps_the_settings_floor_and_milestones():
    """CMA states its warm-up as a loss option; the rest of its schedule (the cosine's floor,
    a step schedule's milestones) still comes from the settings: one scheduler for all."""
    settings = OptimSettings(lr=0.1, epochs=4, min_lr=0.01)
    opt = settings.make_optimizer(torch.nn.Linear(2, 2).parameters())
    scheduler = settings.make_scheduler(opt, steps_per_epoch=5, warmup=3)
    factors = [scheduler.lr_lambdas[0](s) for s in range(20)]
    floor = settings.min_lr / settings.lr  # the share the cosine ends at
    assert factors == [lr_factor(s, 20, 3, "cosine", floor=floor) for s in range(20)]
    assert factors[:3] == [1 / 3, 2 / 3, 1.0] and factors[-1] > 0.1


def test_every_training_entry_point_builds_its_schedule_through_the_settings():
    """No module but optim.py makes a LambdaLR: a method building its own would drop
    ``min_lr`` and the step schedule's milestones without a word."""
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src" / "oodbench"
    makers = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if "LambdaLR(" in p.read_text())
    assert makers == ["train/optim.py"]
