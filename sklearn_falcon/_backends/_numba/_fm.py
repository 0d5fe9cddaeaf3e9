"""Localized Fiduccia-Mattheyses (FM) searches with the exact change of ``f``
(Numba).

The solver's exact single-node moves (:mod:`._polish`) take a node only
where the move raises ``f`` at once.  On a mesh, the boundary of two
clusters that should run elsewhere (along lighter edges, or a few rows
over) is a local optimum of those moves: moving one node of a straight
boundary cuts more edges than it uncuts, and only a whole strip of nodes,
moved together, pays.  An FM search finds such strips: from a seed node of
the boundary it repeatedly moves the unlocked node of best gain (even a
negative one) among the seed and the neighbours of the nodes it has moved,
and at the end rolls back to the best prefix of its moves (KaHIP's
localized k-way FM, with the gain of ``f = sum_k assoc_k / vol_k`` instead
of the edge cut).

Gains are exact: a node's gain is computed from its row and the current
``vol`` and ``assoc`` when it is queued (the seed, and every neighbour of a
moved node, again after each move), and again when it is taken from the
queue, the move being made with that gain.  Every move changes the gains of
all nodes of its two clusters a little (through the volumes), so the queue
is only nearly in order; ``f`` is tracked exactly all the same.  A search
keeps its moves only when they raise ``f``, so a round never lowers ``f``;
no cluster is emptied.

A search stops after ``max_stall`` moves without a new best ``f``, or
sooner by an adaptive rule (Osipov and Sanders' stopping rule, as in
KaHIP): when the ``p`` moves since the best have gains of mean ``mu`` and
variance ``sigma^2`` with ``p mu^2 > alpha sigma^2``, they lose steadily
and a best prefix beyond them is unlikely.  Along a mesh boundary the gains
of a strip are about zero after its first move (the rule keeps going); in a
random graph every move loses about as much (the rule stops the search
after a few moves).
"""

import numpy as np

from ..._jit import jit as _jit
from ._polish import _assoc_with, _assoc_without, _move_node

__all__ = ["boundary_nodes_csr", "fm_round_csr"]


@_jit
def boundary_nodes_csr(indptr, indices, labels):
    """The nodes with a neighbour of another label, in increasing order."""
    n = labels.shape[0]
    mask = np.zeros(n, dtype=np.bool_)
    count = 0
    for i in range(n):
        a = labels[i]
        for p in range(indptr[i], indptr[i + 1]):
            if labels[indices[p]] != a:
                mask[i] = True
                count += 1
                break
    out = np.empty(count, dtype=np.int64)
    t = 0
    for i in range(n):
        if mask[i]:
            out[t] = i
            t += 1
    return out


@_jit(inline=True)
def _push(keys, nodes, stamps, size, key, v, s):
    """Push onto the max-heap ``(keys, nodes, stamps)`` of ``size`` entries,
    growing it when full; returns the (possibly new) arrays and size."""
    if size == keys.shape[0]:
        cap = 2 * size + 16
        k2 = np.empty(cap, dtype=np.float64)
        n2 = np.empty(cap, dtype=np.int64)
        s2 = np.empty(cap, dtype=np.int64)
        for t in range(size):
            k2[t] = keys[t]
            n2[t] = nodes[t]
            s2[t] = stamps[t]
        keys, nodes, stamps = k2, n2, s2
    c = size
    keys[c] = key
    nodes[c] = v
    stamps[c] = s
    while c > 0:
        p = (c - 1) // 2
        if keys[p] >= keys[c]:
            break
        keys[p], keys[c] = keys[c], keys[p]
        nodes[p], nodes[c] = nodes[c], nodes[p]
        stamps[p], stamps[c] = stamps[c], stamps[p]
        c = p
    return keys, nodes, stamps, size + 1


