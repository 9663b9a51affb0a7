// Run config files (app/cli.h RUN CONFIG FILES, app/run_config.cpp) and the run config in
// training checkpoints (train/checkpoint.h, read_run_config in train/checkpoint_directory.h):
// --print-config round-trips random settings exactly; --config files combine with flags (flags win
// wherever --config stands, a partial file keeps the other defaults, explicit keys are recorded);
// every kind of bad file is one usage error (exit 2) with its exact message; --resume's restore
// takes the checkpoint's values for the keys not given, refuses a changed fixed key and never
// restores per-invocation keys; a Trainer stores its run config in every checkpoint, and
// read_run_config reads the newest one back (nullopt for checkpoints written without one).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "app/cli.h"
#include "data/data_loader.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/check_error.h"
#include "support/temp_dir.h"
#include "train/checkpoint_directory.h"
#include "train/trainer.h"

using namespace hg;
using app::Flags;
using app::UsageExit;

namespace {

using hg::test::TempDir;

// A program with a flag of every kind, bounds on some.
struct Settings {
  Flags flags{"train_gpt", "test program"};
  std::string& device = flags.add_string("device", "cpu", "device");
  int64_t& dim = flags.add_int("dim", 128, "width", 1, 65536);
  int64_t& steps = flags.add_int("steps", 3000, "steps", 0);
  int64_t& grad_accum = flags.add_int("grad-accum", 1, "accumulation", 1);
  double& lr = flags.add_double("lr", 2e-3, "learning rate", 0.0);
  double& dropout = flags.add_double("dropout", 0.0, "dropout", 0.0, 0.99);
  std::string& precision = flags.add_string("precision", "fp32", "precision");
  bool& resume = flags.add_bool("resume", false, "resume");
  bool& fp32_grads = flags.add_bool("fp32-grads", false, "fp32 gradients");
  std::string& checkpoint_dir = flags.add_string("checkpoint-dir", "", "directory");
  std::string& data = flags.add_string("data", "", "comma-separated text files");
  int64_t& stop_after = flags.add_int("stop-after-steps", 0, "stop after", 0);
};

const app::ResumeRules kRules{{"dim", "grad-accum", "precision", "fp32-grads", "dropout", "data"},
                                  {"resume", "checkpoint-dir", "stop-after-steps"},
                                  {"data"}};

// What the process writes to stderr (fd 2) while it lives: text() stops capturing and returns it.
class CapturedStderr {
 public:
  explicit CapturedStderr(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  std::string text() {
    if (saved_ >= 0) {
      std::fflush(stderr);
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
    }
    std::ifstream file(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(file), {});
  }
  ~CapturedStderr() { text(); }

 private:
  std::string path_;
  int saved_ = -1;
};

// A path as a JSON string (temporary paths hold no quote, backslash or control character).
std::string quoted(const std::string& path) { return "\"" + path + "\""; }

// Runs parse() on argv (program name first); returns the UsageExit it threw, or status -1 when none.
UsageExit parse(Flags& flags, std::vector<std::string> args) {
  app::ThrowUsageExits throw_instead;
  args.insert(args.begin(), "train_gpt");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  try {
    flags.parse(int(args.size()), argv.data());
  } catch (const UsageExit& e) {
    return e;
  }
  return {-1, ""};
}

// The usage error `fn` raises (status 2), or "" with a failed check.
template <class Fn>
std::string usage_error(Fn&& fn) {
  app::ThrowUsageExits throw_instead;
  try {
    fn();
  } catch (const UsageExit& e) {
    CHECK(e.status == 2);
    return e.message;
  }
  FAIL_CHECK("no usage error");
  return "";
}

// The usage error parse() answers (status 2).
std::string parse_error(Flags& flags, const std::vector<std::string>& args) {
  const UsageExit exit = parse(flags, args);
  CHECK(exit.status == 2);
  return exit.message;
}

std::string printed_config(Flags& flags, const std::vector<std::string>& args) {
  const UsageExit exit = parse(flags, args);
  CHECK(exit.status == 0);
  return exit.message;
}

}  // namespace

TEST_CASE("--print-config prints every key in declaration order, and --config of it prints the same bytes") {
  std::random_device entropy;
  const unsigned seed = entropy();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    Settings a;
    a.dim = 1 + int64_t(rng() % 65536);
    a.steps = int64_t(rng() >> 1);  // any non-negative int64
    a.lr = std::uniform_real_distribution<double>(0.0, 1e300)(rng) * (trial % 2 ? 1e-300 : 1.0);
    a.dropout = std::uniform_real_distribution<double>(0.0, 0.99)(rng);
    std::string text;  // printable ASCII with quotes and backslashes, and control characters
    for (int i = int(rng() % 24); i > 0; --i) text += char(rng() % 4 == 0 ? 1 + rng() % 31 : 32 + rng() % 95);
    a.device = text;
    a.fp32_grads = rng() % 2;
    const std::string printed = printed_config(a.flags, {"--print-config"});
    CHECK(printed.rfind("{\n  \"device\": ", 0) == 0);
    CHECK(printed.find("\"dim\": " + std::to_string(a.dim) + ",\n  \"steps\": " + std::to_string(a.steps)) !=
          std::string::npos);
    CHECK(printed.find("\"stop-after-steps\": 0\n}\n") != std::string::npos);

    TempDir dir;
    Settings b;
    const UsageExit again = parse(b.flags, {"--config", dir.write("a.json", printed), "--print-config"});
    CHECK(again.status == 0);
    CHECK(again.message == printed);
    CHECK(b.lr == a.lr);  // exactly: the shortest round-trip form
    CHECK(b.dropout == a.dropout);
    CHECK(b.device == a.device);
    CHECK(b.steps == a.steps);
    CHECK(b.fp32_grads == a.fp32_grads);
  }
}

