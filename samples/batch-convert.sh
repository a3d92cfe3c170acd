#!/bin/sh
# Converts every safetensors model under a directory with feather-convert, several at a time.
#
#   batch-convert.sh [-j N] [-o OUTDIR] DIR [-- feather-convert options]
#
# Models are *.safetensors, *.safetensors.zst and sharded models (*.safetensors.index.json,
# converted once through their index; the shards it names are not converted on their own).
# In a diffusers pipeline (a folder with model_index.json, each model in a folder of its own)
# only the diffusion model's folders (transformer*, unet*, prior*, decoder*) are converted: its
# text encoders, VAE and the rest are left alone, as feather-convert leaves a full checkpoint's.
# Files that are themselves converter outputs (NAME-fp8e5m2.safetensors, NAME-fp8e4m3fn…) and
# hidden files (the writer's temporary files) are left alone. Outputs go beside the inputs, or
# under OUTDIR mirroring DIR's subdirectories (so equal names in different folders do not clash).
#
# The converter skips an output that is already up to date, so running the same command again
# resumes an interrupted batch. A model with nothing to convert (a LoRA, say: its factors stay
# as they are) is left alone, not a failure. Every call's JSON summary is collected into one
# file, OUTDIR/batch-summary.json (stdout without -o), and the last line on stderr counts the
# results: "N converted, N skipped, N with nothing to convert, N failed".
#
# Exit status: 0 all converted, skipped or with nothing to convert; 2 some failed (or the
# directory cannot be read);
# 64 usage error (also when the converter rejected the options); 130 interrupted.
# FEATHER_CONVERT names the converter; the default is feather-convert on PATH, else
# build/feather-convert of this repository.
set -u

prog=${0##*/}

usage() {
    cat <<EOF
Usage: $prog [-j N] [-o OUTDIR] DIR [-- feather-convert options]
Convert every *.safetensors, *.safetensors.zst and *.safetensors.index.json model under DIR
with feather-convert, N at a time (default: one per core).

  -j N        conversions running at once; each gets cores/N threads
  -o OUTDIR   write outputs (and batch-summary.json) under OUTDIR, mirroring DIR
  -h, --help  this help

Options after -- go to every feather-convert call (e.g. -- --scale block:64 --zstd).
Running the same command again skips what is already converted. Models with nothing to
convert (LoRAs, say) are left alone, and so are a diffusers pipeline's text encoders and VAE.
Exit status: 0 ok, 2 some conversions failed, 64 usage error, 130 interrupted.
EOF
}

usage_error() {
    printf '%s: %s\nTry '\''%s --help'\''.\n' "$prog" "$1" "$prog" >&2
    exit 64
}

# the cores this script may run on (nproc: its CPU affinity, as feather-convert counts them)
cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
case $cores in '' | *[!0-9]*) cores=1 ;; esac
[ "$cores" -ge 1 ] || cores=1
jobs=$cores
outdir=
dir=

while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) usage; exit 0 ;;
    -j) [ $# -ge 2 ] || usage_error "option '-j' needs an argument"; jobs=$2; shift 2 ;;
    -j*) jobs=${1#-j}; shift ;;
    -o) [ $# -ge 2 ] || usage_error "option '-o' needs an argument"; outdir=$2; shift 2 ;;
    --) shift; break ;;
    -*) usage_error "unknown option '$1'" ;;
    *)
        [ -z "$dir" ] || usage_error "one directory only ('$dir' and '$1' given)"
        dir=$1
        shift
        ;;
    esac
done
# What is left in "$@" goes to the converter.

case $jobs in '' | *[!0-9]* | 0) usage_error "-j takes a number of conversions, at least 1" ;; esac
[ -n "$dir" ] || usage_error "no directory given"
if [ ! -d "$dir" ]; then
    printf '%s: %s: not a directory\n' "$prog" "$dir" >&2
    exit 2
fi

convert=${FEATHER_CONVERT:-}
if [ -z "$convert" ]; then
    convert=$(command -v feather-convert 2>/dev/null) || convert=
    if [ -z "$convert" ]; then
        here=$(cd "$(dirname "$0")" && pwd -P) || exit 2
        convert=$here/../build/feather-convert
    fi
fi
if [ ! -x "$convert" ]; then
    printf '%s: cannot run the converter %s (set FEATHER_CONVERT or build it with make)\n' "$prog" "$convert" >&2
    exit 2
fi

root=$(cd "$dir" && pwd -P) || exit 2
if [ -n "$outdir" ]; then
    mkdir -p "$outdir" || exit 2
    outdir=$(cd "$outdir" && pwd -P) || exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/feather-batch.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'rm -rf "$tmp"; exit 143' TERM
trap 'rm -rf "$tmp"; exit 129' HUP

threads=$((cores / jobs))
[ "$threads" -ge 1 ] || threads=1

