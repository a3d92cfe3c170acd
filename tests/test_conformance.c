/*
 * Conformance of the header validation: one malformed (or edge-case valid) file per rule, built
 * byte by byte. Each case goes through feather_check_header, feather_open and a header-only
 * feather_open; all three must agree on the status and the message. The cases follow the
 * reference's own tests (huggingface/safetensors tensor.rs and the Python binding's tests) and
 * the rules of the format; the strict-JSON ones cover what cJSON alone would accept.
 */
#include "test.h"
#include "st_build.h"
#include "feather/feather.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

typedef struct ccase {
    const char *name;
    const char *hdr;
    size_t hlen;
    size_t data;        /* data bytes after the header */
    int lie;            /* write n instead of hlen as the length field */
    uint64_t n;
    feather_status want;
    const char *msg;    /* substring of the message; for valid files NULL */
    size_t ntensors;    /* valid files: tensors expected */
} ccase;

#define H(s) s, sizeof(s) - 1
#define BAD(m) .want = FEATHER_E_INVALID, .msg = m
#define OK(n) .want = FEATHER_OK, .ntensors = n
#define F32x4(name, b, e) "\"" name "\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[" #b "," #e "]}"
#define I32(shape, offs) "{\"test\":{\"dtype\":\"I32\",\"shape\":" shape ",\"data_offsets\":" offs "}}"
#define ENTRY(dtype, shape, offs) "{\"t\":{\"dtype\":" dtype ",\"shape\":" shape ",\"data_offsets\":" offs "}}"
#define WITH_META(meta) "{\"__metadata__\":" meta "," F32x4("a", 0, 16) "}"
#define WITH_FIELD(f) "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]," f "}}"
#define HASHES(rec) "{\"__metadata__\":{\"feather.xxh3\":\"" rec "\"}," F32x4("a", 0, 16) "," F32x4("b", 16, 32) "}"

