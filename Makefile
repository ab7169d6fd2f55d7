# ferry: the README's two commands are `make demo` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

.PHONY: all setup configure build install demo test test-main test-unit test-e2e test-asan test-tsan fuzz clean docs python

# ccache keys objects by paths relative to the source root, so a clone elsewhere (the pip build of
# the Python package, tests/python/venv_install.sh) compiles from cache. CMAKE_FLAGS' ccache test
# is expanded when a recipe runs (after `setup` installed ccache), not when make reads this file.
export CCACHE_BASEDIR ?= $(CURDIR)
# The tool and unit-test targets use precompiled headers (CMake's target_precompile_headers);
# ccache caches their objects only with this sloppiness (ccache's manual, "Precompiled headers").
export CCACHE_SLOPPINESS ?= pch_defines,time_macros

all: build

# Installs missing Debian packages (idempotent; needs root or sudo).
setup:
	@bash scripts/setup.sh

# The main build treats warnings as errors (gcc 12 -Wall -Wextra: a new warning fails `make test`);
# WERROR_FLAGS= turns that off. The sanitizer and fuzz builds below keep warnings as warnings
# (their flags are not yet verified warning-free).
WERROR_FLAGS ?= -DFERRY_WERROR=ON
# -UFERRY_CUDA: the CUDA backend's default (on when the toolkit is found) again after `make demo`.
configure: setup
	@cmake -S . -B $(BUILD) -UFERRY_CUDA $(CMAKE_FLAGS) $(WERROR_FLAGS) > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Builds the Python package in the tree (build/python/ferry): PYTHONPATH=build/python imports it.
python: configure
	@cmake --build $(BUILD) -j $(JOBS) --target ferry_python
	@echo "python: PYTHONPATH=$(CURDIR)/$(BUILD)/python /usr/bin/python3 -c 'import ferry'"

# Installs the ferry CLI, libferry.so, include/ferry/ and the CMake package (find_package(ferry)).
PREFIX ?= /usr/local
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# Sets up, builds only what the demo runs (the ferry CLI and the C example, CPU only: no tests, no
# CUDA backend; compiler output in $(BUILD).demo.log), and runs the demo on the bundled digits
# classifier. `make build` / `make test` build the rest.
demo: setup
	@echo "make demo: building the ferry CLI and the C example (CPU only, no tests) in $(BUILD)/; compiler output in $(BUILD).demo.log"
	@cmake -S . -B $(BUILD) -DFERRY_CUDA=OFF $(CMAKE_FLAGS) $(WERROR_FLAGS) > $(BUILD).demo.log 2>&1 || (tail -n 40 $(BUILD).demo.log; exit 1)
	@cmake --build $(BUILD) -j $(JOBS) --target ferry classify >> $(BUILD).demo.log 2>&1 || (grep -E -m 20 "error|Error" $(BUILD).demo.log; echo "make demo: the build failed; see $(BUILD).demo.log"; exit 1)
	@echo "make demo: built $(BUILD)/ferry; running the demo"
	@bash demo/run_demo.sh $(BUILD)/ferry

# Runs every test: the main suite (unit, conformance on each backend, zoo, hostile inputs, tools)
# through ctest, then the AddressSanitizer + UndefinedBehaviorSanitizer suite, the ThreadSanitizer
# concurrency tests and a short run of every fuzz target (FUZZ_SECONDS each). `make test-main` is
# the quick loop (main suite only).
# Each stage's wall time is printed as it ends, and all of them together at the end (CI's log).
TEST_STAGES := test-main test-asan test-tsan fuzz
test:
	@t0=$$(date +%s); times=""; for s in $(TEST_STAGES); do ts=$$(date +%s); \
	  $(MAKE) --no-print-directory $$s || { echo "== make test: $$s FAILED after $$(( $$(date +%s) - ts )) s"; exit 1; }; \
	  times="$$times $$s $$(( $$(date +%s) - ts )) s;"; echo "== make test: $$s passed in $$(( $$(date +%s) - ts )) s"; done; \
	  echo "== make test: all passed in $$(( $$(date +%s) - t0 )) s:$$times"

test-main: build
	@cd $(BUILD) && ctest --output-on-failure --no-tests=error -j $(JOBS) $(CTEST_ARGS)

