#!/usr/bin/env bash
# Why a process must not end while NVRTC compiles on another thread: runs
# examples/compile_exit.rs (three kernel modules compiled ahead on threads of their own) N times,
# ending it at varied moments without the wait (--no-wait --after-ms=M) and then with it, and
# counts the runs that ended badly (a signal, an abort, or anything on stderr). Needs NVRTC on
# LD_LIBRARY_PATH, no GPU. Build the example first:
#   cargo build --no-default-features --example compile_exit
#   scripts/exit_during_compile.sh target/debug/examples/compile_exit [N]
set -u
BIN=$1
N=${2:-40}
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT
export AUGSCOPE_CACHE_DIR=$CACHE
status=0
for mode in no-wait wait; do
  bad=0
  for i in $(seq 1 "$N"); do
    ms=$(( (i * 37) % 900 + 50 ))
    rm -rf "${CACHE:?}"/*
    if [ $mode = no-wait ]; then
      "$BIN" --no-wait --after-ms=$ms > "$CACHE.out" 2>&1
    else
      "$BIN" > "$CACHE.out" 2>&1
    fi
    c=$?
    if [ $c != 0 ] || [ -s "$CACHE.out" ]; then
      bad=$((bad + 1))
      echo "$mode, ended after $ms ms: exit $c $(head -c 120 "$CACHE.out" | tr '\n' ' ')"
    fi
  done
  rm -f "$CACHE.out"
  echo "== $mode: $bad of $N runs ended badly"
  if [ $mode = wait ] && [ $bad != 0 ]; then status=1; fi
done
exit $status
