#!/usr/bin/env bash
# Runs the GPU checks from the packed portable binaries (tests/gpu/pack.sh) on
# a machine with a GPU, writing logs to a folder.
#   tests/gpu/run-on-gpu.sh [--bench | --bench-only] [LOG_DIR]
#   (LOG_DIR default: $OUT, else gpu-logs/ in the checkout's root; a run first
#   removes the logs of the steps it runs from it, so that the summary reads
#   this run's, and keeps the others'). The whole run with --bench takes
#   7-9 minutes; where one call has less, run the checks (no option) and
#   --bench-only (step 6 alone) into one LOG_DIR separately.
#   ATTNC_GPU_BIN: the packed binaries (default build-static/pack).
# 1. attn-gpu-check: every kernel family against the fp64 reference, then the
#    launch contract (graph capture, refused arguments, the checking mode).
#    Then the C API's and attnc.hpp's unit tests (attn-capi-tests), whose GPU
#    branches must run.
# 2. JIT latency through the kernel cache: cold NVRTC, disk hit, memory hit.
#    Where a CUDA driver is installed NVRTC's cubins also pass through the
#    driver's compute cache (~/.nv/ComputeCache, CUDA_CACHE_PATH), so a kernel
#    the machine compiled before, in any process, comes back in 0.05-0.15 s:
#    the JIT steps run with CUDA_CACHE_DISABLE=1, so that cold is a compile.
# 3. attnc run --target gpu on random and ragged inputs.
# 4. compute-sanitizer memcheck and racecheck on a small case of each family;
#    the watchdog: a kernel that never ends stops attn-gpu-check after 10 s.
# 5. The examples that need a GPU: the AOT application (AOT-only, one
#    attn::attention call per kernel, checked against the reference), JIT at
#    model load (cold, memory-warm, disk-warm), the Llama from transformers
#    with attnc's attention (logits against SDPA's), and Python serving from
#    an AOT bundle folder that the packed attnc builds here (aot_serving.py).
# 6. With --bench: the benchmark's shapes (bench/bench.py), attnc then PyTorch SDPA in the same run,
#    then bench/bench.py (attnc through Python against SDPA and FlexAttention).
# Last, a short summary (tests/gpu/ratios.py --summary), saved with every row as
# LOG_DIR/results.json.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bench=0 checks=1 logs=""
usage="usage: tests/gpu/run-on-gpu.sh [--bench | --bench-only] [LOG_DIR]"
for arg in "$@"; do
  case "$arg" in
    --bench) bench=1 ;;
    --bench-only) bench=1; checks=0 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run-on-gpu: unknown option '$arg' ($usage)" >&2; exit 2 ;;
    *) [ -z "$logs" ] || { echo "$usage (one LOG_DIR: $logs, then $arg)" >&2; exit 2; }
       logs="$arg" ;;
  esac
done
logs="${logs:-${OUT:-$root/gpu-logs}}"
pack="${ATTNC_GPU_BIN:-$root/build-static/pack}"
check="$pack/attn-gpu-check"
[ -x "$check" ] || { echo "no $check: run tests/gpu/pack.sh on the build machine" >&2; exit 2; }
# The checks need a GPU: without one every step would fail on its own.
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "run-on-gpu: no GPU here (nvidia-smi lists none): run this on a machine with one" >&2
  exit 2
fi
if ! mkdir -p "$logs" || [ ! -w "$logs" ]; then
  echo "cannot write the log folder $logs" >&2
  exit 2
fi
# The logs of the steps this run takes, from an earlier run into the same folder.
stale=(results.json)
[ $checks = 1 ] && stale+=(gpu-check.log capi-tests.log jit.log attnc-run.log memcheck.log
                           racecheck.log watchdog.log examples.log)
[ $bench = 1 ] && stale+=(bench.log sdpa.log bench-py.log bench-py)
for old in "${stale[@]}"; do rm -rf "${logs:?}/$old"; done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
attnc="$pack/attnc"
if [ ! -x "$attnc" ] && [ -f "$pack/attnc.xz" ]; then
  attnc="$scratch/attnc"
  xz -dc "$pack/attnc.xz" > "$attnc" && chmod +x "$attnc"
