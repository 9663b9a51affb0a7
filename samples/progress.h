#pragma once
// What the small classifier samples (train_mlp, train_cnn) share: the --device check (a usage
// error, exit code 2, for an unknown or absent device) and a progress line that rewrites itself on
// a terminal and prints only the kept lines otherwise.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "engine/cuda/cuda_context.h"
#include "engine/device.h"
#include "samples/cli.h"

namespace hg::samples {

inline Device checked_device(const std::string& program, const std::string& text) {
  Device device;
  try {
    device = Device::parse(text);
  } catch (const Error&) {
    exit_with_usage_error(program, "unknown --device \"" + text + "\"; expected cpu, cuda or cuda:N");
  }
  if (device.is_cuda() && device.index >= cuda::device_count()) {
    exit_with_usage_error(program, "--device " + text + " is not available: " +
                                       (cuda::is_available() ? "this machine has " + std::to_string(cuda::device_count()) +
                                                                   " CUDA device(s)"
                                                             : cuda::unavailable_reason()));
  }
  return device;
}

class Progress {
 public:
  Progress() : tty_(isatty(fileno(stdout))) {}
  // A step line: overwritten by the next one on a terminal unless `keep`; elsewhere printed only if `keep`.
  void step_line(const std::string& line, bool keep) {
    if (tty_) {
      std::printf("\r\033[K%s", line.c_str());
      if (keep) std::printf("\n");
    } else if (keep) {
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
  }
  void line(const std::string& text) {
    if (tty_) std::printf("\r\033[K");
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  }

 private:
  bool tty_;
};

}  // namespace hg::samples