TEST_CASE("a config file and flags combine: flags win wherever --config stands, absent keys keep defaults") {
  TempDir dir;
  const std::string file = dir.write("run.json", R"({"steps": 77, "lr": 3, "precision": "bf16", "resume": true})");
  for (const bool flag_first : {true, false}) {
    Settings s;
    std::vector<std::string> args = {"--config=" + file};
    args.insert(flag_first ? args.begin() : args.end(), {"--steps", "5"});
    CHECK(parse(s.flags, args).status == -1);
    CHECK(s.steps == 5);           // the flag
    CHECK(s.lr == 3.0);            // a JSON integer for a float flag
    CHECK(s.precision == "bf16");  // the file
    CHECK(s.resume);
    CHECK(s.dim == 128);  // absent: the default
    CHECK(s.flags.given("steps"));
    CHECK(s.flags.given("lr"));
    CHECK_FALSE(s.flags.given("dim"));
    CHECK_FALSE(s.flags.given("grad-accum"));
  }
  Settings empty;
  CHECK(parse(empty.flags, {"--config", dir.write("empty.json", " {}\n")}).status == -1);
  CHECK(empty.steps == 3000);
  Settings negated;  // --no-X counts as given too
  CHECK(parse(negated.flags, {"--no-fp32-grads", "--config", dir.write("b.json", R"({"fp32-grads": true})")}).status ==
        -1);
  CHECK_FALSE(negated.fp32_grads);
  Settings hooked;  // the after_parse hooks run in the order added, before --print-config prints
  hooked.flags.after_parse([&] { hooked.steps = 9; });
  hooked.flags.after_parse([&] { hooked.steps *= 2; });
  CHECK(printed_config(hooked.flags, {"--print-config"}).find("\"steps\": 18,") != std::string::npos);
  // A program's check in a hook refuses settings before --print-config prints them.
  Settings checked;
  checked.flags.after_parse([&] {
    if (checked.dim % 3 != 0) app::exit_with_usage_error("train_gpt", "--dim must be a multiple of 3");
  });
  CHECK(parse_error(checked.flags, {"--dim", "16", "--print-config"}) ==
        "train_gpt: error: --dim must be a multiple of 3");
  CHECK(printed_config(checked.flags, {"--dim", "15", "--print-config"}).find("\"dim\": 15,") != std::string::npos);
}

