// The metrics log (JSONL round trip, absent fields omitted, errors with line numbers) and the charts
// drawn from it (SVG well-formed, escaped, one polyline point per record; PNG checked byte by byte:
// chunk CRCs, the zlib stream's stored blocks and Adler-32, decoded pixels — and by zlib itself
// where the build found it).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <vector>

#if defined(HG_TEST_HAVE_ZLIB)
#include <zlib.h>
#endif

#include "metrics/image_grid.h"
#include "metrics/metrics_log.h"
#include "metrics/metrics_plot.h"
#include "metrics/png.h"
#include "metrics/raster.h"
#include "metrics/svg.h"
#include "support/check_error.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::metrics;

namespace {

std::string temp_path(const std::string& name) {
  return "/tmp/hg_test_metrics_" + std::to_string(::getpid()) + "_" + name;
}

std::string read_all(const std::string& path) {
  std::ifstream file(path);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// A minimal XML well-formedness check: balanced tags, quoted attributes, no raw '<' or '&' in text.
bool well_formed_xml(const std::string& doc, std::string& why) {
  std::vector<std::string> open;
  size_t i = doc.find("<svg");
  if (i == std::string::npos) return why = "no <svg>", false;
  while (i < doc.size()) {
    if (doc[i] == '<') {
      const size_t end = doc.find('>', i);
      if (end == std::string::npos) return why = "unterminated tag", false;
      std::string tag = doc.substr(i + 1, end - i - 1);
      if (tag.find('<') != std::string::npos) return why = "'<' inside a tag: " + tag, false;
      size_t quotes = 0;
      for (char c : tag) quotes += c == '"';
      if (quotes % 2) return why = "unbalanced quotes: " + tag, false;
      if (tag[0] == '/') {
        if (open.empty() || open.back() != tag.substr(1)) return why = "mismatched </" + tag.substr(1) + ">", false;
        open.pop_back();
      } else if (tag.back() != '/') {
        open.push_back(tag.substr(0, tag.find(' ')));
      }
      i = end + 1;
    } else {
      if (doc[i] == '&') {
        const size_t semi = doc.find(';', i);
        const std::string entity = doc.substr(i, semi - i + 1);
        if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" && entity != "&apos;")
          return why = "bad entity " + entity, false;
      }
      ++i;
    }
  }
  if (!open.empty()) return why = "unclosed <" + open.back() + ">", false;
  return true;
}

}  // namespace

TEST_CASE("metrics JSONL round trip keeps values exactly and omits absent fields") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1e3, 1e3);
  const std::string path = temp_path("roundtrip.jsonl");
  std::vector<Record> written;
  {
    MetricsLog log(path);
    for (int64_t step = 1; step <= 50; ++step) {
      Record r(step);
      r.set("loss", std::exp(u(rng) / 300)).set("lr", u(rng) * 1e-7).set("tokens_per_s", u(rng) * 1e5);
      if (step % 10 == 0) r.set("accuracy", std::abs(u(rng)) / 1e3);
      r.set("val_loss", step % 25 == 0 ? std::optional<double>(u(rng)) : std::nullopt);
      log.write(r);
      written.push_back(r);
    }
  }
  const std::vector<Record> back = read_metrics(path);
  REQUIRE(back.size() == written.size());
  for (size_t i = 0; i < back.size(); ++i) {
    CHECK(back[i].step() == written[i].step());
    REQUIRE(back[i].fields().size() == written[i].fields().size());
    for (size_t f = 0; f < back[i].fields().size(); ++f) {
      CHECK(back[i].fields()[f].first == written[i].fields()[f].first);
      CHECK(back[i].fields()[f].second == written[i].fields()[f].second);  // bitwise round trip
    }
  }
  CHECK(back[8].has("loss"));
  CHECK_FALSE(back[8].has("accuracy"));  // absent, not zero
  CHECK(back[9].has("accuracy"));
  CHECK(back[24].has("val_loss"));
  CHECK_FALSE(back[23].has("val_loss"));
  const std::string text = read_all(path);
  CHECK(text.rfind("{\"step\":1,\"loss\":", 0) == 0);
  CHECK(text.find("\"accuracy\"") ==
        text.find("{\"step\":10,") + text.substr(text.find("{\"step\":10,")).find("\"accuracy\""));
  std::remove(path.c_str());
}

