#!/usr/bin/env bash
# Whole-conversion benchmark: feather-convert against `dd ... conv=fsync` on the same
# generated checkpoint, side by side, plus peak resident memory.
#
#   bench/convert_bench.sh [DIR] [GB]      (default: /tmp/feather-bench, 8 GB)
#
# Generates a Flux-shaped bf16 checkpoint of about GB gigabytes with feather-sample, then
# alternates dd and feather-convert (--scale tensor, CPU) RUNS times each, and prints the
# medians, the ratio, and the converter's peak RSS next to its bound (2 x the largest
# converted tensor + 64 MB).
set -euo pipefail
dir=${1:-/tmp/feather-bench}
gb=${2:-8}
runs=${RUNS:-3}
bin=${FEATHER_BIN:-build}
mkdir -p "$dir"
in="$dir/model.safetensors"
# hidden 3072 (Flux): one double block and one single block are ~ 1.14 GB of bf16.
blocks=$(( (gb * 1000 + 961) / 962 ))  # ~962 MB per block: 8 GB asks for 9 blocks (8.84 GB)
if [ ! -f "$in" ]; then
    "$bin/feather-sample" --family flux --dtype bf16 --hidden 3072 --blocks "$blocks" -o "$in"
fi
size=$(stat -c %s "$in")
echo "input: $in, $(( size / 1000000 )) MB, $(nproc) cores"
time_of() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
ds=(); cs=(); rss=0
for i in $(seq "$runs"); do
    sync
    ds+=("$(time_of dd if="$in" of="$dir/copy.bin" bs=16M conv=fsync)")
    rm -f "$dir/copy.bin"; sync
    out="$dir/out.safetensors"; rm -f "$out"
    /usr/bin/time -f "%M" -o "$dir/rss.txt" true
    t0=$(date +%s.%N)
    /usr/bin/time -f "%M" -o "$dir/rss.txt" "$bin/feather-convert" -q --scale tensor --device cpu -o "$out" "$in"
    t1=$(date +%s.%N)
    cs+=("$(echo "$t1 - $t0" | bc -l)")
    r=$(cat "$dir/rss.txt"); [ "$r" -gt "$rss" ] && rss=$r
    rm -f "$out"; sync
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
d=$(med "${ds[@]}"); c=$(med "${cs[@]}")
largest=$("$bin/feather-convert" --plan --scale tensor "$in" | awk '$1 == "convert" {print $2}' | sort -n | tail -1)
printf 'dd conv=fsync     median %.2f s  (%s)\n' "$d" "${ds[*]}"
printf 'feather-convert   median %.2f s  (%s)\n' "$c" "${cs[*]}"
printf 'ratio convert/dd  %.3f  (target <= 1.2)\n' "$(echo "$c / $d" | bc -l)"
printf 'peak RSS          %d MB  (bound 2 x %d MB + 64 MB = %d MB)\n' $((rss / 1024)) $((largest / 1000000)) \
    $(( (2 * largest) / 1000000 + 64 ))
