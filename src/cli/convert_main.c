/* feather-convert: converts fp16/bf16 safetensors checkpoints to prepacked fp8.
 * A thin front end: parses options, calls feather_plan_new / feather_convert per input, and
 * reports (progress line, summary, --plan table, --json). */
#include "cli/common.h"
#include "feather/convert.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void usage(void) {
    printf(
        "Usage: feather-convert [options] INPUT... [-o OUTPUT | -o DIR/]\n"
        "Convert fp16/bf16/f32 safetensors checkpoints to fp8 (e5m2, prepacked for the feather kernel).\n"
        "\n"
        "INPUT is a .safetensors file, a .safetensors.zst file, a sharded model's\n"
        "*.safetensors.index.json, or a directory holding one model. The default output is\n"
        "NAME-fp8e5m2.safetensors beside the input. Quantised inputs are read too: fp8 with\n"
        "tensor, channel, group or block scales, ComfyUI's MXFP8 and NVFP4 layers and\n"
        "ModelOpt's NVFP4 (requantised; NVFP4 without loss at --scale block:16).\n"
        "\n"
        "Selection:\n"
        "  --preset NAME        keep a model family's fragile layers at full precision\n"
        "                       (default: detected from tensor names; 'none' for no preset)\n"
        "  --list-presets       list the presets and what they keep\n"
        "  --include REGEX      convert matching tensors even if a preset keeps them (repeatable)\n"
        "  --exclude REGEX      keep matching tensors at full precision (repeatable; wins)\n"
        "  --plan               print what would happen to every tensor, write nothing\n"
        "Quantisation:\n"
        "  --scale MODE         none | absmax | tensor | channel | block:G\n"
        "                       (default: channel; tensor with --layout comfy)\n"
        "  --grid N             number of candidate scales searched (default: %u)\n"
        "  --format FMT         e5m2 | e4m3fn (e4m3fn needs --layout comfy)   (default: e5m2)\n"
        "  --layout L           packed ([K/16, N, 16] for the kernel) | comfy (plain, ComfyUI)\n"
        "  --allow-nonfinite    map NaN to 0 and Inf to +-max instead of failing\n"
        "Output:\n"
        "  -o OUTPUT            output file (one input), or DIR/ for every input\n"
        "  --zstd[=LEVEL]       write NAME-fp8e5m2.safetensors.zst (level 1-19, default 3)\n"
        "  --zstd-threads N     zstd worker threads (default 0: single-threaded)\n"
        "  --force              replace existing outputs\n"
        "Running:\n"
        "  -j N                 threads (default: all cores)\n"
        "  --device D           auto | cpu | gpu   (default: auto)\n"
        "  -q                   no progress or summary\n"
        "  --json               print one JSON summary with a result per input on stdout\n"
        "  -h, --help           this help;   --version   version\n"
        "\n"
        "Exit status: 0 success, 2 invalid input or I/O error, 64 usage error, 130 interrupted.\n"
        "An output already made from the same input with the same options is skipped.\n",
        feather_grid_size(0));
}

static void list_presets(void) {
    for (size_t i = 0; i < feather_preset_count(); i++) {
        const feather_preset *p = feather_preset_at(i);
        printf("%-14s %s\n", p->name, p->description);
    }
}

typedef struct progress_state {
    double t0, last;
    int tty;
} progress_state;

static void human(uint64_t b, char *buf, size_t len) {
    if (b >= 1000000000ull) snprintf(buf, len, "%.2f GB", b / 1e9);
    else if (b >= 1000000ull) snprintf(buf, len, "%.1f MB", b / 1e6);
    else if (b >= 1000ull) snprintf(buf, len, "%.1f kB", b / 1e3);
    else snprintf(buf, len, "%llu B", (unsigned long long)b);
}