TEST_CASE("metrics JSONL non-finite values and malformed lines") {
  Record r(3);
  r.set("loss", NAN).set("grad_norm", INFINITY).set("lr", 0.5);
  const std::string line = to_json_line(r);
  CHECK(line == "{\"step\":3,\"loss\":null,\"grad_norm\":null,\"lr\":0.5}");
  const Record back = parse_json_line(line);
  CHECK(std::isnan(back.at("loss")));
  CHECK(back.at("lr") == 0.5);
  CHECK_ERROR(back.at("accuracy"), "step 3 has no field \"accuracy\"");
  CHECK_ERROR(Record(1).set("step", 2.0), "reserved");
  CHECK_ERROR(parse_json_line("[1, 2]"), "expected a JSON object");
  CHECK_ERROR(parse_json_line("{\"loss\": 1}"), "integer \"step\"");
  CHECK_ERROR(parse_json_line("{\"step\": 1, \"loss\": \"high\"}"), "field \"loss\" at step 1 is a string");

  const std::string path = temp_path("bad.jsonl");
  {
    std::ofstream file(path);
    file << "{\"step\": 1, \"loss\": 2.5}\n\n{\"step\": 2, \"loss\": \n";
  }
  CHECK_ERROR(read_metrics(path), "bad.jsonl:3:", "not a JSON line");
  std::remove(path.c_str());
  CHECK_ERROR(read_metrics("/nonexistent/metrics.jsonl"), "cannot open the metrics log");
  CHECK_ERROR(MetricsLog("/nonexistent/metrics.jsonl"), "cannot open the metrics log \"/nonexistent/metrics.jsonl\"");
}

TEST_CASE("nice ticks are 1-2-5 multiples covering the range") {
  const std::vector<double> t = nice_ticks(0.13, 0.91, 6);
  REQUIRE(t.size() >= 4);
  CHECK(t.size() == 4);  // (0.91 - 0.13) / 6 = 0.13 rounds up to a step of 0.2: 0.2 0.4 0.6 0.8
  for (size_t i = 1; i < t.size(); ++i) CHECK(t[i] - t[i - 1] == doctest::Approx(0.2));
  CHECK(t.front() >= 0.13 - 1e-12);
  CHECK(t.back() <= 0.91 + 1e-12);
  CHECK(nice_ticks(0, 3000, 6) == std::vector<double>{0, 500, 1000, 1500, 2000, 2500, 3000});
  CHECK(nice_ticks(1, 1, 5).empty());
  CHECK(tick_label(2500) == "2500");
  CHECK(tick_label(25000) == "25k");
  CHECK(tick_label(0.0001) == "1e-04");
}

TEST_CASE("metrics figure renders well-formed SVG with a point per record and escaped text") {
  std::vector<Record> records;
  for (int64_t step = 1; step <= 40; ++step) {
    Record r(step);
    r.set("loss", 3.0 / double(step)).set("memory_allocated_mib", 10.0 + double(step % 3));
    if (step % 10 == 0) r.set("accuracy", double(step) / 40.0);
    if (step == 20) r.set("loss", NAN);  // breaks the line in two
    records.push_back(r);
  }
  const Figure figure = figure_from_metrics(records, "run <a & b> \"quoted\"");
  REQUIRE(figure.charts().size() == 3);  // loss, accuracy, memory: no empty panels
  CHECK(figure.charts()[0].title() == "loss");
  CHECK(figure.charts()[1].series()[0].points.size() == 4);
  CHECK(figure.charts()[1].series()[0].points[3].second == doctest::Approx(100.0));
  SvgCanvas svg(figure.width(), figure.height());
  draw(figure, svg);
  const std::string doc = svg.str();
  std::string why;
  CHECK_MESSAGE(well_formed_xml(doc, why), why);
  CHECK(doc.find("run &lt;a &amp; b&gt; &quot;quoted&quot;") != std::string::npos);
  // The loss series: 19 + 20 points in two polylines (the NaN at step 20 splits it).
  std::vector<size_t> counts;
  for (size_t at = doc.find("<polyline"); at != std::string::npos; at = doc.find("<polyline", at + 1)) {
    const size_t begin = doc.find("points=\"", at) + 8, end = doc.find('"', begin);
    size_t n = 1;
    for (size_t k = begin; k < end; ++k) n += doc[k] == ' ';
    counts.push_back(n);
  }
  REQUIRE(counts.size() >= 3);
  CHECK(counts[0] == 19);
  CHECK(counts[1] == 20);
  const std::string path = temp_path("figure.svg");
  svg.save(path);
  CHECK(read_all(path) == doc);
  std::remove(path.c_str());
  CHECK_ERROR(svg.save("/nonexistent/figure.svg"), "cannot open \"/nonexistent/figure.svg\"");
}

