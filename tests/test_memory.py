"""The memory estimates of sklearn_falcon._memory."""

import numpy as np
import pytest
from sklearn import config_context

from sklearn_falcon import _memory


def test_dense_nbytes_and_format():
    assert _memory.dense_nbytes((200_000, 200_000), np.float64) == 8 * 4 * 10**10
    assert _memory.dense_nbytes((3, 4), "float32") == 48
    assert _memory.format_bytes(512) == "512 B"
    assert _memory.format_bytes(1536 * 2**20) == "1.5 GiB"
    assert _memory.format_bytes(_memory.dense_nbytes((200_000,) * 2)) == "298 GiB"


def test_available_memory_is_positive():
    avail = _memory.available_memory()
    assert avail is None or avail > 0


def test_check_allocation_refuses_with_advice(monkeypatch):
    monkeypatch.setattr(_memory, "available_memory", lambda: 2**30)
    _memory.check_allocation(2**29, "half of it")  # fits: no error
    with pytest.raises(MemoryError, match=r"big thing needs about 2 GiB, but only "
                                          r"1 GiB .* Try less\."):
        _memory.check_allocation(2**31, "big thing", "Try less.")


def test_check_allocation_unknown_memory(monkeypatch):
    monkeypatch.setattr(_memory, "available_memory", lambda: None)
    _memory.check_allocation(2**80, "anything")  # unknown: never refuses


def test_falcon_batch_reads_the_available_memory_once(monkeypatch):
    """falcon_batch(affinity="precomputed") read the available memory (psutil
    and the cgroup files, about 0.4 ms) for the copy of every dense graph,
    most of its validation's time on small graphs; it reads it once, and
    each graph's copy takes its share off it, as the copies it holds do."""
    from sklearn_falcon import falcon_batch

    reads = []

    def available():
        reads.append(1)
        return 60_000

    monkeypatch.setattr(_memory, "available_memory", available)
    W = np.kron(np.eye(2), np.ones((30, 30))) + 0.01  # 28.8 kB a copy
    res = falcon_batch([W, W], 2, affinity="precomputed", random_state=0)
    assert len(reads) == 1 and res.ncut.shape == (2,)
    with pytest.raises(MemoryError, match=r"copy of the dense \(60, 60\) affinity "
                       r"graphs\[2\] needs about 28.1 KiB, but only 2.34 KiB"):
        falcon_batch([W, W, W], 2, affinity="precomputed")
    _memory.check_allocation(50_000, "after the batch")  # read again: fits
    assert len(reads) == 3


def test_cgroup_limit_is_respected(monkeypatch, tmp_path):
    (tmp_path / "memory.max").write_text("1000\n")
    (tmp_path / "memory.current").write_text("400\n")
    monkeypatch.setattr(_memory, "_CGROUP_V2", str(tmp_path))
    assert _memory._cgroup_room() == 600
    assert _memory.available_memory() == 600
    (tmp_path / "memory.max").write_text("max\n")
    assert _memory._cgroup_room() is None



@pytest.mark.parametrize("version", [1, 2])
def test_cgroup_room_counts_inactive_page_cache_as_free(monkeypatch, tmp_path,
                                                        version):
    # a container's usage counts the page cache of the files it read (a
    # dataset loaded from disk): 4 GiB of a 6 GiB allocation that fits was
    # refused; the kernel reclaims inactive cache first (docker stats and
    # cAdvisor's working set leave it out too)
    GiB = 2**30
    if version == 2:
        files = {"memory.max": 8 * GiB, "memory.current": 6 * GiB}
        stat = f"anon {2 * GiB}\nfile {4 * GiB}\ninactive_file {3 * GiB}\n"
    else:
        files = {"memory.limit_in_bytes": 8 * GiB, "memory.usage_in_bytes": 6 * GiB}
        stat = (f"cache 0\ninactive_file 0\ntotal_cache {4 * GiB}\n"
                f"total_inactive_file {3 * GiB}\n")
    for name, value in files.items():
        (tmp_path / name).write_text(f"{value}\n")
    (tmp_path / "memory.stat").write_text(stat)
    monkeypatch.setattr(_memory, "_CGROUP_V2", str(tmp_path / "absent"))
    monkeypatch.setattr(_memory, f"_CGROUP_V{version}", str(tmp_path))
    assert _memory._cgroup_room() == 5 * GiB
    (tmp_path / "memory.stat").unlink()  # unreadable: the usage as it is
    assert _memory._cgroup_room() == 2 * GiB


