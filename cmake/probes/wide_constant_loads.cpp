// A probe of a GCC 12.2 wrong-code bug (Debian 12's compiler) with AVX-512 targets: a constant array
// whose leading elements repeat and whose tail is zero, copied with one 256- or 512-bit load (a
// std::vector built from an initializer list), is folded by value numbering (-ftree-fre) as if every
// element were the first: std::vector<double>{1, 1, 0, 0} reads back 1 1 1 1. Seen on a Cooper Lake VM
// with -march=native; -fno-tree-fre, -mno-avx512f or loads no wider than 128 bits
// (-mmove-max=128 -mstore-max=128) avoid it. cmake/WideConstantLoads.cmake compiles this with the
// project's flags and prints what it reads; the expected line is in that file.
#include <cstdint>
#include <cstdio>
#include <vector>

template <class T>
void show(const std::vector<T>& values) {
  for (T v : values) std::printf("%g ", double(v));
  std::printf("| ");
}

// The bug depends on the surrounding code: these are the two programs that showed it, as they were.
__attribute__((noinline)) void first() {
  show(std::vector<float>{2, 2, 0, 0});
  show(std::vector<int>{5, 5, 0, 0});
  show(std::vector<double>{1, 1, 0, 0});
  show(std::vector<float>{1, 1, 1, 0, 0, 0, 0, 0});
  show(std::vector<double>{0, 0, 3, 3});
  show(std::vector<int64_t>{7, 7, 7, 0, 0, 0, 0, 0});
  show(std::vector<double>{1, 1, 1, 1, 1, 0, 0, 0});
  show(std::vector<float>{4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0});
}

__attribute__((noinline)) void second() {
  std::vector<double> a{2, 2, 0, 0};
  std::vector<float> b{1, 1, 1, 1, 0, 0, 0, 0};
  std::vector<long> c{3, 3, 0, 0};
  for (double v : a) std::printf("%g ", v);
  for (float v : b) std::printf("%g ", v);
  for (long v : c) std::printf("%ld ", v);
}

int main() {
  first();
  second();
  std::printf("\n");
  return 0;
}
