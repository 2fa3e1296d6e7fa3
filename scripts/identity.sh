#!/usr/bin/env bash
# Bit-identity of two builds: runs the same matrix of transforms, batches and filters with each
# `augscope` binary given and prints one line per output with the SHA-256 of every build's file
# ("same" or "DIFF"), then the count of differences. Exit 0 only when every output matches.
#
#   scripts/identity.sh DATA_DIR BACKEND BIN_A [BIN_B …]
#
# DATA_DIR holds mni152_t1.nii.gz, mni152_tissue_labels.nii.gz, retina.jpg and CT_small.dcm;
# BACKEND is cpu, cuda or cuda:N. Outputs go to $OUT/identity (or ./identity_out).
set -u
DATA=$1
BACKEND=$2
shift 2
BINS=("$@")
WORK=${OUT:-identity_out}/identity
rm -rf "$WORK"
mkdir -p "$WORK"
T1=$DATA/mni152_t1.nii.gz
LAB=$DATA/mni152_tissue_labels.nii.gz
RGB=$DATA/retina.jpg
CT=$DATA/CT_small.dcm

# name|command arguments (OUTDIR stands for the build's output folder)
cases=()
for mode in constant grid-constant nearest reflect mirror grid-wrap wrap; do
  for order in 0 1 3; do
    cases+=("t1_${mode}_o${order}|apply $T1 OUTDIR/o.npy --rotate 0.2,-0.1,0.3 --scale 1.1,0.9,1.05 --translate 3,-2,1.5 --elastic 300,9 --seed 7 --order $order --mode $mode --cval 5")
  done
done
cases+=("t1_label|apply $T1 OUTDIR/o.npy --label $LAB --label-out OUTDIR/l.npy --rotate 0.3,0,0.1 --elastic 200,8 --seed 3 --order 3 --mode reflect")
cases+=("t1_flip_mm|apply $T1 OUTDIR/o.npy --flip 0,2 --rotate 0.1,0.2,0 --space mm --elastic 20,6 --seed 11")
cases+=("t1_f16|apply $T1 OUTDIR/o.npy --rotate 0.2,0,0 --elastic 300,9 --seed 7 --order 3 --precision f16")
cases+=("t1_bf16|apply $T1 OUTDIR/o.npy --rotate 0.2,0,0 --elastic 300,9 --seed 7 --order 1 --precision bf16 --mode wrap")
cases+=("t1_coords|apply $T1 OUTDIR/o.npy --rotate 0.2,0,0.1 --elastic 300,9 --seed 2 --save-coords OUTDIR/c.npy")
for order in 0 1 3; do
  cases+=("rgb_o${order}|apply $RGB OUTDIR/o.npy --rotate 0.4 --scale 0.9 --elastic 500,12 --seed 5 --order $order --mode mirror")
  cases+=("ct2d_o${order}|apply $CT OUTDIR/o.npy --rotate -0.3 --translate 4,2 --elastic 150,6 --seed 9 --order $order --mode nearest")
done
cases+=("batch_nnunet|batch --preset nnunet-v2 --count 6 --seed 1 --out OUTDIR/b --ext npy --label $LAB $T1")
cases+=("batch_bg_f16|batch --preset batchgenerators --count 4 --seed 4 --out OUTDIR/b --ext npy --precision f16 $T1")
cases+=("batch_filter|batch --preset nnunet-v2 --count 3 --seed 2 --out OUTDIR/b --ext npy --filter gaussian:1.5 $T1")
cases+=("f_gauss|filter $T1 OUTDIR/o.npy --gaussian 1.5,2,2.5")
cases+=("f_dog|filter $T1 OUTDIR/o.npy --dog 1,2 --mode nearest")
cases+=("f_log|filter $T1 OUTDIR/o.npy --log 2 --mode constant --cval 1")
cases+=("f_median|filter $T1 OUTDIR/o.npy --median 3")
cases+=("f_gamma|filter $T1 OUTDIR/o.npy --gamma 0.8,1.2")
cases+=("f_contrast|filter $T1 OUTDIR/o.npy --contrast 1.3,-5")
cases+=("f_febds_dog|filter $CT OUTDIR/o.npy --febds dog")
cases+=("f_febds_log|filter $CT OUTDIR/o.npy --febds log")
cases+=("f_febds_fft|filter $CT OUTDIR/o.npy --febds fft")
cases+=("f_rgb_gauss|filter $RGB OUTDIR/o.npy --gaussian 2")
cases+=("f_ct_median|filter $CT OUTDIR/o.npy --median 5 --mode wrap")

diffs=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  args=${c#*|}
  line="$name"
  first=""
  same=1
  for i in "${!BINS[@]}"; do
    d=$WORK/$i/$name
    mkdir -p "$d"
    a=${args//OUTDIR/$d}
    # shellcheck disable=SC2086
    if ! "${BINS[$i]}" $a --backend "$BACKEND" >"$d/stdout" 2>"$d/stderr"; then
      h="FAILED:$(head -c 120 "$d/stderr" | tr '\n' ' ')"
    else
      # The manifest and reports hold timings; compare the arrays only.
      h=$(find "$d" -name '*.npy' -type f | sort | xargs cat | sha256sum | cut -c1-16)
    fi
    line="$line $h"
    if [ -z "$first" ]; then first=$h; elif [ "$h" != "$first" ]; then same=0; fi
  done
  if [ $same = 1 ] && [[ $first != FAILED* ]]; then echo "$line same"; else echo "$line DIFF"; diffs=$((diffs + 1)); fi
done
echo "cases: ${#cases[@]}, differences: $diffs"
[ $diffs = 0 ]
