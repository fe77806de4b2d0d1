// Minimal checks for the C++ tests: active in every build type (unlike assert), they
// print file:line and the failed expression to stderr and exit the program with status 1.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>

namespace th_check {

[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
  std::cout.flush();
  std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::exit(1);
}

// Renders a value for a failure message when it can be streamed.
template <class T>
std::string show(const T& v) {
  if constexpr (requires(std::ostream& os, const T& x) { os << x; }) {
    std::ostringstream os;
    os << v;
    return os.str();
  } else {
    return "<unprintable>";
  }
}

}  // namespace th_check

// CHECK(cond): cond must be true.
#define CHECK(expr)                                             \
  do {                                                          \
    if (!(expr)) th_check::fail(__FILE__, __LINE__, #expr);     \
  } while (0)

// CHECK_EQ(a, b): a == b; prints both values when they can be streamed.
#define CHECK_EQ(a, b)                                                                      \
  do {                                                                                      \
    const auto& th_check_a_ = (a);                                                          \
    const auto& th_check_b_ = (b);                                                          \
    if (!(th_check_a_ == th_check_b_))                                                      \
      th_check::fail(__FILE__, __LINE__,                                                    \
                     std::string(#a " == " #b " (") + th_check::show(th_check_a_) + " vs " + \
                         th_check::show(th_check_b_) + ")");                                \
  } while (0)

// CHECK_THROWS(stmt, Exception): stmt must throw Exception (or a type derived from it).
#define CHECK_THROWS(stmt, Exception)                                                  \
  do {                                                                                 \
    bool th_check_caught_ = false;                                                     \
    try {                                                                              \
      stmt;                                                                            \
    } catch (const Exception&) {                                                       \
      th_check_caught_ = true;                                                         \
    } catch (const std::exception& e) {                                                \
      th_check::fail(__FILE__, __LINE__,                                               \
                     std::string(#stmt " threw another exception: ") + e.what());      \
    } catch (...) {                                                                    \
      th_check::fail(__FILE__, __LINE__, #stmt " threw a non-std exception");          \
    }                                                                                  \
    if (!th_check_caught_) th_check::fail(__FILE__, __LINE__, #stmt " did not throw " #Exception); \
  } while (0)
