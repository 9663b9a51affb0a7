#pragma once
// A fresh directory every rank of a communicator sees: created by rank 0 under a name rank 0 draws
// (broadcast), removed by rank 0 with everything in it once every rank is done with it (a barrier in
// the destructor; a failed test's broken communicator does not keep rank 0 from removing it).
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

#include "dist/communicator.h"

namespace hg::test {

struct SharedTempDir {
  std::filesystem::path path;
  SharedTempDir(dist::Communicator& comm, const std::string& stem) : comm_(comm) {
    uint64_t tag = comm_.rank() == 0 ? std::random_device{}() : 0;
    comm_.broadcast(&tag, 1, DType::i64, 0).wait();
    path = std::filesystem::temp_directory_path() / (stem + std::to_string(tag));
    if (comm_.rank() == 0) std::filesystem::create_directories(path);
    comm_.barrier().wait();
  }
  ~SharedTempDir() {
    try {
      comm_.barrier().wait();
    } catch (...) {
    }
    std::error_code ignored;
    if (comm_.rank() == 0) std::filesystem::remove_all(path, ignored);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;

 private:
  dist::Communicator& comm_;
};

}  // namespace hg::test
