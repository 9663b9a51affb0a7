#pragma once
// The command-line flag parser of every program (samples, plot_metrics, benchmarks that take flags):
// flags are declared once with a default and a help line, `--help` prints them, and a bad flag or value
// is a one-line error (exit code 2).
//   Flags flags("train_gpt", "Trains a byte-level GPT.");
//   int64_t& steps = flags.add_int("steps", 1000, "optimizer steps");
//   flags.parse(argc, argv);   // exits 0 after --help, 2 on a bad flag
//
// RUN CONFIG FILES (every program with Flags; the JSON side is app/run_config.cpp)
//   --config FILE   a JSON object whose keys are flag names ("grad-accum": 4): int flags take JSON
//                   integers, float flags any JSON number, text flags strings, bool flags true/false,
//                   each within the flag's [min, max]. Keys absent keep their defaults (a partial file
//                   is valid). Flags on the command line win over the file wherever --config stands.
//                   FILE is a regular file or a pipe (`--config <(jq ... run.json)`, /dev/stdin).
//                   Relative paths inside the file (data, load, ...) resolve against the current
//                   directory, as on the command line -- not against the file's directory.
//                   At most one --config. An unknown key (with the nearest known one when close), a
//                   key twice, a wrong type or a value out of bounds, malformed JSON or a file that is
//                   not an object: "<program>: error: FILE: ..." and exit code 2.
//   --print-config  prints the effective settings (every key, in declaration order, pretty JSON) to
//                   stdout and exits 0 -- after the after_parse hooks, where a program makes its own
//                   checks, so settings it refuses are not printed (a usage error instead):
//                   `X --print-config > a.json; X --config a.json --print-config` prints the same bytes.
// Text values are UTF-8 (JSON's text): a flag's value that is not is a usage error naming the flag.
// Flags records which keys were given (by flag or file): a resumed run (ResumeRules below) takes a
// checkpoint's value only for the keys not given now.
#include <climits>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/device.h"
#include "kernels/error.h"

namespace hg::app {

// How the run config stored in a training checkpoint combines with this invocation's on --resume
// (Flags::restore): keys not given now take the checkpoint's value; a `fixed` key given now with
// another value is a usage error (it cannot change mid-run); `per_invocation` keys (--resume itself,
// --checkpoint-dir, --stop-after-steps, output files a run opens anew) are neither stored nor
// restored. `paths` (fixed text keys holding comma-separated file names) compare file by file as the
// same file (std::filesystem::equivalent) where both exist, as text otherwise. A stored key this
// program does not declare is skipped with a warning on stderr; a stored value is checked (type,
// bounds) only where it is used or compared.
struct ResumeRules {
  std::vector<std::string> fixed;
  std::vector<std::string> per_invocation;
  std::vector<std::string> paths;
};

class Flags {
 public:
  Flags(std::string program, std::string description);
  int64_t& add_int(const std::string& name, int64_t value, const std::string& help, int64_t min = INT64_MIN,
                   int64_t max = INT64_MAX);
  double& add_double(const std::string& name, double value, const std::string& help, double min = -1e308,
                     double max = 1e308);
  std::string& add_string(const std::string& name, std::string value, const std::string& help);
  bool& add_bool(const std::string& name, bool value, const std::string& help);
  // Parses argv; prints help and exits 0 on --help; prints "program: error: ..." and exits 2 on
  // an unknown flag, a missing or malformed value (text not UTF-8), or a value outside [min, max].
  // Also reads --config FILE (see RUN CONFIG FILES), runs the after_parse hooks in order, then
  // answers --print-config.
  void parse(int argc, char** argv);
  std::string usage() const;
  const std::string& program() const { return program_; }

  // Adds `hook` to those run at the end of parse(), in the order added, before --print-config
  // prints: where a program completes its settings (train_gpt --resume restores the checkpoint's run
  // config there) and checks them (a usage error stops before anything is printed).
  Flags& after_parse(std::function<void()> hook);
  // Whether `name` was given on the command line or in a config file (or restored from a checkpoint).
  bool given(const std::string& name) const;
  // A flag's former name: --old_name on the command line (with a one-line note on stderr naming the
  // new one) and an "old_name" key in a config file or a checkpoint's run config set new_name's flag.
  // --help, --print-config and run configs use the new name; both names in one config is a usage error.
  Flags& rename(const std::string& old_name, const std::string& new_name);

