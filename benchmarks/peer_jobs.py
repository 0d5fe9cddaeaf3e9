"""Peers of the peer benchmark as *jobs*: one timed run of one configuration.

``python -m benchmarks.bench_peers`` runs every job in a guarded worker
process (:mod:`benchmarks.sandbox`); a job is ``(kind, params)`` and
:func:`run_job` returns a list of *outputs*, each a dict ``{"peer", "config",
"labels", "seconds", "info"}`` (one job can give several peers: one
eigensolve serves three label assignments). ``seconds`` is the wall time of
the peer's own work on the float affinity ``W``, conversions included (the
integer weights of METIS and KaHIP, for instance), imports excluded.

Peers and how each is run at its strongest
------------------------------------------
``sc-<solver>-<assign>``
    scikit-learn's ``SpectralClustering(affinity="precomputed",
    eigen_solver=<solver>, assign_labels=<assign>, random_state=seed)`` for
    every ``eigen_solver`` (arpack, lobpcg, amg) and ``assign_labels``
    (kmeans, discretize, cluster_qr). One job per solver runs scikit-learn's
    own ``_spectral_embedding`` once and the three assignments on it, exactly
    as ``SpectralClustering.fit`` does (the same random-state stream: the
    labels equal those of the estimator, see the tests); each peer's time is
    the embedding time plus its assignment time.
``rncut``
    Recursive two-way normalized cut (Shi & Malik; Fiedler vector by ARPACK,
    exact best threshold, the most cuttable segment split next), from
    :func:`benchmarks.peers.recursive_ncut`.
``metis``
    METIS partitioning through ``pymetis.part_graph``. METIS minimises the
    edge cut under a balance constraint, not the NCut; to give it its lowest
    NCut, the job is run on a grid of 16 configurations and the one of
    lowest NCut is kept: vertex weights = the degrees ``d_i`` (balancing the
    volumes, so that a balanced cut minimises ``sum_k cut_k / vol_k``) or
    unit weights, times an imbalance ``ufactor`` of 3%, 10%, 30% or 100%,
    times the scheme: multilevel k-way (``kway``, ``gpmetis``'s default) or
    recursive bisection (``rb``; pymetis's own default for K <= 8, where
    k-way often finds a much lower NCut).
``kahip-fast``, ``kahip-eco``, ``kahip-strong`` and their ``...social`` twins
    KaHIP's ``kaffpa`` in its FAST, ECO and STRONG modes and in the SOCIAL
    variants of each (size-constrained label propagation coarsening, made
    for social networks, which also cut lower on some pixel graphs), on the
    same grid of vertex weights and imbalances (imbalances 3% and 30% for
    STRONG and STRONGSOCIAL, whose runs are long).
``ncut-pytorch``
    ncut-pytorch's K-way discretization (Yu & Shi) of the K leading
    eigenvectors of ``D^-1/2 W D^-1/2`` (:func:`benchmarks.peers.ncut_pytorch_kway`).

Integer weights (METIS and KaHIP)
---------------------------------
Both need positive integer edge weights and no self-loops. The diagonal is
dropped (it never counts in an edge cut), the weights are divided by their
maximum and multiplied by the largest integer scale ``S`` for which the sum
of all weights stays below ``2^29`` (a quarter of the 32-bit range, room for
the partitioners' internal sums), then rounded; an unweighted graph keeps
weight 1. Edges whose weight rounds to 0 (below ``0.5 / S`` of the largest
weight) are dropped. Degree vertex weights are scaled the same way (each at
least 1). The NCut of every result is computed on the original float ``W``.

Examples
--------
>>> from benchmarks.graphs import sbm_graph
>>> from benchmarks.peer_jobs import run_job
>>> W, y = sbm_graph(400, 4, avg_degree=12, p_in_ratio=0.9, seed=0)
>>> out = run_job("rncut", W, 4, seed=0)
>>> out[0]["peer"], out[0]["labels"].shape
('rncut', (400,))
"""

import time
import warnings
from importlib.util import find_spec

import numpy as np
import scipy.sparse as sp

__all__ = [
    "integer_graph",
    "integer_vertex_weights",
    "run_job",
    "peer_groups",
    "available_peer_groups",
    "JOB_KINDS",
]