static void on_progress(void *arg, uint64_t done, uint64_t total, const char *tensor) {
    progress_state *p = arg;
    double t = cli_now_s();
    if (t - p->last < 0.1 && done < total) return;
    p->last = t;
    double el = t - p->t0, rate = el > 0 ? done / el : 0;
    double eta = rate > 0 ? (total - done) / rate : 0;
    char d[32], tt[32];
    human(done, d, sizeof d);
    human(total, tt, sizeof tt);
    fprintf(stderr, "\r\033[K%s / %s  %.0f MB/s  ETA %d:%02d  %.60s", d, tt, rate / 1e6, (int)eta / 60,
            (int)eta % 60, tensor);
    fflush(stderr);
}

static int print_plan(feather_ctx *ctx, const char *input, const feather_convert_options *o, int json,
                      cJSON *jfiles) {
    (void)ctx;
    feather_error err = {0};
    feather_reader *r;
    feather_plan *p;
    if (feather_open(&r, input, FEATHER_OPEN_HEADER_ONLY, &err)) return cli_fail(&err);
    if (feather_plan_new(&p, r, o, &err)) {
        feather_close(r);
        return cli_fail(&err);
    }
    size_t nconv = 0, nkeep = 0;
    cJSON *jt = json ? cJSON_CreateArray() : NULL;
    if (!json) printf("%s (preset: %s)\n", input, feather_plan_preset(p));
    for (size_t i = 0; i < feather_plan_count(p); i++) {
        const feather_plan_entry *e = feather_plan_at(p, i);
        if (e->action == FEATHER_KEEP || e->action == FEATHER_DEQUANT) nkeep++; /* as the conversion counts */
        else if (e->action != FEATHER_DROP) nconv++;
        if (json) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "name", e->tensor->name);
            if (e->name != e->tensor->name) cJSON_AddStringToObject(x, "written_as", e->name);
            cJSON_AddStringToObject(x, "action", feather_action_name(e->action));
            cJSON_AddStringToObject(x, "reason", e->reason);
            cJSON_AddNumberToObject(x, "bytes_in", (double)e->bytes_in);
            cJSON_AddNumberToObject(x, "bytes_out", (double)e->bytes_out);
            cJSON_AddItemToArray(jt, x);
        } else {
            const int renamed = e->name != e->tensor->name;
            printf("  %-10s %12llu -> %12llu  %s%s%s  (%s)\n", feather_action_name(e->action),
                   (unsigned long long)e->bytes_in, (unsigned long long)e->bytes_out, e->tensor->name,
                   renamed ? ", written as " : "", renamed ? e->name : "", e->reason);
        }
    }
    char a[32], b[32];
    human(feather_plan_bytes_in(p), a, sizeof a);
    human(feather_plan_bytes_out(p), b, sizeof b);
    if (json) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "input", input);
        cJSON_AddStringToObject(f, "preset", feather_plan_preset(p));
        cJSON_AddNumberToObject(f, "tensors_converted", (double)nconv);
        cJSON_AddNumberToObject(f, "tensors_kept", (double)nkeep);
        cJSON_AddNumberToObject(f, "bytes_in", (double)feather_plan_bytes_in(p));
        cJSON_AddNumberToObject(f, "bytes_out", (double)feather_plan_bytes_out(p));
        cJSON_AddItemToObject(f, "tensors", jt);
        cJSON_AddItemToArray(jfiles, f);
    } else {
        printf("  %zu to convert, %zu kept; %s -> %s\n", nconv, nkeep, a, b);
    }
    /* a plan that converts nothing is shown, then refused as the conversion would refuse it */
    int rc = 0;
    if (feather_plan_check(p, &err)) {
        fflush(stdout);
        rc = cli_fail(&err);
        if (json) cJSON_AddStringToObject(cJSON_GetArrayItem(jfiles, cJSON_GetArraySize(jfiles) - 1), "error", err.message);
    }
    feather_plan_free(p);
    feather_close(r);
    return rc;
}

/* The directory `-o DIR/` names, without its trailing slash. */
static void output_dir(const char *output, char *dir, size_t len) {
    const size_t olen = strlen(output);
    snprintf(dir, len, "%.*s", (int)(output[olen - 1] == '/' && olen > 1 ? olen - 1 : olen), output);
}