static const ccase cases[] = {
    /* ---- length field and limits ---- */
    {"header_length_only", H(""), .lie = 1, .n = 60, BAD("runs past the end of the file")},
    {"header_too_large", H("{" F32x4("a", 0, 16) "}"), 16, 1, 0xffffff000000003cull, BAD("exceeds the limit")},
    {"header_limit_plus_one", H("{}"), .lie = 1, .n = 100000001, BAD("exceeds the limit of 100000000")},
    {"header_huge_small_file", H("{}"), 90, 1, 0xffffffff00000000ull, BAD("exceeds the limit")},
    {"header_truncated_half", H("{" F32x4("a", 0, 16)), .lie = 1, .n = 2 * (sizeof("{" F32x4("a", 0, 16)) - 1), BAD("runs past the end")},
    /* ---- UTF-8 ---- */
    {"utf8_invalid_byte", H("\xff"), BAD("not valid UTF-8")},
    {"utf8_overlong", H("{\"\xc0\xaf\":1}"), BAD("not valid UTF-8")},
    {"utf8_surrogate", H("{\"\xed\xa0\x80\":1}"), BAD("not valid UTF-8")},
    {"utf8_cut_sequence", H("{\"\xe2\x82\":1}"), BAD("not valid UTF-8")},
    {"utf8_above_max", H("{\"\xf4\x90\x80\x80\":1}"), BAD("not valid UTF-8")},
    {"utf8_valid_name", H("{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}"), 1, OK(1)},
    /* ---- JSON text ---- */
    {"json_unterminated", H("{"), BAD("not valid JSON")},
    {"json_empty_header", H(""), BAD("not valid JSON")},
    {"json_whitespace_only", H("   "), BAD("not valid JSON")},
    {"json_trailing_ws", H("{}\r \t\n"), OK(0)},
    {"json_leading_ws", H("\t\n{}\r "), OK(0)},
    {"json_nul_padding", H("{}\0\0\0\0\0\0"), BAD("byte 0x00 after the JSON value")},
    {"json_formfeed_padding", H("{}\f"), BAD("byte 0x0c after the JSON value")},
    {"json_nbsp_padding", H("{}\xc2\xa0"), BAD("byte 0xc2 after the JSON value")},
    {"json_bom", H("\xef\xbb\xbf{}"), BAD("byte order mark")},
    {"json_control_between_tokens", H("{\x01}"), BAD("byte 0x01 where")},
    {"json_nul_leading", H("\0{}"), BAD("byte 0x00 where a value was expected")},
    {"json_raw_tab_in_string", H("{\"a\tb\":1}"), BAD("control byte 0x09 inside a string")},
    {"json_raw_newline_in_string", H("{\"__metadata__\":{\"k\":\"a\nb\"}}"), BAD("control byte 0x0a inside a string")},
    {"json_root_array", H("[]"), BAD("header is an array, not a JSON object")},
    {"json_root_string", H("\"x\""), BAD("not a JSON object")},
    {"json_trailing_comma", H("{\"__metadata__\":{},}"), BAD("not valid JSON")},
    {"json_single_quotes", H("{'a':1}"), BAD("not valid JSON")},
    {"json_comment", H("{}//"), BAD("byte 0x2f after the JSON value")},
    {"json_two_values", H("{}{}"), BAD("after the JSON value")},
    {"json_missing_colon", H("{\"a\" 1}"), BAD("where ':' was expected")},
    {"json_bad_literal", H("{\"__metadata__\":nul}"), BAD("not valid JSON")},
    {"json_capital_literal", H("{\"__metadata__\":Null}"), BAD("not valid JSON")},
    {"json_invalid_escape", H("{\"a\\x41\":1}"), BAD("invalid escape")},
    {"json_short_unicode_escape", H("{\"a\\u12\":1}"), BAD("invalid \\u escape")},
    {"json_nul_escape_in_name", H("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}"), 1, BAD("\\u0000 escape")},
    {"json_nul_escape_in_metadata", H(WITH_META("{\"k\":\"x\\u0000\"}")), 16, BAD("\\u0000 escape")},
    {"json_lone_high_surrogate", H("{\"\\ud800\":1}"), BAD("lone high surrogate")},
    {"json_high_surrogate_then_other", H("{\"\\ud800\\u0041\":1}"), BAD("lone high surrogate")},
    {"json_lone_low_surrogate", H("{\"\\udc00\":1}"), BAD("lone low surrogate")},
    {"json_surrogate_pair", H("{\"\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}"), 1, OK(1)},
    {"json_escapes_in_name", H("{\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}"), 1, OK(1)},
    {"json_deep_nesting_ignored_field", H(WITH_FIELD("\"x\":"
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
        "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]")),
        1, BAD("nesting deeper than 128 levels")},
    {"json_nesting_ignored_field_ok", H(WITH_FIELD("\"x\":[[[[[[[[[[{\"y\":[[[[[1.5e-3]]]]]}]]]]]]]]]]")), 1, OK(1)},
    {"json_long_number_ignored", H(WITH_FIELD("\"x\":1234567890123456789012345678901234567890123456789012345678901234567890")), 1, BAD("longer than 63 characters")},
    {"json_number_leading_zero_ignored", H(WITH_FIELD("\"x\":01")), 1, BAD("leading zero")},
    {"json_number_dot_end", H(WITH_FIELD("\"x\":1.")), 1, BAD("invalid number")},
    {"json_number_minus_dot", H(WITH_FIELD("\"x\":-.5")), 1, BAD("invalid number")},
    {"json_number_plus", H(WITH_FIELD("\"x\":+1")), 1, BAD("'+' where a value was expected")},
    {"json_number_dot_start", H(WITH_FIELD("\"x\":.5")), 1, BAD("not valid JSON")},
    {"json_number_bare_exponent", H(WITH_FIELD("\"x\":1e")), 1, BAD("invalid number")},
    {"json_number_hex", H(WITH_FIELD("\"x\":0x10")), 1, BAD("not valid JSON")},
    {"json_number_huge_exponent_ignored", H(WITH_FIELD("\"x\":1e400,\"y\":-1E-400")), 1, OK(1)},
    /* ---- schema ---- */
    {"entry_number", H("{\"a\":5}"), BAD("tensor 'a': entry must be an object")},
    {"entry_array", H("{\"a\":[]}"), BAD("tensor 'a': entry must be an object")},
    {"missing_dtype", H("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}"), 1, BAD("tensor 'a': missing field 'dtype'")},
    {"missing_shape", H("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}"), 1, BAD("tensor 'a': missing field 'shape'")},
    {"missing_offsets", H("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}"), 1, BAD("tensor 'a': missing field 'data_offsets'")},
    {"field_names_case_sensitive", H("{\"a\":{\"DType\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}"), 1, BAD("missing field 'dtype'")},
    {"metadata_key_case_sensitive", H("{\"__METADATA__\":{\"k\":\"v\"}}"), BAD("tensor '__METADATA__': missing field 'dtype'")},
    {"unknown_fields_ignored", H(WITH_FIELD("\"x\":[1.5,-2,{\"k\":null}],\"y\":\"s\",\"z\":true")), 1, OK(1)},
    {"dtype_map_form", H(ENTRY("{\"F32\":null}", "[1]", "[0,4]")), 4, BAD("dtype must be a string, not an object")},
    {"dtype_number", H(ENTRY("5", "[1]", "[0,4]")), 4, BAD("dtype must be a string, not a number")},
    {"dtype_unknown_I4", H(ENTRY("\"I4\"", "[2]", "[0,1]")), 1, BAD("unknown dtype 'I4'")},
    {"dtype_torch_spelling", H(ENTRY("\"F8_E4M3FN\"", "[1]", "[0,1]")), 1, BAD("unknown dtype 'F8_E4M3FN'")},
    {"dtype_lowercase", H(ENTRY("\"f32\"", "[1]", "[0,4]")), 4, BAD("unknown dtype 'f32'")},
    {"dtype_leading_space", H(ENTRY("\" I32\"", "[1]", "[0,4]")), 4, BAD("unknown dtype ' I32'")},
    {"dtype_C128", H(ENTRY("\"C128\"", "[1]", "[0,16]")), 16, BAD("unknown dtype 'C128'")},
    /* ---- shape and data_offsets are JSON integers ---- */
    {"shape_float", H(ENTRY("\"U8\"", "[2.0]", "[0,2]")), 2, BAD("shape[0] = 2.0 is not a non-negative integer")},
    {"shape_exponent", H(ENTRY("\"U8\"", "[1,2e0]", "[0,2]")), 2, BAD("shape[1] = 2e0 is not a non-negative integer")},
    {"shape_negative_zero", H(ENTRY("\"U8\"", "[-0]", "[0,0]")), BAD("shape[0] = -0 is not a non-negative integer")},
    {"shape_negative", H(ENTRY("\"U8\"", "[-1]", "[0,0]")), BAD("shape[0] = -1 is not")},
    {"shape_leading_zero", H(ENTRY("\"U8\"", "[02]", "[0,2]")), 2, BAD("leading zero")},
    {"shape_2_to_64", H(ENTRY("\"U8\"", "[18446744073709551616,0]", "[0,0]")), BAD("shape[0] = 18446744073709551616 exceeds 2^64-1")},
    {"shape_string", H(ENTRY("\"U8\"", "[\"2\"]", "[0,2]")), 2, BAD("shape[0] is not an integer")},
    {"shape_nested", H(ENTRY("\"U8\"", "[[2]]", "[0,2]")), 2, BAD("shape[0] is not an integer")},
    {"shape_bool", H(ENTRY("\"U8\"", "[true]", "[0,1]")), 1, BAD("shape[0] is not an integer")},
    {"shape_not_array", H(ENTRY("\"U8\"", "\"2\"", "[0,2]")), 2, BAD("shape must be an array of integers, not a string")},
    {"shape_null", H(ENTRY("\"U8\"", "null", "[0,2]")), 2, BAD("shape must be an array of integers, not null")},
    {"offsets_float", H(ENTRY("\"U8\"", "[2]", "[0.0,2]")), 2, BAD("data_offsets[0] = 0.0 is not a non-negative integer")},
    {"offsets_exponent", H(ENTRY("\"U8\"", "[2]", "[0,2E0]")), 2, BAD("data_offsets[1] = 2E0 is not")},
    {"offsets_negative", H(ENTRY("\"U8\"", "[2]", "[-2,0]")), 2, BAD("data_offsets[0] = -2 is not")},
    {"offsets_negative_zero", H(ENTRY("\"U8\"", "[2]", "[-0,2]")), 2, BAD("data_offsets[0] = -0 is not")},
    {"offsets_leading_zero", H(ENTRY("\"U8\"", "[2]", "[00,2]")), 2, BAD("leading zero")},
    {"offsets_2_to_64", H(ENTRY("\"U8\"", "[2]", "[0,18446744073709551616]")), 2, BAD("data_offsets[1] = 18446744073709551616 exceeds 2^64-1")},
    {"offsets_three", H(ENTRY("\"U8\"", "[2]", "[0,2,4]")), 2, BAD("data_offsets must hold two integers [begin, end], not 3")},
    {"offsets_one", H(ENTRY("\"U8\"", "[2]", "[0]")), 2, BAD("data_offsets must hold two integers [begin, end], not 1")},
    {"offsets_object", H(ENTRY("\"U8\"", "[2]", "{\"begin\":0}")), 2, BAD("data_offsets must be an array of integers, not an object")},
    /* ---- layout ---- */
    {"scalar_shape", H(I32("[]", "[0,4]")), 4, OK(1)},
    {"zero_sized", H(I32("[2,0]", "[0, 0]")), OK(1)},
    {"zero_sized_several_same_offset",
     H("{" F32x4("a", 0, 16) ",\"z1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]},"
       "\"z2\":{\"dtype\":\"BF16\",\"shape\":[4,0,3],\"data_offsets\":[16,16]}}"), 16, OK(3)},
    {"zero_sized_at_zero_with_normal",
     H("{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}," F32x4("a", 0, 16) "}"), 16, OK(2)},
    {"zero_sized_past_end",
     H("{" F32x4("a", 0, 16) ",\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[20,20]}}"), 16, BAD("tensor 'z': data_offsets [20, 20] leave a gap")},
    {"invalid_info", H(I32("[2,2]", "[0, 4]")), BAD("tensor 'test': data_offsets [0, 4] hold 4 bytes but I32 [2, 2] needs 16")},
    {"overflow_elements", H(I32("[2,18446744073709551614]", "[0,0]")), BAD("shape [2, 18446744073709551614] has more than 2^64-1 elements")},
    {"overflow_bits", H(I32("[2,9223372036854775807]", "[0,0]")), BAD("I32 [2, 9223372036854775807] is more than 2^64-1 bits")},
    {"overflow_before_zero", H(I32("[18446744073709551615,2,0]", "[0,0]")), BAD("more than 2^64-1 elements")},
    {"max_dim_times_zero", H(I32("[18446744073709551615,0]", "[0,0]")), OK(1)},
    {"offsets_end_max", H(ENTRY("\"U8\"", "[2]", "[0,18446744073709551615]")), 2, BAD("hold 18446744073709551615 bytes but U8 [2] needs 2")},
    {"polyglot_trailing_bytes", H(I32("[2,2]", "[0,16]")), 16 + 34, BAD("34 bytes after the end of the last tensor's data")},
    {"empty_dict_with_data", H("{}"), 4, BAD("4 bytes after the end")},
    {"data_two_bytes_short", H(I32("[2,2]", "[0,16]")), 14, BAD("data is truncated: the tensors need 16 bytes after the header but the file holds 14")},
    {"data_offset_liar", H("{\"liar\":{\"dtype\":\"F32\",\"shape\":[1024,1024],\"data_offsets\":[0,4194304]}}"), 1, BAD("data is truncated")},
    {"json_attack_same_offsets",
     H("{" F32x4("k0", 0, 16) "," F32x4("k1", 0, 16) "," F32x4("k2", 0, 16) "," F32x4("k3", 0, 16) ","
       F32x4("k4", 0, 16) "," F32x4("k5", 0, 16) "," F32x4("k6", 0, 16) "," F32x4("k7", 0, 16) ","
       F32x4("k8", 0, 16) "," F32x4("k9", 0, 16) "}"), 16, BAD("data_offsets [0, 16] overlap other data")},
    {"first_not_at_zero", H("{" F32x4("a", 4, 20) "}"), 20, BAD("tensor 'a': data_offsets [4, 20] leave a gap: this tensor should start at 0")},
    {"hole_between", H("{" F32x4("a", 0, 16) "," F32x4("b", 20, 36) "}"), 36, BAD("tensor 'b': data_offsets [20, 36] leave a gap")},
    {"overlap", H("{" F32x4("a", 0, 16) "," F32x4("b", 8, 24) "}"), 24, BAD("tensor 'b': data_offsets [8, 24] overlap")},
    {"reversed", H(ENTRY("\"U8\"", "[2]", "[2,0]")), 2, BAD("data_offsets [2, 0] end before they begin")},
    {"key_order_irrelevant", H("{" F32x4("b", 16, 32) "," F32x4("a", 0, 16) "}"), 32, OK(2)},
    {"f4_misaligned", H(ENTRY("\"F4\"", "[1,3]", "[0,2]")), 2, BAD("F4 [1, 3] is 12 bits, not a whole number of bytes")},
    {"f6_misaligned", H(ENTRY("\"F6_E2M3\"", "[3]", "[0,3]")), 3, BAD("F6_E2M3 [3] is 18 bits")},
    {"f4_packed_ok", H(ENTRY("\"F4\"", "[1,2]", "[0,1]")), 1, OK(1)},
    {"f6_packed_ok", H(ENTRY("\"F6_E3M2\"", "[4]", "[0,3]")), 3, OK(1)},
    /* ---- duplicate keys (stricter than the reference, on purpose) ---- */
    {"dup_tensor_same_offsets", H("{" F32x4("a", 0, 16) "," F32x4("a", 0, 16) "}"), 16, BAD("key 'a' appears twice")},
    {"dup_tensor_escaped", H("{" F32x4("a", 0, 16) "," F32x4("\\u0061", 16, 32) "}"), 32, BAD("key 'a' appears twice")},
    {"dup_metadata", H("{\"__metadata__\":{},\"__metadata__\":null}"), BAD("key '__metadata__' appears twice")},
    {"dup_field_dtype", H("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}"), 1, BAD("tensor 'a': field 'dtype' appears twice")},
    {"dup_field_shape", H("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,1]}}"), 1, BAD("field 'shape' appears twice")},
    {"dup_field_offsets", H("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"data_offsets\":[0,1]}}"), 1, BAD("field 'data_offsets' appears twice")},
    {"dup_unknown_field", H(WITH_FIELD("\"x\":1,\"x\":2")), 1, BAD("field 'x' appears twice")},
    {"dup_metadata_key", H(WITH_META("{\"k\":\"1\",\"k\":\"2\"}")), 16, BAD("__metadata__: key 'k' appears twice")},
    /* ---- __metadata__ ---- */
    {"metadata_number_value", H(WITH_META("{\"k\":1}")), 16, BAD("__metadata__ 'k': value is not a string")},
    {"metadata_object_value", H(WITH_META("{\"k\":{}}")), 16, BAD("__metadata__ 'k': value is not a string")},
    {"metadata_null_value", H(WITH_META("{\"k\":null}")), 16, BAD("__metadata__ 'k': value is not a string")},
    {"metadata_array", H(WITH_META("[]")), 16, BAD("__metadata__ must be an object of strings or null")},
    {"metadata_string", H(WITH_META("\"x\"")), 16, BAD("__metadata__ must be an object of strings or null")},
    {"metadata_null", H(WITH_META("null")), 16, OK(1)},
    {"metadata_empty", H(WITH_META("{}")), 16, OK(1)},
    {"metadata_only", H("{\"__metadata__\":{\"format\":\"pt\"}}"), OK(0)},
    /* ---- recorded hashes (feather.xxh3) are validated at open ---- */
    {"hash_record_not_json", H(HASHES("{")), 32, BAD("metadata 'feather.xxh3' is not valid JSON")},
    {"hash_record_array", H(HASHES("[]")), 32, BAD("metadata 'feather.xxh3' is not a JSON object of tensor hashes")},
    {"hash_record_uppercase", H(HASHES("{\\\"a\\\":\\\"0123456789ABCDEF\\\",\\\"b\\\":\\\"0123456789abcdef\\\"}")), 32, BAD("the hash of 'a' is not 16 lowercase hex digits")},
    {"hash_record_short", H(HASHES("{\\\"a\\\":\\\"0123456789abcde\\\",\\\"b\\\":\\\"0123456789abcdef\\\"}")), 32, BAD("the hash of 'a' is not 16 lowercase hex digits")},
    {"hash_record_number", H(HASHES("{\\\"a\\\":1,\\\"b\\\":\\\"0123456789abcdef\\\"}")), 32, BAD("the hash of 'a' is not 16")},
    {"hash_record_unknown_tensor", H(HASHES("{\\\"a\\\":\\\"0123456789abcdef\\\",\\\"b\\\":\\\"0123456789abcdef\\\",\\\"c\\\":\\\"0123456789abcdef\\\"}")), 32, BAD("lists 'c', which is not a tensor of this file")},
    {"hash_record_missing_tensor", H(HASHES("{\\\"a\\\":\\\"0123456789abcdef\\\"}")), 32, BAD("tensor 'b': no hash in metadata 'feather.xxh3'")},
    {"hash_record_twice", H(HASHES("{\\\"a\\\":\\\"0123456789abcdef\\\",\\\"a\\\":\\\"0123456789abcdef\\\",\\\"b\\\":\\\"0123456789abcdef\\\"}")), 32, BAD("lists 'a' twice")},
    {"hash_record_nul_escape", H(HASHES("{\\\"a\\\\u0000\\\":\\\"0123456789abcdef\\\"}")), 32, BAD("\\u0000 escape")},
    {"hash_record_well_formed", H(HASHES("{\\\"b\\\":\\\"0123456789abcdef\\\",\\\"a\\\":\\\"fedcba9876543210\\\"}")), 32, OK(2)},
};

