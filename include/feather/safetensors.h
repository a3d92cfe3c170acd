/*
 * Reading and writing safetensors files.
 *
 * Reader: validates exactly what the reference implementation (huggingface/safetensors)
 * validates, and a little more (see feather(5)): duplicate keys are rejected everywhere.
 * Tensor data is a zero-copy view into a read-only mapping of the file. A path ending in
 * ".zst" is stream-decompressed into an unlinked temporary file first (memory stays bounded),
 * then mapped. A "*.safetensors.index.json" or a directory is read as one set of tensors
 * across shards.
 *
 * Writer: streaming and crash-safe. Tensors are declared first (the header needs their
 * offsets), then their bytes are written in layout order as they are produced. The file is
 * built under a temporary name in the target directory, fsync'd and renamed at commit, so an
 * interrupt, kill -9 or full disk never leaves a partial file under the final name.
 */
#ifndef FEATHER_SAFETENSORS_H
#define FEATHER_SAFETENSORS_H

#include "feather/feather.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest header the reference accepts (decimal 100 MB). */
#define FEATHER_MAX_HEADER 100000000ull

/* Metadata key under which the writer records every tensor's XXH3-64 (a JSON object string
 * {"name":"16 hex digits",…}); the reader checks it when present. */
#define FEATHER_HASH_KEY "feather.xxh3"

typedef struct feather_tensor {
    const char *name;
    feather_dtype dtype;
    unsigned ndim;
    const uint64_t *shape;  /* ndim entries; ndim 0 = scalar */
    uint64_t nelem;         /* product of shape (1 for a scalar) */
    uint64_t nbytes;        /* end - begin */
    uint64_t begin, end;    /* data_offsets, relative to its shard's data section */
    unsigned shard;         /* index of the file holding it (0 for a single file) */
} feather_tensor;

typedef struct feather_reader feather_reader;

enum {
    FEATHER_OPEN_NO_HASH_CHECK = 1u << 0, /* do not check feather.xxh3 on tensor access */
    FEATHER_OPEN_HEADER_ONLY = 1u << 1    /* validate and list, never map the data (no .zst temp) */
};

/* Opens a .safetensors file, a .safetensors.zst file, a *.safetensors.index.json or a
 * directory holding one model. */
feather_status feather_open(feather_reader **out, const char *path, unsigned flags,
                            feather_error *err);
void feather_close(feather_reader *r);

/* The path given to feather_open. */
const char *feather_reader_path(const feather_reader *r);

/* Tensors, ordered by (shard, data offset). */
size_t feather_count(const feather_reader *r);
const feather_tensor *feather_tensor_at(const feather_reader *r, size_t i);
const feather_tensor *feather_find(const feather_reader *r, const char *name);

/* Zero-copy view of a tensor's bytes, valid until feather_close. Checks the tensor's recorded
 * XXH3 the first time it is accessed (unless FEATHER_OPEN_NO_HASH_CHECK). */
feather_status feather_tensor_data(feather_reader *r, const feather_tensor *t,
                                   const void **data, feather_error *err);

/* Paging hints for streaming a large model with bounded memory: prefetch asks the kernel to
 * read a tensor's pages ahead; release drops them from this process's mapping (the page cache
 * keeps them), so resident memory does not grow with the model. Both are advisory. */
void feather_tensor_prefetch(feather_reader *r, const feather_tensor *t);
void feather_tensor_release(feather_reader *r, const feather_tensor *t);

/* Shards: 1 for a single file. */
unsigned feather_shard_count(const feather_reader *r);
const char *feather_shard_path(const feather_reader *r, unsigned shard);
uint64_t feather_shard_header_len(const feather_reader *r, unsigned shard); /* N */
uint64_t feather_shard_file_size(const feather_reader *r, unsigned shard);  /* decompressed */
/* The shard's first 8 + N bytes (length field and header), e.g. to hash the file in order. */
const uint8_t *feather_shard_header_bytes(const feather_reader *r, unsigned shard);

