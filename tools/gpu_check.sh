#!/usr/bin/env bash
# The GPU checks of pytest-hpml, in order, on one machine with a CUDA GPU.
#
# Usage: tools/gpu_check.sh [--out DIR] [--steps a,b,c] [--list] [--dry-run] [--help]
#
#   --out DIR       the folder of the logs, reports and baselines (default: gpu-check-<date>)
#   --steps a,b,c   run only these steps (in the plan's order); --list names them
#   --list          print the steps and exit
#   --dry-run       print each step's command without running anything
#   --help          print this help and exit
#
# Each step runs from the checkout's root under `timeout 540` (SIGKILL 10 s later if it is
# still there), so that every step stops within 9 minutes; a step that fails or runs out of
# time is reported and the next one runs. Each step's output goes to DIR/<step>.log; at the end
# one line per step (name, exit code, seconds) is printed and written to DIR/summary.txt. The
# exit status is 0 when every step passed, 1 otherwise, 2 for a wrong command line.
#
# Environment: PYTHON, the interpreter of every step (default python3);
# GPU_CHECK_STEP_TIMEOUT, the seconds a step may run (default 540).
#
# The machine needs torch with CUDA, torchvision, pytest, pytest-benchmark, pytest-xdist,
# hypothesis, scipy, scikit-learn and matplotlib; the install step adds this project without
# its dependencies, and nni from a wheel in wheels/ if that folder exists (no package index
# needed).

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
STEP_TIMEOUT=${GPU_CHECK_STEP_TIMEOUT:-540}
KILL_AFTER=10

# name|what it checks, in the order the steps run
PLAN=(
  "env|nvidia-smi, Python, torch, CUDA and the GPU's properties, into env.txt"
  "install|pip install --no-deps -e . (and nni from wheels/ if that folder exists)"
  "tests-cuda-1|the plugin's tests with --hpml-device=cuda, first half of the files"
  "tests-cuda-2|the plugin's tests with --hpml-device=cuda, second half of the files"
  "suites-cuda|the suites on CUDA: every precision, eager and inductor, baselines off"
  "timing-fidelity|tools/gpu_timing.py: the fixture's median against torch.utils.benchmark and CUDA events"
  "mfu|tools/gpu_mfu.py: an 8192^3 bf16 matmul benchmarked with a report, for the mfu metric"
  "baselines|the suites' GPU baselines recorded (--hpml-baseline=update) into DIR/baselines"
  "against|an A/A check: one GPU benchmark measured against HEAD (--hpml-against=HEAD)"
)

usage() {
  sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

die_usage() {
  echo "gpu_check.sh: $1 (see --help)" >&2
  exit 2
}

step_names() {
  local entry
  for entry in "${PLAN[@]}"; do echo "${entry%%|*}"; done
}

# Half of the test files: every other one down the list sorted by size, so that each half gets
# its share of the long files (the whole of tests/ may not fit in one step's time).
half() {
  local i files
  mapfile -t files < <(cd "$ROOT" && ls -S tests/test_*.py)
  for i in "${!files[@]}"; do
    if (( i % 2 == $1 )); then printf ' %q' "${files[$i]}"; fi
  done
}

# The command of one step, as one line of bash, run from the checkout's root.
command_of() {
  local py out
  py=$(printf '%q' "$PYTHON")
  out=$(printf '%q' "$OUT")
  case $1 in
    env)
      echo "rc=0; { nvidia-smi || rc=\$?; $py -c 'import platform, sys, torch;" \
        "print(\"python\", sys.version.split()[0], platform.platform());" \
        "print(\"torch\", torch.__version__, \"CUDA\", torch.version.cuda," \
        "\"cuDNN\", torch.backends.cudnn.version());" \
        "print(\"CUDA devices\", torch.cuda.device_count());" \
        "print(torch.cuda.get_device_properties(0))' || rc=\$?; } > $out/env.txt 2>&1;" \
        "cat $out/env.txt; exit \$rc"
      ;;
    install)
      echo "$py -m pip install --no-deps -e . ||" \
        "$py -m pip install --no-deps --no-build-isolation -e . || exit \$?;" \
        "if [ -d wheels ]; then $py -m pip install --no-index --find-links wheels nni;" \
        "else echo 'no wheels/ folder: nni not installed (the NNI pruning checks skip)'; fi"
      ;;
    tests-cuda-1 | tests-cuda-2)
      echo "$py -m pytest$(half $((${1##*-} - 1))) --hpml-device=cuda --hpml-baseline=off" \
        "-x -q -p no:cacheprovider --hypothesis-profile=ci"
      ;;
    suites-cuda)
      echo "$py -m pytest suites --hpml-device=cuda --hpml-precision=fp32,tf32,fp16,bf16" \
        "--hpml-backend=eager,inductor --hpml-baseline=off -p no:cacheprovider" \
        "--hypothesis-profile=ci --hpml-report=$out/suites-cuda.json"
      ;;
    timing-fidelity)
      echo "$py tools/gpu_timing.py --out $out/timing.json"
      ;;
    mfu)
      echo "$py -m pytest tools/gpu_mfu.py --hpml-device=cuda --hpml-baseline=off" \
        "-p no:cacheprovider --hpml-report=$out/mfu.json"
      ;;
    baselines)
      echo "$py -m pytest suites --hpml-device=cuda --hpml-baseline=update" \
        "--hpml-baseline-dir=$out/baselines -p no:cacheprovider --hypothesis-profile=ci" \
        "--hpml-report=$out/baselines.json"
      ;;
    against)
      # suites/test_models.py has no benchmark: the book CNN's bf16 step is the one measured
      echo "$py -m pytest suites/test_amp.py --hpml-device=cuda --hpml-precision=bf16" \
        "--hpml-against=HEAD -k test_book_cnn_training_step_speedup_over_fp32" \
        "-p no:cacheprovider --hpml-report=$out/against.json"
      ;;
  esac
}

