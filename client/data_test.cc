// `weftctl data` on files written here: TokenizeBytes and FormatTokenFileText, then the binary as
// a process (exit codes, stdout, stderr, the bytes it wrote).
#include "client/data.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "client/weftctl_runner.h"
#include "common/testing_files.h"
#include "common/token_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft::client {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// llm.c's layout, spelled out: 256 little-endian int32 (magic, version, count, zeros), then each
// byte as a little-endian uint16.
std::string ExpectedLlmc(const std::string& text) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(text.size());
  std::string out(reinterpret_cast<const char*>(header.data()), 1024);
  for (unsigned char c : text) {
    out += static_cast<char>(c);
    out += '\0';
  }
  return out;
}

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir();
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

// Every byte value, high bytes included (they must not sign-extend).
const std::string kText = std::string("Hello\n") + "\xff\x80" + std::string(1, '\0') + "z";

TEST_F(DataTest, TokenizeBytesWritesAnLlmcFileReadBackAsTheBytes) {
  WriteAll(Path("in.txt"), kText);
  absl::StatusOr<int64_t> n = TokenizeBytes(Path("in.txt"), Path("out.bin"));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 10);
  EXPECT_EQ(ReadAll(Path("out.bin")), ExpectedLlmc(kText));
  absl::StatusOr<TokenFile> file = TokenFile::Open(Path("out.bin"), TokenFormat::kLlmc);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<int32_t> ids(10);
  ASSERT_TRUE(file->Read(0, 10, ids.data()).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{72, 101, 108, 108, 111, 10, 255, 128, 0, 122}));
  absl::StatusOr<std::string> text = FormatTokenFileText(*file, 4);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "path: " + Path("out.bin") +
                       "\nformat: llmc (uint16 tokens)\ntokens: 10\nfirst 4: 72 101 108 108\n");

  // More than one read piece (1 MiB): the count and the last bytes.
  std::string big(3 * 1000 * 1000 + 7, 'a');
  big.back() = 'q';
  WriteAll(Path("big.txt"), big);
  n = TokenizeBytes(Path("big.txt"), Path("big.bin"));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, static_cast<int64_t>(big.size()));
  file = TokenFile::Open(Path("big.bin"), TokenFormat::kLlmc);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE(file->Read(*n - 2, 2, ids.data()).ok());
  EXPECT_EQ(ids[0], 'a');
  EXPECT_EQ(ids[1], 'q');

  // Only the two files are left: no temporary file.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("in.txt", "out.bin", "big.txt", "big.bin"));

  absl::StatusOr<int64_t> missing = TokenizeBytes(Path("nope.txt"), Path("x.bin"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.txt: no such file"));
  EXPECT_FALSE(fs::exists(Path("x.bin")));
}

// llm.c's header counts tokens in an int32: a larger input is an error naming it, checked before
// anything is written (a sparse file, so nothing of its 2 GiB is on disk).
TEST_F(DataTest, TokenizeBytesRejectsInputsPastTheHeadersCount) {
  const std::string in = Path("huge.txt");
  const int fd = ::open(in.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const bool sized = ::ftruncate(fd, int64_t{1} << 31) == 0;
  ::close(fd);
  if (!sized) GTEST_SKIP() << "no sparse 2 GiB file here";
  absl::StatusOr<int64_t> n = TokenizeBytes(in, Path("huge.bin"));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(n.status().message(),
            in + ": 2147483648 tokens do not fit llm.c's header (an int32 count, at most "
                 "2147483647)");
  EXPECT_FALSE(fs::exists(Path("huge.bin")));
  fs::remove(in);
}

// A failed write leaves nothing behind: no OUT, no temporary file.
TEST_F(DataTest, TokenizeBytesIntoAMissingFolderLeavesNothing) {
  WriteAll(Path("in.txt"), kText);
  absl::StatusOr<int64_t> n = TokenizeBytes(Path("in.txt"), Path("no/such/dir/out.bin"));
  EXPECT_FALSE(n.ok());
  EXPECT_THAT(std::string(n.status().message()), HasSubstr(Path("no/such/dir/out.bin")));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
  EXPECT_THAT(names, ::testing::ElementsAre("in.txt"));
}

// Megatron's pair shows both files; its sequences read back as one stream.
TEST_F(DataTest, InspectMegatron) {
  const std::vector<uint16_t> tokens = {7, 8, 9, 10, 11};
  WriteAll(Path("m.bin"), std::string(reinterpret_cast<const char*>(tokens.data()), 10));
  std::string idx("MMIDIDX\0\0", 9);
  auto put = [&idx](const auto& v) { idx.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(uint64_t{1});
  put(uint8_t{8});  // uint16
  put(uint64_t{2});  // sequences
  put(uint64_t{3});  // document indices: 2 documents
  for (int32_t length : {2, 3}) put(length);
  for (int64_t pointer : {0, 4}) put(pointer);
  for (int64_t doc : {0, 1, 2}) put(doc);
  WriteAll(Path("m.idx"), idx);
  absl::StatusOr<TokenFile> file = TokenFile::Open(Path("m"), TokenFormat::kMegatron);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::string> text = FormatTokenFileText(*file);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "path: " + Path("m") + "\nfiles: " + Path("m") + ".idx, " + Path("m.bin") +
                       "\nformat: megatron (uint16 tokens)\ntokens: 5\nfirst 5: 7 8 9 10 11\n");
}

TEST_F(DataTest, WeftctlTokenizeAndInspect) {
  WriteAll(Path("in.txt"), kText);
  WeftctlResult r = RunWeftctl("data tokenize --bytes " + Path("in.txt") + " " + Path("out.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "wrote " + Path("out.bin") + ": 10 tokens (llmc, byte-level, vocab 256) from " +
                       Path("in.txt") + "\n");
  EXPECT_EQ(ReadAll(Path("out.bin")), ExpectedLlmc(kText));

  r = RunWeftctl("data inspect " + Path("out.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("format: llmc (uint16 tokens)\ntokens: 10\n"
                               "first 10: 72 101 108 108 111 10 255 128 0 122\n"));
  // The same bytes read as nanoGPT's raw uint16: the header's int32s are tokens too.
  r = RunWeftctl("data inspect --format raw_u16 " + Path("out.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("format: raw_u16 (uint16 tokens)\ntokens: 522\n"));
}

TEST_F(DataTest, WeftctlErrors) {
  WriteAll(Path("in.txt"), "abc");
  struct Case {
    std::string args;
    int exit_code;
    std::string err;
  };
  const std::vector<Case> cases = {
      {"data tokenize " + Path("in.txt") + " " + Path("o.bin"), 2, "'data tokenize' needs --bytes"},
      {"data tokenize --bytes " + Path("in.txt"), 2, "'data tokenize' takes IN OUT.bin"},
      {"data inspect --bytes " + Path("in.txt"), 2, "--bytes applies to 'data tokenize' only"},
      {"data frob x", 2, "unknown 'data' command 'frob'; known: tokenize, inspect"},
      {"list --format llmc", 2, "--format does not apply to 'list'"},
      {"data tokenize --bytes " + Path("nope.txt") + " " + Path("o.bin"), 1,
       Path("nope.txt") + ": no such file"},
      {"data inspect --format csv " + Path("in.txt"), 1,
       "--format: unknown format \"csv\"; known: llmc, raw_u16, megatron"},
      {"data inspect " + Path("in.txt"), 1,
       Path("in.txt") + ": holds 3 bytes, shorter than llm.c's 1024-byte header"},
      {"data inspect --format raw_u16 " + Path("in.txt"), 1, "not a whole number of uint16"},
  };
  for (const Case& c : cases) {
    const WeftctlResult r = RunWeftctl(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.err)) << c.args;
  }
  EXPECT_FALSE(fs::exists(Path("o.bin")));
  const WeftctlResult help = RunWeftctl("help");
  EXPECT_THAT(help.out, HasSubstr("data tokenize --bytes IN OUT.bin"));
  EXPECT_THAT(help.out, HasSubstr("data inspect FILE [--format F]"));
}

}  // namespace
}  // namespace weft::client

int main(int argc, char** argv) { return weft::client::RunWeftctlTests(argc, argv); }