  // ---- JSON (app/run_config.cpp) ----
  // The settings as one pretty-printed JSON object, every key in declaration order but `omit`.
  std::string to_json(const std::vector<std::string>& omit = {}) const;
  // Applies a JSON object of settings read from `source` (a file name, in messages): every key is
  // checked (name, type, bounds; usage error otherwise), and those not given yet take their values
  // and count as given -- the command line wins over a config file, a config file over a plan.
  void apply_json(const std::string& text, const std::string& source);
  // The run config a checkpoint stores: to_json() without the rules' per_invocation keys.
  std::string run_config(const ResumeRules& rules) const;
  // --resume: the checkpoint's run config `text` (from `source`, e.g. its entry) under the settings
  // given now: keys not given take its values; a fixed key given with another value is the usage
  // error `--resume: "dim" is 128 in the checkpoint's run config, 256 now; it cannot change mid-run`.
  void restore(const std::string& text, const std::string& source, const ResumeRules& rules);

 private:
  struct Flag {
    std::string name, help, kind, default_text;
    void* target;
    double min = 0, max = 0;
    int64_t int_min = 0, int_max = 0;
    bool given = false;
  };
  friend struct FlagsJson;  // app/run_config.cpp: the JSON side, kept out of this header
  // The flag of `name`, or of the name it was renamed to (rename); null when neither.
  Flag* find(const std::string& name);
  const Flag* find(const std::string& name) const;
  // The new name of a former one, or null.
  const std::string* renamed_to(const std::string& old_name) const;
  [[noreturn]] void fail(const std::string& message) const;
  std::string program_, description_;
  std::deque<Flag> flags_;
  std::deque<int64_t> ints_;
  std::deque<double> doubles_;
  std::deque<std::string> strings_;
  std::deque<bool> bools_;
  std::vector<std::function<void()>> after_parse_;
  std::vector<std::pair<std::string, std::string>> renamed_;  // (old name, new name)
};

// The offset of the first byte of `text` that does not start a well-formed UTF-8 character (no
// overlong forms, surrogates or code points beyond U+10FFFF), or std::string::npos when it is UTF-8.
size_t utf8_error_offset(const std::string& text);

// Prints "program: error: message" and exits with status 2 (for checks after parse()).
[[noreturn]] void exit_with_usage_error(const std::string& program, const std::string& message);

// Upper bounds checked after parse(): each (flag, value, max) with value > max is a usage error
// naming the flag, the value and the bound (keeps products of sizes far from overflow).
struct FlagBound {
  const char* flag;
  int64_t value, max;
};
void check_at_most(const std::string& program, std::initializer_list<FlagBound> bounds);

// A usage error unless `path` (given by --flag) is an existing, readable regular file (or a pipe,
// with allow_pipe: a FIFO or /dev/stdin fed by one).
void check_readable_file(const std::string& program, const std::string& flag, const std::string& path,
                         bool allow_pipe = false);

// Runs `load` (reading what a flag named: --load, --data, --resume's checkpoint); an hg::Error it
// throws becomes the usage error "<what>: <message>" (exit 2) -- bad input, not a crash.
template <class Load>
auto or_usage_error(const std::string& program, const std::string& what, Load&& load) -> decltype(load());

// What parse() and exit_with_usage_error() throw instead of exiting while a ThrowUsageExits guard
// is alive (the CLI fuzz target and tests): the exit status (0 after --help, 2 on an error) and the
// line that would have been printed. Not an hg::Error: a usage error is no library error.
struct UsageExit {
  int status;
  std::string message;
};
class ThrowUsageExits {
 public:
  ThrowUsageExits();
  ~ThrowUsageExits();
  ThrowUsageExits(const ThrowUsageExits&) = delete;
  ThrowUsageExits& operator=(const ThrowUsageExits&) = delete;

 private:
  bool previous_;
};

template <class Load>
auto or_usage_error(const std::string& program, const std::string& what, Load&& load) -> decltype(load()) {
  try {
    return load();
  } catch (const Error& e) {
    exit_with_usage_error(program, what + ": " + e.what());
  }
}

// The --device flag's value as a Device; an unknown or absent device is a usage error (exit 2).
Device checked_device(const std::string& program, const std::string& text);

// Runs `fn`; an hg::Error it throws (a bad setting of the library's) becomes a usage error: the
// error's message on one line, exit code 2.
template <class Fn>
auto or_usage_error(const std::string& program, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    exit_with_usage_error(program, e.what());
  }
}

// Every sample's main: `return guarded_main("train_gpt", [&] { ...; return 0; });`. Runs `body`;
// nothing escapes it: an exception becomes one line "<program>: error: <message>" on stderr and a
// non-zero exit -- never an abort (std::terminate) and never a second line from the runtime.
// Exit codes: what `body` returns; 2 for usage errors (exit_with_usage_error, or_usage_error: wrap
// every read of a file the user named in or_usage_error, so bad input is 2) and for an hg::InputError
// (bad input no flag names: a distributed launch's environment, kernels/error.h); 1 for any other error
// (an hg::Error while training, e.g. out of device memory; std::bad_alloc: "out of host memory"; any
// other std::exception: its what()).
int guarded_main(const std::string& program, const std::function<int()>& body);

}  // namespace hg::app
