# ferry: the README's two commands are `make demo` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

.PHONY: all setup configure build demo test test-unit test-e2e clean docs

all: build

# Installs missing Debian packages (idempotent; needs root or sudo).
setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Sets up, builds, and runs `ferry info` and `ferry run` on the bundled digits classifier.
demo: build
	@bash demo/run_demo.sh $(BUILD)/ferry

# Runs every test (unit, import hardening, end-to-end against PyTorch) through ctest.
test: build
	@cd $(BUILD) && ctest --output-on-failure --no-tests=error -j $(JOBS) $(CTEST_ARGS)

test-unit: build
	@cd $(BUILD) && ctest --output-on-failure --no-tests=error -j $(JOBS) -L unit

test-e2e: build
	@cd $(BUILD) && ctest --output-on-failure --no-tests=error -L e2e

clean:
	rm -rf $(BUILD) $(BUILD).configure.log

# Regenerates docs/operators.md from the op registry.
docs: build
	@$(BUILD)/ferry ops --markdown > docs/operators.md
