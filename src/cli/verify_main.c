/* feather-verify: checks converted checkpoints and measures their error. */
#include "cli/common.h"
#include "feather/verify.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Longest metadata value shown in full by --info. */
#define INFO_VALUE_MAX 200

typedef struct options {
    int info;           /* --info: describe the files */
    const char **files; /* operands */
    int nfiles;
    feather_verify_options v;
    const char *json, *csv, *html; /* report files */
    int quiet, top;
    unsigned long long threads;
} options;

static void usage(void) {
    printf("Usage: feather-verify [options] CONVERTED... [--reference ORIGINAL]\n"
           "Check converted checkpoints and measure their error against the original.\n"
           "\n"
           "CONVERTED and ORIGINAL are .safetensors files, .safetensors.zst files,\n"
           "*.safetensors.index.json sharded models or directories holding one model.\n"
           "\n"
           "Always: header, metadata consistent with the tensors, recorded XXH3 of every\n"
           "tensor, no Inf/NaN fp8 codes, finite positive scales.\n"
           "  --reference ORIGINAL  also measure every converted tensor: weight space (rel RMS,\n"
           "                        SNR, cosine, max abs error) and output space (the fp8 matmul\n"
           "                        on activations against an fp32 matmul with the original);\n"
           "                        kept tensors must equal the original\n"
           "  --tokens M            rows of seeded random fp16 activations (default 16)\n"
           "  --seed S              their seed (default 1)\n"
           "  --activations FILE    safetensors file with one [M, K] tensor per layer name\n"
           "  --device D            auto | cpu | gpu: where the matmul runs (default auto)\n"
           "  --min-snr DB          fail tensors whose SNR is under DB\n"
           "  --max-rel-err X       fail tensors whose relative error is over X\n"
           "  --json FILE           every figure as JSON\n"
           "  --csv FILE            every figure as CSV\n"
           "  --html FILE           one self-contained page with charts\n"
           "                        (one of them may be '-': standard output, the table and\n"
           "                        the verdict then going to standard error)\n"
           "  --top N               rows of the terminal table (default 20, 0 = all)\n"
           "  -j N                  threads (default: all cores)\n"
           "  -q                    no table, only problems and the verdict\n"
           "  --info                print each file's shards, header, tensors and metadata\n"
           "  -h, --help, --version\n"
           "\n"
           "Exit status: 0 ok, 1 verification failed, 2 invalid input or I/O error,\n"
           "64 usage error, 130 interrupted.\n");
}

static int parse_double(const char *s, double *out) {
    char *end;
    if (!s || !*s) return -1;
    *out = strtod(s, &end);
    return *end || !isfinite(*out) ? -1 : 0;
}

static int same_file(const char *a, const char *b) {
    struct stat x, y;
    return a && b && stat(a, &x) == 0 && stat(b, &y) == 0 && cli_same_inode(&x, &y);
}

/* A report is written over `path`: not over a checkpoint (`--json model.safetensors`, as if
 * --json were feather-convert's flag, would replace the model with its report) nor over one of
 * this run's inputs. Returns -1 when path is fine, else the exit status. */
static int report_path_ok(const char *opt, const char *path, const options *o) {
    if (!path || !strcmp(path, "-")) return -1;
    static const char *const ckpt[] = {".safetensors", ".safetensors.zst", ".safetensors.index.json"};
    for (size_t i = 0; i < sizeof ckpt / sizeof ckpt[0]; i++) {
        const size_t n = strlen(path), m = strlen(ckpt[i]);
        if (n >= m && !strcmp(path + n - m, ckpt[i]))
            return cli_usage_error("%s %s: a checkpoint's name, not a report's (%s - writes to standard output)", opt, path,
                                   opt);
    }
    int input = same_file(path, o->v.reference) || same_file(path, o->v.activations);
    for (int i = 0; i < o->nfiles; i++) input |= same_file(path, o->files[i]);
    if (input) return cli_usage_error("%s %s: that is an input of this run", opt, path);
    /* A folder that cannot take the report is found now, not after minutes of measuring. */
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    const char *dir = dirname(copy);
    if (access(dir, W_OK | X_OK)) {
        cli_error("%s: cannot write the report: %s: %s", path, dir, strerror(errno));
        return FEATHER_EXIT_INPUT;
    }
    return -1;
}

