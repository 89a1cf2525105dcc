# Thin wrappers: each target installs what is missing (scripts/setup.sh, a
# quick no-op when everything is present), configures and builds.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CONFIG ?= configs/debug_model.yaml

.PHONY: all setup configure build run test bench clean test-trixie test-trixie-cuda

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@test -f $(BUILD_DIR)/CMakeCache.txt || \
	  cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

run: build
	./$(BUILD_DIR)/baton train --config $(CONFIG)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS)

bench: build
	bash scripts/bench.sh $(BUILD_DIR)

# The suite against Debian 13's libtorch 2.6, in a cached Debian 13 root
# (needs root): CPU with Gloo, and the CUDA build with NCCL (CPU tests only).
test-trixie:
	bash scripts/trixie.sh cpu

test-trixie-cuda:
	bash scripts/trixie.sh cuda

clean:
	rm -rf $(BUILD_DIR)
