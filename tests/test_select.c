/* Selection: presets, name/shape rules, --include/--exclude, fp8 inputs. */
#include "test.h"
#include "testutil.h"
#include "feather/convert.h"

#include <stdlib.h>
#include <unistd.h>

static const feather_plan_entry *entry(const feather_plan *p, const char *name) {
    for (size_t i = 0; i < feather_plan_count(p); i++)
        if (!strcmp(feather_plan_at(p, i)->tensor->name, name)) return feather_plan_at(p, i);
    return NULL;
}

static feather_plan *plan_for(const char *path, const feather_convert_options *o, feather_reader **r) {
    feather_error err = {0};
    feather_plan *p = NULL;
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
    feather_convert_options o;
    feather_convert_defaults(&o);
    feather_reader *r;
    feather_plan *p = plan_for(path, &o, &r);
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
    CHECK(feather_plan_check(p, &err) == FEATHER_E_INVALID);
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
        {"sd3", "joint_blocks.0.x_block.attn.qkv.weight", "joint_blocks.0.context_block.attn.qkv.weight", "context_embedder.weight", "joint_blocks.0.x_block.mlp.fc1.weight"},
        {"sdxl", "model.diffusion_model.input_blocks.1.1.proj_in.weight", "model.diffusion_model.middle_block.1.proj_in.weight", "model.diffusion_model.label_emb.0.0.weight", "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"},
        {"hunyuan-video", "double_blocks.0.img_attn_qkv.weight", "single_blocks.0.linear1.weight", "vector_in.in_layer.weight", "double_blocks.0.img_mlp.fc1.weight"},
        {"z-image", "noise_refiner.0.attention.qkv.weight", "context_refiner.0.attention.qkv.weight", "cap_embedder.1.weight", "layers.0.feed_forward.w1.weight"},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        const char *path = test_path("fam.safetensors");
        const tspec t[] = {{fam[f].a, FEATHER_F16, 2, {64, 64}}, {fam[f].b, FEATHER_F16, 2, {64, 64}},
                           {fam[f].kept, FEATHER_F16, 2, {64, 64}}, {fam[f].conv, FEATHER_F16, 2, {64, 64}}};
        REQUIRE(tu_write_model(path, t, 4, 1, NULL) == 0);
        feather_convert_options o;
        feather_convert_defaults(&o);
        feather_reader *r;
        feather_plan *p = plan_for(path, &o, &r);
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

/* The real Flux LoRA (diffusers names, F16): its rank-16 lora_A [16, 15360] and lora_B
 * [3072, 16] matrices are linear maps of shapes the kernel takes, so they convert; the
 * conversion keeps the file's metadata and every converted matrix stays close to the original. */
TEST(select_real_lora_converts_and_roundtrips) {
    char path[1024];
    snprintf(path, sizeof path, "%s/leighwoods_flux_lora_f16.safetensors", test_real_dir());
    if (access(path, R_OK) != 0) {
        test_skip("*** real test data missing (set FEATHER_TESTDATA) ***");
        return;
    }
    feather_convert_options o;
    feather_convert_defaults(&o);
    feather_reader *r;
    feather_plan *p = plan_for(path, &o, &r);
    REQUIRE(p);
    size_t conv = 0;
    for (size_t i = 0; i < feather_plan_count(p); i++) conv += feather_plan_at(p, i)->action == FEATHER_CONVERT;
    CHECK_EQ_U(conv, 8);
    feather_plan_free(p);
    feather_close(r);
    const char *out = test_path("lora-fp8e5m2.safetensors");
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_result res;
    feather_error err = {0};
    feather_status st = feather_convert(ctx, path, out, &o, &res, &err);
    if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
    CHECK_EQ_U(res.tensors_converted, 8);
    /* e5m2 keeps 2 mantissa bits: about 25-27 dB whatever the scale */
    CHECK(res.snr_worst_db > 24 && res.snr_mean_db < 40);
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    CHECK(feather_metadata_get(r, 0, "ss_base_model_version") != NULL);
    feather_close(r);
    feather_ctx_free(ctx);
}