namespace {

// Independent of the writer's table-driven CRC: bit by bit, straight from the PNG specification.
uint32_t crc32_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

struct DecodedPng {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> zlib, raw;
};

// Walks the chunks (checking each CRC) and inflates the stored blocks of the zlib stream.
DecodedPng decode_stored_png(const std::vector<uint8_t>& png) {
  DecodedPng out;
  const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  REQUIRE(png.size() > 8);
  REQUIRE(std::equal(signature, signature + 8, png.begin()));
  size_t at = 8;
  std::vector<std::string> types;
  while (at < png.size()) {
    REQUIRE(at + 12 <= png.size());
    const uint32_t length = be32(&png[at]);
    const std::string type(png.begin() + ptrdiff_t(at + 4), png.begin() + ptrdiff_t(at + 8));
    REQUIRE(at + 12 + length <= png.size());
    CHECK(be32(&png[at + 8 + length]) == crc32_bitwise(&png[at + 4], 4 + length));
    types.push_back(type);
    if (type == "IHDR") {
      REQUIRE(length == 13);
      out.width = be32(&png[at + 8]);
      out.height = be32(&png[at + 12]);
      CHECK(png[at + 16] == 8);  // bit depth
      CHECK(png[at + 17] == 2);  // RGB
    }
    if (type == "IDAT")
      out.zlib.insert(out.zlib.end(), png.begin() + ptrdiff_t(at + 8), png.begin() + ptrdiff_t(at + 8 + length));
    at += 12 + length;
  }
  CHECK(types == std::vector<std::string>{"IHDR", "IDAT", "IEND"});
  const std::vector<uint8_t>& z = out.zlib;
  REQUIRE(z.size() >= 6);
  CHECK((z[0] * 256 + z[1]) % 31 == 0);
  CHECK((z[0] & 0x0F) == 8);  // deflate
  size_t p = 2;
  bool final = false;
  while (!final) {
    REQUIRE(p + 5 <= z.size());
    final = z[p] & 1;
    CHECK((z[p] >> 1 & 3) == 0);  // stored
    const uint32_t len = z[p + 1] | uint32_t(z[p + 2]) << 8, nlen = z[p + 3] | uint32_t(z[p + 4]) << 8;
    CHECK(len == (~nlen & 0xFFFF));
    REQUIRE(p + 5 + len <= z.size());
    out.raw.insert(out.raw.end(), z.begin() + ptrdiff_t(p + 5), z.begin() + ptrdiff_t(p + 5 + len));
    p += 5 + len;
  }
  REQUIRE(p + 4 == z.size());
  uint32_t a = 1, b = 0;  // Adler-32, the slow way
  for (uint8_t byte : out.raw) {
    a = (a + byte) % 65521;
    b = (b + a) % 65521;
  }
  CHECK(be32(&z[p]) == (b << 16 | a));
  return out;
}

}  // namespace

