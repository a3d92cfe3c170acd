/* Renderings of a verification report: JSON, CSV and one self-contained HTML page (inline SVG
 * charts, no scripts, no external resources). */
#include "internal.h"
#include "feather/verify.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing string buffer. */
typedef struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) FEATHER_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = 1; return; }
        if (b->s && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s) { b->oom = 1; return; }
        b->s = s;
        b->cap = cap;
    }
}

static char *sb_done(sbuf *b) {
    if (b->oom) { free(b->s); return NULL; }
    if (!b->s) return calloc(1, 1);
    return b->s;
}

static void add_num(cJSON *o, const char *k, double v) {
    /* JSON has no Inf/NaN: a perfect match (infinite SNR) is written as null. */
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

int feather_report_ok(const feather_verify_report *r) {
    return !r->file_problem[0] && !r->problems && !r->threshold_failures;
}

char *feather_report_json(const feather_verify_report *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "file", r->path);
    if (r->reference[0]) cJSON_AddStringToObject(root, "reference", r->reference);
    if (r->device[0]) cJSON_AddStringToObject(root, "device", r->device);
    if (r->file_problem[0]) cJSON_AddStringToObject(root, "file_problem", r->file_problem);
    cJSON *sum = cJSON_AddObjectToObject(root, "summary");
    cJSON_AddBoolToObject(sum, "ok", feather_report_ok(r));
    cJSON_AddNumberToObject(sum, "tensors", (double)r->count);
    cJSON_AddNumberToObject(sum, "problems", (double)r->problems);
    cJSON_AddNumberToObject(sum, "threshold_failures", (double)r->threshold_failures);
    cJSON_AddNumberToObject(sum, "measured", (double)r->measured);
    cJSON_AddNumberToObject(sum, "bytes_converted", (double)r->bytes_converted);
    cJSON_AddNumberToObject(sum, "bytes_reference", (double)r->bytes_reference);
    if (r->measured) {
        add_num(sum, "snr_mean_db", r->snr_mean_db);
        add_num(sum, "snr_median_db", r->snr_median_db);
        add_num(sum, "snr_worst_db", r->snr_worst_db);
        cJSON_AddNumberToObject(sum, "nonfinite", (double)r->nonfinite);
    }
    cJSON_AddNumberToObject(sum, "seconds", r->seconds);
    cJSON *arr = cJSON_AddArrayToObject(root, "tensors");
    for (size_t i = 0; i < r->count; i++) {
        const feather_verify_tensor *t = &r->tensors[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "dtype", t->dtype);
        cJSON_AddBoolToObject(o, "converted", t->converted);
        cJSON_AddNumberToObject(o, "bytes", (double)t->bytes);
        if (r->reference[0]) cJSON_AddNumberToObject(o, "bytes_reference", (double)t->bytes_reference);
        cJSON_AddBoolToObject(o, "ok", !t->problem[0] && !t->failed_threshold);
        if (t->problem[0]) cJSON_AddStringToObject(o, "problem", t->problem);
        if (t->failed_threshold) cJSON_AddBoolToObject(o, "failed_threshold", 1);
        if (t->measured) {
            add_num(o, "weight_snr_db", t->weight_snr_db);
            add_num(o, "weight_rel_rms", t->weight_rel_rms);
            add_num(o, "weight_cosine", t->weight_cos);
            add_num(o, "weight_max_abs_err", t->weight_max_abs);
            cJSON_AddNumberToObject(o, "nonfinite", (double)t->nonfinite);
        }
        if (t->output_measured) {
            add_num(o, "output_snr_db", t->output_snr_db);
            add_num(o, "output_rel_err", t->output_rel_err);
            add_num(o, "output_max_abs_err", t->output_max_abs);
        }
        if (t->measured) add_num(o, "max_abs_err", t->output_measured ? t->output_max_abs : t->weight_max_abs);
        cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

/* CSV field: quoted when it holds a comma, quote or newline. */
static void csv_field(sbuf *b, const char *s) {
    if (!strpbrk(s, ",\"\n\r")) { sb_printf(b, "%s", s); return; }
    sb_printf(b, "\"");
    for (; *s; s++) sb_printf(b, *s == '"' ? "\"\"" : "%c", *s);
    sb_printf(b, "\"");
}

static void csv_num(sbuf *b, int have, double v) {
    if (!have) sb_printf(b, ",");
    else if (isinf(v)) sb_printf(b, ",%s", v > 0 ? "inf" : "-inf");
    else sb_printf(b, ",%.9g", v);
}

char *feather_report_csv(const feather_verify_report *r) {
    sbuf b = {0};
    sb_printf(&b, "name,dtype,converted,bytes,bytes_reference,ok,problem,weight_snr_db,weight_rel_rms,"
                  "weight_cosine,weight_max_abs_err,output_snr_db,output_rel_err,output_max_abs_err,nonfinite\n");
    for (size_t i = 0; i < r->count; i++) {
        const feather_verify_tensor *t = &r->tensors[i];
        csv_field(&b, t->name);
        sb_printf(&b, ",%s,%d,%llu,%llu,%d,", t->dtype, t->converted, (unsigned long long)t->bytes,
                  (unsigned long long)t->bytes_reference, !t->problem[0] && !t->failed_threshold);
        csv_field(&b, t->problem);
        csv_num(&b, t->measured, t->weight_snr_db);
        csv_num(&b, t->measured, t->weight_rel_rms);
        csv_num(&b, t->measured, t->weight_cos);
        csv_num(&b, t->measured, t->weight_max_abs);
        csv_num(&b, t->output_measured, t->output_snr_db);
        csv_num(&b, t->output_measured, t->output_rel_err);
        csv_num(&b, t->output_measured, t->output_max_abs);
        csv_num(&b, t->measured, (double)t->nonfinite);
        sb_printf(&b, "\n");
    }
    return sb_done(&b);
}

static void html_text(sbuf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '&': sb_printf(b, "&amp;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        default: sb_printf(b, "%c", *s);
        }
    }
}

static double shown_snr(const feather_verify_tensor *t) {
    return t->output_measured ? t->output_snr_db : t->weight_snr_db;
}

/* SNR per layer in model order: one dot per measured tensor, a line through them. */
static void svg_line(sbuf *b, const feather_verify_report *r, double lo, double hi) {
    const int W = 900, H = 260, L = 50, R = 10, T = 10, B = 30;
    sb_printf(b, "<svg id=\"snr-by-layer\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                 "viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"SNR per layer\">\n", W, H, W, H);
    sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n",
              L, T, W - L - R, H - T - B);
    for (int g = 0; g <= 4; g++) {
        double v = lo + (hi - lo) * g / 4;
        double y = T + (H - T - B) * (1 - (double)g / 4);
        sb_printf(b, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                     "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.1f</text>\n",
                  L, W - R, y, y, L - 4, y + 4, v);
    }
    sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">layer (model order)</text>\n"
                 "<text x=\"12\" y=\"%d\" font-size=\"11\" transform=\"rotate(-90 12 %d)\" "
                 "text-anchor=\"middle\">SNR (dB)</text>\n",
              (W + L) / 2, H - 8, (H - B + T) / 2, (H - B + T) / 2);
    size_t n = 0, j = 0;
    for (size_t i = 0; i < r->count; i++) n += r->tensors[i].measured && isfinite(shown_snr(&r->tensors[i]));
    sb_printf(b, "<polyline fill=\"none\" stroke=\"#3b6fb6\" stroke-width=\"1.2\" points=\"");
    for (size_t i = 0; i < r->count; i++) {
        const feather_verify_tensor *t = &r->tensors[i];
        if (!t->measured || !isfinite(shown_snr(t))) continue;
        double x = L + (W - L - R) * (n > 1 ? (double)j / (double)(n - 1) : 0.5);
        double y = T + (H - T - B) * (1 - (shown_snr(t) - lo) / (hi - lo));
        sb_printf(b, "%.1f,%.1f ", x, y);
        j++;
    }
    sb_printf(b, "\"/>\n");
    j = 0;
    for (size_t i = 0; i < r->count; i++) {
        const feather_verify_tensor *t = &r->tensors[i];
        if (!t->measured || !isfinite(shown_snr(t))) continue;
        double x = L + (W - L - R) * (n > 1 ? (double)j / (double)(n - 1) : 0.5);
        double y = T + (H - T - B) * (1 - (shown_snr(t) - lo) / (hi - lo));
        sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"><title>", x, y,
                  t->failed_threshold ? "#c0392b" : "#3b6fb6");
        html_text(b, t->name);
        sb_printf(b, ": %.2f dB</title></circle>\n", shown_snr(t));
        j++;
    }
    sb_printf(b, "</svg>\n");
}