TEST_CASE("text values are UTF-8: a flag's value that is not is a usage error naming the flag and the byte") {
  CHECK(app::utf8_error_offset("") == std::string::npos);
  CHECK(app::utf8_error_offset("cpu \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") ==
        std::string::npos);  // e-acute, euro, emoji
  CHECK(app::utf8_error_offset("ab\xff") == 2);
  CHECK(app::utf8_error_offset("a\x80") == 1);              // a continuation byte alone
  CHECK(app::utf8_error_offset("ab\xc3") == 2);             // cut short
  CHECK(app::utf8_error_offset("\xc0\xaf") == 0);           // overlong '/'
  CHECK(app::utf8_error_offset("x\xed\xa0\x80") == 1);       // a UTF-16 surrogate
  CHECK(app::utf8_error_offset("\xf4\x90\x80\x80") == 0);   // beyond U+10FFFF
  Settings s;
  CHECK(parse_error(s.flags, {"--device", "cu\xff"}) ==
        "train_gpt: error: --device must be UTF-8 text (its value goes into --print-config and run configs as "
        "JSON); byte 2 (0xff) is not (see --help)");
  CHECK(parse_error(s.flags, {"--data=a\xc3("}) ==
        "train_gpt: error: --data must be UTF-8 text (its value goes into --print-config and run configs as JSON); "
        "byte 1 (0xc3) is not (see --help)");
  // UTF-8 round-trips through --print-config and --config unchanged.
  Settings a;
  const std::string printed = printed_config(a.flags, {"--data", "d\xc3\xa9j\xc3\xa0.txt", "--print-config"});
  TempDir dir;
  Settings b;
  CHECK(printed_config(b.flags, {"--config", dir.write("u.json", printed), "--print-config"}) == printed);
  CHECK(b.data == "d\xc3\xa9j\xc3\xa0.txt");
}

