/* Selection: which tensors are converted, and why the others are kept.
 *
 * A tensor is converted when it is the 2-D weight of a linear layer in a float dtype whose
 * shape the kernel takes (N a multiple of 8, K of 16: feather_gemm_supported), not an embedding
 * table, a norm's scale or a LoRA factor, not a part of a full checkpoint other than its
 * diffusion model, and neither a preset nor --exclude keeps it. Everything else is copied byte
 * for byte, and the plan says why. */
#include "internal.h"
#include "feather/convert.h"

#include <cJSON.h>

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A name component boundary on each side: "img_in" must not match "img_in_proj". */
#define B0 "(^|\\.)"
#define B1 "(\\.|$)"

/* Flux.1, FLUX.2 and Chroma in their original (BFL) names or in diffusers names. FLUX.2's
 * blocks take their modulation from three shared layers, Chroma's from one small network
 * (distilled_guidance_layer): in diffusers names neither has the per-block norm linears that
 * tell Flux.1 apart, so their own layers do. */
static const char *const flux_detect[] = {B0 "(double_blocks\\.[0-9]+\\.img_attn\\.|single_transformer_blocks\\.[0-9]+\\.)",
                                          B0 "(single_blocks\\.[0-9]+\\.linear1\\.|transformer_blocks\\.[0-9]+\\.norm1_context\\."
                                             "|double_stream_modulation_img\\.|distilled_guidance_layer\\.)", NULL};
static const char *const qwen_detect[] = {B0 "transformer_blocks\\.[0-9]+\\.img_mod\\.", B0 "transformer_blocks\\.[0-9]+\\.txt_mod\\.", NULL};
/* Wan in its original names or in diffusers names (attn1/attn2, condition_embedder). */
static const char *const wan_detect[] = {B0 "blocks\\.[0-9]+\\.(self_attn\\.q|attn1\\.to_q)\\.",
                                         B0 "(blocks\\.[0-9]+\\.cross_attn\\.|condition_embedder\\.)", NULL};
/* SD3 in its original names, or in diffusers names (Flux's blocks without single blocks, which
 * Flux's signature needs and comes first). */
static const char *const sd3_detect[] = {B0 "(joint_blocks\\.[0-9]+\\.x_block\\.|transformer_blocks\\.[0-9]+\\.norm1_context\\.linear\\.)", NULL};
/* The LDM UNets: SDXL, and SD 1.x/2.x without its class embedding (label_emb), in their original
 * names or in diffusers names (down_blocks, mid_block). */
static const char *const sdxl_detect[] = {B0 "(input_blocks|down_blocks)\\.[0-9]+\\.", B0 "(middle_block|mid_block)\\.", NULL};
/* HunyuanVideo 1.0 (fused qkv), 1.5 (q, k and v apart) and HunyuanImage 2.1: their text
 * refiner (in diffusers names too: otherwise 1.0 and 2.1 would pass for Flux, 1.5 for SD3), or
 * their double blocks' attention names. */
static const char *const hunyuan_detect[] = {
    B0 "(double_blocks\\.[0-9]+\\.img_attn_(qkv|q)\\.|txt_in\\.individual_token_refiner\\.|context_embedder\\.token_refiner\\.)",
    NULL};
static const char *const zimage_detect[] = {B0 "noise_refiner\\.", B0 "context_refiner\\.", NULL};
static const char *const hidream_detect[] = {B0 "double_stream_blocks\\.[0-9]+\\.block\\.", B0 "single_stream_blocks\\.[0-9]+\\.block\\.", NULL};
/* Language models in Hugging Face names (Llama, Qwen, Mistral, Gemma, Phi-3, Mixtral, …). */
static const char *const llm_detect[] = {B0 "layers\\.[0-9]+\\.self_attn\\.(q_proj|qkv_proj|o_proj)\\.",
                                         B0 "layers\\.[0-9]+\\.(mlp|block_sparse_moe|feed_forward)\\.", NULL};
/* LTX-Video and LTX-2 (LTX-2 adds an audio stream beside the video one), in their original names
 * or in diffusers names (proj_in, time_embed). */
static const char *const ltx_detect[] = {B0 "(audio_)?patchify_proj\\.|^(transformer\\.)?(audio_)?proj_in\\.",
                                         B0 "([a-z0-9_]*adaln_single|time_embed\\.emb\\.timestep_embedder)\\.", NULL};
/* Cosmos-Predict2 and the models built on it (Anima): blocks modulated through adaLN-LoRA, in
 * their original names or in diffusers names (norm1.linear_1, time_embed.t_embedder). */
static const char *const cosmos_detect[] = {
    B0 "(blocks\\.[0-9]+\\.adaln_modulation_self_attn|transformer_blocks\\.[0-9]+\\.norm1\\.linear_1)\\.",
    B0 "(x_embedder\\.proj|time_embed\\.t_embedder)\\.", NULL};

/* PixArt-alpha/Sigma and Sana, which share their top-level names: in the original names the
 * modulation producer t_block beside the cross-attention's q_linear; in diffusers names PixArt's
 * adaln_single beside its patch embedding, Sana's time_embed beside its convolutional FFN. */
static const char *const pixart_detect[] = {B0 "(t_block|adaln_single|time_embed)\\.",
                                            B0 "(blocks\\.[0-9]+\\.cross_attn\\.q_linear|pos_embed\\.proj"
                                               "|transformer_blocks\\.[0-9]+\\.ff\\.conv_inverted)\\.", NULL};
/* Kandinsky 5 (the same names in its own code, diffusers and ComfyUI). */
static const char *const kandinsky5_detect[] = {B0 "visual_transformer_blocks\\.[0-9]+\\.visual_modulation\\.",
                                                B0 "pooled_text_embeddings\\.", NULL};
