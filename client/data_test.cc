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

// The token file's tokens as text (byte-level tokens are the bytes), read back through TokenFile.
std::string ReadTokens(const std::string& path) {
  absl::StatusOr<TokenFile> file = TokenFile::Open(path, TokenFormat::kLlmc);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return "<unreadable>";
  std::vector<int32_t> ids(static_cast<size_t>(file->token_count()));
  EXPECT_TRUE(file->Read(0, file->token_count(), ids.data()).ok());
  std::string text;
  for (int32_t id : ids) text += static_cast<char>(id);
  return text;
}

// The names in the folder.
std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  return names;
}

// Several inputs are tokenized one after another in the order given (an empty one adds
// nothing), into one llm.c file; without a holdout no second file is written.
TEST_F(DataTest, TokenizeBytesSplitConcatenatesTheInputsInOrder) {
  WriteAll(Path("a.txt"), "abc");
  WriteAll(Path("empty.txt"), "");
  WriteAll(Path("b.txt"), kText);
  WriteAll(Path("c.txt"), "de");
  absl::StatusOr<TokenSplit> split = TokenizeBytesSplit(
      {Path("c.txt"), Path("a.txt"), Path("empty.txt"), Path("b.txt")}, Path("out.bin"), 0, "");
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->train, 15);
  EXPECT_EQ(split->holdout, 0);
  EXPECT_EQ(ReadAll(Path("out.bin")), ExpectedLlmc("deabc" + kText));
  EXPECT_EQ(ReadTokens(Path("out.bin")), "deabc" + kText);
  EXPECT_THAT(Names(dir_), ::testing::UnorderedElementsAre("a.txt", "empty.txt", "b.txt",
                                                           "c.txt", "out.bin"));
}

// With a holdout fraction F the last ceil(F * total) tokens go to the held-out file and the ones
// before to OUT, cut exactly there: inside the first input, inside a later one, or at the
// boundary between two.
TEST_F(DataTest, TokenizeBytesSplitHoldsOutTheLastFractionCutExactly) {
  WriteAll(Path("1.txt"), "abcd");
  WriteAll(Path("2.txt"), "efghij");
  const std::string all = "abcdefghij";
  struct Case {
    double holdout;
    int64_t held_out;  // ceil(holdout * 10)
    std::string where;
  };
  for (const Case& c : std::vector<Case>{{0.25, 3, "inside the second input"},
                                         {0.6, 6, "at the boundary"},
                                         {0.85, 9, "inside the first input"},
                                         {0.05, 1, "the last token alone"}}) {
    const std::string out = Path("train.bin"), val = Path("val.bin");
    absl::StatusOr<TokenSplit> split =
        TokenizeBytesSplit({Path("1.txt"), Path("2.txt")}, out, c.holdout, val);
    ASSERT_TRUE(split.ok()) << c.where << ": " << split.status();
    EXPECT_EQ(split->holdout, c.held_out) << c.where;
    EXPECT_EQ(split->train, 10 - c.held_out) << c.where;
    const std::string train_text = all.substr(0, 10 - c.held_out);
    const std::string val_text = all.substr(10 - c.held_out);
    EXPECT_EQ(ReadTokens(out), train_text) << c.where;
    EXPECT_EQ(ReadTokens(val), val_text) << c.where;
    // Each file whole, its header counting its own tokens.
    EXPECT_EQ(ReadAll(out), ExpectedLlmc(train_text)) << c.where;
    EXPECT_EQ(ReadAll(val), ExpectedLlmc(val_text)) << c.where;
  }
  // More than one read piece (1 MiB) on each side of a cut inside one input.
  std::string big(3 * 1000 * 1000, 'a');
  big[2 * 1000 * 1000 - 1] = 'y';  // the last token to train on
  big[2 * 1000 * 1000] = 'z';      // the first held out
  WriteAll(Path("big.txt"), big);
  absl::StatusOr<TokenSplit> split = TokenizeBytesSplit(
      {Path("1.txt"), Path("big.txt")}, Path("big_train.bin"), 0.25, Path("big_val.bin"));
  ASSERT_TRUE(split.ok()) << split.status();
  const int64_t total = 4 + static_cast<int64_t>(big.size());
  EXPECT_EQ(split->holdout, 750001);  // ceil(0.25 * 3000004)
  EXPECT_EQ(split->train, total - 750001);
  absl::StatusOr<TokenFile> train = TokenFile::Open(Path("big_train.bin"), TokenFormat::kLlmc);
  absl::StatusOr<TokenFile> val = TokenFile::Open(Path("big_val.bin"), TokenFormat::kLlmc);
  ASSERT_TRUE(train.ok() && val.ok());
  EXPECT_EQ(train->token_count(), split->train);
  EXPECT_EQ(val->token_count(), split->holdout);
  // big[i] is token 4 + i of the whole; the cut is at token split->train.
  std::vector<int32_t> ids(4);
  ASSERT_TRUE(train->Read(0, 4, ids.data()).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 'b', 'c', 'd'}));
  ASSERT_TRUE(train->Read(split->train - 1, 1, ids.data()).ok());
  EXPECT_EQ(ids[0], big[split->train - 1 - 4]);
  ASSERT_TRUE(val->Read(0, 1, ids.data()).ok());
  EXPECT_EQ(ids[0], big[split->train - 4]);
  ASSERT_TRUE(val->Read(split->holdout - 1, 1, ids.data()).ok());
  EXPECT_EQ(ids[0], 'a');
  std::string whole = ReadTokens(Path("big_train.bin")) + ReadTokens(Path("big_val.bin"));
  EXPECT_TRUE(whole == "abcd" + big) << "the two parts are not the inputs, in order";
}

