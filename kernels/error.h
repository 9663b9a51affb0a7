#pragma once
// The one error type of the project. Library code throws hg::Error with a message that names the
// operation, what it was given and what it expected; it never calls exit() or abort().
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

namespace hg {

namespace detail {
// Where an error was raised, beyond the operation its message names: a function that describes this
// thread's context, or "" for none. layers/module.cpp installs one at start-up that names the module
// path a forward is running in ("(in encoder.layers.0.self_attn (MultiheadAttention) of Seq2Seq)"), so
// an error deep inside a model says which layer it came from. Every hg::Error appends it once.
inline std::string (*error_context)() = nullptr;

inline std::string with_error_context(const std::string& message) {
  if (error_context == nullptr) return message;
  const std::string context = error_context();
  if (context.empty() || message.find(context) != std::string::npos) return message;  // rethrown with it
  std::string out;  // appended, not message + " " + context: GCC 12 warns falsely (-Wrestrict) on that
  out.reserve(message.size() + 1 + context.size());
  return out.append(message).append(" ").append(context);
}
}  // namespace detail

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(detail::with_error_context(message)) {}
};

// An error in what the user supplied that no flag names -- the environment of a distributed launch, its
// secret file (dist/job_secret.h): programs under app::guarded_main exit 2 on it, as on a usage error.
class InputError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// A failed system call's reason with its number, "No such file or directory (errno 2)". The number is
// what marks an I/O failure in a message (train/checkpoint_directory.cpp's is_io_failure).
inline std::string errno_text(int error) {
  return std::string(std::strerror(error)) + " (errno " + std::to_string(error) + ")";
}

}  // namespace hg

// HG_CHECK(cond, parts...): throws hg::Error("parts..." + " (file:line)") when cond is false.
#define HG_CHECK(cond, ...)                                                                     \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      throw ::hg::Error(::hg::detail::concat(__VA_ARGS__, " [", __FILE__, ":", __LINE__, "]")); \
    }                                                                                           \
  } while (0)

#define HG_FAIL(...) throw ::hg::Error(::hg::detail::concat(__VA_ARGS__, " [", __FILE__, ":", __LINE__, "]"))

// HG_INPUT_CHECK / HG_INPUT_FAIL: the same for what a user supplied -- a file, a flag's value, a
// config -- whose message alone names the input and what was expected: no source location, which
// would only point into the library. Internal invariants and API misuse keep HG_CHECK's location
// (relative to the repository root).
#define HG_INPUT_CHECK(cond, ...)                                      \
  do {                                                                 \
    if (!(cond)) throw ::hg::Error(::hg::detail::concat(__VA_ARGS__)); \
  } while (0)

#define HG_INPUT_FAIL(...) throw ::hg::Error(::hg::detail::concat(__VA_ARGS__))
