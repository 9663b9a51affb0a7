// Data augmentation (data/image_augment.h): every augmented image equals a reference crop-and-flip
// written independently here (pad with the fill, take the window at the drawn offset, mirror it); the
// draws cover every offset and both flips, repeat for the same (index, epoch) and change across epochs;
// the DataLoader hands each batch's epoch to the dataset (epoch 1 of the stream differs from epoch 0,
// and the batches do not depend on the worker count); bad wrapped datasets are refused by name.
#include <doctest/doctest.h>

#include <set>

#include "data/data_loader.h"
#include "data/image_augment.h"
#include "support/check_error.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::data;

namespace {

// Images [C, H, W] of fresh random pixels, one per index, and the index as a label.
class RandomImages final : public Dataset {
 public:
  RandomImages(int64_t count, int64_t c, int64_t h, int64_t w, uint64_t seed) : count_(count), c_(c), h_(h), w_(w) {
    pixels_.resize(size_t(count * c * h * w));
    uint64_t s = seed;
    for (float& p : pixels_) p = float(double(mix64(++s) >> 11) / double(1ull << 53)) - 0.5f;
  }
  int64_t size() const override { return count_; }
  std::vector<Field> fields() const override {
    return {{"image", DType::f32, {c_, h_, w_}}, {"label", DType::i64, {}}};
  }
  void get(int64_t index, const std::vector<void*>& out) const override {
    const size_t n = size_t(c_ * h_ * w_);
    std::copy_n(pixels_.data() + size_t(index) * n, n, static_cast<float*>(out[0]));
    *static_cast<int64_t*>(out[1]) = index;
  }
  const float* image(int64_t index) const { return pixels_.data() + size_t(index * c_ * h_ * w_); }

 private:
  int64_t count_, c_, h_, w_;
  std::vector<float> pixels_;
};

// The augmented image by the definition: the padded image P (fill outside), window W[y][x] = P[y + dy][x + dx],
// then mirrored: out[y][x] = W[y][w - 1 - x] when flipped.
std::vector<float> reference(const float* image, int64_t c, int64_t h, int64_t w, int64_t pad, float fill,
                             const ImageAugmentDraw& d) {
  const int64_t ph = h + 2 * pad, pw = w + 2 * pad;
  std::vector<float> padded(size_t(c * ph * pw), fill), out(size_t(c * h * w));
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) padded[size_t((k * ph + y + pad) * pw + x + pad)] = image[(k * h + y) * w + x];
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const int64_t wx = d.flip ? w - 1 - x : x;
        out[size_t((k * h + y) * w + x)] = padded[size_t((k * ph + y + d.dy) * pw + wx + d.dx)];
      }
  return out;
}

std::vector<float> augmented(const AugmentedImages& a, int64_t index, int64_t epoch, int64_t numel) {
  std::vector<float> image(size_t(numel), std::nanf(""));  // poisoned
  int64_t label = -1;
  a.get_in_epoch(index, epoch, {image.data(), &label});
  CHECK(label == index);
  return image;
}

}  // namespace

