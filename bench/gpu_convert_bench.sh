#!/bin/sh
# Whole conversions on the CPU and on the GPU from the page cache, outputs compared byte for byte.
#
#   bench/gpu_convert_bench.sh [DIR] [GB] [MODES]   (default: /dev/shm/feather-gpu-bench, 4 GB,
#                                                     "block:128 channel tensor")
#
# Generates a Flux-shaped bf16 checkpoint of about GB gigabytes with feather-sample (in DIR:
# /dev/shm keeps input and outputs in memory, so no disk is involved), reads it once into the
# page cache, then per scale mode runs `feather-convert -q --force --device cpu` and `--device
# gpu` (best of RUNS each, default 2) and cmp's the two outputs. Prints seconds and GB/s of
# input, with `cat` of the input (reading) and `cp` of it (reading and writing) as references.
# CORES="2 4 8 16" repeats every run confined to each number J of cores (taskset -c 0-(J-1),
# -j J), as on a host with that many; by default the programs get every core.
set -u
dir=${1:-/dev/shm/feather-gpu-bench}
gb=${2:-4}
modes=${3:-block:128 channel tensor}
runs=${RUNS:-2}
bin=${FEATHER_BIN:-build}
mkdir -p "$dir" || exit 2
in="$dir/model.safetensors"
blocks=$(( (gb * 1000 + 961) / 962 )) # ~962 MB per Flux block at hidden 3072
if [ ! -f "$in" ]; then
    "$bin/feather-sample" -q --family flux --dtype bf16 --hidden 3072 --blocks "$blocks" -o "$in" || exit 2
fi
size=$(stat -c %s "$in")
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
t0=$(date +%s.%N); cat "$in" >/dev/null; t1=$(date +%s.%N)
echo "input $in: $size bytes; $(nproc) cores; filesystem: $(df -h "$dir" | awk 'NR==2 {print $1, $2}')"
echo "cat (page cache): $(secs "$t0" "$t1") s"
t0=$(date +%s.%N); cp "$in" "$dir/copy.bin"; t1=$(date +%s.%N); rm -f "$dir/copy.bin"
echo "cp to the same filesystem: $(secs "$t0" "$t1") s"
for cores in ${CORES:-all}; do
    for mode in $modes; do
        if [ "$cores" = all ]; then pin=""; jobs=""; label=""; else pin="taskset -c 0-$((cores - 1))"; jobs="-j $cores"; label=" $cores cores"; fi
        for dev in cpu gpu; do
            best=""
            hwm=0
            for r in $(seq "$runs"); do
                t0=$(date +%s.%N)
                $pin "$bin/feather-convert" -q --force $jobs --device $dev --scale "$mode" -o "$dir/out.safetensors" "$in" &
                pid=$!
                # peak resident memory (page-locked buffers included), read until the process ends
                while kill -0 $pid 2>/dev/null; do
                    h=$(awk '/VmHWM/ {print $2}' /proc/$pid/status 2>/dev/null)
                    [ -n "$h" ] && hwm=$h
                    sleep 0.02
                done
                wait $pid || exit 2
                t1=$(date +%s.%N)
                mv "$dir/out.safetensors" "$dir/out-$dev.safetensors" # same command line, same recorded output name
                t=$(secs "$t0" "$t1")
                best=$(awk -v a="$t" -v b="${best:-1e9}" 'BEGIN { print (a < b ? a : b) }')
            done
            printf '%-10s %-3s%s best of %d: %7.3f s  %6.2f GB/s of input  peak RSS %d MB\n' "$mode" "$dev" "$label" "$runs" "$best" \
                "$(awk -v s="$size" -v t="$best" 'BEGIN { print s / t / 1e9 }')" $(( ${hwm:-0} / 1024 ))
        done
        if cmp -s "$dir/out-cpu.safetensors" "$dir/out-gpu.safetensors"; then
            echo "$mode$label: outputs identical"
        else
            echo "$mode$label: outputs DIFFER"
        fi
        rm -f "$dir/out-cpu.safetensors" "$dir/out-gpu.safetensors"
    done
done
