#pragma once
// What the fuzz targets share: the input bytes written to a file (the readers under test take paths,
// as users call them), and the rule every target checks -- a rejected input is an hg::Error; any
// other exception escapes and libFuzzer reports it as a crash, like a signal or a sanitizer finding.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace hg::fuzz {

// A file of this process's own (under $TMPDIR, /dev/shm when it exists), rewritten for each input
// and removed at exit.
inline const std::string& input_path() {
  static const std::string path = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = tmp && *tmp ? tmp : (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    std::string p = dir + "/halfgrad_fuzz_input_" + std::to_string(::getpid());
    std::atexit([] { ::unlink(input_path().c_str()); });
    return p;
  }();
  return path;
}

// Writes `data` to input_path() (aborts when the file system refuses: that is no finding). The old
// file is unlinked first, never truncated: a tensor still mapping it keeps its pages (safetensors.h).
inline const std::string& write_input(const uint8_t* data, size_t size) {
  const std::string& path = input_path();
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror("fuzz: cannot write the input file");
    std::abort();
  }
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n <= 0) {
      std::perror("fuzz: cannot write the input file");
      std::abort();
    }
    data += n;
    size -= size_t(n);
  }
  ::close(fd);
  return path;
}

}  // namespace hg::fuzz