TEST_CASE("AugmentedImages: each image is the reference crop and flip of its draw; draws cover every case") {
  MESSAGE("random seed ", testing::fresh_seed(), " (repeat with HG_TEST_SEED=", testing::fresh_seed(), ")");
  const int64_t c = 2, h = 6, w = 5, pad = 2;
  const auto images = std::make_shared<RandomImages>(40, c, h, w, testing::fresh_seed());
  const AugmentedImages a(images, ImageAugmentOptions().pad(pad).hflip(true).fill(-0.81).seed(testing::fresh_seed()));
  std::set<int64_t> dys, dxs;
  int64_t flips = 0, draws = 0;
  for (int64_t epoch = 0; epoch < 5; ++epoch)
    for (int64_t i = 0; i < images->size(); ++i) {
      const ImageAugmentDraw d = a.draw(i, epoch);
      REQUIRE(d.dy >= 0);
      REQUIRE(d.dy <= 2 * pad);
      REQUIRE(d.dx >= 0);
      REQUIRE(d.dx <= 2 * pad);
      dys.insert(d.dy);
      dxs.insert(d.dx);
      flips += d.flip;
      ++draws;
      CHECK(augmented(a, i, epoch, c * h * w) == reference(images->image(i), c, h, w, pad, -0.81f, d));
    }
  CHECK(dys.size() == size_t(2 * pad + 1));
  CHECK(dxs.size() == size_t(2 * pad + 1));
  CHECK(flips > draws / 4);
  CHECK(flips < 3 * draws / 4);
  // The same (index, epoch) gives the same bytes; another epoch another draw for most images.
  CHECK(augmented(a, 7, 3, c * h * w) == augmented(a, 7, 3, c * h * w));
  int64_t changed = 0;
  for (int64_t i = 0; i < images->size(); ++i) {
    const ImageAugmentDraw d0 = a.draw(i, 0), d1 = a.draw(i, 1);
    changed += d0.dy != d1.dy || d0.dx != d1.dx || d0.flip != d1.flip;
  }
  CHECK(changed > images->size() / 2);
  // get() is epoch 0's view.
  std::vector<float> image(size_t(c * h * w));
  int64_t label = 0;
  a.get(5, {image.data(), &label});
  CHECK(image == augmented(a, 5, 0, c * h * w));
}

TEST_CASE("AugmentedImages: pad 0 without flips is the wrapped dataset; flips alone mirror rows") {
  const auto images = std::make_shared<RandomImages>(6, 1, 4, 7, testing::fresh_seed());
  const AugmentedImages same(images, ImageAugmentOptions().seed(3));
  const AugmentedImages mirror(images, ImageAugmentOptions().hflip(true).seed(3));
  for (int64_t i = 0; i < 6; ++i) {
    const std::vector<float> plain(images->image(i), images->image(i) + 28);
    CHECK(augmented(same, i, 2, 28) == plain);
    const std::vector<float> m = augmented(mirror, i, 2, 28);
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 7; ++x)
        CHECK(m[size_t(y * 7 + x)] == plain[size_t(y * 7 + (mirror.draw(i, 2).flip ? 6 - x : x))]);
  }
}

TEST_CASE("DataLoader passes the epoch: augmented batches change across epochs, not with the worker count") {
  const auto images = std::make_shared<RandomImages>(16, 1, 5, 5, testing::fresh_seed());
  const auto augmented_set =
      std::make_shared<AugmentedImages>(images, ImageAugmentOptions().pad(1).hflip(true).seed(testing::fresh_seed()));
  auto stream = [&](int workers) {
    DataLoader loader(augmented_set, DataLoaderOptions().batch_size(16).shuffle(false).workers(workers));
    std::vector<std::vector<float>> batches;
    for (int b = 0; b < 3; ++b) batches.push_back(loader.next()[0].to_vector<float>());
    return batches;
  };
  const auto inline_batches = stream(0), threaded = stream(2);
  CHECK(inline_batches == threaded);
  CHECK(inline_batches[0] != inline_batches[1]);  // the same 16 images, epochs 0 and 1
  for (int64_t epoch = 0; epoch < 3; ++epoch)
    for (int64_t i = 0; i < 16; ++i) {
      const std::vector<float> row(inline_batches[size_t(epoch)].begin() + i * 25,
                                   inline_batches[size_t(epoch)].begin() + (i + 1) * 25);
      CHECK(row == augmented(*augmented_set, i, epoch, 25));
    }
}

TEST_CASE("AugmentedImages refuses datasets without an f32 image first and pads beyond the image") {
  class Labels final : public Dataset {
   public:
    int64_t size() const override { return 1; }
    std::vector<Field> fields() const override { return {{"label", DType::i64, {}}}; }
    void get(int64_t, const std::vector<void*>&) const override {}
  };
  CHECK_ERROR(AugmentedImages(std::make_shared<Labels>(), {}), "expected a dataset whose first field is an f32 image",
              "\"label\"");
  CHECK_ERROR(AugmentedImages(std::make_shared<RandomImages>(2, 1, 4, 6, 1), ImageAugmentOptions().pad(5)), "pad = 5",
              "expected 0 <= pad <= the image's smaller side (4)");
}
