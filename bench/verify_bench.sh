#!/bin/sh
# Verification cost on a generated multi-GB model: feather-verify --reference with the matmul on
# the CPU and on the GPU, side by side with the time it takes just to read both files (cat to
# /dev/null, page cache warm), in one run. Every time is the median of REPS runs; "x read" is
# the time over the read time.
#
#   bench/verify_bench.sh [DIR] [BLOCKS] [REPS]   (default /tmp/feather-vbench, 2 Flux blocks at
#                                                  hidden 3072: 2.3 GB bf16; 3 runs each)
# Needs the programs in ${FEATHER_BIN:-build} (a GPU=cuda or GPU=hip build for the GPU rows).
# BASELINE_BIN=DIR adds M=16 rows for DIR/feather-verify (another version), in the same run.
set -eu
dir=${1:-/tmp/feather-vbench}
blocks=${2:-2}
reps=${3:-3}
bin=${FEATHER_BIN:-build}
mkdir -p "$dir"
in=$dir/model.safetensors
out=$dir/model-fp8e5m2.safetensors
[ -f "$in" ] || "$bin/feather-sample" -q --family flux --dtype bf16 --hidden 3072 --blocks "$blocks" -o "$in"

# median wall seconds of $reps runs of "$@" (output to $dir/last.txt, exit status to $dir/last.rc)
med() {
    i=0
    : >"$dir/times"
    while [ $i -lt "$reps" ]; do
        s=$(date +%s.%N)
        if "$@" >"$dir/last.txt" 2>&1; then echo 0 >"$dir/last.rc"; else echo $? >"$dir/last.rc"; fi
        e=$(date +%s.%N)
        awk "BEGIN { print $e - $s }" >>"$dir/times"
        i=$((i + 1))
    done
    sort -n "$dir/times" | awk '{ t[NR] = $1 } END { print (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2 }'
}

"$bin/feather-convert" -q --force -o "$out" "$in"
cat "$in" "$out" >/dev/null # warm the page cache
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')
echo "input $(($(stat -c %s "$in") / 1000000)) MB + output $(($(stat -c %s "$out") / 1000000)) MB, $(nproc) cores ($cpu), median of $reps"
read=$(med sh -c "cat '$in' '$out' >/dev/null")
printf '%-34s %7.2f s\n' 'read both files (cat)' "$read"
row() { # label, seconds
    printf '%-34s %7.2f s  %5.2fx read  (exit %s) %s\n' "$1" "$2" "$(awk "BEGIN { print $2 / $read }")" \
        "$(cat "$dir/last.rc")" "$(tail -n 1 "$dir/last.txt" | sed 's/.*measured/measured/' | cut -c1-100)"
}
row 'verify, integrity only' "$(med "$bin/feather-verify" -q "$out")"
for dev in cpu gpu; do
    if [ $dev = gpu ] && ! "$bin/feather-verify" -q --device gpu --reference "$in" "$out" >"$dir/probe.txt" 2>&1 &&
        grep -q 'GPU' "$dir/probe.txt"; then
        echo "verify --reference, gpu: $(tail -n 1 "$dir/probe.txt")"
        continue
    fi
    for m in 16 256; do
        row "verify --reference, $dev, M=$m" \
            "$(med "$bin/feather-verify" -q --device $dev --tokens $m --reference "$in" --json "$dir/$dev-$m.json" "$out")"
    done
done
if [ -n "${BASELINE_BIN:-}" ]; then
    for dev in cpu gpu; do
        [ $dev = gpu ] && grep -q 'GPU' "$dir/probe.txt" 2>/dev/null && ! grep -q 'measured' "$dir/probe.txt" && continue
        row "baseline: --reference, $dev, M=16" \
            "$(med "$BASELINE_BIN/feather-verify" -q --device $dev --reference "$in" "$out")"
    done
fi
