// Files in tests: paths under the test's private TEST_TMPDIR, whole-file reads and writes
// through iostreams (independent of common/file_io, which many of these tests check).
#ifndef WEFT_COMMON_TESTING_FILES_H_
#define WEFT_COMMON_TESTING_FILES_H_

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace weft {

// $TEST_TMPDIR, or /tmp outside Bazel.
inline std::string TestTmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// TestTmpDir()/name
inline std::string TempPath(const std::string& name) { return TestTmpDir() + "/" + name; }

// The file's bytes; empty when it cannot be read.
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Creates or truncates path and writes bytes.
inline void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace weft

#endif  // WEFT_COMMON_TESTING_FILES_H_
