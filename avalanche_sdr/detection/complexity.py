"""Complexity measure S(j, t) of SDR (paper eqs. 7-8, after Arora et al., 2019).

Given the features ``e_i = E_j(x_i)`` that encoder ``E_j`` extracts from the ``n``
training inputs of a new task (normalised to unit length) and the one-hot labels
``Y`` [n, c], ``H`` is the Gram matrix of the ReLU neural-tangent kernel,
``A = Y^T H^{-1} Y`` and ``S = sqrt(2 ||A^T A||_F^2 / n)``. A small S means the
labels are easy to predict from the features; SDR picks ``argmin_j S(j, t)``. The
equations are in docs/method.rst, section "Complexity measure: do the earlier
features explain the new labels?".

Why the code looks as it does: ``H`` is only positive semi-definite, so it is never
inverted; everything is float64, ``H + lambda I`` is factorised by Cholesky with a
jitter escalated tenfold until it succeeds (reported by ``return_details=True``), and
only one triangle of ``H`` is computed, in place, in one ``n x n`` buffer.

The numerics and the conventions (zero rows, one class, rescaled rows) in full:
docs/method.rst, section "The complexity measure's numerics and conventions".
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence, Union

import torch

_BLOCK_ROWS = 160
"""Rows of ``H`` computed per matrix product. Blocks of 128-256 rows keep the
products large enough to run at full speed on CPU while skipping most of the upper
triangle (the Gram product then costs ``(1 + block / n) / 2`` of a full product)."""

LabelsLike = Union[torch.Tensor, Sequence[int]]


class ComplexityResult(NamedTuple):
    """Complexity measure with the numerical details of its computation.

    :param value: the measure S (dimensionless, >= 0).
    :param jitter: relative diagonal jitter actually used: ``lambda / mean(diag(H))``.
    :param diagonal_shift: the absolute shift ``lambda`` added to the diagonal of ``H``.
    :param attempts: number of Cholesky factorisations tried (1 when the first jitter
        was enough).
    :param n: number of samples (rows of the features).
    :param num_classes: number of label columns ``c`` of ``Y``.
    """

    value: float
    jitter: float
    diagonal_shift: float
    attempts: int
    n: int
    num_classes: int


def normalize_rows(features: torch.Tensor) -> torch.Tensor:
    """Normalise each row of ``features`` to unit Euclidean length.

    A zero row stays zero (its direction is undefined; the convention of this
    module is the zero vector). Rows whose float64 norm under- or overflows are
    divided by their largest absolute entry first, so every finite non-zero row gets
    a unit-length direction.

    :param features: ``[n, d]`` real tensor (any floating or integer dtype).
    :return: ``[n, d]`` float64 tensor on the same device; a new tensor, the input is
        not modified.
    :raises ValueError: if ``features`` is not 2-D, is empty, or holds NaN/Inf
        (the message gives the number of bad rows).
    :raises TypeError: if ``features`` is not a real tensor.
    """
    x = _check_features(features)
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    # One pass over x in the common case; the checks below only look at flagged rows.
    suspect = ~torch.isfinite(norms).squeeze(1) | (norms == 0).squeeze(1)
    if bool(suspect.any()):
        rows = suspect.nonzero().squeeze(1)
        sub = x[rows]
        n_bad = int((~torch.isfinite(sub).all(dim=1)).sum())
        if n_bad:
            raise ValueError(
                f"features contain NaN or Inf in {n_bad} of {x.shape[0]} rows; "
                "expected finite values"
            )
        # Finite rows whose norm overflowed, or underflowed to 0 (true zero rows
        # stay zero: amax is 0 and they are left alone).
        peak = sub.abs().amax(dim=1, keepdim=True)
        sub = sub / torch.where(peak > 0, peak, torch.ones_like(peak))
        x = x.clone()  # never write into the caller's tensor
        x[rows] = sub
        norms[rows] = torch.linalg.vector_norm(sub, dim=1, keepdim=True)
    norms = torch.where(norms > 0, norms, torch.ones_like(norms))
    if x.data_ptr() == features.data_ptr():
        return x / norms
    return x.div_(norms)  # x is already a private copy (dtype conversion or clone)


def relu_ntk_gram(features: torch.Tensor) -> torch.Tensor:
    """ReLU neural-tangent-kernel Gram matrix ``H`` of the unit-normalised features.

    ``H_ik = c_ik (pi - arccos(c_ik)) / (2 pi)`` with ``c_ik = e_i^T e_k`` the cosine of
    rows ``i`` and ``k`` clamped to [-1, 1], ``e_i`` as in :func:`normalize_rows`.
    The result is exactly symmetric and positive semi-definite up to rounding.

    Accuracy: arccos is ill-conditioned at +-1 (an error ``delta`` in a cosine near 1
    moves ``H`` by about ``sqrt(delta) / 4``, ~1e-8 for ``delta = 1e-15``). Therefore
    the diagonal is set exactly (1/2 for non-zero rows, 0 for zero rows), and cosines
    within rounding error (``4 sqrt(d)`` ulps) of +-1 count as exactly +-1, so
    duplicated or rescaled rows get exactly the diagonal value. Entries of distinct
    but nearly parallel rows keep errors of that order; elsewhere they are accurate
    to rounding.

    :param features: ``[n, d]`` real tensor.
    :return: ``[n, n]`` float64 tensor on the same device as ``features``.
    """
    unit = normalize_rows(features)
    n = unit.shape[0]
    scaled = torch.empty((n, n), dtype=torch.float64, device=unit.device)
    kernel_scale = _fill_scaled_kernel_upper(unit, scaled)
    # The buffer holds s H in its upper triangle; mirror it for exact symmetry.
    gram = scaled.triu_()
    gram += gram.triu(1).mT
    return gram.div_(kernel_scale)


def complexity_measure(
    features: torch.Tensor,
    labels: LabelsLike,
    num_classes: int | None = None,
    jitter: float = 1e-6,
    *,
    max_tries: int = 8,
    return_details: bool = False,
) -> Union[float, ComplexityResult]:
    """Complexity measure ``S = sqrt(2 ||A^T A||_F^2 / n)``, ``A = Y^T H^{-1} Y``.

    :param features: ``[n, d]`` features of the task's inputs under one encoder (any
        real dtype; computed in float64). Rows are normalised to unit length first,
        so S does not change when a row is multiplied by a positive number.
    :param labels: ``[n]`` integer class labels in ``0 .. c-1`` (tensor or sequence).
    :param num_classes: ``c``, the number of one-hot columns; default
        ``labels.max() + 1``. Must exceed every label.
    :param jitter: first relative diagonal jitter (> 0): ``H + lambda I`` with
        ``lambda = jitter * mean(diag(H))``; multiplied by 10 after every failed
        Cholesky factorisation.
    :param max_tries: most factorisations tried (>= 1) before giving up.
    :param return_details: return a :class:`ComplexityResult` (value, jitter used,
        number of attempts) instead of the bare float.
    :return: S as a python float (dimensionless), or a :class:`ComplexityResult`.
    :raises ValueError: on bad shapes, NaN/Inf features, labels that are not integers
        in ``0 .. c-1``, or bad ``jitter`` / ``max_tries``.
    :raises torch.linalg.LinAlgError: when ``H + lambda I`` is still not positive
        definite after ``max_tries`` attempts (the message names ``n`` and the last
        jitter).
    """
    if not (isinstance(jitter, (int, float)) and math.isfinite(jitter) and jitter > 0):
        raise ValueError(f"jitter must be a finite number > 0, got {jitter!r}")
    if isinstance(max_tries, bool) or not isinstance(max_tries, int) or max_tries < 1:
        raise ValueError(f"max_tries must be an int >= 1, got {max_tries!r}")
    unit = normalize_rows(features)
    n = unit.shape[0]
    y = _check_labels(labels, n, num_classes)
    c = int(num_classes) if num_classes is not None else int(y.max()) + 1  # checked above
    factor, rel_jitter, shift, attempts, kernel_scale = _kernel_factor(unit, jitter, max_tries)
    value = _measure_from_factor(factor, kernel_scale, _one_hot(y, c, unit.device))
    if return_details:
        return ComplexityResult(value, rel_jitter, shift / kernel_scale, attempts, n, c)
    return value


def permuted_label_complexity(
    features: torch.Tensor,
    labels: LabelsLike,
    num_classes: int | None = None,
    n_permutations: int = 8,
    *,
    generator: torch.Generator | None = None,
    jitter: float = 1e-6,
    max_tries: int = 8,
) -> tuple[float, list[float]]:
    """S for the true labels and for ``n_permutations`` random permutations of them.

    The permutations keep the class counts and destroy any association between
    labels and features, so they give the scale of S for *unlearnable* labels on
    these features (the random-label control of Arora et al., 2019, estimated by
    sampling). ``S_true / mean(S_perm)`` well below 1 means the labels are much
    easier than chance on this encoder. One Cholesky factorisation serves all of
    them (one triangular solve with ``c (k + 1)`` right-hand sides).

    :param features: ``[n, d]`` features (as :func:`complexity_measure`).
    :param labels: ``[n]`` labels in ``0 .. c-1``.
    :param num_classes: ``c`` (default ``labels.max() + 1``).
    :param n_permutations: k >= 1 permutations.
    :param generator: RNG of the permutations (``None``: a generator seeded with 0,
        so the result does not depend on, or change, the global RNG).
    :param jitter: first relative diagonal jitter (as :func:`complexity_measure`).
    :param max_tries: most factorisations tried.
    :return: ``(S_true, [S_perm_1, ..., S_perm_k])``, python floats.
    :raises ValueError: as :func:`complexity_measure`, or ``n_permutations < 1``.
    """
    if isinstance(n_permutations, bool) or not isinstance(n_permutations, int) or n_permutations < 1:
        raise ValueError(f"n_permutations must be an int >= 1, got {n_permutations!r}")
    if not (isinstance(jitter, (int, float)) and math.isfinite(jitter) and jitter > 0):
        raise ValueError(f"jitter must be a finite number > 0, got {jitter!r}")
    unit = normalize_rows(features)
    n = unit.shape[0]
    y = _check_labels(labels, n, num_classes)
    c = int(num_classes) if num_classes is not None else int(y.max()) + 1
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    factor, _, _, _, kernel_scale = _kernel_factor(unit, jitter, max_tries)
    one_hot = _one_hot(y, c, unit.device)
    perms = [torch.randperm(n, generator=generator).to(unit.device) for _ in range(n_permutations)]
    stacked = torch.cat([one_hot] + [one_hot[p] for p in perms], dim=1)  # [n, c (k + 1)]
    z = torch.linalg.solve_triangular(factor, stacked, upper=False)
    values = [_measure_from_z(z[:, i * c : (i + 1) * c], kernel_scale, n) for i in range(n_permutations + 1)]
    return values[0], values[1:]


def _one_hot(y: torch.Tensor, c: int, device) -> torch.Tensor:
    one_hot = torch.zeros((y.shape[0], c), dtype=torch.float64, device=device)
    one_hot[torch.arange(y.shape[0], device=device), y.to(device)] = 1.0
    return one_hot


def _kernel_factor(unit: torch.Tensor, jitter: float, max_tries: int):
    """Cholesky factor of ``K + lambda I`` (``K = s H``), see :func:`_factorize_with_jitter`."""
    n = unit.shape[0]
    # `buffer` holds K = s H (s = 2, see _fill_scaled_kernel_upper; the scale saves
    # an elementwise pass) in its upper triangle, row-major: its transpose is a
    # column-major matrix whose lower triangle is K, the layout LAPACK factorises in
    # place.
    buffer = torch.empty((n, n), dtype=torch.float64, device=unit.device)
    return _factorize_with_jitter(lambda: _fill_scaled_kernel_upper(unit, buffer), buffer, jitter, max_tries)


def _measure_from_z(z: torch.Tensor, kernel_scale: float, n: int) -> float:
    """S from ``Z = L^{-1} Y``: ``A = s Z^T Z``, ``S = sqrt(2 ||A^T A||_F^2 / n)``."""
    a = (z.mT @ z).mul_(kernel_scale)  # Y^T H^{-1} Y = s Y^T K^{-1} Y
    frob_sq = torch.linalg.matrix_norm(a.mT @ a).square()
    return float(torch.sqrt(2.0 * frob_sq / n))


def _measure_from_factor(factor: torch.Tensor, kernel_scale: float, one_hot: torch.Tensor) -> float:
    z = torch.linalg.solve_triangular(factor, one_hot, upper=False)
    return _measure_from_z(z, kernel_scale, one_hot.shape[0])


def _check_features(features: torch.Tensor) -> torch.Tensor:
    """Validate the type and shape of ``features``; return it as float64.

    The result may share memory with ``features`` (when it already is float64).
    Finiteness is checked in :func:`normalize_rows`, from the row norms.
    """
    if not isinstance(features, torch.Tensor):
        raise TypeError(f"features must be a torch.Tensor [n, d], got {type(features).__name__}")
    if features.is_complex():
        raise TypeError(f"features must be real, got dtype {features.dtype}")
    if features.dim() != 2:
        raise ValueError(f"features must have shape [n, d], got {tuple(features.shape)}")
    if features.shape[0] == 0 or features.shape[1] == 0:
        raise ValueError(f"features must be non-empty [n, d], got {tuple(features.shape)}")
    return features.detach().to(torch.float64)


def _check_labels(labels: LabelsLike, n: int, num_classes: int | None) -> torch.Tensor:
    """Validate labels against ``n`` samples and ``num_classes``; return int64 ``[n]``."""
    y = labels if isinstance(labels, torch.Tensor) else torch.as_tensor(labels)
    if y.dtype == torch.bool or y.is_floating_point() or y.is_complex():
        raise ValueError(f"labels must be an integer tensor, got dtype {y.dtype}")
    if y.dim() != 1 or y.shape[0] != n:
        raise ValueError(f"labels must have shape [{n}] to match the features, got {tuple(y.shape)}")
    y = y.to(torch.int64)
    low, high = int(y.min()), int(y.max())
    if num_classes is not None:
        if isinstance(num_classes, bool) or not hasattr(num_classes, "__index__") or num_classes < 1:
            raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
        num_classes = int(num_classes)
        if high >= num_classes:
            raise ValueError(
                f"labels must lie in 0..{num_classes - 1} (num_classes={num_classes}), "
                f"got a label {high}"
            )
    if low < 0:
        raise ValueError(f"labels must be non-negative class indices, got a label {low}")
    return y


def _fill_scaled_kernel_upper(unit: torch.Tensor, buffer: torch.Tensor) -> float:
    """Write ``K = 2 H`` into the upper triangle (and diagonal blocks) of ``buffer``.

    ``K_ik = c_ik - c_ik arccos(c_ik) / pi`` (``= c_ik (pi - arccos c_ik) / pi``) with
    the cosine ``c_ik = clamp((1 + tau) e_i^T e_k, -1, 1)``; the diagonal is set to
    exactly 1 (0 for a zero row). Entries strictly below the diagonal blocks are left
    untouched.

    ``arccos`` is ill-conditioned at +-1: the rounding error of a dot product of two
    equal unit vectors (a few ulps, growing like sqrt(d)) would give them a spurious
    angle of ~1e-8 rad and ``H`` an error of ~1e-9. The stretch ``1 + tau``, with
    ``tau = 4 sqrt(d)`` ulps just above that rounding level, makes such cosines clamp
    to exactly +-1, so duplicated or rescaled rows get exactly the diagonal value. Its
    effect elsewhere (relative ``tau`` on the cosine) is of the order of the
    rounding error of the dot product itself.

    :param unit: ``[n, d]`` float64 rows of unit length (or zero).
    :param buffer: ``[n, n]`` float64 C-contiguous output.
    :return: the scale ``s = 2`` of ``K = s H``.
    """
    n, d = unit.shape
    tau = 4.0 * math.sqrt(max(d, 16)) * torch.finfo(torch.float64).eps
    block = min(_BLOCK_ROWS, n)
    work = torch.empty((block, n), dtype=torch.float64, device=unit.device)
    for start in range(0, n, block):
        stop = min(start + block, n)
        rows = buffer[start:stop, start:]
        # beta=0: the (uninitialised) previous content of `rows` is ignored.
        torch.addmm(rows, unit[start:stop], unit[start:].mT, beta=0.0, alpha=1.0 + tau, out=rows)
        rows.clamp_(-1.0, 1.0)
        acos = torch.arccos(rows, out=work[: stop - start, : n - start])
        rows.addcmul_(rows, acos, value=-1.0 / math.pi)
    buffer.diagonal().copy_((unit != 0).any(dim=1))
    return 2.0


def _factorize_with_jitter(
    fill: Callable[[], float],
    buffer: torch.Tensor,
    jitter: float,
    max_tries: int,
) -> tuple[torch.Tensor, float, float, int, float]:
    """Cholesky factor of ``K + lambda I`` for the PSD matrix ``K = s H`` that ``fill`` writes.

    ``fill()`` writes ``K`` into the upper triangle of the C-contiguous ``[n, n]``
    ``buffer``, i.e. the lower triangle of the column-major view ``buffer.mT``, and
    returns ``s``. The first factorisation runs in place in that view; if it fails,
    ``K`` is rebuilt once and later attempts factorise into a separate buffer so that
    ``K`` survives. ``lambda = relative_jitter * mean(diag(K))``, or
    ``relative_jitter * s / 2`` when ``diag(K)`` is all zero (every feature row zero:
    the diagonal a unit row would have).

    :return: ``(L, relative_jitter, lambda, attempts, s)`` with ``L`` lower
        triangular ``[n, n]`` (column-major).
    :raises torch.linalg.LinAlgError: after ``max_tries`` failed attempts.
    """
    n = buffer.shape[0]
    kernel_scale = fill()
    matrix = buffer.mT
    diagonal = matrix.diagonal()
    mean_diag = float(diagonal.mean())
    scale = mean_diag if mean_diag > 0 else kernel_scale / 2.0
    info = torch.zeros((), dtype=torch.int32, device=buffer.device)
    factor_out: torch.Tensor | None = None
    previous_shift = 0.0
    for attempt in range(1, max_tries + 1):
        rel = float(jitter) * 10.0 ** (attempt - 1)
        shift = rel * scale
        diagonal.add_(shift - previous_shift)
        previous_shift = shift
        factor = None
        if attempt == 1:
            # In place: the factor overwrites K (saves a copy and n^2 memory). torch
            # accepts the aliasing out=; should a version refuse it, fall through.
            try:
                factor, _ = torch.linalg.cholesky_ex(matrix, out=(matrix, info))
            except RuntimeError:
                factor_out = torch.empty((n, n), dtype=torch.float64, device=buffer.device).mT
        if factor is None:
            factor, _ = torch.linalg.cholesky_ex(matrix, out=(factor_out, info))
        if int(info) == 0:
            return factor, rel, shift, attempt, kernel_scale
        if factor_out is None and attempt < max_tries:
            # The failed in-place attempt destroyed K: rebuild it once, and factorise
            # into a separate buffer from now on.
            fill()
            previous_shift = 0.0
            factor_out = torch.empty((n, n), dtype=torch.float64, device=buffer.device).mT
    raise torch.linalg.LinAlgError(
        f"complexity measure: H + lambda I (n={n}) is not positive definite after "
        f"{max_tries} Cholesky attempts; last relative jitter {rel:.3g} "
        f"(lambda={previous_shift / kernel_scale:.3g} on the diagonal of H, "
        f"mean(diag(H))={mean_diag / kernel_scale:.3g}). Check the features for "
        "degenerate values or raise jitter / max_tries."
    )


__all__ = [
    "ComplexityResult",
    "permuted_label_complexity",
    "normalize_rows",
    "relu_ntk_gram",
    "complexity_measure",
]
