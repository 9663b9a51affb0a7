// Fuzz target: the samples' flag parser (app/cli.h Flags) and their shared flag validation
// (train/precision.h, Device::parse), on an argv cut from the input at '\n' bytes -- or, when the
// input starts with '{', on the input as a run config file (Flags::apply_json, as --config reads it;
// and Flags::restore, as --resume reads a checkpoint's, into a fresh set of flags of which some were
// given on the command line, so values are restored, compared with fixed keys and refused): accepted
// settings must print (to_json) as a file that reads back to the same print, and stay in bounds. The flags are those train_gpt declares, with their kinds
// and bounds. Every outcome is a parsed set of flags or a UsageExit (status 2 with a "train_gpt:
// error: ..." line, or 0 after --help / --print-config); the validation after parse either accepts or
// answers UsageExit / hg::Error -- never a crash.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/cli.h"
#include "engine/device.h"
#include "train/precision.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_cli: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"train_gpt"};
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.push_back(current);
      current.clear();
    } else {
      current += char(data[i]);
    }
  }
  args.push_back(current);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  hg::app::ThrowUsageExits throw_instead_of_exit;
  struct Declared {
    hg::app::Flags flags{"train_gpt", "fuzzed"};
    std::string& device = flags.add_string("device", "cpu", "device");
    int64_t& layers = flags.add_int("layers", 2, "blocks", 1, 1024);
    int64_t& heads = flags.add_int("heads", 4, "heads", 1, 1 << 16);
    int64_t& dim = flags.add_int("dim", 128, "width", 1, 1 << 16);
    int64_t& context = flags.add_int("context", 16, "context", 1, 1 << 20);
    int64_t& batch = flags.add_int("batch", 64, "batch", 1, 1 << 20);
    double& lr = flags.add_double("lr", 2e-3, "lr", 0.0);
    double& dropout = flags.add_double("dropout", 0.0, "dropout", 0.0, 0.99);
    int64_t& seed = flags.add_int("seed", 1337, "seed", 0);
    std::string& precision = flags.add_string("precision", "fp32", "precision");
    std::string& loss_scale = flags.add_string("loss-scale", "", "loss scale");
    int64_t& grad_accum = flags.add_int("grad-accum", 1, "accumulation", 1);
    int64_t& batch_tokens = flags.add_int("batch-tokens", 0, "tokens per step", 0);
    bool& resume = flags.add_bool("resume", false, "resume");
    std::string& load = flags.add_string("load", "", "start from this file");
    bool in_bounds() const {
      return layers >= 1 && layers <= 1024 && heads >= 1 && dim >= 1 && context >= 1 && context <= (1 << 20) &&
             batch >= 1 && batch <= (1 << 20) && lr >= 0 && dropout >= 0 && dropout <= 0.99 && seed >= 0 &&
             grad_accum >= 1 && batch_tokens >= 0;
    }
  };
  Declared declared;
  hg::app::Flags& flags = declared.flags;
  const auto& [flags_, device, layers, heads, dim, context, batch, lr, dropout, seed, precision, loss_scale,
               grad_accum, batch_tokens, resume, load] = declared;  // the values, by name
  (void)flags_;
  (void)load;
  try {
    if (size > 0 && data[0] == '{') {
      const std::string text(reinterpret_cast<const char*>(data), size);
      flags.apply_json(text, "fuzz.json");
      const std::string printed = flags.to_json();
      Declared again;
      again.flags.apply_json(printed, "printed.json");
      require(again.flags.to_json() == printed, "--print-config's output does not read back to the same print");
      // --resume: a run that gave some keys now (fixed or not, a path among them) restores the rest.
      Declared resumed;
      std::vector<std::string> given = {"train_gpt", "--layers", "2", "--lr", "0.5", "--precision", "bf16",
                                        "--load", "fuzz.safetensors", "--resume"};
      std::vector<char*> given_argv;
      for (std::string& a : given) given_argv.push_back(a.data());
      resumed.flags.parse(int(given.size()), given_argv.data());
      resumed.flags.restore(text, "entry",
                            hg::app::ResumeRules{{"layers", "dim", "precision", "load"}, {"resume"}, {"load"}});
      require(resumed.in_bounds(), "restore accepted a value outside its bounds");
      require(resumed.layers == 2 && resumed.lr == 0.5 && resumed.precision == "bf16" &&
                  resumed.load == "fuzz.safetensors" && resumed.resume,
              "restore changed a key given now");
    } else {
      flags.parse(int(args.size()), argv.data());
    }
    require(declared.in_bounds(), "parse accepted a value outside its bounds");
    (void)resume;
    const hg::DType dtype = hg::train::parse_precision(precision);
    const hg::optim::LossScaler scaler = hg::train::parse_loss_scale(loss_scale, dtype);
    (void)scaler;
    const int64_t micro = hg::train::accumulation_steps(grad_accum, batch_tokens, batch * context);
    require(micro >= 1, "accumulation_steps returned no micro-batch");
    (void)hg::Device::parse(device);
  } catch (const hg::app::UsageExit& e) {
    require(e.status == 0 || e.status == 2, "a usage exit with another status");
    require(e.status == 0 || e.message.rfind("train_gpt: error: ", 0) == 0, "a usage error without its prefix");
  } catch (const hg::Error& e) {
    require(std::string(e.what()).size() > 0, "an empty error message");
  }
  return 0;
}
