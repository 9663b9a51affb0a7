#pragma once
// A Canvas that writes SVG 1.1: text is XML-escaped, coordinates are rounded to 0.01 px.
#include <string>

#include "metrics/chart.h"

namespace hg::metrics {

class SvgCanvas : public Canvas {
 public:
  SvgCanvas(int width, int height);
  void rect(double x, double y, double w, double h, Color fill) override;
  void line(double x0, double y0, double x1, double y1, Color color, double width) override;
  void polyline(const std::vector<std::pair<double, double>>& points, Color color, double width) override;
  void text(double x, double y, const std::string& text, double size, Color color, Anchor anchor) override;
  // The complete document.
  std::string str() const;
  // Writes str() to `path`; throws hg::Error when the file cannot be written.
  void save(const std::string& path) const;

 private:
  int width_, height_;
  std::string body_;
};

// `text` with & < > " ' replaced by XML entities and control characters dropped.
std::string xml_escape(const std::string& text);

}  // namespace hg::metrics
