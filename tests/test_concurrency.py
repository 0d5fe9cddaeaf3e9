"""Fits in several Python threads at once leave the process as they found
it (the BLAS limit and Numba's workqueue layer are tested in
``test_init.py`` and ``test_jit.py``)."""

import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
from sklearn.datasets import make_blobs

from sklearn_falcon import FalconNCut
from sklearn_falcon._log import ignoring


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_fits_in_threads_leave_the_warning_filters_as_they_were(backend):
    # warnings.catch_warnings swaps the process-wide filter list: two blocks
    # interleaved in two threads (LOBPCG's, the tensor conversions') left an
    # "ignore UserWarning" filter behind, silencing every later UserWarning
    if backend == "torch":
        pytest.importorskip("torch")
    X = make_blobs(2000, centers=6, random_state=0)[0]
    kw = {"backend": "torch", "device": "cpu"} if backend == "torch" else {}
    FalconNCut(6, random_state=0, **kw).fit(X)
    before = list(warnings.filters)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda s: FalconNCut(6, random_state=s, **kw).fit(X),
                      range(12)))
    assert warnings.filters == before


def test_ignoring_blocks_take_turns_and_leave_no_filter():
    before = list(warnings.filters)
    events, a_in = [], threading.Event()

    def block(name, hold):
        with ignoring(UserWarning):
            events.append(f"{name} in")
            a_in.set()
            time.sleep(hold)
            events.append(f"{name} out")

    a = threading.Thread(target=block, args=("A", 0.2))
    a.start()
    a_in.wait(10)
    b = threading.Thread(target=block, args=("B", 0.0))
    b.start()
    a.join(10)
    b.join(10)
    assert events == ["A in", "A out", "B in", "B out"]
    assert warnings.filters == before


def test_ignoring_silences_its_category_within_the_block():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ignoring(UserWarning):
            warnings.warn("quiet", UserWarning)
            warnings.warn("other", RuntimeWarning)
        warnings.warn("loud", UserWarning)
    assert [str(w.message) for w in caught] == ["other", "loud"]