// A holdout that leaves either part without a token is INVALID_ARGUMENT, and writes nothing.
TEST_F(DataTest, TokenizeBytesSplitRefusesAnEmptyPart) {
  WriteAll(Path("one.txt"), "x");
  WriteAll(Path("ab.txt"), "ab");
  WriteAll(Path("empty.txt"), "");
  struct Case {
    std::vector<std::string> inputs;
    double holdout;
  };
  for (const Case& c : std::vector<Case>{
           {{Path("one.txt")}, 0.5},     // ceil(0.5) = 1: all of it held out
           {{Path("ab.txt")}, 0.9},      // ceil(1.8) = 2: all of it held out
           {{Path("empty.txt")}, 0.5}}) {  // nothing to hold out, nor to train on
    absl::StatusOr<TokenSplit> split =
        TokenizeBytesSplit(c.inputs, Path("out.bin"), c.holdout, Path("val.bin"));
    EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument)
        << c.inputs[0] << " " << c.holdout << ": " << split.status();
    EXPECT_THAT(std::string(split.status().message()), HasSubstr("each needs at least one"));
  }
  EXPECT_THAT(Names(dir_), ::testing::UnorderedElementsAre("one.txt", "ab.txt", "empty.txt"));
  // 0.4 of 2 tokens holds out one, leaving one: that is allowed.
  absl::StatusOr<TokenSplit> split =
      TokenizeBytesSplit({Path("ab.txt")}, Path("out.bin"), 0.4, Path("val.bin"));
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(ReadTokens(Path("out.bin")), "a");
  EXPECT_EQ(ReadTokens(Path("val.bin")), "b");
}

