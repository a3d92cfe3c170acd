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
CFLAGS  += -std=c11 -Wall -Wextra -Werror -ffp-contract=off -fno-strict-aliasing
CPPFLAGS += -D_GNU_SOURCE -Iinclude -Isrc $(DEPS_CFLAGS)
LDLIBS  += $(DEPS_LIBS) -lpthread -lm

LIB_SRC  := $(sort $(wildcard src/*.c))
LIB_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/obj/%.o)
CLI_COMMON := $(BUILD)/obj/cli/common.o
TEST_SRC := $(sort $(wildcard tests/*.c))
TEST_OBJ := $(TEST_SRC:tests/%.c=$(BUILD)/obj/tests/%.o)
PROGRAMS := $(BUILD)/feather-convert $(BUILD)/feather-verify
LIB      := $(BUILD)/libfeather.a

# Per-file instruction sets: only the SIMD kernels are built with them, and they are only
# called after run-time detection.
$(BUILD)/obj/%_avx2.o:   XFLAGS := -mavx2 -mf16c -mfma
$(BUILD)/obj/%_avx512.o: XFLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mf16c -mfma

.SECONDARY:
.PHONY: all lib programs check test demo install uninstall deps clean check-asan fuzz bench \
        check-gpu-build
all: lib programs
lib: $(LIB)
programs: $(PROGRAMS)

$(BUILD)/obj/%.o: src/%.c $(wildcard include/feather/*.h) src/internal.h | $(BUILD)/obj/cli $(BUILD)/obj/tests
	$(CC) $(CPPFLAGS) $(CFLAGS) $(XFLAGS) -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.c tests/test.h $(wildcard include/feather/*.h) | $(BUILD)/obj/tests
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
	FEATHER_BIN=$(BUILD) $(BUILD)/test-runner $(T)

check: deps
	$(MAKE) test

# Same suite under AddressSanitizer + UndefinedBehaviorSanitizer.
check-asan: deps
	$(MAKE) BUILD=build-asan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
		LDFLAGS="-fsanitize=address,undefined" test

clean:
	rm -rf build build-asan build-fuzz

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
		src/feather.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/feather.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/feather-convert $(DESTDIR)$(PREFIX)/bin/feather-verify \
		$(DESTDIR)$(PREFIX)/lib/libfeather.a $(DESTDIR)$(PREFIX)/lib/pkgconfig/feather.pc \
		$(DESTDIR)$(PREFIX)/share/man/man1/feather-*.1 $(DESTDIR)$(PREFIX)/share/man/man5/feather.5
	rm -rf $(DESTDIR)$(PREFIX)/include/feather


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
