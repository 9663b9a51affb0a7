#pragma once
// A small command-line flag parser for the samples: flags are declared once with a default and a
// help line, `--help` prints them, and a bad flag or value is a one-line error (exit code 2).
//   Flags flags("train_gpt", "Trains a byte-level GPT.");
//   int64_t& steps = flags.add_int("steps", 1000, "optimizer steps");
//   flags.parse(argc, argv);   // exits 0 after --help, 2 on a bad flag
#include <climits>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/device.h"
#include "kernels/error.h"

namespace hg::samples {

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
  // an unknown flag, a missing or malformed value, or a value outside [min, max].
  void parse(int argc, char** argv);
  std::string usage() const;

 private:
  struct Flag {
    std::string name, help, kind, default_text;
    void* target;
    double min = 0, max = 0;
    int64_t int_min = 0, int_max = 0;
  };
  Flag* find(const std::string& name);
  [[noreturn]] void fail(const std::string& message) const;
  std::string program_, description_;
  std::deque<Flag> flags_;
  std::deque<int64_t> ints_;
  std::deque<double> doubles_;
  std::deque<std::string> strings_;
  std::deque<bool> bools_;
};

// Prints "program: error: message" and exits with status 2 (for checks after parse()).
[[noreturn]] void exit_with_usage_error(const std::string& program, const std::string& message);

// Upper bounds checked after parse(): each (flag, value, max) with value > max is a usage error
// naming the flag, the value and the bound (keeps products of sizes far from overflow).
struct FlagBound {
  const char* flag;
  int64_t value, max;
};
void check_at_most(const std::string& program, std::initializer_list<FlagBound> bounds);

// A usage error unless `path` (given by --flag) is an existing, readable regular file.
void check_readable_file(const std::string& program, const std::string& flag, const std::string& path);

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

}  // namespace hg::samples
