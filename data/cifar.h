#pragma once
// CIFAR-10 in its binary version (cifar-10-batches-bin/: data_batch_1.bin .. data_batch_5.bin, test_batch.bin;
// Krizhevsky 2009). Each file is a run of 3,073-byte records: one label byte (0..9), then the 32x32 image as
// three 1,024-byte planes, red, green and blue, each row by row. No Debian package ships CIFAR; download
// cifar-10-binary.tar.gz from its authors' page and unpack it, then point --data at the directory.
//
// A CifarDataset serves examples [first, first + count) of the images read, with the fields
//   "image" f32 [3, 32, 32]   (pixel / 255 - mean[c]) / std[c]   (the training set's channel statistics)
//   "label" i64 []
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace hg::data {

inline constexpr int64_t kCifarSide = 32, kCifarChannels = 3, kCifarClasses = 10;
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarChannels * kCifarSide * kCifarSide;  // 3,073
inline constexpr int64_t kCifarMaxRecordsPerFile = 100000;  // 10x CIFAR-10's files: a bound on what one file asks
// CIFAR-10's training-set per-channel mean and standard deviation of pixel / 255.
inline constexpr std::array<double, 3> kCifarMean{0.4914, 0.4822, 0.4465}, kCifarStd{0.2470, 0.2435, 0.2616};

struct CifarData {
  int64_t count = 0;
  std::vector<uint8_t> pixels;  // count * 3,072: each image's R, G, B planes
  std::vector<uint8_t> labels;  // count
};

// The records of one or more files, in order, read record by record. An hg::Error names the file when it
// cannot be read, when its size is not a whole number of records (or zero) or passes kCifarMaxRecordsPerFile
// records, or when a record's label is not 0..9 (naming the record).
std::shared_ptr<const CifarData> read_cifar10(const std::vector<std::string>& paths);

class CifarDataset : public Dataset {
 public:
  CifarDataset(std::shared_ptr<const CifarData> data, int64_t first, int64_t count);
  int64_t size() const override { return count_; }
  std::vector<Field> fields() const override;
  void get(int64_t index, const std::vector<void*>& out) const override;
  const std::shared_ptr<const CifarData>& shared_data() const { return data_; }

 private:
  std::shared_ptr<const CifarData> data_;
  int64_t first_, count_;
};

struct CifarSplits {
  std::shared_ptr<CifarDataset> train, validation, test;
};
// The six files of a cifar-10-batches-bin directory: the last `validation` of the 50,000 training images
// validate, test_batch.bin tests. A missing directory or file is an error that names it and says where
// CIFAR-10 comes from.
CifarSplits load_cifar10_splits(const std::string& dir, int64_t validation = 5000);
// Whether `dir` holds a CIFAR-10 binary directory (its data_batch_1.bin), for programs that take either
// format.
bool is_cifar10_dir(const std::string& dir);

}  // namespace hg::data
