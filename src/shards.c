/*
 * Models split across files: a "*.safetensors.index.json" (the Hugging Face convention:
 * {"metadata": {...}, "weight_map": {"tensor": "shard file", ...}}) or a directory holding one
 * model. Shard paths are relative to the index's directory and may not leave it.
 */
#include "reader_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_SUFFIX ".safetensors.index.json"

int st_is_index_path(const char *path) { return feather_ends_with(path, ".index.json"); }

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t o = a;
    if (a && dir[a - 1] != '/') p[o++] = '/';
    memcpy(p + o, name, b + 1);
    return p;
}

/* ---- a directory ---- */

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static int names_add(names *l, const char *s) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(s))) return -1;
    l->n++;
    return 0;
}

static void names_free(names *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
}

static int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "a, b, c, ..." for messages. */
static const char *list_str(const names *l, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < l->n && o + 1 < len; i++) {
        char q[128];
        int w = snprintf(buf + o, len - o, "%s%s", i ? ", " : "", feather_quote(l->v[i], q, sizeof q));
        if (w < 0 || (size_t)w >= len - o || (i == 4 && l->n > 5)) {
            snprintf(buf + o, len - o, "%s...", i ? ", " : "");
            break;
        }
        o += (size_t)w;
    }
    return buf;
}

static feather_status scan_dir(const char *dir, names *index, names *models, feather_error *err) {
    DIR *d = opendir(dir);
    if (!d) return feather_fail(err, FEATHER_E_IO, "%s: %s", dir, strerror(errno));
    feather_status st = FEATHER_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        int is_index = feather_ends_with(e->d_name, INDEX_SUFFIX);
        int is_model = feather_ends_with(e->d_name, ".safetensors") || feather_ends_with(e->d_name, ".safetensors.zst");
        if (!is_index && !is_model) continue;
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, 0) || !S_ISREG(sb.st_mode)) continue;
        if (names_add(is_index ? index : models, e->d_name))
            st = feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", dir);
    }
    closedir(d);
    if (index->n) qsort(index->v, index->n, sizeof *index->v, cmp_cstr);
    if (models->n) qsort(models->v, models->n, sizeof *models->v, cmp_cstr);
    return st;
}

/* Whether dir holds name, a regular file (dir_wanted 0) or a directory (1). */
static int has_entry(const char *dir, const char *name, int dir_wanted) {
    char path[4096];
    struct stat sb;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path || stat(path, &sb)) return 0;
    return dir_wanted ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode);
}

feather_status st_dir_model(const char *dir, char **model_path, feather_error *err) {
    names index = {0}, models = {0};
    char list[512];
    feather_status st = scan_dir(dir, &index, &models, err);
    const char *pick = NULL;
    if (st) goto out;
    if (index.n > 1)
        st = feather_fail(err, FEATHER_E_INVALID,
                          "%s: %zu *%s files (%s): cannot tell which model to read", dir, index.n,
                          INDEX_SUFFIX, list_str(&index, list, sizeof list));
    else if (index.n == 1)
        pick = index.v[0];
    else if (models.n == 1)
        pick = models.v[0];
    else if (models.n == 0 && has_entry(dir, "model_index.json", 0)) {
        /* a diffusers pipeline: each of its models lies in a folder of its own */
        const char *sub = has_entry(dir, "transformer", 1) ? "transformer" : has_entry(dir, "unet", 1) ? "unet" : NULL;
        char which[4200] = "";
        if (sub) snprintf(which, sizeof which, " (%s/%s)", dir, sub);
        st = feather_fail(err, FEATHER_E_INVALID,
                          "%s: a diffusers pipeline (model_index.json), whose models lie in folders of their own: "
                          "give the folder of the one to convert%s", dir, which);
    } else if (models.n == 0)
        st = feather_fail(err, FEATHER_E_INVALID,
                          "%s: no .safetensors file and no *%s in this directory", dir, INDEX_SUFFIX);
    else
        st = feather_fail(err, FEATHER_E_INVALID,
                          "%s: %zu .safetensors files (%s) and no *%s: cannot tell which model to "
                          "read", dir, models.n, list_str(&models, list, sizeof list), INDEX_SUFFIX);
    if (pick && !(*model_path = join(dir, pick)))
        st = feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", dir);
out:
    names_free(&index);
    names_free(&models);
    return st;
}

/* ---- an index ---- */

static feather_status read_file(const char *path, char **text, size_t *len, feather_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return feather_fail(err, FEATHER_E_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    feather_status st = FEATHER_OK;
    char *buf = NULL;
    size_t got = 0;
    if (fstat(fd, &sb)) {
        st = feather_fail(err, FEATHER_E_IO, "%s: %s", path, strerror(errno));
    } else if ((uint64_t)sb.st_size > FEATHER_MAX_HEADER) {
        st = feather_fail(err, FEATHER_E_INVALID, "%s: index is larger than %llu bytes", path,
                          FEATHER_MAX_HEADER);
    } else if (!(buf = malloc((size_t)sb.st_size + 1))) {
        st = feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
    }
    while (!st && got < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) st = feather_fail(err, FEATHER_E_IO, "%s: %s", path, strerror(errno));
        if (r == 0) break;
        if (r > 0) got += (size_t)r;
    }
    close(fd);
    if (st) {
        free(buf);
        return st;
    }
    *text = buf;
    *len = got;
    return FEATHER_OK;
}

