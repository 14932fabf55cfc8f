"""The training methods, one file each: every public module here defines a method's behaviour
and registers its :class:`~oodbench.train.method_registry.TrainingMethod` into
:data:`~oodbench.train.method_registry.METHODS` (imported on the registry's first read, as
``oodbench/detectors/`` and ``oodbench/losses/`` are).

    classifier   the classifier loop with no hooks (every plain loss: ce, logitnorm, oe, ...)
    um, umap     Unleashing Mask: the loss constraint estimate; UMAP's learned weight masks
    doe          DOE's perturbed optimisation step
    cma, npos    CLIP fine-tuning, each with a loop of its own

A new method is one file here, ending with ``register(TrainingMethod(name, description,
behaviour, needs))``, its behaviour a :class:`~oodbench.train.hooks.LoopHooks` subclass or a
trainer function on the one loop (:class:`oodbench.train.loop.TrainLoop`), and a loss that
names it (``Loss.method``; the loss is the name ``train(loss=...)`` takes).
What the methods share stays in modules of their own: :mod:`oodbench.train.hooks` (the hooks
contract), :mod:`oodbench.train.loop`, :mod:`oodbench.train.masks`,
:mod:`oodbench.train.clip_common`, :mod:`oodbench.train.npos_synthesis`,
:mod:`oodbench.train.frozen_cache`.
"""