static int one_line(const char *s) { return !strchr(s, '\n') && !strchr(s, '\r'); }

/* Runs a case through one path and checks status and message. */
static void expect(const ccase *c, const char *how, feather_status st, const feather_error *e,
                   const char *name) {
    if (st != c->want) {
        test_fail(__FILE__, __LINE__, "%s (%s): status %s, expected %s: %s", c->name, how,
                  feather_status_name(st), feather_status_name(c->want), st ? e->message : "");
        return;
    }
    if (st == FEATHER_OK) return;
    if (!strstr(e->message, c->msg))
        test_fail(__FILE__, __LINE__, "%s (%s): message '%s' lacks '%s'", c->name, how, e->message,
                  c->msg);
    if (strncmp(e->message, name, strlen(name)) || !one_line(e->message))
        test_fail(__FILE__, __LINE__, "%s (%s): message '%s' does not start with '%s' on one line",
                  c->name, how, e->message, name);
}

static void run_case(const ccase *c) {
    stb_buf b = stb_raw(c->lie ? c->n : c->hlen, c->hdr, c->hlen, c->data);
    feather_error e = {0};
    stb_corpus(c->name, &b);
    expect(c, "check_header", feather_check_header(b.p, b.len, b.len, c->name, &e), &e, c->name);

    char file[256];
    snprintf(file, sizeof file, "%s.safetensors", c->name);
    const char *path = test_path(file);
    if (stb_write(path, b.p, b.len)) {
        test_fail(__FILE__, __LINE__, "cannot write %s", path);
        stb_free(&b);
        return;
    }
    static const unsigned flags[] = {0, FEATHER_OPEN_HEADER_ONLY};
    for (int f = 0; f < 2; f++) {
        feather_reader *r = NULL;
        memset(&e, 0, sizeof e);
        feather_status st = feather_open(&r, path, flags[f], &e);
        expect(c, f ? "open header-only" : "open", st, &e, path);
        if (!st) {
            CHECK_EQ_U(feather_count(r), c->ntensors);
            CHECK_EQ_U(feather_shard_header_len(r, 0), c->hlen);
        }
        CHECK(!st == !!r);
        feather_close(r);
    }
    stb_free(&b);
}

