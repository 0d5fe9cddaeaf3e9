"""Cosine + power affinity between patch tokens (DiffCut / Falcon style)."""

import numbers

import numpy as np

__all__ = ["cosine_power_affinity"]


def cosine_power_affinity(features, power=10.0):
    """Dense affinity ``W = ((S - min S) / (max S - min S)) ** power``.

    ``S`` is the cosine-similarity matrix of the rows of ``features``. This is
    the definition of ``FalconNCut(affinity="cosine", power=power)``.

    Parameters
    ----------
    features : array-like of shape (n_tokens, n_features) or (gh, gw, n_features)
        Token features; a grid is flattened in row-major order.
    power : float, default=10.0
        Sharpening exponent (DiffCut and Falcon use about 10 for ViT tokens).

    Returns
    -------
    W : ndarray of shape (n_tokens, n_tokens), float32
        Symmetric, entries in [0, 1]. If all similarities are equal, ``W`` is
        all ones.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import cosine_power_affinity
    >>> F = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    >>> np.round(cosine_power_affinity(F, power=1.0), 3)
    array([[1.   , 0.995, 0.   ],
           [0.995, 1.   , 0.1  ],
           [0.   , 0.1  , 1.   ]], dtype=float32)
    """
    if not isinstance(power, numbers.Real) or not power > 0:
        raise ValueError(f"power must be a positive number; got {power!r}.")
    f = np.asarray(features, dtype=np.float32)
    if f.ndim == 3:
        f = f.reshape(-1, f.shape[-1])
    if f.ndim != 2 or f.shape[0] == 0:
        raise ValueError(f"features must be 2-D (n_tokens, n_features); got shape {f.shape}.")
    if not np.all(np.isfinite(f)):
        raise ValueError("features contain NaN or infinite values.")
    norms = np.linalg.norm(f, axis=1, keepdims=True)
    f = f / np.maximum(norms, np.float32(1e-12))
    s = f @ f.T
    s = (s + s.T) * np.float32(0.5)
    lo, hi = float(s.min()), float(s.max())
    if hi - lo <= 1e-12:
        return np.ones_like(s)
    s -= np.float32(lo)
    s *= np.float32(1.0 / (hi - lo))
    np.clip(s, 0.0, 1.0, out=s)
    if power != 1:
        s **= np.float32(power)
    return s
