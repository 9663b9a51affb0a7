#pragma once
// A directory under the system's temp directory that lives as long as the object: unique per process
// and per instance, created by the constructor, removed with everything in it by the destructor.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace hg::test {

struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("hg_test_" + std::to_string(::getpid()) + "_" + std::to_string(next()++));
  static int& next() {
    static int n = 0;
    return n;
  }
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `text` to the file `name` in it (bytes as given) and returns the file's path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = (path / name).string();
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
};

}  // namespace hg::test