// A missing input (any of them) is NOT_FOUND naming it, and neither output file is created, nor
// a temporary file left; nor when the held-out file cannot be written.
TEST_F(DataTest, TokenizeBytesSplitFailingLeavesNeitherFile) {
  WriteAll(Path("a.txt"), "abcdef");
  WriteAll(Path("b.txt"), "ghij");
  for (const std::vector<std::string>& inputs : std::vector<std::vector<std::string>>{
           {Path("nope.txt"), Path("a.txt")}, {Path("a.txt"), Path("b.txt"), Path("nope.txt")}}) {
    absl::StatusOr<TokenSplit> split =
        TokenizeBytesSplit(inputs, Path("out.bin"), 0.5, Path("val.bin"));
    EXPECT_EQ(split.status().code(), absl::StatusCode::kNotFound) << split.status();
    EXPECT_THAT(std::string(split.status().message()), HasSubstr("nope.txt: no such file"));
    split = TokenizeBytesSplit(inputs, Path("out.bin"), 0, "");
    EXPECT_EQ(split.status().code(), absl::StatusCode::kNotFound) << split.status();
  }
  absl::StatusOr<TokenSplit> split = TokenizeBytesSplit(
      {Path("a.txt"), Path("b.txt")}, Path("out.bin"), 0.5, Path("no/such/dir/val.bin"));
  EXPECT_FALSE(split.ok());
  EXPECT_THAT(std::string(split.status().message()), HasSubstr(Path("no/such/dir/val.bin")));
  EXPECT_THAT(Names(dir_), ::testing::UnorderedElementsAre("a.txt", "b.txt"));
}

// weftctl: several inputs and a holdout; it says what went where.
TEST_F(DataTest, WeftctlTokenizeSeveralInputsWithAHoldout) {
  WriteAll(Path("a.txt"), "abcdef");
  WriteAll(Path("b.txt"), "ghij");
  WeftctlResult r = RunWeftctl("data tokenize --bytes " + Path("a.txt") + " " + Path("b.txt") +
                               " " + Path("out.bin") + " --holdout 0.25 --holdout_out " +
                               Path("val.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "wrote " + Path("out.bin") +
                       ": 7 tokens (llmc, byte-level, vocab 256) from 2 files\nwrote " +
                       Path("val.bin") + ": 3 tokens held out (the last 0.25 of them)\n");
  EXPECT_EQ(ReadTokens(Path("out.bin")), "abcdefg");
  EXPECT_EQ(ReadTokens(Path("val.bin")), "hij");

  r = RunWeftctl("data tokenize --bytes " + Path("a.txt") + " " + Path("nope.txt") + " " +
                 Path("o.bin") + " --holdout 0.5 --holdout_out " + Path("v.bin"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(Path("nope.txt") + ": no such file"));
  EXPECT_FALSE(fs::exists(Path("o.bin")));
  EXPECT_FALSE(fs::exists(Path("v.bin")));
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
      {"data tokenize --bytes " + Path("in.txt"), 2, "'data tokenize' takes IN... OUT.bin"},
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
  EXPECT_THAT(help.out, HasSubstr("data tokenize --bytes IN..."));
  EXPECT_THAT(help.out, HasSubstr("--holdout_out VAL.bin]"));
  EXPECT_THAT(help.out, HasSubstr("data inspect FILE [--format F]"));
}

// The held-out count is ceil(f * total) of the exact product: 0.07 of 100 tokens is 7, though
// 0.07 * 100 is 7.000000000000001 in double; and OUT cannot be its own held-out file.
TEST_F(DataTest, HoldoutCountIsExactAndNeedsItsOwnFile) {
  const std::string in = Path("hundred.txt");
  std::ofstream(in, std::ios::binary) << std::string(100, 'x');
  for (const auto& [fraction, held] : std::vector<std::pair<double, int64_t>>{
           {0.07, 7}, {0.14, 14}, {0.28, 28}, {0.071, 8}, {0.5, 50}}) {
    SCOPED_TRACE(fraction);
    absl::StatusOr<TokenSplit> split =
        TokenizeBytesSplit({in}, Path("train.bin"), fraction, Path("val.bin"));
    ASSERT_TRUE(split.ok()) << split.status();
    EXPECT_EQ(split->holdout, held);
    EXPECT_EQ(split->train, 100 - held);
  }
  absl::StatusOr<TokenSplit> same =
      TokenizeBytesSplit({in}, Path("same.bin"), 0.3, Path("./same.bin"));
  EXPECT_EQ(same.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(same.status().message()), HasSubstr("is OUT itself"));
  EXPECT_FALSE(fs::exists(Path("same.bin")));
}

}  // namespace
}  // namespace weft::client

int main(int argc, char** argv) { return weft::client::RunWeftctlTests(argc, argv); }
