#include "data/image_augment.h"

#include <algorithm>
#include <vector>

#include "data/sampler.h"
#include "kernels/error.h"

namespace hg::data {

AugmentedImages::AugmentedImages(std::shared_ptr<const Dataset> images, const ImageAugmentOptions& options)
    : images_(std::move(images)), options_(options) {
  HG_CHECK(images_ != nullptr, "[AugmentedImages] no dataset");
  fields_ = images_->fields();
  HG_CHECK(!fields_.empty() && fields_[0].dtype == DType::f32 && fields_[0].shape.size() == 3,
           "[AugmentedImages] expected a dataset whose first field is an f32 image [C, H, W], got ",
           fields_.empty() ? std::string("no fields") : "\"" + fields_[0].name + "\" " + shape_str(fields_[0].shape));
  channels_ = fields_[0].shape[0];
  height_ = fields_[0].shape[1];
  width_ = fields_[0].shape[2];
  HG_CHECK(options_.pad() >= 0 && options_.pad() <= std::min(height_, width_),
           "[AugmentedImages] pad = ", options_.pad(), "; expected 0 <= pad <= the image's smaller side (",
           std::min(height_, width_), ")");
}

ImageAugmentDraw AugmentedImages::draw(int64_t index, int64_t epoch) const {
  const uint64_t r = mix64(mix64(mix64(options_.seed()) ^ uint64_t(epoch)) ^ uint64_t(index));
  const uint64_t window = uint64_t(2 * options_.pad() + 1);
  return {int64_t((r & 0xFFFFFF) % window), int64_t(((r >> 24) & 0xFFFFFF) % window),
          options_.hflip() && ((r >> 63) & 1) != 0};
}

void AugmentedImages::get_in_epoch(int64_t index, int64_t epoch, const std::vector<void*>& out) const {
  const int64_t plane = height_ * width_;
  thread_local std::vector<float> source;  // the unaugmented image, per loader worker
  source.resize(size_t(channels_ * plane));
  std::vector<void*> inner = out;
  inner[0] = source.data();
  images_->get_in_epoch(index, epoch, inner);

  const ImageAugmentDraw d = draw(index, epoch);
  const int64_t pad = options_.pad();
  const float fill = float(options_.fill());
  float* image = static_cast<float*>(out[0]);
  for (int64_t c = 0; c < channels_; ++c)
    for (int64_t y = 0; y < height_; ++y) {
      const int64_t sy = y + d.dy - pad;
      float* row = image + c * plane + y * width_;
      if (sy < 0 || sy >= height_) {
        for (int64_t x = 0; x < width_; ++x) row[x] = fill;
        continue;
      }
      const float* from = source.data() + c * plane + sy * width_;
      for (int64_t x = 0; x < width_; ++x) {
        const int64_t sx = (d.flip ? width_ - 1 - x : x) + d.dx - pad;
        row[x] = sx >= 0 && sx < width_ ? from[sx] : fill;
      }
    }
}

}  // namespace hg::data