TEST_CASE("a bad config file is one usage error naming the file, the key, what was expected and what was found") {
  TempDir dir;
  auto error_for = [&](const std::string& text) {
    const std::string file = dir.write("run.json", text);
    Settings s;
    return parse_error(s.flags, {"--config", file});
  };
  const std::string run = "train_gpt: error: " + (dir.path / "run.json").string() + ": ";
  CHECK(error_for(R"({"steps": "3"})") == run + "key \"steps\": expected an integer, got the string \"3\"");
  CHECK(error_for(R"({"steps": 2.0})") == run + "key \"steps\": expected an integer, got the number 2.0");
  CHECK(error_for(R"({"steps": true})") == run + "key \"steps\": expected an integer, got the boolean true");
  CHECK(error_for(R"({"lr": "0.1"})") == run + "key \"lr\": expected a number, got the string \"0.1\"");
  CHECK(error_for(R"({"precision": 16})") == run + "key \"precision\": expected a string, got the integer 16");
  CHECK(error_for(R"({"resume": 1})") == run + "key \"resume\": expected true or false, got the integer 1");
  CHECK(error_for(R"({"resume": null})") == run + "key \"resume\": expected true or false, got null");
  CHECK(error_for(R"({"device": ["cpu"]})") == run + "key \"device\": expected a string, got an array");
  CHECK(error_for(R"({"steps": -3})") == run + "key \"steps\": must be >= 0, got -3");
  CHECK(error_for(R"({"dim": 65537})") == run + "key \"dim\": must be <= 65536, got 65537");
  CHECK(error_for(R"({"steps": 9223372036854775808})") ==
        run + "key \"steps\": must be <= 9223372036854775807, got 9223372036854775808");
  CHECK(error_for(R"({"dropout": 1.5})") == run + "key \"dropout\": must be in [0, 0.99], got 1.5");
  CHECK(error_for(R"({"lr": -1e-9})") == run + "key \"lr\": must be in [0, 1e+308], got -1e-09");
  CHECK(error_for(R"({"grad_accum": 2})") == run + "unknown key \"grad_accum\"; did you mean \"grad-accum\"?");
  CHECK(error_for(R"({"stpes": 2})") == run + "unknown key \"stpes\"; did you mean \"steps\"?");
  CHECK(error_for(R"({"xyzzy": 2})") == run + "unknown key \"xyzzy\"; expected a flag name of train_gpt (see --help)");
  CHECK(error_for(R"({"config": "b.json"})") ==
        run + "unknown key \"config\" (a config file holds settings, not --config)");
  CHECK(error_for(R"({"steps": 2, "steps": 3})") == run + "key \"steps\" appears twice");
  // Keys as JSON prints them (a newline in a key keeps the message on one line).
  CHECK(error_for(R"({"a\nb": 2})") == run + "unknown key \"a\\nb\"; expected a flag name of train_gpt (see --help)");
  CHECK(error_for(R"({"x\ty": 1, "x\ty": 2})") == run + "key \"x\\ty\" appears twice");
  // A long string is cut after at most 56 bytes, never inside a UTF-8 character.
  CHECK(error_for("{\"steps\": \"" + std::string(55, 'x') + "\u00e9tc\"}") ==
        run + "key \"steps\": expected an integer, got the string \"" + std::string(55, 'x') + "...\"");
  CHECK(error_for("{\"steps\": \"" + std::string(54, 'x') + "\u00e9tc\"}") ==
        run + "key \"steps\": expected an integer, got the string \"" + std::string(54, 'x') + "\xc3\xa9...\"");
  // Integers beyond int64 and uint64 (nlohmann reads them as floats) are out of range, not floats.
  CHECK(error_for(R"({"steps": 100000000000000000000})") ==
        run + "key \"steps\": got 1e+20, out of range for an integer; expected an integer in [0, 9223372036854775807]");
  CHECK(error_for(R"({"dim": -18446744073709551617})") ==
        run + "key \"dim\": got -1.8446744073709552e+19, out of range for an integer; expected an integer in [1, "
              "65536]");
  CHECK(error_for("[1, 2]") == run + "expected a JSON object of settings ({\"steps\": 100, ...}), got an array");
  CHECK(error_for("\"steps\"") ==
        run + "expected a JSON object of settings ({\"steps\": 100, ...}), got the string \"steps\"");
  CHECK(error_for("{\"steps\": 2,\n \"lr\": }") ==
        run +
            "not valid JSON: parse error at line 2, column 8: syntax error while parsing value - unexpected '}'; "
            "expected '[', '{', or a literal");
  CHECK(error_for(R"({"lr": 1e999})") == run + "not valid JSON: number overflow parsing '1e999'");
  CHECK(error_for("").rfind(run + "not valid JSON: parse error at line 1, column 1: ", 0) == 0);
  // A bad key is an error even where a flag overrides it.
  const std::string overridden = dir.write("over.json", R"({"steps": "many"})");
  Settings s;
  CHECK(parse_error(s.flags, {"--steps", "4", "--config", overridden}) ==
        "train_gpt: error: " + overridden + ": key \"steps\": expected an integer, got the string \"many\"");
  // The command line's own errors.
  const std::string missing = (dir.path / "missing.json").string();
  CHECK(parse_error(s.flags, {"--config", missing}) ==
        "train_gpt: error: --config \"" + missing + "\": No such file or directory; expected a readable file");
  CHECK(parse_error(s.flags, {"--config", dir.path.string()}) ==
        "train_gpt: error: --config \"" + dir.path.string() +
            "\" is neither a regular file nor a pipe; expected a readable file or pipe");
  CHECK(parse_error(s.flags, {"--config", overridden, "--config", overridden}) ==
        "train_gpt: error: --config is given twice; expected one config file (flags override its keys) (see --help)");
  CHECK(parse_error(s.flags, {"--config"}) == "train_gpt: error: --config needs a value (see --help)");
  CHECK(parse_error(s.flags, {"--print-config=yes"}) ==
        "train_gpt: error: --print-config takes no value, got \"yes\" (see --help)");
  CHECK_ERROR(s.flags.add_int("config", 1, "clash"), "declares the flag 'config' twice or one of Flags' own");
  CHECK_ERROR(s.flags.add_bool("steps", true, "clash"), "declares the flag 'steps' twice");
}

