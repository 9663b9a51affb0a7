// bench_args.h: what every bench binary does with --help and with an argument it does not take.
//   --help / -h     the binary's usage text to stdout, exit 0, nothing run;
//   anything else   "<binary>: unknown or incomplete argument '<arg>'" and the usage to stderr, exit 2
//                   (incomplete: an option that takes a value given last, without one).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hg::bench {

inline bool is_help(const char* arg) { return std::strcmp(arg, "--help") == 0 || std::strcmp(arg, "-h") == 0; }

[[noreturn]] inline void exit_with_usage(const char* usage) {
  std::fputs(usage, stdout);
  std::exit(0);
}

[[noreturn]] inline void exit_unknown_argument(const char* binary, const char* arg, const char* usage) {
  std::fprintf(stderr, "%s: unknown or incomplete argument '%s'\n", binary, arg);
  std::fputs(usage, stderr);
  std::exit(2);
}

}  // namespace hg::bench
