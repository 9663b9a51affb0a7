#pragma once
// HG_OPTION(Options, T, name, default_value): one option of an options struct, in PyTorch's C++
// style. `Options& name(T)` sets it and returns the struct, so setters chain; `T name() const`
// reads it; the value starts as default_value.
//
//   struct GPTConfig {
//     HG_OPTION(GPTConfig, int64_t, n_layer, 4);
//     HG_OPTION(GPTConfig, int64_t, n_embd, 128);
//   };
//   GPT model(GPTConfig().n_layer(12).n_embd(768));
//
// Setters never validate: the consumer's constructor (or a validate() it calls) checks the whole
// struct at once and names the offending option, because options constrain each other (n_embd %
// n_head) and a half-built chain is not yet wrong. Options structs are built through setters, never
// by aggregate or positional initialisation, so adding an option never shifts a caller's values.
// The macro leaves the access level at private; a struct that adds members after its options opens
// its own `public:`. It lives in kernels/ because every folder (metrics/ too, which sees only
// hg_kernels) may include it; it is a macro and nothing else.
#include <utility>

#define HG_OPTION(Options, T, name, default_value) \
 public:                                           \
  Options& name(T value) {                         \
    name##_ = std::move(value);                    \
    return *this;                                  \
  }                                                \
  T name() const { return name##_; }               \
                                                   \
 private:                                          \
  T name##_ = default_value
