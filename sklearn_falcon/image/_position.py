"""The position term of token features.

Random Fourier features of the token centres: appended, with a weight
``w``, to unit-norm token features, they make the cosine of two tokens
``(c + w**2 k) / (1 + w**2)``, where ``c`` is the cosine of their
features and ``k`` approximates a Gaussian kernel of the distance of their
centres (Rahimi and Recht, 2007).  Shared by the offline default
(:class:`~sklearn_falcon.image.ColorTextureFeatures`) and the ViT
extractor (:class:`~sklearn_falcon.image.TimmFeatures`).
"""

import numbers

import numpy as np

__all__ = ["N_POSITION", "check_position", "check_seed", "fourier_basis",
           "generator", "grid_positions", "position_features"]

#: Number of random Fourier features.
N_POSITION = 64


def check_position(weight, scale):
    """``(weight, scale)`` as floats, or a ValueError naming the parameter:
    ``position_weight`` must be a number >= 0, ``position_scale`` > 0."""
    if not isinstance(weight, numbers.Real) or not weight >= 0:
        raise ValueError(f"position_weight must be a number >= 0; got {weight!r}.")
    if not isinstance(scale, numbers.Real) or not scale > 0:
        raise ValueError(f"position_scale must be a positive number; got {scale!r}.")
    return float(weight), float(scale)


def check_seed(random_state, caller):
    """``random_state`` of the offline extractor ``caller``, refused as
    ``ImageSegmenter`` refuses it, by name (-1 and "a" gave NumPy's
    "expected non-negative integer" and SeedSequence's errors); a NumPy
    ``Generator`` is taken too."""
    from sklearn.utils._param_validation import validate_parameter_constraints

    validate_parameter_constraints(
        {"random_state": ["random_state", np.random.Generator]},
        {"random_state": random_state}, caller_name=caller)
    return random_state


def generator(random_state):
    """``numpy.random.default_rng(random_state)``, of a ``RandomState`` too:
    a Generator of its bit generator, as NumPy 1.25 and later make it (NumPy
    1.24, which the package admits, refused it: "SeedSequence expects int")."""
    if isinstance(random_state, np.random.RandomState):
        return np.random.Generator(random_state._bit_generator)
    return np.random.default_rng(random_state)


def fourier_basis(random_state, n_features=N_POSITION):
    """Frequencies ``(2, n)`` and phases ``(n,)``, float32, drawn from
    :func:`generator` of ``random_state``."""
    rng = generator(random_state)
    omega = rng.standard_normal((2, n_features)).astype(np.float32)
    beta = rng.uniform(0, 2 * np.pi, n_features).astype(np.float32)
    return omega, beta


def grid_positions(row_edges, col_edges):
    """Centres ``(gh, gw, 2)`` of the cells of a grid, given their edges in
    pixels, in units of the longer image side."""
    row_edges = np.asarray(row_edges, dtype=np.float64)
    col_edges = np.asarray(col_edges, dtype=np.float64)
    side = float(max(row_edges[-1], col_edges[-1]))
    cy = (row_edges[:-1] + row_edges[1:]) / 2.0 / side
    cx = (col_edges[:-1] + col_edges[1:]) / 2.0 / side
    return np.stack(np.meshgrid(cy, cx, indexing="ij"), axis=-1)


def position_features(pos, basis, weight, scale):
    """The weighted position term of positions ``pos`` (``(..., 2)``).

    Parameters
    ----------
    pos : ndarray of shape (..., 2)
        Positions in units of the longer image side.
    basis : (ndarray, ndarray)
        ``(omega, beta)`` of :func:`fourier_basis`.
    weight : float
        Norm of each returned vector (up to the sampling of the features).
    scale : float
        Bandwidth of the kernel, in units of the longer image side.

    Returns
    -------
    features : ndarray of shape (..., n), float32

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image._position import fourier_basis, position_features
    >>> z = position_features(np.zeros((3, 2)), fourier_basis(0), 0.5, 0.3)
    >>> z.shape, bool(np.allclose(np.linalg.norm(z, axis=1), 0.5, atol=0.1))
    ((3, 64), True)
    """
    omega, beta = basis
    pos = (np.asarray(pos) / scale).astype(np.float32)
    z = np.cos(pos @ omega + beta)
    z *= np.float32(weight * np.sqrt(2.0 / omega.shape[1]))
    return z
