#pragma once
// MNIST-format image classification data (Fashion-MNIST, MNIST): an IDX image file [N, rows, cols] u8 and
// an IDX label file [N] u8 (data/idx.h), read once into memory and served as a Dataset with the fields
//   "image" f32 [1, rows, cols]   (pixel / 255 - mean) / std
//   "label" i64 []                the class
// over a range of the examples, so one read gives the train and validation splits.
#include <memory>
#include <string>

#include "data/dataset.h"

namespace hg::data {

// Where Debian's dataset-fashion-mnist package puts the files, and their names there.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Fashion-MNIST's training-set pixel mean and standard deviation (of pixel / 255).
inline constexpr double kFashionMnistMean = 0.2860, kFashionMnistStd = 0.3530;

struct MnistData {
  int64_t count = 0, rows = 0, cols = 0, classes = 0;  // classes: the largest label + 1
  std::vector<uint8_t> pixels;                         // count * rows * cols
  std::vector<uint8_t> labels;                         // count
};
// Reads and checks an image file and its label file (same count; images of rank 3, labels of rank 1, both
// u8); errors name the file.
std::shared_ptr<const MnistData> read_mnist(const std::string& images_path, const std::string& labels_path);

class MnistDataset : public Dataset {
 public:
  // Examples [first, first + count) of `data`.
  MnistDataset(std::shared_ptr<const MnistData> data, int64_t first, int64_t count, double mean = kFashionMnistMean,
               double std = kFashionMnistStd);
  int64_t size() const override { return count_; }
  std::vector<Field> fields() const override;
  void get(int64_t index, const std::vector<void*>& out) const override;
  const MnistData& data() const { return *data_; }
  const std::shared_ptr<const MnistData>& shared_data() const { return data_; }

 private:
  std::shared_ptr<const MnistData> data_;
  int64_t first_, count_;
  float mean_, inv_std_;
};

struct MnistSplits {
  std::shared_ptr<MnistDataset> train, validation, test;
};
// The standard files of an MNIST-format directory (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
// t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]): the last `validation` training examples are the
// validation split, the t10k files the test split. A missing directory or file is an error that names it
// and, for the default directory, the Debian package that installs it.
MnistSplits load_mnist_splits(const std::string& dir = kFashionMnistDir, int64_t validation = 5000,
                              double mean = kFashionMnistMean, double std = kFashionMnistStd);

}  // namespace hg::data
