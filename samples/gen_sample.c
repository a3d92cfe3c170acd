/* feather-sample: writes synthetic safetensors checkpoints that carry the real tensor names,
 * shapes and metadata of a model family at a small width, with deterministic values that
 * look like trained weights (so the converter's family detection, keep-lists and scale
 * modes have something realistic to work on).
 *
 * Every tensor's values come from its own random stream, seeded from --seed and the tensor's
 * name, so a tensor's bytes do not depend on which other tensors exist, on the file layout
 * or on sharding. Values are produced a few megabytes at a time and streamed through the
 * library writer: a multi-gigabyte checkpoint needs no more memory than a small one. */
#include "cli/common.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------- */
/* Model description: a list of tensors with a value kind each.                              */

typedef enum vkind {
    V_WEIGHT, /* N(0, 0.02), heavy tail, log-normal row and column scales */
    V_BIAS,   /* small: N(0, 0.005) */
    V_NORM,   /* norm scales: 1 + N(0, 0.05) */
    V_PARAM,  /* free parameters (modulation tables, position embeddings): N(0, 1/sqrt(h)) */
    V_INDEX,  /* int64 0, 1, 2… along the last axis (position_ids buffers) */
    V_CONST   /* one value (a scalar such as logit_scale) */
} vkind;

#define MAXDIM 5

typedef struct tspec {
    char *name;
    feather_dtype dtype;
    unsigned ndim;
    uint64_t shape[MAXDIM];
    vkind kind;
    float value;     /* V_CONST */
    uint64_t nbytes;
    unsigned shard;
} tspec;

typedef struct model {
    tspec *t;
    size_t n, cap;
    int oom;
    feather_dtype dtype;   /* of every float tensor */
    uint64_t h, mlp, ctx;  /* hidden width, feed-forward width, text width */
    uint64_t head_dim;
    unsigned blocks;
    const char *meta[8][2]; /* metadata besides "format" */
    size_t nmeta;
} model;

static void add(model *m, vkind k, const char *prefix, const char *sub, unsigned ndim,
                const uint64_t *shape) {
    if (m->oom) return;
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        tspec *t = realloc(m->t, cap * sizeof *t);
        if (!t) { m->oom = 1; return; }
        m->t = t;
        m->cap = cap;
    }
    size_t len = strlen(prefix) + strlen(sub) + 2;
    char *name = malloc(len);
    if (!name) { m->oom = 1; return; }
    snprintf(name, len, "%s%s%s", prefix, *prefix && *sub ? "." : "", sub);
    tspec *t = &m->t[m->n++];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->kind = k;
    t->dtype = k == V_INDEX ? FEATHER_I64 : m->dtype;
    t->ndim = ndim;
    uint64_t ne = 1;
    for (unsigned i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        ne *= shape[i];
    }
    t->nbytes = ne * (feather_dtype_bits(t->dtype) / 8);
}

#define SHAPE(...) (sizeof((uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t)), (uint64_t[]){__VA_ARGS__}

/* prefix.sub.weight [out, in] and, with bias, prefix.sub.bias [out]. */
static void linear(model *m, const char *prefix, const char *sub, uint64_t out, uint64_t in, int bias) {
    char p[512];
    snprintf(p, sizeof p, "%s%s%s", prefix, *prefix && *sub ? "." : "", sub);
    add(m, V_WEIGHT, p, "weight", SHAPE(out, in));
    if (bias) add(m, V_BIAS, p, "bias", SHAPE(out));
}

/* A norm's scale under its own name (".weight" or ".scale" included in sub). */
static void norm(model *m, const char *prefix, const char *sub, uint64_t dim) {
    add(m, V_NORM, prefix, sub, SHAPE(dim));
}

/* A LayerNorm/GroupNorm with affine weight and bias. */
static void layernorm(model *m, const char *prefix, const char *sub, uint64_t dim) {
    char p[512];
    snprintf(p, sizeof p, "%s%s%s", prefix, *prefix && *sub ? "." : "", sub);
    add(m, V_NORM, p, "weight", SHAPE(dim));
    add(m, V_BIAS, p, "bias", SHAPE(dim));
}

/* A convolution: weight [out, in, k...] plus bias. */
static void conv(model *m, const char *prefix, const char *sub, unsigned ndim, const uint64_t *shape) {
    char p[512];
    snprintf(p, sizeof p, "%s%s%s", prefix, *prefix && *sub ? "." : "", sub);
    add(m, V_WEIGHT, p, "weight", ndim, shape);
    add(m, V_BIAS, p, "bias", SHAPE(shape[0]));
}

static const char *fmt(char *buf, size_t len, const char *f, ...) __attribute__((format(printf, 3, 4)));
static const char *fmt(char *buf, size_t len, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, len, f, ap);
    va_end(ap);
    return buf;
}

