#!/usr/bin/env bash
# The Python package on the GPU machine, in one call: pytest (CUDA tensors against the CLI on
# CUDA, filters and FEBDS on device tensors, the out-of-memory fallback, memory statistics), the
# engine's own CUDA tests (the host path is unchanged), the training-loop benchmark against
# batchgeneratorsv2 on 1 and 16 CPU workers, and FEBDS against medical-image-std.
#
# Build here first (the GPU machine has no Rust toolchain and no network):
#   cargo build --release --no-default-features && mkdir -p .gpu/tests && cp target/release/augscope .gpu/
#   pwd > .gpu/build_root
#   cargo test --release --no-run --no-default-features --test cuda --test filters_cuda  (copy the
#     two executables into .gpu/tests/)
#   pip wheel --no-deps -w .whl ./python, and the wheels of batchgeneratorsv2, batchgenerators,
#     medical-image-std and pydicom (pip download --no-deps, see the device tool's notes)
# Then run with the device tool: carry [".gpu", ".whl"], command `bash scripts/gpu_python.sh`.
set -u
OUT=${OUT:-gpu_out}
STEPS=${STEPS:-pytest,rust,loop,febds}
mkdir -p "$OUT"
log() { echo "== $* ($(date +%T))" | tee -a "$OUT/summary.txt"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
# The Rust test binaries look for their fixtures under the folder they were built in (written
# to .gpu/build_root by the build), and for the CLI in its target folder.
BUILD_ROOT=$(cat .gpu/build_root 2>/dev/null || true)
if [[ -n $BUILD_ROOT && ! -e $BUILD_ROOT ]]; then
  mkdir -p "$(dirname "$BUILD_ROOT")" && ln -s "$PWD" "$BUILD_ROOT"
fi
mkdir -p target/release && cp .gpu/augscope target/release/augscope

log "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee -a "$OUT/summary.txt"
nproc | tee -a "$OUT/summary.txt"
.gpu/augscope devices 2>&1 | tee -a "$OUT/summary.txt"

if [[ $STEPS == *pytest* ]]; then
  log "pytest python/tests (CUDA tensors included)"
  (cd /tmp && AUGSCOPE="$OLDPWD/.gpu/augscope" timeout 400 python3 -m pytest -q -s -p no:cacheprovider \
     "$OLDPWD/python/tests" > "$OUT/pytest.log" 2>&1; echo "pytest exit $?" >> "$OUT/pytest.log")
  grep -E "passed|failed|error|128\^3|FAILED" "$OUT/pytest.log" | tail -20 | tee -a "$OUT/summary.txt"
fi

if [[ $STEPS == *rust* ]]; then
  log "the engine's CUDA tests"
  for t in .gpu/tests/*; do
    timeout 150 "$t" --test-threads=8 ${RUST_FILTER:-} > "$OUT/rust_$(basename "$t").log" 2>&1
    echo "$(basename "$t"): exit $?" | tee -a "$OUT/summary.txt"
    grep -E "test result" "$OUT/rust_$(basename "$t").log" | tee -a "$OUT/summary.txt"
  done
fi

if [[ $STEPS == *loop* ]]; then
  log "training loop: augscope on the GPU against batchgeneratorsv2 on 1 and 16 workers"
  W=$(mktemp -d)
  .gpu/augscope apply assets/mni152_t1.nii.gz "$W/mni.npy" > /dev/null
  .gpu/augscope apply assets/mni152_tissue_labels.nii.gz "$W/lab.npy" --order 0 --dtype keep > /dev/null
  timeout 300 python3 -P python/bench_train_loop.py --image "$W/mni.npy" --label "$W/lab.npy" \
    --workers 16 --json "$OUT/train_loop.json" > "$OUT/train_loop.log" 2>&1
  echo "exit $?" >> "$OUT/train_loop.log"
  grep -E "^augscope|^batchgen|exit" "$OUT/train_loop.log" | tee -a "$OUT/summary.txt"
fi

if [[ $STEPS == *febds* ]]; then
  log "FEBDS from Python against medical-image-std 0.8.2"
  timeout 240 python3 -P python/bench_febds.py --json "$OUT/febds.json" 2>&1 | tee -a "$OUT/summary.txt"
fi
log "done"