/* Mochi 1 in its original names (per-block mod_x/mod_y) or in diffusers names (whose blocks
 * would otherwise pass for SD3's: norm1_context.linear). */
static const char *const mochi_detect[] = {B0 "(t5_yproj|time_embed\\.pooler)\\.",
                                           B0 "(blocks\\.[0-9]+\\.mod_x|transformer_blocks\\.[0-9]+\\.attn1\\.add_q_proj)\\.", NULL};

/* AuraFlow (and Pony V7, built on it) in its original names (double_layers, single_layers) or in
 * diffusers names (joint_transformer_blocks, which Flux's and SD3's signatures do not take). */
static const char *const auraflow_detect[] = {B0 "(double_layers\\.[0-9]+\\.modX|joint_transformer_blocks\\.[0-9]+\\.norm1_context)\\.",
                                              B0 "(cond_seq_linear|time_step_proj)\\.", NULL};

/* No signature: what every file matches. */
static const char *const any_file[] = {NULL};

/* Order matters for detection: the more specific signature first (HunyuanVideo before Flux,
 * both have double_blocks), language models after the diffusion models (a diffusion model's
 * file may carry its text encoder), and last the one every file matches. */
static const feather_preset presets[] = {
    {"hunyuan-video", "HunyuanVideo 1.0/1.5, HunyuanImage 2.1: keeps img_in, txt_in, time_in, time_r_in, vector_in, "
                      "guidance_in, byt5_in, vision_in, final_layer and modulation layers (and their diffusers names)",
     hunyuan_detect,
     B0 "(img_in|txt_in|time_in|time_r_in|vector_in|guidance_in|byt5_in|vision_in|final_layer)" B1 "|" B0
        "(img_mod|txt_mod|modulation|adaLN_modulation)" B1
     /* diffusers names: the embedders (context_embedder holds the text refiner, context_embedder_2
      * the ByT5 projection), the output norm/projection and the blocks' adaLN linears */
     "|" B0 "(x_embedder|image_embedder|context_embedder|context_embedder_2|time_embed|time_text_embed|time_guidance_embed|"
        "norm_out)" B1 "|^(transformer\\.)?proj_out\\." "|" B0 "(norm1|norm1_context|norm)\\.linear" B1},
    {"flux", "Flux.1, FLUX.2, Chroma: keeps img_in, time_in, vector_in, guidance_in, txt_in, final_layer and every modulation "
             "layer (FLUX.2's shared ones and Chroma's distilled_guidance_layer included)",
     flux_detect,
     B0 "(img_in|time_in|vector_in|guidance_in|txt_in|final_layer)" B1 "|" B0 "(img_mod|txt_mod|modulation|adaLN_modulation)" B1
     "|" B0 "(double_stream_modulation_img|double_stream_modulation_txt|single_stream_modulation|distilled_guidance_layer)" B1
     /* diffusers names: embedders, the output norm/projection and the adaLN linears */
     "|" B0 "(x_embedder|context_embedder|time_text_embed|time_guidance_embed|norm_out)" B1 "|^(transformer\\.)?proj_out\\."
     "|" B0 "(norm1|norm1_context|norm)\\.linear\\."},
    {"qwen-image", "Qwen-Image: keeps time_text_embed, img_in, txt_in, norm_out, proj_out, img_mod, txt_mod",
     qwen_detect,
     B0 "(time_text_embed|img_in|txt_in|norm_out|proj_out|img_mod|txt_mod)" B1},
    {"wan", "Wan 2.x: keeps patch_embedding, text_embedding, time_embedding, time_projection, head, img_emb and modulation",
     wan_detect,
     B0 "(patch_embedding|text_embedding|time_embedding|time_projection|head|img_emb|modulation)" B1
     /* diffusers names: the embedders and the output projection */
     "|" B0 "condition_embedder" B1 "|^(model\\.diffusion_model\\.)?proj_out\\."},
    {"mochi", "Mochi 1: keeps t_embedder, t5_y_embedder, t5_yproj, final_layer and the blocks' modulation (mod_x, mod_y)",
     mochi_detect,
     B0 "(t_embedder|t5_y_embedder|t5_yproj|final_layer|mod_x|mod_y)" B1
     /* diffusers names: the embedders, the output norm/projection and the blocks' modulation */
     "|" B0 "(time_embed|norm_out)" B1 "|^(transformer\\.)?proj_out\\." "|" B0 "(norm1|norm1_context)\\.linear(_1)?" B1},
    {"sd3", "SD3/SD3.5 MMDiT: keeps x_embedder, t_embedder, y_embedder, context_embedder, pos_embed, final_layer and adaLN_modulation",
     sd3_detect,
     B0 "(x_embedder|t_embedder|y_embedder|context_embedder|pos_embed|final_layer|adaLN_modulation)" B1
     /* diffusers names: the embedders, the output norm/projection and the adaLN linears */
     "|" B0 "(time_text_embed|norm_out)" B1 "|^(transformer\\.)?proj_out\\." "|" B0 "(norm1|norm1_context)\\.linear\\."},
    {"sdxl", "SDXL, SD 1.x/2.x UNet: keeps time_embed, label_emb, the time-embedding projections of residual blocks (emb_layers) "
             "and the output head; in diffusers names time_embedding, add_embedding and time_emb_proj",
     sdxl_detect,
     B0 "(time_embed|label_emb|emb_layers|time_embedding|add_embedding|time_emb_proj)" B1 "|^(model\\.diffusion_model\\.)?out\\."},
    {"cosmos", "Cosmos-Predict2, Anima: keeps x_embedder, t_embedder, final_layer, llm_adapter and the adaLN modulation layers",
     cosmos_detect,
     B0 "(x_embedder|t_embedder|final_layer|llm_adapter)" B1 "|" B0 "adaln_modulation(_self_attn|_cross_attn|_mlp)?" B1
     /* diffusers names: the embedders, the text and image-context projections, the output
      * norm/projection and the blocks' adaLN-LoRA linears */
     "|" B0 "(patch_embed|time_embed|crossattn_proj|img_context_proj|norm_out)" B1 "|^(transformer\\.)?proj_out\\."
     "|" B0 "norm[123]\\.linear_[12]" B1},
    {"z-image", "Z-Image, Lumina 2, OmniGen2: keeps x_embedder, t_embedder, cap_embedder, final_layer and adaLN_modulation; "
                "in diffusers names time_caption_embed, ref_image_patch_embedder, norm_out and the blocks' norm1 linears",
     zimage_detect,
     B0 "(x_embedder|t_embedder|cap_embedder|final_layer|adaLN_modulation)" B1
     /* diffusers names: Z-Image's per-patch-size embedder and output layer and its SigLIP
      * embedder; Lumina 2's (and OmniGen2's, in its own code) time and caption embedder,
      * reference-image embedder, output norm and modulated blocks' norm1.linear */
     "|" B0 "(all_x_embedder|all_final_layer|siglip_embedder)" B1
     "|" B0 "(time_caption_embed|ref_image_patch_embedder|norm_out)" B1 "|" B0 "norm1\\.linear" B1},
    {"hidream", "HiDream-I1/E1: keeps t_embedder, p_embedder, x_embedder, caption_projection, final_layer and adaLN_modulation",
     hidream_detect,
     B0 "(t_embedder|p_embedder|x_embedder|caption_projection|final_layer|adaLN_modulation)" B1},
    {"ltx", "LTX-Video, LTX-2: keeps patchify_proj, caption_projection, proj_out and every adaln_single (video, audio, prompt and "
            "audio-video cross-attention)",
     ltx_detect,
     B0 "(audio_)?(patchify_proj|caption_projection)" B1 "|" B0 "[a-z0-9_]*adaln_single" B1
     /* the input and output projections only, not a block's */
     "|^(model\\.diffusion_model\\.)?(audio_)?proj_out\\." "|^(transformer\\.)?(audio_)?proj_in\\."
     /* diffusers names: the time embedders with their adaLN linears, and LTX-2's prompt and
      * audio-video cross-attention modulation */
     "|" B0 "(audio_)?(time_embed|prompt_adaln)" B1 "|" B0 "av_cross_attn_[a-z0-9_]+" B1},
    {"auraflow", "AuraFlow, Pony V7: keeps t_embedder, cond_seq_linear, init_x_linear, final_linear and the modulation layers "
                 "(modC, modX, modCX, modF)",
     auraflow_detect,
     B0 "(t_embedder|cond_seq_linear|init_x_linear|final_linear|modC|modX|modCX|modF)" B1
     /* diffusers names: the embedders, the output norm/projection and the blocks' adaLN linears */
     "|" B0 "(pos_embed|time_step_proj|context_embedder|norm_out)" B1 "|^(transformer\\.)?proj_out\\."
     "|" B0 "(norm1|norm1_context)\\.linear" B1},
    {"pixart", "PixArt-alpha/Sigma, Sana: keeps t_block (every block's modulation), t_embedder, y_embedder, the size, aspect "
               "and guidance embedders, x_embedder and final_layer",
     pixart_detect,
     B0 "(t_block|t_embedder|y_embedder|csize_embedder|ar_embedder|cfg_embedder|x_embedder|final_layer)" B1
     /* diffusers names: adaln_single (PixArt) or time_embed (Sana), the caption projection, the
      * patch embedding and the output projection */
     "|" B0 "(adaln_single|time_embed|caption_projection|pos_embed|patch_embed)" B1 "|^(transformer\\.)?proj_out\\."},
    {"kandinsky5", "Kandinsky 5: keeps the time, text, pooled-text and visual embeddings, the blocks' modulation and the output "
                   "layer",
     kandinsky5_detect,
     B0 "(time_embeddings|text_embeddings|pooled_text_embeddings|visual_embeddings|text_modulation|visual_modulation)" B1
     /* the output layer and its modulation, not a block's out_layer */
     "|^(model\\.diffusion_model\\.|transformer\\.)?out_layer\\."},
    /* The output head, as fp8 language-model checkpoints keep it, and a mixture of experts' router
     * (mlp.gate or .router, not gate_proj), whose few rows pick every token's experts. */
    {"llm", "language models (Hugging Face names): keeps lm_head and the experts' routers (mlp.gate, mlp.router, "
            "block_sparse_moe.gate, feed_forward.router)",
     llm_detect,
     B0 "lm_head" B1 "|" B0 "(mlp|block_sparse_moe|feed_forward)\\.(gate|router)" B1},
    /* A model of no known family keeps what the presets above keep by its usual names: a layer
     * computing modulation (modulation, adaLN, adaln_*, and in diffusers names the linears of an
     * adaptive norm: norm1.linear, norm_out.linear_1, …), a time or timestep embedder, and an
     * output head over a vocabulary. */
    {"generic", "no family detected: keeps layers named for modulation or adaLN (and adaptive norms' linears), time and "
                "timestep embedders, and lm_head",
     any_file,
     B0 "[A-Za-z0-9_]*(modulation|adaLN|adaln)[A-Za-z0-9_]*" B1 "|" B0 "norm[A-Za-z0-9_]*\\.linear(_[0-9])?" B1 "|" B0
        "(t_embedder|time_in|time_embed|time_embedding|time_embeddings|time_embedder|time_proj|time_projection|"
        "timestep_embedder|time_text_embed|time_guidance_embed|time_caption_embed|time_step_embed|time_step_proj|lm_head)" B1},
};