static void meta(model *m, const char *key, const char *value) {
    if (m->nmeta < sizeof m->meta / sizeof m->meta[0]) {
        m->meta[m->nmeta][0] = key;
        m->meta[m->nmeta][1] = value;
        m->nmeta++;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Families. h = hidden width, mlp = 4h, ctx = 2h (text width), hd = attention head width.    */

/* Flux.1 in the original (BFL) layout; --blocks double blocks and as many single blocks. */
static void fam_flux(model *m) {
    uint64_t h = m->h, mlp = m->mlp, ctx = m->ctx, hd = m->head_dim;
    char p[256];
    linear(m, "", "img_in", h, 64, 1);
    linear(m, "", "txt_in", h, ctx, 1);
    linear(m, "time_in", "in_layer", h, 256, 1);
    linear(m, "time_in", "out_layer", h, h, 1);
    linear(m, "vector_in", "in_layer", h, ctx, 1);
    linear(m, "vector_in", "out_layer", h, h, 1);
    linear(m, "guidance_in", "in_layer", h, 256, 1);
    linear(m, "guidance_in", "out_layer", h, h, 1);
    static const char *const stream[2] = {"img", "txt"};
    for (unsigned i = 0; i < m->blocks; i++)
        for (int s = 0; s < 2; s++) {
            const char *x = stream[s];
            linear(m, fmt(p, sizeof p, "double_blocks.%u.%s_mod", i, x), "lin", 6 * h, h, 1);
            linear(m, fmt(p, sizeof p, "double_blocks.%u.%s_attn", i, x), "qkv", 3 * h, h, 1);
            linear(m, p, "proj", h, h, 1);
            norm(m, p, "norm.query_norm.scale", hd);
            norm(m, p, "norm.key_norm.scale", hd);
            linear(m, fmt(p, sizeof p, "double_blocks.%u.%s_mlp", i, x), "0", mlp, h, 1);
            linear(m, p, "2", h, mlp, 1);
        }
    for (unsigned i = 0; i < m->blocks; i++) {
        fmt(p, sizeof p, "single_blocks.%u", i);
        linear(m, p, "linear1", 3 * h + mlp, h, 1);
        linear(m, p, "linear2", h, h + mlp, 1);
        norm(m, p, "norm.query_norm.scale", hd);
        norm(m, p, "norm.key_norm.scale", hd);
        linear(m, p, "modulation.lin", 3 * h, h, 1);
    }
    linear(m, "final_layer", "adaLN_modulation.1", 2 * h, h, 1);
    linear(m, "final_layer", "linear", 64, h, 1);
    meta(m, "modelspec.sai_model_spec", "1.0.0");
    meta(m, "modelspec.architecture", "flux-1-dev");
    meta(m, "modelspec.title", "feather sample (flux)");
}

/* FLUX.2 (dev, klein) in the BFL layout: no biases, SwiGLU feed-forward (gate and value fused,
 * 3h each), 128 latent channels, and the blocks' modulation from three shared layers. */
static void fam_flux2(model *m) {
    uint64_t h = m->h, ff = 3 * h, ctx = m->ctx, hd = m->head_dim;
    char p[256];
    linear(m, "", "img_in", h, 128, 0);
    linear(m, "", "txt_in", h, ctx, 0);
    linear(m, "time_in", "in_layer", h, 256, 0);
    linear(m, "time_in", "out_layer", h, h, 0);
    linear(m, "guidance_in", "in_layer", h, 256, 0);
    linear(m, "guidance_in", "out_layer", h, h, 0);
    linear(m, "double_stream_modulation_img", "lin", 6 * h, h, 0);
    linear(m, "double_stream_modulation_txt", "lin", 6 * h, h, 0);
    linear(m, "single_stream_modulation", "lin", 3 * h, h, 0);
    static const char *const stream[2] = {"img", "txt"};
    for (unsigned i = 0; i < m->blocks; i++)
        for (int s = 0; s < 2; s++) {
            const char *x = stream[s];
            linear(m, fmt(p, sizeof p, "double_blocks.%u.%s_attn", i, x), "qkv", 3 * h, h, 0);
            linear(m, p, "proj", h, h, 0);
            norm(m, p, "norm.query_norm.scale", hd);
            norm(m, p, "norm.key_norm.scale", hd);
            linear(m, fmt(p, sizeof p, "double_blocks.%u.%s_mlp", i, x), "0", 2 * ff, h, 0);
            linear(m, p, "2", h, ff, 0);
        }
    for (unsigned i = 0; i < m->blocks; i++) {
        fmt(p, sizeof p, "single_blocks.%u", i);
        linear(m, p, "linear1", 3 * h + 2 * ff, h, 0);
        linear(m, p, "linear2", h, h + ff, 0);
        norm(m, p, "norm.query_norm.scale", hd);
        norm(m, p, "norm.key_norm.scale", hd);
    }
    linear(m, "final_layer", "adaLN_modulation.1", 2 * h, h, 0);
    linear(m, "final_layer", "linear", 128, h, 0);
}

/* Qwen-Image (diffusers transformer layout). */
static void fam_qwen(model *m) {
    uint64_t h = m->h, mlp = m->mlp, ctx = m->ctx, hd = m->head_dim;
    char p[256];
    linear(m, "", "img_in", h, 64, 1);
    linear(m, "", "txt_in", h, ctx, 1);
    norm(m, "txt_norm", "weight", ctx);
    linear(m, "time_text_embed.timestep_embedder", "linear_1", h, 256, 1);
    linear(m, "time_text_embed.timestep_embedder", "linear_2", h, h, 1);
    for (unsigned i = 0; i < m->blocks; i++) {
        fmt(p, sizeof p, "transformer_blocks.%u", i);
        linear(m, p, "img_mod.1", 6 * h, h, 1);
        linear(m, p, "txt_mod.1", 6 * h, h, 1);
        static const char *const proj[] = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj",
                                           "attn.add_k_proj", "attn.add_v_proj", "attn.to_out.0",
                                           "attn.to_add_out"};
        for (size_t j = 0; j < sizeof proj / sizeof proj[0]; j++) linear(m, p, proj[j], h, h, 1);
        norm(m, p, "attn.norm_q.weight", hd);
        norm(m, p, "attn.norm_k.weight", hd);
        norm(m, p, "attn.norm_added_q.weight", hd);
        norm(m, p, "attn.norm_added_k.weight", hd);
        linear(m, p, "img_mlp.net.0.proj", mlp, h, 1);
        linear(m, p, "img_mlp.net.2", h, mlp, 1);
        linear(m, p, "txt_mlp.net.0.proj", mlp, h, 1);
        linear(m, p, "txt_mlp.net.2", h, mlp, 1);
    }
    linear(m, "norm_out", "linear", 2 * h, h, 1);
    linear(m, "", "proj_out", 64, h, 1);
}

/* Wan 2.x (original layout). Cross-attention k/v read the text after text_embedding, so
 * they are [h, h]. */
static void fam_wan(model *m) {
    uint64_t h = m->h, mlp = m->mlp, ctx = m->ctx;
    char p[256];
    conv(m, "", "patch_embedding", SHAPE(h, 16, 1, 2, 2));
    linear(m, "text_embedding", "0", h, ctx, 1);
    linear(m, "text_embedding", "2", h, h, 1);
    linear(m, "time_embedding", "0", h, 256, 1);
    linear(m, "time_embedding", "2", h, h, 1);
    linear(m, "time_projection", "1", 6 * h, h, 1);
    for (unsigned i = 0; i < m->blocks; i++) {
        fmt(p, sizeof p, "blocks.%u", i);
        add(m, V_PARAM, p, "modulation", SHAPE(1, 6, h));
        static const char *const attn[] = {"self_attn", "cross_attn"};
        for (int a = 0; a < 2; a++) {
            char q[300];
            fmt(q, sizeof q, "%s.%s", p, attn[a]);
            linear(m, q, "q", h, h, 1);
            linear(m, q, "k", h, h, 1);
            linear(m, q, "v", h, h, 1);
            linear(m, q, "o", h, h, 1);
            norm(m, q, "norm_q.weight", h);
            norm(m, q, "norm_k.weight", h);
        }
        layernorm(m, p, "norm3", h);
        linear(m, p, "ffn.0", mlp, h, 1);
        linear(m, p, "ffn.2", h, mlp, 1);
    }
    linear(m, "head", "head", 64, h, 1);
    add(m, V_PARAM, "head", "modulation", SHAPE(1, 2, h));
}

/* SD3 MMDiT. As in the real model, the last block's context stream only projects its
 * input (no attention output, no MLP, 2h modulation). */
static void fam_sd3(model *m) {
    uint64_t h = m->h, mlp = m->mlp, ctx = m->ctx;
    char p[256];
    add(m, V_PARAM, "", "pos_embed", SHAPE(1, 64, h));
    conv(m, "x_embedder", "proj", SHAPE(h, 16, 2, 2));
    linear(m, "t_embedder", "mlp.0", h, 256, 1);
    linear(m, "t_embedder", "mlp.2", h, h, 1);
    linear(m, "y_embedder", "mlp.0", h, ctx, 1);
    linear(m, "y_embedder", "mlp.2", h, h, 1);
    linear(m, "", "context_embedder", h, ctx, 1);
    for (unsigned i = 0; i < m->blocks; i++)
        for (int s = 0; s < 2; s++) {
            int pre_only = s == 1 && i + 1 == m->blocks;
            fmt(p, sizeof p, "joint_blocks.%u.%s", i, s ? "context_block" : "x_block");
            linear(m, p, "attn.qkv", 3 * h, h, 1);
            if (!pre_only) {
                linear(m, p, "attn.proj", h, h, 1);
                linear(m, p, "mlp.fc1", mlp, h, 1);
                linear(m, p, "mlp.fc2", h, mlp, 1);
            }
            linear(m, p, "adaLN_modulation.1", (pre_only ? 2 : 6) * h, h, 1);
        }
    linear(m, "final_layer", "linear", 64, h, 1);
    linear(m, "final_layer", "adaLN_modulation.1", 2 * h, h, 1);
    meta(m, "modelspec.sai_model_spec", "1.0.0");
    meta(m, "modelspec.architecture", "stable-diffusion-v3-medium");
    meta(m, "modelspec.title", "feather sample (sd3)");
}

/* One SDXL residual block: GroupNorm, 3x3 conv, time-embedding projection, GroupNorm, 3x3
 * conv; a 1x1 skip conv when the input is wider (decoder blocks see the skip concat). */
static void sdxl_resblock(model *m, const char *p, uint64_t c, uint64_t in) {
    layernorm(m, p, "in_layers.0", in);
    conv(m, p, "in_layers.2", SHAPE(c, in, 3, 3));
    linear(m, p, "emb_layers.1", c, 4 * c, 1);
    layernorm(m, p, "out_layers.0", c);
    conv(m, p, "out_layers.3", SHAPE(c, c, 3, 3));
    if (in != c) conv(m, p, "skip_connection", SHAPE(c, in, 1, 1));
}

static void sdxl_transformer(model *m, const char *p, uint64_t c, uint64_t ctx) {
    char q[300];
    layernorm(m, p, "norm", c);
    linear(m, p, "proj_in", c, c, 1);
    fmt(q, sizeof q, "%s.transformer_blocks.0", p);
    linear(m, q, "attn1.to_q", c, c, 0);
    linear(m, q, "attn1.to_k", c, c, 0);
    linear(m, q, "attn1.to_v", c, c, 0);
    linear(m, q, "attn1.to_out.0", c, c, 1);
    linear(m, q, "attn2.to_q", c, c, 0);
    linear(m, q, "attn2.to_k", c, ctx, 0);
    linear(m, q, "attn2.to_v", c, ctx, 0);
    linear(m, q, "attn2.to_out.0", c, c, 1);
    linear(m, q, "ff.net.0.proj", 8 * c, c, 1);
    linear(m, q, "ff.net.2", c, 4 * c, 1);
    layernorm(m, q, "norm1", c);
    layernorm(m, q, "norm2", c);
    layernorm(m, q, "norm3", c);
    linear(m, p, "proj_out", c, c, 1);
}

/* SDXL's first text encoder (CLIP ViT-L, Hugging Face names) at width w, --blocks layers. */
static void sdxl_clip_l(model *m, const char *p, uint64_t w) {
    char q[300], l[300];
    fmt(q, sizeof q, "%s.transformer.text_model", p);
    add(m, V_WEIGHT, q, "embeddings.token_embedding.weight", SHAPE(1024, w));
    add(m, V_PARAM, q, "embeddings.position_embedding.weight", SHAPE(77, w));
    for (unsigned i = 0; i < m->blocks; i++) {
        fmt(l, sizeof l, "%s.encoder.layers.%u", q, i);
        layernorm(m, l, "layer_norm1", w);
        linear(m, l, "self_attn.q_proj", w, w, 1);
        linear(m, l, "self_attn.k_proj", w, w, 1);
        linear(m, l, "self_attn.v_proj", w, w, 1);
        linear(m, l, "self_attn.out_proj", w, w, 1);
        layernorm(m, l, "layer_norm2", w);
        linear(m, l, "mlp.fc1", 4 * w, w, 1);
        linear(m, l, "mlp.fc2", w, 4 * w, 1);
    }
    layernorm(m, q, "final_layer_norm", w);
}

/* SDXL's second text encoder (OpenCLIP ViT-bigG, open_clip names: a fused in_proj_weight, a
 * bare text_projection and logit_scale) at width w, --blocks layers. */
static void sdxl_clip_g(model *m, const char *p, uint64_t w) {
    char q[300], l[300];
    fmt(q, sizeof q, "%s.model", p);
    add(m, V_WEIGHT, q, "token_embedding.weight", SHAPE(1024, w));
    add(m, V_PARAM, q, "positional_embedding", SHAPE(77, w));
    for (unsigned i = 0; i < m->blocks; i++) {
        fmt(l, sizeof l, "%s.transformer.resblocks.%u", q, i);
        layernorm(m, l, "ln_1", w);
        add(m, V_WEIGHT, l, "attn.in_proj_weight", SHAPE(3 * w, w));
        add(m, V_BIAS, l, "attn.in_proj_bias", SHAPE(3 * w));
        linear(m, l, "attn.out_proj", w, w, 1);
        layernorm(m, l, "ln_2", w);
        linear(m, l, "mlp.c_fc", 4 * w, w, 1);
        linear(m, l, "mlp.c_proj", w, 4 * w, 1);
    }
    layernorm(m, q, "ln_final", w);
    add(m, V_WEIGHT, q, "text_projection", SHAPE(w, w));
    add(m, V_CONST, q, "logit_scale", 0, NULL);
    m->t[m->n - 1].value = 4.6052f;
}

/* The SDXL VAE (first_stage_model.*), reduced to what sets its tensors apart: convolutions,
 * GroupNorms and the mid-block attention as 1x1 convolutions, at width c. */
static void sdxl_vae(model *m, uint64_t c) {
    const char *v = "first_stage_model";
    char p[300];
    for (int d = 0; d < 2; d++) {
        const char *part = d ? "decoder" : "encoder";
        conv(m, fmt(p, sizeof p, "%s.%s", v, part), "conv_in", SHAPE(c, d ? 4 : 3, 3, 3));
        fmt(p, sizeof p, "%s.%s.mid.attn_1", v, part);
        layernorm(m, p, "norm", c);
        conv(m, p, "q", SHAPE(c, c, 1, 1));
        conv(m, p, "k", SHAPE(c, c, 1, 1));
        conv(m, p, "v", SHAPE(c, c, 1, 1));
        conv(m, p, "proj_out", SHAPE(c, c, 1, 1));
        layernorm(m, fmt(p, sizeof p, "%s.%s", v, part), "norm_out", c);
        conv(m, fmt(p, sizeof p, "%s.%s", v, part), "conv_out", SHAPE(d ? 3 : 8, c, 3, 3));
    }
    conv(m, v, "quant_conv", SHAPE(8, 8, 1, 1));
    conv(m, v, "post_quant_conv", SHAPE(4, 4, 1, 1));
}

/* An SDXL checkpoint as released (sd_xl_base_1.0): the UNet under model.diffusion_model.* at
 * one channel width c = h (--blocks encoder levels, the middle block and as many decoder
 * levels), beside its two text encoders (conditioner.embedders.0/1, each h wide, so that the
 * cross-attention context is their concatenation) and its VAE. */
static void fam_sdxl(model *m) {
    uint64_t c = m->h, ctx = m->ctx;
    char p[256];
    const char *dm = "model.diffusion_model";
    linear(m, dm, "time_embed.0", 4 * c, c, 1);
    linear(m, dm, "time_embed.2", 4 * c, 4 * c, 1);
    linear(m, dm, "label_emb.0.0", 4 * c, ctx, 1);
    linear(m, dm, "label_emb.0.2", 4 * c, 4 * c, 1);
    conv(m, dm, "input_blocks.0.0", SHAPE(c, 4, 3, 3));
    for (unsigned i = 1; i <= m->blocks; i++) {
        sdxl_resblock(m, fmt(p, sizeof p, "%s.input_blocks.%u.0", dm, i), c, c);
        sdxl_transformer(m, fmt(p, sizeof p, "%s.input_blocks.%u.1", dm, i), c, ctx);
    }
    sdxl_resblock(m, fmt(p, sizeof p, "%s.middle_block.0", dm), c, c);
    sdxl_transformer(m, fmt(p, sizeof p, "%s.middle_block.1", dm), c, ctx);
    sdxl_resblock(m, fmt(p, sizeof p, "%s.middle_block.2", dm), c, c);
    for (unsigned i = 0; i < m->blocks; i++) {
        sdxl_resblock(m, fmt(p, sizeof p, "%s.output_blocks.%u.0", dm, i), c, 2 * c);
        sdxl_transformer(m, fmt(p, sizeof p, "%s.output_blocks.%u.1", dm, i), c, ctx);
    }
    layernorm(m, dm, "out.0", c);
    conv(m, dm, "out.2", SHAPE(4, c, 3, 3));
    sdxl_clip_l(m, "conditioner.embedders.0", ctx / 2);
    sdxl_clip_g(m, "conditioner.embedders.1", ctx - ctx / 2);
    sdxl_vae(m, c);
    meta(m, "modelspec.sai_model_spec", "1.0.0");
    meta(m, "modelspec.architecture", "stable-diffusion-xl-v1-base");
    meta(m, "modelspec.title", "feather sample (sdxl)");
}

/* HunyuanVideo (original layout): a token refiner in front of the text input, then
 * --blocks double and as many single blocks. */
static void fam_hunyuan(model *m) {
    uint64_t h = m->h, mlp = m->mlp, ctx = m->ctx, hd = m->head_dim;
    char p[256];
    conv(m, "img_in", "proj", SHAPE(h, 16, 1, 2, 2));
    linear(m, "txt_in", "input_embedder", h, ctx, 1);
    linear(m, "txt_in", "t_embedder.mlp.0", h, 256, 1);
    linear(m, "txt_in", "t_embedder.mlp.2", h, h, 1);
    linear(m, "txt_in", "c_embedder.linear_1", h, ctx, 1);
    linear(m, "txt_in", "c_embedder.linear_2", h, h, 1);
    for (unsigned j = 0; j < 2; j++) {
        fmt(p, sizeof p, "txt_in.individual_token_refiner.blocks.%u", j);
        layernorm(m, p, "norm1", h);
        linear(m, p, "self_attn_qkv", 3 * h, h, 1);
        linear(m, p, "self_attn_proj", h, h, 1);
        layernorm(m, p, "norm2", h);
        linear(m, p, "mlp.fc1", mlp, h, 1);
        linear(m, p, "mlp.fc2", h, mlp, 1);
        linear(m, p, "adaLN_modulation.1", 2 * h, h, 1);
    }
    linear(m, "time_in", "mlp.0", h, 256, 1);
    linear(m, "time_in", "mlp.2", h, h, 1);
    linear(m, "vector_in", "in_layer", h, ctx, 1);
    linear(m, "vector_in", "out_layer", h, h, 1);
    linear(m, "guidance_in", "mlp.0", h, 256, 1);
    linear(m, "guidance_in", "mlp.2", h, h, 1);
    static const char *const stream[2] = {"img", "txt"};
    for (unsigned i = 0; i < m->blocks; i++)
        for (int s = 0; s < 2; s++) {
            const char *x = stream[s];
            char q[64];
            fmt(p, sizeof p, "double_blocks.%u", i);
            linear(m, p, fmt(q, sizeof q, "%s_mod.linear", x), 6 * h, h, 1);
            linear(m, p, fmt(q, sizeof q, "%s_attn_qkv", x), 3 * h, h, 1);
            norm(m, p, fmt(q, sizeof q, "%s_attn_q_norm.weight", x), hd);
            norm(m, p, fmt(q, sizeof q, "%s_attn_k_norm.weight", x), hd);
            linear(m, p, fmt(q, sizeof q, "%s_attn_proj", x), h, h, 1);
            linear(m, p, fmt(q, sizeof q, "%s_mlp.fc1", x), mlp, h, 1);
            linear(m, p, fmt(q, sizeof q, "%s_mlp.fc2", x), h, mlp, 1);
        }
    for (unsigned i = 0; i < m->blocks; i++) {
        fmt(p, sizeof p, "single_blocks.%u", i);
        linear(m, p, "linear1", 3 * h + mlp, h, 1);
        linear(m, p, "linear2", h, h + mlp, 1);
        norm(m, p, "q_norm.weight", hd);
        norm(m, p, "k_norm.weight", hd);
        linear(m, p, "modulation.linear", 3 * h, h, 1);
    }
    linear(m, "final_layer", "linear", 64, h, 1);
    linear(m, "final_layer", "adaLN_modulation.1", 2 * h, h, 1);
}

/* One Z-Image transformer layer (no biases in attention and feed-forward, as in the real
 * model); the context refiner has no modulation. */
static void zimage_layer(model *m, const char *p, int modulated) {
    uint64_t h = m->h, mlp = m->mlp, hd = m->head_dim;
    linear(m, p, "attention.qkv", 3 * h, h, 0);
    linear(m, p, "attention.out", h, h, 0);
    norm(m, p, "attention.q_norm.weight", hd);
    norm(m, p, "attention.k_norm.weight", hd);
    linear(m, p, "feed_forward.w1", mlp, h, 0);
    linear(m, p, "feed_forward.w2", h, mlp, 0);
    linear(m, p, "feed_forward.w3", mlp, h, 0);
    norm(m, p, "attention_norm1.weight", h);
    norm(m, p, "attention_norm2.weight", h);
    norm(m, p, "ffn_norm1.weight", h);
    norm(m, p, "ffn_norm2.weight", h);
    if (modulated) linear(m, p, "adaLN_modulation.0", 4 * h, h, 1);
}

static void fam_zimage(model *m) {
    uint64_t h = m->h, ctx = m->ctx;
    char p[256];
    linear(m, "", "x_embedder", h, 64, 1);
    linear(m, "t_embedder", "mlp.0", h, 256, 1);
    linear(m, "t_embedder", "mlp.2", h, h, 1);
    norm(m, "cap_embedder", "0.weight", ctx);
    linear(m, "cap_embedder", "1", h, ctx, 1);
    for (unsigned j = 0; j < 2; j++) {
        zimage_layer(m, fmt(p, sizeof p, "noise_refiner.%u", j), 1);
        zimage_layer(m, fmt(p, sizeof p, "context_refiner.%u", j), 0);
    }
    for (unsigned i = 0; i < m->blocks; i++) zimage_layer(m, fmt(p, sizeof p, "layers.%u", i), 1);
    linear(m, "final_layer", "linear", 64, h, 1);
    linear(m, "final_layer", "adaLN_modulation.1", h, h, 1);
}

/* Anima: a Cosmos-Predict2 DiT under net. (no biases; adaLN-LoRA modulation of width 256 in
 * every block; a patch embedding of 68 inputs, which no fp8 kernel takes) with the adapter that
 * turns the text encoder's states into its context (llm_adapter, width ctx). */
static void fam_anima(model *m) {
    uint64_t h = m->h, mlp = m->mlp, ctx = m->ctx, hd = m->head_dim, lora = 256;
    static const char *const attn[2] = {"self_attn", "cross_attn"};
    char p[256];
    linear(m, "net.x_embedder", "proj.1", h, 68, 0);
    linear(m, "net.t_embedder.1", "linear_1", h, h, 0);
    linear(m, "net.t_embedder.1", "linear_2", 3 * h, h, 0);
    norm(m, "net.t_embedding_norm", "weight", h);
    for (unsigned i = 0; i < m->blocks; i++) {
        for (int a = 0; a < 2; a++) {
            const uint64_t kv_in = a ? ctx : h;
            fmt(p, sizeof p, "net.blocks.%u.%s", i, attn[a]);
            linear(m, p, "q_proj", h, h, 0);
            linear(m, p, "k_proj", h, kv_in, 0);
            linear(m, p, "v_proj", h, kv_in, 0);
            linear(m, p, "output_proj", h, h, 0);
            norm(m, p, "q_norm.weight", hd);
            norm(m, p, "k_norm.weight", hd);
        }
        fmt(p, sizeof p, "net.blocks.%u", i);
        linear(m, p, "mlp.layer1", mlp, h, 0);
        linear(m, p, "mlp.layer2", h, mlp, 0);
        static const char *const mod[3] = {"adaln_modulation_self_attn", "adaln_modulation_cross_attn",
                                           "adaln_modulation_mlp"};
        for (int j = 0; j < 3; j++) {
            char q[300];
            fmt(q, sizeof q, "%s.%s", p, mod[j]);
            linear(m, q, "1", lora, h, 0);
            linear(m, q, "2", 3 * h, lora, 0);
        }
    }
    linear(m, "net.final_layer", "adaln_modulation.1", lora, h, 0);
    linear(m, "net.final_layer", "adaln_modulation.2", 2 * h, lora, 0);
    linear(m, "net.final_layer", "linear", 64, h, 0);
    add(m, V_WEIGHT, "net.llm_adapter.embed", "weight", SHAPE(8 * h, ctx));
    for (unsigned i = 0; i < 2; i++) {
        for (int a = 0; a < 2; a++) {
            fmt(p, sizeof p, "net.llm_adapter.blocks.%u.%s", i, attn[a]);
            static const char *const proj[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
            for (int j = 0; j < 4; j++) linear(m, p, proj[j], ctx, ctx, 0);
        }
        fmt(p, sizeof p, "net.llm_adapter.blocks.%u", i);
        norm(m, p, "norm_self_attn.weight", ctx);
        norm(m, p, "norm_cross_attn.weight", ctx);
        norm(m, p, "norm_mlp.weight", ctx);
        linear(m, p, "mlp.0", 4 * ctx, ctx, 1);
        linear(m, p, "mlp.2", ctx, 4 * ctx, 1);
    }
    norm(m, "net.llm_adapter.norm", "weight", ctx);
    linear(m, "net.llm_adapter", "out_proj", ctx, ctx, 1);
}

/* PixArt-Sigma and Sana in their original layout: one modulation producer (t_block) for every
 * block, whose own modulation is a table; PixArt's feed-forward is linear, Sana's convolutional
 * (a gated inverted bottleneck). */
static void pixart_like(model *m, int sana) {
    uint64_t h = m->h, mlp = m->mlp, ctx = m->ctx;
    char p[256];
    if (sana) conv(m, "x_embedder", "proj", SHAPE(h, 32, 1, 1));
    else conv(m, "x_embedder", "proj", SHAPE(h, 4, 2, 2));
    linear(m, "t_embedder", "mlp.0", h, 256, 1);
    linear(m, "t_embedder", "mlp.2", h, h, 1);
    linear(m, "t_block", "1", 6 * h, h, 1);
    linear(m, "y_embedder.y_proj", "fc1", h, ctx, 1);
    linear(m, "y_embedder.y_proj", "fc2", h, h, 1);
    add(m, V_PARAM, "y_embedder", "y_embedding", SHAPE(300, ctx));
    if (sana) norm(m, "attention_y_norm", "weight", h);
    for (unsigned i = 0; i < m->blocks; i++) {
        fmt(p, sizeof p, "blocks.%u", i);
        add(m, V_PARAM, p, "scale_shift_table", SHAPE(6, h));
        char q[300];
        linear(m, fmt(q, sizeof q, "%s.attn", p), "qkv", 3 * h, h, !sana);
        linear(m, q, "proj", h, h, 1);
        linear(m, fmt(q, sizeof q, "%s.cross_attn", p), "q_linear", h, h, 1);
        linear(m, q, "kv_linear", 2 * h, h, 1);
        linear(m, q, "proj", h, h, 1);
        if (sana) {
            conv(m, p, "mlp.inverted_conv.conv", SHAPE(2 * mlp, h, 1, 1));
            conv(m, p, "mlp.depth_conv.conv", SHAPE(2 * mlp, 1, 3, 3));
            add(m, V_WEIGHT, p, "mlp.point_conv.conv.weight", SHAPE(h, mlp, 1, 1));
        } else {
            linear(m, p, "mlp.fc1", mlp, h, 1);
            linear(m, p, "mlp.fc2", h, mlp, 1);
        }
    }
    add(m, V_PARAM, "final_layer", "scale_shift_table", SHAPE(2, h));
    linear(m, "final_layer", "linear", 32, h, 1);
}

static void fam_pixart(model *m) { pixart_like(m, 0); }
static void fam_sana(model *m) { pixart_like(m, 1); }

/* Kandinsky 5: a few text blocks, then visual blocks with cross-attention; every block's
 * modulation is computed from the time embedding (width t = h/2 here). */
static void fam_kandinsky5(model *m) {
    uint64_t h = m->h, mlp = m->mlp, ctx = m->ctx, t = m->h / 2, hd = m->head_dim;
    char p[256], q[300];
    linear(m, "time_embeddings", "in_layer", t, h, 1);
    linear(m, "time_embeddings", "out_layer", t, t, 1);
    linear(m, "text_embeddings", "in_layer", h, ctx, 1);
    layernorm(m, "text_embeddings", "norm", h);
    linear(m, "pooled_text_embeddings", "in_layer", t, ctx, 1);
    layernorm(m, "pooled_text_embeddings", "norm", t);
    linear(m, "visual_embeddings", "in_layer", h, 64, 1);
    static const char *const kind[2] = {"text", "visual"};
    for (int k = 0; k < 2; k++)
        for (unsigned i = 0; i < (k ? m->blocks : 1); i++) {
            fmt(p, sizeof p, "%s_transformer_blocks.%u", kind[k], i);
            linear(m, fmt(q, sizeof q, "%s.%s_modulation", p, kind[k]), "out_layer", (k ? 9 : 6) * h, t, 1);
            static const char *const attn[2] = {"self_attention", "cross_attention"};
            for (int a = 0; a < 1 + k; a++) {
                fmt(q, sizeof q, "%s.%s", p, attn[a]);
                linear(m, q, "to_query", h, h, 1);
                linear(m, q, "to_key", h, h, 1);
                linear(m, q, "to_value", h, h, 1);
                norm(m, q, "query_norm.weight", hd);
                norm(m, q, "key_norm.weight", hd);
                linear(m, q, "out_layer", h, h, 1);
            }
            linear(m, p, "feed_forward.in_layer", mlp, h, 0);
            linear(m, p, "feed_forward.out_layer", h, mlp, 0);
        }
    linear(m, "out_layer.modulation", "out_layer", 2 * h, t, 1);
    linear(m, "out_layer", "out_layer", 64, h, 1);
}

/* Mochi 1 (original layout): an asymmetric joint transformer, the text stream half as wide
 * (hy); each block modulates both streams from the time embedding (mod_x, mod_y), and the last
 * block's text stream only feeds the attention (one modulation, no output projection or MLP). */
static void fam_mochi(model *m) {
    uint64_t h = m->h, hy = m->h / 2, mlp = m->mlp, ctx = m->ctx, hd = m->head_dim;
    char p[256];
    conv(m, "x_embedder", "proj", SHAPE(h, 12, 2, 2));
    linear(m, "t_embedder", "mlp.0", h, 256, 1);
    linear(m, "t_embedder", "mlp.2", h, h, 1);
    linear(m, "t5_y_embedder", "to_kv", 2 * h, ctx, 1);
    linear(m, "t5_y_embedder", "to_q", h, ctx, 1);
    linear(m, "t5_y_embedder", "to_out", h, h, 1);
    linear(m, "", "t5_yproj", hy, ctx, 1);
    add(m, V_PARAM, "", "pos_frequencies", SHAPE(3, h / hd, hd / 2));
    for (unsigned i = 0; i < m->blocks; i++) {
        const int last = i + 1 == m->blocks;
        fmt(p, sizeof p, "blocks.%u", i);
        linear(m, p, "mod_x", 4 * h, h, 1);
        linear(m, p, "mod_y", last ? hy : 4 * hy, h, 1);
        linear(m, p, "attn.qkv_x", 3 * h, h, 0);
        linear(m, p, "attn.qkv_y", 3 * h, hy, 0);
        norm(m, p, "attn.q_norm_x.weight", hd);
        norm(m, p, "attn.k_norm_x.weight", hd);
        linear(m, p, "attn.proj_x", h, h, 1);
        linear(m, p, "mlp_x.w1", 2 * mlp, h, 0);
        linear(m, p, "mlp_x.w2", h, mlp, 0);
        if (last) continue;
        linear(m, p, "attn.proj_y", hy, h, 1);
        linear(m, p, "mlp_y.w1", 2 * (mlp / 2), hy, 0);
        linear(m, p, "mlp_y.w2", hy, mlp / 2, 0);
    }
    linear(m, "final_layer", "mod", 2 * h, h, 1);
    linear(m, "final_layer", "linear", 48, h, 1);
}

/* AuraFlow (original layout): joint blocks (double_layers) then single ones, SwiGLU feed-forward
 * in multiples of 256, no biases in the blocks; every modulation comes from the time embedding
 * (modC, modX, modCX, modF). */
static void fam_auraflow(model *m) {
    uint64_t h = m->h, ctx = m->ctx, ff = (2 * m->mlp / 3 + 255) / 256 * 256;
    char p[256];
    linear(m, "t_embedder", "mlp.0", h, 256, 1);
    linear(m, "t_embedder", "mlp.2", h, h, 1);
    linear(m, "", "cond_seq_linear", h, ctx, 0);
    linear(m, "", "init_x_linear", h, 16, 1);
    add(m, V_PARAM, "", "positional_encoding", SHAPE(1, 256, h));
    add(m, V_PARAM, "", "register_tokens", SHAPE(1, 8, h));
    static const char *const ws[2] = {"w1", "w2"};
    for (unsigned i = 0; i < 2 * m->blocks; i++) {
        const int dbl = i < m->blocks;
        fmt(p, sizeof p, "%s_layers.%u", dbl ? "double" : "single", dbl ? i : i - m->blocks);
        char q[300];
        for (int s = 0; s < 1 + dbl; s++) {
            static const char *const wx[4] = {"q", "k", "v", "o"};
            for (int j = 0; j < 4; j++) linear(m, p, fmt(q, sizeof q, "attn.%s%s", ws[s], wx[j]), h, h, 0);
        }
        static const char *const mlps[2][2] = {{"mlp", NULL}, {"mlpC", "mlpX"}};
        static const char *const mods[2][2] = {{"modCX", NULL}, {"modC", "modX"}};
        for (int s = 0; s < 1 + dbl; s++) {
            linear(m, p, fmt(q, sizeof q, "%s.c_fc1", mlps[dbl][s]), ff, h, 0);
            linear(m, p, fmt(q, sizeof q, "%s.c_fc2", mlps[dbl][s]), ff, h, 0);
            linear(m, p, fmt(q, sizeof q, "%s.c_proj", mlps[dbl][s]), h, ff, 0);
            linear(m, p, fmt(q, sizeof q, "%s.1", mods[dbl][s]), 6 * h, h, 0);
        }
    }
    linear(m, "", "final_linear", 16, h, 0);
    linear(m, "modF", "1", 2 * h, h, 0);
}

/* A Llama-style decoder-only language model (Hugging Face transformers names), with grouped
 * key/value heads (kv width h/4) and a vocabulary of 8h. */
static void fam_llm(model *m) {
    uint64_t h = m->h, mlp = m->mlp, kv = m->h / 4, vocab = 8 * m->h;
    char p[256];
    add(m, V_WEIGHT, "model.embed_tokens", "weight", SHAPE(vocab, h));
    for (unsigned i = 0; i < m->blocks; i++) {
        fmt(p, sizeof p, "model.layers.%u", i);
        linear(m, p, "self_attn.q_proj", h, h, 0);
        linear(m, p, "self_attn.k_proj", kv, h, 0);
        linear(m, p, "self_attn.v_proj", kv, h, 0);
        linear(m, p, "self_attn.o_proj", h, h, 0);
        linear(m, p, "mlp.gate_proj", mlp, h, 0);
        linear(m, p, "mlp.up_proj", mlp, h, 0);
        linear(m, p, "mlp.down_proj", h, mlp, 0);
        norm(m, p, "input_layernorm.weight", h);
        norm(m, p, "post_attention_layernorm.weight", h);
    }
    norm(m, "model.norm", "weight", h);
    linear(m, "", "lm_head", vocab, h, 0);
}

/* No known family: a generic encoder with an int64 buffer and a scalar, as many exported
 * models have. */
static void fam_plain(model *m) {
    uint64_t h = m->h, mlp = m->mlp;
    char p[256];
    linear(m, "encoder", "embed", h, 64, 1);
    add(m, V_INDEX, "encoder", "position_ids", SHAPE(1, 64));
    for (unsigned i = 0; i < m->blocks; i++) {
        fmt(p, sizeof p, "encoder.layers.%u", i);
        layernorm(m, p, "norm1", h);
        linear(m, p, "attn.in_proj", 3 * h, h, 1);
        linear(m, p, "attn.out_proj", h, h, 1);
        layernorm(m, p, "norm2", h);
        linear(m, p, "fc1", mlp, h, 1);
        linear(m, p, "fc2", h, mlp, 1);
    }
    layernorm(m, "encoder", "final_norm", h);
    linear(m, "decoder", "out", 64, h, 1);
    add(m, V_CONST, "", "logit_scale", 0, NULL);
    m->t[m->n - 1].value = 4.6052f; /* ln 100, as CLIP-style models store it */
}

typedef struct family {
    const char *name, *description;
    void (*build)(model *m);
} family;

static const family families[] = {
    {"flux", "Flux.1 transformer (BFL layout): double_blocks, single_blocks", fam_flux},
    {"flux2", "FLUX.2 transformer (BFL layout): shared modulation, SwiGLU, no biases", fam_flux2},
    {"qwen-image", "Qwen-Image transformer (diffusers layout): transformer_blocks with img/txt streams", fam_qwen},
    {"wan", "Wan 2.x video transformer: blocks with self/cross attention, 5-D patch embedding", fam_wan},
    {"sd3", "Stable Diffusion 3 MMDiT: joint_blocks with x_block/context_block", fam_sd3},
    {"sdxl", "SDXL checkpoint: UNet (model.diffusion_model.*), two text encoders (conditioner.*), VAE", fam_sdxl},
    {"hunyuan-video", "HunyuanVideo transformer: token refiner, double_blocks, single_blocks", fam_hunyuan},
    {"z-image", "Z-Image transformer: noise/context refiners and layers", fam_zimage},
    {"anima", "Anima: Cosmos-Predict2 transformer (net.blocks) and its text adapter (llm_adapter)", fam_anima},
    {"pixart", "PixArt-Sigma transformer: blocks modulated by one t_block, cross-attention to T5", fam_pixart},
    {"sana", "Sana transformer: PixArt's names, linear attention, convolutional feed-forward", fam_sana},
    {"kandinsky5", "Kandinsky 5 transformer: text and visual blocks, modulation from the time embedding", fam_kandinsky5},
    {"mochi", "Mochi 1 video transformer: asymmetric joint blocks (mod_x, mod_y)", fam_mochi},
    {"auraflow", "AuraFlow transformer (Pony V7): double_layers and single_layers, modulation from the time embedding", fam_auraflow},
    {"llm", "Llama-style language model (model.layers.*, lm_head)", fam_llm},
    {"plain", "no known family: a generic encoder (encoder.layers.*)", fam_plain},
};
#define NFAMILIES (sizeof families / sizeof families[0])

/* ---------------------------------------------------------------------------------------- */
/* Values.                                                                                   */

/* Counter-based: value i of a tensor is a hash of (tensor key, i). Every value is
 * independent of the others, so the loop has no serial dependency (fast), and any row range
 * can be produced on its own, by any thread: the bytes depend neither on chunking nor on the
 * number of threads. */
static inline uint64_t mix64(uint64_t z) { /* the splitmix64 finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define GOLDEN 0x9e3779b97f4a7c15ull

/* The bulk stream: wyrand (a Weyl sequence through one 64x64->128 multiply), evaluated at
 * position i directly. */
#define WY_INC 0xa0761d6478bd642full
static inline uint64_t wy_at(uint64_t key, uint64_t i) {
    uint64_t x = key + i * WY_INC;
    __uint128_t m = (__uint128_t)x * (x ^ 0xe7037ed1a0b428dbull);
    return (uint64_t)(m >> 64) ^ (uint64_t)m;
}

/* Approximately standard normal from 48 random bits: the sum of four 12-bit uniforms
 * (Irwin-Hall, kurtosis 2.7, resolution 1/2365 of a standard deviation, finer than any
 * 16-bit float's step at these magnitudes). The heavy tail that matters for scale selection is
 * added on top by the caller. */
static inline float fast_normal(uint64_t u) {
    uint32_t s = (uint32_t)(u & 0xfff) + (uint32_t)((u >> 12) & 0xfff) + (uint32_t)((u >> 24) & 0xfff) +
                 (uint32_t)((u >> 36) & 0xfff);
    return ((float)s - 8190.0f) * (1.0f / 2364.83f); /* sd of the sum = 4096 / sqrt(3) */
}

/* An exact normal (Box-Muller) for the few per-row and per-column scales. */
static double normal(uint64_t key, uint64_t i) {
    uint64_t a = mix64(key + (2 * i + 1) * GOLDEN), b = mix64(key + (2 * i + 2) * GOLDEN);
    double u1 = ((a >> 11) + 1) * (1.0 / 9007199254740993.0);
    double u2 = (b >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Round to nearest even; the values here are finite. */
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* Per-tensor generator: a tensor is produced in chunks of whole rows, each chunk split
 * between threads. */
#define MAX_THREADS 64

typedef struct gen {
    const tspec *t;
    uint64_t key, rkey, ckey;   /* values, row scales, column scales */
    uint64_t rows, rowlen;
    float *col;                 /* per-column scale (V_WEIGHT) */
    float *tmp;                 /* one row in f32 per thread */
    float sd;
} gen;

#define OUTLIER_THRESHOLD 655u /* of 65536: about 1% of weights are outliers … */
#define OUTLIER_FACTOR 6.0f    /* … six times larger (kurtosis some tens, as in heavy-tailed real layers) */
#define WEIGHT_SD 0.02f

static int gen_init(gen *g, const tspec *t, uint64_t seed, uint64_t h, unsigned threads) {
    memset(g, 0, sizeof *g);
    g->t = t;
    uint64_t k = 0xcbf29ce484222325ull; /* FNV-1a of the name, then the seed */
    for (const unsigned char *c = (const unsigned char *)t->name; *c; c++) k = (k ^ *c) * 0x100000001b3ull;
    g->key = mix64(k ^ mix64(seed + GOLDEN));
    g->rkey = mix64(g->key + 1);
    g->ckey = mix64(g->key + 2);
    uint64_t ne = 1;
    for (unsigned i = 0; i < t->ndim; i++) ne *= t->shape[i];
    g->rows = t->ndim >= 2 ? t->shape[0] : 1;
    g->rowlen = g->rows ? ne / g->rows : 0;
    switch (t->kind) {
    case V_WEIGHT: g->sd = WEIGHT_SD; break;
    case V_BIAS: g->sd = 0.005f; break;
    case V_NORM: g->sd = 0.05f; break;
    case V_PARAM: g->sd = (float)(1.0 / sqrt((double)h)); break;
    default: g->sd = 0; break;
    }
    g->tmp = malloc((g->rowlen ? g->rowlen : 1) * threads * sizeof *g->tmp);
    g->col = t->kind == V_WEIGHT ? malloc((g->rowlen ? g->rowlen : 1) * sizeof *g->col) : NULL;
    if (!g->tmp || (t->kind == V_WEIGHT && !g->col)) return -1;
    if (t->kind == V_WEIGHT) {
        /* Input channels differ in scale too (log-normal, sigma 0.25), so a block of a
         * row has a different range from the whole row. */
        for (uint64_t c = 0; c < g->rowlen; c++) g->col[c] = (float)exp(0.25 * normal(g->ckey, c));
    }
    return 0;
}

static void gen_free(gen *g) {
    free(g->col);
    free(g->tmp);
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* One row of floats into v. */
static void row_values(const gen *g, uint64_t row, float *v) {
    const tspec *t = g->t;
    uint64_t n = g->rowlen, first = row * n;
    if (t->kind == V_CONST) {
        for (uint64_t k = 0; k < n; k++) v[k] = t->value;
    } else if (t->kind == V_WEIGHT) {
        /* Output channels differ in scale (log-normal, sigma 0.35): per-row scales beat one
         * scale per tensor. The top 16 bits of each draw pick the outliers. */
        float rs = g->sd * (float)exp(0.35 * normal(g->rkey, row));
        const float *col = g->col; /* allocated for every weight */
        for (uint64_t k = 0; k < n; k++) {
            uint64_t u = wy_at(g->key, first + k);
            float f = (uint32_t)(u >> 48) < OUTLIER_THRESHOLD ? OUTLIER_FACTOR * rs : rs;
            v[k] = fast_normal(u) * f * col[k];
        }
    } else {
        float b = t->kind == V_NORM ? 1.0f : 0.0f, sd = g->sd;
        for (uint64_t k = 0; k < n; k++) v[k] = b + sd * fast_normal(wy_at(g->key, first + k));
    }
}

/* Produces rows [row0, row0 + nrows) into out, in the tensor's dtype; tmp holds a row. */
static void gen_rows(const gen *g, uint64_t row0, uint64_t nrows, void *out, float *tmp) {
    const tspec *t = g->t;
    uint64_t n = g->rowlen;
    for (uint64_t r = 0; r < nrows; r++) {
        if (t->kind == V_INDEX) {
            uint64_t last = t->ndim ? t->shape[t->ndim - 1] : 1;
            for (uint64_t k = 0; k < n; k++) put_le64((uint8_t *)out + 8 * (r * n + k), ((row0 + r) * n + k) % last);
            continue;
        }
        row_values(g, row0 + r, tmp);
        const float *v = tmp;
        if (t->dtype == FEATHER_BF16) {
            uint16_t *o = (uint16_t *)out + r * n;
            for (uint64_t k = 0; k < n; k++) o[k] = to_bf16(v[k]);
        } else if (t->dtype == FEATHER_F16) {
            uint16_t *o = (uint16_t *)out + r * n;
            for (uint64_t k = 0; k < n; k++) o[k] = feather_f32_to_f16(v[k]);
        } else {
            memcpy((float *)out + r * n, v, n * sizeof *v);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Output.                                                                                   */

#define CHUNK_BYTES (4u << 20)

static feather_status fail(feather_error *err, feather_status code, const char *f, ...)
    __attribute__((format(printf, 3, 4)));
static feather_status fail(feather_error *err, feather_status code, const char *f, ...) {
    va_list ap;
    err->code = code;
    va_start(ap, f);
    vsnprintf(err->message, sizeof err->message, f, ap);
    va_end(ap);
    return code;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const tspec *const *)a)->name, (*(const tspec *const *)b)->name);
}

static const tspec *lookup(const tspec *const *sorted, size_t n, const char *name) {
    tspec key = {.name = (char *)name};
    const tspec *kp = &key;
    const tspec *const *f = bsearch(&kp, sorted, n, sizeof *sorted, by_name);
    return f ? *f : NULL;
}

typedef struct job {
    const model *m;
    const tspec *const *sorted; /* tensors by name */
    uint64_t seed;
    int zstd_level;
    int overwrite;
    unsigned threads;
    void *buf;
} job;

typedef struct part {
    const gen *g;
    uint64_t row0, nrows;
    void *out;
    float *tmp;
} part;

static void *part_run(void *arg) {
    part *p = arg;
    gen_rows(p->g, p->row0, p->nrows, p->out, p->tmp);
    return NULL;
}

/* Rows [row0, row0 + nrows) into out, split between up to 'threads' threads when there is
 * enough work to pay for starting them. */
static void gen_chunk(const gen *g, uint64_t row0, uint64_t nrows, void *out, unsigned threads) {
    uint64_t rowbytes = g->rowlen * (feather_dtype_bits(g->t->dtype) / 8);
    uint64_t want = nrows * g->rowlen / (1u << 16); /* one thread per 64K values */
    unsigned nt = want < threads ? (unsigned)(want ? want : 1) : threads;
    if (nt > nrows) nt = (unsigned)nrows;
    part parts[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (unsigned i = 0; i < nt; i++) {
        uint64_t a = nrows * i / nt, b = nrows * (i + 1) / nt;
        parts[i] = (part){g, row0 + a, b - a, (uint8_t *)out + a * rowbytes, g->tmp + (uint64_t)i * g->rowlen};
    }
    for (unsigned i = 1; i < nt; i++) started[i] = pthread_create(&tid[i], NULL, part_run, &parts[i]) == 0;
    for (unsigned i = 0; i < nt; i++)
        if (i == 0 || !started[i]) part_run(&parts[i]); /* a thread that did not start: do it here */
    for (unsigned i = 1; i < nt; i++)
        if (started[i]) pthread_join(tid[i], NULL);
}

/* Writes the tensors of one shard (or all of them: shard < 0) to path. */
static feather_status write_file(const job *j, const char *path, int shard, feather_error *err) {
    const model *m = j->m;
    feather_write_options wo;
    memset(&wo, 0, sizeof wo);
    wo.no_hashes = 1; /* ordinary checkpoints carry no feather hashes */
    wo.overwrite = j->overwrite;
    wo.zstd_level = j->zstd_level;
    feather_writer *w;
    feather_status st = feather_writer_open(&w, path, &wo, err);
    if (st) return st;
    if ((st = feather_writer_metadata(w, "format", "pt", err))) goto fail;
    for (size_t i = 0; i < m->nmeta; i++)
        if ((st = feather_writer_metadata(w, m->meta[i][0], m->meta[i][1], err))) goto fail;
    for (size_t i = 0; i < m->n; i++) {
        const tspec *t = &m->t[i];
        if (shard >= 0 && t->shard != (unsigned)shard) continue;
        if ((st = feather_writer_tensor(w, t->name, t->dtype, t->ndim, t->shape, err))) goto fail;
    }
    if ((st = feather_writer_begin(w, err))) goto fail;
    /* The writer fixes the layout (dtype, then name); produce tensors in that order. */
    for (size_t i = 0; i < feather_writer_count(w); i++) {
        const tspec *t = lookup(j->sorted, m->n, feather_writer_name_at(w, i));
        if (!t) {
            st = fail(err, FEATHER_E_INVALID, "%s: writer lists an undeclared tensor", path);
            goto fail;
        }
        gen g;
        if (gen_init(&g, t, j->seed, m->h, j->threads)) {
            gen_free(&g);
            st = fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
            goto fail;
        }
        uint64_t rowbytes = g.rowlen * (feather_dtype_bits(t->dtype) / 8);
        uint64_t per = rowbytes ? (CHUNK_BYTES / rowbytes ? CHUNK_BYTES / rowbytes : 1) : g.rows;
        for (uint64_t r = 0; r < g.rows && !st; r += per) {
            uint64_t nr = g.rows - r < per ? g.rows - r : per;
            if (feather_cancelled()) {
                st = fail(err, FEATHER_E_CANCELLED, "%s: interrupted", path);
                break;
            }
            gen_chunk(&g, r, nr, j->buf, j->threads);
            st = feather_writer_write(w, j->buf, nr * rowbytes, err);
        }
        gen_free(&g);
        if (st) goto fail;
    }
    return feather_writer_commit(w, err);
fail:
    feather_writer_abort(w);
    return st;
}

/* Assigns tensors to n shards in declaration order, about equal bytes each, none empty. */
static void assign_shards(model *m, unsigned n) {
    uint64_t total = 0, cum = 0;
    for (size_t i = 0; i < m->n; i++) total += m->t[i].nbytes;
    unsigned prev = 0;
    for (size_t i = 0; i < m->n; i++) {
        unsigned s = total ? (unsigned)((long double)cum * n / total) : 0;
        if (s >= n) s = n - 1;
        if (i == 0) s = 0;
        else {
            if (s < prev) s = prev;
            if (s > prev + 1) s = prev + 1;
            if (s == prev && m->n - i <= (size_t)(n - 1 - prev)) s = prev + 1;
        }
        m->t[i].shard = prev = s;
        cum += m->t[i].nbytes;
    }
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* The index names each shard by its base name (shards sit beside the index). */
static feather_status write_index(const model *m, const tspec *const *sorted, const char *path,
                                  char **shard_paths, feather_error *err) {
    uint64_t total = 0;
    cJSON *root = cJSON_CreateObject(), *md = cJSON_CreateObject(), *wm = cJSON_CreateObject();
    char num[32];
    int ok = root && md && wm;
    for (size_t i = 0; i < m->n; i++) total += m->t[i].nbytes;
    snprintf(num, sizeof num, "%llu", (unsigned long long)total);
    ok = ok && cJSON_AddItemToObject(md, "total_size", cJSON_CreateRaw(num));
    for (size_t i = 0; i < m->n && ok; i++) { /* sorted by name, as Hugging Face writes it */
        const char *sp = shard_paths[sorted[i]->shard], *base = strrchr(sp, '/');
        ok = cJSON_AddItemToObject(wm, sorted[i]->name, cJSON_CreateString(base ? base + 1 : sp)) != 0;
    }
    if (ok) {
        cJSON_AddItemToObject(root, "metadata", md);
        cJSON_AddItemToObject(root, "weight_map", wm);
        md = wm = NULL;
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    cJSON_Delete(md);
    cJSON_Delete(wm);
    if (!text) return fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
    /* Built under a temporary name and renamed, so an index never names missing shards. */
    size_t tl = strlen(path) + 16;
    char *tmp = malloc(tl);
    feather_status st = FEATHER_OK;
    if (!tmp) st = fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
    else {
        snprintf(tmp, tl, "%s.tmp%ld", path, (long)getpid());
        FILE *f = fopen(tmp, "w");
        int bad = !f || fputs(text, f) < 0 || fputc('\n', f) == EOF;
        if (f && fclose(f) != 0) bad = 1;
        if (bad || rename(tmp, path) != 0) {
            st = fail(err, FEATHER_E_IO, "%s: cannot write: %s", path, strerror(errno));
            remove(tmp);
        }
    }
    free(tmp);
    free(text);
    return st;
}

/* ---------------------------------------------------------------------------------------- */

static void usage(void) {
    printf("Usage: feather-sample --family NAME [options] -o OUT\n"
           "Write a synthetic safetensors checkpoint with a model family's real tensor names and\n"
           "shapes at a small width, and deterministic weight-like values.\n"
           "\n"
           "  --family NAME     model family (--list shows them)\n"
           "  --dtype D         bf16 | f16 | f32   (default: bf16)\n"
           "  --hidden H        hidden width, even, at least 8   (default: 64)\n"
           "  --blocks B        transformer blocks / UNet levels (default: 2)\n"
           "  --seed S          value seed (default: 0); same seed, same bytes\n"
           "  --shards N        split into N files NAME-0000i-of-0000N.safetensors beside OUT,\n"
           "                    which names the index (NAME.safetensors.index.json)\n"
           "  --zstd            write OUT.zst, zstd-compressed\n"
           "  --force           replace existing output files\n"
           "  -j N              threads (default: one per core; the bytes do not depend on it)\n"
           "  -n, --dry-run     print the tensor count and size, write nothing\n"
           "  -q                no summary line\n"
           "  --list            list the families\n"
           "  -h, --help        this help;   --version   version\n"
           "\n"
           "Widths follow h: feed-forward 4h, text context 2h, heads of 128 when h is a multiple\n"
           "of 128 (at least 256), else 2 heads. Exit status: 0 ok, 2 I/O error, 64 usage error,\n"
           "130 interrupted.\n");
}

static void free_model(model *m) {
    for (size_t i = 0; i < m->n; i++) free(m->t[i].name);
    free(m->t);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    cli_prog = "feather-sample";
    const char *fam_name = NULL, *out = NULL;
    unsigned long long hidden = 64, blocks = 2, seed = 0, shards = 1, threads = 0;
    int zstd = 0, force = 0, dry = 0, quiet = 0;
    feather_dtype dtype = FEATHER_BF16;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define NEED_ARG()                                                                         \
    do {                                                                                   \
        if (i + 1 >= argc) return cli_usage_error("option '%s' needs an argument", a);     \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "--version")) { cli_print_version(); return 0; }
        else if (!strcmp(a, "--list")) {
            for (size_t f = 0; f < NFAMILIES; f++) printf("%-14s %s\n", families[f].name, families[f].description);
            return 0;
        } else if (!strcmp(a, "--family")) { NEED_ARG(); fam_name = argv[++i]; }
        else if (!strcmp(a, "-o")) { NEED_ARG(); out = argv[++i]; }
        else if (!strcmp(a, "--dtype")) {
            NEED_ARG();
            const char *d = argv[++i];
            if (!strcmp(d, "bf16")) dtype = FEATHER_BF16;
            else if (!strcmp(d, "f16") || !strcmp(d, "fp16")) dtype = FEATHER_F16;
            else if (!strcmp(d, "f32") || !strcmp(d, "fp32")) dtype = FEATHER_F32;
            else return cli_usage_error("--dtype takes bf16, f16 or f32, not '%s'", d);
        } else if (!strcmp(a, "--hidden")) {
            NEED_ARG();
            if (cli_parse_uint(argv[++i], 65536, &hidden) || hidden < 8 || hidden % 2)
                return cli_usage_error("--hidden takes an even width from 8 to 65536");
        } else if (!strcmp(a, "--blocks")) {
            NEED_ARG();
            if (cli_parse_uint(argv[++i], 1000, &blocks) || blocks == 0)
                return cli_usage_error("--blocks takes a number from 1 to 1000");
        } else if (!strcmp(a, "--seed")) {
            NEED_ARG();
            if (cli_parse_uint(argv[++i], UINT64_MAX, &seed)) return cli_usage_error("--seed takes a non-negative integer");
        } else if (!strcmp(a, "--shards")) {
            NEED_ARG();
            if (cli_parse_uint(argv[++i], 99999, &shards) || shards == 0)
                return cli_usage_error("--shards takes a number from 1 to 99999");
        } else if (!strcmp(a, "-j")) {
            NEED_ARG();
            if (cli_parse_uint(argv[++i], MAX_THREADS, &threads) || threads == 0)
                return cli_usage_error("-j takes a number of threads from 1 to %d", MAX_THREADS);
        } else if (!strcmp(a, "--zstd")) zstd = 1;
        else if (!strcmp(a, "--force")) force = 1;
        else if (!strcmp(a, "-n") || !strcmp(a, "--dry-run")) dry = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = 1;
        else return cli_usage_error("unknown argument '%s'", a);
    }
    if (!fam_name) return cli_usage_error("--family is required (--list shows the families)");
    const family *fam = NULL;
    for (size_t f = 0; f < NFAMILIES; f++)
        if (!strcmp(families[f].name, fam_name)) fam = &families[f];
    if (!fam) return cli_usage_error("unknown family '%s' (--list shows the families)", fam_name);
    if (!out && !dry) return cli_usage_error("no output given (-o OUT)");
    if (shards > 1 && zstd) return cli_usage_error("--shards and --zstd cannot be combined");
    if (!threads) {
        const int n = feather_cores(); /* at least 1 */
        threads = n > MAX_THREADS ? MAX_THREADS : (unsigned long long)n;
    }

    model m;
    memset(&m, 0, sizeof m);
    m.dtype = dtype;
    m.h = hidden;
    m.mlp = 4 * hidden;
    m.ctx = 2 * hidden;
    m.head_dim = hidden >= 256 && hidden % 128 == 0 ? 128 : hidden / 2;
    m.blocks = (unsigned)blocks;
    fam->build(&m);
    if (m.oom) {
        free_model(&m);
        cli_error("out of memory");
        return FEATHER_EXIT_INPUT;
    }
    uint64_t total = 0, biggest = 0;
    for (size_t i = 0; i < m.n; i++) {
        total += m.t[i].nbytes;
        if (m.t[i].nbytes > biggest) biggest = m.t[i].nbytes;
    }
    if (shards > m.n) {
        free_model(&m);
        return cli_usage_error("--shards %llu: the model has only %zu tensors", shards, m.n);
    }
    if (dry) {
        printf("%s: %zu tensors, %llu bytes of data (largest tensor %llu bytes)\n", fam->name, m.n,
               (unsigned long long)total, (unsigned long long)biggest);
        free_model(&m);
        return 0;
    }

    /* Output names. */
    char **paths = calloc(shards, sizeof *paths);
    char *index = NULL;
    int rc = 0;
    if (!paths) { cli_error("out of memory"); free_model(&m); return FEATHER_EXIT_INPUT; }
    if (shards == 1) {
        size_t l = strlen(out) + 5;
        paths[0] = malloc(l);
        if (paths[0]) snprintf(paths[0], l, "%s%s", out, zstd && !ends_with(out, ".zst") ? ".zst" : "");
    } else {
        /* OUT names the index: NAME.safetensors.index.json (or NAME.safetensors, whose index
         * gets ".index.json" appended). */
        size_t ol = strlen(out), stem;
        if (ends_with(out, ".safetensors.index.json")) stem = ol - strlen(".safetensors.index.json");
        else if (ends_with(out, ".safetensors")) stem = ol - strlen(".safetensors");
        else {
            free(paths);
            free_model(&m);
            return cli_usage_error("with --shards, -o names the index: NAME.safetensors.index.json");
        }
        index = malloc(stem + 32);
        if (index) snprintf(index, stem + 32, "%.*s.safetensors.index.json", (int)stem, out);
        for (unsigned s = 0; s < shards; s++) {
            paths[s] = malloc(stem + 48);
            if (paths[s])
                snprintf(paths[s], stem + 48, "%.*s-%05u-of-%05u.safetensors", (int)stem, out, s + 1,
                         (unsigned)shards);
        }
        assign_shards(&m, (unsigned)shards);
    }
    for (unsigned s = 0; s < shards; s++)
        if (!paths[s]) rc = 1;
    if (shards > 1 && !index) rc = 1;

    tspec **sorted = malloc(m.n * sizeof *sorted);
    size_t bufsize = CHUNK_BYTES;
    /* A row longer than a chunk is produced whole. */
    for (size_t i = 0; i < m.n; i++) {
        uint64_t rows = m.t[i].ndim >= 2 ? m.t[i].shape[0] : 1;
        uint64_t rb = rows ? m.t[i].nbytes / rows : 0;
        if (rb > bufsize) bufsize = (size_t)rb;
    }
    void *buf = malloc(bufsize);
    if (rc || !sorted || !buf) {
        cli_error("out of memory");
        rc = FEATHER_EXIT_INPUT;
        goto cleanup;
    }
    for (size_t i = 0; i < m.n; i++) sorted[i] = &m.t[i];
    qsort(sorted, m.n, sizeof *sorted, by_name);

    cli_install_signals();
    job j = {.m = &m, .sorted = (const tspec *const *)sorted, .seed = seed, .overwrite = force,
             .threads = (unsigned)threads, .buf = buf};
    feather_error err = {0};
    feather_status st = FEATHER_OK;
    double t0 = now_s();
    /* Outputs that exist are named before anything is written, in one line. */
    for (unsigned s = 0; !force && !st && s <= shards; s++) {
        const char *path = s < shards ? paths[s] : index;
        if (path && access(path, F_OK) == 0) st = fail(&err, FEATHER_E_EXISTS, "%s: output exists (--force replaces it)", path);
    }
    unsigned done = 0; /* files this run completed */
    while (!st && done < shards && !(st = write_file(&j, paths[done], shards > 1 ? (int)done : -1, &err))) done++;
    if (!st && index) st = write_index(&m, j.sorted, index, paths, &err);
    if (st) {
        /* No half-written sharded model: remove the shards this run completed. */
        if (shards > 1)
            for (unsigned s = 0; s < done; s++) remove(paths[s]);
        err.code = st;
        rc = cli_fail(&err);
    } else if (!quiet) {
        double el = now_s() - t0;
        fprintf(stderr, "%s: %s, %zu tensors, %.1f MB in %.2f s (%.0f MB/s)\n", index ? index : paths[0],
                fam->name, m.n, total / 1e6, el, el > 0 ? total / 1e6 / el : 0.0);
    }
cleanup:
    for (unsigned s = 0; s < shards; s++) free(paths[s]);
    free(paths);
    free(index);
    free(sorted);
    free(buf);
    free_model(&m);
    return rc;
}