fi
# attn-capi-tests was linked against the library's soname, libattnc.so.1: a
# link of that name to the packed libattnc.so.
ln -s "$(cd "$pack" && pwd)/libattnc.so" "$scratch/libattnc.so.1"
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
# bench/bench.py records the commit of the packed binaries, not of this checkout.
if [ -z "${ATTNC_COMMIT:-}" ] && [ -f "$pack/commit.txt" ]; then
  ATTNC_COMMIT=$(cat "$pack/commit.txt")
  export ATTNC_COMMIT
fi
status=0
# Elapsed seconds at each step (a device call has a time limit: see where it goes).
step() { echo "[${SECONDS} s] $*"; }
if [ $checks = 1 ]; then
  step "numerics and the launch contract"
  "$check" 2>&1 | tee "$logs/gpu-check.log" || status=1
  # The unit tests' GPU branches (the C API's runtime, kernels, workspace and
  # prepare); ATTNC_EXPECT_GPU makes a runtime that does not bind a failure.
  step "the C API's and attnc.hpp's unit tests on the GPU"
  if [ -x "$pack/attn-capi-tests" ]; then
    ATTNC_EXPECT_GPU=1 LD_LIBRARY_PATH="$scratch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$pack/attn-capi-tests" 2>&1 | tee "$logs/capi-tests.log" | tail -n 2
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  else
    echo "no $pack/attn-capi-tests: run tests/gpu/pack.sh again"; status=1
  fi
  step "JIT latency (the driver's compute cache off)"
  CUDA_CACHE_DISABLE=1 "$check" --jit 2>&1 | tee "$logs/jit.log" || status=1
  step "attnc run"
  for spec in "mode=decode,page_size=16,gqa=8,mask=causal,return_lse=true --batch 5 --ragged --kv-len 5000" \
              "mode=decode,gqa=4,tile_q=2 --batch 4 --ragged --q-len 2 --kv-len 3000" \
              "mask=sliding_window(200),head_dim=64,page_size=16,gqa=2 --batch 3 --ragged --q-len 700"; do
    # shellcheck disable=SC2086
    "$attnc" run --target gpu --spec $spec 2>&1 | tee -a "$logs/attnc-run.log" | tail -n 3 || status=1
  done
  small=(--quick --spec "dtype=bf16,mask=causal,head_dim=128,gqa=4,page_size=16,return_lse=true"
         --spec "dtype=f16,mask=sliding_window(100),head_dim=64"
         --spec "dtype=bf16,mask=causal,head_dim=64,tile_q=192,gqa=2,page_size=16"
         --spec "mode=decode,page_size=19,gqa=4,split_kv=1,mask=causal,dtype=f16"
         --spec "mode=decode,page_size=16,gqa=8,split_kv=3,return_lse=true"
         --spec "mode=decode,page_size=16,gqa=4,split_kv=2,mask=causal"
         --spec "mode=decode,page_size=0,gqa=4,split_kv=3,mask=sliding_window(100),dtype=f16,return_lse=true")
  step "sanitizers"
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 3 "$check" "${small[@]}" > "$logs/$tool.log" 2>&1 || status=1
    echo "$tool: $(tail -n 1 "$logs/$tool.log")"
  done
  # A kernel that never ends: attn-gpu-check must stop itself after
  # $ATTNC_KERNEL_TIMEOUT_S with a line naming the source, not hang the call.
  step "watchdog"
  hang_dir=$(mktemp -d)
  if "$attnc" emit --spec mode=decode,page_size=16,gqa=4 --stage cuda -o "$hang_dir/decode.cu" &&
     sed 's|^  decode_block<1>(p);$|  for (;;) asm volatile("nanosleep.u32 1000;"); // never ends\n&|' \
       "$hang_dir/decode.cu" > "$hang_dir/hang.cu" && grep -q 'never ends' "$hang_dir/hang.cu"; then
    started=$SECONDS
    ATTNC_KERNEL_TIMEOUT_S=10 timeout 180 "$check" --bench --rows decode --source "$hang_dir/hang.cu" \
      > "$logs/watchdog.log" 2>&1
    rc=$?
    if [ $rc = 1 ] && grep -q "stopped: .*hang.cu.* has not finished after 10 s" "$logs/watchdog.log"; then
      echo "watchdog: a kernel that never ends stopped after $((SECONDS - started)) s, its source named"
    else
      echo "watchdog: FAILED (exit $rc; see watchdog.log)"; status=1
    fi
  else
    echo "watchdog: FAILED (could not make the never-ending kernel)"; status=1
  fi
  rm -rf "$hang_dir"
  step "examples"
  verdicts=""
  # The AOT application serves bundled kernels only: it never creates the
  # kernel cache's folder (which only a JIT compile needs).
  cache_parent=$(mktemp -d) || { echo "examples: FAILED (mktemp)"; exit 1; }
  unused_cache="$cache_parent/cache"
  for example in attn-aot-example "attn-jit-at-load-example --threads 16"; do
    # shellcheck disable=SC2086
    if CUDA_CACHE_DISABLE=1 ATTNC_CACHE_DIR="$unused_cache" "$pack"/$example 2>&1 |
         tee -a "$logs/examples.log"; then
      verdicts+="${example%% *} ok, "
    else
      verdicts+="${example%% *} FAILED, "; status=1
    fi
    if [ "$example" = attn-aot-example ] && [ -e "$unused_cache" ]; then
      verdicts+="attn-aot-example FAILED (created the kernel cache's folder), "; status=1
    fi
  done
  rm -rf "$cache_parent"
  if [ -f "$pack/libattnc.so" ]; then
    ATTNC_LIBRARY="$pack/libattnc.so" python3 "$root/examples/python/llama.py" 2>&1 |
      grep -v Warning | tee -a "$logs/examples.log"
    # 77: skipped (no torch or transformers here), said by the example itself.
    case "${PIPESTATUS[0]}" in
      0) verdicts+="llama.py ok" ;;
      77) verdicts+="llama.py skipped (no torch or transformers)" ;;
      *) verdicts+="llama.py FAILED"; status=1 ;;
    esac
    # Python serving from an AOT bundle folder, AOT-only: built here by the packed attnc.
    bundle_dir=$(mktemp -d)
    if "$attnc" aot --specs "$root/examples/aot/app-specs.txt" -o "$bundle_dir/bundle" \
         --name llama_layer > "$bundle_dir/aot.log" 2>&1; then
      ATTNC_LIBRARY="$pack/libattnc.so" python3 "$root/examples/python/aot_serving.py" \
        "$bundle_dir/bundle" 2>&1 | tee -a "$logs/examples.log"
      case "${PIPESTATUS[0]}" in
        0) verdicts+=", aot_serving.py ok" ;;
        77) verdicts+=", aot_serving.py skipped (no torch)" ;;
        *) verdicts+=", aot_serving.py FAILED"; status=1 ;;
      esac
    else
      tee -a "$logs/examples.log" < "$bundle_dir/aot.log"
      verdicts+=", aot_serving.py FAILED (attnc aot failed)"; status=1
    fi
    rm -rf "$bundle_dir"
  else
    verdicts+="llama.py and aot_serving.py not run (no libattnc.so in the pack)"
  fi
  # The line tests/gpu/ratios.py --summary gives.
  echo "examples: $verdicts" | tee -a "$logs/examples.log"
fi
if [ $bench = 1 ]; then
  step "attn-gpu-check --bench, the SDPA anchors, bench/bench.py"
  "$check" --bench 2>&1 | tee "$logs/bench.log" || status=1
  python3 "$root/tests/gpu/sdpa_anchor.py" 2>&1 | tee "$logs/sdpa.log" || status=1
  # bench/bench.py through the Python module: each output checked against SDPA,
  # then attnc, SDPA flash, cuDNN and FlexAttention timed (table, json, chart).
  if [ -f "$pack/libattnc.so" ]; then
    ATTNC_LIBRARY="$pack/libattnc.so" python3 "$root/bench/bench.py" --out "$logs/bench-py" 2>&1 |
      grep -v Warning | tee "$logs/bench-py.log" || status=1
  else
    echo "bench/bench.py not run (no libattnc.so in $pack: tests/gpu/pack.sh packs it)" |
      tee "$logs/bench-py.log"
    status=1
  fi
fi
step "done"
echo
python3 "$root/tests/gpu/ratios.py" --summary "$logs" || status=1
exit $status
