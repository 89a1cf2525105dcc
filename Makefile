# Thin wrappers: each target installs what is missing (scripts/setup.sh, a
# quick no-op when everything is present), configures and builds.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CONFIG ?= configs/debug_model.yaml
# The venv holding the pinned PyTorch wheel (scripts/versions.env).
TORCH_VENV = $(shell bash scripts/setup.sh --venv)
FLOOR_VENV = $(shell bash scripts/setup.sh --venv floor)
FLOOR_BUILD_DIR ?= build-floor
# AUTO: with CUDA where the toolkit is; OFF: the CPU-only build.
BATON_TORCH_CUDA ?= AUTO
export BATON_TORCH_CUDA

.PHONY: all setup configure build build-baton run test bench clean test-floor

all: build

setup:
	@bash scripts/setup.sh

# A build folder configured before the wheel (against Debian's libtorch)
# is configured afresh.
configure: setup
	@grep -qs '^BATON_TORCH_PYTHON:' $(BUILD_DIR)/CMakeCache.txt || { \
	  rm -f $(BUILD_DIR)/CMakeCache.txt; \
	  cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release \
	    -DBATON_TORCH_PYTHON=$(TORCH_VENV)/bin/python \
	    -DBATON_TORCH_CUDA=$(BATON_TORCH_CUDA); }

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

# The binary and the plugin it loads, nothing else.
build-baton: configure
	cmake --build $(BUILD_DIR) -j$(JOBS) --target baton baton_sentencepiece

run: build-baton
	./$(BUILD_DIR)/baton train --config $(CONFIG)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS)

bench: build
	bash scripts/bench.sh $(BUILD_DIR)

# The suite against the floor's PyTorch (BATON_TORCH_FLOOR, the GPU
# machines' version), in its own venv and build folder. Run it before a
# change to common/torch_compat.h, parallel/dist, checkpoint/ or optim/ lands.
test-floor:
	@bash scripts/setup.sh floor
	@test -f $(FLOOR_BUILD_DIR)/CMakeCache.txt || \
	  cmake -S . -B $(FLOOR_BUILD_DIR) -DCMAKE_BUILD_TYPE=Release \
	    -DBATON_TORCH_PYTHON=$(FLOOR_VENV)/bin/python \
	    -DBATON_TORCH_CUDA=$(BATON_TORCH_CUDA)
	cmake --build $(FLOOR_BUILD_DIR) -j$(JOBS)
	cd $(FLOOR_BUILD_DIR) && ctest --output-on-failure -j$(JOBS)

clean:
	rm -rf $(BUILD_DIR) $(FLOOR_BUILD_DIR)
