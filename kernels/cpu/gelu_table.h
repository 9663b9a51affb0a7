#pragma once
// GELU of bf16 inputs by table lookup. bf16 has only 2^16 values, so the unary GELU ops (tanh and
// erf forms) can look their answer up instead of evaluating tanh / erf per element (about 27 vector
// ops per 16 elements forward, 33 backward: the reason a bf16 GELU could not run faster than the f32
// one). The tables are filled, on first use, by the AVX-512 kernel itself
// (gelu_avx512.h over all 2^16 bit patterns), so a lookup gives exactly the bits evaluating gives:
//   forward table:  y(b)     = T(gelu(float(b)))   2^16 x 2 bytes = 128 KiB per (T, form)
//   slope table:    s(b)     = gelu'(float(b))     2^16 x 4 bytes = 256 KiB per (T, form), float
// and the backward is dx = T(dy * s(x)) with the same single float product and rounding the
// evaluating loop makes. (ggml looks its f16 GELU up the same way.) Activations cluster within a few
// units of 0, so the bf16 entries a tensor touches (7 mantissa bits: ~2.5k values in [-6, 6]) are a
// few KiB and stay in L1. f16 is not looked up: its 10 mantissa bits make the same range ~20k
// entries (40 KiB of outputs, 80 KiB of slopes), past a 32 KiB L1, and on Zen 4 the lookup measured
// no faster forward and 10-20% slower backward than evaluating (docs/cpu_kernels.md); the templates
// would take it (instantiated for bfloat16 only).
//
// The loops: forward is a scalar lookup per element (two loads and a store: bound by the load/store
// ports, not by arithmetic); backward gathers 64 slopes at a time into a stack row with scalar loads
// and multiplies 16 lanes at a time (vpgatherdd measured slower than scalar loads on Zen 4 here).
// Used by elementwise.cpp's GELU when vector_math_active() is avx512 (the tables need its loops);
// callers split the work over threads. Thread-safe: each table is built once (a function-local static).
#include <cstdint>

#include "kernels/half.h"

namespace hg::kernels::cpu {

// y[i] = GELU(x[i]) (tanh form, or erf form when erf), T = bfloat16.
template <class T>
void gelu_forward_lookup(bool erf, const T* x, T* y, int64_t n);
// dx[i] = T(dy[i] * GELU'(x[i])).
template <class T>
void gelu_backward_lookup(bool erf, const T* x, const T* dy, T* dx, int64_t n);

// Whether elementwise.cpp's bf16 GELU looks up (default) or evaluates; tests and bench_ops switch it
// to hold the two against each other. Not thread-safe against running kernels.
bool gelu_lookup_enabled();
void gelu_lookup_enable(bool enabled);

}  // namespace hg::kernels::cpu
