#pragma once
// A test's random generator, reproducible: seeded from the environment variable HG_TEST_SEED when it is
// set, else from std::random_device; the seed is reported with MESSAGE, so a failing run can be repeated
// with HG_TEST_SEED=<seed>.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <random>

namespace hg::testing {

inline std::mt19937 seeded_rng() {
  const char* env = std::getenv("HG_TEST_SEED");
  const unsigned seed =
      env != nullptr && *env != '\0' ? unsigned(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  MESSAGE("random seed ", seed, " (repeat with HG_TEST_SEED=", seed, ")");
  return std::mt19937(seed);
}

// One seed for the whole test binary, from HG_TEST_SEED when it is set, else from std::random_device (the
// caller reports it with MESSAGE): the same value at every call, so fixtures built apart draw alike.
inline uint32_t fresh_seed() {
  static const uint32_t seed = [] {
    const char* env = std::getenv("HG_TEST_SEED");
    return env != nullptr && *env != '\0' ? uint32_t(std::strtoul(env, nullptr, 10)) : uint32_t(std::random_device{}());
  }();
  return seed;
}

}  // namespace hg::testing
