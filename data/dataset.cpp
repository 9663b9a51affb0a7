#include "data/dataset.h"

#include "kernels/error.h"

namespace hg::data {

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
