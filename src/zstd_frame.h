/* A zstd frame of raw (stored) blocks, built by hand (RFC 8878 §3.1.1): its size depends only
 * on its content length and every content byte sits at a known file offset, so the writer
 * can patch the header it holds after the fact. Private to the library. */
#ifndef FEATHER_ZSTD_FRAME_H
#define FEATHER_ZSTD_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FEATHER_ZSTD_FRAME_HEADER 13          /* magic, descriptor, 8-byte content size */
#define FEATHER_ZSTD_BLOCK_HEADER 3
#define FEATHER_ZSTD_RAW_BLOCK (128u * 1024u) /* Block_Maximum_Size */

/* Frame header for content_len bytes of content (content_len > 0). */
void feather_zstd_raw_frame_header(uint8_t out[FEATHER_ZSTD_FRAME_HEADER], uint64_t content_len);

/* Header of a raw block of size bytes (size <= FEATHER_ZSTD_RAW_BLOCK). */
void feather_zstd_raw_block_header(uint8_t out[FEATHER_ZSTD_BLOCK_HEADER], size_t size, int last);

/* Offset, from the start of the frame, of content byte 'content_offset'. */
uint64_t feather_zstd_raw_frame_pos(uint64_t content_offset);

/* Total frame size for content_len bytes. */
uint64_t feather_zstd_raw_frame_size(uint64_t content_len);

#endif
