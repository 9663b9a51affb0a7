#pragma once
// Procedurally drawn digits: each class 0-9 is a few pen strokes (polylines in a unit box), drawn
// into a size x size image with a random affine jitter (rotation, scale, shear, shift), random pen
// thickness, wobbly stroke vertices, a stray pen mark on half of the images and pixel noise,
// anti-aliased by distance to the stroke. Every
// image is a pure function of (seed, index), so a training stream and a held-out set from another
// seed never share an image, and a run is reproducible.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace hg::samples {

class DrawnDigits {
 public:
  DrawnDigits(int64_t size, uint64_t seed);
  // Images [count, 1, size, size] (f32, roughly zero-mean) and labels [count] (i64) for the
  // examples first, first + 1, ...
  std::pair<Tensor, Tensor> batch(int64_t first, int64_t count) const;
  // One image (size * size values in [0, 1] before noise) of digit `label`, drawn from `seed`.
  std::vector<float> draw(int label, uint64_t example_seed) const;
  // The image as text (" .:-=+*#%@" by intensity), for a look at what the model sees.
  std::string ascii(const std::vector<float>& image) const;
  int64_t size() const { return size_; }

 private:
  int64_t size_;
  uint64_t seed_;
};

}  // namespace hg::samples