/* The output for input: `output` itself, or the default name in the directory `output` names
 * (out_is_dir) or beside the input. */
static feather_status output_name(const char *input, const char *output, int out_is_dir, feather_fp8 fmt, int zstd,
                                  char *buf, size_t len, feather_error *err) {
    if (output && !out_is_dir) {
        snprintf(buf, len, "%s", output);
        return FEATHER_OK;
    }
    char dir[4096];
    if (output) output_dir(output, dir, sizeof dir);
    return feather_default_output(input, output ? dir : NULL, fmt, zstd, buf, len, err);
}

/* Two different inputs whose outputs have one name (`-o DIR/` with a/model.safetensors and
 * b/model.safetensors) would have the second replace the first's output (with --force) or fail
 * after it; an output that is another input of the run would replace it before it is read. Both
 * are refused before anything is converted: the usage error's exit status, else 0. */
static int outputs_clash(const char *const *inputs, size_t n, const char *output, int out_is_dir, feather_fp8 fmt,
                         int zstd) {
    typedef struct {
        char out[4096];
        struct stat in, os;
        int has_in, has_os;
    } target;
    if (n < 2) return 0;
    target *t = calloc(n, sizeof *t);
    if (!t) {
        cli_error("out of memory");
        return FEATHER_EXIT_INPUT;
    }
    for (size_t i = 0; i < n; i++) {
        feather_error e = {0};
        if (output_name(inputs[i], output, out_is_dir, fmt, zstd, t[i].out, sizeof t[i].out, &e))
            t[i].out[0] = 0; /* reported when its conversion comes */
        t[i].has_in = stat(inputs[i], &t[i].in) == 0;
        t[i].has_os = t[i].out[0] && stat(t[i].out, &t[i].os) == 0;
    }
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        for (size_t j = 0; j < n && !rc; j++) {
            if (j == i || !t[i].out[0] || (t[i].has_in && t[j].has_in && cli_same_inode(&t[i].in, &t[j].in))) continue;
            if (t[i].has_os && t[j].has_in && cli_same_inode(&t[i].os, &t[j].in))
                rc = cli_usage_error("the output of %s, %s, is the input %s", inputs[i], t[i].out, inputs[j]);
            else if (j > i && !strcmp(t[i].out, t[j].out))
                rc = cli_usage_error("%s and %s would both be written to %s: convert them into different directories",
                                     inputs[i], inputs[j], t[i].out);
        }
    free(t);
    return rc;
}

static int parse_device(const char *s, feather_device *d) {
    if (!strcmp(s, "auto")) *d = FEATHER_DEVICE_AUTO;
    else if (!strcmp(s, "cpu")) *d = FEATHER_DEVICE_CPU;
    else if (!strcmp(s, "gpu")) *d = FEATHER_DEVICE_GPU;
    else return -1;
    return 0;
}

/* Records the command line (shell-quoted where needed) for feather.command, without
 * "--device D": the device does not change a byte of the output, and leaving it out keeps the
 * files made on the CPU and on the GPU identical. */
static char *command_line(int argc, char **argv) {
    size_t len = 1;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) * 4 + 3;
    char *s = malloc(len), *p = s;
    if (!s) return NULL;
    for (int i = 0; i < argc; i++) {
        if (i && !strcmp(argv[i], "--device")) {
            i++;
            continue;
        }
        const char *a = i == 0 ? "feather-convert" : argv[i];
        int plain = *a && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == strlen(a);
        if (p != s) *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
        } else {
            *p++ = '\'';
            for (; *a; a++) {
                if (*a == '\'') p += sprintf(p, "'\\''");
                else *p++ = *a;
            }
            *p++ = '\'';
        }
    }
    *p = 0;
    return s;
}