TEST(conformance_table) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
}

TEST(conformance_file_shorter_than_length_field) {
    static const uint8_t bytes[5] = {1, 0, 0, 0, 0};
    for (size_t n = 0; n <= 5; n += 5) {
        feather_error e = {0};
        CHECK(feather_check_header(bytes, n, n, "short", &e) == FEATHER_E_INVALID);
        CHECK_STR_CONTAINS(e.message, "too short to hold the 8-byte header length");
        const char *path = test_path("short.safetensors");
        REQUIRE(stb_write(path, bytes, n) == 0);
        for (unsigned f = 0; f <= FEATHER_OPEN_HEADER_ONLY; f += FEATHER_OPEN_HEADER_ONLY) {
            feather_reader *r = NULL;
            CHECK(feather_open(&r, path, f, &e) == FEATHER_E_INVALID);
            CHECK_STR_CONTAINS(e.message, "too short");
            CHECK(r == NULL);
        }
    }
}

/* Every dtype of the reference is accepted with its bit width; sizes follow nelem * bits / 8. */
TEST(conformance_every_dtype) {
    for (int d = 0; d < FEATHER_DTYPE_COUNT; d++) {
        const char *name = feather_dtype_name((feather_dtype)d);
        unsigned bits = feather_dtype_bits((feather_dtype)d);
        uint64_t n = 8; /* 8 elements: a whole number of bytes for every width */
        char hdr[256];
        int len = snprintf(hdr, sizeof hdr,
                           "{\"t\":{\"dtype\":\"%s\",\"shape\":[2,4],\"data_offsets\":[0,%llu]}}",
                           name, (unsigned long long)(n * bits / 8));
        stb_buf b = stb_file(hdr, (size_t)len, n * bits / 8);
        feather_error e = {0};
        CHECK(feather_check_header(b.p, b.len, b.len, name, &e) == FEATHER_OK);
        /* One byte less is refused. */
        stb_buf s = stb_file(hdr, (size_t)len, n * bits / 8 - 1);
        CHECK(feather_check_header(s.p, s.len, s.len, name, &e) == FEATHER_E_INVALID);
        stb_free(&b);
        stb_free(&s);
    }
}