@pytest.mark.parametrize("version", [1, 2])
def test_cgroup_limit_of_a_cgroup_below_the_mount_is_found(monkeypatch, tmp_path,
                                                           version):
    # a Slurm job or a systemd unit (no cgroup namespace) has its limit in its
    # own cgroup below the mount point, and an ancestor's may be lower: only
    # the mount point's files were read, so the guard let through allocations
    # that the job's limit then killed
    GiB = 2**30
    own = "/slurm/uid_1/job_2" if version == 1 else "/system.slice/job.scope"
    line = f"4:cpu,memory:{own}" if version == 1 else f"0::{own}"
    (tmp_path / "cgroup").write_text(f"9:pids:/other\n{line}\n")
    limit, usage = (("memory.limit_in_bytes", "memory.usage_in_bytes")
                    if version == 1 else ("memory.max", "memory.current"))
    leaf = tmp_path / "mount" / own.strip("/")
    leaf.mkdir(parents=True)
    (leaf / limit).write_text(f"{4 * GiB}\n")
    (leaf / usage).write_text(f"{GiB}\n")
    monkeypatch.setattr(_memory, "_PROC_CGROUP", str(tmp_path / "cgroup"))
    monkeypatch.setattr(_memory, "_CGROUP_V1", str(tmp_path / "absent"))
    monkeypatch.setattr(_memory, "_CGROUP_V2", str(tmp_path / "absent"))
    monkeypatch.setattr(_memory, f"_CGROUP_V{version}", str(tmp_path / "mount"))
    assert _memory._cgroup_room() == 3 * GiB
    parent = leaf.parent  # a lower limit above it: the smaller room
    (parent / limit).write_text(f"{8 * GiB}\n")
    (parent / usage).write_text(f"{7 * GiB}\n")
    assert _memory._cgroup_room() == GiB

@pytest.mark.parametrize("n_rows, row_bytes, wm, expected", [
    (5, 2**20, 2, [(0, 2), (2, 4), (4, 5)]),
    (3, 2**30, 1, [(0, 1), (1, 2), (2, 3)]),  # a row over the budget: one a chunk
    (0, 8, 1, []),
    (10, 8, 1, [(0, 10)]),
])
def test_row_chunks(n_rows, row_bytes, wm, expected):
    got = _memory.row_chunks(n_rows, row_bytes, working_memory=wm)
    assert [(s.start, s.stop) for s in got] == expected


def test_row_chunks_follows_working_memory():
    with config_context(working_memory=1):
        chunks = _memory.row_chunks(100, 2**18)
    assert [(s.start, s.stop) for s in chunks][:2] == [(0, 4), (4, 8)]


def test_release_free_heap_gives_back_freed_memory(monkeypatch):
    # glibc keeps freed arrays below its (adaptive) mmap threshold in the
    # heap; the release gives them back, and elsewhere it does nothing
    import sys

    from sklearn_falcon import _memory

    def rss_kb():
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh
                        if line.startswith("VmRSS:"))

    if not sys.platform.startswith("linux") or not _memory.release_free_heap():
        pytest.skip("not glibc")
    # arrays of 4 MB, freed: after the first large free glibc serves them
    # from its heap (the threshold rises), and keeps them there
    mb = 1 << 20
    big = np.ones(8 * mb // 8)
    del big
    held = [np.ones(4 * mb // 8) for _ in range(16)]
    del held[::2]
    before = rss_kb()
    assert _memory.release_free_heap()
    assert rss_kb() <= before - 16 * 1024  # at least half of the 32 MB freed
    monkeypatch.setitem(_memory._LIBC, "trim", None)
    assert _memory.release_free_heap() is False
