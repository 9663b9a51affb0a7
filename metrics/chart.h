#pragma once
// Line charts of training curves, laid out once and drawn on any Canvas: SvgCanvas (metrics/svg.h)
// writes vector SVG; a raster canvas can draw the same calls into pixels.
//
//   auto figure = metrics::Figure().title("train_gpt").charts({loss_chart, accuracy_chart}).columns(2);
//   metrics::SvgCanvas svg(figure.width(), figure.height());
//   metrics::draw(figure, svg);
//   svg.save("metrics.svg");
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/options.h"

namespace hg::metrics {

struct Color {
  uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Color&, const Color&) = default;
};

enum class Anchor { start, middle, end };

// What a chart is drawn with. Coordinates are pixels, origin top left.
class Canvas {
 public:
  virtual ~Canvas() = default;
  virtual void rect(double x, double y, double w, double h, Color fill) = 0;
  virtual void line(double x0, double y0, double x1, double y1, Color color, double width) = 0;
  virtual void polyline(const std::vector<std::pair<double, double>>& points, Color color, double width) = 0;
  // `y` is the text's baseline.
  virtual void text(double x, double y, const std::string& text, double size, Color color, Anchor anchor) = 0;
};

// One curve: data, not options (a plain value, like Color).
struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y); a non-finite y breaks the line
};

// One panel of a figure.
//   metrics::Chart().title("loss").x_label("step").y_label("cross-entropy").series({train, validation}).log_y(true)
struct Chart {
  HG_OPTION(Chart, std::string, title, "");
  HG_OPTION(Chart, std::string, x_label, "");
  HG_OPTION(Chart, std::string, y_label, "");
  HG_OPTION(Chart, std::vector<Series>, series, {});
  // Used only when every finite y is positive.
  HG_OPTION(Chart, bool, log_y, false);
};

// Charts in a grid, `columns` wide, each chart_width x chart_height pixels, under a title line.
//   metrics::Figure().title("train_gpt").charts({loss, accuracy}).columns(2)
struct Figure {
  HG_OPTION(Figure, std::string, title, "");
  HG_OPTION(Figure, std::vector<Chart>, charts, {});
  HG_OPTION(Figure, int, columns, 2);
  HG_OPTION(Figure, int, chart_width, 520);
  HG_OPTION(Figure, int, chart_height, 320);

 public:
  int width() const;
  int height() const;
};

// Axis ticks at 1-2-5 multiples covering [lo, hi] (about `target` of them).
std::vector<double> nice_ticks(double lo, double hi, int target);
// Short labels for tick values ("0.001", "2.5k", "1e+06").
std::string tick_label(double value);

void draw(const Figure& figure, Canvas& canvas);

}  // namespace hg::metrics