TEST_CASE(
    "a renamed flag: its former name still sets it on the command line (with a note), in a config file and in "
    "a checkpoint's run config; the new name is what is printed and compared") {
  TempDir dir;
  auto renamed = [] {
    auto s = std::make_unique<Settings>();
    s->flags.rename("width", "dim");
    return s;
  };
  {
    auto s = renamed();
    CapturedStderr err((dir.path / "stderr.txt").string());
    CHECK(parse(s->flags, {"--width", "256"}).status == -1);
    CHECK(err.text() == "train_gpt: note: --width is now --dim (the old name still works)\n");
    CHECK(s->dim == 256);
    CHECK(s->flags.given("dim"));
    CHECK(s->flags.given("width"));
  }
  {
    auto s = renamed();
    CapturedStderr quiet((dir.path / "quiet.txt").string());
    const std::string shown = printed_config(s->flags, {"--width", "64", "--print-config"});
    CHECK(quiet.text().find("--width is now --dim") != std::string::npos);
    CHECK(shown.find("\"dim\": 64,") != std::string::npos);
    CHECK(shown.find("width") == std::string::npos);
  }
  {
    auto s = renamed();
    CHECK(parse(s->flags, {"--config", dir.write("old.json", R"({"width": 32})")}).status == -1);
    CHECK(s->dim == 32);
    auto both = renamed();
    CHECK(parse_error(both->flags, {"--config", dir.write("both.json", R"({"dim": 64, "width": 32})")})
              .find("keys \"dim\" and \"width\" set the same flag (one is its former name); expected one of them") !=
          std::string::npos);
  }
  {
    // An older checkpoint's run config holds the former name: restored, and compared as the fixed key it is.
    auto fresh = renamed();
    REQUIRE(parse(fresh->flags, {"--resume"}).status == -1);
    fresh->flags.restore(R"({"width": 512})", "entry", kRules);
    CHECK(fresh->dim == 512);
    auto changed = renamed();
    REQUIRE(parse(changed->flags, {"--dim", "256"}).status == -1);
    CHECK(usage_error([&] { changed->flags.restore(R"({"width": 512})", "entry", kRules); }) ==
          "train_gpt: error: --resume: \"dim\" is 512 in the checkpoint's run config, 256 now; it cannot change "
          "mid-run");
  }
  Settings s;
  CHECK_ERROR(s.flags.rename("steps", "dim"), "declares the flag 'steps' twice");
  CHECK_ERROR(s.flags.rename("width", "height"), "rename: 'height' is not a flag of train_gpt");
}

