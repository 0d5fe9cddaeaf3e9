"""Progress messages (the ``sklearn_falcon`` logger and ``verbose``),
warnings attributed to the user's call (:func:`warn_user`), and warnings of
other libraries silenced without leaving a filter behind (:func:`ignoring`).

Every progress message of the package goes through the standard
:mod:`logging` logger ``"sklearn_falcon"``, and names its stage in its text
and in the record's ``stage`` attribute:

``affinity``
    building ``W`` (on the matrix-free torch path: the cost of one pass);
``init``
    the starting labellings;
``level``
    a multilevel start refined on one level of the coarsening hierarchy;
``solve``
    one iteration of the proximal loop;
``polish``
    one sweep of exact single moves.

Messages are emitted only when the estimator's ``verbose`` is positive, so
``verbose=0`` logs no progress whatever the logging configuration (the
one-time WARNING that kernels are compiling, of :mod:`._jit`, does not
depend on ``verbose``).  During a call
with ``verbose > 0``, :func:`verbose_logging` makes sure they are seen: if
neither the logger nor any of its ancestors has a handler (logging was not
configured), it prints them to ``sys.stderr`` for the duration of the call;
otherwise they go to the handlers the application configured.

This module imports nothing from the package (layer 0).

Examples
--------
>>> import logging
>>> from sklearn_falcon._log import log_stage, logger
>>> logger.name
'sklearn_falcon'
>>> log_stage("init", "3 starts in %.2f s", 0.5)  # silent: no handler, INFO
"""

import functools
import logging
import os
import sys
import threading
import warnings
from contextlib import contextmanager

__all__ = ["STAGES", "given_once", "ignoring", "log_stage", "logger", "logs_progress",
           "recorded", "unwarned", "verbose_logging", "warn_user", "warns_once"]

logger = logging.getLogger("sklearn_falcon")

STAGES = ("affinity", "init", "level", "solve", "polish")


def log_stage(stage, message, *args, level=logging.INFO):
    """Log ``"<stage>: <message>"`` (``%``-style ``args``) with the record
    attribute ``stage``."""
    if logger.isEnabledFor(level):
        logger.log(level, f"{stage}: {message}", *args, extra={"stage": stage})


_verbose_lock = threading.Lock()
_verbose = {"blocks": 0, "handler": None, "level": logging.NOTSET}


@contextmanager
def verbose_logging(verbose):
    """Show the package's progress messages while the block runs, when
    ``verbose > 0``.

    The messages are INFO records (with ``verbose >= 2`` the nested solves
    of an initialization log their iterations too).  If logging is not
    configured (no handler on the logger or its ancestors), a handler that
    writes ``[sklearn_falcon] <message>`` lines to ``sys.stderr`` is
    attached for the duration of the block.  The logger's
    level and handlers are restored afterwards.  Blocks that overlap (in
    several threads, or nested) share that set-up: the first to enter makes
    it and the last to leave undoes it.
    """
    if not verbose:
        yield
        return
    with _verbose_lock:
        if _verbose["blocks"] == 0:
            _verbose["level"] = logger.level
            if not logger.hasHandlers():
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(logging.Formatter("[sklearn_falcon] %(message)s"))
                logger.addHandler(handler)
                _verbose["handler"] = handler
            if logger.getEffectiveLevel() > logging.INFO:
                logger.setLevel(logging.INFO)
        _verbose["blocks"] += 1
    try:
        yield
    finally:
        with _verbose_lock:
            _verbose["blocks"] -= 1
            if _verbose["blocks"] == 0:
                _undo_verbose_setup()


def _undo_verbose_setup():
    """Remove the stderr handler that :func:`verbose_logging` attached, if
    any, and put the logger's level back."""
    if _verbose["handler"] is not None:
        logger.removeHandler(_verbose["handler"])
        _verbose["handler"] = None
    logger.setLevel(_verbose["level"])