/* How many of the reports go to standard output ("-"). */
static int reports_on_stdout(const options *o) {
    return (o->json && !strcmp(o->json, "-")) + (o->csv && !strcmp(o->csv, "-")) + (o->html && !strcmp(o->html, "-"));
}

/* Returns -1 to go on, or the exit status when the program is done (help, version, error). */
static int parse_args(int argc, char **argv, options *o) {
    int only_files = 0;
    feather_verify_defaults(&o->v);
    o->top = 20;
    o->files = calloc((size_t)argc, sizeof *o->files);
    if (!o->files) {
        cli_error("out of memory");
        return FEATHER_EXIT_INPUT;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        unsigned long long v;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKES_VALUE()                                                                      \
    do {                                                                                   \
        if (!val) return cli_usage_error("option '%s' needs a value", a);                 \
        i++;                                                                               \
    } while (0)
        if (only_files || a[0] != '-' || !a[1]) o->files[o->nfiles++] = a;
        else if (!strcmp(a, "--")) only_files = 1;
        else if (!strcmp(a, "--version")) { cli_print_version(); return FEATHER_EXIT_OK; }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return FEATHER_EXIT_OK; }
        else if (!strcmp(a, "--info")) o->info = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--reference")) { TAKES_VALUE(); o->v.reference = val; }
        else if (!strcmp(a, "--activations")) { TAKES_VALUE(); o->v.activations = val; }
        else if (!strcmp(a, "--json")) { TAKES_VALUE(); o->json = val; }
        else if (!strcmp(a, "--csv")) { TAKES_VALUE(); o->csv = val; }
        else if (!strcmp(a, "--html")) { TAKES_VALUE(); o->html = val; }
        else if (!strcmp(a, "--device")) {
            TAKES_VALUE();
            feather_error err = {0};
            if (feather_device_parse(val, &o->v.device, &err)) return cli_usage_error("--device: %s", err.message);
        } else if (!strcmp(a, "--tokens")) {
            TAKES_VALUE();
            if (cli_parse_uint(val, 1u << 20, &v) || !v) return cli_usage_error("--tokens takes a row count from 1 to 1048576");
            o->v.tokens = v;
        } else if (!strcmp(a, "--seed")) {
            TAKES_VALUE();
            if (cli_parse_uint(val, ~0ull, &v)) return cli_usage_error("--seed takes a non-negative integer");
            o->v.seed = v;
        } else if (!strcmp(a, "--top")) {
            TAKES_VALUE();
            if (cli_parse_uint(val, 1u << 30, &v)) return cli_usage_error("--top takes a row count");
            o->top = (int)v;
        } else if (!strcmp(a, "-j")) {
            TAKES_VALUE();
            if (cli_parse_uint(val, 1024, &o->threads) || !o->threads) return cli_usage_error("-j takes 1 to 1024 threads");
        } else if (!strcmp(a, "--min-snr")) {
            TAKES_VALUE();
            if (parse_double(val, &o->v.min_snr_db)) return cli_usage_error("--min-snr takes a number of dB");
        } else if (!strcmp(a, "--max-rel-err")) {
            TAKES_VALUE();
            if (parse_double(val, &o->v.max_rel_err) || o->v.max_rel_err < 0)
                return cli_usage_error("--max-rel-err takes a non-negative number");
        } else return cli_usage_error("unknown option '%s'", a);
    }
    if (!o->nfiles) return cli_usage_error("no input file");
    if (!o->v.reference && (o->v.activations || !isnan(o->v.min_snr_db) || !isnan(o->v.max_rel_err)))
        return cli_usage_error("--activations, --min-snr and --max-rel-err need --reference");
    int reports = (o->json != NULL) + (o->csv != NULL) + (o->html != NULL);
    if (reports && o->nfiles > 1 && !o->info)
        return cli_usage_error("--json, --csv and --html describe one file: verify one CONVERTED at a time");
    if (reports_on_stdout(o) > 1)
        return cli_usage_error("only one of --json, --csv and --html can write to standard output ('-')");
    const char *const opt[3] = {"--json", "--csv", "--html"}, *const path[3] = {o->json, o->csv, o->html};
    for (int r = 0; r < 3; r++) {
        int rc = report_path_ok(opt[r], path[r], o);
        if (rc >= 0) return rc;
    }
    return -1;
}

