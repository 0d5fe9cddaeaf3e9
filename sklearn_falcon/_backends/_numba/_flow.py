"""Flow networks for the pairwise max-flow refinement (Numba).

The FM searches (:mod:`._fm`) move strips of a boundary one node at a time
and keep a best prefix; they stop where every prefix loses, as on a mesh
whose boundary should run along a different line several rows away.  A
minimum cut finds the best boundary of two clusters within a whole region at
once (KaHIP's flow refinement): the nodes of clusters ``a`` and ``b`` within
a breadth-first *corridor* of their boundary become the nodes of a network,
the rest of ``a`` is contracted into the source and the rest of ``b`` into
the sink, and a minimum s-t cut is the lightest boundary between them that
leaves the nodes outside the corridor where they are.

These kernels build that network, find its two extreme minimum cuts
(:func:`min_cut_sides`: Dinic's maximum flow, then the residual graph's
reachability) and apply a cut
(:func:`sklearn_falcon._inits._flow.flow_refine` drives them).  Sequential
by nature, they have no torch twin.  Conventions as in :mod:`._kernels`.
"""

import numpy as np

from ..._jit import jit as _jit
from ._polish import _move_node

__all__ = ["flow_corridor", "flow_network", "min_cut_sides", "move_nodes_csr"]


@_jit
def flow_corridor(indptr, indices, degrees, labels, a, b, max_vol_a, max_vol_b, loc):
    """The corridor of the boundary of clusters ``a`` and ``b``.

    A breadth-first search within ``a`` from its nodes with a neighbour in
    ``b`` takes nodes, nearest the boundary first, while their degrees sum
    to at most ``max_vol_a``; the same within ``b``.  ``loc`` (int64, of
    shape ``(n,)``, all -1) receives the nodes' positions in the corridor;
    the caller sets them back to -1.

    Returns
    -------
    nodes : int64 ndarray
        The corridor's nodes of ``a``, then those of ``b``.
    n_a : int
        How many are of ``a``.
    """
    n = labels.shape[0]
    nodes = np.empty(n, dtype=np.int64)  # used up to the corridor's size
    m = 0
    n_a = 0
    for side in range(2):
        own = a if side == 0 else b
        other = b if side == 0 else a
        cap = max_vol_a if side == 0 else max_vol_b
        start = m
        # seeds: the nodes of `own` with a neighbour in `other`, in order
        for i in range(n):
            if labels[i] != own or loc[i] >= 0:
                continue
            for p in range(indptr[i], indptr[i + 1]):
                if labels[indices[p]] == other:
                    loc[i] = m
                    nodes[m] = i
                    m += 1
                    break
        # breadth-first from them, within `own`, while the volume allows
        vol = 0.0
        head = start
        while head < m:
            i = nodes[head]
            if vol + degrees[i] > cap:
                break
            vol += degrees[i]
            head += 1
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                if labels[j] == own and loc[j] < 0:
                    loc[j] = m
                    nodes[m] = j
                    m += 1
        # nodes queued but not taken leave the corridor
        for t in range(head, m):
            loc[nodes[t]] = -1
        m = head
        if side == 0:
            n_a = m
    return nodes[:m].copy(), n_a


@_jit
def flow_network(indptr, indices, data, labels, nodes, loc, a, b):
    """The edges of the flow network of a corridor.

    Corridor node ``t`` (``nodes[t]``, with ``loc[nodes[t]] == t``) is node
    ``t`` of the network, the source is ``m = len(nodes)`` and the sink
    ``m + 1``.  An edge between two corridor nodes keeps its weight (both
    directions are listed, from both rows); a corridor node's weights to
    the rest of ``a`` join it to the source, to the rest of ``b`` to the
    sink.  Weights to other clusters are cut whichever side the node takes,
    and self-loops are never cut: both are left out.

    Returns
    -------
    rows, cols : int64 ndarrays
    weights : float64 ndarray
    """
    m = nodes.shape[0]
    count = 0
    for t in range(m):
        i = nodes[t]
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j != i and (loc[j] >= 0 or labels[j] == a or labels[j] == b):
                count += 1
    rows = np.empty(count, dtype=np.int64)
    cols = np.empty(count, dtype=np.int64)
    weights = np.empty(count, dtype=np.float64)
    c = 0
    for t in range(m):
        i = nodes[t]
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j == i:
                continue
            if loc[j] >= 0:
                rows[c] = t
                cols[c] = loc[j]
            elif labels[j] == a:
                rows[c] = m
                cols[c] = t
            elif labels[j] == b:
                rows[c] = t
                cols[c] = m + 1
            else:
                continue
            weights[c] = data[p]
            c += 1
    return rows, cols, weights


