#pragma once
// The training loop's progress line: rewritten in place on a terminal (each step overwrites the
// last), and elsewhere (a log file, a pipe) only the lines worth keeping are printed.
#include <unistd.h>

#include <cstdio>
#include <string>

namespace hg::train {

class Progress {
 public:
  // `enabled` false prints nothing (the ranks other than 0 of a data-parallel run).
  explicit Progress(bool enabled = true) : enabled_(enabled), tty_(isatty(fileno(stdout))) {}
  // A step line: overwritten by the next one on a terminal unless `keep`; elsewhere printed only if `keep`.
  void step_line(const std::string& line, bool keep) {
    if (!enabled_) return;
    if (tty_) {
      std::printf("\r\033[K%s", line.c_str());
      if (keep) std::printf("\n");
    } else if (keep) {
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
  }
  void line(const std::string& text) {
    if (!enabled_) return;
    if (tty_) std::printf("\r\033[K");
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  }

 private:
  bool enabled_;
  bool tty_;
};

}  // namespace hg::train