static void svg_hist(sbuf *b, const feather_verify_report *r, double lo, double hi) {
    enum { BINS = 24 };
    const int W = 900, H = 200, L = 50, R = 10, T = 10, B = 30;
    size_t cnt[BINS] = {0}, top = 1;
    for (size_t i = 0; i < r->count; i++) {
        const feather_verify_tensor *t = &r->tensors[i];
        if (!t->measured || !isfinite(shown_snr(t))) continue;
        int k = (int)((shown_snr(t) - lo) / (hi - lo) * BINS);
        if (k >= BINS) k = BINS - 1;
        if (k < 0) k = 0;
        if (++cnt[k] > top) top = cnt[k];
    }
    sb_printf(b, "<svg id=\"snr-histogram\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                 "viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"SNR histogram\">\n", W, H, W, H);
    double bw = (double)(W - L - R) / BINS;
    for (int k = 0; k < BINS; k++) {
        double h = (H - T - B) * (double)cnt[k] / (double)top;
        sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#6a9fd8\">"
                     "<title>%.2f–%.2f dB: %zu</title></rect>\n",
                  L + k * bw + 1, H - B - h, bw - 2, h, lo + (hi - lo) * k / BINS, lo + (hi - lo) * (k + 1) / BINS,
                  cnt[k]);
    }
    for (int g = 0; g <= 4; g++)
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"%s\">%.1f dB</text>\n",
                  L + (W - L - R) * g / 4.0, H - 12, g == 0 ? "start" : g == 4 ? "end" : "middle",
                  lo + (hi - lo) * g / 4);
    sb_printf(b, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#999\"/>\n</svg>\n", L, W - R, H - B, H - B);
}

