#!/usr/bin/env bash
# Run the test suite as it runs on an older x86-64 CPU: every library that picks its kernels by the
# CPU it finds is told to take those of an older one, so the suite meets the rounding of the
# kernels a CI machine without AVX-512 (avx2: Haswell) or without AVX (sse4: Nehalem, the x86-64-v2
# baseline NumPy 2 needs) would run. Arguments after the level go to pytest.
#
#   bash scripts/test_older_cpu.sh avx2 [-x -q ...]
#   bash scripts/test_older_cpu.sh sse4
#
# NumPy's dispatched loops (NPY_DISABLE_CPU_FEATURES), OpenBLAS's kernels (OPENBLAS_CORETYPE),
# oneDNN's (ONEDNN_MAX_CPU_ISA) and the code Numba compiles (NUMBA_CPU_NAME) follow the level;
# ONEDNN_VERBOSE=1 shows oneDNN's choice (e.g. brgconv:avx2, jit:sse41).
set -euo pipefail
level="${1:-}"
case "$level" in
    avx2) numpy_off="X86_V4 AVX512_ICL AVX512_SPR" blas=Haswell onednn=AVX2 numba=haswell ;;
    sse4) numpy_off="X86_V3 X86_V4 AVX512_ICL AVX512_SPR" blas=Nehalem onednn=SSE41 numba=nehalem ;;
    *) echo "test_older_cpu.sh: give the CPU level to emulate: avx2 or sse4 (got '${level}')" >&2; exit 2 ;;
esac
shift
cd "$(dirname "$0")/.."
NPY_DISABLE_CPU_FEATURES="$numpy_off" OPENBLAS_CORETYPE="$blas" ONEDNN_MAX_CPU_ISA="$onednn" \
    NUMBA_CPU_NAME="$numba" exec python -m pytest -p no:cacheprovider "$@"
