#include "metrics/image_grid.h"

#include <algorithm>
#include <cmath>

#include "kernels/error.h"
#include "metrics/png.h"

namespace hg::metrics {

namespace {

constexpr uint8_t kGapGrey = 128;

uint8_t to_byte(float v, float low, float high) {
  const float unit = std::clamp((v - low) / (high - low), 0.0f, 1.0f);
  return uint8_t(std::lround(unit * 255.0f));
}

}  // namespace

RgbImage tile_images(const ImageStack& images, const GridOptions& o) {
  HG_CHECK(images.pixels != nullptr && images.count > 0 && images.height > 0 && images.width > 0,
           "[image grid] expected at least one image of positive size, got ", images.count, " of ", images.height, "x",
           images.width);
  HG_CHECK(images.channels == 1 || images.channels == 3, "[image grid] expected 1 (grey) or 3 (RGB) channels, got ",
           images.channels);
  HG_CHECK(o.columns > 0 && o.scale > 0 && o.gap >= 0 && o.high > o.low,
           "[image grid] expected columns > 0, scale > 0, gap >= 0 and high > low, got columns ", o.columns, ", scale ",
           o.scale, ", gap ", o.gap, ", low ", o.low, ", high ", o.high);
  const int64_t columns = std::min(o.columns, images.count), rows = (images.count + columns - 1) / columns;
  const int64_t cell_w = images.width * o.scale, cell_h = images.height * o.scale;
  const int64_t width = columns * (cell_w + o.gap) + o.gap, height = rows * (cell_h + o.gap) + o.gap;
  HG_CHECK(width <= 16384 && height <= 16384, "[image grid] a ", width, "x", height,
           " picture is too large; expected at most 16384 pixels a side");
  RgbImage out{int(width), int(height), std::vector<uint8_t>(size_t(width * height * 3), kGapGrey)};
  const int64_t plane = images.height * images.width;
  for (int64_t i = 0; i < images.count; ++i) {
    const float* image = images.pixels + i * images.channels * plane;
    const int64_t left = o.gap + (i % columns) * (cell_w + o.gap), top = o.gap + (i / columns) * (cell_h + o.gap);
    for (int64_t y = 0; y < cell_h; ++y)
      for (int64_t x = 0; x < cell_w; ++x) {
        const int64_t source = (y / o.scale) * images.width + x / o.scale;
        uint8_t* pixel = &out.rgb[size_t(((top + y) * width + left + x) * 3)];
        for (int c = 0; c < 3; ++c) {
          const float v = image[(images.channels == 3 ? c : 0) * plane + source];
          pixel[c] = std::isnan(v) ? (c == 0 ? 255 : 0) : to_byte(v, o.low, o.high);
        }
      }
  }
  return out;
}

void save_image_grid(const std::string& path, const ImageStack& images, const GridOptions& options) {
  const RgbImage image = tile_images(images, options);
  write_png(path, image.width, image.height, image.rgb);
}

}  // namespace hg::metrics
