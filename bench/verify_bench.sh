#!/bin/sh
# Verification cost on a generated multi-GB model: feather-verify --reference with the matmul on
# the CPU and on the GPU, next to the time it takes just to read both files.
#
#   bench/verify_bench.sh [DIR] [BLOCKS]   (default /tmp/feather-vbench, 2 Flux blocks at
#                                            hidden 3072: 2.3 GB bf16)
# Needs the programs in ${FEATHER_BIN:-build} (a GPU=cuda or GPU=hip build for the GPU row).
set -eu
dir=${1:-/tmp/feather-vbench}
blocks=${2:-2}
bin=${FEATHER_BIN:-build}
mkdir -p "$dir"
in=$dir/model.safetensors
out=$dir/model-fp8e5m2.safetensors
[ -f "$in" ] || "$bin/feather-sample" -q --family flux --dtype bf16 --hidden 3072 --blocks "$blocks" -o "$in"
t() { s=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s.%N); awk "BEGIN { print $e - $s }"; }
echo "input $(( $(stat -c %s "$in") / 1000000 )) MB, $(nproc) cores"
printf 'convert (channel)            %6.2f s\n' "$(t "$bin/feather-convert" -q --force -o "$out" "$in")"
printf 'read both files (cat)        %6.2f s\n' "$(t sh -c "cat '$in' '$out' > /dev/null")"
printf 'verify, integrity only       %6.2f s\n' "$(t "$bin/feather-verify" -q "$out")"
for dev in cpu gpu; do
    for m in 16 256; do
        s=$(date +%s.%N)
        if "$bin/feather-verify" -q --device $dev --tokens $m --reference "$in" --json "$dir/$dev-$m.json" "$out" \
            >"$dir/$dev-$m.txt" 2>&1; then rc=0; else rc=$?; fi
        e=$(date +%s.%N)
        printf 'verify --reference, %s, M=%-4d %6.2f s  (exit %d) %s\n' $dev $m "$(awk "BEGIN { print $e - $s }")" $rc \
            "$(tail -n 1 "$dir/$dev-$m.txt" | sed 's/.*measured/measured/' | cut -c1-110)"
    done
done
