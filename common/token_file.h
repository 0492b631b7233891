// Token datasets on disk (data.source: tokens): one token stream, read as int32 ids with pread,
// never loaded whole. Three formats:
//   llmc:     llm.c's shard: a header of 256 little-endian int32 ([0] magic, [1] version,
//             [2] token count), then the tokens: magic 20240520 / version 1 for uint16 tokens
//             (GPT-2), 20240801 / version 7 for uint32 tokens (Llama-3).
//   raw_u16:  nanoGPT's train.bin: uint16 tokens, no header.
//   megatron: Megatron-LM's indexed dataset, `path` a prefix: path.idx (the index) and path.bin
//             (the tokens); its sequences, read in order, are the stream (documents are runs of
//             consecutive sequences, so this is the documents concatenated).
// Open validates everything it can without reading the tokens (header, sizes, the index's
// pointers inside .bin); Read checks each token it converts (negative or beyond int32 is an
// error naming the file and the token's position in the stream). Errors name the file, e.g.
// "train.bin: header says 1000 tokens but the file holds 998".
//
// E.g.
//   ASSIGN_OR_RETURN(TokenFormat format, ParseTokenFormat(data.format()));  // "" is llmc
//   ASSIGN_OR_RETURN(TokenFile tokens, TokenFile::Open("train.bin", format));
//   std::vector<int32_t> ids(33);
//   RETURN_IF_ERROR(tokens.Read(/*first=*/0, ids.size(), ids.data()));
#ifndef WEFT_COMMON_TOKEN_FILE_H_
#define WEFT_COMMON_TOKEN_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"

namespace weft {

enum class TokenFormat { kLlmc, kRawU16, kMegatron };

// "llmc", "raw_u16", "megatron".
absl::string_view TokenFormatName(TokenFormat format);
// One of TokenFormatName's names, or "" for the default (llmc). Anything else is
// INVALID_ARGUMENT 'unknown format "x"; known: llmc, raw_u16, megatron'.
absl::StatusOr<TokenFormat> ParseTokenFormat(absl::string_view name);

// llm.c's header (magic, version, token count) and the element its tokens are.
inline constexpr int32_t kLlmcMagicU16 = 20240520;
inline constexpr int32_t kLlmcVersionU16 = 1;
inline constexpr int32_t kLlmcMagicU32 = 20240801;
inline constexpr int32_t kLlmcVersionU32 = 7;
inline constexpr int64_t kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;

// The 1024-byte header of an llm.c file of `token_count` uint16 tokens (magic 20240520, version
// 1), or of uint32 tokens with u32 (20240801, version 7). INVALID_ARGUMENT when the count does
// not fit the header's int32.
absl::StatusOr<std::string> LlmcHeader(int64_t token_count, bool u32 = false);

// An opened, validated token file. Copies share the descriptors (Read is const and may run
// concurrently from several threads).
class TokenFile {
 public:
  static absl::StatusOr<TokenFile> Open(const std::string& path, TokenFormat format);

  // As given to Open: the file, or the megatron prefix.
  const std::string& path() const { return path_; }
  // The file holding the tokens (path.bin for megatron), for messages.
  const std::string& data_path() const { return data_.path(); }
  TokenFormat format() const { return format_; }
  int64_t token_count() const { return token_count_; }
  // Bytes per token as stored: 1, 2, 4 or 8.
  int token_bytes() const { return token_bytes_; }
  // The stored element type, for messages: "uint16", "uint32", "int64", ...
  absl::string_view token_type() const { return token_type_; }

  // Tokens [first, first + count) of the stream as int32 into out. A range outside the stream
  // is OUT_OF_RANGE; a negative token or one beyond int32 is INVALID_ARGUMENT
  // "<file>: token at position P is V, outside int32 ids".
  absl::Status Read(int64_t first, int64_t count, int32_t* out) const;

 private:
  // Where the stream lies in the data file: one run of bytes, or (a megatron index whose
  // sequences are not back to back) one run per sequence.
  struct Runs {
    std::vector<int64_t> starts;   // token index of each sequence's first token; + the end
    std::vector<int64_t> offsets;  // byte offset of each sequence in the data file
  };

  TokenFile(std::string path, TokenFormat format, ReadOnlyFile data)
      : path_(std::move(path)), format_(format), data_(std::move(data)) {}

  // Open, by format: each opens its files and validates them.
  static absl::StatusOr<TokenFile> OpenRawU16(const std::string& path);
  static absl::StatusOr<TokenFile> OpenLlmc(const std::string& path);
  static absl::StatusOr<TokenFile> OpenMegatron(const std::string& path);

  // Reads and converts tokens [first, first + count) that lie at byte `offset` contiguously.
  absl::Status ReadContiguous(int64_t first, int64_t count, int64_t offset, int32_t* out) const;

  std::string path_;
  TokenFormat format_;
  ReadOnlyFile data_;
  int64_t token_count_ = 0;
  int token_bytes_ = 2;
  bool is_signed_ = false;
  absl::string_view token_type_ = "uint16";
  int64_t data_offset_ = 0;            // byte offset of token 0 when the stream is one run
  std::shared_ptr<const Runs> runs_;   // null when the stream is one run
};

}  // namespace weft

#endif  // WEFT_COMMON_TOKEN_FILE_H_
