"""ImageSegmenter: patch features -> Falcon normalized cut -> pixel masks."""

import os
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, StrOptions

from .._backends import DEVICE_CONSTRAINT, resolve_backend
from .._inits import INITS
from .._threads import fit_threads
from ._affinity import check_token_affinity, cosine_power_affinity
from ._affinity import knn_cosine_power_affinity
from ._auto import _grid_shape, conductance_sweep
from ._budget import DENSE_MAX_TOKENS, KNN_NEIGHBORS, check_memory, make_plan
from ._budget import resize_rgb, too_few_tokens
from ._dataset import segment_dataset, segment_each
from ._extractors import segmenter_extractor
from ._io import as_image_list, check_image_size, load_image, naming_file
from ._pamr import pamr
from ._upsample import prototype_upsample, upsample_labels
from ._video import segment_frames

__all__ = ["ImageSegmenter"]


class ImageSegmenter(BaseEstimator):
    """Unsupervised image segmentation with Falcon normalized cuts.

    Pipeline, per image:

    1. load and convert the image (:func:`load_image`); an image with more
       than ``max_tokens`` tokens is resized to a *working resolution* that
       has at most that many (as a ViT resizes its input);
    2. extract a grid of patch features: the offline colour + texture +
       position extractor (``model="color"``, :class:`ColorTextureFeatures`,
       no weights needed) or any timm Vision Transformer (patch tokens or
       attention keys);
    3. cluster the tokens with :class:`~sklearn_falcon.FalconNCut` on
       :math:`W = \\mathrm{minmax}(S)^p` (:math:`S`: the tokens' cosine
       similarity, :math:`p`: ``power``; above 16,384 tokens a kNN graph,
       :func:`knn_cosine_power_affinity`, unless Falcon runs matrix-free on
       a torch device);
    4. upsample to pixels by prototype reassignment over the bilinearly
       upsampled features, then optionally refine with PAMR (at the working
       resolution);
    5. a resized image gets its label map back at full resolution by joint
       bilateral upsampling (:func:`upsample_labels`), which allocates
       nothing but the output map.

    Before step 2 the peak memory of the image is estimated; when it exceeds
    what the process can still allocate (the available memory, the cgroup
    limits and ``ulimit -v``) a ``MemoryError`` names ``max_tokens``.

    Parameters
    ----------
    model : str or torch.nn.Module, default="color"
        ``"color"`` for the offline extractor (:class:`ColorTextureFeatures`;
        ``"color-position"`` is the earlier :class:`ColorPositionFeatures`),
        a timm model name (e.g. ``"vit_small_patch8_224.dino"``) or a timm
        ViT module.  A module is never modified: loading
        ``checkpoint_path``, eval mode and the move to ``device`` happen on a
        copy when they would change it.
    n_segments : int or "auto", default=6
        Number of segments K, or ``"auto"``: Falcon is run for K from
        ``auto_range[1]`` down to ``auto_range[0]``, and the largest K whose
        segments all have a conductance ``cut_k / vol_k`` (the share of
        their affinity that leaves them) of at most ``auto_threshold`` and
        are spatially coherent (``auto_grid_threshold``) is kept;
        eigen-free.  See ``benchmarks/results/segmentation.md`` for its
        mIoU against the true K.
    pretrained : bool, default=False
        Load pretrained timm weights (ViT models only; none are fetched
        with a ``checkpoint_path``, which replaces them all).
    checkpoint_path : str or path-like, default=None
        Local weights for the ViT (state dict, safetensors or timm checkpoint).
    layer : int, default=-1
        ViT block whose output is used.
    feature : {"token", "key"}, default="token"
        ViT patch tokens or attention keys of block ``layer``.
    resolution : int or (int, int), default=None
        ViT input size (shorter side, or exact ``(H, W)``), rounded to
        multiples of the patch size; ``None`` uses the model's pretrained
        input size.  Capped so that the ViT makes at most ``max_tokens``
        tokens.
    pos_interpolation : {"bicubic", "timm"}, default="bicubic"
        How the ViT's position embedding is resized to other token grids
        (see :class:`~sklearn_falcon.image.TimmFeatures`).
    position_weight : float, default=None
        Weight of the position term appended to the features, which favours
        compact segments: ``None`` keeps the extractor's default, 0.3 for
        ``model="color"``, 0 (none) for a ViT; not for ``"color-position"``.
    smoothing : float, default=0.0
        ViT only: Gaussian smoothing of the unit-norm tokens over their grid,
        in tokens (see :class:`~sklearn_falcon.image.TimmFeatures`).
    patch_size : int, default=None
        Cell size of the ``"color"`` extractors (8 if ``None``).
    max_tokens : int, default=4096
        Token budget.  An image with more tokens is processed at a working
        resolution with ``max_tokens`` tokens (``max_tokens * patch_size**2``
        pixels; ``max_tokens * 64`` for a ViT's upsampling and PAMR), so
        that memory does not grow with the image beyond the image and its
        label map: the default treats a 512x512 image at full resolution and
        a 12-megapixel photo in about the same memory.
    power : float, default=None
        Affinity sharpening exponent; ``None`` uses the extractor's
        ``default_power``: 10 for ViT tokens (as in DiffCut and Falcon), 6
        for ``"color"`` and 3 for ``"color-position"``.
    refine : {"pamr", None}, default="pamr"
        Pixel-level refinement; ``"none"`` is accepted for ``None``.
    pamr_iter : int, default=10
        PAMR iterations.
    auto_range : (int, int), default=(2, 10)
        Range of K searched by ``n_segments="auto"``.
    auto_threshold : float, default=0.45
        Conductance threshold of ``n_segments="auto"`` (chosen on the
        synthetic benchmark with the default features).
    auto_grid_threshold : float or None, default=0.25
        Largest share of a segment's 4-neighbour token pairs that may cross
        to other segments under ``n_segments="auto"`` (its conductance on
        the token grid); it rejects a K that splits a region into stripes or
        fragments, which the feature conductance alone lets through on
        coarse textures.  0.25 was chosen on the synthetic benchmark (seed
        0) and checked on other seeds and on photo mosaics; None disables.
    n_init : int, default=1
        Falcon initializations per image.
    init : {"multilevel", "multilevel_fast", "kmeans", "spectral", "random"}, \
            default="multilevel"
        Falcon's initialization on the token graph (``"kmeans"``: k-means on
        the token features, so not on the kNN graph of more than 16,384
        tokens).
    device : str or torch.device, default="cpu"
        Torch device of the ViT and of Falcon's torch backend (``"auto"``
        picks CUDA when available).  On CUDA, the token affinity (formed in
        row blocks by Falcon), the upsampling and PAMR run there too (torch
        kernels), and :meth:`segment_dataset` solves each batch of images in
        one batched Falcon call; on the CPU they run on NumPy and Numba.
    random_state : int, RandomState instance or None, default=0
        Seed of Falcon's initialization (a RandomState: one drawn per image by
        fit and segment_dataset); reproducible and backend-independent results.

    Attributes
    ----------
    labels_ : list of ndarray of shape (H, W)
        Label maps of the images given to :meth:`fit`.
    n_segments_ : list of int
        Number of segments of each map.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon import ImageSegmenter
    >>> img = np.zeros((48, 64, 3), np.uint8)
    >>> img[:, 32:] = (200, 30, 30)
    >>> labels = ImageSegmenter(n_segments=2, refine=None).segment(img)
    >>> labels.shape, np.unique(labels[:, :30]).size, np.unique(labels[:, 34:]).size
    ((48, 64), 1, 1)
    """

    def __init__(
        self,
        model="color",
        n_segments=6,
        *,
        pretrained=False,
        checkpoint_path=None,
        layer=-1,
        feature="token",
        resolution=None,
        pos_interpolation="bicubic",
        position_weight=None,
        smoothing=0.0,
        patch_size=None,
        max_tokens=4096,
        power=None,
        refine="pamr",
        pamr_iter=10,
        auto_range=(2, 10),
        auto_threshold=0.45,
        auto_grid_threshold=0.25,
        n_init=1,
        init="multilevel",
        device="cpu",
        random_state=0,
    ):
        self.model = model
        self.n_segments = n_segments
        self.pretrained = pretrained
        self.checkpoint_path = checkpoint_path
        self.layer = layer
        self.feature = feature
        self.resolution = resolution
        self.pos_interpolation = pos_interpolation
        self.position_weight = position_weight
        self.smoothing = smoothing
        self.patch_size = patch_size
        self.max_tokens = max_tokens
        self.power = power
        self.refine = refine
        self.pamr_iter = pamr_iter
        self.auto_range = auto_range
        self.auto_threshold = auto_threshold
        self.auto_grid_threshold = auto_grid_threshold
        self.n_init = n_init
        self.init = init
        self.device = device
        self.random_state = random_state

    # -- helpers ---------------------------------------------------------
    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_extractor_cache", None)  # rebuilt lazily after unpickling
        return state

    def _get_extractor(self):
        return segmenter_extractor(self)  # (cached on self)

    _parameter_constraints: dict = {
        "model": "no_validation",
        "n_segments": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "pretrained": ["boolean"],
        "checkpoint_path": [str, os.PathLike, None],
        "layer": [Integral],
        "feature": [StrOptions({"token", "key"})],
        "resolution": [Interval(Integral, 1, None, closed="left"), tuple, list, None],
        "pos_interpolation": [StrOptions({"bicubic", "timm"})],
        "position_weight": [Interval(Real, 0, None, closed="left"), None],
        "smoothing": [Interval(Real, 0, None, closed="left")],
        "patch_size": [Interval(Integral, 1, None, closed="left"), None],
        "max_tokens": [Interval(Integral, 1, None, closed="left")],
        "power": [Interval(Real, 0, None, closed="neither"), None],
        "refine": [StrOptions({"pamr", "none"}), None],
        "pamr_iter": [Interval(Integral, 0, None, closed="left")],
        "auto_range": [tuple, list],
        "auto_threshold": [Interval(Real, 0, 1, closed="neither")],
        "auto_grid_threshold": [Interval(Real, 0, 1, closed="right"), None],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions(set(INITS))],
        "device": DEVICE_CONSTRAINT,
        "random_state": ["random_state"],
    }

    def _check_params(self):
        self._validate_params()
        r = self.auto_range
        if not (len(r) == 2 and all(isinstance(v, Integral) for v in r)
                and 1 <= r[0] <= r[1]):
            raise ValueError(
                "The 'auto_range' parameter of ImageSegmenter must be a pair of "
                f"integers 1 <= low <= high. Got {r!r} instead.")
        self._torch_device()  # refused before a ViT is built and moved there

    def _torch_device(self):
        """Falcon's torch device (CUDA: the upsampling, PAMR too) or None."""
        backend, device = resolve_backend("auto", self.device)
        return device if backend == "torch" else None

    def _power(self):
        if self.power is not None:
            return float(self.power)
        return float(getattr(self._get_extractor(), "default_power", 10.0))

    def _falcon(self, n_clusters, affinity, init=None, warm_start=False):
        from .._falcon import FalconNCut

        return FalconNCut(
            n_clusters=n_clusters,
            affinity=affinity,
            power=self._power() if affinity == "cosine" else 1.0,
            init=self.init if init is None else init,
            n_init=self.n_init,
            warm_start=warm_start,
            device=self.device,
            random_state=self.random_state,
        )

    def _plan(self, shape, ext):
        vit = hasattr(ext, "input_size")
        patch = 8 if vit else int(ext.patch_size[0])
        k = self.auto_range[1] if self.n_segments == "auto" else int(self.n_segments)

        def vit_tokens(h, w):
            ih, iw = ext.input_size(h, w)
            return (ih // ext.patch_size[0]) * (iw // ext.patch_size[1])

        return make_plan(
            shape, max_tokens=self.max_tokens, patch=patch,
            n_features=int(getattr(ext, "n_features", 384)), n_segments=k,
            refine=self.refine == "pamr" and self.pamr_iter > 0,
            vit_tokens=vit_tokens if vit else None,
            matrix_free=self._torch_device() is not None,
            min_size=tuple(ext.patch_size))

    def _graph(self, X, plan):
        """``(input, affinity)`` of Falcon for the token features ``X``."""
        if plan.graph == "knn":
            W = knn_cosine_power_affinity(X, self._power(), n_neighbors=KNN_NEIGHBORS,
                                          random_state=self.random_state)
            return W, "precomputed"
        return X, "cosine"

    def _cluster(self, X, affinity, est=None, grid_shape=None, resized=False):
        """Token labels ``0..K-1`` from token features (``affinity="cosine"``)
        or from their affinity (``"precomputed"``).  ``est``: a FalconNCut
        with ``warm_start=True`` kept across calls (video frames);
        ``grid_shape``: the token grid, for ``n_segments="auto"``;
        ``resized``: the image was resized to the token budget."""
        n, auto = X.shape[0], self.n_segments == "auto"  # "auto": its K >= low
        k, name = ((int(self.auto_range[0]), "auto_range[0]") if auto
                   else (int(self.n_segments), "n_segments"))
        if k > n:
            ext = self._get_extractor()  # resolution=None: its model's ("now None")
            raise too_few_tokens(n, k, name, self.max_tokens, self.resolution or
                                 getattr(ext, "default_short", None),
                                 hasattr(ext, "input_size"), resized)
        # W on one BLAS thread, whatever the process's (a joblib worker's is
        # cpu_count // n_jobs): the labels followed its rounding
        with fit_threads(None, limit_blas=self._torch_device() is None):
            if auto:
                return self._cluster_auto(X, affinity, grid_shape)
            if k == 1:
                return np.zeros(n, dtype=np.int64)
            if est is None:
                est = self._falcon(k, affinity)
            return est.fit(X).labels_

    def _cluster_auto(self, X, affinity, grid_shape):
        """``n_segments="auto"``: :func:`._auto.conductance_sweep`."""
        if (affinity == "cosine" and self._torch_device() is None
                and not INITS[self.init].needs_features):
            # one dense W for the whole sweep (on a device: matrix-free fits;
            # with k-means on the features, one cosine W per K)
            X, affinity = cosine_power_affinity(X, self._power()), "precomputed"
        return conductance_sweep(lambda k: self._falcon(k, affinity).fit(X),
                                 X.shape[0], self.auto_range, self.auto_threshold,
                                 grid_shape=grid_shape,
                                 grid_threshold=self.auto_grid_threshold)

    def cluster_tokens(self, W, grid_shape=None):
        """Cluster tokens given their affinity; returns labels ``0..K-1``.

        Parameters
        ----------
        W : {array-like, sparse matrix} of shape (n_tokens, n_tokens)
            Token affinity (``init`` must be one that needs no features).
        grid_shape : (int, int), default=None
            The tokens' grid ``(gh, gw)`` (row-major, ``gh * gw ==
            n_tokens``), for the spatial test of ``n_segments="auto"``
            (``auto_grid_threshold``); None skips it; checked with any ``n_segments``.

        Returns
        -------
        labels : ndarray of shape (n_tokens,)
        """
        self._check_params()
        W = check_token_affinity(W, self.n_segments, self.auto_range)
        if grid_shape is not None:  # checked, unread for an int n_segments
            grid_shape = _grid_shape(grid_shape, W.shape[0])
        return self._cluster(W, "precomputed", grid_shape=grid_shape)

    # -- the pipeline, in stages -------------------------------------------
    def _prepare(self, rgb):
        """``(plan, working image)``, after the memory check."""
        ext = self._get_extractor()
        # the size the caller gave
        check_image_size(rgb, ext.patch_size, advice=getattr(ext, "size_advice", None))
        plan = self._plan(rgb.shape[:2], ext)
        check_memory(plan, self.max_tokens)
        work = resize_rgb(rgb, plan.work_shape) if plan.resized else rgb
        return plan, work

    def _segment_work(self, work, plan, est=None):
        """Label map of the working image, ids ``0..n-1``."""
        if plan.graph == "knn" and INITS[self.init].needs_features:  # known
            raise ValueError(  # from the plan: before the features' extraction
                f"init={self.init!r} needs the token features, but the "
                f"{plan.n_tokens} tokens of this image (more than "
                f"{DENSE_MAX_TOKENS}) are clustered on their kNN graph. Use "
                "init='multilevel' or a smaller max_tokens (now "
                f"{self.max_tokens}).")
        feats = self._get_extractor().extract(work)
        gh, gw = feats.shape[:2]
        dev = self._torch_device()
        X, affinity = self._graph(feats.reshape(gh * gw, -1), plan)
        tok = self._cluster(X, affinity, est=est, grid_shape=(gh, gw),
                            resized=plan.resized).reshape(gh, gw)
        return self._finish_work(work, feats, tok, dev)

    def _finish_work(self, work, feats, tok, dev):
        labels = prototype_upsample(feats, tok, work.shape[:2], device=dev)
        if self.refine == "pamr" and self.pamr_iter > 0:
            labels = pamr(work, labels, n_iter=self.pamr_iter, device=dev)
        return np.unique(labels, return_inverse=True)[1].reshape(work.shape[:2])

    def _full(self, rgb, work, labels, ids=None):
        """The working label map at the image's resolution, with ``ids``
        (``ids[k]`` for segment ``k``; ``0..n-1`` compacted when None)."""
        labels = np.asarray(labels, dtype=np.int64)
        if ids is not None:
            labels = np.asarray(ids, dtype=np.int64)[labels]
        if work is rgb:
            return labels
        out = upsample_labels(labels, rgb, work, device=self._torch_device())
        if ids is None:  # a segment may vanish at full resolution: 0..n-1
            present = np.bincount(out.ravel(), minlength=int(labels.max()) + 1) > 0
            if not present.all():
                lut = np.cumsum(present) - 1
                np.take(lut, out, out=out)
        return out

    # -- public API -------------------------------------------------------
    def extract_features(self, image):
        """Token feature grid of an image, at its working resolution.

        Parameters
        ----------
        image : str, path-like, PIL image, ndarray or torch tensor
            See :func:`load_image`.

        Returns
        -------
        features : ndarray of shape (gh, gw, C), float32
            The features Falcon clusters: ``C`` per token of the
            ``gh x gw`` grid.
        """
        self._check_params()
        rgb, ext = load_image(image), self._get_extractor()  # (no image's error)
        with naming_file(image, "extract the features of"):  # as segment does
            return ext.extract(self._prepare(rgb)[1])

    def segment(self, image):
        """Segment one image.

        Parameters
        ----------
        image : str, path-like, PIL image, ndarray or torch tensor
            See :func:`load_image`.

        Returns
        -------
        labels : ndarray of shape (H, W), int64
            Segment ids ``0..n-1`` at the input resolution.

        Raises
        ------
        MemoryError
            When the image would need more memory than the process can
            still allocate; the message names ``max_tokens``.
        """
        self._check_params()
        rgb, _ = load_image(image), self._get_extractor()  # (no image's error)
        with naming_file(image):  # a size refusal: which of a folder's images
            plan, work = self._prepare(rgb)
            return self._full(rgb, work, self._segment_work(work, plan))

    def segment_video(self, frames):
        """Segment the frames of a video with segment ids kept across frames.

        Each frame is segmented as by :meth:`segment`.  With an integer
        ``n_segments``, Falcon keeps one estimator with ``warm_start=True``:
        a frame whose token grid has the previous frame's shape starts from
        the previous frame's token labels (a few iterations), and is fitted
        afresh too, the lower NCut kept, after a cut, a blank frame or a jump
        of the NCut (the user guide's "Video and warm starts").  Segments are
        matched to the previous frame's by maximal overlap (Hungarian): a
        matched one keeps its id, a new one gets an id never used before.
        A warning that the frames share is given once per video.

        Parameters
        ----------
        frames : iterable of images
            Frames in order (paths, PIL images, arrays or tensors); read one
            at a time, so a generator of frames works.  One image (a path,
            a PIL image, an ``(H, W, C)`` array) is refused: pass
            ``[image]``.

        Returns
        -------
        label_maps : generator of ndarray of shape (H, W), int64
            One map per frame, yielded as the frames are read; ids are
            consistent from frame to frame (so not necessarily ``0..n-1``).

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_falcon import ImageSegmenter
        >>> frames = []
        >>> for shift in range(3):
        ...     f = np.zeros((48, 64, 3), np.uint8)
        ...     f[:, 30 + shift:] = (200, 30, 30)
        ...     frames.append(f)
        >>> maps = list(ImageSegmenter(n_segments=2, refine=None).segment_video(frames))
        >>> left, right = int(maps[0][0, 0]), int(maps[0][0, -1])
        >>> all(m[0, 0] == left and m[0, -1] == right for m in maps), left != right
        (True, True)
        """
        self._check_params()
        return segment_frames(self, frames)

    def fit(self, images, y=None):
        """Segment every image of ``images``; stores ``labels_``.

        Parameters
        ----------
        images : iterable of images
            Paths, PIL images, arrays or tensors, in a list or any iterable
            (a single image is also accepted).
        y : None
            Ignored.

        Returns
        -------
        self : ImageSegmenter
        """
        self._check_params()  # also without images
        if not (images := as_image_list(images)):  # a glob that matched nothing
            raise ValueError("images is empty: fit needs at least one image.")
        self.labels_ = segment_each(self, images)
        self.n_segments_ = [int(lab.max()) + 1 for lab in self.labels_]
        return self

    def fit_predict(self, images, y=None):
        """Segment every image of ``images``; returns their label maps.

        Parameters
        ----------
        images : sequence of images
            As in :meth:`fit`.
        y : None
            Ignored.

        Returns
        -------
        labels : list of ndarray of shape (H, W), int64
            ``labels_``: one map per image.
        """
        return self.fit(images).labels_

    def segment_dataset(self, images, *, n_jobs=None, batch_size=4, progress=True):
        """Segment many images, with a progress bar.

        On the CPU, images are grouped into tasks of ``batch_size`` images
        run in parallel by joblib (each task builds the feature extractor
        once); inside ``joblib.parallel_config(backend="dask")`` the tasks
        run on the active Dask cluster.  On a CUDA ``device`` with an
        integer ``n_segments`` and ``n_init=1``, each group of
        ``batch_size`` images is solved in one batched Falcon call on the
        GPU (:func:`~sklearn_falcon.falcon_batch`, matrix-free), and the
        upsampling and PAMR run there too.  A warning raised in a worker
        process of joblib's default backend is issued in the caller's (its
        filters apply), and one that several images share is given once per
        call.

        Parameters
        ----------
        images : iterable
            Image paths (or any input accepted by :meth:`segment`), e.g.
            a list or ``Path(folder).glob("*.jpg")``.
        n_jobs : int, default=None
            joblib workers (``None`` follows the active joblib config).
        batch_size : int, default=4
            Images per task (per batched solve on CUDA).
        progress : bool, default=True
            Show a tqdm progress bar (when tqdm is installed).

        Returns
        -------
        labels : list of ndarray
            One label map per image, in input order.
        """
        self._check_params()
        return segment_dataset(self, images, n_jobs, batch_size, progress)
