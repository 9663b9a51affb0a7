#include "data/mnist.h"

#include <sys/stat.h>

#include <algorithm>

#include "data/idx.h"

namespace hg::data {

namespace {

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

// dir/name.gz when it exists, else dir/name (an uncompressed copy); a clear error when neither does.
std::string find_file(const std::string& dir, const std::string& name) {
  for (const std::string& candidate : {dir + "/" + name + ".gz", dir + "/" + name})
    if (exists(candidate)) return candidate;
  const bool debian = dir == kFashionMnistDir;
  HG_INPUT_FAIL("[load_mnist_splits] no ", name, "(.gz) in '", dir, "'",
                debian ? "; install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)" : "",
                "; expected the four MNIST-format files there");
}

}  // namespace

std::shared_ptr<const MnistData> read_mnist(const std::string& images_path, const std::string& labels_path) {
  const IdxArray images = read_idx(images_path), labels = read_idx(labels_path);
  HG_INPUT_CHECK(images.type == IdxType::u8 && images.shape.size() == 3, "[read_mnist] '", images_path, "' holds ",
                 idx_type_name(images.type), shape_str(images.shape), "; expected u8 images [N, rows, cols]");
  HG_INPUT_CHECK(labels.type == IdxType::u8 && labels.shape.size() == 1, "[read_mnist] '", labels_path, "' holds ",
                 idx_type_name(labels.type), shape_str(labels.shape), "; expected u8 labels [N]");
  HG_INPUT_CHECK(images.shape[0] == labels.shape[0], "[read_mnist] '", images_path, "' has ", images.shape[0],
                 " images but '", labels_path, "' has ", labels.shape[0], " labels; expected one label per image");
  auto data = std::make_shared<MnistData>();
  data->count = images.shape[0];
  data->rows = images.shape[1];
  data->cols = images.shape[2];
  data->pixels = images.bytes;
  data->labels = labels.bytes;
  data->classes = data->labels.empty() ? 0 : *std::max_element(data->labels.begin(), data->labels.end()) + 1;
  return data;
}

MnistDataset::MnistDataset(std::shared_ptr<const MnistData> data, int64_t first, int64_t count, double mean, double std)
    : data_(std::move(data)), first_(first), count_(count), mean_(float(mean)), inv_std_(float(1.0 / std)) {
  HG_CHECK(data_ != nullptr, "[MnistDataset] no data");
  HG_CHECK(first >= 0 && count >= 0 && first + count <= data_->count, "[MnistDataset] examples [", first, ", ",
           first + count, ") are outside the ", data_->count, " read");
  HG_CHECK(std > 0, "[MnistDataset] expected std > 0, got ", std);
}

std::vector<Field> MnistDataset::fields() const {
  return {{"image", DType::f32, {1, data_->rows, data_->cols}}, {"label", DType::i64, {}}};
}

void MnistDataset::get(int64_t index, const std::vector<void*>& out) const {
  HG_CHECK(index >= 0 && index < count_, "[MnistDataset] index ", index, " outside [0, ", count_, ")");
  const int64_t pixels = data_->rows * data_->cols, example = first_ + index;
  const uint8_t* src = data_->pixels.data() + example * pixels;
  float* image = static_cast<float*>(out[0]);
  for (int64_t i = 0; i < pixels; ++i) image[i] = (float(src[i]) * (1.0f / 255.0f) - mean_) * inv_std_;
  *static_cast<int64_t*>(out[1]) = data_->labels[size_t(example)];
}

MnistSplits load_mnist_splits(const std::string& dir, int64_t validation, double mean, double std) {
  std::vector<std::string> files;  // found in this order, so that an error names the first one missing
  for (const char* name :
       {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    files.push_back(find_file(dir, name));
  const auto train = read_mnist(files[0], files[1]), test = read_mnist(files[2], files[3]);
  HG_INPUT_CHECK(validation >= 0 && validation < train->count, "[load_mnist_splits] validation = ", validation, " of ",
                 train->count, " training examples; expected 0 <= validation < ", train->count);
  HG_INPUT_CHECK(test->rows == train->rows && test->cols == train->cols, "[load_mnist_splits] the test images are ",
                 test->rows, "x", test->cols, " but the training images ", train->rows, "x", train->cols);
  const int64_t kept = train->count - validation;
  return {std::make_shared<MnistDataset>(train, 0, kept, mean, std),
          std::make_shared<MnistDataset>(train, kept, validation, mean, std),
          std::make_shared<MnistDataset>(test, 0, test->count, mean, std)};
}

}  // namespace hg::data