TEST_CASE("CRC-32 and Adler-32 known answers") {
  const std::string digits = "123456789", wiki = "Wikipedia";
  CHECK(crc32(reinterpret_cast<const uint8_t*>(digits.data()), digits.size()) == 0xCBF43926u);
  CHECK(adler32(reinterpret_cast<const uint8_t*>(wiki.data()), wiki.size()) == 0x11E60398u);
  // Incremental use equals one pass.
  const uint32_t part = crc32(reinterpret_cast<const uint8_t*>(digits.data()), 4);
  CHECK(crc32(reinterpret_cast<const uint8_t*>(digits.data()) + 4, 5, part) == 0xCBF43926u);
  std::vector<uint8_t> big(100000);
  std::mt19937 rng(3);
  for (auto& v : big) v = uint8_t(rng());
  uint32_t a = 1, b = 0;
  for (uint8_t byte : big) {
    a = (a + byte) % 65521;
    b = (b + a) % 65521;
  }
  CHECK(adler32(big.data(), big.size()) == (b << 16 | a));  // across the 5552-byte blocks
}

TEST_CASE("PNG writer output decodes to the pixels it was given") {
  const int w = 173, h = 211;  // more than 65535 raw bytes: several stored blocks
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  std::mt19937 rng(5);
  for (auto& v : rgb) v = uint8_t(rng());
  const std::vector<uint8_t> png = encode_png(w, h, rgb);
  const DecodedPng d = decode_stored_png(png);
  CHECK(d.width == uint32_t(w));
  CHECK(d.height == uint32_t(h));
  REQUIRE(d.raw.size() == size_t(h) * (size_t(w) * 3 + 1));
  bool pixels_equal = true;
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = &d.raw[size_t(y) * (size_t(w) * 3 + 1)];
    pixels_equal =
        pixels_equal && row[0] == 0 && std::equal(row + 1, row + 1 + w * 3, rgb.begin() + ptrdiff_t(size_t(y) * w * 3));
  }
  CHECK(pixels_equal);
#if defined(HG_TEST_HAVE_ZLIB)
  std::vector<uint8_t> inflated(d.raw.size() + 16);
  uLongf size = uLongf(inflated.size());
  REQUIRE(uncompress(inflated.data(), &size, d.zlib.data(), uLong(d.zlib.size())) == Z_OK);  // zlib agrees
  inflated.resize(size);
  CHECK(inflated == d.raw);
  CHECK(::crc32(0L, png.data() + 12, 17) == be32(&png[29]));  // IHDR's CRC by zlib
#else
  MESSAGE("zlib not found at configure time: the PNG was checked by this test's own decoder only");
#endif
  CHECK_ERROR(encode_png(2, 2, std::vector<uint8_t>(11)), "expected 12 RGB bytes for 2x2, got 11");
  CHECK_ERROR(encode_png(0, 2, {}), "image size must be positive");
}

