#include "data/cifar.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <memory>

#include "kernels/error.h"

namespace hg::data {

namespace {

constexpr int64_t kImageBytes = kCifarRecordBytes - 1;

bool is_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// Appends the records of `path` to `data`.
void append_file(const std::string& path, CifarData& data) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  HG_INPUT_CHECK(file != nullptr, "[read_cifar10] cannot open '", path, "': ", errno_text(errno));
  struct stat info {};
  HG_INPUT_CHECK(::fstat(::fileno(file.get()), &info) == 0 && S_ISREG(info.st_mode), "[read_cifar10] '", path,
                 "' is not a regular file");
  const int64_t bytes = int64_t(info.st_size);
  HG_INPUT_CHECK(bytes > 0 && bytes % kCifarRecordBytes == 0, "[read_cifar10] '", path, "' has ", bytes,
                 " bytes; expected a positive multiple of ", kCifarRecordBytes,
                 " (records of a label byte and a 32x32x3 image)");
  const int64_t records = bytes / kCifarRecordBytes;
  HG_INPUT_CHECK(records <= kCifarMaxRecordsPerFile, "[read_cifar10] '", path, "' has ", records,
                 " records; expected at most ", kCifarMaxRecordsPerFile, " (CIFAR-10's files hold 10,000)");
  data.pixels.reserve(data.pixels.size() + size_t(records * kImageBytes));
  uint8_t record[kCifarRecordBytes];
  for (int64_t r = 0; r < records; ++r) {
    errno = 0;
    HG_INPUT_CHECK(std::fread(record, 1, sizeof record, file.get()) == sizeof record, "[read_cifar10] '", path,
                   "': short read at record ", r, " of ", records,
                   errno != 0 ? " (" + errno_text(errno) + ")" : std::string(" (the file shrank while read)"));
    HG_INPUT_CHECK(record[0] < kCifarClasses, "[read_cifar10] '", path, "' record ", r, " has label ", int(record[0]),
                   "; expected 0..9 (CIFAR-10; CIFAR-100's records have two label bytes)");
    data.labels.push_back(record[0]);
    data.pixels.insert(data.pixels.end(), record + 1, record + kCifarRecordBytes);
  }
  data.count += records;
}

std::string file_in(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  HG_INPUT_CHECK(is_file(path), "[load_cifar10_splits] no ", name, " in '", dir,
                 "'; expected the binary version of CIFAR-10 there (no Debian package ships it: unpack "
                 "cifar-10-binary.tar.gz from its authors' page and give its cifar-10-batches-bin directory)");
  return path;
}

}  // namespace

std::shared_ptr<const CifarData> read_cifar10(const std::vector<std::string>& paths) {
  auto data = std::make_shared<CifarData>();
  for (const std::string& path : paths) append_file(path, *data);
  return data;
}

CifarDataset::CifarDataset(std::shared_ptr<const CifarData> data, int64_t first, int64_t count)
    : data_(std::move(data)), first_(first), count_(count) {
  HG_CHECK(data_ != nullptr, "[CifarDataset] no data");
  HG_CHECK(first >= 0 && count >= 0 && first + count <= data_->count, "[CifarDataset] examples [", first, ", ",
           first + count, ") are outside the ", data_->count, " read");
}

std::vector<Field> CifarDataset::fields() const {
  return {{"image", DType::f32, {kCifarChannels, kCifarSide, kCifarSide}}, {"label", DType::i64, {}}};
}

void CifarDataset::get(int64_t index, const std::vector<void*>& out) const {
  HG_CHECK(index >= 0 && index < count_, "[CifarDataset] index ", index, " outside [0, ", count_, ")");
  const int64_t example = first_ + index, plane = kCifarSide * kCifarSide;
  const uint8_t* src = data_->pixels.data() + example * kImageBytes;
  float* image = static_cast<float*>(out[0]);
  for (int64_t c = 0; c < kCifarChannels; ++c) {
    const float mean = float(kCifarMean[size_t(c)]), inv_std = float(1.0 / kCifarStd[size_t(c)]);
    for (int64_t i = 0; i < plane; ++i)
      image[c * plane + i] = (float(src[c * plane + i]) * (1.0f / 255.0f) - mean) * inv_std;
  }
  *static_cast<int64_t*>(out[1]) = data_->labels[size_t(example)];
}

CifarSplits load_cifar10_splits(const std::string& dir, int64_t validation) {
  std::vector<std::string> training;
  for (int b = 1; b <= 5; ++b) training.push_back(file_in(dir, "data_batch_" + std::to_string(b) + ".bin"));
  const auto train = read_cifar10(training), test = read_cifar10({file_in(dir, "test_batch.bin")});
  HG_INPUT_CHECK(validation >= 0 && validation < train->count, "[load_cifar10_splits] validation = ", validation,
                 " of ", train->count, " training images; expected 0 <= validation < ", train->count);
  const int64_t kept = train->count - validation;
  return {std::make_shared<CifarDataset>(train, 0, kept), std::make_shared<CifarDataset>(train, kept, validation),
          std::make_shared<CifarDataset>(test, 0, test->count)};
}

bool is_cifar10_dir(const std::string& dir) { return is_file(dir + "/data_batch_1.bin"); }

}  // namespace hg::data
