/* Selection: presets, name/shape rules, --include/--exclude, fp8 inputs. */
#include "test.h"
#include "testutil.h"
#include "feather/convert.h"

#include <regex.h>
#include <stdlib.h>
#include <unistd.h>

static const feather_plan_entry *entry(const feather_plan *p, const char *name) {
    for (size_t i = 0; i < feather_plan_count(p); i++)
        if (!strcmp(feather_plan_at(p, i)->tensor->name, name)) return feather_plan_at(p, i);
    return NULL;
}

/* The plan of the file at path with options o (NULL: the defaults). */
static feather_plan *plan_for(const char *path, const feather_convert_options *o, feather_reader **r) {
    feather_error err = {0};
    feather_plan *p = NULL;
    feather_convert_options defaults;
    if (!o) {
        feather_convert_defaults(&defaults);
        o = &defaults;
    }
    if (feather_open(r, path, 0, &err)) {
        test_fail(__FILE__, __LINE__, "open: %s", err.message);
        return NULL;
    }
    if (feather_plan_new(&p, *r, o, &err)) {
        test_fail(__FILE__, __LINE__, "plan: %s", err.message);
        feather_close(*r);
        return NULL;
    }
    return p;
}

static const tspec flux_like[] = {
    {"img_in.weight", FEATHER_BF16, 2, {64, 64}},
    {"img_in.bias", FEATHER_BF16, 1, {64}},
    {"double_blocks.0.img_attn.qkv.weight", FEATHER_BF16, 2, {192, 64}},
    {"double_blocks.0.img_mod.lin.weight", FEATHER_BF16, 2, {384, 64}},
    {"double_blocks.0.img_attn.norm.query_norm.scale", FEATHER_BF16, 1, {16}},
    {"single_blocks.0.linear1.weight", FEATHER_BF16, 2, {448, 64}},
    {"single_blocks.0.linear2.weight", FEATHER_BF16, 2, {64, 320}},
    {"single_blocks.0.modulation.lin.weight", FEATHER_BF16, 2, {192, 64}},
    {"final_layer.linear.weight", FEATHER_BF16, 2, {64, 64}},
    {"odd.weight", FEATHER_BF16, 2, {44, 64}},
    {"conv.weight", FEATHER_BF16, 4, {32, 32, 3, 3}},
    {"ids.weight", FEATHER_I32, 2, {32, 32}},
};

TEST(select_flux_preset_detected_and_applied) {
    const char *path = test_path("flux.safetensors");
    REQUIRE(tu_write_model(path, flux_like, sizeof flux_like / sizeof flux_like[0], 1, NULL) == 0);
    feather_reader *r;
    feather_plan *p = plan_for(path, NULL, &r);
    REQUIRE(p);
    CHECK(!strcmp(feather_plan_preset(p), "flux"));
    CHECK(entry(p, "double_blocks.0.img_attn.qkv.weight")->action == FEATHER_CONVERT);
    CHECK(entry(p, "single_blocks.0.linear1.weight")->action == FEATHER_CONVERT);
    CHECK(entry(p, "single_blocks.0.linear2.weight")->action == FEATHER_CONVERT);
    const char *kept[] = {"img_in.weight", "double_blocks.0.img_mod.lin.weight",
                          "single_blocks.0.modulation.lin.weight", "final_layer.linear.weight"};
    for (size_t i = 0; i < 4; i++) {
        const feather_plan_entry *e = entry(p, kept[i]);
        CHECK(e->action == FEATHER_KEEP);
        CHECK_STR_CONTAINS(e->reason, "preset flux");
    }
    CHECK(entry(p, "img_in.bias")->action == FEATHER_KEEP);
    CHECK_STR_CONTAINS(entry(p, "odd.weight")->reason, "multiple of 8");
    CHECK_STR_CONTAINS(entry(p, "conv.weight")->reason, "4-D");
    CHECK_STR_CONTAINS(entry(p, "ids.weight")->reason, "I32");
    /* bytes: converted [192,64] bf16 → 192*64 fp8 + 192 channel scales */
    CHECK_EQ_U(entry(p, "double_blocks.0.img_attn.qkv.weight")->bytes_out, 192 * 64 + 4 * 192);
    feather_plan_free(p);
    feather_close(r);
}

TEST(select_include_exclude_and_preset_none) {
    const char *path = test_path("flux.safetensors");
    REQUIRE(tu_write_model(path, flux_like, sizeof flux_like / sizeof flux_like[0], 1, NULL) == 0);
    const char *inc[] = {"img_mod"}, *exc[] = {"linear2", "img_mod\\.lin"};
    feather_convert_options o;
    feather_convert_defaults(&o);
    o.include = inc;
    o.ninclude = 1;
    feather_reader *r;
    feather_plan *p = plan_for(path, &o, &r);
    REQUIRE(p);
    CHECK(entry(p, "double_blocks.0.img_mod.lin.weight")->action == FEATHER_CONVERT);
    feather_plan_free(p);
    feather_close(r);

    o.exclude = exc;
    o.nexclude = 2; /* exclude wins over include */
    p = plan_for(path, &o, &r);
    REQUIRE(p);
    CHECK(entry(p, "double_blocks.0.img_mod.lin.weight")->action == FEATHER_KEEP);
    CHECK_STR_CONTAINS(entry(p, "single_blocks.0.linear2.weight")->reason, "--exclude 'linear2'");
    feather_plan_free(p);
    feather_close(r);

    feather_convert_defaults(&o);
    o.preset = "none";
    p = plan_for(path, &o, &r);
    REQUIRE(p);
    CHECK(entry(p, "img_in.weight")->action == FEATHER_CONVERT);
    CHECK(entry(p, "final_layer.linear.weight")->action == FEATHER_CONVERT);
    feather_plan_free(p);
    feather_close(r);
}