TEST_CASE("--resume restores the checkpoint's run config under the keys given now") {
  Settings original;
  REQUIRE(parse(original.flags, {"--dim", "256", "--steps", "40", "--lr", "0.25", "--precision", "bf16",
                                 "--checkpoint-dir", "old", "--stop-after-steps", "20"})
              .status == -1);
  const std::string stored = original.flags.run_config(kRules);
  CHECK(stored.find("\"checkpoint-dir\"") == std::string::npos);  // per-invocation keys are not stored
  CHECK(stored.find("\"stop-after-steps\"") == std::string::npos);
  CHECK(stored.find("\"resume\"") == std::string::npos);

  Settings resumed;
  REQUIRE(parse(resumed.flags, {"--checkpoint-dir", "new", "--resume", "--steps", "60"}).status == -1);
  resumed.flags.restore(stored, "ck/step_0000000020.safetensors", kRules);
  CHECK(resumed.dim == 256);  // restored
  CHECK(resumed.precision == "bf16");
  CHECK(resumed.lr == 0.25);
  CHECK(resumed.steps == 60);  // a mutable key given now
  CHECK(resumed.checkpoint_dir == "new");
  CHECK(resumed.stop_after == 0);
  CHECK(resumed.resume);
  CHECK(resumed.flags.given("dim"));

  Settings same;  // a fixed key given with its checkpoint value is fine
  REQUIRE(parse(same.flags, {"--dim", "256", "--precision", "bf16", "--resume"}).status == -1);
  same.flags.restore(stored, "entry", kRules);
  CHECK(same.dim == 256);

  auto refusal = [&](std::vector<std::string> args) {
    Settings s;
    REQUIRE(parse(s.flags, args).status == -1);
    return usage_error([&] { s.flags.restore(stored, "entry", kRules); });
  };
  CHECK(refusal({"--dim", "128"}) ==
        "train_gpt: error: --resume: \"dim\" is 256 in the checkpoint's run config, 128 now; it cannot change mid-run");
  CHECK(refusal({"--precision", "fp16"}) ==
        "train_gpt: error: --resume: \"precision\" is \"bf16\" in the checkpoint's run config, \"fp16\" now; it "
        "cannot change mid-run");
  CHECK(refusal({"--dropout", "0.1"}) ==
        "train_gpt: error: --resume: \"dropout\" is 0.0 in the checkpoint's run config, 0.1 now; it cannot change "
        "mid-run");
  CHECK(refusal({"--fp32-grads"}) ==
        "train_gpt: error: --resume: \"fp32-grads\" is false in the checkpoint's run config, true now; it cannot "
        "change mid-run");
  // A fixed key set by a config file counts as given: a conflict with the checkpoint is refused.
  TempDir dir;
  CHECK(refusal({"--config", dir.write("dim.json", R"({"dim": 64})")}) ==
        "train_gpt: error: --resume: \"dim\" is 256 in the checkpoint's run config, 64 now; it cannot change mid-run");

  // A stored per-invocation key (a checkpoint written under other rules) is neither applied nor given.
  Settings per_invocation;
  REQUIRE(parse(per_invocation.flags, {"--resume"}).status == -1);
  per_invocation.flags.restore(R"({"stop-after-steps": 20, "checkpoint-dir": "old", "steps": 5})", "entry", kRules);
  CHECK(per_invocation.stop_after == 0);
  CHECK_FALSE(per_invocation.flags.given("stop-after-steps"));
  CHECK(per_invocation.checkpoint_dir == "");
  CHECK_FALSE(per_invocation.flags.given("checkpoint-dir"));
  CHECK(per_invocation.steps == 5);

  // A stored value of a wrong type names its entry where it is used (not given now) or compared (a
  // fixed key given now); a mutable key given now does not read it.
  Settings s;
  CHECK(usage_error([&] { s.flags.restore(R"({"dim": "64"})", "ck/step_1", kRules); }) ==
        "train_gpt: error: ck/step_1: key \"dim\": expected an integer, got the string \"64\"");
  Settings fixed_given;
  REQUIRE(parse(fixed_given.flags, {"--dim", "64"}).status == -1);
  CHECK(usage_error([&] { fixed_given.flags.restore(R"({"dim": 1e3})", "ck/step_1", kRules); }) ==
        "train_gpt: error: ck/step_1: key \"dim\": expected an integer, got the number 1000.0");
  Settings mutable_given;
  REQUIRE(parse(mutable_given.flags, {"--steps", "9", "--lr", "0.5"}).status == -1);
  mutable_given.flags.restore(R"({"steps": "many", "lr": -4, "dim": 32})", "ck/step_1", kRules);
  CHECK(mutable_given.steps == 9);
  CHECK(mutable_given.lr == 0.5);
  CHECK(mutable_given.dim == 32);

  // A stored key this program no longer declares is skipped with a warning naming it (JSON-quoted:
  // one line) and the entry; the other keys are restored.
  Settings older;
  std::string warnings;
  {
    CapturedStderr captured((dir.path / "stderr.txt").string());
    older.flags.restore(R"({"dim": 64, "heads": 4, "old\nname": true})", "ck/step_1", kRules);
    warnings = captured.text();
  }
  CHECK(warnings ==
        "train_gpt: warning: run config of ck/step_1: ignoring unknown key \"heads\"\n"
        "train_gpt: warning: run config of ck/step_1: ignoring unknown key \"old\\nname\"\n");
  CHECK(older.dim == 64);
  CHECK_ERROR(s.flags.restore("{}", "entry", app::ResumeRules{{"heads"}, {}, {}}), "ResumeRules name 'heads'");
  CHECK_ERROR(s.flags.restore("{}", "entry", app::ResumeRules{{}, {}, {"load"}}), "ResumeRules name 'load'");
  CHECK_ERROR(s.flags.restore("{}", "entry", app::ResumeRules{{"dim"}, {}, {"dim"}}),
              "ResumeRules paths name 'dim', which is not a text flag");
}

