/* The content hash: the wider XXH3 builds (src/hash_simd.h) give libxxhash's digests, one-shot
 * and streamed in uneven pieces, and leave no vector state behind; the shard hasher fed in
 * another order than the file's gives feather_shard_xxh3. */
#include "test.h"
#include "testutil.h"
#include "hash_simd.h"
#include "internal.h"

#include <stdlib.h>
#include <xxhash.h>

TEST(hash_wider_builds_give_libxxhash_digests) {
    const feather_simd top = feather_simd_cpu();
    if (top < FEATHER_SIMD_AVX2) {
        test_skip("*** this CPU has no AVX2: the wider XXH3 builds cannot run ***");
        return;
    }
    const size_t big = (1u << 20) + 77;
    uint8_t *buf = malloc(big);
    REQUIRE(buf);
    uint64_t s = 3;
    for (size_t i = 0; i < big; i++) buf[i] = (uint8_t)tu_rand(&s);
    feather_xxh3_impl impls[2];
    feather_xxh3_avx2(&impls[0]);
    if (top >= FEATHER_SIMD_AVX512) feather_xxh3_avx512(&impls[1]);
    for (int l = 0; l < (top >= FEATHER_SIMD_AVX512 ? 2 : 1); l++) {
        const feather_xxh3_impl *x = &impls[l];
        int wrong = 0;
        /* every length through the short-input paths and the first stripes, then long ones */
        for (size_t len = 0; len < 2100; len++) wrong += x->hash(buf + len % 7, len) != XXH3_64bits(buf + len % 7, len);
        const uint64_t h = x->hash(buf, big);
        /* the long-input path must leave the vector registers' upper halves clean */
        const int dirty = tu_vector_upper_in_use();
        wrong += h != XXH3_64bits(buf, big);
        CHECK(dirty != 1);
        void *st = x->stream_new();
        REQUIRE(st);
        for (size_t off = 0; off < big;) {
            size_t piece = (size_t)(tu_rand(&s) % 5000);
            if (piece > big - off) piece = big - off;
            x->stream_update(st, buf + off, piece);
            off += piece;
        }
        const uint64_t hs = x->stream_digest(st);
        CHECK(tu_vector_upper_in_use() != 1);
        wrong += hs != XXH3_64bits(buf, big);
        x->stream_free(st);
        CHECK_EQ_U(wrong, 0);
    }
    CHECK_EQ_U(feather_hash(buf, big), XXH3_64bits(buf, big));
    free(buf);
}

TEST(hash_shard_hasher_in_any_order_equals_the_file_hash) {
    const tspec t[] = {{"a", FEATHER_BF16, 2, {64, 48}}, {"b", FEATHER_F32, 1, {1000}},
                       {"c", FEATHER_F16, 2, {33, 7}},   {"d", FEATHER_BF16, 1, {5}}};
    const char *path = test_path("m.safetensors");
    REQUIRE(tu_write_model(path, t, 4, 9, NULL) == 0);
    feather_reader *r = NULL;
    feather_error err = {0};
    REQUIRE(feather_open(&r, path, 0, &err) == FEATHER_OK);
    uint64_t want = 0;
    REQUIRE(feather_shard_xxh3(r, 0, &want, &err) == FEATHER_OK);
    /* visit orders: file order, reversed, and one that meets two tensors in order late */
    const size_t orders[3][4] = {{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 1, 3}};
    for (int o = 0; o < 3; o++) {
        feather_shard_hasher h;
        REQUIRE(feather_shard_hasher_begin(&h, r, 0, &err) == FEATHER_OK);
        size_t fed = 0;
        for (int i = 0; i < 4; i++) {
            const feather_tensor *ti = feather_tensor_at(r, orders[o][i]);
            const void *d;
            REQUIRE(feather_tensor_data(r, ti, &d, &err) == FEATHER_OK);
            if (feather_shard_hasher_wants(&h, r, ti)) {
                feather_shard_hasher_feed(&h, r, d, ti->nbytes);
                fed++;
            }
        }
        CHECK_EQ_U(fed, o == 0 ? 4 : o == 1 ? 1 : 2);
        uint64_t got = 0;
        REQUIRE(feather_shard_hasher_finish(&h, r, &got, &err) == FEATHER_OK);
        CHECK_EQ_U(got, want);
    }
    feather_close(r);
}
