// generate: writes text with a trained GPT (layers/generate.h), streaming each token's bytes to stdout
// as soon as it is drawn, after the prompt (echoed as given).
//
//   generate --model model.safetensors|gpt2-dir/ --tokenizer tokenizer.json --prompt "Once upon a time"
//            --max-tokens 200 --temperature 0.8 --top-k 40 --seed 1 [--device cuda] [--no-cache]
//
// With --tokenizer (text/tokenizer.h: tokenizer.json, vocab.json + merges.txt, or their directory) the
// prompt is BPE-encoded and tokens decode to their bytes; generation stops at <|endoftext|> when the
// tokenizer has it (--no-stop-at-eot: never), and an empty prompt starts from <|endoftext|>, as GPT-2's
// unconditional samples do. Without it the model must be byte-level (vocabulary 256: token = byte), as
// `train_gpt --save` writes. The KV cache is on unless --no-cache (then every token recomputes the whole
// window: the reference, O(T^2) per token). A summary line goes to stderr: tokens and seconds, the
// prefill (the prompt's forward, up to the first token) apart from the decode steps' tokens/s. Ids
// below the tokenizer's size that have no token (holes in a loaded vocabulary) are never drawn.
// Bad input (missing model, a tokenizer larger than the model's vocabulary, a prompt longer than the
// context, values out of range) is one line on stderr and exit code 2.

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "app/cli.h"
#include "app/thread_defaults.h"
#include "layers/generate.h"
#include "layers/gpt.h"
#include "text/tokenizer.h"
#include "train/precision.h"

using namespace hg;