/* Writes s with control bytes, DEL and backslash escaped; at most max bytes of s, cut at a
 * UTF-8 boundary, followed by "…(N bytes)" when cut. */
static void put_escaped(const char *s, size_t max) {
    size_t n = strlen(s), end = n;
    if (n > max) {
        end = max;
        while (end > 0 && ((unsigned char)s[end] & 0xc0) == 0x80) end--;
    }
    for (size_t i = 0; i < end; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    if (end < n) printf("\xe2\x80\xa6(%zu bytes)", n);
}

static int escaped_len(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s < 0x20 || *s == 0x7f) ? 4 : *s == '\\' ? 2 : 1;
    return n;
}

static void print_tensors(const feather_reader *r) {
    size_t n = feather_count(r);
    int sharded = feather_shard_count(r) > 1, w = 4;
    for (size_t i = 0; i < n; i++) {
        int l = escaped_len(feather_tensor_at(r, i)->name);
        if (l > w) w = l < 120 ? l : 120; /* longer names push their row's columns */
    }
    printf("  tensors: %zu\n", n);
    if (!n) return;
    printf("    %-*s  %-11s  %-20s  %14s  %s%s\n", w, "name", "dtype", "shape", "bytes",
           "data_offsets", sharded ? "  shard" : "");
    for (size_t i = 0; i < n; i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        char shape[256];
        size_t o = (size_t)snprintf(shape, sizeof shape, "[");
        for (unsigned d = 0; d < t->ndim && o < sizeof shape - 32; d++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%llu", d ? ", " : "",
                                  (unsigned long long)t->shape[d]);
        snprintf(shape + o, sizeof shape - o, "%s]", o >= sizeof shape - 32 ? ", ..." : "");
        printf("    ");
        put_escaped(t->name, (size_t)-1);
        int pad = w - escaped_len(t->name);
        printf("%*s  %-11s  %-20s  %14llu  [%llu, %llu]", pad > 0 ? pad : 0, "",
               feather_dtype_name(t->dtype), shape, (unsigned long long)t->nbytes,
               (unsigned long long)t->begin, (unsigned long long)t->end);
        if (sharded) printf("  %u", t->shard);
        putchar('\n');
    }
}

static void print_metadata(const feather_reader *r, unsigned shard) {
    size_t n = feather_metadata_count(r, shard);
    printf("  metadata: %zu\n", n);
    for (size_t i = 0; i < n; i++) {
        printf("    ");
        put_escaped(feather_metadata_key(r, shard, i), INFO_VALUE_MAX);
        printf(": ");
        put_escaped(feather_metadata_value(r, shard, i), INFO_VALUE_MAX);
        putchar('\n');
    }
}

static void print_info(const feather_reader *r) {
    unsigned ns = feather_shard_count(r);
    put_escaped(feather_reader_path(r), (size_t)-1);
    putchar('\n');
    if (ns > 1) {
        printf("  shards: %u\n", ns);
        for (unsigned s = 0; s < ns; s++) {
            printf("    %u  ", s);
            put_escaped(feather_shard_path(r, s), (size_t)-1);
            printf("  (header %llu bytes, file %llu bytes)\n",
                   (unsigned long long)feather_shard_header_len(r, s),
                   (unsigned long long)feather_shard_file_size(r, s));
        }
    } else {
        printf("  header: %llu bytes (file %llu bytes)\n",
               (unsigned long long)feather_shard_header_len(r, 0),
               (unsigned long long)feather_shard_file_size(r, 0));
    }
    print_tensors(r);
    for (unsigned s = 0; s < ns; s++) {
        if (ns > 1) printf("  shard %u ", s);
        print_metadata(r, s);
    }
}

/* --info: every file is described or its one-line error printed; the worst status wins. */
static int cmd_info(const options *o) {
    int worst = FEATHER_EXIT_OK;
    for (int i = 0; i < o->nfiles; i++) {
        feather_reader *r = NULL;
        feather_error err = {0};
        int rc = FEATHER_EXIT_OK;
        if (feather_open(&r, o->files[i], FEATHER_OPEN_HEADER_ONLY, &err)) {
            fflush(stdout);
            rc = cli_fail(&err);
        } else {
            print_info(r);
            feather_close(r);
        }
        if (rc > worst) worst = rc;
        if (feather_cancelled()) return FEATHER_EXIT_INTERRUPTED;
    }
    if (fflush(stdout) || ferror(stdout)) {
        cli_error("error writing to standard output");
        return FEATHER_EXIT_INPUT > worst ? FEATHER_EXIT_INPUT : worst;
    }
    return worst;
}

