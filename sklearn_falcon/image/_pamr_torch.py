"""Torch twins of the PAMR kernels of :mod:`sklearn_falcon.image._pamr`.

Same names and semantics as the Numba kernels, on ``torch.Tensor`` (any
device): ``_affinities`` maps a channel-first ``(C, H, W)`` float64 image to
the ``(P, H, W)`` float32 softmax weights of each pixel's ``P`` dilated
neighbours, and ``_propagate`` runs ``n_iter`` steps of
``m(x) <- sum_q aff_q(x) m(x + offset_q)`` on ``(K, H, W)`` float32 masks.
Neighbours outside the image are clamped to the border (replicate padding).
Pure functions: no validation and no NumPy (the conversion is done by
:func:`sklearn_falcon.image.pamr`).  This module imports torch at import
time; import it only when torch is wanted.
"""

import torch
import torch.nn.functional as F


def _shifted(padded, r, dy, dx, h, w):
    """``a(y + dy, x + dx)`` from ``a`` replicate-padded by ``r``: ``(..., H, W)``."""
    return padded[..., r + dy:r + dy + h, r + dx:r + dx + w]


def _pad(a, r):
    return F.pad(a.unsqueeze(0), (r, r, r, r), mode="replicate")[0]


def _affinities(img, offsets, n_dilations):
    """Softmax weights ``(P, H, W)``; ``offsets`` is a list of ``(dy, dx)``."""
    c, h, w = img.shape
    p = len(offsets)
    r = max(max(abs(dy), abs(dx)) for dy, dx in offsets)
    padded = _pad(img, r)
    n_std = p + n_dilations  # the 8 neighbours and the centre, per dilation
    s = n_dilations * img
    s2 = n_dilations * img * img
    for dy, dx in offsets:
        v = _shifted(padded, r, dy, dx, h, w)
        s = s + v
        s2 = s2 + v * v
    m = s / n_std
    std = ((s2 - n_std * m * m) / (n_std - 1)).clamp_min(0.0).sqrt()
    scale = 1e-8 + 0.1 * std
    logits = torch.empty((p, h, w), dtype=img.dtype, device=img.device)
    for q, (dy, dx) in enumerate(offsets):
        diff = (_shifted(padded, r, dy, dx, h, w) - img).abs() / scale
        logits[q] = -diff.sum(0) / c
    return torch.softmax(logits, dim=0).to(torch.float32)


def _propagate(mask, aff, offsets, n_iter):
    """``n_iter`` propagation steps of the ``(K, H, W)`` masks."""
    _, h, w = mask.shape
    r = max(max(abs(dy), abs(dx)) for dy, dx in offsets)
    cur = mask
    for _ in range(n_iter):
        padded = _pad(cur, r)
        nxt = torch.zeros_like(cur)
        for q, (dy, dx) in enumerate(offsets):
            nxt += aff[q] * _shifted(padded, r, dy, dx, h, w)
        cur = nxt
    return cur
