#pragma once
// The one error type of the project. Library code throws hg::Error with a message that names the
// operation, what it was given and what it expected; it never calls exit() or abort().
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

namespace hg {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
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
