#!/usr/bin/env bash
# Real nnU-Net v2 training on a GPU machine: nnUNetTrainer (augmentation in CPU workers) against
# augscope's nnUNetTrainerAugscopeGPU, each in a fresh process, at the worker counts given. Plans
# and preprocesses a dataset made from the bundled scan and its labels (nnU-Net's own planning,
# 3d_fullres), then trains ITERS iterations per variant; one JSON line per variant in
# $OUT/results.jsonl (bench.py says what each field is).
#
#   WHEELS=".deps .whl" bash benches/nnunet_training/run.sh
#
# WHEELS: folders of wheels to install (nnunetv2 2.8.1 and what it needs, and augscope's own; the
# GPU machine has no network, see README.md beside this script). BASELINE_WHEEL: another
# augscope wheel; a variant written NAME@base runs with it (an A/B in one call, on one host).
# VARIANTS: "name:workers ..." with name default | augscope | default-elastic |
# augscope-elastic | noda. ITERS (default 60; the first quarter, at most 10, is not timed),
# RUN_S (the time limit of one variant), CASES (default 8). CONVERGE (below): short trainings that
# compare the trainers' validation pseudo-Dice.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
wheels=()
for d in ${WHEELS:-.whl}; do wheels+=("$d"/*.whl); done
pip_in() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@" >> "$OUT/pip.log" 2>&1; }
pip_in /tmp/site "${wheels[@]}" || { tail -5 "$OUT/pip.log"; exit 1; }
if [[ -n ${BASELINE_WHEEL:-} ]]; then pip_in /tmp/site_base "$BASELINE_WHEEL" || { tail -5 "$OUT/pip.log"; exit 1; }; fi
export PYTHONUNBUFFERED=1 nnUNet_compile=f
W=/tmp/nnunet_training; mkdir -p $W
el prepare
PYTHONPATH=/tmp/site:$HERE/stubs timeout 200 python3 "$HERE/bench.py" prepare $W "${T1:-assets/mni152_t1.nii.gz}" \
  "${LABELS:-assets/mni152_tissue_labels.nii.gz}" ${CASES:-8} > "$OUT/prepare.log" 2>&1
tail -1 "$OUT/prepare.log"
for v in ${VARIANTS:-default:12 augscope:12 default:4 augscope:4}; do
  name=${v%%:*}; n=${v##*:}; variant=${name%@base}
  path=/tmp/site:$HERE/stubs
  [[ $name == *@base ]] && path=/tmp/site_base:$path
  el "train $name workers=$n"
  PYTHONPATH=$path nnUNet_n_proc_DA=$n timeout ${RUN_S:-110} python3 "$HERE/bench.py" train $W $variant ${ITERS:-60} \
    > "$OUT/train_${name}_$n.log" 2>&1
  line=$(grep -E '^\{' "$OUT/train_${name}_$n.log" | tail -1)
  if [[ -n $line ]]; then echo "${line%\}}, \"name\": \"$name\"}" | tee -a "$OUT/results.jsonl"; else tail -5 "$OUT/train_${name}_$n.log"; fi
done
# CONVERGE="variant:seed ...": short real trainings (EPOCHS of EPOCH_ITERS iterations and
# VAL_ITERS validation batches each), one JSON line of per-epoch pseudo-Dice per run in
# $OUT/converge.jsonl.
for v in ${CONVERGE:-}; do
  name=${v%%:*}; seed=${v##*:}
  el "converge $name seed=$seed"
  PYTHONPATH=/tmp/site:$HERE/stubs nnUNet_n_proc_DA=${CONVERGE_WORKERS:-12} timeout ${CONVERGE_S:-120} \
    python3 "$HERE/bench.py" converge $W $name $seed \
    ${EPOCHS:-8} ${EPOCH_ITERS:-40} ${VAL_ITERS:-8} > "$OUT/converge_${name}_$seed.log" 2>&1
  grep -E '^\{' "$OUT/converge_${name}_$seed.log" | tail -1 | tee -a "$OUT/converge.jsonl" || tail -5 "$OUT/converge_${name}_$seed.log"
done
el done
