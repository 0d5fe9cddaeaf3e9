import os

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest
from PIL import Image

from sklearn_falcon import ImageSegmenter


def _images(tmp_path, n=5):
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        img = np.zeros((32, 40, 3), np.uint8)
        img[:, 20:] = rng.integers(0, 256, 3)
        img[:16] += rng.integers(0, 60, 3).astype(np.uint8)
        img = np.clip(img + rng.normal(0, 5, img.shape), 0, 255).astype(np.uint8)
        p = tmp_path / f"im{i}.png"
        Image.fromarray(img).save(p)
        paths.append(p)
    return paths


def test_segment_dataset_serial_and_threads(tmp_path):
    import joblib

    paths = _images(tmp_path)
    seg = ImageSegmenter(n_segments=3, refine=None, random_state=0)
    serial = [seg.segment(p) for p in paths]
    out = seg.segment_dataset(paths, n_jobs=1, batch_size=2, progress=True)
    assert len(out) == len(paths)
    for a, b in zip(out, serial):
        np.testing.assert_array_equal(a, b)
    with joblib.parallel_config(backend="threading"):
        out2 = seg.segment_dataset(paths, n_jobs=2, batch_size=1, progress=False)
    for a, b in zip(out2, serial):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="batch_size"):
        seg.segment_dataset(paths, batch_size=0)


def test_segment_dataset_on_dask_localcluster(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    import joblib

    paths = _images(tmp_path)
    seg = ImageSegmenter(n_segments=3, refine="pamr", random_state=0)
    serial = seg.segment_dataset(paths, n_jobs=1, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            with distributed.get_task_stream(client) as stream:
                with joblib.parallel_config(backend="dask"):
                    out = seg.segment_dataset(paths, batch_size=2, progress=True)
            # the three batches really ran as tasks on the cluster's workers
            assert len(stream.data) >= 3
            assert {t["worker"] for t in stream.data} <= set(client.scheduler_info()["workers"])
    assert len(out) == len(serial)
    for a, b in zip(out, serial):
        np.testing.assert_array_equal(a, b)
