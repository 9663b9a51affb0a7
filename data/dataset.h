#pragma once
// Dataset: random access to examples, each a fixed set of named fields of fixed shape and dtype
// (e.g. "ids" [T] i64 and "targets" [T] i64). A batch is the same fields with a leading batch
// dimension. Datasets write an example straight into its row of a batch buffer (which may be pinned
// host memory), so collation is free and no per-example tensor is ever allocated.
//
// CONVENTION
//   - get() is const, thread-safe and a pure function of the index: DataLoader workers call it
//     concurrently and in any order, and the same index must give the same bytes every time (that
//     is what makes a run independent of the number of workers and resumable). Randomness inside an
//     example is seeded from the index.
//   - The DataLoader calls get_in_epoch(index, epoch, out), which is get(index, out) unless a dataset
//     draws something afresh each epoch (data augmentation, data/image_augment.h): then it is a pure
//     function of (index, epoch), seeded from both.
//   - Every example has exactly the shapes fields() declares.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace hg::data {

struct Field {
  std::string name;
  DType dtype;
  Shape shape;  // of one example, without the batch dimension
  int64_t numel() const { return shape_numel(shape); }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual std::vector<Field> fields() const = 0;
  // Writes example `index` (0 <= index < size()) into out[f], one pointer per field, each to
  // fields()[f].numel() contiguous elements of fields()[f].dtype.
  virtual void get(int64_t index, const std::vector<void*>& out) const = 0;
  // Example `index` as seen in `epoch` (the loader's epoch of the stream, from 0).
  virtual void get_in_epoch(int64_t index, int64_t /*epoch*/, const std::vector<void*>& out) const { get(index, out); }
};

// Examples [first, first + count) of `dataset` as tensors on the CPU, one per field ([count, ...field shape]):
// how a program reads a held-out split to evaluate on it.
std::vector<Tensor> read_examples(const Dataset& dataset, int64_t first, int64_t count);

// The first `count` examples of `base` (a training subset, e.g. a --train-limit); epochs pass through.
class DatasetPrefix : public Dataset {
 public:
  DatasetPrefix(std::shared_ptr<const Dataset> base, int64_t count);
  int64_t size() const override { return count_; }
  std::vector<Field> fields() const override { return base_->fields(); }
  void get(int64_t index, const std::vector<void*>& out) const override;
  void get_in_epoch(int64_t index, int64_t epoch, const std::vector<void*>& out) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t count_;
};

// One batch: a tensor per field ([B, ...field shape]) in fields() order, and the example indices.
struct Batch {
  std::vector<Tensor> tensors;
  std::vector<int64_t> indices;
  int64_t epoch = 0, index_in_epoch = 0;
  const Tensor& operator[](size_t field) const { return tensors.at(field); }
  int64_t size() const { return int64_t(indices.size()); }
};

}  // namespace hg::data