static void human(uint64_t b, char *buf, size_t len) {
    if (b >= 1000000000ull) snprintf(buf, len, "%.2f GB", b / 1e9);
    else if (b >= 1000000ull) snprintf(buf, len, "%.1f MB", b / 1e6);
    else snprintf(buf, len, "%.1f kB", b / 1e3);
}

/* Where a report named "-" goes: standard output as it was when the program started (main). */
static FILE *report_out;

/* Writes a report whole or not at all, as the writer writes checkpoints (an interrupted or
 * failed write leaves any earlier report as it was). */
static int write_text(const char *path, char *text) {
    if (!text) { cli_error("out of memory"); return FEATHER_EXIT_INPUT; }
    int bad;
    feather_error err = {0};
    if (!strcmp(path, "-")) {
        FILE *f = report_out ? report_out : stdout;
        bad = fputs(text, f) < 0 || fflush(f) != 0;
    } else {
        const feather_write_options wo = {.overwrite = 1};
        bad = feather_write_file(path, text, strlen(text), &wo, &err) != FEATHER_OK;
    }
    free(text);
    if (bad) {
        cli_error("%s: cannot write the report%s%s", path, err.message[0] ? ": " : "", err.message);
        return FEATHER_EXIT_INPUT;
    }
    return 0;
}

typedef struct progress_state { double t0, last; } progress_state;

static void on_progress(void *arg, uint64_t done, uint64_t total, const char *tensor) {
    progress_state *p = arg;
    double t = cli_now_s();
    if (t - p->last < 0.1 && done < total) return;
    p->last = t;
    fprintf(stderr, "\r\033[K%5.1f%%  %.60s", total ? 100.0 * done / total : 100.0, tensor);
    fflush(stderr);
}

/* An SNR for the table: "exact" where it is infinite (no error at all). */
static const char *snr_cell(double db, char *buf, size_t len) {
    if (db == INFINITY) snprintf(buf, len, "exact");
    else snprintf(buf, len, "%.2f", db);
    return buf;
}

static void print_report(const feather_verify_report *r, const options *o) {
    const feather_verify_tensor **v = feather_report_sorted(r);
    if (!v) return;
    int rows = 0;
    if (!o->quiet && r->measured) {
        printf("%-56s %9s %9s %10s %12s\n", "tensor (worst first)", "w SNR dB", "out SNR", "out relerr", "max abs err");
        for (size_t i = 0; i < r->count && (o->top == 0 || rows < o->top); i++) {
            const feather_verify_tensor *t = v[i];
            if (!t->measured) continue;
            char w[32], out[32];
            printf("%-56.56s %9s ", t->name, snr_cell(t->weight_snr_db, w, sizeof w));
            if (t->output_measured)
                printf("%9s %10.3g %12.3g", snr_cell(t->output_snr_db, out, sizeof out), t->output_rel_err,
                       t->output_max_abs);
            else
                printf("%9s %10s %12.3g", "-", "-", t->weight_max_abs);
            if (t->nonfinite) printf("  %llu NaN/Inf left out", (unsigned long long)t->nonfinite);
            printf("%s\n", t->failed_threshold ? "  UNDER THRESHOLD" : "");
            rows++;
        }
    }
    /* the file's own problem, whose text names the file (or shard) already */
    if (r->file_problem[0]) fprintf(stderr, "%s\n", r->file_problem);
    for (size_t i = 0; i < r->count; i++)
        if (v[i]->problem[0]) fprintf(stderr, "%s: tensor '%s': %s\n", r->path, v[i]->name, v[i]->problem);
        else if (v[i]->failed_threshold && o->quiet)
            fprintf(stderr, "%s: tensor '%s': under the threshold (SNR %.2f dB)\n", r->path, v[i]->name,
                    v[i]->output_measured ? v[i]->output_snr_db : v[i]->weight_snr_db);
    free(v);
    char a[32], b[32];
    int ok = feather_report_ok(r);
    printf("%s: %s: %zu tensor%s", r->path, ok ? "OK" : "FAILED", r->count, r->count == 1 ? "" : "s");
    if (r->file_problem[0]) printf(", problems with the file");
    if (r->problems) printf(", %zu with problems", r->problems);
    if (r->threshold_failures) printf(", %zu under the thresholds", r->threshold_failures);
    if (r->measured) {
        human(r->bytes_reference, a, sizeof a);
        human(r->bytes_converted, b, sizeof b);
        printf("; %zu measured (matmul on %s): ", r->measured, r->device);
        if (r->snr_worst_db == INFINITY) /* every measured tensor exact: no SNR to average */
            printf("exact (no error)");
        else
            printf("SNR mean %.2f dB, median %.2f dB, worst %.2f dB", r->snr_mean_db, r->snr_median_db, r->snr_worst_db);
        if (r->nonfinite)
            printf(" (%llu NaN/Inf value%s of the original left out)", (unsigned long long)r->nonfinite,
                   r->nonfinite == 1 ? "" : "s");
        printf("; %s -> %s (%.1f%% saved)", a, b,
               r->bytes_reference ? 100.0 * (1.0 - (double)r->bytes_converted / (double)r->bytes_reference) : 0.0);
    }
    printf("; %.1f s\n", r->seconds);
}

