// SVG output for charts.
#include "metrics/svg.h"

#include <cstdio>
#include <fstream>
#include <string_view>

#include "kernels/error.h"

namespace hg::metrics {

namespace {
std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", v);
  return text;
}
// Appends pieces to `out` (rather than chains of operator+, which trip GCC 12's -Wrestrict false
// positive).
void append(std::string& out, std::initializer_list<std::string_view> pieces) {
  for (std::string_view piece : pieces) out += piece;
}
std::string rgb(Color c) {
  char text[16];
  std::snprintf(text, sizeof text, "#%02x%02x%02x", c.r, c.g, c.b);
  return text;
}
}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t') out += c;
    }
  }
  return out;
}

SvgCanvas::SvgCanvas(int width, int height) : width_(width), height_(height) {}

void SvgCanvas::rect(double x, double y, double w, double h, Color fill) {
  append(body_, {"<rect x=\"", num(x), "\" y=\"", num(y), "\" width=\"", num(w), "\" height=\"", num(h), "\" fill=\"",
                 rgb(fill), "\"/>\n"});
}

void SvgCanvas::line(double x0, double y0, double x1, double y1, Color color, double width) {
  append(body_, {"<line x1=\"", num(x0), "\" y1=\"", num(y0), "\" x2=\"", num(x1), "\" y2=\"", num(y1), "\" stroke=\"",
                 rgb(color), "\" stroke-width=\"", num(width), "\"/>\n"});
}

void SvgCanvas::polyline(const std::vector<std::pair<double, double>>& points, Color color, double width) {
  append(body_, {"<polyline fill=\"none\" stroke=\"", rgb(color), "\" stroke-width=\"", num(width),
                 "\" stroke-linejoin=\"round\" points=\""});
  for (size_t i = 0; i < points.size(); ++i)
    append(body_, {i ? " " : "", num(points[i].first), ",", num(points[i].second)});
  body_ += "\"/>\n";
}

void SvgCanvas::text(double x, double y, const std::string& text, double size, Color color, Anchor anchor) {
  const char* a = anchor == Anchor::start ? "start" : anchor == Anchor::middle ? "middle" : "end";
  append(body_, {"<text x=\"", num(x), "\" y=\"", num(y), "\" font-size=\"", num(size), "\" fill=\"", rgb(color),
                 "\" text-anchor=\"", a, "\">", xml_escape(text), "</text>\n"});
}

std::string SvgCanvas::str() const {
  std::string doc;
  append(
      doc,
      {"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"",
       std::to_string(width_), "\" height=\"", std::to_string(height_), "\" viewBox=\"0 0 ", std::to_string(width_),
       " ", std::to_string(height_), "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n", body_,
       "</svg>\n"});
  return doc;
}

void SvgCanvas::save(const std::string& path) const {
  const std::string document = str();
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  HG_CHECK(file.is_open(), "[plot] cannot open \"", path, "\" for writing");
  file.write(document.data(), std::streamsize(document.size()));
  file.close();
  HG_CHECK(!file.fail(), "[plot] writing \"", path, "\" failed (disk full?)");
}

}  // namespace hg::metrics
