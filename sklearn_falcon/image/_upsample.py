"""Token labels -> pixel labels by prototype reassignment."""

import numpy as np

__all__ = ["bilinear_matrix", "prototype_upsample"]


def bilinear_matrix(n_out, n_in):
    """``(n_out, n_in)`` 1-D bilinear interpolation matrix (``align_corners=False``).

    Input sample ``i`` sits at the centre of cell ``i`` of a grid covering the
    same extent as the output, as for ViT patches tiling an image.

    Parameters
    ----------
    n_out : int
        Number of output samples (pixels along one axis).
    n_in : int
        Number of input samples (tokens along the same axis).

    Returns
    -------
    M : ndarray of shape (n_out, n_in), float32
        Interpolation weights; each row sums to 1, so ``M @ v`` upsamples a
        signal ``v`` of length ``n_in``.

    Examples
    --------
    >>> from sklearn_falcon.image import bilinear_matrix
    >>> bilinear_matrix(4, 2)
    array([[1.  , 0.  ],
           [0.75, 0.25],
           [0.25, 0.75],
           [0.  , 1.  ]], dtype=float32)
    """
    pos = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    pos = np.clip(pos, 0.0, n_in - 1)
    lo = np.floor(pos).astype(np.intp)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = (pos - lo).astype(np.float32)
    m = np.zeros((n_out, n_in), dtype=np.float32)
    rows = np.arange(n_out)
    np.add.at(m, (rows, lo), 1.0 - frac)
    np.add.at(m, (rows, hi), frac)
    return m


def prototype_upsample(features, token_labels, out_shape, *, return_scores=False):
    """Assign every pixel to the nearest cluster prototype.

    Prototypes are the mean L2-normalized token feature of each cluster; the
    token feature map is bilinearly upsampled to ``out_shape`` and each pixel
    takes the prototype of highest cosine similarity. Because bilinear
    interpolation is linear and the pixel's own norm does not change the
    arg-max, this equals bilinear upsampling of the token-prototype
    similarity maps, which is what is computed (no ``H x W x C`` tensor).

    Parameters
    ----------
    features : ndarray of shape (gh, gw, C)
        Token features.
    token_labels : ndarray of shape (gh, gw) or (gh * gw,)
        Cluster label of every token.
    out_shape : (int, int)
        Output ``(H, W)``.
    return_scores : bool, default=False
        Also return the ``(H, W, K)`` similarity maps.

    Returns
    -------
    labels : ndarray of shape (H, W), int64
        Pixel labels, in the same label ids as ``token_labels``.
    scores : ndarray of shape (H, W, K), float32
        Only if ``return_scores``; channel ``k`` is the ``k``-th sorted unique
        token label.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import prototype_upsample
    >>> F = np.zeros((2, 2, 2)); F[:, 0, 0] = 1; F[:, 1, 1] = 1
    >>> prototype_upsample(F, np.array([[0, 1], [0, 1]]), (2, 4))
    array([[0, 0, 1, 1],
           [0, 0, 1, 1]])
    """
    f = np.asarray(features, dtype=np.float32)
    gh, gw, c = f.shape
    lab = np.asarray(token_labels).reshape(gh, gw)
    uniq, inv = np.unique(lab, return_inverse=True)
    inv = inv.reshape(-1)
    fn = f.reshape(-1, c)
    fn = fn / np.maximum(np.linalg.norm(fn, axis=1, keepdims=True), 1e-12)
    k = len(uniq)
    onehot = np.zeros((gh * gw, k), dtype=np.float32)
    onehot[np.arange(gh * gw), inv] = 1.0
    protos = onehot.T @ fn
    protos /= np.maximum(np.linalg.norm(protos, axis=1, keepdims=True), 1e-12)
    sim = (fn @ protos.T).reshape(gh, gw, k)
    h, w = int(out_shape[0]), int(out_shape[1])
    ry, rx = bilinear_matrix(h, gh), bilinear_matrix(w, gw)
    up = np.einsum("hi,ijk->hjk", ry, sim, optimize=True)
    up = np.einsum("hjk,wj->hwk", up, rx, optimize=True)
    labels = uniq[np.argmax(up, axis=2)]
    if return_scores:
        return labels, up
    return labels