@_jit
def move_nodes_csr(indptr, indices, data, degrees, labels, nodes, new_labels, vol,
                   assoc):
    """Move ``nodes[t]`` to ``new_labels[t]``, one at a time, updating
    ``labels``, ``vol`` and ``assoc`` in place exactly (each node's weights
    to its old and new cluster summed from its row with the labels as
    updated so far, as the FM searches move a node).  Returns the number of
    nodes whose label changed."""
    counts = np.zeros(vol.shape[0], dtype=np.int64)  # kept by _move_node: unused
    moved = 0
    for t in range(nodes.shape[0]):
        i = nodes[t]
        if labels[i] == new_labels[t]:
            continue
        _move_node(i, new_labels[t], indptr, indices, data, degrees, labels, vol,
                   assoc, counts)
        moved += 1
    return moved


@_jit(inline=True)
def _residual_levels(start, adj, head, res, root, twin, queue, level):
    """Breadth-first levels (-1: unreached) of the nodes that ``root``
    reaches along arcs of positive residual capacity (``twin=0``), or that
    reach ``root`` (``twin=1``: arc ``a`` out of ``v`` leads back from
    ``head[a]`` along its twin ``a ^ 1``)."""
    for u in range(level.shape[0]):
        level[u] = -1
    level[root] = 0
    queue[0] = root
    qh, qt = 0, 1
    while qh < qt:
        u = queue[qh]
        qh += 1
        for k in range(start[u], start[u + 1]):
            a = adj[k]
            w = head[a]
            if res[a ^ twin] > 0 and level[w] < 0:
                level[w] = level[u] + 1
                queue[qt] = w
                qt += 1


@_jit
def min_cut_sides(rows, cols, cap, n_nodes, s, t):
    """Source sides of the two extreme minimum s-t cuts of a network.

    Dinic's algorithm (breadth-first levels, then augmenting paths along
    them with a current-arc pointer per node) computes a maximum flow; the
    smallest minimum cut's source side is then the set of nodes that ``s``
    reaches in the residual graph, and the largest one's is every node that
    does not reach ``t``.  Both sets are the same for every maximum flow,
    so they do not depend on the order in which paths are found (nor on
    parallel edges being merged).

    Parameters
    ----------
    rows, cols : int64 arrays of shape (E,)
        Directed edges ``rows[e] -> cols[e]`` (parallel edges allowed).
    cap : int64 array of shape (E,)
        Their nonnegative integer capacities.
    n_nodes : int
        Nodes ``0 .. n_nodes - 1``.
    s, t : int
        Source and sink.

    Returns
    -------
    small, large : bool arrays of shape (n_nodes,)
        The source sides (``s`` in both, ``t`` in neither).
    """
    E = rows.shape[0]
    N = n_nodes
    # arc 2e is edge e, arc 2e + 1 its reverse (twin: a ^ 1), by tail in adj
    start = np.zeros(N + 1, dtype=np.int64)
    for e in range(E):
        start[rows[e] + 1] += 1
        start[cols[e] + 1] += 1
    for u in range(N):
        start[u + 1] += start[u]
    fill = np.empty(N, dtype=np.int64)
    for u in range(N):
        fill[u] = start[u]
    adj = np.empty(2 * E, dtype=np.int64)
    head = np.empty(2 * E, dtype=np.int64)
    res = np.empty(2 * E, dtype=np.int64)
    for e in range(E):
        u = rows[e]
        v = cols[e]
        adj[fill[u]] = 2 * e
        fill[u] += 1
        adj[fill[v]] = 2 * e + 1
        fill[v] += 1
        head[2 * e] = v
        res[2 * e] = cap[e]
        head[2 * e + 1] = u
        res[2 * e + 1] = 0
    level = np.empty(N, dtype=np.int64)
    queue = np.empty(N, dtype=np.int64)
    it = np.empty(N, dtype=np.int64)
    path = np.empty(N, dtype=np.int64)
    while True:
        _residual_levels(start, adj, head, res, s, 0, queue, level)
        if level[t] < 0:
            break
        for u in range(N):
            it[u] = start[u]
        while True:  # augmenting paths of the level graph
            depth = 0
            u = s
            while u != t:
                advanced = False
                while it[u] < start[u + 1]:
                    a = adj[it[u]]
                    if res[a] > 0 and level[head[a]] == level[u] + 1:
                        path[depth] = a
                        depth += 1
                        u = head[a]
                        advanced = True
                        break
                    it[u] += 1
                if not advanced:  # a dead end: retreat
                    level[u] = -1
                    if depth == 0:
                        break
                    depth -= 1
                    u = head[path[depth] ^ 1]
                    it[u] += 1
            if u != t:
                break
            b = res[path[0]]
            for k in range(1, depth):
                b = min(b, res[path[k]])
            for k in range(depth):
                res[path[k]] -= b
                res[path[k] ^ 1] += b
    small = np.empty(N, dtype=np.bool_)
    for u in range(N):  # the last search: what s reaches once no path is left
        small[u] = level[u] >= 0
    _residual_levels(start, adj, head, res, t, 1, queue, level)
    large = np.empty(N, dtype=np.bool_)
    for u in range(N):
        large[u] = level[u] < 0
    return small, large
