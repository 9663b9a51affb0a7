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

#include "data/dataset.h"
#include "engine/tensor.h"

namespace hg::samples {

// As a data::Dataset: `examples` images (the training stream is never repeated within them), fields
// "image" f32 [1, size, size] and "label" i64 [].
class DrawnDigits final : public data::Dataset {
 public:
  DrawnDigits(int64_t size, uint64_t seed, int64_t examples = int64_t(1) << 40);
  int64_t size() const override { return examples_; }
  std::vector<data::Field> fields() const override;
  void get(int64_t index, const std::vector<void*>& out) const override;
  // Images [count, 1, size, size] (f32, roughly zero-mean) and labels [count] (i64) for the
  // examples first, first + 1, ...
  std::pair<Tensor, Tensor> batch(int64_t first, int64_t count) const;
  // One image (size * size values in [0, 1] before noise) of digit `label`, drawn from `seed`.
  std::vector<float> draw(int label, uint64_t example_seed) const;
  // The image as text (" .:-=+*#%@" by intensity), for a look at what the model sees.
  std::string ascii(const std::vector<float>& image) const;
  int64_t side() const { return size_; }

 private:
  // Example `index`: size * size normalised pixels and its label.
  void example(int64_t index, float* pixels, int64_t* label) const;
  int64_t size_;
  uint64_t seed_;
  int64_t examples_;
};

}  // namespace hg::samples
