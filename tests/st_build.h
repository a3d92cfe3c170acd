/* Builds safetensors files byte by byte for the reader's tests, independently of the library's
 * writer, so that malformed files can be made as easily as valid ones. */
#ifndef FEATHER_TEST_ST_BUILD_H
#define FEATHER_TEST_ST_BUILD_H

#include <stddef.h>
#include <stdint.h>

typedef struct stb_buf {
    uint8_t *p;
    size_t len;
} stb_buf;

/* 8-byte length field n, then hlen header bytes, then data_len data bytes (a fixed pattern). */
stb_buf stb_raw(uint64_t n, const char *hdr, size_t hlen, size_t data_len);
/* Same with the honest length field. */
stb_buf stb_file(const char *hdr, size_t hlen, size_t data_len);
void stb_free(stb_buf *b);
/* Writes bytes to path; 0 on success. */
int stb_write(const char *path, const void *p, size_t n);
/* Saves b as a fuzzing seed named name when FEATHER_CORPUS_OUT names a directory (how
 * tests/fuzz/corpus was made). */
void stb_corpus(const char *name, const stb_buf *b);
/* Reads a whole file (malloc'd); NULL on error. */
uint8_t *stb_read(const char *path, size_t *len);

/* A valid file from a list of tensors, laid out in list order, header padded with spaces to a
 * multiple of 8. Tensor data is a pattern seeded by 'seed'. meta: raw JSON members for
 * __metadata__ without braces (e.g. "\"k\":\"v\""), or NULL. hashes: add a correct
 * "feather.xxh3" record. */
typedef struct stb_tensor {
    const char *name;
    const char *dtype;
    unsigned ndim;
    uint64_t shape[4];
} stb_tensor;
stb_buf stb_model(const stb_tensor *t, size_t n, const char *meta, int hashes, unsigned seed);

#endif
