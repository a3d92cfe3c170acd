/* Internal interfaces of the safetensors reader: strict JSON pre-scan, header parsing, recorded
 * hashes, .zst input and sharded models. Not installed. */
#ifndef FEATHER_READER_INTERNAL_H
#define FEATHER_READER_INTERNAL_H

#include "internal.h"

#include <stdint.h>

/* ---- strict JSON pre-scan (json_scan.c) ---- */

/* serde_json (the reference's parser) nests at most 128 levels. */
#define JSON_MAX_DEPTH 128

/* How one element of a recorded array (see json_scan) reads as a safetensors integer. */
typedef enum json_num_kind {
    JSON_UINT = 0,     /* plain integer literal within 0..2^64-1 */
    JSON_NEGATIVE,     /* starts with '-' (including -0) */
    JSON_FRACTION,     /* has a fraction or an exponent (2.0, 2e0) */
    JSON_TOO_BIG,      /* integer literal above 2^64-1 */
    JSON_NOT_NUMBER    /* string, literal, array or object */
} json_num_kind;

typedef struct json_elem {
    size_t offset;  /* of the token in the scanned text */
    uint32_t len;   /* token length (numbers only; 0 otherwise) */
    uint8_t kind;   /* json_num_kind */
} json_elem;

/* An array that is the value of a "shape" or "data_offsets" member of an object that is itself
 * a member of the root object: member/field are positions in document order (what cJSON's child
 * lists also follow), so the structural pass finds the raw tokens cJSON cannot give back. */
typedef struct json_array {
    size_t member, field;
    size_t first, count; /* elements in json_scan.values / elems */
} json_array;

typedef struct json_scan {
    json_array *arrays;
    size_t narrays, arrays_cap;
    uint64_t *values; /* value of each recorded element (JSON_UINT only; 0 otherwise) */
    json_elem *elems;
    size_t nvalues, values_cap;
} json_scan;

/* Checks that text[0, len) is one JSON value the way serde_json would accept it, and what cJSON
 * gets wrong: valid UTF-8, no BOM, only space/tab/LF/CR between tokens, no raw control byte in a
 * string, valid escapes without "\u0000" or lone surrogates, strict number grammar (no leading
 * zeros), nesting at most JSON_MAX_DEPTH, nothing after the value but whitespace. Numbers longer
 * than 63 characters are refused too: cJSON 1.7.15 copies at most 63 and would misparse them.
 * Messages read "NAME: WHAT ...". On success 's' holds the recorded arrays (json_scan_free). */
feather_status json_scan_run(json_scan *s, const uint8_t *text, size_t len, const char *name,
                             const char *what, feather_error *err);
void json_scan_free(json_scan *s);
/* Ends every message about cJSON reading text that the scan accepted differently: never
 * expected, and what the fuzzer watches for. */
#define JSON_DISAGREE "(the JSON scan and cJSON disagree)"
/* The recorded array at (member, field), or NULL. */
const json_array *json_scan_find(const json_scan *s, size_t member, size_t field);

/* ---- one safetensors header (header.c) ---- */

typedef struct st_header {
    uint64_t header_len;     /* N */
    uint64_t data_len;       /* bytes after the header: file size - 8 - N */
    size_t ntensors;
    feather_tensor *tensors; /* sorted by (begin, end), ties in header order; shard = 0 */
    size_t nmeta;
    const char **meta_key, **meta_value; /* header order */
    uint64_t *hashes;        /* recorded XXH3 per tensor, NULL without FEATHER_HASH_KEY */
    uint64_t *dims;          /* storage of every shape */
    char *strings;           /* storage of names, metadata keys and values */
} st_header;

/* Validates the header in buf (the file's first len bytes, len >= 8 + N) of a file of file_size
 * bytes, and fills h (st_header_free, also after failure). */
feather_status st_header_parse(st_header *h, const uint8_t *buf, size_t len, uint64_t file_size,
                               const char *name, feather_error *err);
/* Same on the header alone, before the file size is known: everything is checked except that
 * the data ends the file; h->data_len is set to the length the tensors declare. */
feather_status st_header_parse_prefix(st_header *h, const uint8_t *buf, size_t len,
                                      const char *name, feather_error *err);
void st_header_free(st_header *h);
/* Rejects duplicate keys in a cJSON object (cJSON keeps them all): "NAME: WHAT'key' appears
 * twice ...". */
struct cJSON;
feather_status st_check_unique(const struct cJSON *obj, const char *name, const char *what,
                               feather_error *err);
/* Checks the 8-byte length field: N is returned in *n when it is within the limit and the file.
 * buf holds min(len, 8) bytes at least. */
feather_status st_header_len(const uint8_t *buf, size_t len, uint64_t file_size, const char *name,
                             uint64_t *n, feather_error *err);
/* ---- recorded hashes (hash_record.c) ---- */

/* Reads FEATHER_HASH_KEY from h's metadata, if present, into h->hashes: a JSON object mapping
 * every tensor of the file, and nothing else, to 16 lowercase hex digits. */
feather_status st_hashes_parse(st_header *h, const char *name, feather_error *err);

/* ---- .zst input (zst_input.c) ---- */

/* Decompresses the zstd file at path with fixed-size buffers. *head receives the 8 length bytes
 * and the header (fewer if the stream is shorter; *head_len), *total the decompressed size. The
 * header is validated as soon as it is complete (st_header_parse_prefix), so a bad one stops
 * decompression at once. With fd not NULL, the decompressed bytes are also written to an
 * unlinked temporary file (in $TMPDIR or /tmp), but never more than the header declares: bytes
 * past that are only counted, so a lying stream cannot fill the disk. */
feather_status zst_decompress(const char *path, int *fd, uint8_t **head, size_t *head_len,
                              uint64_t *total, feather_error *err);

/* ---- sharded models (shards.c) ---- */

typedef struct st_index_entry {
    const char *tensor;
    unsigned shard;
} st_index_entry;

typedef struct st_index {
    unsigned nshards;
    char **shard_paths;         /* joined with the index's directory, sorted */
    size_t nentries;
    st_index_entry *entries;    /* sorted by tensor name */
    char *strings;
} st_index;

/* What a directory holds: the path of its one *.safetensors.index.json or, failing that, of its
 * one *.safetensors (or .safetensors.zst) file. */
feather_status st_dir_model(const char *dir, char **model_path, feather_error *err);
int st_is_index_path(const char *path);
feather_status st_index_load(st_index *ix, const char *path, feather_error *err);
void st_index_free(st_index *ix);
/* The entry of tensor name, or NULL. */
const st_index_entry *st_index_find(const st_index *ix, const char *name);

/* ---- reader over memory (reader.c), for the fuzzer ---- */

/* Opens a whole safetensors file held in buf (not copied; must outlive the reader). */
feather_status st_open_memory(feather_reader **out, const void *buf, size_t len, const char *name,
                              unsigned flags, feather_error *err);

#endif
