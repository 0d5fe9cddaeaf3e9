"""Cosine + power affinity between patch tokens (DiffCut / Falcon style)."""

from numbers import Real

import numpy as np
from sklearn.utils._param_validation import Interval, validate_params

from .._affinity import cosine_power_affinity as _cosine_power_affinity

__all__ = ["cosine_power_affinity"]


@validate_params(
    {"features": ["array-like"], "power": [Interval(Real, 0, None, closed="neither")]},
    prefer_skip_nested_validation=True,
)
def cosine_power_affinity(features, power=10.0):
    """Dense affinity ``W = ((S - min S) / (max S - min S)) ** power``.

    ``S`` is the cosine-similarity matrix of the rows of ``features``. This is
    the definition of ``FalconNCut(affinity="cosine", power=power)``, which
    this function calls (in float32).

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
    f = np.asarray(features, dtype=np.float32)
    if f.ndim == 3:
        f = f.reshape(-1, f.shape[-1])
    if f.ndim != 2 or f.shape[0] == 0:
        raise ValueError(
            f"features must be 2-D (n_tokens, n_features); got shape {f.shape}.")
    if not np.all(np.isfinite(f)):
        raise ValueError("features contain NaN or infinite values.")
    return _cosine_power_affinity(f, power)[0]
