// Rasterising the chart primitives.
#include "metrics/raster.h"

#include <algorithm>
#include <cmath>

#include "kernels/error.h"
#include "metrics/font5x7.h"
#include "metrics/png.h"

namespace hg::metrics {

RasterCanvas::RasterCanvas(int width, int height) : width_(width), height_(height) {
  HG_CHECK(width > 0 && height > 0, "[raster] image size must be positive, got ", width, "x", height);
  rgb_.assign(size_t(width) * size_t(height) * 3, 255);
}

Color RasterCanvas::pixel(int x, int y) const {
  HG_CHECK(x >= 0 && y >= 0 && x < width_ && y < height_, "[raster] pixel (", x, ", ", y, ") outside ", width_, "x",
           height_);
  const uint8_t* p = &rgb_[(size_t(y) * size_t(width_) + size_t(x)) * 3];
  return {p[0], p[1], p[2]};
}

void RasterCanvas::blend(int x, int y, Color c, double alpha) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_ || alpha <= 0) return;
  alpha = std::min(alpha, 1.0);
  uint8_t* p = &rgb_[(size_t(y) * size_t(width_) + size_t(x)) * 3];
  const uint8_t target[3] = {c.r, c.g, c.b};
  for (int k = 0; k < 3; ++k) p[k] = uint8_t(std::lround(p[k] + (target[k] - p[k]) * alpha));
}

// Pixel (px, py) covers [px, px+1) x [py, py+1): a rectangle fills the pixels whose centres it holds.
void RasterCanvas::rect(double x, double y, double w, double h, Color fill) {
  const int x0 = int(std::ceil(x - 0.5)), x1 = int(std::ceil(x + w - 0.5));
  const int y0 = int(std::ceil(y - 0.5)), y1 = int(std::ceil(y + h - 0.5));
  for (int py = std::max(y0, 0); py < std::min(y1, height_); ++py)
    for (int px = std::max(x0, 0); px < std::min(x1, width_); ++px) blend(px, py, fill, 1.0);
}

// Coverage of a pixel centre at distance d from the segment: 1 inside the stroke, fading to 0 over
// one pixel at its edge.
void RasterCanvas::line(double x0, double y0, double x1, double y1, Color color, double width) {
  const double half = std::max(width, 1.0) / 2;
  const int bx0 = int(std::floor(std::min(x0, x1) - half - 1)), bx1 = int(std::ceil(std::max(x0, x1) + half + 1));
  const int by0 = int(std::floor(std::min(y0, y1) - half - 1)), by1 = int(std::ceil(std::max(y0, y1) + half + 1));
  const double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
  for (int py = std::max(by0, 0); py <= std::min(by1, height_ - 1); ++py)
    for (int px = std::max(bx0, 0); px <= std::min(bx1, width_ - 1); ++px) {
      const double cx = px + 0.5, cy = py + 0.5;
      const double t = len2 > 0 ? std::clamp(((cx - x0) * dx + (cy - y0) * dy) / len2, 0.0, 1.0) : 0.0;
      const double d = std::hypot(cx - (x0 + t * dx), cy - (y0 + t * dy));
      blend(px, py, color, std::clamp(half + 0.5 - d, 0.0, 1.0));
    }
}

void RasterCanvas::polyline(const std::vector<std::pair<double, double>>& points, Color color, double width) {
  for (size_t i = 1; i < points.size(); ++i)
    line(points[i - 1].first, points[i - 1].second, points[i].first, points[i].second, color, width);
}

// Glyphs are 5x7 cells on a 6-pixel advance, scaled by an integer so they stay crisp; the baseline is
// the bottom of the 7-row cell.
void RasterCanvas::text(double x, double y, const std::string& text, double size, Color color, Anchor anchor) {
  const int scale = std::max(1, int(std::lround(size / 9.0)));
  const double advance = 6.0 * scale, span = advance * double(text.size()) - scale;
  double left = anchor == Anchor::start ? x : anchor == Anchor::middle ? x - span / 2 : x - span;
  const int top = int(std::lround(y)) - 7 * scale;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    const uint8_t* glyph = kFont5x7[(c >= 32 && c < 127) ? c - 32 : '?' - 32];
    const int gx = int(std::lround(left));
    for (int col = 0; col < 5; ++col)
      for (int row = 0; row < 7; ++row)
        if (glyph[col] >> row & 1)
          for (int sy = 0; sy < scale; ++sy)
            for (int sx = 0; sx < scale; ++sx) blend(gx + col * scale + sx, top + row * scale + sy, color, 1.0);
    left += advance;
  }
}

void RasterCanvas::save_png(const std::string& path) const { write_png(path, width_, height_, rgb_); }

}  // namespace hg::metrics
