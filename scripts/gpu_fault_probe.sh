#!/usr/bin/env bash
# The GPU's ways out when memory runs short, on a machine with a CUDA device:
#  1. every plan kind (rotate, scale, flip, elastic, identity; orders 0, 1, 3; with a label map;
#     with --report; a batch) under a device memory cap (AUGSCOPE_GPU_MEM_LIMIT) that forces the
#     CPU retry;
#  2. a sweep that makes each device allocation fail in turn (AUGSCOPE_GPU_FAIL_ALLOC=N) for the
#     same cases, until the run no longer reaches allocation N.
# A run must end with exit 0 and an output equal (cmp) to the CPU engine's when it printed the
# retry note, or to the same run's output without a fault when it did not (the GPU's results equal
# the CPU's to f32 rounding, not bit for bit); or with one error line and exit 1 or 2; never a
# signal. One line per run, then the counts.
#
#   scripts/gpu_fault_probe.sh BIN DATA_DIR [MAX_N]
#
# DATA_DIR holds mni152_t1.nii.gz and mni152_tissue_labels.nii.gz. Outputs go to $OUT/faults.
set -u
BIN=$1
DATA=$2
MAX_N=${3:-40}
WORK=${OUT:-faults_out}/faults
rm -rf "$WORK"
mkdir -p "$WORK"
T1=$DATA/mni152_t1.nii.gz
LAB=$DATA/mni152_tissue_labels.nii.gz
python3 -c "import numpy as np; np.save('$WORK/big.npy', np.random.default_rng(0).random((128,256,256), dtype=np.float32))"
BIG=$WORK/big.npy

# name|arguments after IN OUT (the output file is .npy)
cases=(
  "rotate_o1|--rotate 0.2,0.1,0"
  "rotate_o3|--rotate 0.2,0.1,0 --order 3"
  "rotate_o0|--rotate 0.2,0.1,0 --order 0"
  "scale|--scale 1.2,0.9,1.1"
  "flip|--flip 0,2"
  "elastic|--elastic 300,9 --seed 3"
  "identity|"
  "all_o3|--rotate 0.3,0,0.1 --scale 1.1 --translate 2,1,0 --elastic 200,8 --seed 4 --order 3 --mode reflect"
)
pass=0
fail=0
line() { echo "$1"; case "$1" in *" ok"*|*" error-line"*) pass=$((pass + 1));; *) fail=$((fail + 1));; esac; }

# The references: each engine's outputs without a fault.
for c in "${cases[@]}"; do
  name=${c%%|*}; args=${c#*|}
  for b in cpu cuda; do
    # shellcheck disable=SC2086
    "$BIN" apply "$BIG" "$WORK/${b}_$name.npy" $args --backend $b 2> /dev/null
    # shellcheck disable=SC2086
    "$BIN" apply "$T1" "$WORK/${b}_lab_$name.npy" --label "$LAB" --label-out "$WORK/${b}_lab_${name}_l.npy" $args --backend $b 2> /dev/null
  done
done

# One run: NAME ENV... -- ARGS; judged against the CPU reference REF (and label reference LREF).
judge() {
  local tag=$1 code=$2 err=$3 out=$4 ref=$5 lout=$6 lref=$7
  if [ "$code" -ge 128 ]; then
    line "$tag CRASH (exit $code): $(tail -c 300 "$err" | tr '\n' ' ')"
  elif [ "$code" = 0 ]; then
    local notes engine=CPU
    notes=$(grep -c 'retried on the CPU' "$err")
    if [ "$notes" = 0 ]; then # no retry: the GPU's own output is the reference
      ref=${ref/\/cpu_/\/cuda_}; lref=${lref/\/cpu_/\/cuda_}; engine=CUDA
    fi
    if cmp -s "$out" "$ref" && { [ -z "$lref" ] || cmp -s "$lout" "$lref"; }; then
      line "$tag ok: $notes retry note(s), equal to the $engine engine's output"
    else
      line "$tag WRONG: exit 0 but the output differs from the $engine engine's"
    fi
  else
    if [ "$(grep -c . "$err")" = 1 ] && [ ! -e "$out" ]; then
      line "$tag error-line (exit $code): $(head -c 200 "$err")"
    else
      line "$tag BAD ERROR (exit $code, $(grep -c . "$err") lines, output left: $([ -e "$out" ] && echo yes || echo no))"
    fi
  fi
}

run_case() { # TAG ENVVAR=VALUE NAME ARGS
  local tag=$1 env=$2 name=$3 args=$4
  rm -f "$WORK/o.npy" "$WORK/l.npy" "$WORK/r.json"
  # shellcheck disable=SC2086
  env "$env" "$BIN" apply "$BIG" "$WORK/o.npy" $args --backend cuda 2> "$WORK/err"
  judge "$tag $name" $? "$WORK/err" "$WORK/o.npy" "$WORK/cpu_$name.npy" "" ""
  rm -f "$WORK/o.npy"
  # shellcheck disable=SC2086
  env "$env" "$BIN" apply "$T1" "$WORK/o.npy" --label "$LAB" --label-out "$WORK/l.npy" $args --backend cuda --report "$WORK/r.json" 2> "$WORK/err"
  judge "$tag ${name}+label+report" $? "$WORK/err" "$WORK/o.npy" "$WORK/cpu_lab_$name.npy" "$WORK/l.npy" "$WORK/cpu_lab_${name}_l.npy"
}

echo "== 1. under AUGSCOPE_GPU_MEM_LIMIT=8M"
for c in "${cases[@]}"; do
  run_case "limit" "AUGSCOPE_GPU_MEM_LIMIT=8M" "${c%%|*}" "${c#*|}"
done
rm -rf "$WORK/b"
AUGSCOPE_GPU_MEM_LIMIT=8M "$BIN" batch --preset nnunet-v2 --count 4 --seed 1 --out "$WORK/b" --ext npy --label "$LAB" --backend cuda "$T1" 2> "$WORK/err"
code=$?
if [ $code -ge 128 ]; then line "limit batch CRASH (exit $code)"; elif [ $code = 0 ]; then line "limit batch ok: $(ls "$WORK/b" | grep -c npy) files"; else line "limit batch error-line? (exit $code): $(head -c 200 "$WORK/err")"; fi

echo "== 2. each allocation made to fail in turn (AUGSCOPE_GPU_FAIL_ALLOC=N)"
for c in "${cases[@]}"; do
  name=${c%%|*}; args=${c#*|}
  for n in $(seq 1 "$MAX_N"); do
    run_case "fail@$n" "AUGSCOPE_GPU_FAIL_ALLOC=$n" "$name" "$args"
    # Past the run's last allocation nothing fails and no retry note appears: stop there.
    if ! grep -q "AUGSCOPE_GPU_FAIL_ALLOC" "$WORK/err"; then break; fi
  done
done
echo "== $pass passed, $fail failed"
[ "$fail" = 0 ]
