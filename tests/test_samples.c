/*
 * The sample checkpoints (feather-sample) and the batch script (samples/batch-convert.sh).
 *
 * Samples are read back with the library reader: each family must carry its real tensor
 * names and shapes (at width h = 96, so [out, in] shapes are not square and mlp/ctx/head
 * widths differ), its metadata, the requested dtype, weight-like values, and the same bytes
 * for the same seed however the model is laid out (one file, shards, zstd).
 */
#include "test.h"
#include "feather/feather.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* h = 96: mlp 384, ctx 192, heads of 48. */
#define H 96
#define MLP 384
#define CTX 192
#define HD 48

/* Runs feather-sample with ARGS (printf-style) and -o OUT; returns its exit status. */
static int sample(const char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sample(const char *out, const char *fmt, ...) {
    char args[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return test_run("'%s/feather-sample' -q %s -o '%s'", test_bindir(), args, out);
}

/* A path in the test's directory that stays valid (test_path's buffers are reused, also by
 * every test_run). */
#define PATH(var, name)                                                                    \
    char var[1024];                                                                        \
    snprintf(var, sizeof var, "%s/%s", test_tmpdir(), name)

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Reads a whole file; *len gets its size. */
static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static feather_reader *open_model(const char *path) {
    feather_reader *r = NULL;
    feather_error err = {0};
    if (feather_open(&r, path, 0, &err)) {
        test_fail(__FILE__, __LINE__, "cannot open %s: %s", path, err.message);
        return NULL;
    }
    return r;
}

static const void *data_of(feather_reader *r, const feather_tensor *t) {
    const void *d = NULL;
    feather_error err = {0};
    if (feather_tensor_data(r, t, &d, &err)) test_fail(__FILE__, __LINE__, "%s", err.message);
    return d;
}

/* ---- names and shapes of every family ---- */

typedef struct expect {
    const char *name;
    unsigned ndim;
    uint64_t shape[5];
} expect;

typedef struct family_case {
    const char *family;
    const char *architecture; /* modelspec.architecture, or NULL when real files carry none */
    const char *absent;       /* a name the family must not have (block 2, or another family's) */
    expect e[40];
} family_case;

#define P "model.diffusion_model."
#define TB P "input_blocks.1.1.transformer_blocks.0."

static const family_case families[] = {
    {"flux", "flux-1-dev", "double_blocks.2.img_attn.qkv.weight",
     {{"img_in.weight", 2, {H, 64}}, {"img_in.bias", 1, {H}}, {"txt_in.weight", 2, {H, CTX}},
      {"time_in.in_layer.weight", 2, {H, 256}}, {"time_in.out_layer.weight", 2, {H, H}},
      {"vector_in.in_layer.weight", 2, {H, CTX}}, {"guidance_in.out_layer.bias", 1, {H}},
      {"double_blocks.1.img_mod.lin.weight", 2, {6 * H, H}}, {"double_blocks.0.txt_mod.lin.bias", 1, {6 * H}},
      {"double_blocks.0.txt_attn.qkv.weight", 2, {3 * H, H}}, {"double_blocks.0.txt_attn.qkv.bias", 1, {3 * H}},
      {"double_blocks.1.img_attn.proj.weight", 2, {H, H}},
      {"double_blocks.0.img_attn.norm.query_norm.scale", 1, {HD}},
      {"double_blocks.1.txt_attn.norm.key_norm.scale", 1, {HD}},
      {"double_blocks.1.txt_mlp.0.weight", 2, {MLP, H}}, {"double_blocks.1.txt_mlp.2.weight", 2, {H, MLP}},
      {"single_blocks.1.linear1.weight", 2, {3 * H + MLP, H}}, {"single_blocks.0.linear2.weight", 2, {H, H + MLP}},
      {"single_blocks.0.modulation.lin.weight", 2, {3 * H, H}}, {"single_blocks.1.norm.key_norm.scale", 1, {HD}},
      {"final_layer.adaLN_modulation.1.weight", 2, {2 * H, H}}, {"final_layer.linear.weight", 2, {64, H}},
      {"final_layer.linear.bias", 1, {64}}}},
    {"flux2", NULL, "double_blocks.0.img_mod.lin.weight",
     {{"img_in.weight", 2, {H, 128}}, {"txt_in.weight", 2, {H, CTX}}, {"time_in.in_layer.weight", 2, {H, 256}},
      {"guidance_in.out_layer.weight", 2, {H, H}}, {"double_stream_modulation_img.lin.weight", 2, {6 * H, H}},
      {"double_stream_modulation_txt.lin.weight", 2, {6 * H, H}}, {"single_stream_modulation.lin.weight", 2, {3 * H, H}},
      {"double_blocks.1.img_attn.qkv.weight", 2, {3 * H, H}}, {"double_blocks.0.txt_attn.proj.weight", 2, {H, H}},
      {"double_blocks.1.txt_attn.norm.key_norm.scale", 1, {HD}},
      {"double_blocks.0.img_mlp.0.weight", 2, {6 * H, H}}, {"double_blocks.1.txt_mlp.2.weight", 2, {H, 3 * H}},
      {"single_blocks.1.linear1.weight", 2, {9 * H, H}}, {"single_blocks.0.linear2.weight", 2, {H, 4 * H}},
      {"single_blocks.0.norm.query_norm.scale", 1, {HD}},
      {"final_layer.adaLN_modulation.1.weight", 2, {2 * H, H}}, {"final_layer.linear.weight", 2, {128, H}}}},
    {"anima", NULL, "net.blocks.0.self_attn.q_proj.bias",
     {{"net.x_embedder.proj.1.weight", 2, {H, 68}}, {"net.t_embedder.1.linear_1.weight", 2, {H, H}},
      {"net.t_embedder.1.linear_2.weight", 2, {3 * H, H}}, {"net.t_embedding_norm.weight", 1, {H}},
      {"net.blocks.1.self_attn.q_proj.weight", 2, {H, H}}, {"net.blocks.0.self_attn.output_proj.weight", 2, {H, H}},
      {"net.blocks.0.cross_attn.k_proj.weight", 2, {H, CTX}}, {"net.blocks.1.cross_attn.v_proj.weight", 2, {H, CTX}},
      {"net.blocks.0.cross_attn.q_norm.weight", 1, {HD}}, {"net.blocks.1.mlp.layer1.weight", 2, {MLP, H}},
      {"net.blocks.0.mlp.layer2.weight", 2, {H, MLP}},
      {"net.blocks.0.adaln_modulation_self_attn.1.weight", 2, {256, H}},
      {"net.blocks.1.adaln_modulation_cross_attn.2.weight", 2, {3 * H, 256}},
      {"net.blocks.1.adaln_modulation_mlp.2.weight", 2, {3 * H, 256}},
      {"net.final_layer.adaln_modulation.2.weight", 2, {2 * H, 256}}, {"net.final_layer.linear.weight", 2, {64, H}},
      {"net.llm_adapter.embed.weight", 2, {8 * H, CTX}},
      {"net.llm_adapter.blocks.1.cross_attn.o_proj.weight", 2, {CTX, CTX}},
      {"net.llm_adapter.blocks.0.norm_mlp.weight", 1, {CTX}}, {"net.llm_adapter.blocks.0.mlp.0.bias", 1, {4 * CTX}},
      {"net.llm_adapter.out_proj.weight", 2, {CTX, CTX}}, {"net.llm_adapter.norm.weight", 1, {CTX}}}},
    {"qwen-image", NULL, "transformer_blocks.2.attn.to_q.weight",
     {{"img_in.weight", 2, {H, 64}}, {"txt_in.weight", 2, {H, CTX}}, {"txt_norm.weight", 1, {CTX}},
      {"time_text_embed.timestep_embedder.linear_1.weight", 2, {H, 256}},
      {"time_text_embed.timestep_embedder.linear_2.weight", 2, {H, H}},
      {"transformer_blocks.1.img_mod.1.weight", 2, {6 * H, H}}, {"transformer_blocks.0.txt_mod.1.bias", 1, {6 * H}},
      {"transformer_blocks.0.attn.to_q.weight", 2, {H, H}}, {"transformer_blocks.1.attn.to_v.bias", 1, {H}},
      {"transformer_blocks.0.attn.add_k_proj.weight", 2, {H, H}},
      {"transformer_blocks.0.attn.to_out.0.weight", 2, {H, H}},
      {"transformer_blocks.1.attn.to_add_out.weight", 2, {H, H}},
      {"transformer_blocks.0.attn.norm_q.weight", 1, {HD}},
      {"transformer_blocks.1.attn.norm_added_k.weight", 1, {HD}},
      {"transformer_blocks.0.img_mlp.net.0.proj.weight", 2, {MLP, H}},
      {"transformer_blocks.1.txt_mlp.net.2.weight", 2, {H, MLP}},
      {"norm_out.linear.weight", 2, {2 * H, H}}, {"proj_out.weight", 2, {64, H}}}},
    {"wan", NULL, "blocks.2.self_attn.q.weight",
     {{"patch_embedding.weight", 5, {H, 16, 1, 2, 2}}, {"patch_embedding.bias", 1, {H}},
      {"text_embedding.0.weight", 2, {H, CTX}}, {"text_embedding.2.weight", 2, {H, H}},
      {"time_embedding.0.weight", 2, {H, 256}}, {"time_embedding.2.weight", 2, {H, H}},
      {"time_projection.1.weight", 2, {6 * H, H}}, {"blocks.1.modulation", 3, {1, 6, H}},
      {"blocks.0.self_attn.q.weight", 2, {H, H}}, {"blocks.0.self_attn.o.bias", 1, {H}},
      {"blocks.1.self_attn.norm_k.weight", 1, {H}}, {"blocks.1.cross_attn.k.weight", 2, {H, H}},
      {"blocks.0.cross_attn.v.weight", 2, {H, H}}, {"blocks.0.norm3.weight", 1, {H}},
      {"blocks.0.ffn.0.weight", 2, {MLP, H}}, {"blocks.1.ffn.2.weight", 2, {H, MLP}},
      {"head.head.weight", 2, {64, H}}, {"head.modulation", 3, {1, 2, H}}}},
    {"sd3", "stable-diffusion-v3-medium", "joint_blocks.1.context_block.attn.proj.weight",
     {{"pos_embed", 3, {1, 64, H}}, {"x_embedder.proj.weight", 4, {H, 16, 2, 2}},
      {"t_embedder.mlp.0.weight", 2, {H, 256}}, {"t_embedder.mlp.2.weight", 2, {H, H}},
      {"y_embedder.mlp.0.weight", 2, {H, CTX}}, {"y_embedder.mlp.2.weight", 2, {H, H}},
      {"context_embedder.weight", 2, {H, CTX}}, {"joint_blocks.0.x_block.attn.qkv.weight", 2, {3 * H, H}},
      {"joint_blocks.0.context_block.attn.proj.weight", 2, {H, H}},
      {"joint_blocks.1.x_block.mlp.fc1.weight", 2, {MLP, H}}, {"joint_blocks.0.x_block.mlp.fc2.weight", 2, {H, MLP}},
      {"joint_blocks.0.x_block.adaLN_modulation.1.weight", 2, {6 * H, H}},
      /* the last context block only projects its input */
      {"joint_blocks.1.context_block.adaLN_modulation.1.weight", 2, {2 * H, H}},
      {"joint_blocks.1.context_block.attn.qkv.weight", 2, {3 * H, H}},
      {"final_layer.linear.weight", 2, {64, H}}, {"final_layer.adaLN_modulation.1.weight", 2, {2 * H, H}}}},
    {"sdxl", "stable-diffusion-xl-v1-base", TB "attn1.to_q.bias",
     {{P "time_embed.0.weight", 2, {4 * H, H}}, {P "time_embed.2.weight", 2, {4 * H, 4 * H}},
      {P "label_emb.0.0.weight", 2, {4 * H, CTX}}, {P "label_emb.0.2.weight", 2, {4 * H, 4 * H}},
      {P "input_blocks.0.0.weight", 4, {H, 4, 3, 3}}, {P "input_blocks.1.0.in_layers.0.weight", 1, {H}},
      {P "input_blocks.1.0.in_layers.2.weight", 4, {H, H, 3, 3}},
      {P "input_blocks.1.0.emb_layers.1.weight", 2, {H, 4 * H}},
      {P "input_blocks.2.0.out_layers.3.weight", 4, {H, H, 3, 3}}, {P "input_blocks.1.1.norm.weight", 1, {H}},
      {P "input_blocks.1.1.proj_in.weight", 2, {H, H}}, {TB "attn1.to_q.weight", 2, {H, H}},
      {TB "attn1.to_out.0.weight", 2, {H, H}}, {TB "attn1.to_out.0.bias", 1, {H}},
      {TB "attn2.to_q.weight", 2, {H, H}}, {TB "attn2.to_k.weight", 2, {H, CTX}},
      {TB "attn2.to_v.weight", 2, {H, CTX}}, {TB "ff.net.0.proj.weight", 2, {8 * H, H}},
      {TB "ff.net.2.weight", 2, {H, 4 * H}}, {TB "norm3.weight", 1, {H}},
      {P "input_blocks.2.1.proj_out.weight", 2, {H, H}},
      {P "middle_block.1.transformer_blocks.0.attn2.to_k.weight", 2, {H, CTX}},
      {P "middle_block.2.in_layers.2.weight", 4, {H, H, 3, 3}},
      {P "output_blocks.0.0.skip_connection.weight", 4, {H, 2 * H, 1, 1}},
      {P "out.0.weight", 1, {H}}, {P "out.2.weight", 4, {4, H, 3, 3}},
      /* the text encoders (each CTX / 2 wide) and the VAE of a full checkpoint */
      {"conditioner.embedders.0.transformer.text_model.encoder.layers.1.self_attn.q_proj.weight", 2, {CTX / 2, CTX / 2}},
      {"conditioner.embedders.0.transformer.text_model.embeddings.token_embedding.weight", 2, {1024, CTX / 2}},
      {"conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight", 2, {3 * CTX / 2, CTX / 2}},
      {"conditioner.embedders.1.model.text_projection", 2, {CTX / 2, CTX / 2}},
      {"first_stage_model.decoder.mid.attn_1.q.weight", 4, {H, H, 1, 1}},
      {"first_stage_model.quant_conv.weight", 4, {8, 8, 1, 1}}}},
    {"hunyuan-video", NULL, "double_blocks.0.img_attn.qkv.weight",
     {{"img_in.proj.weight", 5, {H, 16, 1, 2, 2}}, {"txt_in.input_embedder.weight", 2, {H, CTX}},
      {"txt_in.individual_token_refiner.blocks.0.self_attn_qkv.weight", 2, {3 * H, H}},
      {"time_in.mlp.0.weight", 2, {H, 256}}, {"time_in.mlp.2.weight", 2, {H, H}},
      {"vector_in.in_layer.weight", 2, {H, CTX}}, {"vector_in.out_layer.weight", 2, {H, H}},
      {"guidance_in.mlp.0.weight", 2, {H, 256}}, {"double_blocks.1.img_mod.linear.weight", 2, {6 * H, H}},
      {"double_blocks.0.txt_attn_qkv.weight", 2, {3 * H, H}}, {"double_blocks.0.img_attn_proj.weight", 2, {H, H}},
      {"double_blocks.1.txt_mlp.fc1.weight", 2, {MLP, H}}, {"double_blocks.1.txt_mlp.fc2.weight", 2, {H, MLP}},
      {"double_blocks.0.img_attn_q_norm.weight", 1, {HD}}, {"double_blocks.1.txt_attn_k_norm.weight", 1, {HD}},
      {"single_blocks.1.linear1.weight", 2, {3 * H + MLP, H}}, {"single_blocks.1.linear2.weight", 2, {H, H + MLP}},
      {"single_blocks.0.modulation.linear.weight", 2, {3 * H, H}},
      {"final_layer.linear.weight", 2, {64, H}}, {"final_layer.adaLN_modulation.1.weight", 2, {2 * H, H}}}},
    {"z-image", NULL, "context_refiner.0.adaLN_modulation.0.weight",
     {{"x_embedder.weight", 2, {H, 64}}, {"t_embedder.mlp.0.weight", 2, {H, 256}},
      {"t_embedder.mlp.2.weight", 2, {H, H}}, {"cap_embedder.0.weight", 1, {CTX}},
      {"cap_embedder.1.weight", 2, {H, CTX}}, {"noise_refiner.1.attention.qkv.weight", 2, {3 * H, H}},
      {"context_refiner.0.attention.out.weight", 2, {H, H}}, {"layers.1.attention.q_norm.weight", 1, {HD}},
      {"layers.0.attention.k_norm.weight", 1, {HD}}, {"layers.0.feed_forward.w1.weight", 2, {MLP, H}},
      {"layers.1.feed_forward.w2.weight", 2, {H, MLP}}, {"layers.0.feed_forward.w3.weight", 2, {MLP, H}},
      {"layers.1.attention_norm2.weight", 1, {H}}, {"context_refiner.1.ffn_norm1.weight", 1, {H}},
      {"layers.0.adaLN_modulation.0.weight", 2, {4 * H, H}},
      {"noise_refiner.0.adaLN_modulation.0.weight", 2, {4 * H, H}},
      {"final_layer.linear.weight", 2, {64, H}}, {"final_layer.adaLN_modulation.1.weight", 2, {H, H}}}},
    {"pixart", NULL, "blocks.2.attn.qkv.weight",
     {{"x_embedder.proj.weight", 4, {H, 4, 2, 2}}, {"t_embedder.mlp.0.weight", 2, {H, 256}},
      {"t_embedder.mlp.2.bias", 1, {H}}, {"t_block.1.weight", 2, {6 * H, H}},
      {"y_embedder.y_proj.fc1.weight", 2, {H, CTX}}, {"y_embedder.y_proj.fc2.weight", 2, {H, H}},
      {"y_embedder.y_embedding", 2, {300, CTX}}, {"blocks.1.scale_shift_table", 2, {6, H}},
      {"blocks.0.attn.qkv.weight", 2, {3 * H, H}}, {"blocks.0.attn.qkv.bias", 1, {3 * H}},
      {"blocks.1.attn.proj.weight", 2, {H, H}}, {"blocks.0.cross_attn.q_linear.weight", 2, {H, H}},
      {"blocks.1.cross_attn.kv_linear.weight", 2, {2 * H, H}}, {"blocks.0.cross_attn.proj.bias", 1, {H}},
      {"blocks.0.mlp.fc1.weight", 2, {MLP, H}}, {"blocks.1.mlp.fc2.weight", 2, {H, MLP}},
      {"final_layer.scale_shift_table", 2, {2, H}}, {"final_layer.linear.weight", 2, {32, H}}}},
    {"sana", NULL, "blocks.0.mlp.fc1.weight",
     {{"x_embedder.proj.weight", 4, {H, 32, 1, 1}}, {"t_block.1.weight", 2, {6 * H, H}},
      {"y_embedder.y_proj.fc1.weight", 2, {H, CTX}}, {"attention_y_norm.weight", 1, {H}},
      {"blocks.0.scale_shift_table", 2, {6, H}}, {"blocks.1.attn.qkv.weight", 2, {3 * H, H}},
      {"blocks.0.cross_attn.kv_linear.weight", 2, {2 * H, H}},
      {"blocks.1.mlp.inverted_conv.conv.weight", 4, {2 * MLP, H, 1, 1}},
      {"blocks.0.mlp.depth_conv.conv.weight", 4, {2 * MLP, 1, 3, 3}},
      {"blocks.1.mlp.point_conv.conv.weight", 4, {H, MLP, 1, 1}}, {"final_layer.linear.weight", 2, {32, H}}}},
    {"kandinsky5", NULL, "text_transformer_blocks.1.self_attention.to_query.weight",
     {{"time_embeddings.in_layer.weight", 2, {H / 2, H}}, {"time_embeddings.out_layer.weight", 2, {H / 2, H / 2}},
      {"text_embeddings.in_layer.weight", 2, {H, CTX}}, {"text_embeddings.norm.weight", 1, {H}},
      {"pooled_text_embeddings.in_layer.weight", 2, {H / 2, CTX}},
      {"visual_embeddings.in_layer.weight", 2, {H, 64}},
      {"text_transformer_blocks.0.text_modulation.out_layer.weight", 2, {6 * H, H / 2}},
      {"text_transformer_blocks.0.self_attention.to_key.weight", 2, {H, H}},
      {"text_transformer_blocks.0.feed_forward.in_layer.weight", 2, {MLP, H}},
      {"visual_transformer_blocks.1.visual_modulation.out_layer.weight", 2, {9 * H, H / 2}},
      {"visual_transformer_blocks.0.cross_attention.to_value.weight", 2, {H, H}},
      {"visual_transformer_blocks.1.self_attention.query_norm.weight", 1, {HD}},
      {"visual_transformer_blocks.0.self_attention.out_layer.weight", 2, {H, H}},
      {"visual_transformer_blocks.1.feed_forward.out_layer.weight", 2, {H, MLP}},
      {"out_layer.modulation.out_layer.weight", 2, {2 * H, H / 2}}, {"out_layer.out_layer.weight", 2, {64, H}}}},
    {"mochi", NULL, "blocks.1.mlp_y.w1.weight",
     {{"x_embedder.proj.weight", 4, {H, 12, 2, 2}}, {"t_embedder.mlp.0.weight", 2, {H, 256}},
      {"t5_y_embedder.to_kv.weight", 2, {2 * H, CTX}}, {"t5_y_embedder.to_q.weight", 2, {H, CTX}},
      {"t5_y_embedder.to_out.weight", 2, {H, H}}, {"t5_yproj.weight", 2, {H / 2, CTX}},
      {"pos_frequencies", 3, {3, H / HD, HD / 2}}, {"blocks.0.mod_x.weight", 2, {4 * H, H}},
      {"blocks.0.mod_y.weight", 2, {2 * H, H}}, {"blocks.1.mod_y.weight", 2, {H / 2, H}},
      {"blocks.1.attn.qkv_x.weight", 2, {3 * H, H}}, {"blocks.0.attn.qkv_y.weight", 2, {3 * H, H / 2}},
      {"blocks.0.attn.proj_y.weight", 2, {H / 2, H}}, {"blocks.1.mlp_x.w1.weight", 2, {2 * MLP, H}},
      {"blocks.0.mlp_y.w2.weight", 2, {H / 2, MLP / 2}}, {"final_layer.mod.weight", 2, {2 * H, H}},
      {"final_layer.linear.weight", 2, {48, H}}}},
    {"auraflow", NULL, "double_layers.2.attn.w1q.weight",
     {{"t_embedder.mlp.0.weight", 2, {H, 256}}, {"cond_seq_linear.weight", 2, {H, CTX}},
      {"init_x_linear.weight", 2, {H, 16}}, {"init_x_linear.bias", 1, {H}},
      {"positional_encoding", 3, {1, 256, H}}, {"register_tokens", 3, {1, 8, H}},
      {"double_layers.0.attn.w1q.weight", 2, {H, H}}, {"double_layers.1.attn.w2o.weight", 2, {H, H}},
      {"double_layers.0.mlpC.c_fc1.weight", 2, {256, H}}, {"double_layers.1.mlpX.c_proj.weight", 2, {H, 256}},
      {"double_layers.0.modC.1.weight", 2, {6 * H, H}}, {"double_layers.1.modX.1.weight", 2, {6 * H, H}},
      {"single_layers.1.attn.w1k.weight", 2, {H, H}}, {"single_layers.0.mlp.c_fc2.weight", 2, {256, H}},
      {"single_layers.1.modCX.1.weight", 2, {6 * H, H}}, {"final_linear.weight", 2, {16, H}},
      {"modF.1.weight", 2, {2 * H, H}}}},
    {"llm", NULL, "model.layers.2.self_attn.q_proj.weight",
     {{"model.embed_tokens.weight", 2, {8 * H, H}}, {"model.layers.1.self_attn.q_proj.weight", 2, {H, H}},
      {"model.layers.0.self_attn.k_proj.weight", 2, {H / 4, H}},
      {"model.layers.0.self_attn.v_proj.weight", 2, {H / 4, H}},
      {"model.layers.1.self_attn.o_proj.weight", 2, {H, H}}, {"model.layers.0.mlp.gate_proj.weight", 2, {MLP, H}},
      {"model.layers.0.mlp.up_proj.weight", 2, {MLP, H}}, {"model.layers.1.mlp.down_proj.weight", 2, {H, MLP}},
      {"model.layers.0.input_layernorm.weight", 1, {H}},
      {"model.layers.1.post_attention_layernorm.weight", 1, {H}}, {"model.norm.weight", 1, {H}},
      {"lm_head.weight", 2, {8 * H, H}}}},
    {"plain", NULL, "model.norm.weight",
     {{"encoder.embed.weight", 2, {H, 64}}, {"encoder.layers.1.fc1.weight", 2, {MLP, H}},
      {"encoder.layers.1.fc1.bias", 1, {MLP}}, {"encoder.layers.0.fc2.weight", 2, {H, MLP}},
      {"encoder.layers.0.attn.in_proj.weight", 2, {3 * H, H}}, {"encoder.layers.0.norm1.weight", 1, {H}},
      {"decoder.out.weight", 2, {64, H}}}},
};
#define NFAMILIES (sizeof families / sizeof families[0])

static void check_family(const family_case *fc, feather_reader *r) {
    for (const expect *e = fc->e; e->name; e++) {
        const feather_tensor *t = feather_find(r, e->name);
        if (!t) {
            test_fail(__FILE__, __LINE__, "%s: no tensor %s", fc->family, e->name);
            continue;
        }
        int same = t->ndim == e->ndim;
        for (unsigned d = 0; same && d < e->ndim; d++) same = t->shape[d] == e->shape[d];
        if (!same) test_fail(__FILE__, __LINE__, "%s: %s has the wrong shape", fc->family, e->name);
        CHECK(t->dtype == FEATHER_BF16);
    }
    if (feather_find(r, fc->absent)) test_fail(__FILE__, __LINE__, "%s: unexpected %s", fc->family, fc->absent);
    /* Every float tensor in the requested dtype; only the plain family has other kinds. */
    for (size_t i = 0; i < feather_count(r); i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        if (t->dtype != FEATHER_BF16 && strcmp(t->name, "encoder.position_ids"))
            test_fail(__FILE__, __LINE__, "%s: %s is %s", fc->family, t->name, feather_dtype_name(t->dtype));
    }
    const char *fmt = feather_metadata_get(r, 0, "format");
    CHECK(fmt && !strcmp(fmt, "pt"));
    const char *arch = feather_metadata_get(r, 0, "modelspec.architecture");
    if (fc->architecture) CHECK(arch && !strcmp(arch, fc->architecture));
    else CHECK(arch == NULL);
    CHECK(feather_metadata_get(r, 0, FEATHER_HASH_KEY) == NULL); /* looks like an ordinary file */
}

TEST(samples_families_names_and_shapes) {
    REQUIRE(test_run("'%s/feather-sample' --list", test_bindir()) == 0);
    char list[4096];
    snprintf(list, sizeof list, "%s", test_cmd_output());
    for (size_t f = 0; f < NFAMILIES; f++) {
        const family_case *fc = &families[f];
        CHECK_STR_CONTAINS(list, fc->family);
        char name[128];
        snprintf(name, sizeof name, "%s.safetensors", fc->family);
        PATH(out, name);
        if (sample(out, "--family %s --hidden %d --blocks 2", fc->family, H) != 0) {
            test_fail(__FILE__, __LINE__, "feather-sample --family %s failed: %s", fc->family, test_cmd_output());
            continue;
        }
        feather_reader *r = open_model(out);
        if (!r) continue;
        check_family(fc, r);
        feather_close(r);
    }
}

/* The plain family also carries what real exports have besides float weights. */
TEST(samples_plain_has_int_buffer_and_scalar) {
    PATH(out, "plain.safetensors");
    REQUIRE(sample(out, "--family plain --hidden 32 --blocks 1 --dtype f32") == 0);
    feather_reader *r = open_model(out);
    REQUIRE(r);
    const feather_tensor *ids = feather_find(r, "encoder.position_ids"), *ls = feather_find(r, "logit_scale");
    REQUIRE(ids && ls);
    CHECK(ids->dtype == FEATHER_I64);
    CHECK_EQ_U(ids->nelem, 64);
    const uint8_t *d = data_of(r, ids);
    if (d)
        for (uint64_t i = 0; i < ids->nelem; i++) {
            uint64_t v = 0;
            for (int b = 7; b >= 0; b--) v = (v << 8) | d[8 * i + b];
            if (v != i) {
                test_fail(__FILE__, __LINE__, "position_ids[%llu] = %llu", (unsigned long long)i, (unsigned long long)v);
                break;
            }
        }
    CHECK_EQ_U(ls->ndim, 0);
    CHECK(ls->dtype == FEATHER_F32);
    const float *v = data_of(r, ls);
    CHECK(v && fabsf(*v - logf(100.0f)) < 1e-3f);
    feather_close(r);
}

/* ---- values ---- */

static double to_f64(const feather_tensor *t, const void *d, uint64_t i) {
    switch (t->dtype) {
    case FEATHER_BF16: return feather_bf16_to_f32(((const uint16_t *)d)[i]);
    case FEATHER_F16: return feather_f16_to_f32(((const uint16_t *)d)[i]);
    default: return ((const float *)d)[i];
    }
}

typedef struct stats {
    double mean, sd, kurtosis, absmax, row_absmax_min, row_absmax_max;
} stats;

static stats stats_of(feather_reader *r, const char *name) {
    stats s = {0};
    const feather_tensor *t = feather_find(r, name);
    const void *d = t ? data_of(r, t) : NULL;
    if (!d) {
        test_fail(__FILE__, __LINE__, "no data for %s", name);
        return s;
    }
    double sum = 0, m2 = 0, m4 = 0;
    for (uint64_t i = 0; i < t->nelem; i++) sum += to_f64(t, d, i);
    s.mean = sum / t->nelem;
    for (uint64_t i = 0; i < t->nelem; i++) {
        double x = to_f64(t, d, i) - s.mean;
        m2 += x * x;
        m4 += x * x * x * x;
        if (fabs(x + s.mean) > s.absmax) s.absmax = fabs(x + s.mean);
    }
    s.sd = sqrt(m2 / t->nelem);
    s.kurtosis = m2 > 0 ? (m4 / t->nelem) / ((m2 / t->nelem) * (m2 / t->nelem)) : 0;
    uint64_t rows = t->ndim >= 2 ? t->shape[0] : 1, rl = t->nelem / rows;
    s.row_absmax_min = INFINITY;
    for (uint64_t row = 0; row < rows; row++) {
        double a = 0;
        for (uint64_t k = 0; k < rl; k++)
            if (fabs(to_f64(t, d, row * rl + k)) > a) a = fabs(to_f64(t, d, row * rl + k));
        if (a < s.row_absmax_min) s.row_absmax_min = a;
        if (a > s.row_absmax_max) s.row_absmax_max = a;
    }
    return s;
}

/* Weights: centred, sd of a few hundredths, heavy-tailed, rows of different ranges; norms
 * near 1; biases small. */
TEST(samples_values_look_like_weights) {
    PATH(out, "flux.safetensors");
    REQUIRE(sample(out, "--family flux --hidden 128 --blocks 1 --seed 7") == 0);
    feather_reader *r = open_model(out);
    REQUIRE(r);
    static const char *const weights[] = {"double_blocks.0.img_attn.qkv.weight", "single_blocks.0.linear1.weight",
                                          "double_blocks.0.txt_mlp.2.weight"};
    for (size_t i = 0; i < 3; i++) {
        stats s = stats_of(r, weights[i]);
        if (fabs(s.mean) > 0.002 || s.sd < 0.015 || s.sd > 0.06 || s.kurtosis < 6 ||
            s.row_absmax_max < 2.5 * s.row_absmax_min)
            test_fail(__FILE__, __LINE__, "%s: mean %g sd %g kurtosis %g row absmax %g..%g", weights[i], s.mean,
                      s.sd, s.kurtosis, s.row_absmax_min, s.row_absmax_max);
    }
    stats n = stats_of(r, "double_blocks.0.img_attn.norm.query_norm.scale");
    CHECK(fabs(n.mean - 1) < 0.05 && n.sd > 0.005 && n.sd < 0.2);
    stats b = stats_of(r, "double_blocks.0.img_attn.qkv.bias");
    CHECK(fabs(b.mean) < 0.002 && b.sd > 0 && b.sd < 0.02);
    feather_close(r);
}

/* The dtype only changes the rounding: bf16 and f16 samples hold the f32 sample's values
 * rounded to nearest. */
TEST(samples_dtypes_round_the_same_values) {
    PATH(f32, "f32.safetensors");
    PATH(f16, "f16.safetensors");
    PATH(bf16, "bf16.safetensors");
    REQUIRE(sample(f32, "--family sd3 --dtype f32 --seed 3") == 0);
    REQUIRE(sample(f16, "--family sd3 --dtype f16 --seed 3") == 0);
    REQUIRE(sample(bf16, "--family sd3 --dtype bf16 --seed 3") == 0);
    feather_reader *a = open_model(f32), *h = open_model(f16), *b = open_model(bf16);
    REQUIRE(a && h && b);
    CHECK_EQ_U(feather_count(a), feather_count(h));
    CHECK_EQ_U(feather_count(a), feather_count(b));
    uint64_t compared = 0;
    for (size_t i = 0; i < feather_count(a) && !test_failed_now(); i++) {
        const feather_tensor *ta = feather_tensor_at(a, i), *th = feather_find(h, ta->name),
                             *tb = feather_find(b, ta->name);
        REQUIRE(th && tb);
        CHECK(ta->dtype == FEATHER_F32 && th->dtype == FEATHER_F16 && tb->dtype == FEATHER_BF16);
        CHECK_EQ_U(th->nbytes, 2 * ta->nelem);
        const float *va = data_of(a, ta);
        const uint16_t *vh = data_of(h, th), *vb = data_of(b, tb);
        REQUIRE(va && vh && vb);
        for (uint64_t k = 0; k < ta->nelem; k++, compared++)
            if (vh[k] != feather_f32_to_f16(va[k]) || vb[k] != feather_f32_to_bf16(va[k])) {
                test_fail(__FILE__, __LINE__, "%s[%llu]: f32 %g, f16 0x%04x, bf16 0x%04x", ta->name,
                          (unsigned long long)k, va[k], vh[k], vb[k]);
                break;
            }
    }
    CHECK(compared > 100000);
    feather_close(a);
    feather_close(h);
    feather_close(b);
}

/* ---- determinism and layouts ---- */

/* Both models hold the same tensors with the same bytes; returns the number compared. */
static size_t same_tensors(feather_reader *a, feather_reader *b) {
    size_t n = 0;
    if (feather_count(a) != feather_count(b))
        test_fail(__FILE__, __LINE__, "%zu tensors != %zu", feather_count(a), feather_count(b));
    for (size_t i = 0; i < feather_count(a); i++) {
        const feather_tensor *ta = feather_tensor_at(a, i), *tb = feather_find(b, ta->name);
        if (!tb) {
            test_fail(__FILE__, __LINE__, "missing %s", ta->name);
            continue;
        }
        const void *da = data_of(a, ta), *db = data_of(b, tb);
        if (!da || !db || ta->nbytes != tb->nbytes || ta->dtype != tb->dtype || memcmp(da, db, ta->nbytes))
            test_fail(__FILE__, __LINE__, "%s differs", ta->name);
        else n++;
    }
    return n;
}

TEST(samples_same_seed_same_bytes) {
    PATH(a, "a.safetensors");
    PATH(b, "b.safetensors");
    PATH(c, "c.safetensors");
    REQUIRE(sample(a, "--family hunyuan-video --seed 11") == 0);
    REQUIRE(sample(b, "--family hunyuan-video --seed 11") == 0);
    REQUIRE(sample(c, "--family hunyuan-video --seed 12") == 0);
    size_t la, lb, lc;
    unsigned char *da = slurp(a, &la), *db = slurp(b, &lb), *dc = slurp(c, &lc);
    REQUIRE(da && db && dc);
    CHECK(la == lb && !memcmp(da, db, la));
    CHECK(la == lc); /* same layout… */
    CHECK(memcmp(da, dc, la) != 0); /* … other values */
    free(da);
    free(db);
    free(dc);
    /* Each tensor differs with the seed (not just one of them). */
    feather_reader *ra = open_model(a), *rc = open_model(c);
    REQUIRE(ra && rc);
    size_t differ = 0;
    for (size_t i = 0; i < feather_count(ra); i++) {
        const feather_tensor *t = feather_tensor_at(ra, i), *u = feather_find(rc, t->name);
        const void *x = data_of(ra, t), *y = u ? data_of(rc, u) : NULL;
        if (x && y && memcmp(x, y, t->nbytes)) differ++;
    }
    CHECK_EQ_U(differ, feather_count(ra));
    feather_close(ra);
    feather_close(rc);
}

/* Threads and chunking (4 MB) do not change the bytes: a model whose largest tensors span
 * two chunks, made with one thread and with three. */
TEST(samples_threads_do_not_change_bytes) {
    PATH(a, "j1.safetensors");
    PATH(b, "j3.safetensors");
    REQUIRE(sample(a, "--family llm --hidden 512 --blocks 1 --dtype f32 -j 1") == 0);
    REQUIRE(sample(b, "--family llm --hidden 512 --blocks 1 --dtype f32 -j 3") == 0);
    size_t la, lb;
    unsigned char *da = slurp(a, &la), *db = slurp(b, &lb);
    REQUIRE(da && db);
    CHECK(la > 16u << 20);
    CHECK(la == lb && !memcmp(da, db, la));
    free(da);
    free(db);
}

/* A tensor's values depend on the seed and its name only: a deeper model shares the
 * shallower one's blocks byte for byte. */
TEST(samples_tensors_independent_of_model_size) {
    PATH(a, "two.safetensors");
    PATH(b, "three.safetensors");
    REQUIRE(sample(a, "--family z-image --blocks 2 --seed 5") == 0);
    REQUIRE(sample(b, "--family z-image --blocks 3 --seed 5") == 0);
    feather_reader *ra = open_model(a), *rb = open_model(b);
    REQUIRE(ra && rb);
    CHECK(feather_count(rb) > feather_count(ra));
    CHECK(feather_find(rb, "layers.2.attention.qkv.weight") != NULL);
    CHECK(feather_find(ra, "layers.2.attention.qkv.weight") == NULL);
    for (size_t i = 0; i < feather_count(ra); i++) {
        const feather_tensor *t = feather_tensor_at(ra, i), *u = feather_find(rb, t->name);
        const void *x = data_of(ra, t), *y = u ? data_of(rb, u) : NULL;
        if (!x || !y || memcmp(x, y, t->nbytes)) test_fail(__FILE__, __LINE__, "%s differs", t->name);
    }
    feather_close(ra);
    feather_close(rb);
}

TEST(samples_shards_open_as_one_model) {
    PATH(one, "one.safetensors");
    PATH(idx, "model.safetensors.index.json");
    REQUIRE(sample(one, "--family qwen-image --seed 9") == 0);
    REQUIRE(sample(idx, "--family qwen-image --seed 9 --shards 3") == 0);
    char name[64];
    for (int s = 1; s <= 3; s++) {
        snprintf(name, sizeof name, "model-%05d-of-00003.safetensors", s);
        CHECK(exists(test_path(name)));
    }
    CHECK(!exists(test_path("model-00004-of-00003.safetensors")));
    feather_reader *r1 = open_model(one), *r3 = open_model(idx);
    REQUIRE(r1 && r3);
    CHECK_EQ_U(feather_shard_count(r3), 3);
    size_t per[3] = {0};
    uint64_t total = 0;
    for (size_t i = 0; i < feather_count(r3); i++) {
        const feather_tensor *t = feather_tensor_at(r3, i);
        if (t->shard < 3) per[t->shard]++;
        total += t->nbytes;
    }
    CHECK(per[0] && per[1] && per[2]);
    CHECK_EQ_U(same_tensors(r1, r3), feather_count(r1));
    for (unsigned s = 0; s < feather_shard_count(r3); s++) {
        const char *f = feather_metadata_get(r3, s, "format");
        CHECK(f && !strcmp(f, "pt"));
    }
    /* The index records the data size like Hugging Face's does. */
    size_t len;
    char *text = (char *)slurp(idx, &len);
    REQUIRE(text);
    text = realloc(text, len + 1);
    REQUIRE(text);
    text[len] = 0;
    char want[64];
    snprintf(want, sizeof want, "%llu", (unsigned long long)total);
    const char *ts = strstr(text, "\"total_size\"");
    CHECK(ts && strstr(ts, want) && strstr(ts, want) < strstr(ts, "weight_map"));
    free(text);
    feather_close(r1);
    feather_close(r3);
    /* An existing index is not replaced without --force, and nothing is left half-made. */
    CHECK_EQ_U(sample(idx, "--family qwen-image --seed 10 --shards 3"), 2);
    feather_reader *again = open_model(idx);
    if (again) {
        feather_reader *r1b = open_model(one);
        if (r1b) same_tensors(r1b, again);
        feather_close(r1b);
        feather_close(again);
    }
    CHECK_EQ_U(sample(idx, "--family qwen-image --seed 10 --shards 3 --force"), 0);
}

TEST(samples_zstd_holds_the_same_model) {
    PATH(one, "w.safetensors");
    PATH(z, "wz.safetensors");
    REQUIRE(sample(one, "--family wan --seed 4") == 0);
    REQUIRE(sample(z, "--family wan --seed 4 --zstd") == 0);
    CHECK(!exists(z));
    REQUIRE(exists(test_path("wz.safetensors.zst")));
    size_t lo, lz;
    unsigned char *a = slurp(one, &lo), *b = slurp(test_path("wz.safetensors.zst"), &lz);
    REQUIRE(a && b);
    CHECK(lz < lo);
    CHECK(lz >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd); /* zstd frame */
    free(a);
    free(b);
    feather_reader *r = open_model(one), *rz = open_model(test_path("wz.safetensors.zst"));
    if (r && rz) CHECK_EQ_U(same_tensors(r, rz), feather_count(r));
    feather_close(r);
    feather_close(rz);
}

TEST(samples_command_line_errors) {
    PATH(out, "x.safetensors");
    CHECK_EQ_U(sample(out, "--family nope"), 64);
    CHECK_STR_CONTAINS(test_cmd_output(), "unknown family");
    CHECK_EQ_U(test_run("'%s/feather-sample' --family flux", test_bindir()), 64);
    CHECK_EQ_U(sample(out, "--family flux --dtype f8"), 64);
    CHECK_EQ_U(sample(out, "--family flux --hidden 7"), 64);
    CHECK_EQ_U(sample(out, "--family flux --blocks 0"), 64);
    CHECK_EQ_U(sample(out, "--family flux --shards 2 --zstd"), 64);
    CHECK_EQ_U(sample(test_path("x.bin"), "--family flux --shards 2"), 64); /* -o names the index */
    CHECK_EQ_U(sample(out, "--family llm --shards 1000"), 64);
    CHECK(!exists(out));
    /* An existing output is kept unless --force. */
    REQUIRE(sample(out, "--family llm --seed 1") == 0);
    size_t l1, l2;
    unsigned char *before = slurp(out, &l1);
    CHECK_EQ_U(sample(out, "--family llm --seed 2"), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "output exists (--force replaces it)");
    CHECK(!strchr(test_cmd_output(), '\n') || strchr(test_cmd_output(), '\n') == strrchr(test_cmd_output(), '\n'));
    unsigned char *after = slurp(out, &l2);
    REQUIRE(before && after);
    CHECK(l1 == l2 && !memcmp(before, after, l1));
    free(after);
    CHECK_EQ_U(sample(out, "--family llm --seed 2 --force"), 0);
    after = slurp(out, &l2);
    REQUIRE(after);
    CHECK(l1 == l2 && memcmp(before, after, l1));
    free(before);
    free(after);
    /* --dry-run sizes a model without writing it: a benchmark-size Flux is 18 GB. */
    PATH(big, "big.safetensors");
    CHECK_EQ_U(sample(big, "--family flux --hidden 3072 --blocks 19 -n"), 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "628 tensors");
    CHECK(!exists(big));
}

/* ---- samples/batch-convert.sh, against a stand-in converter ---- */

/* Mimics feather-convert -q --json: one JSON summary on stdout; inputs named *bad* fail
 * (exit 2), an output that exists is "skipped", others are "converted" (an empty output file
 * is made). Logs its arguments, one call per line. */
static const char stub[] =
    "#!/bin/sh\n"
    "echo \"$*\" >>\"$STUB_LOG\"\n"
    "out=\n"
    "for a; do in=$a; done\n"
    "while [ $# -gt 0 ]; do case $1 in -o) out=$2; shift 2 ;; *) shift ;; esac; done\n"
    "b=$(basename \"$in\"); b=${b%%.safetensors*}\n"
    "o=${out:-$(dirname \"$in\")/}$b-fp8e5m2.safetensors\n"
    "case $in in *bad*)\n"
    "  printf '{\\n\\t\"files\":\\t[{\\n\\t\\t\"input\":\\t\"%s\",\\n\\t\\t\"status\":\\t\"error\",\\n"
    "\\t\\t\"exit_status\":\\t2\\n\\t}]\\n}\\n' \"$in\"\n"
    "  echo \"stub: $in: invalid\" >&2; exit 2 ;;\n"
    "esac\n"
    "if [ -e \"$o\" ]; then st=skipped; else st=converted; : >\"$o\"; fi\n"
    "printf '{\\n\\t\"files\":\\t[{\\n\\t\\t\"input\":\\t\"%s\",\\n\\t\\t\"output\":\\t\"%s\",\\n"
    "\\t\\t\"status\":\\t\"%s\",\\n\\t\\t\"exit_status\":\\t0\\n\\t}]\\n}\\n' \"$in\" \"$o\" \"$st\"\n";

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int bad = fputs(text, f) < 0;
    return (fclose(f) != 0 || bad) ? -1 : 0;
}

static int count_lines(const char *path, const char *needle) {
    size_t len;
    char *t = (char *)slurp(path, &len);
    int n = 0;
    if (!t) return -1;
    char *line = t, *end = t + len;
    while (line < end) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl) nl = end;
        *nl = 0;
        if (strstr(line, needle)) n++;
        line = nl + 1;
    }
    free(t);
    return n;
}

