// `weftctl data`: token files for data.source tokens (common/token_file.h), made and looked at
// without any daemon. tokenize writes a byte-level llm.c file: every byte of the input is one
// token (vocab 256), so any text trains a language model with no tokenizer at hand; inspect shows
// a token file's format, count and first tokens.
//
// E.g.
//   ASSIGN_OR_RETURN(int64_t tokens, TokenizeBytes("shakespeare.txt", "train.bin"));
//   ASSIGN_OR_RETURN(TokenFile file, TokenFile::Open("train.bin", TokenFormat::kLlmc));
//   ASSIGN_OR_RETURN(std::string text, FormatTokenFileText(file));
#ifndef WEFT_CLIENT_DATA_H_
#define WEFT_CLIENT_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/token_file.h"

namespace weft::client {

// The vocabulary of byte-level tokens: token b is the byte b.
inline constexpr int64_t kByteVocabSize = 256;

// Writes in_path's bytes as an llm.c token file (magic 20240520, version 1, uint16 tokens) to
// out_path: written under a temporary name and renamed, so out_path is whole or untouched. Reads
// the input in pieces (files of any size up to llm.c's 2^31 - 1 tokens). Returns the token count.
absl::StatusOr<int64_t> TokenizeBytes(const std::string& in_path, const std::string& out_path);

// The bytes of the inputs, one after another in the order given, as TokenizeBytes writes them:
// the first tokens to out_path and, with a holdout fraction f in (0, 1), the last
// ceil(f * total) of them to holdout_path instead (a held-out split for evaluation, as nanoGPT's
// prepare.py cuts its val.bin from the end). Both files are whole or untouched. Returns the
// tokens written to each. Either part empty is an error.
struct TokenSplit {
  int64_t train = 0;
  int64_t holdout = 0;
};
absl::StatusOr<TokenSplit> TokenizeBytesSplit(const std::vector<std::string>& in_paths,
                                              const std::string& out_path, double holdout,
                                              const std::string& holdout_path);

// The file, its format and stored token type, the token count and the first `first` tokens
// (fewer if it holds fewer), one "key: value" line each.
absl::StatusOr<std::string> FormatTokenFileText(const TokenFile& file, int64_t first = 16);

}  // namespace weft::client

#endif  // WEFT_CLIENT_DATA_H_
