#include "data/dataset.h"

#include "kernels/error.h"

namespace hg::data {

std::vector<Tensor> read_examples(const Dataset& dataset, int64_t first, int64_t count) {
  HG_CHECK(first >= 0 && count >= 0 && first + count <= dataset.size(), "[read_examples] examples [", first, ", ",
           first + count, ") of a dataset of ", dataset.size());
  const std::vector<Field> fields = dataset.fields();
  std::vector<Tensor> tensors;
  for (const Field& field : fields) {
    Shape shape{count};
    shape.insert(shape.end(), field.shape.begin(), field.shape.end());
    tensors.push_back(empty(shape, field.dtype));
  }
  std::vector<void*> rows(fields.size());
  for (int64_t i = 0; i < count; ++i) {
    for (size_t f = 0; f < fields.size(); ++f)
      rows[f] = static_cast<char*>(tensors[f].data_ptr()) + i * fields[f].numel() * dtype_size(fields[f].dtype);
    dataset.get(first + i, rows);
  }
  return tensors;
}

DatasetPrefix::DatasetPrefix(std::shared_ptr<const Dataset> base, int64_t count)
    : base_(std::move(base)), count_(count) {
  HG_CHECK(base_ != nullptr, "[DatasetPrefix] no dataset");
  HG_CHECK(count >= 0 && count <= base_->size(), "[DatasetPrefix] the first ", count, " of ", base_->size(),
           " examples; expected 0 <= count <= ", base_->size());
}

void DatasetPrefix::get(int64_t index, const std::vector<void*>& out) const {
  HG_CHECK(index >= 0 && index < count_, "[DatasetPrefix] index ", index, " outside [0, ", count_, ")");
  base_->get(index, out);
}

void DatasetPrefix::get_in_epoch(int64_t index, int64_t epoch, const std::vector<void*>& out) const {
  HG_CHECK(index >= 0 && index < count_, "[DatasetPrefix] index ", index, " outside [0, ", count_, ")");
  base_->get_in_epoch(index, epoch, out);
}

}  // namespace hg::data