/* __metadata__ of a shard, in file order. Count is 0 for null/absent metadata. */
size_t feather_metadata_count(const feather_reader *r, unsigned shard);
const char *feather_metadata_key(const feather_reader *r, unsigned shard, size_t i);
const char *feather_metadata_value(const feather_reader *r, unsigned shard, size_t i);
const char *feather_metadata_get(const feather_reader *r, unsigned shard, const char *key);

/* Recorded XXH3-64 of a tensor from FEATHER_HASH_KEY; returns 0 if none is recorded. */
int feather_recorded_hash(const feather_reader *r, const feather_tensor *t, uint64_t *hash);

/* Validates one header held in memory (the 8 length bytes onward) against a file of
 * file_size bytes without touching data; used by the fuzzer and by the reader itself.
 * 'name' is used in messages. */
feather_status feather_check_header(const uint8_t *buf, size_t len, uint64_t file_size,
                                    const char *name, feather_error *err);

/* XXH3-64 of a buffer (the hash the writer records). */
uint64_t feather_hash(const void *data, size_t len);

/* ---- writer ---- */
typedef struct feather_writer feather_writer;

typedef struct feather_write_options {
    int zstd_level;          /* when the path ends in ".zst"; 0 = default (3) */
    int zstd_threads;        /* zstd worker threads; 0 = single-threaded */
    int overwrite;           /* replace an existing file at the final path */
    int no_hashes;           /* do not record FEATHER_HASH_KEY */
    const char *const *inputs; /* files the output must not be (checked by device+inode) */
    size_t ninputs;
} feather_write_options;

/* opts may be NULL (defaults). Fails with FEATHER_E_EXISTS if path exists and !overwrite. */
feather_status feather_writer_open(feather_writer **out, const char *path,
                                   const feather_write_options *opts, feather_error *err);

/* Metadata entries; keys are unique; written sorted by key after __metadata__ opens. */
feather_status feather_writer_metadata(feather_writer *w, const char *key, const char *value,
                                       feather_error *err);

/* Reserves a metadata value of exactly len bytes whose content is only known at the end (a
 * hash of the input computed while converting). Filled with feather_writer_metadata_fill
 * before commit; the value must need no JSON escaping (e.g. hex digits). */
feather_status feather_writer_metadata_reserve(feather_writer *w, const char *key, size_t len,
                                               feather_error *err);
feather_status feather_writer_metadata_fill(feather_writer *w, const char *key, const char *value,
                                            feather_error *err);

/* Declares a tensor. All tensors are declared before feather_writer_begin; the file holds
 * them in declaration order (feather_writer_sort applies the reference writer's order). */
feather_status feather_writer_tensor(feather_writer *w, const char *name, feather_dtype dtype,
                                     unsigned ndim, const uint64_t *shape, feather_error *err);

/* Reorders the declared tensors the way the reference writer does (dtype descending, then
 * name), which keeps every tensor aligned to its element size. */
void feather_writer_sort(feather_writer *w);

/* Fixes offsets contiguously in layout order and writes the header. After this, data is
 * written in layout order. */
feather_status feather_writer_begin(feather_writer *w, feather_error *err);
size_t feather_writer_count(const feather_writer *w);
const char *feather_writer_name_at(const feather_writer *w, size_t i); /* layout order */
uint64_t feather_writer_nbytes_at(const feather_writer *w, size_t i);

/* Appends bytes; may span tensor boundaries. Writing more than declared is an error. */
feather_status feather_writer_write(feather_writer *w, const void *data, size_t len,
                                    feather_error *err);

/* Checks every byte was written, records hashes, fsyncs, renames into place, frees w. */
feather_status feather_writer_commit(feather_writer *w, feather_error *err);

/* Discards everything written (nothing is left under the final name) and frees w. */
void feather_writer_abort(feather_writer *w);

/* Writes len bytes as the whole of the file at path, with the writer's crash safety (built
 * under no name, fsync'd, then published), for the other files written beside checkpoints
 * (reports). opts as for feather_writer_open; only overwrite and inputs apply. */
feather_status feather_write_file(const char *path, const void *data, size_t len, const feather_write_options *opts,
                                  feather_error *err);

#ifdef __cplusplus
}
#endif
#endif
