# amp — the targets people type. CMake does the building in build/.
#   make run        install missing Debian packages, build, run the main job: the
#                   training comparison (mlp on Fashion-MNIST per precision) and the
#                   inference comparison (the pretrained SmolLM2 and MiniLM per load dtype)
#   make test       install missing Debian packages, build, run the whole suite
#   make test-asan  the whole suite under AddressSanitizer + UBSan (+ LeakSanitizer)
#   make test-tsan  the multi-threaded tests and example under ThreadSanitizer (clang)
#   make bench      run the benchmarks and regenerate docs/BENCHMARKS.md
#   make install PREFIX=/usr/local   library, headers, amp.pc, the CLI (nothing else built or installed)
#   CMAKE_FLAGS=...  passed to every configure, e.g. -DAMP_CUDA=ON (the CUDA backend
#                    without a GPU here; AUTO builds it where nvcc and a GPU are), -DAMP_CUDA=OFF
#   make fuzz       libFuzzer targets, 60 s each (clang)
#   make docs       regenerate docs/autocast.md and docs/cuda.md's kernel-family table

PREFIX ?= /usr/local
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)
BUILD  ?= build
BUILD_INSTALL ?= build-install
CMAKE_FLAGS ?=

.PHONY: all deps build run test test-asan test-tsan bench install fuzz clean docs

all: build

deps:
	@scripts/deps.sh build test run text models

# Every target that configures passes $(CMAKE_FLAGS) last, so that the
# user's flags win: make install CMAKE_FLAGS=-DAMP_CUDA=ON. The configure
# log is kept quiet except for amp's own lines (CUDA backend: built or not,
# why, and how to switch; MPI).
build:
	@scripts/deps.sh build test
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)
	@sed -n 's/^-- amp: /amp: /p' $(BUILD).configure.log
	@cmake --build $(BUILD) -j $(JOBS)

# the inference half: SmolLM2-135M per load dtype (speed, memory, the decode
# bound) and, on Shakespeare's held-out part, its difference from f32
# (perplexity, KL, top-1), then MiniLM's embeddings per dtype (cosine to f32)
RUN_MODELS ?= $${AMP_MODELS_DIR:-/usr/local/share/amp/models}
RUN_TEXT ?= $${AMP_TEXT_DIR:-/usr/local/share/amp/text}/shakespeare.txt
run:
	@scripts/deps.sh build test run text models
	@$(MAKE) --no-print-directory build
	./$(BUILD)/amp compare --model mlp --epochs 1
	./$(BUILD)/amp bench infer --no-bert --rounds 1 --prompt-tokens 128 --decode-tokens 32
	./$(BUILD)/amp eval --model $(RUN_MODELS)/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf \
	  --data $(RUN_TEXT) --split val --tokens 512 --context 256
	./$(BUILD)/amp eval --model $(RUN_MODELS)/all-MiniLM-L6-v2 --data $(RUN_TEXT) --split val --lines 64

test:
	@scripts/deps.sh build test text models
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# allocator_may_return_null: a huge allocation must fail as it does without
# ASan (amp__alloc returns an error naming the op; test_fuzz_regress replays
# shapes that ask for ~2^60 bytes), not abort the test.
test-asan:
	@scripts/deps.sh build test text models
	@$(MAKE) --no-print-directory build BUILD=build-asan CMAKE_FLAGS="-DAMP_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)"
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  AMP_ASAN=1 ctest --output-on-failure -j $(JOBS)

# ThreadSanitizer, built with clang in build-tsan: the tests with threads of
# their own (test_threads, test_autocast, the threads_autocast example) and
# those that check results do not depend on the OpenMP thread count. Run with
# 2 OpenMP threads, so amp's parallel regions are checked too: clang's libomp
# loads Archer (libarcher.so, from libomp-dev), which tells TSan about
# OpenMP's barriers and tasks; without it (gcc's libgomp is not instrumented)
# every kernel would report races that are not there.
# ignore_noninstrumented_modules: accesses inside libomp/libc themselves are
# not reported (amp's own accesses all are).
tsan_empty :=
tsan_space := $(tsan_empty) $(tsan_empty)
TSAN_TESTS ?= test_threads test_autocast test_tensor test_ops_attention test_ops_elementwise test_ops_reduce \
  test_ops_activation test_gemm test_gemm_bf16 test_numeric_sr test_numeric_vector test_kernel_paths \
  test_threads_generate test_thread_count
test-tsan:
	@scripts/deps.sh build test fuzz
	@cmake -S . -B build-tsan -DCMAKE_C_COMPILER=clang -DAMP_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  $(CMAKE_FLAGS) > build-tsan.configure.log 2>&1 || (cat build-tsan.configure.log; exit 1)
	@cmake --build build-tsan -j $(JOBS) --target $(TSAN_TESTS) threads_autocast
	cd build-tsan && TSAN_OPTIONS=ignore_noninstrumented_modules=1:second_deadlock_stack=1 OMP_NUM_THREADS=2 \
	  ctest --output-on-failure -j $(JOBS) -R '^($(subst $(tsan_space),|,$(strip $(TSAN_TESTS)))|example_threads_autocast)$$'

bench:
	@scripts/deps.sh build test bench text models
	@$(MAKE) --no-print-directory build
	scripts/bench.sh $(BUILD)

# Only what an installed library needs: no tests or examples, so
# neither cmocka nor the dataset (deps.sh build installs cmake, gcc, zlib,
# cJSON and pkg-config when missing). Its own build directory keeps the test
# build in $(BUILD) as it is. The prefix is given to the configure too: the
# library looks for the GPT-2 vocabulary in PREFIX/share/amp.
install:
	@scripts/deps.sh build
	@mkdir -p $(BUILD_INSTALL)
	@cmake -S . -B $(BUILD_INSTALL) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(abspath $(PREFIX)) \
	  -DAMP_BUILD_TESTS=OFF -DAMP_BUILD_EXAMPLES=OFF $(CMAKE_FLAGS) \
	  > $(BUILD_INSTALL)/configure.log 2>&1 || (cat $(BUILD_INSTALL)/configure.log; exit 1)
	@sed -n 's/^-- amp: /amp: /p' $(BUILD_INSTALL)/configure.log
	@cmake --build $(BUILD_INSTALL) -j $(JOBS)
	cmake --install $(BUILD_INSTALL) --prefix $(abspath $(PREFIX))

fuzz:
	@scripts/deps.sh build test fuzz
	@CC=clang $(MAKE) --no-print-directory build BUILD=build-fuzz CMAKE_FLAGS="-DAMP_FUZZ=ON -DAMP_BUILD_TESTS=OFF -DCMAKE_C_COMPILER=clang $(CMAKE_FLAGS)"
	scripts/fuzz.sh build-fuzz 60

docs: build
	./$(BUILD)/amp autocast --markdown > docs/autocast.md.tmp && mv docs/autocast.md.tmp docs/autocast.md
	./$(BUILD)/test_backend_families --write-doc docs/cuda.md

clean:
	rm -rf build build-asan build-tsan build-fuzz build-install build*.configure.log