TEST(batch_convert_counts_skips_and_failures) {
    const char *script = "samples/batch-convert.sh";
    if (!exists(script)) {
        test_skip("samples/batch-convert.sh not found (run from the repository root)");
        return;
    }
    PATH(stub_path, "stub-convert");
    PATH(log, "calls.log");
    REQUIRE(write_text(stub_path, stub) == 0);
    REQUIRE(chmod(stub_path, 0755) == 0);
    /* Models: two with the same name in different folders, a compressed one, a sharded one
     * (index + shards), one that fails; and files that must not be converted: an output, a
     * writer's hidden temporary file, a text file. */
    REQUIRE(test_run("cd '%s' && mkdir -p in/sub in/sharded && : >in/a.safetensors && : >in/sub/a.safetensors && "
                     ": >in/z.safetensors.zst && : >in/bad.safetensors && : >in/a-fp8e5m2.safetensors && "
                     ": >in/b-fp8e4m3fn.safetensors && : >in/.a.safetensors.x1.tmp && : >in/.c.safetensors && "
                     ": >in/notes.txt && : >in/sharded/m-00001-of-00002.safetensors && "
                     ": >in/sharded/m-00002-of-00002.safetensors && "
                     "printf '{\"weight_map\":{\"x\":\"m-00001-of-00002.safetensors\",\"y\":\"m-00002-of-00002.safetensors\"}}' "
                     ">in/sharded/m.safetensors.index.json && "
                     /* a diffusers pipeline: only its transformer is converted */
                     "mkdir -p in/pipe/transformer in/pipe/text_encoder in/pipe/vae && : >in/pipe/model_index.json && "
                     ": >in/pipe/transformer/diffusion_pytorch_model.safetensors && "
                     ": >in/pipe/text_encoder/model.safetensors && : >in/pipe/vae/diffusion_pytorch_model.safetensors",
                     test_tmpdir()) == 0);
    int rc = test_run("STUB_LOG='%s' FEATHER_CONVERT='%s' sh %s -j 2 -o '%s/out' '%s/in' -- --scale tensor", log,
                      stub_path, script, test_tmpdir(), test_tmpdir());
    CHECK_EQ_U(rc, 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "5 converted, 0 skipped, 0 with nothing to convert, 1 failed");
    CHECK_STR_CONTAINS(test_cmd_output(), "invalid"); /* the converter's message gets through */
    /* Six calls, each with the JSON flags and the options after --, none for outputs, hidden
     * files, shards or a pipeline's text encoder and VAE. */
    CHECK_EQ_U(count_lines(log, "-q --json"), 6);
    CHECK_EQ_U(count_lines(log, "--scale tensor"), 6);
    CHECK_EQ_U(count_lines(log, "pipe/transformer/"), 1);
    CHECK_EQ_U(count_lines(log, "text_encoder"), 0);
    CHECK_EQ_U(count_lines(log, "vae"), 0);
    CHECK_EQ_U(count_lines(log, "fp8e"), 0);
    CHECK_EQ_U(count_lines(log, "/."), 0);
    CHECK_EQ_U(count_lines(log, "-of-"), 0);
    CHECK_EQ_U(count_lines(log, "m.safetensors.index.json"), 1);
    /* Outputs mirror the input tree, so the two a.safetensors do not collide. */
    CHECK(exists(test_path("out/a-fp8e5m2.safetensors")));
    CHECK(exists(test_path("out/sub/a-fp8e5m2.safetensors")));
    CHECK(exists(test_path("out/sharded/m-fp8e5m2.safetensors")));
    PATH(summary, "out/batch-summary.json");
    CHECK_EQ_U(count_lines(summary, "\"exit_status\": 2"), 1);
    CHECK_EQ_U(count_lines(summary, "\"converted\": 5"), 1);
    CHECK_EQ_U(count_lines(summary, "\"status\":\t\"converted\""), 5);

    /* Running it again resumes: what was converted is skipped, the failure stays. */
    rc = test_run("STUB_LOG='%s' FEATHER_CONVERT='%s' sh %s -j 1 -o '%s/out' '%s/in'", log, stub_path, script,
                  test_tmpdir(), test_tmpdir());
    CHECK_EQ_U(rc, 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "0 converted, 5 skipped, 0 with nothing to convert, 1 failed");
    CHECK_EQ_U(count_lines(summary, "\"skipped\": 5"), 1);

    /* Without failures it succeeds; without -o the summary goes to stdout. */
    REQUIRE(remove(test_path("in/bad.safetensors")) == 0);
    rc = test_run("STUB_LOG='%s' FEATHER_CONVERT='%s' sh %s '%s/in' 2>/dev/null", log, stub_path, script,
                  test_tmpdir());
    CHECK_EQ_U(rc, 0);
    /* in/a-fp8e5m2.safetensors was there from the start: that one is up to date. */
    CHECK_STR_CONTAINS(test_cmd_output(), "\"converted\": 4");
    CHECK_STR_CONTAINS(test_cmd_output(), "\"skipped\": 1");
    CHECK(exists(test_path("in/sub/a-fp8e5m2.safetensors")));

    /* Usage errors. */
    CHECK_EQ_U(test_run("FEATHER_CONVERT='%s' sh %s", stub_path, script), 64);
    CHECK_EQ_U(test_run("FEATHER_CONVERT='%s' sh %s -j 0 '%s/in'", stub_path, script, test_tmpdir()), 64);
    CHECK_EQ_U(test_run("FEATHER_CONVERT='%s' sh %s --bogus '%s/in'", stub_path, script, test_tmpdir()), 64);
    CHECK_EQ_U(test_run("FEATHER_CONVERT='%s' sh %s '%s/missing'", stub_path, script, test_tmpdir()), 2);
    CHECK_EQ_U(test_run("FEATHER_CONVERT='%s/none' sh %s '%s/in'", test_tmpdir(), script, test_tmpdir()), 2);
}

TEST(batch_convert_is_shellcheck_clean) {
    if (test_run("command -v shellcheck") != 0) {
        test_skip("shellcheck is not installed (apt-get install shellcheck)");
        return;
    }
    if (test_run("shellcheck samples/batch-convert.sh") != 0)
        test_fail(__FILE__, __LINE__, "shellcheck: %s", test_cmd_output());
}
