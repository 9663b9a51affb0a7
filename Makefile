# The two commands of the quick start:
#   make test    install what is missing, configure, build, run every test suite: the normal build in
#                build/, then the CUDA suite on the SIMT emulator under AddressSanitizer in build-emu/,
#                then the kernel audit (access efficiency, DRAM bytes, bank conflicts, races) in build-audit/
#   make train   install what is missing, build train_gpt, teach a tiny GPT 3-digit addition
# Other targets: build, test-emu (only the emulated CUDA suite), test-audit (only the kernel audit), fuzz (libFuzzer, scripts/fuzz), train-mlp,
# train-cnn, train-text (a BPE tokenizer and GPT on real prose, then generate: scripts/train-text), bench,
# plot (train_gpt with a metrics log, rendered to build/train_gpt_metrics.svg and .png), format, clean.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
# The emulated build: kernels/cuda/*.cu compiled as C++ and run by the SIMT emulator (kernels/emu),
# everything instrumented with ASan + UBSan; the CUDA-labelled tests run there, and so do the fuzz
# targets' corpus + 10,000 mutations each (label fuzz) and the CPU suites that read untrusted bytes
# (label sanitize: safetensors, data, checkpoint, checkpoint crash, anomaly, errors).
AUDIT_BUILD_DIR ?= build-audit
AUDIT_CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DHALFGRAD_CUDA=EMULATED -DHALFGRAD_EMU_AUDIT=ON
EMU_BUILD_DIR ?= build-emu
EMU_CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DHALFGRAD_CUDA=EMULATED -DHALFGRAD_SANITIZE=address \
                   -DHALFGRAD_BUILD_BENCH=OFF

.PHONY: setup configure build test test-emu test-audit fuzz train train-mlp train-cnn plot bench format clean train-text zoo

setup:
	@scripts/setup

configure: setup
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The tests' GEMM calibration cache (kernels/cpu/gemm_calibration.h) lives in the build, not in ~/.cache:
# timings taken while the suite loads the cores must not become this machine's choice for real runs.
test: build
	XDG_CACHE_HOME=$(abspath $(BUILD_DIR))/test-cache ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)
	@if grep -q ON $(BUILD_DIR)/cuda_toolkit_found; then $(MAKE) --no-print-directory test-emu test-audit; \
	else echo "SKIPPED: the emulated CUDA suite and the kernel audit need the CUDA toolkit's headers, which CMake did not find"; fi

test-emu: setup
	cmake -S . -B $(EMU_BUILD_DIR) $(EMU_CMAKE_FLAGS)
	cmake --build $(EMU_BUILD_DIR) -j $(JOBS) --target cuda_tests
	XDG_CACHE_HOME=$(abspath $(EMU_BUILD_DIR))/test-cache \
	  ctest --test-dir $(EMU_BUILD_DIR) -L 'cuda|fuzz|sanitize' --output-on-failure -j $(JOBS) \
	  --output-junit emulated-results.xml
	scripts/check-emulated-suite $(EMU_BUILD_DIR)

# The kernel audit (docs/kernel_audit.md): the audit flavour of the emulated build records every access
# of the kernels; its tests check the recording on planted kernels and gate every hand-written kernel,
# joined with the nvcc build's ptxas report (registers, spills, occupancy) when that build made one.
test-audit: setup
	cmake -S . -B $(AUDIT_BUILD_DIR) $(AUDIT_CMAKE_FLAGS)
	cmake --build $(AUDIT_BUILD_DIR) -j $(JOBS) --target audit_tests
	HG_KERNEL_RESOURCES=$$(test -f $(BUILD_DIR)/kernel_resources.txt && echo $(abspath $(BUILD_DIR))/kernel_resources.txt) \
	  XDG_CACHE_HOME=$(abspath $(AUDIT_BUILD_DIR))/test-cache ctest --test-dir $(AUDIT_BUILD_DIR) -L audit --output-on-failure -j $(JOBS) --output-junit audit-results.xml
	scripts/check-emulated-suite $(AUDIT_BUILD_DIR) audit

