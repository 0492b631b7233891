#include "client/data.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/status.h"

namespace weft::client {

absl::StatusOr<int64_t> TokenizeBytes(const std::string& in_path, const std::string& out_path) {
  ASSIGN_OR_RETURN(ReadOnlyFile in, ReadOnlyFile::Open(in_path));
  const int64_t count = in.size();
  absl::StatusOr<std::string> header = LlmcHeader(count);
  if (!header.ok()) return Annotate(header.status(), in_path);
  ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Create(out_path));
  RETURN_IF_ERROR(out.Append(*header));
  constexpr int64_t kPiece = 1 << 20;
  std::vector<unsigned char> bytes;
  std::string tokens;
  for (int64_t at = 0; at < count; at += kPiece) {
    const int64_t n = std::min(kPiece, count - at);
    bytes.resize(static_cast<size_t>(n));
    RETURN_IF_ERROR(in.ReadAt(at, bytes.size(), bytes.data()));
    // Little-endian uint16: the byte, then 0.
    tokens.assign(static_cast<size_t>(2 * n), '\0');
    for (int64_t i = 0; i < n; ++i) tokens[2 * i] = static_cast<char>(bytes[i]);
    RETURN_IF_ERROR(out.Append(tokens));
  }
  RETURN_IF_ERROR(out.Commit());
  return count;
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
