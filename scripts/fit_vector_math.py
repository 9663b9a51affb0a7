#!/usr/bin/env python3
"""Fits the polynomial coefficients of kernels/cpu/simd_math_avx512.h (tooling only: never run by the
build or the tests). Needs numpy and mpmath, e.g. in a venv: python3 -m venv .venv && .venv/bin/pip
install numpy mpmath && .venv/bin/python scripts/fit_vector_math.py

Each fit is a weighted least-squares polynomial on 2000 Chebyshev nodes, reweighted 60 times by the
error (Lawson's iteration) so it approaches the minimax polynomial of the weighted error; references
are mpmath at 40 digits. Prints the coefficients (lowest degree first, 9 significant digits, as pasted
into the header) and the max weighted error of the fit in double (the float evaluation adds its own
rounding; test_vector_math measures the end result in ulps)."""
import mpmath as mp
import numpy as np

mp.mp.dps = 40


def fit(f, lo, hi, deg, weight, nodes=2000):
    k = np.arange(nodes)
    x = 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * (k + 0.5) / nodes)
    y = np.array([float(f(mp.mpf(float(v)))) for v in x])
    w = np.array([weight(v) for v in x])
    a = np.vander(x, deg + 1, increasing=True)
    lawson = np.ones(nodes)
    for _ in range(60):
        sw = np.sqrt(lawson) * w
        c, *_ = np.linalg.lstsq(a * sw[:, None], y * sw, rcond=None)
        err = np.abs((a @ c - y) * w)
        lawson = lawson * err
        lawson /= lawson.sum()
    return c, err.max()


def show(name, fitted):
    c, e = fitted
    print(f"{name}: {{{', '.join('%.9gf' % v for v in c)}}}  max weighted error {e:.3g}")


ln2 = float(mp.log(2))
# exp: e^r = 1 + r + r^2 P5(r) on |r| <= ln2 / 2, relative error of e^r.
show("exp P5", fit(lambda r: (mp.exp(r) - 1 - r) / (r * r) if r != 0 else mp.mpf(0.5), -ln2 / 2, ln2 / 2, 5,
                   lambda r: r * r / np.exp(r)))
# tanh: tanh(a) = a + a z P4(z), z = a^2 <= 0.625^2, error of a z P4 relative to a.
show("tanh P4", fit(lambda z: (mp.tanh(mp.sqrt(z)) - mp.sqrt(z)) / mp.sqrt(z) ** 3 if z > 0 else mp.mpf(-1) / 3,
                    0, 0.625 ** 2, 4, lambda z: z))
# erf: erf(a) = a P6(z), z = a^2 <= 1 (the header stores P6 - 1 in its constant term).
show("erf P6", fit(lambda z: mp.erf(mp.sqrt(z)) / mp.sqrt(z) if z > 0 else 2 / mp.sqrt(mp.pi), 0, 1, 6,
                   lambda z: 1.0))
# erfc: erfc(a) = exp(-a^2) R8(t), t = 1/a, relative error, on a in [1, 4] and [4, 10.5].
erfcx = lambda t: mp.erfc(1 / t) * mp.exp(1 / t ** 2)
for lo, hi in ((0.25, 1.0), (1 / 10.5, 0.25)):
    show(f"erfc R8 on t in [{lo:.4g}, {hi:.4g}]", fit(erfcx, lo, hi, 8, lambda t: 1 / float(erfcx(mp.mpf(t)))))