# Every reader of untrusted bytes under libFuzzer + ASan + UBSan, 10,000 inputs per target (scripts/fuzz).
fuzz: setup
	JOBS=$(JOBS) scripts/fuzz

train: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target train_gpt
	$(BUILD_DIR)/bin/train_gpt $(ARGS)

# The small classifiers: an MLP on 2-D spirals, a CNN on procedurally drawn digits.
train-mlp: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target train_mlp
	$(BUILD_DIR)/bin/train_mlp $(ARGS)

train-cnn: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target train_cnn
	$(BUILD_DIR)/bin/train_cnn $(ARGS)

# The zoo (docs/zoo.md): `make zoo MODEL=lenet [ARGS="--epochs 2"]` trains one model on real data (Fashion-MNIST
# or English words: Debian's dataset-fashion-mnist and wamerican, installed here; char-lstm and word-lstm: make
# train-text's shards and corpus, prepared here) and writes its metrics log and charts under $(BUILD_DIR)/zoo/.
MODEL ?= mlp
zoo: configure
	@if [ "$(MODEL)" = char-lstm ] || [ "$(MODEL)" = word-lstm ]; then \
	  cmake --build $(BUILD_DIR) -j $(JOBS) --target prepare_data tokenize && \
	  BUILD_DIR=$(BUILD_DIR) PREPARE_ONLY=1 scripts/train-text; fi
	@scripts/setup dataset-fashion-mnist wamerican
	cmake --build $(BUILD_DIR) -j $(JOBS) --target zoo plot_metrics
	@mkdir -p $(BUILD_DIR)/zoo
	$(BUILD_DIR)/bin/zoo --model $(MODEL) --metrics-log $(BUILD_DIR)/zoo/$(MODEL)_metrics.jsonl \
	  $(if $(filter vae dcgan diffusion,$(MODEL)),--images $(BUILD_DIR)/zoo) \
	  $(if $(filter char-lstm,$(MODEL)),--data $(BUILD_DIR)/text/v4096/shard_000000.bin) \
	  $(if $(filter word-lstm,$(MODEL)),--data $(BUILD_DIR)/text/corpus.txt) $(ARGS)
	$(BUILD_DIR)/bin/plot_metrics $(BUILD_DIR)/zoo/$(MODEL)_metrics.jsonl --title "zoo --model $(MODEL) $(ARGS)" \
	  -o $(BUILD_DIR)/zoo/$(MODEL)_metrics.svg -o $(BUILD_DIR)/zoo/$(MODEL)_metrics.png

plot: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target train_gpt plot_metrics
	$(BUILD_DIR)/bin/train_gpt --metrics-log $(BUILD_DIR)/train_gpt_metrics.jsonl $(ARGS)
	$(BUILD_DIR)/bin/plot_metrics $(BUILD_DIR)/train_gpt_metrics.jsonl --title "train_gpt $(ARGS)" \
	  -o $(BUILD_DIR)/train_gpt_metrics.svg -o $(BUILD_DIR)/train_gpt_metrics.png

# A small BPE GPT on real prose that ships with Debian (the Python documentation, package python3-doc):
# tokenizer -> token shards -> train_gpt -> generate under build/text/ (the vocabulary's files under
# build/text/v$VOCAB/), each step redone only when its inputs or flags changed (scripts/train-text;
# docs/samples.md).
train-text: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target train_gpt prepare_data tokenize generate
	BUILD_DIR=$(BUILD_DIR) ARGS="$(ARGS)" scripts/train-text

bench: build
	$(BUILD_DIR)/bin/bench_ops

format:
	git ls-files '*.h' '*.cpp' '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) $(EMU_BUILD_DIR) $(AUDIT_BUILD_DIR)
