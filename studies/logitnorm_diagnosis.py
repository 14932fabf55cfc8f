"""Why LogitNorm trained badly in the old loss table: short runs that separate the suspects.

    .venv/bin/python studies/logitnorm_diagnosis.py      # ~3 min on one idle CPU core

The old table (5-conv CNN, 8 epochs, lr 0.1 cosine, no augmentation) reached 63 % with CE and
31-38 % with LogitNorm (tau = 0.04) on 6 CIFAR-10 classes. The suspects: the implementation,
tau, the learning rate, the epoch count. The implementation is the official one
(github.com/hongxin001/logitnorm_ood, ``common/loss_function.py``: ``CE(z / (||z|| + 1e-7) /
t)``; ``tests/losses/test_logitnorm.py`` checks it on real tensors). What this script measures:

1. **The gradient scale at initialisation.** d LN / d z = (1 / (tau ||z||)) (I - zhat zhat^T)
   (p - y) with p = softmax(z / (tau ||z||)): the gradient reaching the network is CE's
   multiplied by about 1 / (tau ||z||). A freshly initialised network has small logits, so this
   factor is large; it is printed as the ratio of the norm of d loss / d z of LN to CE's on a
   batch of real images, with the mean ||z||.
2. **Short runs** of the small-image recipe (``oodbench.train.recipe``), identical except for
   the loss, tau and the learning rate (the study's recipe ``cpu-small``, batch 64, base lr
   0.05 = 0.1 at batch 128): CE at lr 0.05; LN tau 0.04 at lr 0.05 and 0.005; LN tau 1 at lr
   0.05. Per-epoch training loss and accuracy, ID accuracy on test images and the mean logit
   norm after training.

Writes ``studies/results/logitnorm_diagnosis.json`` (with the machine's load average).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from oodbench import losses
from oodbench.data.folder import ImageFolder
from oodbench.train.recipe import RECIPES, predict_logits, train_recipe
from oodbench.train.tensor_images import normalise, tensor_images

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results" / "logitnorm_diagnosis.json"
ID = ("airplane", "automobile", "bird", "cat", "deer", "dog")
RUNS = [("ce", {}, 0.05), ("logitnorm", {"tau": 0.04}, 0.05), ("logitnorm", {"tau": 0.04}, 0.005),
        ("logitnorm", {"tau": 1.0}, 0.05)]
TRAIN_PER_CLASS, TEST_PER_CLASS, EPOCHS = 300, 200, 2


def gradient_scale(train, recipe) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Norm of d loss / d logits, LN over CE, on 512 training images at initialisation."""
    model = recipe.build(len(ID), seed=0).train()
    x = normalise(train.images[:512], recipe.mean, recipe.std)
    y = train.labels[:512]
    norms = {}
    for name, options in (("ce", {}), ("logitnorm", {"tau": 0.04})):
        z = model(x).detach().requires_grad_(True)
        losses.create(name, **options)(z, y).backward()
        norms[name] = float(z.grad.norm(dim=1).mean() * len(y))  # per-sample gradient norm
        mean_norm = float(z.detach().norm(dim=1).mean())
    return {"mean_logit_norm_at_init": mean_norm, "ce_grad_norm": norms["ce"],
            "logitnorm_grad_norm": norms["logitnorm"],
            "ratio": norms["logitnorm"] / norms["ce"],
            "one_over_tau_norm": 1.0 / (0.04 * mean_norm)}


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help; no options
    torch.set_num_threads(1)
    train = tensor_images(ImageFolder(SHARED / "cifar10-train"), per_class=TRAIN_PER_CLASS
                          ).split(ID)[0]
    test = tensor_images(ImageFolder(SHARED / "cifar10-test"), per_class=TEST_PER_CLASS
                         ).split(ID)[0]
    recipe = RECIPES["cpu-small"].scaled(epochs=EPOCHS)
    result = {"recipe": recipe.as_dict(), "train_images": len(train), "test_images": len(test),
              "machine": platform.platform(), "torch": torch.__version__, "threads": 1,
              "load_before": os.getloadavg(), "gradient_at_init": gradient_scale(train, recipe),
              "runs": []}
    print("gradient at init:", result["gradient_at_init"], flush=True)
    for loss, options, lr in RUNS:
        start = time.perf_counter()
        res = train_recipe(recipe.scaled(lr=lr), train, loss=loss, loss_options=options, seed=0,
                          log=lambda line: print(line, flush=True))
        logits = predict_logits(res.model, test, recipe)
        row = {"loss": loss, "options": options, "lr": lr,
               "id_accuracy": float((logits.argmax(1) == test.labels.numpy()).mean()),
               "mean_logit_norm": float(np.linalg.norm(logits, axis=1).mean()),
               "history": res.history, "seconds": time.perf_counter() - start}
        result["runs"].append(row)
        print(f"{loss:9s} {options} lr {lr}: acc {row['id_accuracy']:.3f}, ||z|| "
              f"{row['mean_logit_norm']:.2f}, train loss per epoch "
              f"{[round(h['loss'], 3) for h in res.history]}", flush=True)
        result["load_after"] = os.getloadavg()
        OUT.write_text(json.dumps(result, indent=1))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
