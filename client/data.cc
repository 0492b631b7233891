#include "client/data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/status.h"

namespace weft::client {

namespace {

// Appends bytes [begin, end) of `in` to `out` as byte-level tokens.
absl::Status AppendTokens(const ReadOnlyFile& in, int64_t begin, int64_t end,
                          AtomicFileWriter* out) {
  constexpr int64_t kPiece = 1 << 20;
  std::vector<unsigned char> bytes;
  std::string tokens;
  for (int64_t at = begin; at < end; at += kPiece) {
    const int64_t n = std::min(kPiece, end - at);
    bytes.resize(static_cast<size_t>(n));
    RETURN_IF_ERROR(in.ReadAt(at, bytes.size(), bytes.data()));
    // Little-endian uint16: the byte, then 0.
    tokens.assign(static_cast<size_t>(2 * n), '\0');
    for (int64_t i = 0; i < n; ++i) tokens[2 * i] = static_cast<char>(bytes[i]);
    RETURN_IF_ERROR(out->Append(tokens));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> TokenizeBytes(const std::string& in_path, const std::string& out_path) {
  ASSIGN_OR_RETURN(TokenSplit split, TokenizeBytesSplit({in_path}, out_path, 0, ""));
  return split.train;
}

absl::StatusOr<TokenSplit> TokenizeBytesSplit(const std::vector<std::string>& in_paths,
                                              const std::string& out_path, double holdout,
                                              const std::string& holdout_path) {
  std::vector<ReadOnlyFile> inputs;
  int64_t total = 0;
  for (const std::string& path : in_paths) {
    ASSIGN_OR_RETURN(ReadOnlyFile in, ReadOnlyFile::Open(path));
    total += in.size();
    inputs.push_back(std::move(in));
  }
  if (holdout > 0) {
    std::error_code ec;
    if (std::filesystem::weakly_canonical(out_path, ec) ==
        std::filesystem::weakly_canonical(holdout_path, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--holdout_out: ", holdout_path, " is OUT itself; the held-out tokens need a file of "
          "their own"));
    }
  }
  TokenSplit split;
  // ceil(f * total), where a product that is an integer but for the last bits of its rounding
  // (0.07 * 100 = 7.000000000000001) counts as that integer.
  const double product = holdout * static_cast<double>(total);
  const double nearest = std::round(product);
  split.holdout = holdout <= 0 ? 0
                  : std::abs(product - nearest) <= 1e-9 * std::max(1.0, product)
                      ? static_cast<int64_t>(nearest)
                      : static_cast<int64_t>(std::ceil(product));
  split.train = total - split.holdout;
  if (holdout > 0 && (split.train < 1 || split.holdout < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--holdout ", holdout, " of ", total, " tokens leaves ", split.train, " to train on and ",
        split.holdout, " held out; each needs at least one"));
  }
  // The two files, each with the header of its count; the inputs run through them in order.
  struct Part {
    std::string path;
    int64_t tokens;
  };
  std::vector<Part> parts = {{out_path, split.train}};
  if (split.holdout > 0) parts.push_back({holdout_path, split.holdout});
  std::vector<AtomicFileWriter> writers;
  for (const Part& part : parts) {
    absl::StatusOr<std::string> header = LlmcHeader(part.tokens);
    if (!header.ok()) return Annotate(header.status(), absl::StrJoin(in_paths, ", "));
    ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Create(part.path));
    RETURN_IF_ERROR(out.Append(*header));
    writers.push_back(std::move(out));
  }
  int64_t at = 0;  // tokens written so far, over both parts
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t size = inputs[i].size();
    // The input's bytes before and after the split point.
    const int64_t to_train = std::clamp<int64_t>(split.train - at, 0, size);
    RETURN_IF_ERROR(
        Annotate(AppendTokens(inputs[i], 0, to_train, &writers[0]), in_paths[i]));
    if (to_train < size) {
      RETURN_IF_ERROR(
          Annotate(AppendTokens(inputs[i], to_train, size, &writers[1]), in_paths[i]));
    }
    at += size;
  }
  for (AtomicFileWriter& w : writers) RETURN_IF_ERROR(w.Commit());
  return split;
}

absl::StatusOr<std::string> FormatTokenFileText(const TokenFile& file, int64_t first) {
  const int64_t n = std::min(first, file.token_count());
  std::vector<int32_t> ids(static_cast<size_t>(n));
  RETURN_IF_ERROR(file.Read(0, n, ids.data()));
  std::string out = absl::StrCat("path: ", file.path(), "\n");
  if (file.format() == TokenFormat::kMegatron) {
    absl::StrAppend(&out, "files: ", file.path(), ".idx, ", file.data_path(), "\n");
  }
  absl::StrAppend(&out, "format: ", TokenFormatName(file.format()), " (", file.token_type(),
                  " tokens)\n", "tokens: ", file.token_count(), "\n", "first ", n, ": ",
                  absl::StrJoin(ids, " "), "\n");
  return out;
}

}  // namespace weft::client
