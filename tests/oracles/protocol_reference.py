"""Re-statements of OpenOOD v1.5's postprocessors and of the official C-OOD code's confidence
functions, written from their definitions and independent of ``oodbench.detectors``.

Used by ``tests/oracles/protocol_parity.py`` (the fidelity table) and by
``tests/detectors/test_protocol_parity.py``. Each function takes the arrays a postprocessor would
see (training / validation features and logits, the linear head ``W (C, D)``, ``b (C,)``, the
test features and logits) and returns the postprocessor's confidence (higher = more ID, as
OpenOOD's ``conf``). Read at:

- OpenOOD: github.com/Jingkang50/OpenOOD, commit 3c35632ee91b54b09d1f085d04f94744cece7d0b
  (2025-12-01): ``openood/postprocessors/<name>_postprocessor.py``, ``openood/networks/
  {ash,scale,react}_net.py``, ``openood/evaluation_api/evaluator.py``.
- C-OOD: github.com/mdabbah/COOD_benchmarking, commit 8964aadfaa5172fb80ca26ab418c6ede914f2d53
  (2024-05-27): ``utils/confidence_functions.py``, ``utils/misc.py``.

Library calls are the ones the references make where it matters (``np.percentile`` of the
flattened activations, sklearn's ``EmpiricalCovariance``, faiss flat indexes, ``torch.linalg.svd``,
``torch.optim.LBFGS``); arithmetic is float64 where the references use float32 on the GPU, so
that what the comparison measures is the definition, not the float precision.
"""

from __future__ import annotations

from collections.abc import Callable

import faiss
import numpy as np
import scipy.spatial.distance
import scipy.special
import torch
import torch.nn.functional as F
from sklearn.covariance import EmpiricalCovariance

#: OpenOOD's data loaders' batch size (Evaluator default), for NNGuide's bank rule
OPENOOD_BATCH = 200
#: the C-OOD code's ODIN divides the signed gradient by this, whatever the model
IMAGENET_STD = (0.229, 0.224, 0.225)


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _softmax(logits: np.ndarray) -> np.ndarray:
    return scipy.special.softmax(_f64(logits), axis=1)


def _energy(logits: np.ndarray) -> np.ndarray:
    return scipy.special.logsumexp(_f64(logits), axis=1)


def _normalizer(x: np.ndarray) -> np.ndarray:
    """OpenOOD's ``x / ||x|| + 1e-10`` (the constant is added after the division)."""
    x = _f64(x)
    return x / np.linalg.norm(x, axis=-1, keepdims=True) + 1e-10


# -- OpenOOD v1.5: logit postprocessors --------------------------------------------------------
def openood_msp(logits: np.ndarray) -> np.ndarray:
    """``BasePostprocessor``: max softmax."""
    return _softmax(logits).max(axis=1)


def openood_mls(logits: np.ndarray) -> np.ndarray:
    """``MaxLogitPostprocessor``: max logit."""
    return _f64(logits).max(axis=1)


def openood_ebo(logits: np.ndarray, temperature: float) -> np.ndarray:
    """``EBOPostprocessor``: ``T logsumexp(z / T)``."""
    return temperature * scipy.special.logsumexp(_f64(logits) / temperature, axis=1)


def openood_gen(logits: np.ndarray, gamma: float, m: int) -> np.ndarray:
    """``GENPostprocessor``: ``-sum`` over the M largest probabilities of ``p^g (1 - p)^g``."""
    top = np.sort(_softmax(logits), axis=1)[:, -m:]
    return -np.sum(top**gamma * (1.0 - top) ** gamma, axis=1)


def openood_temperature(val_logits: np.ndarray, val_labels: np.ndarray) -> float:
    """``TemperatureScalingPostprocessor.setup``: L-BFGS (lr 0.01, max_iter 50) on the ID-val
    cross-entropy of ``logits / T`` from T = 1.5."""
    logits = torch.as_tensor(_f64(val_logits))
    labels = torch.as_tensor(np.asarray(val_labels, dtype=np.int64))
    t = torch.nn.Parameter(torch.ones(1, dtype=torch.float64) * 1.5)
    opt = torch.optim.LBFGS([t], lr=0.01, max_iter=50)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(logits / t, labels)
        loss.backward()
        return loss

    opt.step(closure)
    return float(t.detach())


def openood_temp_scaling(val_logits: np.ndarray, val_labels: np.ndarray, logits: np.ndarray
                         ) -> np.ndarray:
    """Max softmax of ``logits / T`` with OpenOOD's L-BFGS T."""
    return openood_msp(_f64(logits) / openood_temperature(val_logits, val_labels))


