// Helpers shared by the CPU normalisations (normalization.cpp: rms_norm, group_norm; batch_norm.cpp):
// a run of elements viewed in the accumulation type, widened from the half types into a per-thread
// float buffer and narrowed back the same way (convert.h), and the `omp simd` sums over a run, which
// read bf16 directly (its widening is a shift that vectorises inline; its narrowing does not).
// A sum's lanes are added in an order fixed by the compiled code, so a run's sum has the same bits
// whatever the thread count.
//
// The sums are never inlined: GCC 12 does not vectorise an `omp simd reduction` loop inlined into an
// `omp parallel` region (the lanes become a stack array summed one scalar at a time, 3x slower in
// batch_norm's forward), and one call per run costs nothing next to the run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/error.h"
#include "kernels/half.h"

namespace hg::kernels::cpu::norm {

// p[0, n) as A: p itself for f32 / f64, widened into `buffer` for the half types.
template <class T, class A = acc_t<T>>
const A* widen(const T* p, int64_t n, std::vector<float>& buffer) {
  if constexpr (std::is_same_v<T, A>) {
    return p;
  } else {
    if (buffer.size() < size_t(n)) buffer.resize(size_t(n));
    to_float(p, buffer.data(), n);
    return buffer.data();
  }
}

// values[0, n) (in A) written to out as T.
template <class T, class A = acc_t<T>>
void narrow(const A* values, T* out, int64_t n) {
  if constexpr (std::is_same_v<T, A>) {
    if (values != out) std::copy(values, values + n, out);
  } else {
    from_float(values, out, n);
  }
}

// A scratch row of A for results: the output itself for f32 / f64, `buffer` for the half types.
template <class T, class A = acc_t<T>>
A* result_row(T* out, int64_t n, std::vector<float>& buffer) {
  if constexpr (std::is_same_v<T, A>) {
    return out;
  } else {
    if (buffer.size() < size_t(n)) buffer.resize(size_t(n));
    return buffer.data();
  }
}

// A run as the sums below read it: the run itself where E -> A widens inline in a vectorised loop
// (f32, f64, bf16: a shift), widened into `buffer` for f16 (whose conversion does not vectorise inline).
template <class T>
using readable_t = std::conditional_t<std::is_same_v<T, half>, float, T>;

template <class T>
const readable_t<T>* readable(const T* p, int64_t n, std::vector<float>& buffer) {
  if constexpr (std::is_same_v<T, half>) {
    return widen(p, n, buffer);
  } else {
    return p;
  }
}

template <class E, class A = acc_t<E>>
[[gnu::noinline]] A sum_of(const E* x, int64_t n) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += A(x[i]);
  return s;
}

template <class E, class A = acc_t<E>>
[[gnu::noinline]] A sum_of_squares(const E* x, int64_t n, A center) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += (A(x[i]) - center) * (A(x[i]) - center);
  return s;
}

// A backward's two sums over a run: sum_dy += sum(dy), sum_dy_centered += sum(dy * (x - center)).
template <class E, class A = acc_t<E>>
[[gnu::noinline]] void add_backward_sums(const E* x, const E* dy, int64_t n, A center, A& sum_dy, A& sum_dy_centered) {
  A s = 0, t = 0;
#pragma omp simd reduction(+ : s, t)
  for (int64_t i = 0; i < n; ++i) {
    s += A(dy[i]);
    t += A(dy[i]) * (A(x[i]) - center);
  }
  sum_dy += s;
  sum_dy_centered += t;
}

// The weight (or bias) as a row of A (null stays null).
template <class T, class A = acc_t<T>>
std::vector<A> param_row(const void* p, int64_t n) {
  if (p == nullptr) return {};
  std::vector<A> out(static_cast<size_t>(n));
  const T* src = static_cast<const T*>(p);
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = A(src[i]);
  return out;
}

inline void check_positive(const char* op, std::initializer_list<int64_t> sizes) {
  for (int64_t s : sizes) HG_CHECK(s >= 0, "[", op, "] negative size ", s);
}

}  // namespace hg::kernels::cpu::norm
