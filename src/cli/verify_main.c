/* feather-verify: checks converted checkpoints and measures their error. */
#include "cli/common.h"

#include <stdlib.h>
#include <string.h>

/* Longest metadata value shown in full by --info. */
#define INFO_VALUE_MAX 200

typedef struct options {
    int info;           /* --info: describe the files */
    const char **files; /* operands */
    int nfiles;
} options;

static void usage(void) {
    printf("Usage: feather-verify [options] FILE...\n"
           "\n"
           "FILE is a .safetensors file, a .safetensors.zst file, a *.safetensors.index.json\n"
           "or a directory holding one model.\n"
           "\n"
           "  --info         print each file's shards, header length, tensors and metadata\n"
           "  -h, --help     show this help\n"
           "  --version      show the version\n"
           "\n"
           "Exit status: 0 ok, 1 verification failed, 2 invalid input or I/O error,\n"
           "64 usage error, 130 interrupted.\n");
}

/* Returns -1 to go on, or the exit status when the program is done (help, version, error). */
static int parse_args(int argc, char **argv, options *o) {
    int only_files = 0;
    o->files = calloc((size_t)argc, sizeof *o->files);
    if (!o->files) {
        cli_error("out of memory");
        return FEATHER_EXIT_INPUT;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_files || a[0] != '-' || !a[1]) o->files[o->nfiles++] = a;
        else if (!strcmp(a, "--")) only_files = 1;
        else if (!strcmp(a, "--version")) { cli_print_version(); return FEATHER_EXIT_OK; }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return FEATHER_EXIT_OK; }
        else if (!strcmp(a, "--info")) o->info = 1;
        else return cli_usage_error("unknown option '%s'", a);
    }
    if (!o->nfiles) return cli_usage_error("no input file");
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

int main(int argc, char **argv) {
    cli_prog = "feather-verify";
    cli_install_signals();
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc < 0) {
        if (o.info) rc = cmd_info(&o);
        else rc = cli_usage_error("nothing to do: only --info is available so far");
    }
    free(o.files);
    return rc;
}
