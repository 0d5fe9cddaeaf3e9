"""verbose goes through the ``sklearn_falcon`` logger, stage by stage
(issue 18)."""

import logging
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from sklearn_falcon import FalconNCut
from sklearn_falcon._log import STAGES, logger, verbose_logging
from sklearn_falcon._backends._device import torch_available


@pytest.fixture
def X():
    return make_blobs(n_samples=150, centers=3, cluster_std=2.5, random_state=0)[0]


def _stages(records):
    return {r.stage for r in records if r.name == "sklearn_falcon"}


def test_verbose_logs_every_stage(X, caplog):
    with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
        FalconNCut(3, verbose=1, random_state=0, n_init=2).fit(X)
    assert {"init", "level", "solve"} <= _stages(caplog.records)
    # polishing sweeps that move nodes (the multilevel start leaves none)
    with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
        FalconNCut(3, init="random", tau=10.0, verbose=1, random_state=0).fit(X)
    assert "polish" in _stages(caplog.records)
    for r in caplog.records:
        assert r.stage in STAGES
        assert r.getMessage().startswith(f"{r.stage}: ")


def test_the_verbose_docstring_says_which_fits_log_the_affinity_stage(X, caplog):
    """FalconNCut's docstring listed ``affinity`` first among the stages
    that ``verbose=1`` logs, but a fit logs it on the matrix-free torch path
    only (as the progress guide says): a Numba fit of the kNN graph logs
    none.  The docstring says so."""
    ClassDoc = pytest.importorskip("numpydoc.docscrape").ClassDoc

    with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
        FalconNCut(3, init="random", verbose=1, random_state=0,
                   backend="numba").fit(X)
    stages = _stages(caplog.records)
    assert "affinity" not in stages and {"init", "solve"} <= stages
    doc = ClassDoc(FalconNCut, config={"show_class_members": False})
    (verbose,) = [p for p in doc["Parameters"] if p.name == "verbose"]
    text = " ".join(" ".join(verbose.desc).split())
    assert "``affinity``, of a matrix-free torch fit only" in text


@pytest.mark.skipif(not torch_available(), reason="torch is not installed")
def test_matrix_free_fit_logs_its_cost(X, caplog):
    with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
        FalconNCut(3, affinity="rbf", backend="torch", device="cpu", verbose=1,
                   random_state=0).fit(X)
    msgs = [r.getMessage() for r in caplog.records if r.stage == "affinity"]
    assert len(msgs) == 1 and "matrix-free rbf of 150 samples" in msgs[0]
    assert "2.25e+04 entries" in msgs[0]
    # every iteration reports the time since the solve started
    iters = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("solve: iter")]
    assert iters and all(m.endswith(" s") for m in iters)


def test_verbose_zero_is_silent_even_with_logging_configured(X, caplog):
    with caplog.at_level(logging.DEBUG):  # the application logs everything
        FalconNCut(3, verbose=0, random_state=0).fit(X)
    assert not [r for r in caplog.records if r.name.startswith("sklearn_falcon")]


def test_verbose_two_logs_the_nested_solves(X, caplog):
    with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
        FalconNCut(3, verbose=1, random_state=0).fit(X)
    one = sum(r.getMessage().startswith("solve: iter") for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
        FalconNCut(3, verbose=2, random_state=0).fit(X)
    two = sum(r.getMessage().startswith("solve: iter") for r in caplog.records)
    assert two > one


def test_unconfigured_logging_prints_to_stderr_during_the_call():
    # a fresh interpreter: no handler anywhere, as in a plain script
    code = (
        "from sklearn.datasets import make_blobs\n"
        "from sklearn_falcon import FalconNCut\n"
        "X = make_blobs(n_samples=60, centers=2, random_state=0)[0]\n"
        "FalconNCut(2, verbose=1, random_state=0).fit(X)\n"
        "import logging; lg = logging.getLogger('sklearn_falcon')\n"
        "print(len(lg.handlers), lg.level)\n"
        "FalconNCut(2, verbose=0, random_state=0).fit(X)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "0"]  # handler and level restored
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("[sklearn_falcon]")]
    assert any(ln.startswith("[sklearn_falcon] solve: iter") for ln in lines)
    assert any(ln.startswith("[sklearn_falcon] init: ") for ln in lines)


def test_verbose_logging_keeps_a_configured_handler():
    handler = logging.Handler()
    logger.addHandler(handler)
    try:
        with verbose_logging(1):
            assert logger.handlers == [handler]
            assert logger.getEffectiveLevel() == logging.INFO
        assert logger.level == logging.NOTSET
    finally:
        logger.removeHandler(handler)


def test_solve_results_do_not_depend_on_verbose(X):
    a = FalconNCut(3, random_state=0).fit(X)
    b = FalconNCut(3, verbose=1, random_state=0).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.objective_path_, b.objective_path_)


