#pragma once
// CHECK_ERROR(expr, parts...): expr must throw hg::Error whose message contains every part (each a
// const char* that outlives the check). The message is printed when a part is missing.
#include <doctest/doctest.h>

#include <string>

#include "kernels/error.h"

#define CHECK_ERROR(expr, ...)                                                             \
  do {                                                                                     \
    std::string message;                                                                   \
    try {                                                                                  \
      (void)(expr);                                                                        \
    } catch (const ::hg::Error& e) {                                                       \
      message = e.what();                                                                  \
    }                                                                                      \
    INFO("message: ", message);                                                            \
    CHECK_FALSE(message.empty());                                                          \
    for (const char* part : {__VA_ARGS__}) CHECK(message.find(part) != std::string::npos); \
  } while (0)
