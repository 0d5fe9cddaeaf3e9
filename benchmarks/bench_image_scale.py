"""ImageSegmenter at photo scale: memory and time against the image size.

1. **Memory.** Each image size is segmented in a fresh process (after a
   warm-up on a small image, so that the compiled kernels are loaded): the
   image is built, the resident set size is read, its high-water mark is
   reset (``/proc/self/clear_refs``), ``ImageSegmenter().segment`` runs, and
   the new high-water mark gives the peak.  *Working memory* is that peak
   minus the resident set before the call minus the label map returned
   (``H x W`` int64): what the segmentation needed beyond the image and its
   label map.
2. **12 MP through the CLI.** A 4000x3000 JPEG photograph (scikit-image's
   ``coffee``, upscaled) is segmented by ``sklearn-falcon segment`` in a
   shell limited to 16 GB of address space (``ulimit -v 16000000``).

Linux only (``/proc``).  Run ``python -m benchmarks.bench_image_scale``; the
table goes to ``benchmarks/results/image_scale.md``.
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"

_CHILD = r"""
import json, sys, time
import numpy as np
from PIL import Image
from skimage import data
from sklearn_falcon import ImageSegmenter

h, w = int(sys.argv[1]), int(sys.argv[2])

def status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024

seg = ImageSegmenter(n_segments=6, random_state=0)
seg.segment(data.astronaut()[:96, :96])  # load the compiled kernels
img = np.asarray(Image.fromarray(data.astronaut()).resize((w, h), Image.BICUBIC))
base = status("VmRSS")
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")  # reset the high-water mark VmHWM to the current RSS
t0 = time.perf_counter()
labels = seg.segment(img)
dt = time.perf_counter() - t0
peak = status("VmHWM")
print(json.dumps(dict(h=h, w=w, seconds=dt, base=base, peak=peak,
                      image_bytes=img.nbytes, label_bytes=labels.nbytes,
                      n_segments=int(labels.max()) + 1)))
"""


def measure(h, w, repeat):
    """Fresh-process measurements of one size (the fastest time, the
    largest working memory over ``repeat`` runs)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", _CHILD, str(h), str(w)],
                             capture_output=True, text=True, env=env, timeout=1800)
        if out.returncode:
            raise RuntimeError(out.stderr[-2000:])
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    r = dict(runs[0])
    r["seconds"] = min(x["seconds"] for x in runs)
    r["working"] = max(x["peak"] - x["base"] - x["label_bytes"] for x in runs)
    return r


def cli_12mp(limit_kb=16_000_000):
    """``(seconds, returncode, stderr tail, label map shape)`` of the CLI on a
    4000x3000 JPEG under ``ulimit -v limit_kb``."""
    from PIL import Image
    from skimage import data

    with tempfile.TemporaryDirectory() as tmp:
        src = Image.fromarray(data.coffee()).resize((4000, 3000), Image.BICUBIC)
        path = Path(tmp) / "photo12mp.jpg"
        src.save(path, quality=92)
        out_dir = Path(tmp) / "out"
        cmd = (f"ulimit -v {limit_kb} && {sys.executable} -m sklearn_falcon.cli "
               f"segment {path} --out {out_dir} -q")
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep
                   + os.environ.get("PYTHONPATH", ""))
        t0 = time.perf_counter()
        res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True,
                             env=env, timeout=1800)
        dt = time.perf_counter() - t0
        shape = None
        lab = out_dir / "photo12mp_labels.png"
        if lab.exists():
            shape = np.asarray(Image.open(lab)).shape
        return dt, res.returncode, res.stderr[-500:], shape


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="512,1024,2048",
                    help="square image sides, comma separated")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-cli", action="store_true", help="skip the 12 MP CLI run")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    command = " ".join(["python -m benchmarks.bench_image_scale", shlex.join(
        sys.argv[1:] if argv is None else argv)]).rstrip()
    rows = []
    for s in (int(x) for x in args.sizes.split(",")):
        rows.append(measure(s, s, args.repeat))
        print(rows[-1], flush=True)
    mib = float(1 << 20)
    lines = [
        "# ImageSegmenter at photo scale",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs (shared with other jobs: times are noisy). Command: "
        f"`{command}`",
        "",
        "## Memory and time against the image size",
        "",
        "`ImageSegmenter(n_segments=6)` with its defaults (`max_tokens=4096`), "
        "scikit-image's astronaut resized to each size; each size in a fresh "
        f"process, {args.repeat} runs (the fastest time, the largest working memory). "
        "Working memory: peak resident set during `segment` minus the resident set "
        "before it minus the returned label map.",
        "",
        "| image | image (MiB) | label map (MiB) | working memory (MiB) | time (s) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['h']}x{r['w']} | {r['image_bytes'] / mib:.1f} | "
                     f"{r['label_bytes'] / mib:.1f} | {r['working'] / mib:.1f} | "
                     f"{r['seconds']:.2f} |")
    if len(rows) > 1:
        lines += ["", f"Working memory of the largest image over the smallest: "
                  f"{rows[-1]['working'] / rows[0]['working']:.2f}x."]
    if not args.no_cli:
        dt, rc, err, shape = cli_12mp()
        print("cli", dt, rc, err, shape, flush=True)
        lines += [
            "",
            "## 12 MP photograph through the CLI under `ulimit -v 16000000`",
            "",
            "`ulimit -v 16000000 && python -m sklearn_falcon.cli segment photo12mp.jpg "
            "--out DIR -q` on a 4000x3000 JPEG (coffee, upscaled), default options.",
            "",
            f"Exit status {rc}; label map {shape}; wall time {dt:.1f} s (including "
            "the interpreter start and imports)."
            + (f" stderr: `{err.strip()}`" if rc else ""),
        ]
    lines.append("")
    out = Path(args.out) if args.out else RESULTS / "image_scale.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
