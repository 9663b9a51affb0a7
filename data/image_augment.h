#pragma once
// Data augmentation for image datasets, drawn afresh every epoch and reproducible: AugmentedImages wraps
// a dataset whose first field is an f32 image [C, H, W] (the others pass through unchanged) and applies,
// in this order,
//   random crop   the image padded by `pad` on every side with `fill`, then an H x W window at a
//                 uniformly drawn offset (torchvision's RandomCrop(size, padding=pad))
//   horizontal flip  with probability 1/2 (RandomHorizontalFlip)
// Normalisation is the wrapped dataset's (MnistDataset normalises); `fill` is therefore the normalised
// value of black, -mean / std, for the crop to pad with black as torchvision does before Normalize.
//
// Each draw is a pure function of (seed, epoch, index) through splitmix64 (data/sampler.h mix64), so
// the batches do not depend on the loader's worker count, differ from epoch to epoch, and a resumed run
// sees the same ones as an uninterrupted run (the DataLoader passes the epoch: Dataset::get_in_epoch).
//
//   auto train = std::make_shared<data::AugmentedImages>(splits.train,
//       data::ImageAugmentOptions().pad(2).hflip(true).fill(-mean / std).seed(seed));
#include <memory>

#include "data/dataset.h"
#include "kernels/options.h"

namespace hg::data {

struct ImageAugmentOptions {
  HG_OPTION(ImageAugmentOptions, int64_t, pad, 0);  // 0: no crop
  HG_OPTION(ImageAugmentOptions, bool, hflip, false);
  HG_OPTION(ImageAugmentOptions, double, fill, 0.0);
  HG_OPTION(ImageAugmentOptions, uint64_t, seed, 0);
};

// Where one example's window and flip fell: rows [dy - pad, dy - pad + H) and columns likewise of the
// unpadded image, mirrored when flipped.
struct ImageAugmentDraw {
  int64_t dy = 0, dx = 0;  // in [0, 2 * pad]
  bool flip = false;
};

class AugmentedImages final : public Dataset {
 public:
  AugmentedImages(std::shared_ptr<const Dataset> images, const ImageAugmentOptions& options);
  int64_t size() const override { return images_->size(); }
  std::vector<Field> fields() const override { return fields_; }
  // Epoch 0's view.
  void get(int64_t index, const std::vector<void*>& out) const override { get_in_epoch(index, 0, out); }
  void get_in_epoch(int64_t index, int64_t epoch, const std::vector<void*>& out) const override;
  // The draw of example `index` in `epoch`.
  ImageAugmentDraw draw(int64_t index, int64_t epoch) const;
  const ImageAugmentOptions& options() const { return options_; }

 private:
  std::shared_ptr<const Dataset> images_;
  ImageAugmentOptions options_;
  std::vector<Field> fields_;
  int64_t channels_, height_, width_;
};

}  // namespace hg::data
