"""Helpers for differential tests against pytorch-ood 0.4.0 (higher = more OOD there).

``pod`` imports ``pytorch_ood.detector`` or skips the test with the reason when it is missing
(it is a dev dependency, so in CI it is present). Tolerances are relative: ``assert_rel``
checks ``|ours - ref| <= rtol * |ref|`` element-wise, with an optional absolute floor given as
a fraction of ``max |ref|`` for scores that cross zero.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import pytest
import scipy.special
import torch

from oodbench.extract.activations import Activations
from tests._tolerance import U32, U64, ULPS, gamma


def pod() -> ModuleType:
    """``pytorch_ood.detector`` (skips when pytorch-ood is not installed)."""
    return pytest.importorskip("pytorch_ood.detector")


def tensor(a: np.ndarray | None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    assert a is not None
    return torch.as_tensor(np.asarray(a)).to(dtype)


def linear(acts: Activations, dtype: torch.dtype = torch.float32) -> torch.nn.Linear:
    """``torch.nn.Linear`` holding the activations' head (what pytorch-ood calls ``head``)."""
    weight, bias = tensor(acts.head_weight, dtype), tensor(acts.head_bias, dtype)
    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    return layer


@contextmanager
def float64_default() -> Iterator[None]:
    """Run pytorch-ood code that allocates with the default dtype in float64."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextmanager
def float32_casts_as_float64() -> Iterator[None]:
    """Run pytorch-ood code that hard-codes ``tensor.float()`` (ViM) in float64, unchanged.

    Its float32 eigenvectors differ from the float64 ones by ~1e-4 of the score scale, which
    hides real differences; within this context ``Tensor.float()`` returns a float64 tensor.
    """
    original = torch.Tensor.float
    torch.Tensor.float = lambda self, *args, **kwargs: self.to(torch.float64)  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.float = original  # type: ignore[method-assign]


def assert_rel(ours: np.ndarray, ref: np.ndarray | torch.Tensor, rtol: float = 1e-5,
               floor: float = 0.0) -> None:
    """``ours`` equals ``ref`` to ``rtol`` relative (plus ``floor * max|ref|`` absolute)."""
    ref = ref.detach().cpu().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    ref = ref.astype(np.float64).reshape(-1)
    assert ours.shape == ref.shape
    atol = floor * float(np.abs(ref).max())
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol)


@dataclass(frozen=True)
class ExpPass:
    """The float32 exp pass of the softmax family, restated in float64 with its error bounds.

    For float32 logits ``z`` the detectors compute ``e_c = exp((z_c - max z) / T)`` in float32
    and sum it in float32 (``oodbench.detectors._math``; float64 logits: all in float64, with
    ``u`` the unit roundoff of the logits' dtype). Per row (N, C): ``q`` the exponents, ``e`` the
    exps (the top entry is 1), ``err`` the bound on each computed ``e_c``: the exp's ``ULPS``
    and the rounding of ``z_c - max z``, of ``T`` and of the division (which move ``q`` by
    ``3 u |q|``, a relative error of ``e_c``), plus half the smallest subnormal where ``e_c``
    underflows; per row (N,): ``s`` the mass of the classes other than the top one and ``ds``
    the bound on its sum (``gamma(C)`` of the sum on top of the terms'); ``others`` (N, C) the
    mask of the classes other than the top one; ``u`` itself.
    """

    q: np.ndarray
    e: np.ndarray
    err: np.ndarray
    s: np.ndarray
    ds: np.ndarray
    others: np.ndarray
    u: float


def exp_pass(logits: np.ndarray, temperature: float = 1.0) -> ExpPass:
    """``ExpPass`` of ``logits`` (see there)."""
    double = np.asarray(logits).dtype == np.float64
    u, tiny = (U64, 2.0**-1075) if double else (U32, 2.0**-150)
    z = np.asarray(logits, dtype=np.float64 if double else np.float32).astype(np.float64)
    q = (z - z.max(axis=1, keepdims=True)) / temperature
    e = np.exp(q)
    err = e * (2 * ULPS + 3 * np.abs(q)) * u + tiny
    top = np.argmax(z, axis=1)
    others = np.ones_like(e, dtype=bool)
    others[np.arange(len(z)), top] = False
    s = (e * others).sum(axis=1)
    ds = (err * others).sum(axis=1) + gamma(z.shape[1], u) * s
    return ExpPass(q, e, err, s, ds, others, u)


def msp_error(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Bound on |MSP - a float64 reference| per row: MSP is ``1 / (1 + s)`` in float64 from
    ``s``, off by at most ``ds / (1 + s)^2`` and float64's rounding; twice that covers the
    reference's own rounding (the same bound in float64) too."""
    ep = exp_pass(logits, temperature)
    return 2 * (ep.ds / (1.0 + ep.s) ** 2 + 4 * U64)


def energy_error(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Bound on |negative energy - a float64 reference| per row: ``max z + T log S`` with
    ``S = 1 + s`` summed in the working precision with the top term (``gamma(C)`` of the 1 on
    top of ``ds``), whose relative error is the absolute error of ``log S``; the rest is
    float64. Twice that covers the reference's own rounding too."""
    ep = exp_pass(logits, temperature)
    big = 1.0 + ep.s
    top = np.abs(np.asarray(logits, np.float64)).max(axis=1)
    rel = (ep.ds + gamma(ep.e.shape[1], ep.u)) / big
    return 2 * (temperature * rel + 4 * U64 * (top + temperature * np.log(big)))


def entropy_error(logits: np.ndarray) -> np.ndarray:
    """Bound on |-H - a float64 reference| per row for ``entropy``'s float32 pass:
    ``-H = A / (1 + s) - log1p(s)`` with ``A = sum_c e_c d_c`` a float32 dot product (each
    ``e_c`` within ``err_c``, each ``d_c = z_c - max z`` within ``u |d_c|``, the sum within
    ``gamma(C)``); the rest float64. Twice that covers the reference's own rounding too."""
    ep = exp_pass(logits)
    d = np.abs(ep.q)
    a = (ep.e * d).sum(axis=1)
    da = (ep.err * d + ep.e * ep.u * d).sum(axis=1) + gamma(d.shape[1], ep.u) * a
    big = 1.0 + ep.s
    ours = (da + ep.ds) / big + a * ep.ds / big**2
    return 2 * (ours + 4 * U64 * (a / big + np.log1p(ep.s)))


def gen_error(logits: np.ndarray, gamma_: float) -> np.ndarray:
    """Bound on |GEN - a float64 reference| per row for ``gen``'s float32 pass.

    GEN is ``-(top + sum_c t_c)`` with ``t_c = exp(gamma (log p_c + log1p(-p_c)))`` for the
    other classes among the top M, in float32, and ``top = (s / (1 + s)^2)^gamma`` in float64
    from the float32 ``s``. ``log p_c = (z_c - max z) - log1p(s)`` carries the rounding of the
    two subtractions and of ``log1p(s)`` (to float32); ``p_c`` that and its exp's ``ULPS``;
    ``log1p(-p_c)`` the error of ``p_c`` times ``p_c / (1 - p_c) <= 1`` (the non-top classes
    have ``p_c <= 1/2``) and its own ``ULPS``; ``t_c`` ``gamma`` times the error of its exponent,
    the exponent's rounding and the exp's ``ULPS``; the sum ``gamma(C)``. The bound runs over
    every non-top class (a superset of the top M). Twice that covers the reference too.
    """
    ep = exp_pass(logits)
    u, big = ep.u, 1.0 + ep.s
    log_norm = np.log1p(ep.s)[:, None]
    d_log_norm = ep.ds[:, None] / big[:, None] + u * log_norm
    p = ep.e / big[:, None]
    with np.errstate(divide="ignore"):
        log_p = np.log(p)
        log_q = np.log1p(-np.minimum(p, 0.5))
    log_p = np.where(p > 0, log_p, 0.0)
    d_log_p = u * np.abs(ep.q) + d_log_norm + u * np.abs(log_p)
    rel_p = d_log_p + 2 * ULPS * u
    arg = np.abs(log_p + log_q)
    d_arg = d_log_p + rel_p + 2 * ULPS * u * np.abs(log_q) + u * arg
    terms = np.exp(gamma_ * (log_p + log_q)) * (p > 0)
    others = ep.others
    rel_t = gamma_ * d_arg + 2 * u * gamma_ * arg + 2 * ULPS * u
    d_terms = ((terms * rel_t + 2.0**-150) * others).sum(axis=1)
    d_terms += gamma(p.shape[1], u) * (terms * others).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        top = (ep.s / big**2) ** gamma_
        d_top = np.where(ep.s > 0, top * gamma_ * (ep.ds / ep.s + 2 * ep.ds / big) * 1.01, 0.0)
    score = top + (terms * others).sum(axis=1)
    return 2 * (d_top + d_terms + 4 * U64 * score)


def head_energy_reference(shaped: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                          dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """``logsumexp(shaped @ W.T + b)`` in float64, and the bound on |the detectors' head energy
    (``_shaping.head_energy``, ``neg_energy`` after a head product in ``dtype``) - it| per row.

    The head product rounds ``shaped``, ``W`` and ``b`` to ``dtype`` and sums ``D + 1`` terms:
    each logit within ``gamma(D + 3) (|f| |W|^T + |b|)``; log-sum-exp moves by at most the
    largest logit error; then the exp pass (``energy_error``).
    """
    f, w, b = (np.asarray(a, np.float64) for a in (shaped, weight, bias))
    logits = f @ w.T + b
    u = U64 if dtype == np.float64 else U32
    logit_error = gamma(f.shape[1] + 3, u) * (np.abs(f) @ np.abs(w).T + np.abs(b))
    expected = scipy.special.logsumexp(logits, axis=1)
    bound = logit_error.max(axis=1) + energy_error(logits.astype(dtype))
    return expected, bound
