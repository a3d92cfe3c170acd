/* Raw-block zstd frames (RFC 8878). The frame is single-segment with an 8-byte
 * Frame_Content_Size, so the decoder knows the exact size up front, and has no checksum, so
 * content patched after the frame was written stays valid. Content is cut into blocks of
 * FEATHER_ZSTD_RAW_BLOCK bytes, the last one possibly shorter. */
#include "zstd_frame.h"

void feather_zstd_raw_frame_header(uint8_t out[FEATHER_ZSTD_FRAME_HEADER], uint64_t content_len) {
    /* Magic_Number 0xFD2FB528, little-endian. */
    out[0] = 0x28;
    out[1] = 0xB5;
    out[2] = 0x2F;
    out[3] = 0xFD;
    /* Frame_Header_Descriptor: Frame_Content_Size_flag = 3 (8 bytes, bits 7-6),
     * Single_Segment_flag (bit 5); no checksum, no dictionary. No Window_Descriptor follows:
     * a single-segment frame's window is its content size. */
    out[4] = 0xE0;
    for (int i = 0; i < 8; i++) out[5 + i] = (uint8_t)(content_len >> (8 * i));
}

void feather_zstd_raw_block_header(uint8_t out[FEATHER_ZSTD_BLOCK_HEADER], size_t size, int last) {
    /* Last_Block (bit 0), Block_Type 0 = Raw (bits 1-2), Block_Size (bits 3-23). */
    uint32_t v = (last ? 1u : 0u) | ((uint32_t)size << 3);
    out[0] = (uint8_t)v;
    out[1] = (uint8_t)(v >> 8);
    out[2] = (uint8_t)(v >> 16);
}

uint64_t feather_zstd_raw_frame_pos(uint64_t content_offset) {
    uint64_t block = content_offset / FEATHER_ZSTD_RAW_BLOCK;
    return FEATHER_ZSTD_FRAME_HEADER + (block + 1) * FEATHER_ZSTD_BLOCK_HEADER + content_offset;
}

uint64_t feather_zstd_raw_frame_size(uint64_t content_len) {
    uint64_t blocks = (content_len + FEATHER_ZSTD_RAW_BLOCK - 1) / FEATHER_ZSTD_RAW_BLOCK;
    if (!blocks) blocks = 1;
    return FEATHER_ZSTD_FRAME_HEADER + blocks * FEATHER_ZSTD_BLOCK_HEADER + content_len;
}