# The sanitizer and fuzz builds compile at -O1 with line tables only (-g1): stack traces keep
# function names and lines, and the three extra builds of the library take about a third less
# time than at -O2 -g (CI runs all of them on 2 cores). SAN_BUILD_FLAGS=-DCMAKE_BUILD_TYPE=RelWithDebInfo gives -O2 -g back.
SAN_BUILD_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"

# AddressSanitizer + UndefinedBehaviorSanitizer build (gcc): unit tests, the conformance suite on
# the reference and cpu backends, hostile inputs and a zoo subset (not the 1,000-cycle RSS leak
# test: ASan's quarantine grows RSS by design; the main suite runs it).
# Without the gRPC front end: no test here serves (the serve tests run in the main suite, the
# KServe decoder under ASan in `make fuzz`), and its generated code is a large part of a cold build.
ASAN_BUILD ?= build-asan
ASAN_TESTS ?= -L 'unit|asan' -E '^api_load_run_unload_1000$$'
ASAN_TARGETS ?= ferry ferry_unit_tests ferry_node_tests ferry_concurrency_tests
test-asan: setup
	@cmake -S . -B $(ASAN_BUILD) $(CMAKE_FLAGS) $(SAN_BUILD_FLAGS) -DFERRY_SANITIZE=ON -DFERRY_CUDA=OFF -DFERRY_GRPC=OFF \
	  -DFERRY_ZOO_DIR=$(CURDIR)/$(BUILD)/zoo_models > $(ASAN_BUILD).configure.log 2>&1 || (cat $(ASAN_BUILD).configure.log; exit 1)
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target $(ASAN_TARGETS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure --no-tests=error -j $(JOBS) $(ASAN_TESTS)

# ThreadSanitizer: the concurrency tests (one model, 8 threads) in their own build.
TSAN_BUILD ?= build-tsan
test-tsan: setup
	@cmake -S . -B $(TSAN_BUILD) $(CMAKE_FLAGS) $(SAN_BUILD_FLAGS) -DFERRY_TSAN=ON -DFERRY_CUDA=OFF \
	  > $(TSAN_BUILD).configure.log 2>&1 || (cat $(TSAN_BUILD).configure.log; exit 1)
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target ferry_concurrency_tests
	@TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 OMP_NUM_THREADS=1 $(TSAN_BUILD)/ferry_concurrency_tests

# libFuzzer targets (clang, ASan + UBSan): each replays its regression inputs, then fuzzes for
# FUZZ_SECONDS (default 60) from seeds built out of the repository's models and arrays. Each
# fuzzer is one single-threaded process, so JOBS of them run side by side (one per core): every
# target still gets its full FUZZ_SECONDS of a core.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz: setup
	@cmake -S . -B $(FUZZ_BUILD) $(CMAKE_FLAGS) $(SAN_BUILD_FLAGS) -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DFERRY_FUZZ=ON -DFERRY_SANITIZE=ON -DFERRY_BUILD_TESTS=OFF -DFERRY_CUDA=OFF \
	  -DFERRY_FUZZ_SECONDS=$(FUZZ_SECONDS) > $(FUZZ_BUILD).configure.log 2>&1 || (cat $(FUZZ_BUILD).configure.log; exit 1)
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_onnx_model fuzz_npy fuzz_tensor_pb fuzz_compiled_model fuzz_jpeg fuzz_png fuzz_checkpoint \
	  fuzz_kserve_request fuzz_model_config
	@cd $(FUZZ_BUILD) && ctest --output-on-failure --no-tests=error -j $(JOBS) -L fuzz

test-unit: build
	@cd $(BUILD) && ctest --output-on-failure --no-tests=error -j $(JOBS) -L unit

test-e2e: build
	@cd $(BUILD) && ctest --output-on-failure --no-tests=error -L e2e

clean:
	rm -rf $(BUILD) $(BUILD).configure.log

# Regenerates docs/operators.md from the op registry and docs/switches.md from src/common/env_switches.inc.
docs: build
	@$(BUILD)/ferry ops --markdown > docs/operators.md
	@$(BUILD)/ferry switches --markdown > docs/switches.md