def test_falcon_batch_verbose_logs_through_the_logger(caplog):
    from sklearn_falcon import falcon_batch

    rng = np.random.default_rng(0)
    graphs = [rng.normal(size=(30, 2)) + 5 * (np.arange(30) % 2)[:, None]
              for _ in range(2)]
    with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
        falcon_batch(graphs, 2, affinity="rbf", backend="numba", verbose=1,
                     random_state=0)
    assert "solve" in _stages(caplog.records)
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        falcon_batch(graphs, 2, affinity="rbf", backend="numba", random_state=0)
    assert not [r for r in caplog.records if r.name == "sklearn_falcon"]


def test_falcon_batch_verbose_says_which_graph_it_solves(caplog):
    """On the backends that solve a batch graph by graph (Numba, Dask), the
    iterations of every graph were logged one block after another with no
    word of which graph they were ("solve: iter 1 ..." twice for two
    graphs), where FalconNCut says "start 2 of 3" for its restarts."""
    from sklearn_falcon import falcon_batch

    rng = np.random.default_rng(0)
    graphs = [rng.normal(size=(30, 2)) + 5 * (np.arange(30) % 2)[:, None]
              for _ in range(2)]
    with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
        falcon_batch(graphs, 2, affinity="rbf", backend="numba", verbose=1,
                     random_state=0)
    msgs = [r.getMessage() for r in caplog.records if r.name == "sklearn_falcon"]
    heads = [i for i, m in enumerate(msgs) if m.startswith("solve: graph")]
    assert [msgs[i] for i in heads] == ["solve: graph 1 of 2", "solve: graph 2 of 2"]
    assert heads[0] == 0 and msgs[heads[1] - 1].startswith(("solve: iter",
                                                             "polish:")), msgs


def test_verbose_blocks_overlapping_in_threads_restore_the_logger(monkeypatch):
    # fit A starts, fit B starts, A ends, B ends: A took its stderr handler
    # away from B, and B restored the INFO level it had found (A's)
    import threading

    monkeypatch.setattr(logger, "propagate", False)  # no handler above it
    level, handlers = logger.level, list(logger.handlers)
    a_in, b_in, seen = threading.Event(), threading.Event(), {}

    def fit_a():
        with verbose_logging(1):
            a_in.set()
            b_in.wait(10)

    def fit_b():
        a_in.wait(10)
        with verbose_logging(1):
            b_in.set()
            a.join(10)
            seen["handlers"] = len(logger.handlers) - len(handlers)
            seen["level"] = logger.getEffectiveLevel()

    a, b = threading.Thread(target=fit_a), threading.Thread(target=fit_b)
    a.start()
    b.start()
    b.join(10)
    assert seen == {"handlers": 1, "level": logging.INFO}  # B's still shown
    assert logger.handlers == handlers and logger.level == level


def test_the_progress_guide_names_the_record_that_verbose_zero_logs(monkeypatch,
                                                                    caplog):
    """The guide said that ``verbose=0`` "logs nothing, whatever the
    configuration", but a first fit logs a WARNING that kernels are being
    compiled (printed to stderr without any logging configuration), and no
    page said how to silence it.  The guide names it, and its recipe works."""
    import time
    from pathlib import Path

    from sklearn_falcon import _jit

    guide = (Path(__file__).resolve().parents[1] / "docs" / "user_guide.rst")
    section = guide.read_text(encoding="utf-8").split(".. _progress:")[1]
    section = section.split("\n.. _")[0]
    assert "logs nothing, whatever" not in section
    assert "compiling kernels" in section
    assert 'getLogger("sklearn_falcon").setLevel(logging.ERROR)' in section
    monkeypatch.setattr(_jit, "NOTICE_AFTER_S", 0.0)
    monkeypatch.setattr(logger, "level", logging.ERROR)  # the recipe
    with caplog.at_level(logging.DEBUG):  # the root logger's
        notice = _jit._CompileNotice()
        notice.on_start()
        time.sleep(0.2)
        notice.on_end()
    assert not [r for r in caplog.records if r.name == "sklearn_falcon"]


@pytest.mark.parametrize("n_init, said", [(1, "1 starting labelling in"),
                                          (2, "2 starting labellings in")])
def test_the_init_line_counts_its_starts_in_english(caplog, n_init, said):
    # it said "1 starting labellings" (the user guide quoted it)
    X = np.random.default_rng(0).random((40, 2))
    with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
        FalconNCut(2, init="kmeans", n_init=n_init, verbose=1,
                   random_state=0).fit(X)
    lines = [r.getMessage() for r in caplog.records if "init: " in r.getMessage()]
    assert len(lines) == 1 and said in lines[0], lines


def test_the_hierarchy_line_counts_its_levels_in_english(caplog):
    # a graph too small to coarsen logged "hierarchy of 1 levels, [40] nodes"
    X = np.random.default_rng(0).random((40, 2))
    with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
        FalconNCut(2, verbose=1, random_state=0).fit(X)
    lines = [r.getMessage() for r in caplog.records if "hierarchy" in r.getMessage()]
    assert lines == ["level: hierarchy of 1 level, [40] nodes"], lines