/* Integers above 2^53 are read exactly, not through a double. */
TEST(conformance_large_integers_exact) {
    static const char hdr[] = "{\"t\":{\"dtype\":\"U8\",\"shape\":[9007199254740993,0,"
                              "18446744073709551615],\"data_offsets\":[0,0]}}";
    stb_buf b = stb_file(hdr, sizeof hdr - 1, 0);
    const char *path = test_path("big.safetensors");
    REQUIRE(stb_write(path, b.p, b.len) == 0);
    feather_reader *r = NULL;
    feather_error e = {0};
    REQUIRE(feather_open(&r, path, 0, &e) == FEATHER_OK);
    const feather_tensor *t = feather_tensor_at(r, 0);
    REQUIRE(t && t->ndim == 3);
    CHECK(t->shape[0] == 9007199254740993ull);
    CHECK(t->shape[2] == UINT64_MAX);
    CHECK_EQ_U(t->nelem, 0);
    feather_close(r);
    stb_free(&b);
}

/* N == 100,000,000 passes the limit (the JSON is what fails), N + 1 does not. Sparse files. */
TEST(conformance_header_limit_boundary) {
    for (uint64_t n = FEATHER_MAX_HEADER; n <= FEATHER_MAX_HEADER + 1; n++) {
        const char *path = test_path("limit.safetensors");
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        REQUIRE(fd >= 0);
        uint8_t head[10];
        for (int i = 0; i < 8; i++) head[i] = (uint8_t)(n >> (8 * i));
        head[8] = '{';
        head[9] = '}';
        CHECK(write(fd, head, 10) == 10);
        CHECK(ftruncate(fd, (off_t)(8 + n)) == 0);
        close(fd);
        for (unsigned f = 0; f <= FEATHER_OPEN_HEADER_ONLY; f += FEATHER_OPEN_HEADER_ONLY) {
            feather_reader *r = NULL;
            feather_error e = {0};
            CHECK(feather_open(&r, path, f, &e) == FEATHER_E_INVALID);
            CHECK_STR_CONTAINS(e.message, n == FEATHER_MAX_HEADER ? "byte 0x00 after the JSON value"
                                                                   : "exceeds the limit");
        }
    }
}

/* A buffer holding less than the header is the caller's mistake, not an invalid file. */
TEST(conformance_check_header_short_buffer) {
    static const char hdr[] = "{\"__metadata__\":null}";
    stb_buf b = stb_file(hdr, sizeof hdr - 1, 0);
    feather_error e = {0};
    CHECK(feather_check_header(b.p, b.len - 1, b.len, "x", &e) == FEATHER_E_ARG);
    CHECK(feather_check_header(b.p, 4, b.len, "x", &e) == FEATHER_E_ARG);
    CHECK(feather_check_header(b.p, b.len, b.len, "x", &e) == FEATHER_OK);
    stb_free(&b);
}