# Run one step under the time limit, its output shown and kept in DIR/<step>.log; prints its
# summary line.
run_step() {
  local name=$1 started rc seconds status
  echo "=== $name: $(command_of "$name")"
  started=$SECONDS
  (cd "$ROOT" && timeout -k "$KILL_AFTER" "$STEP_TIMEOUT" bash -c "$(command_of "$name")") \
    2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  seconds=$((SECONDS - started))
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out after ${STEP_TIMEOUT} s" ;;
    *) status=failed ;;
  esac
  SUMMARY+=("$(printf '%-16s exit %-3d %5d s  %s' "$name" "$rc" "$seconds" "$status")")
  [ "$rc" -eq 0 ]
}

OUT="gpu-check-$(date +%Y%m%d-%H%M%S)"
ONLY=""
LIST=0
DRY=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) [ $# -ge 2 ] && [ -n "$2" ] || die_usage "--out needs a directory"; OUT=$2; shift ;;
    --out=*) OUT=${1#--out=}; [ -n "$OUT" ] || die_usage "--out needs a directory" ;;
    --steps) [ $# -ge 2 ] && [ -n "$2" ] || die_usage "--steps needs a comma list"; ONLY=$2; shift ;;
    --steps=*) ONLY=${1#--steps=}; [ -n "$ONLY" ] || die_usage "--steps needs a comma list" ;;
    --list) LIST=1 ;;
    --dry-run) DRY=1 ;;
    -h | --help) usage; exit 0 ;;
    *) die_usage "unknown option '$1'" ;;
  esac
  shift
done

if [ "$LIST" -eq 1 ]; then
  for entry in "${PLAN[@]}"; do printf '%-16s %s\n' "${entry%%|*}" "${entry#*|}"; done
  exit 0
fi

mapfile -t ALL < <(step_names)
CHOSEN=("${ALL[@]}")
if [ -n "$ONLY" ]; then
  IFS=, read -r -a ASKED <<< "$ONLY"
  for name in "${ASKED[@]}"; do
    [[ " ${ALL[*]} " == *" $name "* ]] || die_usage "unknown step '$name'; the steps: ${ALL[*]}"
  done
  CHOSEN=()
  for name in "${ALL[@]}"; do
    [[ ",$ONLY," == *",$name,"* ]] && CHOSEN+=("$name")
  done
fi

case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac

if [ "$DRY" -eq 1 ]; then
  for name in "${CHOSEN[@]}"; do
    echo "# $name (from $ROOT, under timeout $STEP_TIMEOUT s)"
    command_of "$name"
  done
  exit 0
fi

mkdir -p "$OUT" || die_usage "cannot create $OUT"
SUMMARY=()
FAILED=0
for name in "${CHOSEN[@]}"; do
  run_step "$name" || FAILED=$((FAILED + 1))
done
printf '%s\n' "${SUMMARY[@]}" > "$OUT/summary.txt"
echo "=== summary (also in $OUT/summary.txt)"
cat "$OUT/summary.txt"
[ "$FAILED" -eq 0 ]
