// Figure layout: a grid of charts; each chart has a title, a frame, 1-2-5 ticks (decades on a log
// axis), light grid lines, one polyline per series and a legend.
#include "metrics/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hg::metrics {

namespace {

constexpr Color kText{40, 40, 40}, kGrid{228, 228, 228}, kFrame{120, 120, 120}, kBackground{255, 255, 255};
constexpr Color kPalette[] = {{31, 119, 180}, {255, 127, 14},  {44, 160, 44},
                              {214, 39, 40},  {148, 103, 189}, {140, 86, 75}};
constexpr int kTitleHeight = 34;

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

void draw_chart(const Chart& chart, double x0, double y0, double w, double h, Canvas& canvas) {
  const double left = x0 + 64, right = x0 + w - 16, top = y0 + 34, bottom = y0 + h - 44;
  canvas.text(x0 + w / 2, y0 + 20, chart.title(), 14, kText, Anchor::middle);
  const std::vector<Series> series = chart.series();
  Range xr, yr;
  bool positive = true;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y) || !std::isfinite(x)) continue;
      xr.add(x);
      yr.add(y);
      positive = positive && y > 0;
    }
  canvas.line(left, bottom, right, bottom, kFrame, 1);
  canvas.line(left, top, left, bottom, kFrame, 1);
  if (xr.empty()) {
    canvas.text((left + right) / 2, (top + bottom) / 2, "no data", 12, kFrame, Anchor::middle);
    return;
  }
  const bool log_y = chart.log_y() && positive;
  auto fy = [&](double y) { return log_y ? std::log10(y) : y; };
  double ylo = fy(yr.lo), yhi = fy(yr.hi), xlo = xr.lo, xhi = xr.hi;
  if (xhi == xlo) xhi = xlo + 1;
  if (yhi == ylo) {
    ylo -= 0.5;
    yhi += 0.5;
  } else {
    const double pad = 0.04 * (yhi - ylo);
    ylo -= pad;
    yhi += pad;
  }
  auto px = [&](double x) { return left + (x - xlo) / (xhi - xlo) * (right - left); };
  auto py = [&](double y) { return bottom - (fy(y) - ylo) / (yhi - ylo) * (bottom - top); };

  std::vector<double> yticks;
  if (log_y) {
    for (double d = std::floor(ylo); d <= std::ceil(yhi); d += 1)
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, d);
        if (std::log10(v) >= ylo && std::log10(v) <= yhi) yticks.push_back(v);
      }
  } else {
    yticks = nice_ticks(ylo, yhi, 6);
  }
  for (double v : yticks) {
    const double y = py(v);
    canvas.line(left, y, right, y, kGrid, 1);
    canvas.text(left - 6, y + 4, tick_label(v), 11, kText, Anchor::end);
  }
  for (double v : nice_ticks(xlo, xhi, 6)) {
    const double x = px(v);
    canvas.line(x, top, x, bottom, kGrid, 1);
    canvas.text(x, bottom + 16, tick_label(v), 11, kText, Anchor::middle);
  }
  canvas.line(left, bottom, right, bottom, kFrame, 1);
  canvas.line(left, top, left, bottom, kFrame, 1);
  canvas.text((left + right) / 2, bottom + 34, chart.x_label(), 12, kText, Anchor::middle);
  canvas.text(x0 + 6, top - 8, chart.y_label(), 11, kText, Anchor::start);

  for (size_t i = 0; i < series.size(); ++i) {
    const Color color = kPalette[i % std::size(kPalette)];
    std::vector<std::pair<double, double>> run;
    auto flush = [&] {
      if (run.size() == 1) canvas.rect(run[0].first - 1.5, run[0].second - 1.5, 3, 3, color);
      if (run.size() > 1) canvas.polyline(run, color, 1.6);
      run.clear();
    };
    for (const auto& [x, y] : series[i].points) {
      if (!std::isfinite(x) || !std::isfinite(y)) {
        flush();
        continue;
      }
      run.emplace_back(px(x), py(y));
    }
    flush();
  }
  // Legend, top right, one line per series, on a white box so curves do not run through it.
  canvas.rect(right - 156, top + 2, 154, 16.0 * double(series.size()) + 4, kBackground);
  for (size_t i = 0; i < series.size(); ++i) {
    const double ly = top + 14 + 16 * double(i);
    canvas.line(right - 150, ly - 4, right - 128, ly - 4, kPalette[i % std::size(kPalette)], 2.5);
    canvas.text(right - 122, ly, series[i].name, 11, kText, Anchor::start);
  }
}

}  // namespace

int Figure::width() const { return columns_ * chart_width_; }
int Figure::height() const {
  const int rows = int((charts_.size() + size_t(columns_) - 1) / size_t(columns_));
  return kTitleHeight + std::max(rows, 1) * chart_height_;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return ticks;
  const double raw = (hi - lo) / std::max(target, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return ticks;
}

std::string tick_label(double value) {
  char text[32];
  const double a = std::abs(value);
  if (a >= 1e6 || (a > 0 && a < 1e-3))
    std::snprintf(text, sizeof text, "%.0e", value);
  else if (a >= 1e4)
    std::snprintf(text, sizeof text, "%gk", value / 1e3);
  else
    std::snprintf(text, sizeof text, "%g", value);
  return text;
}

void draw(const Figure& figure, Canvas& canvas) {
  canvas.rect(0, 0, figure.width(), figure.height(), kBackground);
  canvas.text(figure.width() / 2.0, 24, figure.title(), 16, kText, Anchor::middle);
  const std::vector<Chart> charts = figure.charts();
  const size_t columns = size_t(figure.columns());
  const int w = figure.chart_width(), h = figure.chart_height();
  for (size_t i = 0; i < charts.size(); ++i) {
    const double x = double(i % columns) * w;
    const double y = kTitleHeight + double(i / columns) * h;
    draw_chart(charts[i], x, y, w, h, canvas);
  }
}

}  // namespace hg::metrics
