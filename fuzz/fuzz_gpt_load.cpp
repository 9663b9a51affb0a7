// Fuzz target: GPT::load (layers/gpt_checkpoint.cpp) on arbitrary bytes, native and Hugging Face
// GPT-2 layouts, with and without a config.json beside the file (fuzz/gpt_load_input.h splits the
// input). The rule: load returns a model or throws hg::Error with a one-line message -- anything else
// (another exception, a crash, a sanitizer finding) is a finding. An accepted model's config must
// match its tensors and a forward over one token must give logits [1, 1, vocab].
// Inputs over 4 MiB are skipped before load: GPT::load checks every tensor against the config before
// it builds the model, so what it allocates is bounded by the file (f16 tensors: twice), and the cap
// keeps a run far from any memory limit.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fuzz/gpt_load_input.h"
#include "layers/gpt.h"

namespace {

constexpr size_t kMaxInputBytes = size_t(4) << 20;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_gpt_load: %s\n", what);
    std::abort();
  }
}

// This process's own directory (under $TMPDIR, /dev/shm when it exists), removed at exit.
const std::filesystem::path& input_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = tmp && *tmp ? tmp : (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    std::filesystem::path d = std::filesystem::path(base) / ("halfgrad_fuzz_gpt_load_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(input_dir(), ignored);
    });
    return d;
  }();
  return dir;
}

// Replaces `path` by a new file of `bytes` (unlinked first: a mapping of the old one keeps its pages).
void write_file(const std::filesystem::path& path, const char* bytes, size_t size) {
  std::filesystem::remove(path);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes, std::streamsize(size));
  require(out.good(), "cannot write the input file");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInputBytes) return 0;
  const hg::fuzz::GptLoadInput input = hg::fuzz::split_gpt_load_input(data, size);
  const std::filesystem::path model_path = input_dir() / "model.safetensors";
  const std::filesystem::path config_path = input_dir() / "config.json";
  write_file(model_path, reinterpret_cast<const char*>(input.model), input.model_size);
  if (input.has_config) {
    write_file(config_path, input.config.data(), input.config.size());
  } else {
    std::filesystem::remove(config_path);
  }
  std::shared_ptr<hg::nn::GPT> model;
  try {
    model = hg::nn::GPT::load(model_path.string());
  } catch (const hg::Error& e) {
    require(std::strlen(e.what()) > 0, "an empty error message");
    require(std::strchr(e.what(), '\n') == nullptr, "a message of more than one line");
    return 0;  // refused with a message: the expected outcome for most inputs
  }
  const hg::nn::GPTConfig& c = model->config;
  require(model->wte->weight.shape() == hg::Shape{c.vocab_size(), c.n_embd()}, "wte disagrees with the config");
  require(model->wpe->weight.shape() == hg::Shape{c.context(), c.n_embd()}, "wpe disagrees with the config");
  require(int64_t(model->h.size()) == c.n_layer(), "the block count disagrees with the config");
  hg::NoGradGuard no_grad;
  const hg::Tensor logits = model->forward(hg::zeros({1, 1}, hg::i64));
  require(logits.shape() == hg::Shape{1, 1, c.vocab_size()}, "logits of the wrong shape");
  return 0;
}