def openood_klm(val_logits: np.ndarray, logits: np.ndarray, chunk: int = 16) -> np.ndarray:
    """``KLMatchingPostprocessor``: templates = mean ID-val softmax per predicted class (one-hot
    for a class never predicted); score ``-min_k scipy.stats.entropy(p, d_k)``."""
    p_val = _softmax(val_logits)
    pred = p_val.argmax(axis=1)
    num_classes = p_val.shape[1]
    templates = np.eye(num_classes)
    for k in np.unique(pred):
        templates[k] = p_val[pred == k].mean(axis=0)
    templates /= templates.sum(axis=1, keepdims=True)  # scipy.stats.entropy normalises
    p = _softmax(logits)
    p /= p.sum(axis=1, keepdims=True)
    out = np.empty(len(p))
    for s in range(0, len(p), chunk):
        kl = scipy.special.rel_entr(p[s : s + chunk, None, :], templates[None]).sum(axis=2)
        out[s : s + chunk] = -kl.min(axis=1)
    return out


# -- OpenOOD v1.5: feature postprocessors ------------------------------------------------------
def _class_stats(features: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Class means of the classes present and the tied precision (``EmpiricalCovariance`` of
    the class-centred float32 features, as ``MDSPostprocessor``)."""
    feats, labels = _f64(features), np.asarray(labels)
    classes = np.unique(labels[labels >= 0])
    means = np.stack([feats[labels == c].mean(axis=0) for c in classes])
    centred = np.concatenate([feats[labels == c] - means[i] for i, c in enumerate(classes)])
    cov = EmpiricalCovariance(assume_centered=False).fit(centred.astype(np.float32))
    return means, _f64(cov.precision_)


def _max_neg_mahalanobis(features: np.ndarray, means: np.ndarray, precision: np.ndarray) -> np.ndarray:
    """``-(f - mu_c)^T P (f - mu_c)`` for every row and class, (N, C): with ``P = M M^T`` (from
    the eigendecomposition of the symmetric precision) it is ``-||f M - mu_c M||^2``."""
    eigvals, eigvecs = np.linalg.eigh((precision + precision.T) / 2)
    m = eigvecs * np.sqrt(np.clip(eigvals, 0.0, None))
    return -scipy.spatial.distance.cdist(_f64(features) @ m, _f64(means) @ m, "sqeuclidean")


def openood_mds(train_features: np.ndarray, train_labels: np.ndarray, features: np.ndarray
                ) -> np.ndarray:
    """``MDSPostprocessor``: ``max_c -(f - mu_c)^T P (f - mu_c)`` (classes with training rows)."""
    means, precision = _class_stats(train_features, train_labels)
    return _max_neg_mahalanobis(features, means, precision).max(axis=1)


def openood_rmds(train_features: np.ndarray, train_labels: np.ndarray, features: np.ndarray
                 ) -> np.ndarray:
    """``RMDSPostprocessor``: ``max_c [-(MD_c) - (-(MD_0))]`` with a background Gaussian of all
    training features."""
    means, precision = _class_stats(train_features, train_labels)
    labelled = _f64(train_features)[np.asarray(train_labels) >= 0]
    whole_mean = labelled.mean(axis=0)
    whole = EmpiricalCovariance(assume_centered=False).fit((labelled - whole_mean).astype(np.float32))
    background = _max_neg_mahalanobis(features, whole_mean[None], _f64(whole.precision_))[:, 0]
    return (_max_neg_mahalanobis(features, means, precision) - background[:, None]).max(axis=1)


def openood_knn(train_features: np.ndarray, features: np.ndarray, k: int) -> np.ndarray:
    """``KNNPostprocessor``: ``-D[:, -1]``, the squared L2 distance to the k-th nearest
    normalised training feature (faiss ``IndexFlatL2``)."""
    bank = np.ascontiguousarray(_normalizer(train_features), dtype=np.float32)
    index = faiss.IndexFlatL2(bank.shape[1])
    index.add(bank)
    dist, _ = index.search(np.ascontiguousarray(_normalizer(features), dtype=np.float32), k)
    return -_f64(dist[:, -1])


def openood_vim(train_features: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                features: np.ndarray, dim: int, eigensolver: str = "eig") -> np.ndarray:
    """``VIMPostprocessor``: residual space of ``EmpiricalCovariance(assume_centered=True)`` of
    ``f - u`` (``u = -pinv(W) b``) beyond the ``dim`` largest eigenvalues (``np.linalg.eig``, or
    the symmetric ``np.linalg.eigh`` with ``eigensolver="eigh"``: the same decomposition, with
    orthonormal eigenvectors also where the covariance is singular); ``alpha`` = mean max train
    logit / mean train residual norm; score = energy - alpha residual (real parts)."""
    w, b, train = _f64(weight), _f64(bias), _f64(train_features)
    u = -np.linalg.pinv(w) @ b
    cov = EmpiricalCovariance(assume_centered=True).fit(train - u).covariance_
    eig_vals, eig_vecs = np.linalg.eig(cov) if eigensolver == "eig" else np.linalg.eigh(cov)
    ns = np.ascontiguousarray(np.real(eig_vecs.T[np.argsort(np.real(eig_vals) * -1)[dim:]]).T)
    alpha = (train @ w.T + b).max(axis=1).mean() / np.linalg.norm((train - u) @ ns, axis=-1).mean()
    feats = _f64(features)
    return _energy(feats @ w.T + b) - alpha * np.linalg.norm((feats - u) @ ns, axis=-1)


def openood_she(train_features: np.ndarray, train_labels: np.ndarray, train_logits: np.ndarray,
                features: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """``SHEPostprocessor`` (inner product): ``f . S_pred`` with ``S_c`` the mean training feature
    of class c over the rows predicted correctly."""
    feats, labels = _f64(train_features), np.asarray(train_labels)
    pred = np.asarray(train_logits).argmax(axis=1)
    patterns = np.zeros((np.asarray(logits).shape[1], feats.shape[1]))
    for c in np.unique(labels[labels >= 0]):
        rows = (labels == c) & (pred == c)
        if rows.any():
            patterns[c] = feats[rows].mean(axis=0)
    return np.sum(_f64(features) * patterns[np.asarray(logits).argmax(axis=1)], axis=1)


def openood_nnguide_bank_rows(n_train: int, alpha: float, batch_size: int = OPENOOD_BATCH) -> np.ndarray:
    """The training rows ``NNGuidePostprocessor.setup`` keeps: whole loader batches, in order,
    until ``batches * batch_size > int(n * alpha)``."""
    batches = int(n_train * alpha) // batch_size + 1
    return np.arange(min(n_train, batches * batch_size))


def openood_nnguide(train_features: np.ndarray, train_logits: np.ndarray, features: np.ndarray,
                    logits: np.ndarray, k: int, bank_rows: np.ndarray) -> np.ndarray:
    """``NNGuidePostprocessor``: bank ``normalizer(f_i) * logsumexp(z_i)``; score = mean of the k
    largest inner products (faiss ``IndexFlatIP``) of ``normalizer(f)`` times ``logsumexp(z)``."""
    bank = _normalizer(_f64(train_features)[bank_rows]) * _energy(_f64(train_logits)[bank_rows])[:, None]
    index = faiss.IndexFlatIP(bank.shape[1])
    index.add(np.ascontiguousarray(bank, dtype=np.float32))
    sims, _ = index.search(np.ascontiguousarray(_normalizer(features), dtype=np.float32), k)
    return _f64(sims).mean(axis=1) * _energy(logits)


def openood_fdbd(train_features: np.ndarray, weight: np.ndarray, features: np.ndarray,
                 logits: np.ndarray, distance_as_normalizer: bool) -> np.ndarray:
    """``fDBDPostprocessor``: ``sum_c |z_max - z_c| / ||w_pred - w_c||`` (diagonal denominator 1)
    over ``||f - mean_train||`` (or ``||f||``)."""
    w, z, feats = _f64(weight), _f64(logits), _f64(features)
    num_classes = w.shape[0]
    denominator = np.stack([np.linalg.norm(w - w[p], axis=1) for p in range(num_classes)])
    np.fill_diagonal(denominator, 1.0)
    pred = z.argmax(axis=1)
    boundary = np.sum(np.abs(z - z.max(axis=1, keepdims=True)) / denominator[pred], axis=1)
    centre = _f64(train_features).mean(axis=0) if distance_as_normalizer else 0.0
    return boundary / np.linalg.norm(feats - centre, axis=1)


def openood_nci(train_features: np.ndarray, weight: np.ndarray, features: np.ndarray,
                logits: np.ndarray, alpha: float) -> np.ndarray:
    """``NCIPostprocessor``: ``w_pred . (f - mu) / ||f - mu|| + alpha ||f||_1``."""
    feats = _f64(features)
    centred = feats - _f64(train_features).mean(axis=0)
    w_pred = _f64(weight)[np.asarray(logits).argmax(axis=1)]
    return np.sum(w_pred * centred, axis=1) / np.linalg.norm(centred, axis=1) + alpha * np.abs(feats).sum(axis=1)


def _head_energy(features: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return _energy(_f64(features) @ _f64(weight).T + _f64(bias))


def openood_react(val_features: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                  features: np.ndarray, percentile: float) -> np.ndarray:
    """``ReactPostprocessor``: threshold = ``np.percentile`` of all ID-val activations; energy of
    the head on ``clip(f, max=threshold)``."""
    threshold = np.percentile(_f64(val_features).flatten(), percentile)
    return _head_energy(np.minimum(_f64(features), threshold), weight, bias)


def openood_dice(train_features: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                 features: np.ndarray, p: float) -> np.ndarray:
    """``DICEPostprocessor``: contributions ``mean_train * W``, mask ``> np.percentile(., p)``,
    energy of the masked head (bias kept)."""
    contrib = _f64(train_features).mean(axis=0)[None, :] * _f64(weight)
    masked = _f64(weight) * (contrib > np.percentile(contrib, p))
    return _head_energy(features, masked, bias)


def _keep(n: int, percentile: float) -> int:
    return n - int(np.round(n * percentile / 100.0))


def openood_ash(weight: np.ndarray, bias: np.ndarray, features: np.ndarray, percentile: float
                ) -> np.ndarray:
    """``ASHPostprocessor`` (``ash_net.ash_b`` on the pooled features): keep the top k, set them
    to ``sum / k``, zero the rest; energy of the head."""
    x = torch.as_tensor(_f64(features))
    k = _keep(x.shape[1], percentile)
    _, idx = torch.topk(x, k, dim=1)
    fill = (x.sum(dim=1) / k)[:, None].expand(-1, k)
    shaped = torch.zeros_like(x).scatter_(1, idx, fill)
    return _head_energy(shaped.numpy(), weight, bias)


def openood_scale(weight: np.ndarray, bias: np.ndarray, features: np.ndarray, percentile: float
                  ) -> np.ndarray:
    """``ScalePostprocessor`` (``scale_net.scale``): ``f * exp(s1 / s2)``, s2 = sum of the top k."""
    x = torch.as_tensor(_f64(features))
    k = _keep(x.shape[1], percentile)
    s2 = torch.topk(x, k, dim=1).values.sum(dim=1)
    return _head_energy((x * torch.exp(x.sum(dim=1) / s2)[:, None]).numpy(), weight, bias)


def openood_vra(val_features: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                features: np.ndarray, percentile_high: float, percentile_low: float) -> np.ndarray:
    """``VRAPostprocessor``: global ID-val percentiles, ``clip(f, low, high)``, head energy."""
    flat = _f64(val_features).flatten()
    high, low = np.percentile(flat, percentile_high), np.percentile(flat, percentile_low)
    return _head_energy(np.clip(_f64(features), low, high), weight, bias)


def openood_gradnorm(weight: np.ndarray, bias: np.ndarray, features: np.ndarray) -> np.ndarray:
    """``GradNormPostprocessor``: per sample, ``sum |d/dW sum_c -log softmax(W f + b)_c|``
    (targets of all ones), by autograd on an ``nn.Linear``."""
    fc = torch.nn.Linear(weight.shape[1], weight.shape[0], dtype=torch.float64)
    with torch.no_grad():
        fc.weight.copy_(torch.as_tensor(_f64(weight)))
        fc.bias.copy_(torch.as_tensor(_f64(bias)))
    out = np.empty(len(features))
    for i, f in enumerate(torch.as_tensor(_f64(features))):
        fc.zero_grad()
        loss = torch.sum(-F.log_softmax(fc(f[None]), dim=-1), dim=-1).mean()
        loss.backward()
        assert fc.weight.grad is not None
        out[i] = float(fc.weight.grad.abs().sum())
    return out


def openood_mcm(weight: np.ndarray, features: np.ndarray, tau: float) -> np.ndarray:
    """``MCMPostprocessor`` on ``networks/clip.py``: max softmax of normalised image features
    times normalised class embeddings, over tau."""
    f = _f64(features) / np.linalg.norm(_f64(features), axis=1, keepdims=True)
    w = _f64(weight) / np.linalg.norm(_f64(weight), axis=1, keepdims=True)
    return _softmax(f @ w.T / tau).max(axis=1)


def openood_rankfeat_block4(weight: np.ndarray, bias: np.ndarray, feature_map: np.ndarray) -> np.ndarray:
    """The Block-4 half of ``RankFeatPostprocessor`` (``accelerate=False``): subtract
    ``s1 u1 v1^T`` (``torch.linalg.svd``) from each (C, HW) map, average-pool, head, logsumexp."""
    x = torch.as_tensor(_f64(feature_map))
    b, c, h, w = x.shape
    flat = x.reshape(b, c, h * w)
    u, s, v = torch.linalg.svd(flat, full_matrices=False)
    flat = flat - s[:, 0:1].unsqueeze(2) * u[:, :, 0:1].bmm(v[:, 0:1, :])
    pooled = flat.reshape(b, c, h, w).mean(dim=(2, 3))
    return _head_energy(pooled.numpy(), weight, bias)


def openood_mos(logits: np.ndarray, classes_per_group: list[int]) -> np.ndarray:
    """``MOSPostprocessor`` (``cal_ood_score``): contiguous blocks of ``n_k + 1`` logits, the
    "others" output first; ``max_k -softmax(block_k)[0]``."""
    z, start, scores = _f64(logits), 0, []
    for n in classes_per_group:
        scores.append(-_softmax(z[:, start : start + n + 1])[:, 0])
        start += n + 1
    return np.max(np.stack(scores, axis=1), axis=1)


def openood_odin(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, temperature: float,
                 noise: float, input_std: tuple[float, ...]) -> np.ndarray:
    """``ODINPostprocessor``: CE of ``z / T`` against the prediction, sign via
    ``torch.ge(grad, 0)``, divided by the std per channel, ``x - noise * grad``; max softmax of
    ``z(x') / T``."""
    x = x.detach().clone().requires_grad_(True)
    output = model(x)
    labels = output.detach().argmax(dim=1)
    loss = torch.nn.CrossEntropyLoss()(output / temperature, labels)
    loss.backward()
    assert x.grad is not None
    gradient = (torch.ge(x.grad.detach(), 0).float() - 0.5) * 2
    for ch, std in enumerate(input_std):
        gradient[:, ch] = gradient[:, ch] / std
    with torch.no_grad():
        out = model(x.detach() - noise * gradient).double() / temperature
    return torch.softmax(out, dim=1).max(dim=1).values.numpy()


# -- the official C-OOD code ---------------------------------------------------------------------
def cood_code_softmax(logits: np.ndarray) -> np.ndarray:
    """``extract_softmax_on_dataset``: max softmax."""
    return _softmax(logits).max(axis=1)


def cood_code_max_logit(logits: np.ndarray) -> np.ndarray:
    """``extract_max_logit_on_dataset``: max logit."""
    return _f64(logits).max(axis=1)


def cood_code_entropy(logits: np.ndarray) -> np.ndarray:
    """``extract_entropy_on_dataset``: ``-Categorical(probs=softmax).entropy()``."""
    p = torch.as_tensor(_softmax(logits))
    return (-torch.distributions.Categorical(probs=p).entropy()).numpy()


def cood_code_odin(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                   temperature: float = 2.0, noise: float = 1e-5) -> np.ndarray:
    """``extract_odin_confidences_on_dataset``: ``F.cross_entropy(softmax(z), argmax)`` (mean),
    sign via ``torch.ge``, divided by the ImageNet std, ``x - noise * grad``, then the max of
    ``softmax((z(x') / T) - max)``."""
    x = x.detach().clone().requires_grad_(True)
    logits = model(x)
    probs = F.softmax(logits, dim=1)
    _, predictions = torch.max(probs, dim=1)
    F.cross_entropy(probs, predictions).backward()
    assert x.grad is not None
    gradient = (torch.ge(x.grad, 0).float() - 0.5) * 2
    gradient = gradient / torch.tensor(IMAGENET_STD, dtype=gradient.dtype).view(1, 3, 1, 1)
    with torch.no_grad():
        new_logits = model(x.detach() - noise * gradient).double() / temperature
        new_logits = new_logits - new_logits.max(dim=1, keepdim=True).values
    return F.softmax(new_logits, dim=1).max(dim=1).values.numpy()


def cood_code_mcd_entropy(pass_softmaxes: torch.Tensor) -> np.ndarray:
    """``MC_Dropout_Pass``: ``-sum mean log(mean + eps)`` of the mean softmax over the passes
    (``pass_softmaxes``: (passes, N, C)), eps = the smallest positive float."""
    mean = pass_softmaxes.double().mean(dim=0)
    eps = float(np.finfo(np.float64).tiny)
    return (torch.sum(mean * torch.log(mean + eps), dim=-1)).numpy()