TEST_CASE("--resume compares path keys as files: the same file under another name is no change") {
  TempDir dir;
  const std::string a = dir.write("a.txt", "abc"), b = dir.write("b.txt", "abd");
  const std::string relative_a = std::filesystem::relative(a).string();  // against the current directory
  REQUIRE(relative_a != a);
  const std::string stored = "{\"data\": " + quoted(a + "," + b) + "}";
  auto restore_with = [&](const std::string& data) {
    Settings s;
    REQUIRE(parse(s.flags, {"--data", data}).status == -1);
    s.flags.restore(stored, "entry", kRules);
    CHECK(s.data == data);  // the name given now stays
  };
  restore_with(a + "," + b);
  restore_with(relative_a + "," + b);
  restore_with(relative_a + "," + (dir.path / "." / "b.txt").string());
  auto refusal = [&](const std::string& data) {
    Settings s;
    REQUIRE(parse(s.flags, {"--data", data}).status == -1);
    return usage_error([&] { s.flags.restore(stored, "entry", kRules); });
  };
  const std::string compared =
      " now (compared file by file: the same file where both exist, the same text otherwise); it cannot change "
      "mid-run";
  CHECK(refusal(b + "," + a) == "train_gpt: error: --resume: \"data\" is " + quoted(a + "," + b) +
                                    " in the checkpoint's run config, " + quoted(b + "," + a) + compared);
  CHECK(refusal(relative_a) == "train_gpt: error: --resume: \"data\" is " + quoted(a + "," + b) +
                                   " in the checkpoint's run config, " + quoted(relative_a) + compared);
  // Where a file is missing, its names are compared as text.
  const std::string missing = (dir.path / "missing.txt").string();
  Settings gone;
  REQUIRE(parse(gone.flags, {"--data", "./" + std::filesystem::relative(missing).string()}).status == -1);
  CHECK(usage_error([&] { gone.flags.restore("{\"data\": " + quoted(missing) + "}", "entry", kRules); })
            .find("--resume: \"data\" is " + quoted(missing)) != std::string::npos);
  Settings same_text;
  REQUIRE(parse(same_text.flags, {"--data", missing}).status == -1);
  same_text.flags.restore("{\"data\": " + quoted(missing) + "}", "entry", kRules);
}

