#pragma once
// Images side by side in one picture: how a generative model's samples and reconstructions are looked
// at (zoo --model vae, dcgan). The images are plain floats, so this sits below the engine.
#include <cstdint>
#include <string>
#include <vector>

namespace hg::metrics {

// `count` images of `channels` (1: grey, 3: RGB) x `height` x `width` floats, image after image.
struct ImageStack {
  const float* pixels = nullptr;
  int64_t count = 0, channels = 1, height = 0, width = 0;
};

struct GridOptions {
  int64_t columns = 8;            // images per row
  int scale = 2;                  // each pixel drawn as scale x scale
  int gap = 2;                    // pixels of grey between the images and around them
  float low = 0.0f, high = 1.0f;  // the values drawn black and white (clamped between; NaN is drawn red)
};

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // rows of width RGB triples
};

// The images tiled row by row, `columns` to a row; an hg::Error for an empty stack, channels other than
// 1 or 3, or options out of range.
RgbImage tile_images(const ImageStack& images, const GridOptions& options = {});
// tile_images(...) written as a PNG (metrics/png.h).
void save_image_grid(const std::string& path, const ImageStack& images, const GridOptions& options = {});

}  // namespace hg::metrics