# One conversion. Arguments: the model, then the converter options. Writes r.XXXXXX.in (the
# input, JSON-escaped), .json (the converter's stdout) and .rc (its exit status). Once a
# conversion is interrupted, the remaining ones are not started.
# shellcheck disable=SC2016 # expanded by the worker shell, not here
worker='
trap : INT # caught, not ignored: the converter still gets Ctrl-C, this shell records its status
f=$1
shift
[ -e "$BATCH_TMP/stop" ] && exit 0
# A diffusers pipeline: only its diffusion model.
comp=$(dirname "$f")
if [ -f "$(dirname "$comp")/model_index.json" ]; then
    case $(basename "$comp") in transformer* | unet* | prior* | decoder*) ;; *) exit 0 ;; esac
fi
case $f in
*.safetensors)
    # A shard of a sharded model is converted through its index.
    d=$(dirname "$f")
    b=$(basename "$f")
    for idx in "$d"/*.safetensors.index.json; do
        [ -f "$idx" ] && grep -qF "\"$b\"" "$idx" && exit 0
    done
    ;;
esac
if [ -n "$BATCH_OUTDIR" ]; then
    rel=$(dirname "${f#"$BATCH_ROOT"/}")
    o=$BATCH_OUTDIR
    [ "$rel" = . ] || o=$BATCH_OUTDIR/$rel
    mkdir -p "$o" || exit 0
    set -- "$@" -o "$o/"
fi
r=$(mktemp "$BATCH_TMP/r.XXXXXX") || exit 0
printf "%s" "$f" | tr "\001-\037" "?" | sed -e "s/\\\\/\\\\\\\\/g" -e "s/\"/\\\\\"/g" >"$r.in"
"$BATCH_CONVERT" -q --json -j "$BATCH_THREADS" "$@" "$f" >"$r.json"
rc=$?
echo "$rc" >"$r.rc"
[ "$rc" -eq 130 ] && : >"$BATCH_TMP/stop"
exit 0
'

# Ctrl-C reaches every process of the group: find and xargs stop, so no more conversions
# start; the running converters stop cleanly (exit 130), and their workers and this shell live
# on to collect what was done.
interrupted=0
trap 'interrupted=1' INT
BATCH_TMP=$tmp BATCH_ROOT=$root BATCH_OUTDIR=$outdir BATCH_CONVERT=$convert BATCH_THREADS=$threads
export BATCH_TMP BATCH_ROOT BATCH_OUTDIR BATCH_CONVERT BATCH_THREADS
find "$root" -type f \( -name '*.safetensors' -o -name '*.safetensors.zst' -o -name '*.safetensors.index.json' \) \
    ! -name '.*' ! -name '*-fp8e5m2.safetensors*' ! -name '*-fp8e4m3fn.safetensors*' -print0 |
    xargs -0 -r -P "$jobs" -I {} sh -c "$worker" batch-worker {} "$@"

# After a Ctrl-C, xargs is gone while converters may still be removing their partial
# outputs: wait (a bounded time) until every started conversion has recorded its status.
waited=0
while [ "$waited" -lt 120 ]; do
    busy=0
    for r in "$tmp"/r.??????; do
        [ -e "$r" ] && [ ! -e "$r.rc" ] && busy=1
    done
    [ "$busy" -eq 0 ] && break
    sleep 1
    waited=$((waited + 1))
done

converted=0
skipped=0
nothing=0
failed=0
status=0
summary=$tmp/summary.json
{
    printf '{\n  "results": ['
    sep=
    for rcf in "$tmp"/r.*.rc; do
        [ -f "$rcf" ] || continue
        r=${rcf%.rc}
        rc=$(cat "$rcf")
        if [ "$rc" -eq 0 ]; then
            if grep -q '"status":[[:space:]]*"skipped"' "$r.json"; then
                skipped=$((skipped + 1))
            else
                converted=$((converted + 1))
            fi
        elif [ "$rc" -eq 2 ] && grep -q '"status":[[:space:]]*"nothing to convert"' "$r.json"; then
            nothing=$((nothing + 1))
        else
            failed=$((failed + 1))
            case $rc in 130) s=130 ;; 64) s=64 ;; *) s=2 ;; esac
            [ "$s" -gt "$status" ] && status=$s
        fi
        printf '%s\n    {"input": "%s", "exit_status": %s, "summary": ' "$sep" "$(cat "$r.in")" "$rc"
        if grep -q '^[[:space:]]*{' "$r.json"; then printf '%s' "$(cat "$r.json")"; else printf null; fi
        printf '}'
        sep=,
    done
    printf '\n  ],\n  "converted": %s,\n  "skipped": %s,\n  "nothing_to_convert": %s,\n  "failed": %s\n}\n' \
        "$converted" "$skipped" "$nothing" "$failed"
} >"$summary"
[ -e "$tmp/stop" ] || [ "$interrupted" -eq 1 ] && status=130

if [ -n "$outdir" ]; then
    # Replaced in one step, so a reader never sees half a summary.
    cp "$summary" "$outdir/.batch-summary.json.tmp" && mv -f "$outdir/.batch-summary.json.tmp" "$outdir/batch-summary.json" ||
        status=2
else
    cat "$summary"
fi
printf '%s converted, %s skipped, %s with nothing to convert, %s failed\n' "$converted" "$skipped" "$nothing" "$failed" >&2
[ "$status" -eq 130 ] && printf '%s: interrupted; run the same command again to resume\n' "$prog" >&2
exit "$status"