#define NPRESETS (sizeof presets / sizeof presets[0])

size_t feather_preset_count(void) { return NPRESETS; }
const feather_preset *feather_preset_at(size_t i) { return i < NPRESETS ? &presets[i] : NULL; }
const feather_preset *feather_preset_find(const char *name) {
    for (size_t i = 0; i < NPRESETS; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

const char *feather_action_name(feather_action a) {
    switch (a) {
    case FEATHER_KEEP: return "keep";
    case FEATHER_CONVERT: return "convert";
    case FEATHER_REPACK: return "repack";
    case FEATHER_REQUANT: return "requantize";
    case FEATHER_DROP: return "drop";
    case FEATHER_DEQUANT: return "dequantize";
    }
    return "?";
}

const char *feather_layout_name(feather_layout l) { return l == FEATHER_LAYOUT_COMFY ? "comfy" : "packed"; }

struct feather_plan {
    feather_plan_entry *e;
    size_t n, selected; /* entries; those converted, repacked or requantised */
    size_t lora;        /* LoRA factors kept */
    int full;           /* a full checkpoint (is_full_checkpoint) */
    const char *preset;
    uint64_t bytes_in, bytes_out;
    char path[4096]; /* the input, for feather_plan_check's message */
};

static feather_status compile_re(regex_t *re, const char *pat, const char *what, feather_error *err) {
    int rc = regcomp(re, pat, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char msg[200];
        regerror(rc, re, msg, sizeof msg);
        return feather_fail(err, FEATHER_E_ARG, "%s '%s': invalid regular expression: %s", what, pat, msg);
    }
    return FEATHER_OK;
}

static int name_matches(const regex_t *re, const char *s) { return regexec(re, s, 0, NULL, 0) == 0; }

static const feather_preset *detect(feather_reader *r, feather_error *err, feather_status *st) {
    *st = FEATHER_OK;
    for (size_t p = 0; p < NPRESETS; p++) {
        int all = 1;
        for (const char *const *d = presets[p].detect_all; *d && all; d++) {
            regex_t re;
            if ((*st = compile_re(&re, *d, "preset signature", err))) return NULL;
            int any = 0;
            for (size_t i = 0; i < feather_count(r) && !any; i++)
                any = name_matches(&re, feather_tensor_at(r, i)->name);
            regfree(&re);
            all = any;
        }
        if (all) return &presets[p];
    }
    return NULL;
}

/* Embedding tables are lookups, not matmuls: they stay as they are (T5's relative attention
 * bias and DiT's class embedding_table are tables too). */
#define EMBEDDING_RE B0 "(embed_tokens|embed_positions|tok_embeddings|word_embeddings|position_embeddings|" \
                     "token_type_embeddings|wte|wpe|shared|embedding|embeddings|token_embedding|" \
                     "pos_embedding|position_embedding|pos_embed|embedding_table|embed_tokens_per_layer|" \
                     "relative_attention_bias)\\.weight$"

/* Factors of a LoRA and its kin: PEFT's lora_A / lora_B (also with the adapter's name,
 * lora_A.default.weight), MLX's lora_a / lora_b, kohya's lora_down / lora_up / lora_mid,
 * diffusers' lora.down / lora.up and lora_linear_layer.down / .up, and LyCORIS's LoHa
 * (hada_w1_a … hada_t2) and LoKr (lokr_w1 … lokr_t2) factors. They are a low-rank update that
 * loaders apply beside the base weight (or merge into it) in its own dtype; none of them reads a
 * packed fp8 factor, so converting one makes a file nothing loads. */
#define LORA_RE "(^|[._])(lora(_[ABab]|_down|_up|_mid|\\.down|\\.up|_linear_layer\\.(down|up))(\\.[^.]+)?(\\.weight)?|" \
                "hada_(w[12]_[ab]|t[12])|lokr_(w[12](_[ab])?|t[12]))$"

/* A full checkpoint holds the diffusion model under this prefix beside its text encoders and VAE
 * (text_encoders., conditioner., cond_stage_model., first_stage_model., …). The kernel is for the
 * diffusion model, the one part run at every step: the fp8 loaders take it out of such a file
 * (stripping the prefix, dropping the rest), while the text encoders and the VAE are loaded from
 * the same file by stock modules that read no packed weight, and run once per prompt or image. */
#define DIFFUSION_PREFIX "model.diffusion_model."

static int in_diffusion_model(const char *name) { return !strncmp(name, DIFFUSION_PREFIX, sizeof DIFFUSION_PREFIX - 1); }

/* Whether the reader is a full checkpoint: some tensors under the diffusion prefix, some not. */
static int is_full_checkpoint(feather_reader *r) {
    int in = 0, out = 0;
    for (size_t i = 0; i < feather_count(r) && !(in && out); i++) {
        if (in_diffusion_model(feather_tensor_at(r, i)->name)) in = 1;
        else out = 1;
    }
    return in && out;
}

/* Whether the layer of weight "X.weight" has a ComfyUI tag: an X.comfy_quant tensor, or an entry
 * in its shard's _quantization_metadata. */
static int has_comfy_tag(feather_reader *r, const feather_tensor *w) {
    const char *wname = w->name;
    char layer[4096];
    snprintf(layer, sizeof layer, "%.*s", (int)(strlen(wname) - 7), wname);
    if (feather_quant_layer(r, w->shard, layer)) return 1;
    char tag[4200];
    snprintf(tag, sizeof tag, "%s.comfy_quant", layer);
    return feather_find(r, tag) != NULL;
}


/* Whether the input is a feather packed file: its fp8 weights are [K/16, N, 16]. */
static int input_is_packed(feather_reader *r) {
    const char *l = feather_metadata_get(r, 0, "feather.layout");
    return l && !strcmp(l, "packed");
}

static void set(feather_plan_entry *e, feather_action a, const char *fmt, ...) FEATHER_PRINTF(3, 4);
static void set(feather_plan_entry *e, feather_action a, const char *fmt, ...) {
    va_list ap;
    e->action = a;
    va_start(ap, fmt);
    vsnprintf(e->reason, sizeof e->reason, fmt, ap);
    va_end(ap);
}

/* An FP4 weight's format by its values per block scale (feather_fp4's group). */
static const char *fp4_name(unsigned group) { return group == 32 ? "MXFP4" : "NVFP4"; }

/* Keeps an entry for the reason given, or where it is an fp8 weight the packed layout cannot keep
 * as it is (deq), dequantises it to BF16: the packed layout's loader runs every layer it does not
 * convert as a plain weight, ignoring its scale. */
static void keep(feather_plan_entry *e, int deq, const char *fmt, ...) FEATHER_PRINTF(3, 4);
static void keep(feather_plan_entry *e, int deq, const char *fmt, ...) {
    char why[sizeof e->reason];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (!deq) {
        set(e, FEATHER_KEEP, "%s", why);
        return;
    }
    set(e, FEATHER_DEQUANT, "%s; %s dequantised to BF16 (the loader runs it unscaled)", why,
        e->fp4 ? fp4_name(e->fp4) : "fp8");
    e->bytes_out = 2 * e->n * e->k;
}

static feather_status check_options(const feather_convert_options *o, feather_error *err) {
    if (o->layout == FEATHER_LAYOUT_PACKED && o->quant.format != FEATHER_FP8_E5M2)
        return feather_fail(err, FEATHER_E_ARG,
                            "--layout packed needs --format e5m2 (the kernel upcasts e5m2 by byte placement); use --layout comfy for e4m3fn");
    if (o->layout == FEATHER_LAYOUT_COMFY && o->quant.mode != FEATHER_SCALE_NONE &&
        o->quant.mode != FEATHER_SCALE_ABSMAX && o->quant.mode != FEATHER_SCALE_TENSOR)
        return feather_fail(err, FEATHER_E_ARG,
                            "--layout comfy: ComfyUI reads one scale per tensor; use --scale none, absmax or tensor");
    return FEATHER_OK;
}

/* Whether "….X.weight" names a norm's scale (X: norm, q_norm, layernorm, attention_norm1, …),
 * which some models store per head as [heads, head_dim] (Cohere's q_norm and k_norm, AuraFlow's
 * multi-head norms): 2-D, but no linear layer. */
static int is_norm_scale(const char *name) {
    const char *end = name + strlen(name) - strlen(".weight"), *c = end;
    while (c > name && c[-1] != '.') c--;
    for (; c + 4 <= end; c++)
        if (!strncasecmp(c, "norm", 4)) return 1;
    return 0;
}

/* Decides one tensor. regexes: exclude[], include[], preset_keep (may be NULL). Returns 1 for
 * a LoRA factor, else 0. */
static int decide(feather_reader *r, feather_plan_entry *e, const feather_convert_options *o,
                  const regex_t *inc, const regex_t *exc, const regex_t *preset_keep, const regex_t *embedding,
                  const regex_t *lora, const char *preset, int packed_in, int full) {
    const feather_tensor *t = e->tensor;
    char shp[128];
    feather_shape_str(t, shp, sizeof shp);
    e->bytes_in = e->bytes_out = t->nbytes;
    const char *dt = feather_dtype_name(t->dtype);
    /* fp8 stands for every quantised weight feather reads: fp8, and FP4 (NVFP4, MXFP4) */
    feather_fp4 f4;
    const int fp4 = feather_fp4_of(r, t, &f4), fp8 = feather_is_fp8(t->dtype) || fp4;
    /* The rules below see the weight's name: compressed-tensors' X.weight_packed is X.weight. */
    char wname[4200];
    snprintf(wname, sizeof wname, "%.*s", (int)(strlen(t->name) - (fp4 && feather_fp4_divides(t) ? 7 : 0)), t->name);
    const char *name = wname;

    if (name_matches(lora, name)) {
        set(e, FEATHER_KEEP, "LoRA factor %s %s: LoRA loaders apply it beside its base weight, not through the kernel",
            dt, shp);
        return 1;
    }
    if (!feather_ends_with(name, ".weight")) {
        set(e, FEATHER_KEEP, "not a weight: the name does not end in .weight (%s %s)", dt, shp);
        return 0;
    }
    if (!feather_is_float(t->dtype) && !fp8) {
        set(e, FEATHER_KEEP, "dtype %s is not a float weight", dt);
        return 0;
    }
    /* fp8 inputs: a feather packed weight [K/16, N, 16] or a plain [N, K] one; FP4 [N, K/2]. */
    uint64_t n, k;
    if (fp8 && packed_in && t->ndim == 3 && t->shape[2] == 16) {
        n = t->shape[1];
        k = t->shape[0] * 16;
    } else if (t->ndim == 2) {
        n = t->shape[0];
        k = t->shape[1] << fp4;
    } else {
        set(e, FEATHER_KEEP, "%u-D %s %s (only 2-D linear weights are converted)", t->ndim, dt, shp);
        return 0;
    }
    /* From here on an fp8 weight that is not converted is dequantised in the packed layout, and
     * in the comfy layout where its layer has no ComfyUI tag (a legacy scaled_fp8 file's: next
     * to the output's per-layer header ComfyUI would load it unscaled); the parts of a full
     * checkpoint outside its diffusion model are kept as they are. */
    const int outside = full && !in_diffusion_model(name);
    const int deq = fp8 && !outside && (o->layout == FEATHER_LAYOUT_PACKED || !has_comfy_tag(r, t));
    e->n = n;
    e->k = k;
    e->scale = fp4 ? f4.scale : fp8 ? feather_fp8_scale_of(r, t->name) : NULL;
    e->scale2 = f4.scale2;
    e->fp4 = f4.group;
    if (name_matches(embedding, name)) {
        keep(e, deq, "embedding table %s %s (a lookup, not a matmul)", dt, shp);
        return 0;
    }
    if (is_norm_scale(name)) {
        keep(e, deq, "a norm's scale %s %s, not a linear layer", dt, shp);
        return 0;
    }
    for (size_t i = 0; i < o->nexclude; i++)
        if (name_matches(&exc[i], name)) {
            keep(e, deq, "excluded by --exclude '%s'", o->exclude[i]);
            return 0;
        }
    int included = 0;
    for (size_t i = 0; i < o->ninclude && !included; i++) included = name_matches(&inc[i], name);
    if (!included && outside) {
        set(e, FEATHER_KEEP, "%s %s outside the diffusion model (" DIFFUSION_PREFIX ") of a full checkpoint: text "
                             "encoders and VAE load with stock modules", dt, shp);
        return 0;
    }
    /* (In the comfy layout an fp8 layer of the preset's stays fp8: ComfyUI reads it either way.) */
    if (!included && preset_keep && name_matches(preset_keep, name) && (!fp8 || deq)) {
        keep(e, deq, "preset %s keeps this layer at full precision", preset);
        return 0;
    }
    /* The converter takes exactly the shapes the matmul takes (gemm.h states the rule). */
    if (!feather_gemm_supported(n, k, FEATHER_SCALE_TENSOR, 0)) {
        keep(e, deq, "shape %s: the kernel needs N a multiple of 8 and K a multiple of 16", shp);
        return 0;
    }
    uint64_t nscales;
    if (fp8) {
        nscales = e->scale ? e->scale->nelem : 1;
        feather_fp8 in_fmt = feather_fp8_of(t->dtype);
        /* ComfyUI reads one scale per tensor: other scales cannot travel into the comfy layout;
         * nor can 2-D blocks of scales into feather's, whose scales follow the weight's rows, nor
         * the swizzled 8-bit ones of MXFP8. */
        feather_scale_layout L;
        const int one_scale = o->layout == FEATHER_LAYOUT_COMFY && nscales > 1;
        const int blocks = !feather_quant_scales_of(r, t, e->scale, e->scale2, e->fp4, n, k, &L) && (L.rows || L.swizzled);
        if (fp4) {
            set(e, FEATHER_REQUANT, "%s %s: requantised to %s %s", fp4_name(e->fp4), shp,
                feather_fp8_name(o->quant.format),
                feather_fp4_keeps_blocks(&o->quant, e->fp4) ? "in its own blocks (lossless but for the scales' rounding)"
                : e->fp4 == 32 ? "(error adds up; none at block:32 or block:16)"
                               : "(error adds up; none at block:16)");
            nscales = feather_scale_count(&o->quant, n, k);
        } else if (in_fmt == o->quant.format && !one_scale && !blocks) {
            set(e, FEATHER_REPACK, "%s %s %s already %s: layout changes, values do not", dt, shp,
                packed_in ? "packed" : "plain", feather_fp8_name(in_fmt));
        } else if (one_scale || blocks) {
            set(e, FEATHER_REQUANT, "%s %s: %s requantised to %s (error adds up)", dt, shp,
                !blocks ? "its scales" : L.swizzled ? "its MXFP8 block scales" : L.rows > 1 ? "its scales of 128 x 128 blocks" : "its scales of 128-wide groups",
                one_scale ? "the comfy layout's one per tensor" : "scales of its rows");
            nscales = feather_scale_count(&o->quant, n, k);
        } else {
            set(e, FEATHER_REQUANT, "%s %s: %s requantised to %s (error adds up)", dt, shp,
                feather_fp8_name(in_fmt), feather_fp8_name(o->quant.format));
            feather_quant_options q = o->quant;
            nscales = feather_scale_count(&q, n, k);
        }
    } else {
        set(e, FEATHER_CONVERT, "%slinear weight %s %s", included ? "--include: " : "", dt, shp);
        nscales = feather_scale_count(&o->quant, n, k);
    }
    /* Values cast into blocks that do not divide the rows cannot be: such a weight is kept (a
     * quantised one dequantised where its loader needs that); a repacked one keeps its scales. */
    if (e->action != FEATHER_REPACK && o->quant.mode == FEATHER_SCALE_BLOCK && k % o->quant.group) {
        keep(e, deq, "K=%llu is not a multiple of the block size %u", (unsigned long long)k, o->quant.group);
        return 0;
    }
    e->bytes_out = n * k + 4 * nscales;
    return 0;
}

/* Drops the entry of tensor t of r (none where t is NULL) for the reason given. The entries are
 * r's tensors in order (a scan for t made the plan of a file of DeepSeek-V3's 94k tensors take 7.6 s). */
static void drop(feather_plan *p, feather_reader *r, const feather_tensor *t, const char *fmt, ...) FEATHER_PRINTF(4, 5);
static void drop(feather_plan *p, feather_reader *r, const feather_tensor *t, const char *fmt, ...) {
    const size_t j = t ? feather_tensor_index(r, t) : (size_t)-1;
    if (j >= p->n) return;
    va_list ap;
    va_start(ap, fmt);
    p->e[j].action = FEATHER_DROP;
    vsnprintf(p->e[j].reason, sizeof p->e[j].reason, fmt, ap);
    va_end(ap);
    p->e[j].bytes_out = 0;
}

const feather_plan_entry *feather_plan_find(const feather_plan *p, const feather_reader *r, const char *name) {
    char buf[4200];
    for (int packed = 0; packed < 2; packed++) {
        if ((size_t)snprintf(buf, sizeof buf, "%s%s", name, packed ? "_packed" : "") >= sizeof buf) return NULL;
        const feather_tensor *t = feather_find(r, buf);
        const size_t i = t ? feather_tensor_index(r, t) : (size_t)-1;
        if (i < p->n && p->e[i].name && !strcmp(p->e[i].name, name)) return &p->e[i];
    }
    return NULL;
}

/* Whether the weight of the layer a ".comfy_quant" tag names is converted, repacked,
 * requantised or dequantised by the plan. */
static int layer_converted(const struct feather_plan *p, const feather_reader *r, const char *tag) {
    char w[4200];
    snprintf(w, sizeof w, "%.*s.weight", (int)(strlen(tag) - strlen(".comfy_quant")), tag);
    const feather_plan_entry *e = feather_plan_find(p, r, w);
    return e && e->action != FEATHER_KEEP;
}

feather_status feather_plan_new(feather_plan **out, feather_reader *r,
                                const feather_convert_options *o, feather_error *err) {
    feather_status st = check_options(o, err);
    if (st) return st;
    const feather_preset *pre = NULL;
    if (o->preset && strcmp(o->preset, "auto") && strcmp(o->preset, "none")) {
        pre = feather_preset_find(o->preset);
        if (!pre) {
            char list[512] = "";
            for (size_t i = 0; i < NPRESETS; i++) {
                strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
                strncat(list, presets[i].name, sizeof list - strlen(list) - 1);
            }
            return feather_fail(err, FEATHER_E_ARG, "unknown preset '%s' (known: %s, none)", o->preset, list);
        }
    } else if (!o->preset || !strcmp(o->preset, "auto")) {
        pre = detect(r, err, &st);
        if (st) return st;
    }

    struct feather_plan *p = calloc(1, sizeof *p);
    regex_t *inc = calloc(o->ninclude + 1, sizeof *inc), *exc = calloc(o->nexclude + 1, sizeof *exc);
    regex_t preset_re, embedding, lora;
    size_t ninc = 0, nexc = 0;
    int have_keep = 0, have_emb = 0, have_lora = 0;
    if (!p || !inc || !exc) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto done; }
    for (; ninc < o->ninclude; ninc++)
        if ((st = compile_re(&inc[ninc], o->include[ninc], "--include", err))) goto done;
    for (; nexc < o->nexclude; nexc++)
        if ((st = compile_re(&exc[nexc], o->exclude[nexc], "--exclude", err))) goto done;
    if (pre) {
        if ((st = compile_re(&preset_re, pre->keep, "preset", err))) goto done;
        have_keep = 1;
    }
    if ((st = compile_re(&embedding, EMBEDDING_RE, "embedding rule", err))) goto done;
    have_emb = 1;
    if ((st = compile_re(&lora, LORA_RE, "LoRA rule", err))) goto done;
    have_lora = 1;
    p->preset = pre ? pre->name : "none";
    p->n = feather_count(r);
    p->e = calloc(p->n ? p->n : 1, sizeof *p->e);
    if (!p->e) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto done; }
    int packed_in = input_is_packed(r);
    p->full = is_full_checkpoint(r);
    for (size_t i = 0; i < p->n; i++) {
        feather_plan_entry *e = &p->e[i];
        e->tensor = feather_tensor_at(r, i);
        e->name = e->tensor->name;
        p->lora += (size_t)decide(r, e, o, inc, exc, have_keep ? &preset_re : NULL, &embedding, &lora, p->preset, packed_in, p->full);
        /* An fp8 input's scales are used as they are, so their shape must say how. */
        feather_scale_layout L;
        const int used = e->action == FEATHER_REPACK || e->action == FEATHER_REQUANT || e->action == FEATHER_DEQUANT;
        if (!used) continue;
        const int fit = feather_quant_scales_of(r, e->tensor, e->scale, e->scale2, e->fp4, e->n, e->k, &L);
        if (fit && e->fp4) {
            st = feather_fail(err, FEATHER_E_INVALID, "%s: tensor '%s': the scales of %s weight '%s' fit no layout: %s",
                              feather_reader_path(r), e->scale->name, fp4_name(e->fp4), e->tensor->name,
                              e->fp4 == 32 ? "E8M0 block scales [N, K/32] and no tensor scale"
                                           : "E4M3 block scales in [N/128, K/64] tiles (rounded up) or [N, K/16] in row "
                                             "order, and one float tensor scale");
            goto done;
        }
        if (fit == -2) {
            st = feather_fail(err, FEATHER_E_UNSUPPORTED, "%s: tensor '%s': %s scales %s of fp8 weight '%s': feather reads "
                              "F32, BF16 or F16 scales, and the 8-bit block scales of ComfyUI's mxfp8 and nvfp4 layers",
                              feather_reader_path(r), e->scale->name, feather_dtype_name(e->scale->dtype),
                              feather_shape_str(e->scale, (char[64]){0}, 64), e->tensor->name);
            goto done;
        }
        if (fit) {
            char ss[64];
            feather_shape_str(e->scale, ss, sizeof ss);
            st = feather_fail(err, FEATHER_E_INVALID,
                              "%s: tensor '%s': scales %s fit no scale layout of weight '%s' [%llu, %llu] (one, [N], "
                              "[N, K/G] for a block size G that is a multiple of 16 and divides K, or [N/128, K/128] "
                              "or [N, K/128] blocks, rounded up)",
                              feather_reader_path(r), e->scale->name, ss, e->tensor->name, (unsigned long long)e->n,
                              (unsigned long long)e->k);
            goto done;
        }
    }
    /* Scale tensors consumed by a repacked/requantised weight, and metadata tensors that the
     * output regenerates, are dropped from the copy. */
    size_t selected = 0;
    for (size_t i = 0; i < p->n; i++) {
        feather_plan_entry *e = &p->e[i];
        if (e->action == FEATHER_KEEP || e->action == FEATHER_DROP) continue;
        selected += e->action != FEATHER_DEQUANT;
        const char *how = e->action == FEATHER_DEQUANT ? "applied to its BF16 values" : "rewritten with it";
        drop(p, r, e->scale, "scale of %s, %s", e->tensor->name, how);
        drop(p, r, e->scale2, "scale of %s, %s", e->tensor->name, how);
        /* compressed-tensors' FP4 weight leaves its name X.weight_packed for X.weight */
        if (e->fp4 && feather_fp4_divides(e->tensor) && !(e->name = strndup(e->name, strlen(e->name) - 7))) {
            st = feather_fail(err, FEATHER_E_NOMEM, "out of memory");
            goto done;
        }
        if (e->name != e->tensor->name && feather_find(r, e->name)) {
            st = feather_fail(err, FEATHER_E_INVALID, "%s: tensor '%s': its weight '%s' would be written as '%s', "
                              "which the file holds too", feather_reader_path(r), e->name, e->tensor->name, e->name);
            goto done;
        }
        /* An activation scale is calibrated for the input's format, and goes with a weight that
         * leaves it: ComfyUI would quantise an e4m3 layer's activations with an NVFP4 layer's
         * one, six times too small (clipping), and a BF16 layer has none. */
        if (e->action == FEATHER_DEQUANT ||
            (e->action == FEATHER_REQUANT && (e->fp4 || feather_fp8_of(e->tensor->dtype) != o->quant.format))) {
            static const char *const tails[] = {"input_scale", "scale_input", "input_global_scale"};
            const size_t len = strlen(e->name) - strlen("weight");
            for (int t = 0; t < 3; t++) {
                char name[4200];
                snprintf(name, sizeof name, "%.*s%s", (int)len, e->name, tails[t]);
                drop(p, r, feather_find(r, name), "activation scale of %s, for the format it leaves", e->tensor->name);
            }
        }
    }
    for (size_t i = 0; i < p->n; i++) {
        feather_plan_entry *e = &p->e[i];
        if (e->action != FEATHER_KEEP) continue;
        if (feather_ends_with(e->tensor->name, ".comfy_quant")) {
            /* A layer kept as it is keeps its tag: without it ComfyUI would load its fp8
             * weight as a plain one, unscaled. */
            if (!layer_converted(p, r, e->tensor->name)) {
                set(e, FEATHER_KEEP, "ComfyUI layer metadata of a layer kept as it is");
                continue;
            }
            set(e, FEATHER_DROP, "ComfyUI layer metadata, regenerated for the output");
            e->bytes_out = 0;
        } else if (feather_is_scaled_fp8_marker(e->tensor) &&
                   (!p->full || in_diffusion_model(e->tensor->name))) {
            set(e, FEATHER_DROP, "legacy scaled_fp8 marker, replaced by per-layer metadata");
            e->bytes_out = 0;
        }
    }
    p->selected = selected;
    snprintf(p->path, sizeof p->path, "%s", feather_reader_path(r));
    for (size_t i = 0; i < p->n; i++) {
        p->bytes_in += p->e[i].bytes_in;
        p->bytes_out += p->e[i].bytes_out;
    }
done:
    for (size_t i = 0; i < ninc; i++) regfree(&inc[i]);
    for (size_t i = 0; i < nexc; i++) regfree(&exc[i]);
    if (have_keep) regfree(&preset_re);
    if (have_emb) regfree(&embedding);
    if (have_lora) regfree(&lora);
    free(inc);
    free(exc);
    if (st) {
        feather_plan_free(p);
        return st;
    }
    *out = p;
    return FEATHER_OK;
}