static int cmd_verify(options *o) {
    int worst = FEATHER_EXIT_OK;
    feather_ctx *ctx = feather_ctx_new((int)o->threads);
    if (!ctx) return FEATHER_EXIT_INPUT;
    if (o->v.reference && o->v.device == FEATHER_DEVICE_AUTO) {
        feather_device got;
        int fell_back = 0;
        char why[200] = "";
        if (!feather_device_select(FEATHER_DEVICE_AUTO, &got, &fell_back, why, sizeof why, NULL) && fell_back &&
            feather_gpu_available(NULL, 0) == 0 && strstr(why, "without GPU support") == NULL)
            cli_error("notice: no usable GPU (%s); the matmul runs on the CPU", why);
    }
    for (int i = 0; i < o->nfiles; i++) {
        feather_verify_report *rep = NULL;
        feather_error err = {0};
        progress_state ps = {cli_now_s(), 0};
        int tty = !o->quiet && isatty(2);
        o->v.progress = tty ? on_progress : NULL;
        o->v.progress_arg = &ps;
        feather_status st = feather_verify(ctx, o->files[i], &o->v, &rep, &err);
        if (tty) fprintf(stderr, "\r\033[K");
        int rc = feather_exit_code(st);
        if (rep) {
            print_report(rep, o);
            if (o->json && write_text(o->json, feather_report_json(rep))) rc = FEATHER_EXIT_INPUT;
            if (o->csv && write_text(o->csv, feather_report_csv(rep))) rc = FEATHER_EXIT_INPUT;
            if (o->html && write_text(o->html, feather_report_html(rep))) rc = FEATHER_EXIT_INPUT;
            feather_verify_report_free(rep);
        } else {
            cli_fail(&err);
        }
        if (rc > worst && worst != FEATHER_EXIT_INTERRUPTED) worst = rc;
        if (st == FEATHER_E_CANCELLED) break;
    }
    feather_ctx_free(ctx);
    return worst;
}

int main(int argc, char **argv) {
    cli_prog = "feather-verify";
    cli_install_signals();
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    /* A report on standard output ("-") gets it alone, so that it parses: everything else the
     * program prints there (the table, the verdict, --info) goes to standard error instead. */
    if (rc < 0 && reports_on_stdout(&o)) {
        const int fd = dup(STDOUT_FILENO);
        if (fd < 0 || !(report_out = fdopen(fd, "w")) || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
            cli_error("cannot keep standard output for the report: %s", strerror(errno));
            rc = FEATHER_EXIT_INPUT;
        }
    }
    if (rc < 0) rc = o.info ? cmd_info(&o) : cmd_verify(&o);
    if (report_out && report_out != stdout && fclose(report_out) != 0 && rc == FEATHER_EXIT_OK) rc = FEATHER_EXIT_INPUT;
    free(o.files);
    return rc;
}