TEST(select_errors_are_one_line) {
    const char *path = test_path("m.safetensors");
    const tspec t[] = {{"a.weight", FEATHER_F16, 2, {12, 16}}, {"b.bias", FEATHER_F16, 1, {16}}};
    REQUIRE(tu_write_model(path, t, 2, 1, NULL) == 0);
    feather_error err = {0};
    feather_reader *r;
    REQUIRE(feather_open(&r, path, 0, &err) == FEATHER_OK);
    feather_plan *p;
    feather_convert_options o;
    feather_convert_defaults(&o);
    /* nothing to convert: the plan is made (to be shown), then refused */
    REQUIRE(feather_plan_new(&p, r, &o, &err) == FEATHER_OK);
    CHECK_EQ_U(feather_plan_count(p), 2);
    CHECK(feather_plan_at(p, 0)->action == FEATHER_KEEP && feather_plan_at(p, 0)->reason[0]);
    CHECK(feather_plan_check(p, &err) == FEATHER_E_NOTHING);
    CHECK_STR_CONTAINS(err.message, "nothing to convert");
    CHECK_STR_CONTAINS(err.message, "m.safetensors");
    feather_plan_free(p);
    o.preset = "nosuch";
    CHECK(feather_plan_new(&p, r, &o, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "unknown preset 'nosuch'");
    CHECK_STR_CONTAINS(err.message, "qwen-image");
    o.preset = NULL;
    const char *bad[] = {"(unclosed"};
    o.exclude = bad;
    o.nexclude = 1;
    CHECK(feather_plan_new(&p, r, &o, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "--exclude '(unclosed'");
    o.nexclude = 0;
    o.layout = FEATHER_LAYOUT_COMFY;
    o.quant.mode = FEATHER_SCALE_BLOCK;
    o.quant.group = 128;
    CHECK(feather_plan_new(&p, r, &o, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "one scale per tensor");
    feather_close(r);
}

/* Each family's signature tensors select its preset. */
TEST(select_detects_every_family) {
    /* a and b carry the family's signature, kept must be kept, conv must be converted */
    static const struct { const char *family, *a, *b, *kept, *conv; } fam[] = {
        {"flux", "double_blocks.0.img_attn.qkv.weight", "single_blocks.0.linear1.weight", "guidance_in.in_layer.weight", "double_blocks.0.img_mlp.0.weight"},
        {"qwen-image", "transformer_blocks.0.img_mod.1.weight", "transformer_blocks.0.txt_mod.1.weight", "time_text_embed.timestep_embedder.linear_1.weight", "transformer_blocks.0.attn.to_q.weight"},
        {"wan", "blocks.0.self_attn.q.weight", "blocks.0.cross_attn.k.weight", "time_projection.1.weight", "blocks.0.ffn.0.weight"},
        {"wan", "blocks.0.attn1.to_q.weight", "condition_embedder.text_embedder.linear_1.weight", "condition_embedder.time_proj.weight", "blocks.0.attn2.to_k.weight"},
        {"wan", "blocks.0.attn1.to_q.weight", "condition_embedder.time_embedder.linear_1.weight", "proj_out.weight", "blocks.0.ffn.net.0.proj.weight"},
        {"sd3", "joint_blocks.0.x_block.attn.qkv.weight", "joint_blocks.0.context_block.attn.qkv.weight", "context_embedder.weight", "joint_blocks.0.x_block.mlp.fc1.weight"},
        {"sd3", "transformer_blocks.0.norm1_context.linear.weight", "transformer_blocks.0.attn.add_q_proj.weight", "transformer_blocks.0.norm1.linear.weight", "transformer_blocks.0.ff_context.net.2.weight"},
        {"sd3", "transformer_blocks.0.norm1_context.linear.weight", "time_text_embed.timestep_embedder.linear_1.weight", "time_text_embed.text_embedder.linear_2.weight", "transformer_blocks.0.attn.to_q.weight"},
        {"sdxl", "input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight", "middle_block.1.transformer_blocks.0.ff.net.2.weight", "input_blocks.1.0.emb_layers.1.weight", "output_blocks.3.1.proj_out.weight"},
        {"sdxl", "model.diffusion_model.input_blocks.1.1.proj_in.weight", "model.diffusion_model.middle_block.1.proj_in.weight", "model.diffusion_model.label_emb.0.0.weight", "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"},
        {"hunyuan-video", "double_blocks.0.img_attn_qkv.weight", "single_blocks.0.linear1.weight", "vector_in.in_layer.weight", "double_blocks.0.img_mlp.fc1.weight"},
        /* HunyuanVideo 1.0, 1.5 and HunyuanImage 2.1 in diffusers names: told by the text refiner
         * inside context_embedder, not passed for Flux or SD3 */
        {"hunyuan-video", "single_transformer_blocks.0.attn.to_q.weight", "context_embedder.token_refiner.refiner_blocks.0.attn.to_q.weight", "time_text_embed.guidance_embedder.linear_1.weight", "transformer_blocks.0.attn.add_q_proj.weight"},
        {"hunyuan-video", "transformer_blocks.0.norm1_context.linear.weight", "context_embedder.token_refiner.refiner_blocks.0.norm_out.linear.weight", "time_embed.timestep_embedder.linear_1.weight", "transformer_blocks.0.ff_context.net.2.weight"},
        {"hunyuan-video", "transformer_blocks.0.norm1_context.linear.weight", "context_embedder.token_refiner.refiner_blocks.0.norm_out.linear.weight", "image_embedder.linear_1.weight", "transformer_blocks.0.attn.to_add_out.weight"},
        {"hunyuan-video", "single_transformer_blocks.0.norm.linear.weight", "context_embedder.token_refiner.refiner_blocks.0.attn.to_k.weight", "context_embedder_2.linear_1.weight", "single_transformer_blocks.0.proj_mlp.weight"},
        /* Cosmos-Predict2 (and Anima's transformer) in diffusers names: adaLN-LoRA norm linears */
        {"cosmos", "transformer_blocks.0.norm1.linear_1.weight", "time_embed.t_embedder.linear_1.weight", "transformer_blocks.0.norm3.linear_2.weight", "transformer_blocks.0.attn2.to_q.weight"},
        {"cosmos", "transformer_blocks.0.norm1.linear_1.weight", "time_embed.t_embedder.linear_1.weight", "patch_embed.proj.weight", "transformer_blocks.0.ff.net.2.weight"},
        {"cosmos", "transformer_blocks.0.norm1.linear_1.weight", "time_embed.t_embedder.linear_2.weight", "norm_out.linear_1.weight", "transformer_blocks.1.attn1.to_out.0.weight"},
        /* LTX-Video and LTX-2 in diffusers names */
        {"ltx", "proj_in.weight", "time_embed.emb.timestep_embedder.linear_1.weight", "time_embed.linear.weight", "transformer_blocks.0.attn1.to_q.weight"},
        {"ltx", "proj_in.weight", "time_embed.emb.timestep_embedder.linear_1.weight", "caption_projection.linear_1.weight", "transformer_blocks.0.ff.net.0.proj.weight"},
        {"ltx", "audio_proj_in.weight", "time_embed.emb.timestep_embedder.linear_2.weight", "av_cross_attn_video_scale_shift.linear.weight", "transformer_blocks.0.audio_to_video_attn.to_q.weight"},
        {"ltx", "audio_proj_in.weight", "time_embed.emb.timestep_embedder.linear_2.weight", "audio_prompt_adaln.linear.weight", "transformer_blocks.0.audio_ff.net.2.weight"},
        /* Z-Image in diffusers names: per-patch-size embedder and output layer */
        {"z-image", "noise_refiner.0.attention.to_q.weight", "context_refiner.0.attention.to_k.weight", "all_x_embedder.2-1.weight", "layers.0.attention.to_out.0.weight"},
        {"z-image", "noise_refiner.0.attention.to_q.weight", "context_refiner.0.attention.to_k.weight", "all_final_layer.2-1.linear.weight", "layers.1.feed_forward.w2.weight"},
        /* SDXL and SD 1.x UNets in diffusers names (a pipeline's unet folder) */
        {"sdxl", "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.weight", "mid_block.attentions.0.proj_in.weight", "down_blocks.0.resnets.1.time_emb_proj.weight", "up_blocks.1.attentions.2.transformer_blocks.0.ff.net.2.weight"},
        {"sdxl", "down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight", "mid_block.resnets.0.time_emb_proj.weight", "add_embedding.linear_1.weight", "mid_block.attentions.0.transformer_blocks.0.attn1.to_out.0.weight"},
        {"sdxl", "down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight", "mid_block.resnets.0.time_emb_proj.weight", "time_embedding.linear_2.weight", "up_blocks.2.attentions.0.proj_out.weight"},
        /* FLUX.2 and Chroma: the flux preset, their own modulation layers kept; in diffusers
         * names detected by those layers alone */
        {"flux", "double_blocks.0.img_attn.qkv.weight", "single_blocks.0.linear1.weight", "double_stream_modulation_txt.lin.weight", "single_blocks.0.linear2.weight"},
        {"flux", "single_transformer_blocks.0.attn.to_qkv_mlp_proj.weight", "double_stream_modulation_img.linear.weight", "single_stream_modulation.linear.weight", "transformer_blocks.0.attn.to_q.weight"},
        {"flux", "single_transformer_blocks.0.attn.to_out.weight", "double_stream_modulation_img.linear.weight", "time_guidance_embed.timestep_embedder.linear_1.weight", "single_transformer_blocks.0.attn.to_qkv_mlp_proj.weight"},
        {"flux", "double_blocks.0.img_attn.qkv.weight", "distilled_guidance_layer.in_proj.weight", "distilled_guidance_layer.layers.0.in_layer.weight", "double_blocks.0.txt_mlp.2.weight"},
        {"flux", "single_transformer_blocks.0.proj_mlp.weight", "distilled_guidance_layer.layers.0.linear_1.weight", "distilled_guidance_layer.out_proj.weight", "transformer_blocks.0.ff.net.2.weight"},
        {"cosmos", "net.blocks.0.adaln_modulation_self_attn.1.weight", "net.x_embedder.proj.1.weight", "net.blocks.0.adaln_modulation_mlp.2.weight", "net.blocks.0.cross_attn.q_proj.weight"},
        {"cosmos", "blocks.0.adaln_modulation_self_attn.2.weight", "x_embedder.proj.1.weight", "llm_adapter.blocks.0.cross_attn.q_proj.weight", "blocks.0.mlp.layer1.weight"},
        {"hidream", "double_stream_blocks.0.block.attn1.to_q.weight", "single_stream_blocks.0.block.attn1.to_k.weight", "double_stream_blocks.0.block.adaLN_modulation.1.weight", "double_stream_blocks.0.block.ff_i.experts.0.w1.weight"},
        {"hidream", "double_stream_blocks.0.block.attn1.to_q.weight", "single_stream_blocks.0.block.attn1.to_k.weight", "caption_projection.0.linear.weight", "single_stream_blocks.0.block.ff_i.shared_experts.w2.weight"},
        {"z-image", "noise_refiner.0.attention.qkv.weight", "context_refiner.0.attention.qkv.weight", "t_embedder.mlp.0.weight", "layers.0.attention.out.weight"},
        {"llm", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight", "lm_head.weight", "model.layers.0.mlp.gate_proj.weight"},
        {"llm", "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.experts.0.up_proj.weight", "model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.0.gate_proj.weight"},
        {"llm", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.experts.gate_up_proj.weight", "model.layers.0.mlp.router.weight", "model.layers.0.self_attn.o_proj.weight"},
        {"llm", "language_model.model.layers.0.self_attn.q_proj.weight", "language_model.model.layers.0.feed_forward.shared_expert.down_proj.weight", "language_model.model.layers.0.feed_forward.router.weight", "language_model.model.layers.0.feed_forward.shared_expert.up_proj.weight"},
        /* Cohere's per-head q_norm/k_norm scales are [heads, head_dim]: no linear layer */
        {"llm", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.k_proj.weight"},
        {"llm", "model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.block_sparse_moe.experts.0.w1.weight", "model.layers.0.block_sparse_moe.gate.weight", "model.layers.0.block_sparse_moe.experts.0.w2.weight"},
        {"ltx", "patchify_proj.weight", "adaln_single.emb.timestep_embedder.linear_1.weight", "caption_projection.linear_2.weight", "transformer_blocks.0.attn1.to_q.weight"},
        {"ltx", "model.diffusion_model.audio_patchify_proj.weight", "model.diffusion_model.adaln_single.linear.weight", "model.diffusion_model.av_ca_a2v_gate_adaln_single.linear.weight", "model.diffusion_model.transformer_blocks.0.audio_to_video_attn.to_k.weight"},
        {"ltx", "patchify_proj.weight", "audio_adaln_single.linear.weight", "audio_proj_out.weight", "transformer_blocks.0.ff.net.2.weight"},
        /* HunyuanVideo 1.5 (q, k, v apart) and HunyuanImage 2.1 (told by the text refiner) */
        {"hunyuan-video", "double_blocks.0.img_attn_q.weight", "single_blocks.0.linear1.weight", "byt5_in.fc1.weight", "double_blocks.0.img_attn_k.weight"},
        {"hunyuan-video", "txt_in.individual_token_refiner.blocks.0.self_attn_qkv.weight", "single_blocks.0.linear2.weight", "vision_in.proj.1.weight", "double_blocks.0.txt_mlp.fc1.weight"},
        {"hunyuan-video", "double_blocks.0.img_attn_qkv.weight", "double_blocks.0.img_mod.linear.weight", "time_r_in.in_layer.weight", "single_blocks.0.linear2.weight"},
        {"z-image", "noise_refiner.0.attention.qkv.weight", "context_refiner.0.attention.qkv.weight", "cap_embedder.1.weight", "layers.0.feed_forward.w1.weight"},
        /* PixArt-alpha/Sigma and Sana in their original names (t_block computes every block's
         * modulation), PixArt and Sana in diffusers names */
        {"pixart", "t_block.1.weight", "blocks.0.cross_attn.q_linear.weight", "y_embedder.y_proj.fc1.weight", "blocks.0.mlp.fc1.weight"},
        {"pixart", "model.diffusion_model.t_block.1.weight", "model.diffusion_model.blocks.0.cross_attn.q_linear.weight", "model.diffusion_model.ar_embedder.mlp.0.weight", "model.diffusion_model.blocks.0.cross_attn.kv_linear.weight"},
        {"pixart", "t_block.1.weight", "blocks.0.cross_attn.q_linear.weight", "cfg_embedder.mlp.2.weight", "blocks.0.attn.qkv.weight"},
        {"pixart", "adaln_single.emb.timestep_embedder.linear_1.weight", "pos_embed.proj.weight", "adaln_single.linear.weight", "transformer_blocks.0.attn2.to_q.weight"},
        {"pixart", "time_embed.linear.weight", "transformer_blocks.0.ff.conv_inverted.weight", "caption_projection.linear_1.weight", "transformer_blocks.0.attn1.to_k.weight"},
        {"kandinsky5", "visual_transformer_blocks.0.visual_modulation.out_layer.weight", "pooled_text_embeddings.in_layer.weight", "out_layer.modulation.out_layer.weight", "visual_transformer_blocks.0.self_attention.out_layer.weight"},
        {"kandinsky5", "visual_transformer_blocks.0.visual_modulation.out_layer.weight", "pooled_text_embeddings.in_layer.weight", "time_embeddings.in_layer.weight", "text_transformer_blocks.0.feed_forward.out_layer.weight"},
        /* Lumina 2 in diffusers names, and OmniGen2 (the same names): the time and caption
         * embedder and the modulated blocks' norm1 linears kept */
        {"z-image", "noise_refiner.0.attn.to_q.weight", "context_refiner.0.attn.to_k.weight", "time_caption_embed.timestep_embedder.linear_1.weight", "layers.0.attn.to_q.weight"},
        {"z-image", "noise_refiner.0.attn.to_q.weight", "context_refiner.0.attn.to_k.weight", "noise_refiner.1.norm1.linear.weight", "context_refiner.0.feed_forward.linear_1.weight"},
        {"z-image", "noise_refiner.0.norm1.linear.weight", "context_refiner.0.attn.to_out.0.weight", "ref_image_patch_embedder.weight", "ref_image_refiner.0.attn.to_v.weight"},
        {"z-image", "noise_refiner.0.norm1.linear.weight", "context_refiner.0.attn.to_out.0.weight", "norm_out.linear_1.weight", "layers.3.feed_forward.linear_3.weight"},
        /* AuraFlow in both names: its modulation layers are modC/modX/modCX/modF, or adaLN linears */
        {"auraflow", "double_layers.0.modX.1.weight", "cond_seq_linear.weight", "single_layers.0.modCX.1.weight", "single_layers.0.attn.w1q.weight"},
        {"auraflow", "double_layers.0.modX.1.weight", "cond_seq_linear.weight", "modF.1.weight", "double_layers.0.mlpC.c_fc1.weight"},
        {"auraflow", "joint_transformer_blocks.0.norm1_context.linear.weight", "time_step_proj.linear_1.weight", "single_transformer_blocks.0.norm1.linear.weight", "single_transformer_blocks.0.ff.linear_1.weight"},
        /* Mochi 1 in both names: in diffusers names its blocks would pass for SD3's */
        {"mochi", "t5_yproj.weight", "blocks.0.mod_x.weight", "blocks.0.mod_y.weight", "blocks.0.attn.qkv_x.weight"},
        {"mochi", "time_embed.pooler.to_kv.weight", "transformer_blocks.0.attn1.add_q_proj.weight", "transformer_blocks.47.norm1_context.linear_1.weight", "transformer_blocks.0.attn1.to_q.weight"},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        const char *path = test_path("fam.safetensors");
        const tspec t[] = {{fam[f].a, FEATHER_F16, 2, {64, 64}}, {fam[f].b, FEATHER_F16, 2, {64, 64}},
                           {fam[f].kept, FEATHER_F16, 2, {64, 64}}, {fam[f].conv, FEATHER_F16, 2, {64, 64}}};
        REQUIRE(tu_write_model(path, t, 4, 1, NULL) == 0);
        feather_reader *r;
        feather_plan *p = plan_for(path, NULL, &r);
        if (!p) test_fail(__FILE__, __LINE__, "family %s", fam[f].family);
        REQUIRE(p);
        if (strcmp(feather_plan_preset(p), fam[f].family))
            test_fail(__FILE__, __LINE__, "%s detected as %s", fam[f].family, feather_plan_preset(p));
        CHECK(entry(p, fam[f].conv)->action == FEATHER_CONVERT);
        if (entry(p, fam[f].kept)->action != FEATHER_KEEP)
            test_fail(__FILE__, __LINE__, "%s: %s not kept", fam[f].family, fam[f].kept);
        feather_plan_free(p);
        feather_close(r);
    }
    CHECK(feather_preset_find("flux") && !feather_preset_find("Flux"));
}

/* Embedding tables are lookups, whatever their shape: T5's shared and relative attention bias
 * ([32, heads]: a shape the kernel takes), DiT's class embedding_table, a pos_embed module,
 * Gemma 3n's per-layer token table; a linear layer beside them is converted. */
TEST(select_embedding_tables_are_kept) {
    const char *path = test_path("t5.safetensors");
    const tspec t[] = {{"encoder.block.0.layer.0.SelfAttention.q.weight", FEATHER_F16, 2, {64, 64}},
                       {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", FEATHER_F16, 2, {32, 64}},
                       {"shared.weight", FEATHER_F16, 2, {256, 64}},
                       {"y_embedder.embedding_table.weight", FEATHER_F16, 2, {1008, 64}},
                       {"pos_embed.weight", FEATHER_F16, 2, {256, 64}},
                       {"model.language_model.embed_tokens_per_layer.weight", FEATHER_F16, 2, {512, 64}}};
    REQUIRE(tu_write_model(path, t, 6, 1, NULL) == 0);
    feather_reader *r;
    feather_plan *p = plan_for(path, NULL, &r);
    REQUIRE(p);
    CHECK(entry(p, t[0].name)->action == FEATHER_CONVERT);
    for (size_t i = 1; i < 6; i++)
        if (entry(p, t[i].name)->action != FEATHER_KEEP || !strstr(entry(p, t[i].name)->reason, "embedding table"))
            test_fail(__FILE__, __LINE__, "%s: %s", t[i].name, entry(p, t[i].name)->reason);
    feather_plan_free(p);
    feather_close(r);
}

/* A model of no known family gets the generic preset: its modulation layers (adaptive norms'
 * linears in diffusers names too), time-embedding layers and output head are kept by their usual
 * names; --preset none converts them. */
TEST(select_unknown_family_keeps_modulation_and_time_embedders) {
    const char *path = test_path("dit.safetensors");
    const tspec t[] = {{"blocks.0.attn.qkv.weight", FEATHER_F16, 2, {192, 64}},
                       {"blocks.0.adaLN_modulation.1.weight", FEATHER_F16, 2, {384, 64}},
                       {"blocks.0.scale_shift_modulation.weight", FEATHER_F16, 2, {128, 64}},
                       {"t_embedder.mlp.0.weight", FEATHER_F16, 2, {64, 256}},
                       {"timestep_embedder.linear_1.weight", FEATHER_F16, 2, {64, 256}},
                       {"lm_head.weight", FEATHER_F16, 2, {512, 64}},
                       {"blocks.0.norm1.linear.weight", FEATHER_F16, 2, {384, 64}},
                       {"norm_out.linear_2.weight", FEATHER_F16, 2, {128, 64}},
                       {"time_guidance_embed.linear_1.weight", FEATHER_F16, 2, {64, 256}},
                       {"blocks.0.mlp.fc1.weight", FEATHER_F16, 2, {256, 64}},
                       {"time_embedder_extra.weight", FEATHER_F16, 2, {64, 64}},
                       {"blocks.0.norm1.weight", FEATHER_F16, 2, {64, 64}},
                       {"blocks.0.attn.linear.weight", FEATHER_F16, 2, {64, 64}}};
    REQUIRE(tu_write_model(path, t, 13, 1, NULL) == 0);
    feather_reader *r;
    feather_plan *p = plan_for(path, NULL, &r);
    REQUIRE(p);
    CHECK(!strcmp(feather_plan_preset(p), "generic"));
    for (size_t i = 1; i <= 8; i++) {
        const feather_plan_entry *e = entry(p, t[i].name);
        if (e->action != FEATHER_KEEP || !strstr(e->reason, "preset generic"))
            test_fail(__FILE__, __LINE__, "%s not kept by the generic preset (%s)", t[i].name, e->reason);
    }
    CHECK(entry(p, "blocks.0.attn.qkv.weight")->action == FEATHER_CONVERT);
    CHECK(entry(p, "blocks.0.mlp.fc1.weight")->action == FEATHER_CONVERT);
    CHECK(entry(p, "time_embedder_extra.weight")->action == FEATHER_CONVERT); /* whole name components only */
    CHECK(entry(p, "blocks.0.attn.linear.weight")->action == FEATHER_CONVERT);
    /* a norm's own (2-D) scale is no linear layer, nor one of its modulation */
    CHECK(entry(p, "blocks.0.norm1.weight")->action == FEATHER_KEEP);
    CHECK_STR_CONTAINS(entry(p, "blocks.0.norm1.weight")->reason, "a norm's scale");
    feather_plan_free(p);
    feather_close(r);
    feather_convert_options o;
    feather_convert_defaults(&o);
    o.preset = "none";
    p = plan_for(path, &o, &r);
    REQUIRE(p);
    CHECK(!strcmp(feather_plan_preset(p), "none"));
    CHECK(entry(p, "blocks.0.adaLN_modulation.1.weight")->action == FEATHER_CONVERT);
    CHECK(entry(p, "lm_head.weight")->action == FEATHER_CONVERT);
    feather_plan_free(p);
    feather_close(r);
}

/* ComfyUI-FeatherOps' loader runs the layers its model lists exclude (a name containing one of
 * the substrings) as plain weights and drops their scales, so a comfy-layout file made for it must
 * hold them unconverted: for each family it lists, the preset keeps every such layer. */
TEST(select_keeps_every_layer_the_featherops_loader_excludes) {
    static const struct { const char *family; const char *excluded[8]; } fam[] = {
        {"flux2", {"img_in", "time_in", "txt_in", "final_layer", "double_stream_modulation_img",
                   "double_stream_modulation_txt", "single_stream_modulation", NULL}},
        {"qwen-image", {"time_text_embed", "img_in", "norm_out", "proj_out", "txt_in", "img_mod", "txt_mod", NULL}},
        {"wan", {"patch_embedding", "text_embedding", "time_embedding", "time_projection", "head", NULL}},
        {"anima", {"t_embedder", "x_embedder", "final_layer", "llm_adapter", NULL}},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        const char *path = test_path("sample.safetensors");
        REQUIRE(test_run("'%s/feather-sample' -q --force --family %s --hidden 256 -o '%s'", test_bindir(), fam[f].family, path) == 0);
        feather_convert_options o;
        feather_convert_defaults(&o);
        o.layout = FEATHER_LAYOUT_COMFY;
        o.quant.mode = FEATHER_SCALE_TENSOR;
        feather_reader *r;
        feather_plan *p = plan_for(path, &o, &r);
        REQUIRE(p);
        size_t excluded = 0;
        for (size_t i = 0; i < feather_plan_count(p); i++) {
            const feather_plan_entry *e = feather_plan_at(p, i);
            int hit = 0;
            for (const char *const *x = fam[f].excluded; *x; x++) hit |= strstr(e->tensor->name, *x) != NULL;
            if (!hit || e->tensor->ndim != 2) continue;
            excluded++;
            if (e->action != FEATHER_KEEP)
                test_fail(__FILE__, __LINE__, "%s: %s is converted, but the loader runs it unscaled", fam[f].family, e->tensor->name);
        }
        CHECK(excluded >= 4);
        feather_plan_free(p);
        feather_close(r);
    }
}

/* A diffusion model's file that carries its text encoder (a language model's names) is still
 * its family's: the language-model preset is tried last. */
TEST(select_diffusion_family_wins_over_its_text_encoder) {
    const char *path = test_path("ltx.safetensors");
    const tspec t[] = {{"patchify_proj.weight", FEATHER_F16, 2, {64, 64}},
                       {"adaln_single.linear.weight", FEATHER_F16, 2, {64, 64}},
                       {"transformer_blocks.0.attn1.to_q.weight", FEATHER_F16, 2, {64, 64}},
                       {"text_encoder.model.layers.0.self_attn.q_proj.weight", FEATHER_F16, 2, {64, 64}},
                       {"text_encoder.model.layers.0.mlp.down_proj.weight", FEATHER_F16, 2, {64, 64}}};
    REQUIRE(tu_write_model(path, t, 5, 1, NULL) == 0);
    feather_reader *r;
    feather_plan *p = plan_for(path, NULL, &r);
    REQUIRE(p);
    CHECK(!strcmp(feather_plan_preset(p), "ltx"));
    CHECK(entry(p, "adaln_single.linear.weight")->action == FEATHER_KEEP);
    feather_plan_free(p);
    feather_close(r);
}

/* The samples of FLUX.2, Anima, PixArt, Sana, Kandinsky 5, Mochi and AuraFlow, with their real names and
 * shapes: every linear weight of the transformer blocks' attention and feed-forward is
 * converted, every other one (embedders, shared or per-block modulation, output layer, Anima's
 * text adapter) is kept by the preset. */
TEST(select_family_samples_keep_all_but_the_blocks) {
    static const struct { const char *family, *preset, *blocks; } fam[] = {
        {"flux2", "flux", "^(double|single)_blocks\\.[0-9]+\\."},
        {"anima", "cosmos", "^net\\.blocks\\.[0-9]+\\.(self_attn|cross_attn|mlp)\\."},
        {"pixart", "pixart", "^blocks\\.[0-9]+\\.(attn|cross_attn|mlp)\\."},
        {"sana", "pixart", "^blocks\\.[0-9]+\\.(attn|cross_attn)\\."},
        {"kandinsky5", "kandinsky5", "^(text|visual)_transformer_blocks\\.[0-9]+\\.(self_attention|cross_attention|feed_forward)\\."},
        {"mochi", "mochi", "^blocks\\.[0-9]+\\.(attn|mlp_x|mlp_y)\\."},
        {"auraflow", "auraflow", "^(double|single)_layers\\.[0-9]+\\.(attn|mlp|mlpC|mlpX)\\."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        const char *path = test_path("sample.safetensors");
        REQUIRE(test_run("'%s/feather-sample' -q --force --family %s --hidden 256 -o '%s'", test_bindir(), fam[f].family, path) == 0);
        feather_reader *r;
        feather_plan *p = plan_for(path, NULL, &r);
        REQUIRE(p);
        CHECK(!strcmp(feather_plan_preset(p), fam[f].preset));
        regex_t blocks;
        REQUIRE(regcomp(&blocks, fam[f].blocks, REG_EXTENDED | REG_NOSUB) == 0);
        size_t converted = 0, kept = 0;
        for (size_t i = 0; i < feather_plan_count(p); i++) {
            const feather_plan_entry *e = feather_plan_at(p, i);
            const feather_tensor *t = e->tensor;
            size_t len = strlen(t->name);
            if (t->ndim != 2 || len < 7 || strcmp(t->name + len - 7, ".weight")) continue;
            const int in_block = regexec(&blocks, t->name, 0, NULL, 0) == 0;
            if (in_block && e->action != FEATHER_CONVERT)
                test_fail(__FILE__, __LINE__, "%s: %s not converted (%s)", fam[f].family, t->name, e->reason);
            if (!in_block && (e->action != FEATHER_KEEP || !strstr(e->reason, "preset")))
                test_fail(__FILE__, __LINE__, "%s: %s not kept by the preset (%s)", fam[f].family, t->name, e->reason);
            converted += in_block;
            kept += !in_block;
        }
        if (converted < 8 || kept < 6)
            test_fail(__FILE__, __LINE__, "%s: %zu converted, %zu kept", fam[f].family, converted, kept);
        /* and the summary says which preset was applied */
        REQUIRE(test_run("cd '%s' && '%s/feather-convert' --force sample.safetensors", test_tmpdir(), test_bindir()) == 0);
        char want[64];
        snprintf(want, sizeof want, "kept (preset %s)", fam[f].preset);
        CHECK_STR_CONTAINS(test_cmd_output(), want);
        regfree(&blocks);
        feather_plan_free(p);
        feather_close(r);
    }
}

/* Real LoRAs in five naming schemes (diffusers' lora_A/lora_B on Flux and lora.down/lora.up on
 * SD 1.5, PEFT's on GPT-NeoX and with a classifier head, MLX's lora_a/lora_b): every factor is
 * kept as a LoRA factor, also against --include (no loader reads a packed factor), so the file
 * has nothing to convert; the conversion says it is a LoRA and writes nothing. The Flux LoRA's
 * rank-16 factors [16, 15360] and [3072, 16] are shapes the kernel takes: the name decides. */
TEST(select_real_loras_are_kept) {
    static const struct {
        const char *file;
        size_t factors;
    } loras[] = {{"leighwoods_flux_lora_f16.safetensors", 8},
                 {"vfph55_sd15_lora_bf16.safetensors", 256},
                 {"bk7195_pythia_lora_f16.safetensors", 48},
                 {"branbot6_lora_f32.safetensors", 64},
                 {"mlx_adapters_f32.safetensors", 16}};
    feather_ctx *ctx = feather_ctx_new(2);
    for (size_t f = 0; f < sizeof loras / sizeof loras[0]; f++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", test_real_dir(), loras[f].file);
        if (access(path, R_OK) != 0) {
            test_skip("*** real test data missing (set FEATHER_TESTDATA) ***");
            break;
        }
        feather_convert_options o;
        feather_convert_defaults(&o);
        const char *all[] = {".*"};
        o.include = all;
        o.ninclude = 1;
        feather_reader *r;
        feather_plan *p = plan_for(path, &o, &r);
        REQUIRE(p);
        size_t kept = 0;
        for (size_t i = 0; i < feather_plan_count(p); i++) {
            const feather_plan_entry *e = feather_plan_at(p, i);
            CHECK(e->action == FEATHER_KEEP);
            kept += strstr(e->reason, "LoRA factor") != NULL;
        }
        CHECK_EQ_U(kept, loras[f].factors);
        feather_error err = {0};
        CHECK(feather_plan_check(p, &err) == FEATHER_E_NOTHING);
        CHECK_STR_CONTAINS(err.message, "nothing to convert: a LoRA");
        CHECK_STR_CONTAINS(err.message, loras[f].file);
        feather_plan_free(p);
        feather_close(r);

        const char *out = test_path("lora-fp8e5m2.safetensors");
        feather_convert_result res;
        CHECK(feather_convert(ctx, path, out, &o, &res, &err) == FEATHER_E_NOTHING);
        CHECK(access(out, F_OK) != 0);
    }
    feather_ctx_free(ctx);
}

/* The rule by name alone: each scheme's factor names, and names it must leave alone. */
TEST(select_lora_factor_names) {
    static const char *const factors[] = {
        "transformer.single_transformer_blocks.7.proj_out.lora_A.weight",
        "base_model.model.layers.0.self_attn.q_proj.lora_B.default.weight",
        "lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight",
        "lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_up.weight",
        "lora_unet_input_blocks_1_0_in_layers_2.lora_mid.weight",
        "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_k.lora.down.weight",
        "unet.mid_block.attentions.0.proj_in.lora_linear_layer.up.weight",
        "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q_lora.up.weight",
        "model.layers.0.self_attn.v_proj.lora_a",
        "lora_unet_single_blocks_0_linear1.hada_w1_a",
        "lora_unet_single_blocks_0_linear1.lokr_w2",
    };
    static const char *const others[] = {"blocks.0.attn.qkv.weight", "model.floral.weight", "explora_A.weight",
                                         "lora.weight", "layers.0.lora_gate.weight", "blocks.0.hada_w1_a.weight"};
    const size_t nf = sizeof factors / sizeof factors[0], no = sizeof others / sizeof others[0];
    tspec t[sizeof factors / sizeof factors[0] + sizeof others / sizeof others[0]];
    for (size_t i = 0; i < nf + no; i++) t[i] = (tspec){i < nf ? factors[i] : others[i - nf], FEATHER_F16, 2, {16, 32}};
    const char *path = test_path("names.safetensors");
    REQUIRE(tu_write_model(path, t, nf + no, 1, NULL) == 0);
    feather_reader *r;
    feather_plan *p = plan_for(path, NULL, &r);
    REQUIRE(p);
    for (size_t i = 0; i < feather_plan_count(p); i++) {
        const feather_plan_entry *e = feather_plan_at(p, i);
        int factor = 0;
        for (size_t j = 0; j < nf; j++) factor |= !strcmp(e->tensor->name, factors[j]);
        if (factor != (strstr(e->reason, "LoRA factor") != NULL))
            test_fail(__FILE__, __LINE__, "%s: %s", e->tensor->name, e->reason);
        CHECK(factor || e->action == FEATHER_CONVERT);
    }
    feather_error e2 = {0};
    CHECK(feather_plan_check(p, &e2) == FEATHER_OK); /* the others convert */
    feather_plan_free(p);
    feather_close(r);
}

/* A full checkpoint: only the diffusion model converts; its text encoders and VAE stay as they
 * are unless --include names them; a file whose every tensor has the prefix is not one. */
TEST(select_full_checkpoint_converts_its_diffusion_model) {
#define DM "model.diffusion_model."
#define T5 "text_encoders.t5xxl.transformer.encoder.block.0.layer.0.SelfAttention.q.weight"
#define CLIP "text_encoders.clip_l.transformer.text_model.encoder.layers.0.mlp.fc1.weight"
    static const tspec t[] = {
        {DM "img_in.weight", FEATHER_BF16, 2, {64, 64}},
        {DM "double_blocks.0.img_attn.qkv.weight", FEATHER_BF16, 2, {192, 64}},
        {DM "single_blocks.0.linear1.weight", FEATHER_BF16, 2, {448, 64}},
        {T5, FEATHER_BF16, 2, {64, 64}},
        {CLIP, FEATHER_F16, 2, {256, 64}},
        {"text_encoders.t5xxl.transformer.shared.weight", FEATHER_BF16, 2, {320, 64}},
        {"first_stage_model.decoder.mid.attn_1.q.weight", FEATHER_F32, 4, {32, 32, 1, 1}},
        {"first_stage_model.decoder.mid.attn_1.proj.weight", FEATHER_F32, 2, {32, 32}},
        /* an fp8 text encoder layer with its scale and tag, and the markers of both parts */
        {"text_encoders.t5xxl.transformer.encoder.block.0.layer.1.DenseReluDense.wi.weight", FEATHER_F8_E4M3, 2, {128, 64}},
        {"text_encoders.t5xxl.transformer.encoder.block.0.layer.1.DenseReluDense.wi.weight_scale", FEATHER_F32, 0, {0}},
        {"text_encoders.t5xxl.transformer.encoder.block.0.layer.1.DenseReluDense.wi.comfy_quant", FEATHER_U8, 1, {8}},
        {"text_encoders.t5xxl.transformer.scaled_fp8", FEATHER_F8_E4M3, 1, {0}},
        {DM "scaled_fp8", FEATHER_F8_E4M3, 1, {0}},
    };
    const size_t n = sizeof t / sizeof t[0];
    const char *path = test_path("full.safetensors");
    REQUIRE(tu_write_model(path, t, n, 3, NULL) == 0);
    feather_convert_options o;
    feather_convert_defaults(&o);
    feather_reader *r;
    feather_plan *p = plan_for(path, &o, &r);
    REQUIRE(p);
    CHECK(!strcmp(feather_plan_preset(p), "flux"));
    CHECK(entry(p, DM "double_blocks.0.img_attn.qkv.weight")->action == FEATHER_CONVERT);
    CHECK(entry(p, DM "single_blocks.0.linear1.weight")->action == FEATHER_CONVERT);
    CHECK_STR_CONTAINS(entry(p, DM "img_in.weight")->reason, "preset flux");
    const char *outside[] = {T5, CLIP, "first_stage_model.decoder.mid.attn_1.proj.weight"};
    for (size_t i = 0; i < 3; i++) {
        const feather_plan_entry *e = entry(p, outside[i]);
        CHECK(e->action == FEATHER_KEEP);
        CHECK_STR_CONTAINS(e->reason, "outside the diffusion model (model.diffusion_model.) of a full checkpoint");
    }
    /* fp8 too: the layer, its scale, its tag and its part's marker stay as they are */
    for (const char *const *k = (const char *const[]){
             "text_encoders.t5xxl.transformer.encoder.block.0.layer.1.DenseReluDense.wi.weight",
             "text_encoders.t5xxl.transformer.encoder.block.0.layer.1.DenseReluDense.wi.weight_scale",
             "text_encoders.t5xxl.transformer.encoder.block.0.layer.1.DenseReluDense.wi.comfy_quant",
             "text_encoders.t5xxl.transformer.scaled_fp8", NULL};
         *k; k++)
        if (entry(p, *k)->action != FEATHER_KEEP) test_fail(__FILE__, __LINE__, "%s: %s", *k, entry(p, *k)->reason);
    CHECK(entry(p, DM "scaled_fp8")->action == FEATHER_DROP);
    /* The rules that come first still give their own reasons. */
    CHECK_STR_CONTAINS(entry(p, "text_encoders.t5xxl.transformer.shared.weight")->reason, "embedding table");
    CHECK_STR_CONTAINS(entry(p, "first_stage_model.decoder.mid.attn_1.q.weight")->reason, "4-D");
    feather_plan_free(p);
    feather_close(r);

    /* --include converts a text encoder anyway; the other stays. */
    const char *inc[] = {"^text_encoders\\.t5xxl\\."};
    o.include = inc;
    o.ninclude = 1;
    p = plan_for(path, &o, &r);
    REQUIRE(p);
    CHECK(entry(p, T5)->action == FEATHER_CONVERT);
    CHECK_STR_CONTAINS(entry(p, T5)->reason, "--include");
    CHECK(entry(p, CLIP)->action == FEATHER_KEEP);
    feather_plan_free(p);
    feather_close(r);

    /* The diffusion model alone, prefix and all: every linear weight is decided as before. */
    REQUIRE(tu_write_model(path, t, 3, 3, NULL) == 0);
    feather_convert_defaults(&o);
    p = plan_for(path, &o, &r);
    REQUIRE(p);
    for (size_t i = 0; i < feather_plan_count(p); i++)
        CHECK(!strstr(feather_plan_at(p, i)->reason, "outside the diffusion model"));
    CHECK(entry(p, DM "double_blocks.0.img_attn.qkv.weight")->action == FEATHER_CONVERT);
    feather_plan_free(p);
    feather_close(r);
#undef DM
#undef T5
#undef CLIP
}

/* fp8 weights that are not converted: dequantised in the packed layout (whose loader runs them
 * unscaled), left fp8 in the comfy layout where their layer has a ComfyUI tag; their scales and
 * tags go with them. */
TEST(select_fp8_weights_not_converted) {
    static const tspec t[] = {
        {"img_in.weight", FEATHER_F8_E4M3, 2, {64, 64}},
        {"img_in.weight_scale", FEATHER_F32, 0, {0}},
        {"img_in.comfy_quant", FEATHER_U8, 1, {8}},
        {"double_blocks.0.img_attn.qkv.weight", FEATHER_F8_E5M2, 2, {192, 64}},
        {"single_blocks.0.linear1.weight", FEATHER_F8_E5M2, 2, {448, 64}},
        {"odd.weight", FEATHER_F8_E5M2, 2, {60, 64}},
        {"tagged.weight", FEATHER_F8_E5M2, 2, {60, 64}},
        {"tagged.comfy_quant", FEATHER_U8, 1, {8}},
        {"listed.weight", FEATHER_F8_E5M2, 2, {60, 64}}, /* tagged in the header only */
    };
    const char *path = test_path("fp8.safetensors");
    const char *meta[] = {"_quantization_metadata", "{\"format_version\": \"1.0\", \"layers\": {\"listed\": {\"format\": \"float8_e5m2\"}}}", NULL};
    REQUIRE(tu_write_model(path, t, sizeof t / sizeof t[0], 1, meta) == 0);
    for (int comfy = 0; comfy < 2; comfy++) {
        feather_convert_options o;
        feather_convert_defaults(&o);
        if (comfy) {
            o.layout = FEATHER_LAYOUT_COMFY;
            o.quant.mode = FEATHER_SCALE_TENSOR;
        }
        feather_reader *r;
        feather_plan *p = plan_for(path, &o, &r);
        REQUIRE(p);
        CHECK(!strcmp(feather_plan_preset(p), "flux"));
        const feather_plan_entry *in = entry(p, "img_in.weight"), *odd = entry(p, "odd.weight");
        CHECK(entry(p, "double_blocks.0.img_attn.qkv.weight")->action == FEATHER_REPACK);
        const feather_plan_entry *tagged = entry(p, "tagged.weight");
        if (comfy) {
            CHECK(in->action == FEATHER_REQUANT); /* the preset does not keep fp8 layers in fp8's own layout */
            CHECK(entry(p, "img_in.comfy_quant")->action == FEATHER_DROP);
            /* kept as it is with its tag; without one (a legacy file's layer) ComfyUI would
             * read it unscaled beside the output's per-layer header */
            CHECK(tagged->action == FEATHER_KEEP && entry(p, "tagged.comfy_quant")->action == FEATHER_KEEP);
            CHECK(entry(p, "listed.weight")->action == FEATHER_KEEP);
            CHECK(odd->action == FEATHER_DEQUANT);
        } else {
            CHECK(tagged->action == FEATHER_DEQUANT && entry(p, "tagged.comfy_quant")->action == FEATHER_DROP);
            CHECK(entry(p, "listed.weight")->action == FEATHER_DEQUANT);
            CHECK(in->action == FEATHER_DEQUANT && odd->action == FEATHER_DEQUANT);
            CHECK_STR_CONTAINS(in->reason, "preset flux keeps this layer at full precision; fp8 dequantised to BF16");
            CHECK_STR_CONTAINS(odd->reason, "shape [60, 64]");
            CHECK_EQ_U(in->bytes_out, 2 * 64 * 64);
            CHECK(entry(p, "img_in.weight_scale")->action == FEATHER_DROP);
            CHECK(entry(p, "img_in.comfy_quant")->action == FEATHER_DROP);
        }
        feather_plan_free(p);
        feather_close(r);
    }
}