namespace {

constexpr const char* kProgram = "generate";

void write_bytes(const std::string& bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  app::bound_openmp_spin(argv);  // before libgomp's threads or anything else exists
  return app::guarded_main(kProgram, [&] {
    app::Flags flags(kProgram,
                         "Writes text with a trained GPT, streaming each token to stdout as it is drawn (the prompt\n"
                         "first). Byte-level models (vocabulary 256) need no tokenizer." HG_THREADS_HELP);
    auto& model_path =
        flags.add_string("model", "",
                         "the model: a safetensors file (train_gpt --save) or a GPT-2 directory (model.safetensors + "
                         "config.json, as GPT::save_hf writes and Hugging Face publishes) (required)");
    auto& tokenizer_path =
        flags.add_string("tokenizer", "",
                         "BPE tokenizer: tokenizer.json, vocab.json + merges.txt or their directory; "
                         "none: one token per byte (vocabulary 256)");
    auto& prompt_text = flags.add_string("prompt", "", "the text to continue");
    auto& max_tokens = flags.add_int("max-tokens", 100, "new tokens at most", 0, 1 << 24);
    auto& temperature = flags.add_double("temperature", 0.8, "softmax temperature; 0: greedy (argmax)", 0, 1e6);
    auto& top_k = flags.add_int("top-k", 0, "draw from the K most likely tokens only (0: all)", 0);
    auto& top_p =
        flags.add_double("top-p", 1.0, "nucleus: the most likely tokens whose probability sums to P, in (0, 1]", 0, 1);
    auto& seed = flags.add_int("seed", 1,
                               "the sampler's seed: the same seed gives the same text for the same device, precision "
                               "and --cache setting; fp32 with and without the cache agree except at near-ties; "
                               "bf16/fp16 may differ between the two",
                               0);
    auto& device_name = flags.add_string("device", "cpu", "cpu, cuda or cuda:N");
    auto& use_cache = flags.add_bool("cache", true, "use the KV cache (--no-cache: recompute the window per token)");
    auto& precision = flags.add_string("precision", "fp32", "compute dtype of the model: fp32, bf16 or fp16");
    auto& stop_at_eot = flags.add_bool("stop-at-eot", true, "stop at the tokenizer's <|endoftext|>");
    auto& threads =
        flags.add_int("threads", 0, "OpenMP threads (0: OMP_NUM_THREADS when set, else the usable cores)", 0, 4096);
    flags.after_parse([&] {
      if (model_path.empty()) app::exit_with_usage_error(kProgram, "--model FILE is required");
      std::error_code not_a_directory;  // a directory is GPT::load's to judge (its model.safetensors)
      if (!std::filesystem::is_directory(model_path, not_a_directory))
        app::check_readable_file(kProgram, "model", model_path);
      if (top_p <= 0) app::exit_with_usage_error(kProgram, "--top-p 0 is invalid; expected a value in (0, 1]");
      app::or_usage_error(kProgram, [&] { return train::parse_precision(precision); });
    });
    flags.parse(argc, argv);
    // The thread count and wait policy in force (app/thread_defaults.h), named in the summary line.
    const app::ThreadSettings thread_settings = app::apply_thread_settings(threads, std::nullopt, false, false);
    const Device device = app::checked_device(kProgram, device_name);

    std::shared_ptr<nn::GPT> model =
        app::or_usage_error(kProgram, "--model " + model_path, [&] { return nn::GPT::load(model_path); });
    const int64_t vocab = model->config.vocab_size(), context = model->config.context();
    std::optional<text::Tokenizer> tokenizer;
    if (!tokenizer_path.empty()) {
      tokenizer = app::or_usage_error(kProgram, "--tokenizer " + tokenizer_path,
                                          [&] { return text::Tokenizer::load(tokenizer_path); });
      if (int64_t(tokenizer->vocab_size()) > vocab)
        app::exit_with_usage_error(kProgram, "--tokenizer " + tokenizer_path + " has " +
                                                     std::to_string(tokenizer->vocab_size()) + " tokens; --model " +
                                                     model_path + " has a vocabulary of " + std::to_string(vocab) +
                                                     "; expected a tokenizer of at most the model's vocabulary");
    } else if (vocab != 256) {
      app::exit_with_usage_error(kProgram, "--model " + model_path + " has a vocabulary of " +
                                                   std::to_string(vocab) +
                                                   "; without --tokenizer the model must be byte-level (256)");
    }

    // Ids below the tokenizer's vocab_size() without a token (a loaded vocabulary may skip ids): never
    // drawn, since they have no bytes to write.
    std::vector<int64_t> holes;
    for (uint32_t id = 0; tokenizer && id < tokenizer->vocab_size(); ++id) {
      try {
        tokenizer->token_bytes(id);
      } catch (const Error&) {
        holes.push_back(id);
      }
    }

    std::vector<int64_t> prompt;
    if (tokenizer) {
      for (uint32_t id : tokenizer->encode(prompt_text)) prompt.push_back(id);
      if (prompt.empty() && tokenizer->end_of_text()) prompt.push_back(*tokenizer->end_of_text());
    } else {
      for (unsigned char byte : prompt_text) prompt.push_back(byte);
    }
    if (prompt.empty())
      app::exit_with_usage_error(kProgram, "--prompt is empty; expected at least one token to continue");
    if (int64_t(prompt.size()) > context)
      app::exit_with_usage_error(kProgram, "--prompt is " + std::to_string(prompt.size()) +
                                                   " tokens; the model's context is " + std::to_string(context) +
                                                   " tokens");

    model->to(train::parse_precision(precision));
    model->to(device);
    const auto options =
        nn::GenerationOptions()
            .max_tokens(max_tokens)
            .temperature(temperature)
            .top_k(top_k)
            .top_p(top_p)
            .seed(uint64_t(seed))
            .use_cache(use_cache)
            .stop_at(tokenizer && stop_at_eot && tokenizer->end_of_text() ? int64_t(*tokenizer->end_of_text()) : -1)
            .vocab_limit(tokenizer ? int64_t(tokenizer->vocab_size()) : 0)
            .banned(holes);
    app::or_usage_error(kProgram, [&] { options.validate(); });

    write_bytes(prompt_text);
    // The first token comes after the prompt's forward (the prefill) and dominates short runs; the
    // rest are decode steps. The two are reported apart.
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    Clock::time_point first_token = start;
    const std::vector<int64_t> generated = nn::generate(*model, prompt, options, [&](int64_t id) {
      if (first_token == start) first_token = Clock::now();
      write_bytes(tokenizer ? tokenizer->token_bytes(uint32_t(id)) : std::string(1, char(id)));
    });
    const Clock::time_point end = Clock::now();
    write_bytes("\n");
    auto seconds = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    const size_t decoded = generated.empty() ? 0 : generated.size() - 1;
    std::fprintf(stderr,
                 "%s: %zu tokens in %.3f s | prefill %zu prompt tokens + first token %.3f s | decode %zu tokens in "
                 "%.3f s (%.1f tokens/s) | %s, KV cache %s, %s | %s\n",
                 kProgram, generated.size(), seconds(start, end), prompt.size(),
                 seconds(start, generated.empty() ? end : first_token), decoded,
                 generated.empty() ? 0.0 : seconds(first_token, end),
                 decoded ? double(decoded) / std::max(seconds(first_token, end), 1e-9) : 0.0, device.str().c_str(),
                 use_cache ? "on" : "off", train::precision_name(model->wte->weight.dtype()),
                 thread_settings.describe().c_str());
    return 0;
  });
}
