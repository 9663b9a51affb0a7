#pragma once
// A Canvas that draws into an RGB image: anti-aliased lines (coverage from the distance to the
// segment), filled rectangles, and text in the 5x7 bitmap font scaled to the requested size. With
// png.h it turns a Figure into a PNG without any image library.
#include <cstdint>
#include <string>
#include <vector>

#include "metrics/chart.h"

namespace hg::metrics {

class RasterCanvas : public Canvas {
 public:
  RasterCanvas(int width, int height);  // starts white
  void rect(double x, double y, double w, double h, Color fill) override;
  void line(double x0, double y0, double x1, double y1, Color color, double width) override;
  void polyline(const std::vector<std::pair<double, double>>& points, Color color, double width) override;
  void text(double x, double y, const std::string& text, double size, Color color, Anchor anchor) override;

  int width() const { return width_; }
  int height() const { return height_; }
  Color pixel(int x, int y) const;
  const std::vector<uint8_t>& rgb() const { return rgb_; }
  // Writes the image as a PNG (metrics/png.h).
  void save_png(const std::string& path) const;

 private:
  void blend(int x, int y, Color color, double alpha);
  int width_, height_;
  std::vector<uint8_t> rgb_;
};

}  // namespace hg::metrics
