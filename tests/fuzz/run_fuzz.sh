#!/usr/bin/env bash
# run_fuzz.sh SOURCE_DIR FUZZ_BUILD_DIR SECONDS: builds the libFuzzer targets
# with clang (ASan + coverage) and runs each for SECONDS. Exit 77 (skipped)
# when clang or libFuzzer is unavailable; non-zero when a fuzzer finds a crash.
# TRIDENT_REQUIRE_OPTIONAL=1 (the fresh-root check) turns those skips into failures.
set -uo pipefail
src=$1 build=$2 seconds=${3:-25}
skip=77
[[ ${TRIDENT_REQUIRE_OPTIONAL:-0} == 1 ]] && skip=1
jobs=${TRIDENT_FUZZ_JOBS:-2}

if ! command -v clang++ >/dev/null 2>&1; then
  echo "SKIP: clang++ not found (libFuzzer needs clang; scripts/install_deps.sh installs it)"
  exit $skip
fi
probe=$(mktemp -d /tmp/trident-fuzz-probe.XXXXXX)
trap 'rm -rf "$probe"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer,address "$probe/p.cpp" -o "$probe/p" >"$probe/log" 2>&1; then
  echo "SKIP: clang++ cannot link libFuzzer programs:"
  cat "$probe/log"
  exit $skip
fi

mkdir -p "$build"
log=$build/build.log
if [[ ! -f $build/build.ninja ]]; then
  if ! cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address" -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address" \
      -DTRIDENT_FUZZ=ON -DTRIDENT_TESTS=ON -DTRIDENT_BENCH=OFF -DTRIDENT_NATIVE=OFF >"$log" 2>&1; then
    echo "fuzz: configuring the clang build failed; log follows"; tail -n 40 "$log"; exit 1
  fi
fi
if ! ninja -C "$build" -j "$jobs" fuzz_tokenizer_json fuzz_idx_reader fuzz_torch_pickle fuzz_make_seeds >"$log" 2>&1; then
  echo "fuzz: building the fuzz targets failed; log follows"; tail -n 40 "$log"; exit 1
fi

corpus=$build/corpus
mkdir -p "$corpus/tokenizer_json" "$corpus/idx_reader" "$corpus/torch_pickle" "$build/artifacts"
"$build/fuzz/fuzz_make_seeds" "$corpus/tokenizer_json" "$corpus/idx_reader" "$corpus/torch_pickle" \
  || { echo "fuzz: seed generation failed"; exit 1; }

status=0
runs=$((seconds * 10000))  # about `seconds` of fuzzing on the development machine
for name in tokenizer_json idx_reader torch_pickle; do
  out=$build/fuzz_$name.log
  n=$runs
  [[ $name == torch_pickle ]] && n=$((seconds * 3000))  # a small, fast parser: a third of the runs keeps CI short
  # -rss_limit_mb guards against a parser that allocates by a corrupt header's counts.
  # A fixed seed and run count make the test deterministic (the same inputs on
  # every machine, so CI cannot turn red by luck); the time limit only caps a
  # slow machine. Inputs that once crashed live in regressions/ and run first.
  if "$build/fuzz/fuzz_$name" "$corpus/$name" "$src/tests/fuzz/regressions/$name" -seed=1 -runs="$n" \
      -max_total_time="$((seconds * 4))" -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="$build/artifacts/$name-" -print_final_stats=1 >"$out" 2>&1; then
    echo "ok   fuzz_$name: $(grep -E '^stat::number_of_executed_units' "$out" | awk '{print $2}') runs (seed 1), no crash"
  else
    echo "FAIL fuzz_$name found a crash; log tail (artifacts in $build/artifacts):"
    tail -n 40 "$out"
    status=1
  fi
done
exit $status