def logs_progress(func):
    """Run ``func`` inside :func:`verbose_logging`, with its ``verbose``
    keyword argument (a function) or its estimator's ``verbose`` (a
    method)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if "verbose" in kwargs:
            verbose = kwargs["verbose"]
        else:
            verbose = getattr(args[0], "verbose", 0) if args else 0
        with verbose_logging(verbose):
            return func(*args, **kwargs)

    return wrapper


def _library_dirs():
    import joblib
    import sklearn

    # joblib runs the fits of a grid search (sequential or not)
    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                 for m in (sys.modules[__package__], sklearn, joblib))


# per thread: .seen, the warnings given so far in a given_once block; .drop,
# the texts of the unwarned blocks; .record, the list of a recorded block
_given = threading.local()


@contextmanager
def given_once(seen):
    """Within the block, in this thread, a warning of :func:`warn_user`
    whose category and text are in the set ``seen`` is not given again, and
    one given is added to it (a caller keeps ``seen`` across blocks: the
    frames of a video).  Nested in another such block, the outer set holds."""
    outer = getattr(_given, "seen", None)
    _given.seen = seen if outer is None else outer
    try:
        yield
    finally:
        _given.seen = outer


def warns_once(func):
    """Give each warning of :func:`warn_user` (its category and text) once
    per call of ``func``: a batch of graphs that all share a condition
    warned once per graph (scikit-learn's ``check_array`` resets the
    registry of Python's "default" filter between them)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with given_once(set()):
            return func(*args, **kwargs)

    return wrapper


@contextmanager
def unwarned(text):
    """Drop the warnings of :func:`warn_user` that contain ``text`` within
    the block, in this thread only (``warnings.catch_warnings`` changes the
    filters of every thread, and :func:`ignoring` makes threads take turns)."""
    outer = getattr(_given, "drop", ())
    _given.drop = (*outer, text)
    try:
        yield
    finally:
        _given.drop = outer


@contextmanager
def recorded(into):
    """Within the block, in this thread, append the ``(category, message)``
    of each warning of :func:`warn_user` to the list ``into`` instead of
    giving it: a worker process's, which its caller gives at the user's
    line (their other warnings keep their origin)."""
    outer = getattr(_given, "record", None)
    _given.record = into
    try:
        yield
    finally:
        _given.record = outer


def warn_user(message, category=UserWarning):
    """``warnings.warn(message, category)`` attributed to the first frame
    outside this package, scikit-learn and joblib: the user's line that called
    ``fit``, ``fit_predict``, a grid search or a metric, however deep the
    package's own calls (a fixed ``stacklevel`` points at a different frame
    for each path).  Without such a frame (a command of the package), the
    caller's.  Within a call of a :func:`warns_once` function, a warning
    already given is not repeated; within :func:`unwarned`, one that
    contains its text is dropped; within :func:`recorded`, it is recorded."""
    if any(text in str(message) for text in getattr(_given, "drop", ())):
        return
    if getattr(_given, "record", None) is not None:  # (its caller dedupes)
        _given.record.append((category, str(message)))
        return
    seen = getattr(_given, "seen", None)
    if seen is not None:
        if (category, str(message)) in seen:
            return
        seen.add((category, str(message)))
    skip = _library_dirs()
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level if frame is not None else 2)


# warnings.catch_warnings swaps the process-wide filter list on entry and
# puts it back on exit (thread-safe only from Python 3.14): two such blocks
# interleaved in two threads leave one's filter behind for the process.
_ignoring_lock = threading.RLock()


@contextmanager
def ignoring(category, message="", module=""):
    """Ignore warnings of ``category`` (whose text starts with the regular
    expression ``message``, attributed to a module whose name starts with
    ``module``) within the block, as ``warnings.catch_warnings`` does; the
    blocks of several threads take turns, so that concurrent fits do not
    leave an "ignore" filter in the process's warning filters.  The filter
    is the process's: it silences other threads' warnings too while the
    block runs, so that ``message`` and ``module`` should name only those
    meant.
    """
    with _ignoring_lock, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=message, category=category,
                                module=module)
        yield


def _after_fork_in_child():
    """New locks in a forked child (a thread of the parent, absent here, may
    have held one), and the verbose set-up of such threads undone."""
    global _ignoring_lock, _verbose_lock
    _ignoring_lock = threading.RLock()
    _verbose_lock = threading.Lock()
    if _verbose["blocks"]:
        _verbose["blocks"] = 0
        _undo_verbose_setup()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