INT_BUDGET = 2 ** 29


# ---------------------------------------------------------- integer graphs
def integer_graph(W, budget=INT_BUDGET):
    """``(xadj, adjncy, eweights)`` int32 arrays for METIS and KaHIP.

    Parameters
    ----------
    W : sparse matrix of shape (n, n)
        Symmetric nonnegative affinity.
    budget : int, default=2**29
        Upper bound on the sum of the integer weights.

    Returns
    -------
    xadj, adjncy, eweights : ndarray of int32
    scale : float
        The factor ``S`` applied to ``W / max(W)`` (1 for unweighted graphs).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> W = sp.csr_matrix([[1.0, 0.5, 0.0], [0.5, 0.0, 1e-10], [0.0, 1e-10, 0.0]])
    >>> xadj, adj, ew, S = integer_graph(W)  # no diagonal; 1e-10 rounds to 0
    >>> xadj.tolist(), adj.tolist(), bool(ew[0] == S)
    ([0, 1, 2, 2], [1, 0], True)
    """
    W = sp.csr_matrix(W, dtype=np.float64)
    W = W - sp.diags(W.diagonal())
    W = sp.csr_matrix(W)
    W.eliminate_zeros()
    W.sort_indices()
    if W.nnz == 0:
        return (np.zeros(W.shape[0] + 1, np.int32), np.zeros(0, np.int32),
                np.zeros(0, np.int32), 1.0)
    w = W.data / W.data.max()
    if np.all(w == 1.0):
        scale = 1.0
        ew = np.ones(W.nnz, dtype=np.int64)
    else:
        scale = float(max(1, np.floor(budget / w.sum())))
        ew = np.rint(w * scale).astype(np.int64)
    keep = ew > 0
    if not keep.all():
        rows = np.repeat(np.arange(W.shape[0]), np.diff(W.indptr))
        counts = np.bincount(rows[keep], minlength=W.shape[0])
        xadj = np.concatenate([[0], np.cumsum(counts)])
        adj, ew = W.indices[keep], ew[keep]
    else:
        xadj, adj = W.indptr, W.indices
    return (xadj.astype(np.int32), adj.astype(np.int32), ew.astype(np.int32),
            scale)


def integer_vertex_weights(W, kind, budget=INT_BUDGET):
    """Integer vertex weights: the degrees (scaled, each >= 1) or ones.

    Examples
    --------
    >>> import numpy as np
    >>> integer_vertex_weights(np.array([[0.0, 2.0], [2.0, 1.0]]), "unit").tolist()
    [1, 1]
    """
    n = W.shape[0]
    if kind == "unit":
        return np.ones(n, dtype=np.int32)
    if kind != "degree":
        raise ValueError(f"vertex weights must be 'degree' or 'unit', got {kind!r}.")
    d = np.asarray(W.sum(axis=1), dtype=np.float64).ravel()
    d = d / d.max()
    scale = max(1.0, np.floor(budget / d.sum()))
    return np.maximum(1, np.rint(d * scale)).astype(np.int32)


# -------------------------------------------------------------- the jobs
def _output(peer, labels, seconds, config=None, **info):
    return {"peer": peer, "config": dict(config or {}),
            "labels": np.asarray(labels, dtype=np.int64),
            "seconds": float(seconds), "info": info}


def _metis(W, K, seed, vw="degree", imbalance=0.03, scheme="kway"):
    import pymetis

    if scheme not in ("kway", "rb"):
        raise ValueError(f"scheme must be 'kway' or 'rb', got {scheme!r}.")
    t0 = time.perf_counter()
    xadj, adj, ew, _ = integer_graph(W)
    vwgt = integer_vertex_weights(W, vw)
    t_conv = time.perf_counter() - t0
    opts = pymetis.Options(ufactor=int(round(imbalance * 1000)), seed=int(seed))
    res = pymetis.part_graph(int(K), adjacency=pymetis.CSRAdjacency(xadj, adj),
                             vweights=vwgt, eweights=ew, options=opts,
                             recursive=scheme == "rb")
    seconds = time.perf_counter() - t0
    return [_output("metis", res.vertex_part, seconds,
                    {"vw": vw, "imbalance": imbalance, "scheme": scheme},
                    edge_cut=int(res.edge_cuts), convert_s=t_conv)]