@_jit(inline=True)
def _pop(keys, nodes, stamps, size):
    """Remove the top of the max-heap; returns ``(key, node, stamp, size)``."""
    key = keys[0]
    v = nodes[0]
    s = stamps[0]
    size -= 1
    keys[0] = keys[size]
    nodes[0] = nodes[size]
    stamps[0] = stamps[size]
    p = 0
    while True:
        c = 2 * p + 1
        if c >= size:
            break
        if c + 1 < size and keys[c + 1] > keys[c]:
            c += 1
        if keys[c] <= keys[p]:
            break
        keys[p], keys[c] = keys[c], keys[p]
        nodes[p], nodes[c] = nodes[c], nodes[p]
        stamps[p], stamps[c] = stamps[c], stamps[p]
        p = c
    return key, v, s, size


@_jit(inline=True)
def _best_target(i, indptr, indices, data, degrees, labels, vol, assoc, wx, seen):
    """Exact best gain of ``f`` of moving node ``i`` to a cluster it has an
    edge to, and that cluster (``(-inf, -1)``: none, or ``i`` alone in its
    cluster's volume).  ``wx`` (zeros of shape ``(K,)``) and ``seen`` are
    scratch arrays, left as they were found."""
    a = labels[i]
    di = degrees[i]
    wii = 0.0
    nt = 0
    for p in range(indptr[i], indptr[i + 1]):
        j = indices[p]
        c = labels[j]
        w = np.float64(data[p])
        if wx[c] == 0.0 and w != 0.0:
            seen[nt] = c
            nt += 1
        wx[c] += w
        if j == i:
            wii += w
    best_g = -np.inf
    best_b = -1
    va = vol[a] - di
    if va > 0.0:
        base = _assoc_without(assoc[a], wx[a], wii) / va - assoc[a] / vol[a]
        for t in range(nt):
            b = seen[t]
            if b == a:
                continue
            if vol[b] <= 0.0:  # a running volume that rounded to zero
                continue
            g = (base + _assoc_with(assoc[b], wx[b], wii) / (vol[b] + di)
                 - assoc[b] / vol[b])
            if g > best_g:
                best_g = g
                best_b = b
    for t in range(nt):
        wx[seen[t]] = 0.0
    return best_g, best_b


@_jit(inline=True)
def _objective(vol, assoc):
    f = 0.0
    for k in range(vol.shape[0]):
        if vol[k] > 0.0:
            f += assoc[k] / vol[k]
    return f


