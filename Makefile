# feather — GNU Make build. See README.md.
#
#   make            library + programs (build/)
#   make check      install dependencies, build, run the whole test suite
#   make demo       install dependencies, build, convert and inspect a sample checkpoint
#   make install    PREFIX=/usr/local DESTDIR=
#   make deps       install missing Debian packages with apt-get

CC      ?= cc
BUILD   ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
PKG_CONFIG ?= pkg-config
PKGS    := libcjson libzstd libxxhash

DEPS_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
DEPS_LIBS   := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null || echo -lcjson -lzstd -lxxhash)

# -ffp-contract=off: no fused multiply-add anywhere, so every path (scalar, SIMD, GPU) rounds
# the same way and produces the same bytes.
CFLAGS  ?= -O2 -g
override CFLAGS += -std=c11 -Wall -Wextra -Werror -ffp-contract=off -fno-strict-aliasing
override CPPFLAGS += -D_GNU_SOURCE -Iinclude -Isrc $(DEPS_CFLAGS)
override LDLIBS += $(DEPS_LIBS) -lpthread -lm

LIB_SRC  := $(sort $(wildcard src/*.c))
LIB_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/obj/%.o)
CLI_COMMON := $(BUILD)/obj/cli/common.o
TEST_SRC := $(sort $(wildcard tests/*.c))
TEST_OBJ := $(TEST_SRC:tests/%.c=$(BUILD)/obj/tests/%.o)
PROGRAMS := $(BUILD)/feather-convert $(BUILD)/feather-verify
LIB      := $(BUILD)/libfeather.a

# ---- GPU backend: make GPU=auto|hip|cuda|none ----
# auto: ROCm's compiler when present, else nvcc, else none. GPU=none builds the CPU-only
# library. A GPU build adds the kernels (kernels/*.hip, compiled by the GPU compiler) to
# libfeather.a, defines FEATHER_GPU for src/gpu.c and links the GPU runtime (GPU_LIBS, which
# the installed feather.pc lists under Libs.private).
.DEFAULT_GOAL := all
GPU       ?= auto
ROCM_PATH ?= /opt/rocm
HIPCC     ?= $(firstword $(wildcard $(ROCM_PATH)/bin/amdclang++ $(ROCM_PATH)/bin/hipcc))
NVCC      ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDA_PATH ?= $(abspath $(dir $(NVCC))..)
ifeq ($(GPU),auto)
GPU_KIND := $(if $(HIPCC),hip,$(if $(NVCC),cuda,none))
else
GPU_KIND := $(GPU)
endif
HIP_ARCHS  ?= gfx1100 gfx1151
# sm_90a carries the Hopper-only wgmma kernel; compute_90 PTX lets newer GPUs run the rest.
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
              -gencode arch=compute_90,code=compute_90
GPU_SRC    := kernels/gemm.hip kernels/runtime.hip kernels/quant.hip
GPU_OBJ    := $(GPU_SRC:kernels/%.hip=$(BUILD)/obj/kernels/%.o)
GPU_HDR    := $(wildcard kernels/*.h)
# WMMA_EMULATED=1 (with GPU=cuda): the gfx11 kernels, their WMMA instruction emulated, for
# testing them on an NVIDIA GPU (kernels/vendor.h)
ifeq ($(GPU_KIND),cuda)
GPU_CC     := $(NVCC) -x cu -std=c++17 -O3 -fmad=false --threads 0 $(CUDA_ARCHS) -Xcompiler -fPIC \
              $(if $(WMMA_EMULATED),-DFK_WMMA_EMULATED)
GPU_LIBS   := -L$(CUDA_PATH)/lib64 -lcudart -lstdc++
else ifeq ($(GPU_KIND),hip)
GPU_CC     := $(HIPCC) -x hip -std=c++17 -O3 -ffp-contract=off -fPIC $(HIP_ARCHS:%=--offload-arch=%) \
              -DFK_HIP_ARCHS='"$(strip $(HIP_ARCHS))"'
GPU_LIBS   := -L$(ROCM_PATH)/lib -lamdhip64 -lstdc++
else ifneq ($(GPU_KIND),none)
$(error GPU=$(GPU): expected auto, hip, cuda or none)
endif
ifneq ($(GPU_KIND),none)
ifeq ($(if $(filter cuda,$(GPU_KIND)),$(NVCC),$(HIPCC)),)
$(error GPU=$(GPU_KIND): no $(if $(filter cuda,$(GPU_KIND)),nvcc (set NVCC=),HIP compiler under $(ROCM_PATH)/bin (set HIPCC= or ROCM_PATH=)))
endif
override CPPFLAGS += -DFEATHER_GPU=1
LIB_OBJ  += $(GPU_OBJ)
override LDLIBS += $(GPU_LIBS)
endif
$(BUILD)/obj/kernels/%.o: kernels/%.hip $(GPU_HDR) | $(BUILD)/obj/kernels
	$(GPU_CC) -c $< -o $@
$(BUILD)/obj/kernels:
	mkdir -p $@
$(BUILD)/obj/tests/test_gpu_layout.o $(BUILD)/obj/tests/test_gemm_pick.o: $(GPU_HDR)
# src/gpu.c differs with and without a backend: rebuild it when GPU_KIND changes.
$(BUILD)/obj/gpu.o: $(BUILD)/gpu-$(GPU_KIND).stamp
$(BUILD)/gpu-$(GPU_KIND).stamp:
	mkdir -p $(BUILD) && rm -f $(BUILD)/gpu-*.stamp && touch $@
# The kernels alone as a shared library, for the benchmark's ctypes bindings.
$(BUILD)/libfeather_kernels.so: $(GPU_OBJ)
	$(if $(filter cuda,$(GPU_KIND)),$(NVCC) -shared $(CUDA_ARCHS),$(HIPCC) -shared) $^ -o $@ $(GPU_LIBS)
# CI gate: every kernel compiles for RDNA3 (gfx1100) and RDNA3.5 (gfx1151) with Debian's
# clang-19 and contains WMMA; with nvcc present, also for sm_80 and sm_90.
GPU_GATE_DEBS := clang-19 lld-19 libamdhip64-dev
check-gpu-build:
	$(if $(NO_DEPS),,@sh .ci/deps.sh $(GPU_GATE_DEBS))
	@NVCC="$(NVCC)" sh .ci/check-gpu-build.sh
# Device machine: the Debian packages the build needs, unpacked under .device/ (no registry there).
DEVICE_DEBS := libcjson-dev libcjson1 libxxhash-dev libxxhash0 libzstd-dev libzstd1 zstd
# (GNU make itself goes along too, for images without it.)
device-deps:
	mkdir -p .device/debs .device/root .device/bin
	cd .device/debs && apt-get download $(DEVICE_DEBS)
	for f in .device/debs/*.deb; do dpkg -x "$$f" .device/root; done
	cp "$$(command -v $(MAKE))" .device/bin/make
	# the real checkpoints, so that the tests on them run there too (bench/device.sh)
	if [ -d ../shared/testdata/real ]; then rm -rf .device/testdata && cp -r ../shared/testdata/real .device/testdata && \
	    chmod -R u+w .device/testdata; fi
device-run:
	sh bench/device.sh
bench-gpu: $(BUILD)/libfeather_kernels.so
# The weight read floor of the M <= 16 product (NVIDIA only): bench/read_floor.py times it beside
# the library's kernels.
read-floor: $(BUILD)/libread_floor.so
$(BUILD)/libread_floor.so: bench/read_floor.hip kernels/vendor.h
	$(if $(filter cuda,$(GPU_KIND)),,$(error read-floor needs GPU=cuda))
	mkdir -p $(BUILD) && $(GPU_CC) -shared $< -o $@ $(GPU_LIBS)

# Per-file instruction sets: only the SIMD kernels are built with them, and they are only
# called after run-time detection.
$(BUILD)/obj/%_avx2.o:   XFLAGS := -mavx2 -mf16c -mfma
$(BUILD)/obj/%_avx512.o: XFLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mf16c -mfma

.SECONDARY:
.PHONY: all lib programs check test demo install uninstall deps test-deps clean check-asan fuzz bench \
        check-gpu-build device-deps device-run bench-gpu read-floor
all: lib programs
lib: $(LIB)
programs: $(PROGRAMS)

$(BUILD)/obj/%.o: src/%.c $(wildcard include/feather/*.h) src/internal.h | $(BUILD)/obj/cli $(BUILD)/obj/tests
	$(CC) $(CPPFLAGS) $(CFLAGS) $(XFLAGS) -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.c $(wildcard tests/*.h) $(wildcard include/feather/*.h) | $(BUILD)/obj/tests
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/cli $(BUILD)/obj/tests:
	mkdir -p $@

$(LIB): $(LIB_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/feather-%: $(BUILD)/obj/cli/%_main.o $(CLI_COMMON) $(LIB)
	$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/test-runner: $(TEST_OBJ) $(LIB)
	$(CC) $(CFLAGS) $(LDFLAGS) $(TEST_OBJ) $(LIB) $(LDLIBS) -o $@

# ---- dependencies (Debian packages) ----
DEB_PKGS := libcjson-dev libzstd-dev libxxhash-dev pkg-config
deps:
	@sh .ci/deps.sh $(DEB_PKGS)

# ---- tests ----
test: all $(BUILD)/test-runner
	FEATHER_BIN=$(abspath $(BUILD)) $(BUILD)/test-runner $(T)

# Tools the tests drive: the zstd program (compressed outputs must decompress with it) and
# Chromium (the HTML report is rendered headless).
TEST_DEBS := zstd chromium
test-deps:
	@sh .ci/deps.sh $(TEST_DEBS)

# NO_DEPS=1: no package installs (machines without a registry).
# The suite is built without a GPU backend unless GPU= is given on the command line: the
# kernels are compile-checked for every target by check-gpu-build, and a full nvcc build of them
# would double the suite's time on a machine that has no GPU to run them
# (`make check GPU=cuda` on a GPU machine runs the GPU tests for real).
CHECK_GPU := $(if $(filter command line,$(origin GPU)),$(GPU),none)
check: $(if $(NO_DEPS),,deps test-deps)
	$(MAKE) check-gpu-build
	$(MAKE) GPU=$(CHECK_GPU) $(if $(filter none,$(CHECK_GPU)),BUILD=build-cpu) test

# Same suite under AddressSanitizer + UndefinedBehaviorSanitizer.
check-asan: $(if $(NO_DEPS),,deps test-deps)
	$(MAKE) BUILD=build-asan GPU=none CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
		LDFLAGS="-fsanitize=address,undefined" test

clean:
	rm -rf build build-cpu build-asan build-fuzz build-clang samples/out

# ---- demo: a small Flux-shaped checkpoint, converted, inspected and verified ----
DEMO := samples/out/flux-demo.safetensors
demo: deps
	$(MAKE) all
	@mkdir -p samples/out
	$(BUILD)/feather-sample --force --family flux --dtype bf16 --hidden 256 --blocks 2 -o $(DEMO)
	$(BUILD)/feather-convert --plan $(DEMO) | tail -n 4
	$(BUILD)/feather-convert --force $(DEMO)
	$(BUILD)/feather-verify --info samples/out/flux-demo-fp8e5m2.safetensors | head -n 30
	@if $(BUILD)/feather-verify --help 2>/dev/null | grep -q -- --reference; then \
		$(BUILD)/feather-verify --reference $(DEMO) samples/out/flux-demo-fp8e5m2.safetensors; fi

# ---- fuzzing the header parser, the plan and whole conversions, open benchmark ----
# libFuzzer (clang) over feather_check_header and an in-memory open for FUZZ_SECONDS, then over
# the plan of what opens (feather_plan_new, both layouts) for half as long, then over whole
# conversions and their verification (fuzz_convert.c) for half as long; all run on a copy of the
# seed corpus (tests/fuzz/corpus). Crashes land in build-fuzz/crash-*, build-fuzz/plan-crash-* and
# build-fuzz/convert-crash-*.
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_CFLAGS := -O1 -g -std=c11 -Wall -Wextra -Werror -fno-omit-frame-pointer \
	-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
fuzz: deps
	@sh .ci/deps.sh clang libclang-rt-14-dev
	$(MAKE) BUILD=build-fuzz GPU=none CC=$(FUZZ_CC) CFLAGS="$(FUZZ_CFLAGS)" build-fuzz/fuzz_header build-fuzz/fuzz_plan \
		build-fuzz/fuzz_convert
	rm -rf build-fuzz/corpus && mkdir -p build-fuzz/corpus && cp tests/fuzz/corpus/* build-fuzz/corpus/
	build-fuzz/fuzz_header -max_len=65536 -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
		-rss_limit_mb=4096 -dict=tests/fuzz/header.dict -artifact_prefix=build-fuzz/ \
		-print_final_stats=1 build-fuzz/corpus
	build-fuzz/fuzz_plan -max_len=65536 -max_total_time=$$(( $(FUZZ_SECONDS) / 2 )) -timeout=10 \
		-rss_limit_mb=4096 -dict=tests/fuzz/header.dict -artifact_prefix=build-fuzz/plan- \
		-print_final_stats=1 build-fuzz/corpus
	build-fuzz/fuzz_convert -max_len=65536 -max_total_time=$$(( $(FUZZ_SECONDS) / 2 )) -timeout=10 \
		-rss_limit_mb=4096 -dict=tests/fuzz/header.dict -artifact_prefix=build-fuzz/convert- \
		-print_final_stats=1 build-fuzz/corpus

# Only the reader's objects: the target needs nothing else, and other modules need not build
# with every clang.
FUZZ_OBJ := $(patsubst %,$(BUILD)/obj/%.o,core hash hash_avx2 hash_avx512 hash_record header json_index json_scan reader shards threads zst_input)
$(BUILD)/fuzz_header: tests/fuzz/fuzz_header.c $(FUZZ_OBJ)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fsanitize=fuzzer $< $(FUZZ_OBJ) $(LDLIBS) -o $@
# The plan takes the whole library (selection, scale layouts, presets).
$(BUILD)/fuzz_plan: tests/fuzz/fuzz_plan.c $(LIB)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fsanitize=fuzzer $< $(LIB) $(LDLIBS) -o $@
$(BUILD)/fuzz_convert: tests/fuzz/fuzz_convert.c $(LIB)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fsanitize=fuzzer $< $(LIB) $(LDLIBS) -o $@

bench: $(BUILD)/bench/open_bench
$(BUILD)/bench/%: bench/%.c $(LIB)
	mkdir -p $(BUILD)/bench
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

# ---- install ----
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/feather $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/man/man5
	install -m 755 $(PROGRAMS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/feather/*.h $(DESTDIR)$(PREFIX)/include/feather/
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(shell sed -n 's/.*FEATHER_VERSION_STRING "\(.*\)"/\1/p' include/feather/feather.h)|g' \
		-e 's|@GPU_LIBS@|$(GPU_LIBS)|' src/feather.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/feather.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/feather-convert $(DESTDIR)$(PREFIX)/bin/feather-verify \
		$(DESTDIR)$(PREFIX)/lib/libfeather.a $(DESTDIR)$(PREFIX)/lib/pkgconfig/feather.pc \
		$(DESTDIR)$(PREFIX)/share/man/man1/feather-*.1 $(DESTDIR)$(PREFIX)/share/man/man5/feather.5
	rm -rf $(DESTDIR)$(PREFIX)/include/feather


# ---- safetensors writer ----
# Private headers of the writer's modules (the generic rule only tracks public headers).
WRITER_PRIVATE_H := src/outfile.h src/json_write.h src/zstd_frame.h
$(BUILD)/obj/writer.o $(BUILD)/obj/outfile.o $(BUILD)/obj/json_write.o \
$(BUILD)/obj/zstd_frame.o $(BUILD)/obj/tests/test_writer.o: $(WRITER_PRIVATE_H)
bench: $(BUILD)/bench/copy_bench
$(BUILD)/bench/copy_bench: bench/copy_bench.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@
# ---- fp8 codec and packing: internal kernel headers, bench/quant_bench.c ----
$(BUILD)/obj/fp8.o $(BUILD)/obj/fp8_avx2.o $(BUILD)/obj/fp8_avx512.o $(BUILD)/obj/quantize_with.o \
$(BUILD)/obj/pack.o $(BUILD)/obj/tests/test_fp8.o $(BUILD)/obj/tests/test_pack.o: src/quant_kernels.h
$(BUILD)/obj/pack.o $(BUILD)/obj/pack_avx2.o: src/pack_kernels.h
$(BUILD)/bench/quant_bench: bench/quant_bench.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@
bench: $(BUILD)/bench/quant_bench
# ---- bench: scale search (speed and quantisation quality; not run by make check) ----
SCALE_BENCH := $(BUILD)/bench/scale_bench $(BUILD)/bench/quality_bench
bench: $(SCALE_BENCH)
$(SCALE_BENCH): $(BUILD)/bench/%: bench/%.c $(LIB) $(wildcard include/feather/*.h) src/scale_internal.h
	@mkdir -p $(BUILD)/bench
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@
# the scale kernels and their tests share an internal header
$(BUILD)/obj/scale.o $(BUILD)/obj/scale_avx2.o $(BUILD)/obj/scale_avx512.o \
$(BUILD)/obj/tests/test_scale.o: src/scale_internal.h

# ---- sample checkpoints (synthetic models of each family, for tests and the demo) ----
SAMPLE_BIN := $(BUILD)/feather-sample
.PHONY: samples
samples: $(SAMPLE_BIN)
all: samples

$(BUILD)/obj/samples/%.o: samples/%.c src/cli/common.h $(wildcard include/feather/*.h)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(SAMPLE_BIN): $(BUILD)/obj/samples/gen_sample.o $(CLI_COMMON) $(LIB)
	$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LDLIBS) -o $@
# ---- GPU-assisted conversion: benchmark (bench/gpu_quant_bench.c; gpu_host.h is internal) ----
bench: $(BUILD)/bench/gpu_quant_bench
$(BUILD)/obj/gpu.o $(BUILD)/obj/gpu_quant.o $(BUILD)/obj/convert.o $(BUILD)/obj/tests/test_gpu_quant.o: src/gpu_host.h
$(BUILD)/obj/gpu_quant.o $(BUILD)/obj/tests/test_gpu_quant.o: kernels/quant_hd.h kernels/fk_api.h src/scale_internal.h

# ---- verifier: private headers of the fused row kernels and of the wider XXH3 builds ----
$(BUILD)/obj/verify.o $(BUILD)/obj/verify_rows.o $(BUILD)/obj/verify_rows_avx2.o \
$(BUILD)/obj/verify_rows_avx512.o $(BUILD)/obj/tests/test_verify_rows.o: src/verify_rows.h
$(BUILD)/obj/hash.o $(BUILD)/obj/hash_avx2.o $(BUILD)/obj/hash_avx512.o $(BUILD)/obj/tests/test_hash.o: src/hash_simd.h