KAHIP_MODES = {"fast": 0, "eco": 1, "strong": 2, "fastsocial": 3, "ecosocial": 4,
               "strongsocial": 5}


def _kahip(W, K, seed, mode="fast", vw="degree", imbalance=0.03):
    import kahip

    t0 = time.perf_counter()
    xadj, adj, ew, _ = integer_graph(W)
    vwgt = integer_vertex_weights(W, vw)
    t_conv = time.perf_counter() - t0
    cut, blocks = kahip.kaffpa(vwgt, xadj, ew, adj, int(K), float(imbalance),
                               True, int(seed), KAHIP_MODES[mode])
    seconds = time.perf_counter() - t0
    return [_output(f"kahip-{mode}", blocks, seconds,
                    {"vw": vw, "imbalance": imbalance},
                    edge_cut=int(cut), convert_s=t_conv)]


SC_ASSIGN = ("kmeans", "discretize", "cluster_qr")


def _spectral(W, K, seed, eigen_solver="arpack"):
    """scikit-learn SpectralClustering, one embedding for three assignments."""
    from sklearn.cluster import k_means
    from sklearn.cluster._spectral import cluster_qr, discretize
    from sklearn.manifold._spectral_embedding import _spectral_embedding
    from sklearn.utils import check_random_state

    if eigen_solver == "amg":  # scikit-learn imports pyamg in the timed call
        import pyamg  # noqa: F401  (imports are not timed)
    outputs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rs = check_random_state(seed)
        t0 = time.perf_counter()
        maps = _spectral_embedding(W, n_components=K, eigen_solver=eigen_solver,
                                   random_state=rs, eigen_tol="auto",
                                   drop_first=False)
        t_embed = time.perf_counter() - t0
        state = rs.get_state()
        for assign in SC_ASSIGN:
            rs_a = np.random.RandomState()
            rs_a.set_state(state)
            t1 = time.perf_counter()
            if assign == "kmeans":
                _, labels, _ = k_means(maps, K, random_state=rs_a, n_init=10)
            elif assign == "cluster_qr":
                labels = cluster_qr(maps)
            else:
                labels = discretize(maps, random_state=rs_a)
            t_assign = time.perf_counter() - t1
            outputs.append(_output(f"sc-{eigen_solver}-{assign}", labels,
                                   t_embed + t_assign, embed_s=t_embed,
                                   assign_s=t_assign))
    return outputs


def _rncut(W, K, seed):
    from .peers import recursive_ncut

    t0 = time.perf_counter()
    labels, info = recursive_ncut(W, K, seed=seed)
    return [_output("rncut", labels, time.perf_counter() - t0, **info)]


def _ncut_pytorch(W, K, seed):
    import ncut_pytorch  # noqa: F401  (imports are not timed)
    import torch  # noqa: F401

    from .peers import ncut_pytorch_kway

    t0 = time.perf_counter()
    labels, _ = ncut_pytorch_kway(W, K, seed=seed)
    return [_output("ncut-pytorch", labels, time.perf_counter() - t0)]


_FALCON_WARM = set()