@_jit
def fm_round_csr(indptr, indices, data, degrees, labels, vol, assoc, seeds, max_stall,
                 alpha, max_work):
    """One round of localized FM searches on a CSR graph, one per seed.

    Each search starts from a seed node (skipped if a search of this round
    has already moved it; the round ends when its budget of work is spent)
    and moves, in order of exact gain of ``f``, nodes among the seed and
    the neighbours of the nodes it moved (each at most once), to a cluster
    they have an edge to; it stops when its queue is
    empty, after ``max_stall`` moves without a new best ``f`` or by the
    adaptive rule, and rolls back to its best prefix.  Nodes moved by kept
    moves are locked for the rest of the round.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the symmetric graph
    degrees : float64 ndarray of shape (n,)
        The volumes' degrees (at least the row sums).
    labels : int64 ndarray of shape (n,)
        Updated in place.
    vol, assoc : float64 ndarray of shape (K,)
        The statistics of ``labels``, updated in place.
    seeds : int64 ndarray
        The seed nodes, in the order their searches run.
    max_stall : int
    alpha : float
        Of the adaptive stopping rule (0: only ``max_stall``).
    max_work : int
        The round stops (its current search rolled back to its best prefix)
        once it has read this many entries of ``W``.

    Returns
    -------
    n_kept : int
        Moves kept.
    gain : float
        Rise of ``f`` (recomputed from ``vol`` and ``assoc``; >= 0 up to
        rounding).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from sklearn_falcon._backends._numba._fm import fm_round_csr
    >>> W = sp.csr_matrix(np.kron(np.eye(2), np.ones((3, 3))) + 0.01)
    >>> y = np.array([0, 0, 1, 1, 1, 0])  # one node of each block swapped
    >>> d = np.asarray(W.sum(1)).ravel()
    >>> vol = np.bincount(y, weights=d)
    >>> assoc = np.array([W[y == k][:, y == k].sum() for k in (0, 1)])
    >>> n_kept, gain = fm_round_csr(W.indptr.astype(np.int64),
    ...     W.indices.astype(np.int64), W.data, d, y, vol, assoc,
    ...     np.arange(6), 10, 3.0, 1000)
    >>> y.tolist(), gain > 0  # the two blocks
    ([1, 1, 1, 0, 0, 0], True)
    """
    n = labels.shape[0]
    K = vol.shape[0]
    counts = np.zeros(K, dtype=np.int64)
    for i in range(n):
        counts[labels[i]] += 1
    wx = np.zeros(K, dtype=np.float64)
    seen = np.empty(K, dtype=np.int64)
    stamp = np.zeros(n, dtype=np.int64)
    moved_in = np.full(n, -1, dtype=np.int64)  # the search that moved it
    locked = np.zeros(n, dtype=np.bool_)  # moved by a kept move
    keys = np.empty(64, dtype=np.float64)
    nodes = np.empty(64, dtype=np.int64)
    stamps = np.empty(64, dtype=np.int64)
    moved = np.empty(n, dtype=np.int64)
    source = np.empty(n, dtype=np.int64)
    f_start = _objective(vol, assoc)
    f = f_start
    n_kept = 0
    work = 0  # entries of W read
    for sid in range(seeds.shape[0]):
        s0 = seeds[sid]
        if moved_in[s0] >= 0:  # moved by a search of this round already
            continue
        if work > max_work:
            break  # the round's budget is spent
        g, b = _best_target(s0, indptr, indices, data, degrees, labels, vol, assoc,
                            wx, seen)
        work += indptr[s0 + 1] - indptr[s0]
        if b < 0:
            continue
        stamp[s0] += 1
        keys, nodes, stamps, size = _push(keys, nodes, stamps, 0, g, s0, stamp[s0])
        best_f = f
        best_t = 0
        nm = 0
        stall = 0
        s1 = 0.0  # sum and sum of squares of the gains since the best
        s2 = 0.0
        while size > 0 and stall < max_stall and work <= max_work:
            if alpha > 0.0 and stall >= 3 and (stall * s1 * s1
                                               > alpha * (stall * s2 - s1 * s1)):
                break  # the moves since the best lose steadily: stop early
            _, i, s, size = _pop(keys, nodes, stamps, size)
            if s != stamp[i] or locked[i] or moved_in[i] == sid:
                continue
            if counts[labels[i]] <= 1:
                continue
            g, b = _best_target(i, indptr, indices, data, degrees, labels, vol,
                                assoc, wx, seen)
            if b < 0:
                continue
            moved[nm] = i
            source[nm] = labels[i]
            nm += 1
            _move_node(i, b, indptr, indices, data, degrees, labels, vol, assoc,
                       counts)
            moved_in[i] = sid
            f += g
            if f > best_f + 1e-13 * abs(best_f):
                best_f = f
                best_t = nm
                stall = 0
                s1 = 0.0
                s2 = 0.0
            else:
                stall += 1
                s1 += g
                s2 += g * g
            work += 2 * (indptr[i + 1] - indptr[i])
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                if j == i or locked[j] or moved_in[j] == sid:
                    continue
                work += indptr[j + 1] - indptr[j]
                g2, b2 = _best_target(j, indptr, indices, data, degrees, labels, vol,
                                      assoc, wx, seen)
                stamp[j] += 1
                if b2 >= 0:
                    keys, nodes, stamps, size = _push(keys, nodes, stamps, size, g2,
                                                      j, stamp[j])
        for t in range(nm - 1, best_t - 1, -1):  # roll back past the best
            _move_node(moved[t], source[t], indptr, indices, data, degrees, labels,
                       vol, assoc, counts)
        for t in range(best_t):
            locked[moved[t]] = True
        n_kept += best_t
        f = _objective(vol, assoc)  # exact again after the rollback
    return n_kept, f - f_start
