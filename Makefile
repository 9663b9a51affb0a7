# The two commands of the quick start:
#   make test    install what is missing, configure, build, run every test suite
#   make train   install what is missing, build train_gpt, teach a tiny GPT 3-digit addition
# Other targets: build, bench, format, clean.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: setup configure build test train bench format clean

setup:
	@scripts/setup

configure: setup
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

train: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target train_gpt
	$(BUILD_DIR)/bin/train_gpt $(ARGS)

bench: build
	$(BUILD_DIR)/bin/bench_ops

format:
	git ls-files '*.h' '*.cpp' '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