void feather_plan_free(feather_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++)
        if (p->e[i].tensor && p->e[i].name != p->e[i].tensor->name) free((char *)p->e[i].name);
    free(p->e);
    free(p);
}
size_t feather_plan_count(const feather_plan *p) { return p->n; }
const feather_plan_entry *feather_plan_at(const feather_plan *p, size_t i) { return i < p->n ? &p->e[i] : NULL; }
const char *feather_plan_preset(const feather_plan *p) { return p->preset; }
feather_status feather_plan_check(const feather_plan *p, feather_error *err) {
    if (p->selected) return FEATHER_OK;
    if (p->lora)
        return feather_fail(err, FEATHER_E_NOTHING,
                            "%s: nothing to convert: a LoRA (%zu factors, kept as they are: LoRA loaders apply them beside "
                            "the base weights, not through the kernel; see --plan)",
                            p->path, p->lora);
    return feather_fail(err, FEATHER_E_NOTHING,
                        "%s: nothing to convert: none of its %zu tensors is a 2-D linear weight of a shape the kernel "
                        "takes outside the kept layers (see --plan)",
                        p->path, p->n);
}

uint64_t feather_plan_bytes_in(const feather_plan *p) { return p->bytes_in; }
uint64_t feather_plan_bytes_out(const feather_plan *p) { return p->bytes_out; }