TEST_CASE("image grid tiles images row by row with grey gaps, clamped and scaled") {
  // Three 2x2 grey images, two to a row, each pixel drawn 2x2, gaps of 1: a 11 x 11 picture.
  std::mt19937 rng(hg::testing::fresh_seed());
  std::uniform_real_distribution<float> unit(-0.2f, 1.2f);  // some below low and above high: clamped
  std::vector<float> pixels(12);
  for (float& v : pixels) v = unit(rng);
  pixels[5] = NAN;
  const RgbImage image = tile_images({pixels.data(), 3, 1, 2, 2}, GridOptions{.columns = 2, .scale = 2, .gap = 1});
  REQUIRE(image.width == 11);
  REQUIRE(image.height == 11);
  const auto at = [&](int x, int y, int c) { return int(image.rgb[size_t((y * image.width + x) * 3 + c)]); };
  const auto expected = [](float v) { return int(std::lround(std::clamp(v, 0.0f, 1.0f) * 255.0f)); };
  for (int i : {0, 1, 2})
    for (int py = 0; py < 2; ++py)
      for (int px = 0; px < 2; ++px) {
        const int left = 1 + (i % 2) * 5 + 2 * px, top = 1 + (i / 2) * 5 + 2 * py;
        const float v = pixels[size_t(i * 4 + py * 2 + px)];
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx)
            for (int c = 0; c < 3; ++c)
              CHECK(at(left + dx, top + dy, c) == (std::isnan(v) ? (c == 0 ? 255 : 0) : expected(v)));
      }
  CHECK(at(0, 0, 0) == 128);  // the border
  CHECK(at(5, 3, 1) == 128);  // the gap between the first two images
  CHECK(at(8, 8, 2) == 128);  // the empty fourth cell
  // RGB: the channels are planes.
  const std::vector<float> red{1.0f, 0.0f, 0.0f};
  const RgbImage rgb = tile_images({red.data(), 1, 3, 1, 1}, GridOptions{.scale = 1, .gap = 0});
  CHECK(rgb.rgb == std::vector<uint8_t>{255, 0, 0});
  const std::string path = temp_path("grid.png");
  save_image_grid(path, {pixels.data(), 3, 1, 2, 2}, GridOptions{.columns = 2, .scale = 2, .gap = 1});
  const std::string png = read_all(path);
  CHECK(be32(reinterpret_cast<const uint8_t*>(png.data()) + 16) == 11);
  std::remove(path.c_str());
  CHECK_ERROR(tile_images({pixels.data(), 2, 2, 2, 2}), "expected 1 (grey) or 3 (RGB) channels, got 2");
  CHECK_ERROR(tile_images({pixels.data(), 0, 1, 2, 2}), "expected at least one image");
  CHECK_ERROR(tile_images({pixels.data(), 1, 1, 2, 2}, GridOptions{.low = 1, .high = 1}), "high > low");
}

TEST_CASE("raster canvas draws rectangles lines and text where asked") {
  RasterCanvas c(40, 30);
  const Color red{200, 10, 20}, blue{0, 0, 255}, white{255, 255, 255};
  CHECK(c.pixel(0, 0) == white);
  c.rect(2, 3, 4, 2, red);  // pixels x 2..5, y 3..4
  CHECK(c.pixel(2, 3) == red);
  CHECK(c.pixel(5, 4) == red);
  CHECK(c.pixel(6, 4) == white);
  CHECK(c.pixel(2, 5) == white);
  CHECK(c.pixel(1, 3) == white);
  c.line(10, 20.5, 30, 20.5, blue, 1);  // one pixel row (20), fully covered between the ends
  for (int x = 10; x < 30; ++x) CHECK(c.pixel(x, 20) == blue);
  CHECK(c.pixel(20, 18) == white);
  CHECK(c.pixel(20, 22) == white);
  CHECK(c.pixel(20, 19) != blue);              // at most partly covered
  c.text(10, 12, "1", 9, red, Anchor::start);  // glyph '1': column 2 is the stem, rows 0..6
  for (int row = 0; row < 7; ++row) CHECK(c.pixel(12, 5 + row) == red);
  CHECK(c.pixel(10, 5) == white);
  c.line(-50, -50, 100, 100, blue, 3);  // clipped, no crash
  CHECK_ERROR(c.pixel(40, 0), "outside 40x30");
  const std::string path = temp_path("canvas.png");
  c.save_png(path);
  const std::string file = read_all(path);
  const std::vector<uint8_t> expected = encode_png(40, 30, c.rgb());
  CHECK(std::vector<uint8_t>(file.begin(), file.end()) == expected);
  std::remove(path.c_str());
}

TEST_CASE("metrics figure as PNG carries the curves in the series colours") {
  std::vector<Record> records;
  for (int64_t step = 1; step <= 100; ++step) records.push_back(Record(step).set("loss", 4.0 / double(step)));
  const Figure figure = figure_from_metrics(records, "png");
  RasterCanvas image(figure.width(), figure.height());
  draw(figure, image);
  const Color first_series{31, 119, 180};
  int coloured = 0;
  for (int y = 0; y < image.height(); ++y)
    for (int x = 0; x < image.width(); ++x) coloured += image.pixel(x, y) == first_series;
  CHECK(coloured > 200);  // the loss curve (and its legend swatch)
  const DecodedPng d = decode_stored_png(encode_png(image.width(), image.height(), image.rgb()));
  CHECK(d.width == uint32_t(figure.width()));
}