/* A shard path must stay inside the index's directory. */
static const char *bad_shard_path(const char *s) {
    if (!*s) return "is empty";
    if (s[0] == '/') return "is absolute";
    for (const char *c = s; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.') return "leaves the index's directory";
        c += n;
        while (*c == '/') c++;
    }
    return NULL;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const st_index_entry *)a)->tensor, ((const st_index_entry *)b)->tensor);
}

/* Distinct shard file names of the weight map, sorted. */
static feather_status collect_shards(const cJSON *wm, names *shards, const char *path,
                                     feather_error *err) {
    char q[256], q2[256];
    for (const cJSON *c = wm->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return feather_fail(err, FEATHER_E_INVALID,
                                "%s: weight_map: the shard of '%s' is not a string", path,
                                feather_quote(c->string, q, sizeof q));
        const char *why = bad_shard_path(c->valuestring);
        if (why)
            return feather_fail(err, FEATHER_E_INVALID,
                                "%s: weight_map: shard path '%s' of tensor '%s' %s", path,
                                feather_quote(c->valuestring, q2, sizeof q2), why,
                                feather_quote(c->string, q, sizeof q));
        if (names_add(shards, c->valuestring))
            return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
    }
    qsort(shards->v, shards->n, sizeof *shards->v, cmp_cstr);
    size_t k = 0;
    for (size_t i = 0; i < shards->n; i++) {
        if (k && !strcmp(shards->v[k - 1], shards->v[i])) free(shards->v[i]);
        else shards->v[k++] = shards->v[i];
    }
    shards->n = k;
    return FEATHER_OK;
}

static feather_status fill_index(st_index *ix, const cJSON *wm, const names *shards,
                                 const char *path, feather_error *err) {
    char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    size_t total = 0, n = 0;
    for (const cJSON *c = wm->child; c; c = c->next, n++) total += strlen(c->string) + 1;
    for (size_t i = 0; i < shards->n; i++) total += dirlen + strlen(shards->v[i]) + 1;
    ix->strings = malloc(total ? total : 1);
    ix->entries = malloc((n ? n : 1) * sizeof *ix->entries);
    ix->shard_paths = malloc((shards->n ? shards->n : 1) * sizeof *ix->shard_paths);
    if (!ix->strings || !ix->entries || !ix->shard_paths)
        return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
    char *o = ix->strings;
    for (size_t i = 0; i < shards->n; i++) {
        ix->shard_paths[i] = o;
        memcpy(o, path, dirlen);
        o += dirlen;
        size_t m = strlen(shards->v[i]) + 1;
        memcpy(o, shards->v[i], m);
        o += m;
    }
    ix->nshards = (unsigned)shards->n;
    for (const cJSON *c = wm->child; c; c = c->next) {
        char **s = bsearch(&c->valuestring, shards->v, shards->n, sizeof *shards->v, cmp_cstr);
        size_t m = strlen(c->string) + 1;
        ix->entries[ix->nentries++] = (st_index_entry){memcpy(o, c->string, m), (unsigned)(s - shards->v)};
        o += m;
    }
    qsort(ix->entries, ix->nentries, sizeof *ix->entries, cmp_entry);
    return FEATHER_OK;
}

static feather_status parse_index(st_index *ix, const char *text, size_t len, const char *path,
                                  feather_error *err) {
    json_scan scan;
    feather_status st = json_scan_run(&scan, (const uint8_t *)text, len, path, "index", err);
    json_scan_free(&scan);
    if (st) return st;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, NULL, 0);
    if (!root)
        return feather_fail(err, FEATHER_E_INVALID, "%s: index is not valid JSON " JSON_DISAGREE, path);
    names shards = {0};
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(wm))
        st = feather_fail(err, FEATHER_E_INVALID, "%s: index has no \"weight_map\" object", path);
    else if (!(st = st_check_unique(root, path, "key ", err)) &&
             !(st = st_check_unique(wm, path, "weight_map: tensor ", err))) {
        if (!wm->child)
            st = feather_fail(err, FEATHER_E_INVALID, "%s: weight_map is empty", path);
        else if (!(st = collect_shards(wm, &shards, path, err)))
            st = fill_index(ix, wm, &shards, path, err);
    }
    names_free(&shards);
    cJSON_Delete(root);
    return st;
}

feather_status st_index_load(st_index *ix, const char *path, feather_error *err) {
    memset(ix, 0, sizeof *ix);
    char *text = NULL;
    size_t len = 0;
    feather_status st = read_file(path, &text, &len, err);
    if (st) return st;
    st = parse_index(ix, text, len, path, err);
    free(text);
    return st;
}

void st_index_free(st_index *ix) {
    free(ix->shard_paths);
    free(ix->entries);
    free(ix->strings);
    memset(ix, 0, sizeof *ix);
}

const st_index_entry *st_index_find(const st_index *ix, const char *name) {
    st_index_entry key = {name, 0};
    return bsearch(&key, ix->entries, ix->nentries, sizeof key, cmp_entry);
}