TEST_CASE("a checkpoint stores the run config and read_run_config gives the newest one back") {
  TempDir dir;
  const std::string ckpt = (dir.path / "ckpt").string();
  CHECK_FALSE(train::read_run_config(ckpt).has_value());  // no directory: nothing (and nothing created)
  CHECK_FALSE(std::filesystem::exists(ckpt));

  // A file written without a run config (as before this change) has none.
  int64_t counter = 7;
  train::TrainingState state;
  state.counter("n", counter);
  const std::string plain = (dir.path / "plain.safetensors").string();
  train::save_checkpoint(plain, state, 3);
  CHECK_FALSE(train::checkpoint_run_config(plain).has_value());
  const std::string config = "{\n  \"steps\": " + std::to_string(std::random_device()()) + "\n}\n";
  state.run_config(config);
  const std::string with = (dir.path / "with.safetensors").string();
  train::save_checkpoint(with, state, 3);
  CHECK(train::checkpoint_run_config(with) == config);
  train::TrainingState reader;  // loading ignores it
  int64_t read_back = -1;
  reader.counter("n", read_back);
  CHECK(train::load_checkpoint(with, reader) == 3);
  CHECK(read_back == 7);
  CHECK_ERROR(train::checkpoint_run_config(dir.write("model.safetensors", "not a file")), "model.safetensors");

  // A Trainer stores options.run_config in every checkpoint; the newest entry is read.
  manual_seed(3);
  struct Rows final : data::Dataset {
    int64_t size() const override { return 16; }
    std::vector<data::Field> fields() const override { return {{"x", DType::f32, {2}}}; }
    void get(int64_t i, const std::vector<void*>& out) const override {
      const float xy[2] = {float(i), 1.0f};
      std::memcpy(out[0], xy, sizeof xy);
    }
  };
  auto model = std::make_shared<nn::Linear>(2, 1);
  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions().lr(0.01));
  data::DataLoader loader(std::make_shared<Rows>(), data::DataLoaderOptions().batch_size(4));
  {
    train::Trainer trainer(
        *model, optimizer, loader, [&](const data::Batch& b) { return sum(model->forward(b[0])); },
        train::TrainerOptions().steps(2).checkpoint_dir(ckpt).checkpoint_every(1).run_config(config));
    trainer.fit();
  }
  const auto stored = train::read_run_config(ckpt);
  REQUIRE(stored.has_value());
  CHECK(stored->entry == (std::filesystem::path(ckpt) / "step_0000000002.safetensors").string());
  CHECK(stored->json == config);
  // A newer entry without a run config (an older build's) means none: the run resumes as before.
  std::filesystem::copy_file(plain, std::filesystem::path(ckpt) / "step_0000000005.safetensors");
  CHECK_FALSE(train::read_run_config(ckpt).has_value());
  // A directory entry (a sharded optimizer's) is read from its state.safetensors.
  std::filesystem::create_directory(std::filesystem::path(ckpt) / "step_0000000009");
  train::save_checkpoint((std::filesystem::path(ckpt) / "step_0000000009" / "state.safetensors").string(), state, 9);
  // (an entry is whole only with its shards: one rank's stands in, any intact file will do here)
  train::save_checkpoint((std::filesystem::path(ckpt) / "step_0000000009" / "optimizer.rank0-of-1.safetensors").string(),
                         state, 9);
  // Both layouts: the run's layout names the entry (the newest of that layout, as latest_for resumes);
  // without it the directory is refused, naming the newest of each.
  const auto sharded = train::read_run_config(ckpt, true);
  REQUIRE(sharded.has_value());
  CHECK(sharded->entry == (std::filesystem::path(ckpt) / "step_0000000009").string());
  CHECK(sharded->json == config);
  CHECK(sharded->sharded);
  CHECK_FALSE(train::read_run_config(ckpt, false).has_value());  // step 5, written without one
  std::filesystem::remove(std::filesystem::path(ckpt) / "step_0000000005.safetensors");
  const auto single = train::read_run_config(ckpt, false);
  REQUIRE(single.has_value());
  CHECK(single->entry == (std::filesystem::path(ckpt) / "step_0000000002.safetensors").string());
  CHECK_FALSE(single->sharded);
  const std::string both = "holds checkpoints of both layouts (the newest single-file one: '" +
                           (std::filesystem::path(ckpt) / "step_0000000002.safetensors").string() +
                           "'; the newest sharded (ZeRO) one: '" +
                           (std::filesystem::path(ckpt) / "step_0000000009").string() + "')";
  CHECK_ERROR(train::read_run_config(ckpt), both.c_str());
  // One layout: it is the one read, with or without the layout named.
  for (const char* name : {"step_0000000001.safetensors", "step_0000000002.safetensors"})
    std::filesystem::remove(std::filesystem::path(ckpt) / name);
  REQUIRE(train::read_run_config(ckpt).has_value());
  CHECK(train::read_run_config(ckpt)->entry == sharded->entry);
  CHECK_FALSE(train::read_run_config(ckpt, false).has_value());
}