def _falcon(W, K, seed, params=None, init_labels=None, name="falcon"):
    """FalconNCut(K, affinity="precomputed", random_state=seed, **params)."""
    from sklearn_falcon import FalconNCut

    params = dict(params or {})
    key = repr(sorted(params.items()))
    if key not in _FALCON_WARM:  # load the compiled kernels before timing
        from .graphs import sbm_graph

        Ws, _ = sbm_graph(300, 3, avg_degree=10, p_in_ratio=0.9, seed=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            FalconNCut(3, affinity="precomputed", random_state=0,
                       **params).fit(Ws)
            FalconNCut(3, affinity="precomputed", random_state=0,
                       **{**params, "init": np.arange(300) % 3}).fit(Ws)
        _FALCON_WARM.add(key)
    if init_labels is not None:
        params["init"] = np.asarray(init_labels)
    est = FalconNCut(K, affinity="precomputed", random_state=seed, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        est.fit(W)
        seconds = time.perf_counter() - t0
    path = np.asarray(getattr(est, "objective_path_", []), dtype=np.float64)
    slack = -1e-12 * max(1.0, float(np.abs(path).max())) if path.size else 0.0
    monotone = bool(path.size < 2 or np.all(np.diff(path) >= slack))
    return [_output(name, est.labels_, seconds, n_iter=int(est.n_iter_),
                    ncut=float(est.ncut_), monotone=monotone)]


JOB_KINDS = {
    "metis": _metis,
    "kahip": _kahip,
    "spectral": _spectral,
    "rncut": _rncut,
    "ncut_pytorch": _ncut_pytorch,
    "falcon": _falcon,
}


def run_job(kind, W, K, seed=0, **params):
    """Run one job; returns its list of outputs.

    Parameters
    ----------
    kind : str
        A key of ``JOB_KINDS``.
    W : sparse matrix of shape (n, n)
    K : int
    seed : int, default=0
    **params : dict
        The job's configuration.

    Returns
    -------
    outputs : list of dict
        ``{"peer", "config", "labels", "seconds", "info"}``.
    """
    if kind not in JOB_KINDS:
        raise ValueError(f"unknown job kind {kind!r}; known: {sorted(JOB_KINDS)}.")
    return JOB_KINDS[kind](W, K, seed, **params)


# ------------------------------------------------------------- registry
BALANCE_GRID = [{"vw": vw, "imbalance": imb} for vw in ("degree", "unit")
                for imb in (0.03, 0.1, 0.3, 1.0)]
METIS_GRID = [{**c, "scheme": scheme} for scheme in ("kway", "rb")
              for c in BALANCE_GRID]
STRONG_GRID = [{"vw": vw, "imbalance": imb} for vw in ("degree", "unit")
               for imb in (0.03, 0.3)]
KAHIP_GRID = {"fast": BALANCE_GRID, "eco": BALANCE_GRID, "strong": STRONG_GRID,
              "fastsocial": BALANCE_GRID, "ecosocial": BALANCE_GRID,
              "strongsocial": STRONG_GRID}


def _cfg_name(cfg):
    name = f"{cfg['vw'][:3]},imb{cfg['imbalance']:g}"
    return name + (f",{cfg['scheme']}" if "scheme" in cfg else "")


def peer_groups():
    """Every peer group: ``name -> list of (job_id, kind, params)``.

    A group's jobs are its configurations, tried in order; the outputs name
    the peers (one group, ``sc-arpack``, gives ``sc-arpack-kmeans``,
    ``sc-arpack-discretize`` and ``sc-arpack-cluster_qr``).

    Examples
    --------
    >>> groups = peer_groups()
    >>> len(groups["metis"]), groups["rncut"]
    (16, [('rncut', 'rncut', {})])
    """
    groups = {}
    for solver in ("arpack", "lobpcg", "amg"):
        groups[f"sc-{solver}"] = [(f"sc-{solver}", "spectral",
                                   {"eigen_solver": solver})]
    groups["rncut"] = [("rncut", "rncut", {})]
    groups["metis"] = [(f"metis[{_cfg_name(c)}]", "metis", c) for c in METIS_GRID]
    for mode, grid in KAHIP_GRID.items():
        groups[f"kahip-{mode}"] = [(f"kahip-{mode}[{_cfg_name(c)}]", "kahip",
                                    {"mode": mode, **c}) for c in grid]
    groups["ncut-pytorch"] = [("ncut-pytorch", "ncut_pytorch", {})]
    return groups


def available_peer_groups():
    """``(available, missing)``: group names whose packages import, and a
    dict ``group -> reason`` of the others.

    Examples
    --------
    >>> ok, missing = available_peer_groups()
    >>> "rncut" in ok
    True
    """
    need = {"sc-amg": "pyamg", "metis": "pymetis", "ncut-pytorch": "ncut_pytorch",
            **{f"kahip-{mode}": "kahip" for mode in KAHIP_MODES}}
    ok, missing = [], {}
    for g in peer_groups():
        mod = need.get(g)
        if mod is not None and (find_spec(mod) is None or (
                g == "ncut-pytorch" and find_spec("torch") is None)):
            missing[g] = f"{mod} is not installed (pip install -e '.[bench]')"
        else:
            ok.append(g)
    return ok, missing