static int worst_first(const void *a, const void *b) {
    const feather_verify_tensor *x = *(const feather_verify_tensor *const *)a, *y = *(const feather_verify_tensor *const *)b;
    int px = x->problem[0] || x->failed_threshold, py = y->problem[0] || y->failed_threshold;
    if (px != py) return py - px;
    if (x->measured != y->measured) return y->measured - x->measured;
    double sx = shown_snr(x), sy = shown_snr(y);
    if (x->measured && sx != sy) return sx < sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Tensors sorted worst first (problems, then lowest SNR). The array is malloc'd. */
const feather_verify_tensor **feather_report_sorted(const feather_verify_report *r) {
    const feather_verify_tensor **v = malloc((r->count + 1) * sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < r->count; i++) v[i] = &r->tensors[i];
    qsort(v, r->count, sizeof *v, worst_first);
    return v;
}

char *feather_report_html(const feather_verify_report *r) {
    sbuf b = {0};
    sb_printf(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>feather-verify: ");
    html_text(&b, r->path);
    sb_printf(&b, "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}"
                  "table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #ddd;"
                  "text-align:right}td.n,th.n{text-align:left}tr.bad td{background:#fbeaea}.ok{color:#1e7b34}"
                  ".fail{color:#c0392b}h2{margin-top:28px}</style></head><body>\n");
    sb_printf(&b, "<h1>Verification of ");
    html_text(&b, r->path);
    sb_printf(&b, "</h1>\n<p>");
    if (r->reference[0]) {
        sb_printf(&b, "Reference: ");
        html_text(&b, r->reference);
        sb_printf(&b, "<br>Matmul on ");
        html_text(&b, r->device);
        sb_printf(&b, "<br>");
    }
    int ok = feather_report_ok(r);
    sb_printf(&b, "<b class=\"%s\">%s</b>: ", ok ? "ok" : "fail", ok ? "PASS" : "FAIL");
    if (r->file_problem[0]) {
        html_text(&b, r->file_problem);
        sb_printf(&b, ". ");
    }
    sb_printf(&b, "%zu tensors, %zu with problems, %zu under the thresholds.", r->count, r->problems,
              r->threshold_failures);
    if (r->bytes_reference)
        sb_printf(&b, " Size %.1f MB &rarr; %.1f MB (%.1f%% saved).", r->bytes_reference / 1e6, r->bytes_converted / 1e6,
                  100.0 * (1.0 - (double)r->bytes_converted / (double)r->bytes_reference));
    if (r->measured)
        sb_printf(&b, " SNR over %zu converted tensors: mean %.2f dB, median %.2f dB, worst %.2f dB.", r->measured,
                  r->snr_mean_db, r->snr_median_db, r->snr_worst_db);
    if (r->nonfinite)
        sb_printf(&b, " %llu NaN/Inf values of the original left out of the figures.", (unsigned long long)r->nonfinite);
    sb_printf(&b, "</p>\n");
    if (r->measured) {
        double lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < r->count; i++) {
            const feather_verify_tensor *t = &r->tensors[i];
            if (!t->measured || !isfinite(shown_snr(t))) continue;
            if (shown_snr(t) < lo) lo = shown_snr(t);
            if (shown_snr(t) > hi) hi = shown_snr(t);
        }
        if (!(lo < hi)) { lo = isfinite(lo) ? lo - 1 : 0; hi = lo + 2; }
        double pad = (hi - lo) * 0.05;
        lo -= pad;
        hi += pad;
        sb_printf(&b, "<h2>SNR per layer (%s)</h2>\n", r->tensors && r->device[0] ? "output space" : "weight space");
        svg_line(&b, r, lo, hi);
        sb_printf(&b, "<h2>Distribution</h2>\n");
        svg_hist(&b, r, lo, hi);
    }
    sb_printf(&b, "<h2>Tensors, worst first</h2>\n<table><tr><th class=\"n\">tensor</th><th>dtype</th>"
                  "<th>weight SNR dB</th><th>weight rel RMS</th><th>cosine</th><th>output SNR dB</th>"
                  "<th>output rel err</th><th>max abs err</th><th class=\"n\">status</th></tr>\n");
    const feather_verify_tensor **v = feather_report_sorted(r);
    for (size_t i = 0; v && i < r->count; i++) {
        const feather_verify_tensor *t = v[i];
        int bad = t->problem[0] || t->failed_threshold;
        sb_printf(&b, "<tr%s><td class=\"n\">", bad ? " class=\"bad\"" : "");
        html_text(&b, t->name);
        sb_printf(&b, "</td><td>%s</td>", t->dtype);
        if (t->measured)
            sb_printf(&b, "<td>%.2f</td><td>%.3g</td><td>%.6f</td>", t->weight_snr_db, t->weight_rel_rms, t->weight_cos);
        else
            sb_printf(&b, "<td></td><td></td><td></td>");
        if (t->output_measured)
            sb_printf(&b, "<td>%.2f</td><td>%.3g</td><td>%.3g</td>", t->output_snr_db, t->output_rel_err, t->output_max_abs);
        else if (t->measured)
            sb_printf(&b, "<td></td><td></td><td>%.3g</td>", t->weight_max_abs);
        else
            sb_printf(&b, "<td></td><td></td><td></td>");
        sb_printf(&b, "<td class=\"n\">");
        if (t->problem[0]) html_text(&b, t->problem);
        else if (t->failed_threshold) sb_printf(&b, "under threshold");
        else sb_printf(&b, "%s", t->converted ? "ok" : "kept, ok");
        if (t->nonfinite) sb_printf(&b, " (%llu NaN/Inf of the original left out)", (unsigned long long)t->nonfinite);
        sb_printf(&b, "</td></tr>\n");
    }
    free(v);
    sb_printf(&b, "</table>\n<p style=\"color:#888;font-size:12px\">feather %s</p>\n</body></html>\n", FEATHER_VERSION_STRING);
    return sb_done(&b);
}