int main(int argc, char **argv) {
    cli_prog = "feather-convert";
    feather_convert_options o;
    feather_convert_defaults(&o);
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    const char **inc = calloc((size_t)argc, sizeof *inc), **exc = calloc((size_t)argc, sizeof *exc);
    size_t ninputs = 0;
    const char *output = NULL;
    int quiet = 0, json = 0, plan = 0, zstd = 0, scale_given = 0;
    unsigned long long threads = 0;
    int worst = 0;
    char *cmd = NULL;
    feather_ctx *ctx = NULL;
    cJSON *jroot = NULL;
#define USAGE(...)                                                                         \
    do {                                                                                   \
        worst = cli_usage_error(__VA_ARGS__);                                              \
        goto done;                                                                         \
    } while (0)
    if (!inputs || !inc || !exc) { worst = FEATHER_EXIT_INPUT; goto done; }
    o.include = inc;
    o.exclude = exc;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        unsigned long long v;
#define NEED_ARG()                                                                         \
    do {                                                                                   \
        if (i + 1 >= argc) USAGE("option '%s' needs an argument", a);                     \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); goto done; }
        else if (!strcmp(a, "--version")) { cli_print_version(); goto done; }
        else if (!strcmp(a, "--list-presets")) { list_presets(); goto done; }
        else if (!strcmp(a, "-o")) { NEED_ARG(); output = argv[++i]; }
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--plan")) plan = 1;
        else if (!strcmp(a, "--force")) o.overwrite = 1;
        else if (!strcmp(a, "--allow-nonfinite")) o.quant.allow_nonfinite = 1;
        else if (!strcmp(a, "--preset")) { NEED_ARG(); o.preset = argv[++i]; }
        else if (!strcmp(a, "--include")) { NEED_ARG(); inc[o.ninclude++] = argv[++i]; }
        else if (!strcmp(a, "--exclude")) { NEED_ARG(); exc[o.nexclude++] = argv[++i]; }
        else if (!strcmp(a, "--scale")) {
            NEED_ARG();
            feather_error err = {0};
            if (feather_scale_parse(argv[++i], &o.quant.mode, &o.quant.group, &err))
                USAGE("--scale: %s", err.message);
            scale_given = 1;
        } else if (!strcmp(a, "--grid")) {
            NEED_ARG();
            if (cli_parse_uint(argv[++i], 4096, &v) || v == 0)
                USAGE("--grid takes a number of candidates from 1 to 4096");
            o.quant.grid = (unsigned)v;
        } else if (!strcmp(a, "--format")) {
            NEED_ARG();
            const char *f = argv[++i];
            if (!strcmp(f, "e5m2")) o.quant.format = FEATHER_FP8_E5M2;
            else if (!strcmp(f, "e4m3fn") || !strcmp(f, "e4m3")) o.quant.format = FEATHER_FP8_E4M3FN;
            else USAGE("--format takes e5m2 or e4m3fn, not '%s'", f);
        } else if (!strcmp(a, "--layout")) {
            NEED_ARG();
            const char *l = argv[++i];
            if (!strcmp(l, "packed")) o.layout = FEATHER_LAYOUT_PACKED;
            else if (!strcmp(l, "comfy")) o.layout = FEATHER_LAYOUT_COMFY;
            else USAGE("--layout takes packed or comfy, not '%s'", l);
        } else if (!strcmp(a, "-j") || !strncmp(a, "-j", 2)) {
            const char *val = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
            if (!val || cli_parse_uint(val, 1024, &threads) || threads == 0)
                USAGE("-j takes a number of threads from 1 to 1024");
        } else if (!strcmp(a, "--device")) {
            NEED_ARG();
            if (parse_device(argv[++i], &o.device)) USAGE("--device takes auto, cpu or gpu");
        } else if (!strcmp(a, "--zstd")) {
            zstd = 1;
        } else if (!strncmp(a, "--zstd=", 7)) {
            if (cli_parse_uint(a + 7, 22, &v) || v == 0) USAGE("--zstd=LEVEL takes a level from 1 to 22");
            zstd = 1;
            o.zstd_level = (int)v;
        } else if (!strcmp(a, "--zstd-threads")) {
            NEED_ARG();
            if (cli_parse_uint(argv[++i], 256, &v)) USAGE("--zstd-threads takes a number from 0 to 256");
            o.zstd_threads = (int)v;
        } else if (a[0] == '-' && a[1]) {
            USAGE("unknown option '%s'", a);
        } else {
            inputs[ninputs++] = a;
        }
    }
    if (!ninputs) USAGE("no input given");
    /* The default is one a layout can hold: ComfyUI reads one scale per tensor. */
    if (o.layout == FEATHER_LAYOUT_COMFY && !scale_given) o.quant.mode = FEATHER_SCALE_TENSOR;
    if (o.quant.format == FEATHER_FP8_E4M3FN && o.layout == FEATHER_LAYOUT_PACKED)
        USAGE("--format e4m3fn needs --layout comfy (the packed layout is e5m2 only)");
    size_t olen = output ? strlen(output) : 0;
    struct stat st;
    int out_is_dir = output && (output[olen - 1] == '/' || (stat(output, &st) == 0 && S_ISDIR(st.st_mode)));
    if (output && ninputs > 1 && !out_is_dir)
        USAGE("-o names one file, but %zu inputs were given: use -o DIR/", ninputs);

    cli_install_signals();
    /* Nobody reads the SNR with -q and no --json: skip its sums. */
    o.no_snr = quiet && !json;
    cmd = command_line(argc, argv);
    o.command_line = cmd;
    ctx = feather_ctx_new((int)threads);
    if (!ctx) { worst = FEATHER_EXIT_INPUT; goto done; }
    if (!plan && o.device == FEATHER_DEVICE_GPU) {
        /* Once for all inputs: a missing GPU that was asked for is one error. */
        feather_device got;
        feather_error err = {0};
        if (feather_device_select(o.device, &got, NULL, NULL, 0, &err)) {
            worst = cli_fail(&err);
            goto done;
        }
    }
    if (!plan && (worst = outputs_clash(inputs, ninputs, output, out_is_dir, o.quant.format, zstd))) goto done;
    int noticed = 0; /* auto's fallback: one notice for all inputs */
    jroot = cJSON_CreateObject();
    cJSON *jfiles = cJSON_CreateArray();

    for (size_t n = 0; n < ninputs; n++) {
        int rc;
        if (plan) {
            rc = print_plan(ctx, inputs[n], &o, json, jfiles);
            if (rc > worst) worst = rc;
            continue;
        }
        char outbuf[4096];
        feather_error err = {0};
        feather_convert_result res;
        memset(&res, 0, sizeof res);
        feather_status s = FEATHER_OK;
        if (output && out_is_dir) {
            char dir[4096];
            output_dir(output, dir, sizeof dir);
            /* (made by a parallel run in between: then it is there) */
            const int made = stat(dir, &st) == 0 || mkdir(dir, 0777) == 0, why = made ? 0 : errno;
            if (!made && stat(dir, &st) != 0) {
                s = FEATHER_E_IO;
                snprintf(err.message, sizeof err.message, "%.900s: cannot create directory: %s", dir, strerror(why));
            }
        }
        if (!s) s = output_name(inputs[n], output, out_is_dir, o.quant.format, zstd, outbuf, sizeof outbuf, &err);
        progress_state ps = {.t0 = cli_now_s(), .tty = !quiet && isatty(2)};
        o.progress = ps.tty ? on_progress : NULL;
        o.progress_arg = &ps;
        if (!s) s = feather_convert(ctx, inputs[n], outbuf, &o, &res, &err);
        if (ps.tty) fprintf(stderr, "\r\033[K");
        /* none when this build has no GPU backend: then the CPU is simply the device */
        if (!s && res.gpu_fallback[0] && !noticed++ && !quiet && !strstr(res.gpu_fallback, "without GPU support"))
            cli_error("notice: no usable GPU (%s); quantising on the CPU", res.gpu_fallback);
        rc = feather_exit_code(s);
        if (s) {
            err.code = s;
            cli_fail(&err);
        } else if (!quiet) {
            for (int w = 0; w < res.nwarnings; w++) cli_error("warning: %s", res.warnings[w]);
            char a[32], b[32];
            human(res.bytes_in, a, sizeof a);
            human(res.bytes_out, b, sizeof b);
            /* every converted tensor exact (zeros, or values fp8 holds): no SNR to average */
            char snr[400];
            if (res.snr_worst_db == INFINITY)
                snprintf(snr, sizeof snr, "weights exact (no rounding error)");
            else
                snprintf(snr, sizeof snr, "weight SNR mean %.2f dB, worst %.2f dB (%.256s)", res.snr_mean_db,
                         res.snr_worst_db, res.worst_tensor);
            if (res.skipped)
                fprintf(stderr, "%s: up to date (%s), skipped\n", inputs[n], outbuf);
            else
                fprintf(stderr, "%s -> %s: %llu tensor%s converted, %llu kept (preset %s); %s -> %s; %s; %.1f s on the %s\n",
                        inputs[n], outbuf, (unsigned long long)res.tensors_converted, res.tensors_converted == 1 ? "" : "s",
                        (unsigned long long)res.tensors_kept, res.preset, a, b, snr,
                        res.seconds, res.used_gpu ? "GPU" : "CPU");
        }
        if (json) {
            cJSON *f = cJSON_CreateObject();
            cJSON_AddStringToObject(f, "input", inputs[n]);
            cJSON_AddStringToObject(f, "output", outbuf);
            cJSON_AddStringToObject(f, "status",
                                    s == FEATHER_E_NOTHING ? "nothing to convert"
                                    : s                    ? "error"
                                    : res.skipped          ? "skipped"
                                                           : "converted");
            cJSON_AddNumberToObject(f, "exit_status", rc);
            if (s) cJSON_AddStringToObject(f, "error", err.message);
            else {
                cJSON_AddStringToObject(f, "preset", res.preset);
                cJSON_AddNumberToObject(f, "tensors_converted", (double)res.tensors_converted);
                cJSON_AddNumberToObject(f, "tensors_kept", (double)res.tensors_kept);
                cJSON_AddNumberToObject(f, "bytes_in", (double)res.bytes_in);
                cJSON_AddNumberToObject(f, "bytes_out", (double)res.bytes_out);
                cJSON_AddNumberToObject(f, "seconds", res.seconds);
                cJSON_AddStringToObject(f, "device", res.used_gpu ? "gpu" : "cpu");
                if (isfinite(res.snr_mean_db)) cJSON_AddNumberToObject(f, "snr_mean_db", res.snr_mean_db);
                if (isfinite(res.snr_worst_db)) cJSON_AddNumberToObject(f, "snr_worst_db", res.snr_worst_db);
                if (res.worst_tensor[0]) cJSON_AddStringToObject(f, "worst_tensor", res.worst_tensor);
                cJSON *wa = cJSON_CreateArray();
                for (int w = 0; w < res.nwarnings; w++) cJSON_AddItemToArray(wa, cJSON_CreateString(res.warnings[w]));
                cJSON_AddItemToObject(f, "warnings", wa);
            }
            cJSON_AddItemToArray(jfiles, f);
        }
        if (rc > worst && worst != FEATHER_EXIT_INTERRUPTED) worst = rc;
        if (s == FEATHER_E_CANCELLED) break;
    }
    if (json) {
        cJSON_AddStringToObject(jroot, "version", FEATHER_VERSION_STRING);
        cJSON_AddItemToObject(jroot, plan ? "plans" : "files", jfiles);
        char *t = cJSON_Print(jroot);
        if (t) puts(t);
        free(t);
    }
    if (!json) cJSON_Delete(jfiles);
done:
    cJSON_Delete(jroot);
    feather_ctx_free(ctx);
    free(cmd);
    free(inputs);
    free(inc);
    free(exc);
    return worst;
}
