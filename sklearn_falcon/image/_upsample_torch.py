"""Torch twins of the upsampling kernels of :mod:`sklearn_falcon.image._upsample`.

Same names and semantics, on ``torch.Tensor`` (any device); pure functions,
no validation and no NumPy (the conversion is done by the public functions
through the NumPy/torch boundary).  This module imports torch at import
time; import it only when torch is wanted.
"""

import torch
import torch.nn.functional as F

# bytes of working memory of one strip of rows of the label upsampling
STRIP_BYTES = 64 << 20


def strip_rows(width, n_labels):
    """Rows per strip of :func:`_joint_bilateral_labels` for ``STRIP_BYTES``."""
    per_row = max(1, width) * (n_labels + 8) * 8
    return max(1, STRIP_BYTES // per_row)


def _joint_bilateral_labels(strip, y0, h_out, small_image, small_labels, ids, radius,
                            sigma_s, sigma_c, floor):
    """Labels ``(S, W)`` of the rows ``y0 .. y0 + S`` of an image of ``h_out``
    rows (``strip`` is ``(S, W, C)``); see the Numba kernel."""
    s, w_out, _ = strip.shape
    h, w = small_labels.shape
    dev = strip.device
    f64 = torch.float64
    fy = (torch.arange(y0, y0 + s, device=dev, dtype=f64) + 0.5) * (h / h_out) - 0.5
    fx = (torch.arange(w_out, device=dev, dtype=f64) + 0.5) * (w / w_out) - 0.5
    iy0, ix0 = torch.floor(fy).long(), torch.floor(fx).long()
    img = strip.to(f64)
    small = small_image.to(f64)
    inv_s = 1.0 / (2.0 * sigma_s * sigma_s)
    inv_c = 1.0 / (2.0 * sigma_c * sigma_c)
    acc = torch.zeros((s, w_out, ids.shape[0]), dtype=f64, device=dev)
    for a in range(-radius + 1, radius + 1):
        iy = iy0 + a
        qy = iy.clamp(0, h - 1)
        dy2 = (fy - iy) ** 2
        rows_img, rows_lab = small[qy], small_labels[qy]
        for b in range(-radius + 1, radius + 1):
            ix = ix0 + b
            qx = ix.clamp(0, w - 1)
            dx2 = (fx - ix) ** 2
            dc = ((img - rows_img[:, qx]) ** 2).sum(-1)
            wt = (torch.exp(-dy2 * inv_s)[:, None] * torch.exp(-dx2 * inv_s)[None, :]
                  * (torch.exp(-dc * inv_c) + floor))
            acc.scatter_add_(2, rows_lab[:, qx].unsqueeze(-1), wt.unsqueeze(-1))
    return ids[acc.argmax(dim=-1)]


def _prototype_labels(features, token_labels, n_labels, out_shape):
    """Pixel label indices ``(H, W)`` by prototype reassignment: cosine of
    each token to each cluster's mean normalized feature, bilinearly
    upsampled (``align_corners=False``, the borders clamped, as
    :func:`~sklearn_falcon.image.bilinear_matrix`), arg-max.
    ``features`` is ``(gh, gw, C)``, ``token_labels`` ``(gh * gw,)`` indices
    in ``[0, n_labels)``."""
    gh, gw, c = features.shape
    fn = F.normalize(features.reshape(-1, c).float(), dim=1, eps=1e-12)
    onehot = F.one_hot(token_labels, n_labels).float()
    protos = F.normalize(onehot.T @ fn, dim=1, eps=1e-12)
    sim = (fn @ protos.T).T.reshape(1, n_labels, gh, gw)
    up = F.interpolate(sim, size=tuple(out_shape), mode="bilinear", align_corners=False)
    return up[0].argmax(dim=0)
