#include "samples/drawn_digits.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace hg::samples {
namespace {

struct Point {
  double x, y;  // unit box, y pointing down
};
using Stroke = std::vector<Point>;

// An elliptical loop as a closed polyline.
Stroke loop(double cx, double cy, double rx, double ry, int segments = 14) {
  Stroke s;
  for (int k = 0; k <= segments; ++k) {
    const double a = 2 * M_PI * k / segments;
    s.push_back({cx + rx * std::cos(a), cy + ry * std::sin(a)});
  }
  return s;
}

// The pen strokes of each digit, written once by hand.
const std::vector<Stroke>& strokes_of(int digit) {
  static const std::vector<std::vector<Stroke>> kDigits = {
      {loop(0.5, 0.5, 0.26, 0.38)},
      {{{0.5, 0.1}, {0.5, 0.9}}, {{0.33, 0.27}, {0.5, 0.1}}},
      {{{0.22, 0.3}, {0.35, 0.13}, {0.62, 0.11}, {0.78, 0.28}, {0.7, 0.5}, {0.22, 0.9}, {0.8, 0.9}}},
      {{{0.22, 0.15}, {0.75, 0.15}, {0.45, 0.45}, {0.72, 0.56}, {0.77, 0.77}, {0.55, 0.92}, {0.22, 0.86}}},
      {{{0.65, 0.9}, {0.65, 0.1}, {0.17, 0.64}, {0.85, 0.64}}},
      {{{0.78, 0.1}, {0.27, 0.1}, {0.23, 0.45}, {0.58, 0.41}, {0.79, 0.6}, {0.74, 0.83}, {0.5, 0.92}, {0.22, 0.85}}},
      {{{0.7, 0.1},
        {0.38, 0.33},
        {0.24, 0.64},
        {0.34, 0.89},
        {0.64, 0.9},
        {0.77, 0.71},
        {0.64, 0.53},
        {0.36, 0.53},
        {0.25, 0.63}}},
      {{{0.2, 0.1}, {0.8, 0.1}, {0.42, 0.9}}},
      {loop(0.5, 0.29, 0.2, 0.18), loop(0.5, 0.7, 0.25, 0.21)},
      {loop(0.48, 0.32, 0.22, 0.21), {{0.7, 0.32}, {0.66, 0.6}, {0.58, 0.9}}},
  };
  return kDigits[size_t(digit)];
}

double segment_distance(Point p, Point a, Point b) {
  const double dx = b.x - a.x, dy = b.y - a.y;
  const double len2 = dx * dx + dy * dy;
  double t = len2 > 0 ? ((p.x - a.x) * dx + (p.y - a.y) * dy) / len2 : 0.0;
  t = std::clamp(t, 0.0, 1.0);
  const double ex = a.x + t * dx - p.x, ey = a.y + t * dy - p.y;
  return std::sqrt(ex * ex + ey * ey);
}

uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr float kMean = 0.18f, kScale = 2.5f;  // roughly zero-mean, unit-scale inputs

}  // namespace

DrawnDigits::DrawnDigits(int64_t size, uint64_t seed, int64_t examples)
    : size_(size), seed_(seed), examples_(examples) {
  HG_CHECK(size >= 8 && size <= 256, "[DrawnDigits] image size ", size, " is outside [8, 256]");
}

std::vector<float> DrawnDigits::draw(int label, uint64_t example_seed) const {
  HG_CHECK(label >= 0 && label <= 9, "[DrawnDigits] label ", label, " is not a digit");
  std::mt19937_64 rng(example_seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const double angle = 0.3 * u(rng), scale = 0.9 + 0.12 * u(rng), shear = 0.3 * u(rng);
  const double aspect = 1.0 + 0.2 * u(rng), shift_x = 0.1 * u(rng), shift_y = 0.1 * u(rng);
  const double half_width = 0.035 + 0.025 * (u(rng) + 1.0);
  const double c = std::cos(angle), s = std::sin(angle);
  std::vector<Stroke> strokes = strokes_of(label);
  for (Stroke& stroke : strokes) {
    for (Point& p : stroke) {
      const double x = p.x - 0.5 + 0.05 * u(rng), y = p.y - 0.5 + 0.05 * u(rng);
      const double sx = scale * aspect * (x + shear * y), sy = scale * y;
      p = {0.5 + shift_x + c * sx - s * sy, 0.5 + shift_y + s * sx + c * sy};
    }
  }
  if (u(rng) > 0.0) {  // half of the images get a stray pen mark somewhere
    const Point a{0.5 + 0.45 * u(rng), 0.5 + 0.45 * u(rng)};
    strokes.push_back({a, {a.x + 0.2 * u(rng), a.y + 0.2 * u(rng)}});
  }
  std::vector<float> image(size_t(size_ * size_));
  std::normal_distribution<float> noise(0.0f, 0.2f);
  const double pixel = 1.0 / double(size_);
  for (int64_t py = 0; py < size_; ++py) {
    for (int64_t px = 0; px < size_; ++px) {
      const Point p{(px + 0.5) * pixel, (py + 0.5) * pixel};
      double d = 1e9;
      for (const Stroke& stroke : strokes)
        for (size_t k = 0; k + 1 < stroke.size(); ++k) d = std::min(d, segment_distance(p, stroke[k], stroke[k + 1]));
      const double ink = std::clamp(1.0 - (d - half_width) / pixel, 0.0, 1.0);  // one pixel of anti-aliasing
      image[size_t(py * size_ + px)] = float(ink) + noise(rng);
    }
  }
  return image;
}

void DrawnDigits::example(int64_t index, float* pixels, int64_t* label) const {
  const uint64_t example_seed = mix(seed_ ^ mix(uint64_t(index)));
  *label = int64_t(mix(example_seed) % 10);
  const std::vector<float> image = draw(int(*label), example_seed);
  for (size_t k = 0; k < image.size(); ++k) pixels[k] = (image[k] - kMean) * kScale;
}

std::vector<data::Field> DrawnDigits::fields() const {
  return {{"image", DType::f32, {1, size_, size_}}, {"label", DType::i64, {}}};
}

void DrawnDigits::get(int64_t index, const std::vector<void*>& out) const {
  example(index, static_cast<float*>(out[0]), static_cast<int64_t*>(out[1]));
}

std::pair<Tensor, Tensor> DrawnDigits::batch(int64_t first, int64_t count) const {
  std::vector<float> pixels(size_t(count * size_ * size_));
  std::vector<int64_t> labels(static_cast<size_t>(count));
#pragma omp parallel for schedule(static) if (count >= 16)
  for (int64_t i = 0; i < count; ++i) example(first + i, pixels.data() + i * size_ * size_, &labels[size_t(i)]);
  return {from_vector(pixels, {count, 1, size_, size_}), from_vector(labels, {count})};
}

std::string DrawnDigits::ascii(const std::vector<float>& image) const {
  static const char kShades[] = " .:-=+*#%@";
  std::string text;
  for (int64_t y = 0; y < size_; ++y) {
    for (int64_t x = 0; x < size_; ++x) {
      const float v = std::clamp(image[size_t(y * size_ + x)], 0.0f, 0.999f);
      text += kShades[int(v * 10)];
      text += kShades[int(v * 10)];
    }
    text += '\n';
  }
  return text;
}

}  // namespace hg::samples
