#include "common/token_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace weft {
namespace {

// Tokens converted per pread when the stored width is not int32's.
constexpr int64_t kChunkTokens = 1 << 16;

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Little-endian integers: every host Weft runs on is little-endian, as are the formats.
template <typename T>
T Load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Megatron's .idx: "MMIDIDX\0\0", <Q version>, <B dtype code>, <Q sequence_count>,
// <Q document_count> (megatron/core/datasets/indexed_dataset.py).
constexpr char kMegatronMagic[] = "MMIDIDX\0\0";
constexpr int64_t kMegatronMagicBytes = 9;
constexpr int64_t kMegatronHeaderBytes = kMegatronMagicBytes + 8 + 1 + 8 + 8;

struct MegatronDType {
  int code;
  const char* name;
  int bytes;
  bool is_signed;
  bool integer;
};
constexpr MegatronDType kMegatronDTypes[] = {
    {1, "uint8", 1, false, true},    {2, "int8", 1, true, true},     {3, "int16", 2, true, true},
    {4, "int32", 4, true, true},     {5, "int64", 8, true, true},    {6, "float64", 8, true, false},
    {7, "float32", 4, true, false},  {8, "uint16", 2, false, true},
};

// A count of bytes, for messages: "1 byte", "12 bytes".
std::string Bytes(int64_t n) { return absl::StrCat(n, n == 1 ? " byte" : " bytes"); }

// What llm.c's header says of the tokens after it, checked against the file's size.
struct LlmcTokens {
  int token_bytes = 2;
  absl::string_view token_type = "uint16";
  int32_t count = 0;
};

absl::StatusOr<LlmcTokens> ReadLlmcHeader(const ReadOnlyFile& data) {
  const std::string& path = data.path();
  if (data.size() < kLlmcHeaderBytes) {
    return Invalid(path, absl::StrCat("holds ", Bytes(data.size()),
                                      ", shorter than llm.c's 1024-byte header"));
  }
  unsigned char header[12];
  RETURN_IF_ERROR(data.ReadAt(0, sizeof(header), header));
  const int32_t magic = Load<int32_t>(header);
  const int32_t version = Load<int32_t>(header + 4);
  LlmcTokens tokens;
  tokens.count = Load<int32_t>(header + 8);
  if (magic != kLlmcMagicU16 && magic != kLlmcMagicU32) {
    // The magic is the file's first bytes, which are not quoted: they may be anything.
    return Invalid(path, absl::StrCat("not an llm.c token file: its first 4 bytes are not the "
                                      "magic (", kLlmcMagicU16, " for uint16 tokens or ",
                                      kLlmcMagicU32, " for uint32)"));
  }
  const bool u32 = magic == kLlmcMagicU32;
  const int32_t want = u32 ? kLlmcVersionU32 : kLlmcVersionU16;
  if (version != want) {
    return Invalid(path, absl::StrCat("llm.c header version ", version,
                                      " is not supported with magic ", magic, " (expected ",
                                      want, ")"));
  }
  tokens.token_bytes = u32 ? 4 : 2;
  tokens.token_type = u32 ? "uint32" : "uint16";
  if (tokens.count < 0) return Invalid(path, absl::StrCat("header says ", tokens.count, " tokens"));
  const int64_t body = data.size() - kLlmcHeaderBytes;
  if (body != static_cast<int64_t>(tokens.count) * tokens.token_bytes) {
    const int64_t extra = body % tokens.token_bytes;
    return Invalid(path, absl::StrCat("header says ", tokens.count, " tokens but the file holds ",
                                      body / tokens.token_bytes,
                                      extra == 0 ? "" : absl::StrCat(" and ", Bytes(extra))));
  }
  return tokens;
}

// path.idx, or NOT_FOUND naming the prefix meant when path is the .bin or .idx itself.
absl::StatusOr<ReadOnlyFile> OpenMegatronIndex(const std::string& path) {
  absl::StatusOr<ReadOnlyFile> idx = ReadOnlyFile::Open(path + ".idx");
  if (absl::IsNotFound(idx.status()) &&
      (absl::EndsWith(path, ".bin") || absl::EndsWith(path, ".idx"))) {
    // The common slip: the data or index file given where Megatron takes their prefix.
    return absl::NotFoundError(absl::StrCat(
        idx.status().message(), "; format megatron takes the prefix of the .idx and .bin: ",
        path.substr(0, path.size() - 4)));
  }
  return idx;
}

// The index's header, its counts checked against the index's size.
struct MegatronHeader {
  const MegatronDType* dtype = nullptr;
  uint64_t sequences = 0;
  uint64_t documents = 0;
};

absl::StatusOr<MegatronHeader> ReadMegatronHeader(const ReadOnlyFile& idx) {
  const std::string& idx_path = idx.path();
  if (idx.size() < kMegatronHeaderBytes) {
    return Invalid(idx_path, absl::StrCat("holds ", Bytes(idx.size()), ", shorter than the ",
                                          kMegatronHeaderBytes, "-byte Megatron index header"));
  }
  unsigned char header[kMegatronHeaderBytes];
  RETURN_IF_ERROR(idx.ReadAt(0, sizeof(header), header));
  if (std::memcmp(header, kMegatronMagic, kMegatronMagicBytes) != 0) {
    return Invalid(idx_path, "not a Megatron index (the magic is not \"MMIDIDX\\0\\0\")");
  }
  const uint64_t version = Load<uint64_t>(header + 9);
  if (version != 1) {
    return Invalid(idx_path, absl::StrCat("index version ", version, " is not supported (1 is)"));
  }
  MegatronHeader h;
  const int code = header[17];
  for (const MegatronDType& d : kMegatronDTypes) {
    if (d.code == code) h.dtype = &d;
  }
  if (h.dtype == nullptr) {
    return Invalid(idx_path, absl::StrCat("unknown dtype code ", code, " (1..8)"));
  }
  if (!h.dtype->integer) {
    return Invalid(idx_path, absl::StrCat("dtype code ", code, " (", h.dtype->name,
                                          ") cannot hold token ids (integer codes 1-5 and 8 can)"));
  }
  h.sequences = Load<uint64_t>(header + 18);
  h.documents = Load<uint64_t>(header + 26);
  // Sizes are checked before anything is allocated: a corrupt count must not become a huge one.
  constexpr uint64_t kMaxCount = uint64_t{1} << 56;  // keeps the byte counts below from wrapping
  const bool sane = h.sequences < kMaxCount && h.documents < kMaxCount;
  const uint64_t room = static_cast<uint64_t>(idx.size() - kMegatronHeaderBytes);
  const uint64_t need = sane ? h.sequences * 12 + h.documents * 8 : 0;
  // The index may end with int8 sequence_modes (multimodal datasets), one per sequence.
  if (!sane || (room != need && room != need + h.sequences)) {
    return Invalid(idx_path,
                   absl::StrCat("header says ", h.sequences, " sequences and ", h.documents,
                                " document indices, which need ",
                                sane ? Bytes(kMegatronHeaderBytes + static_cast<int64_t>(need))
                                     : std::string("over 2^56 bytes"),
                                ", but the file holds ", Bytes(idx.size())));
  }
  return h;
}

// The index's sequences: their lengths in tokens and byte offsets in `data` (the .bin), each
// checked to lie inside it.
struct MegatronSequences {
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  int64_t total = 0;          // tokens in all
  bool back_to_back = true;   // each sequence starts where the one before ends
};

absl::StatusOr<MegatronSequences> ReadMegatronSequences(const ReadOnlyFile& idx,
                                                        const MegatronHeader& header,
                                                        const ReadOnlyFile& data) {
  const int64_t n = static_cast<int64_t>(header.sequences);
  MegatronSequences seqs;
  seqs.lengths.resize(n);
  seqs.pointers.resize(n);
  if (n > 0) {
    RETURN_IF_ERROR(idx.ReadAt(kMegatronHeaderBytes, n * 4, seqs.lengths.data()));
    RETURN_IF_ERROR(idx.ReadAt(kMegatronHeaderBytes + n * 4, n * 8, seqs.pointers.data()));
  }
  const std::vector<int32_t>& lengths = seqs.lengths;
  const std::vector<int64_t>& pointers = seqs.pointers;
  const int64_t bin_size = data.size();
  const int bytes = header.dtype->bytes;
  for (int64_t i = 0; i < n; ++i) {
    if (lengths[i] < 0) {
      return Invalid(idx.path(), absl::StrCat("sequence ", i, " has length ", lengths[i]));
    }
    const int64_t len_bytes = static_cast<int64_t>(lengths[i]) * bytes;
    if (pointers[i] < 0 || pointers[i] > bin_size || len_bytes > bin_size - pointers[i]) {
      return Invalid(idx.path(),
                     absl::StrCat("sequence ", i, " (", lengths[i], " ", header.dtype->name,
                                  " tokens at byte ", pointers[i], ") lies outside ",
                                  data.path(), " (", Bytes(bin_size), ")"));
    }
    if (i > 0 && pointers[i] != pointers[i - 1] + static_cast<int64_t>(lengths[i - 1]) * bytes) {
      seqs.back_to_back = false;
    }
    seqs.total += lengths[i];
  }
  return seqs;
}

// Documents are runs of sequences: indices from 0 to the sequence count, never decreasing.
absl::Status CheckMegatronDocuments(const ReadOnlyFile& idx, const MegatronHeader& header) {
  const int64_t n = static_cast<int64_t>(header.sequences);
  const int64_t documents = static_cast<int64_t>(header.documents);
  std::vector<int64_t> doc_chunk;
  int64_t previous = 0;
  const int64_t docs_at = kMegatronHeaderBytes + n * 12;
  for (int64_t d0 = 0; d0 < documents; d0 += kChunkTokens) {
    const int64_t m = std::min<int64_t>(kChunkTokens, documents - d0);
    doc_chunk.resize(m);
    RETURN_IF_ERROR(idx.ReadAt(docs_at + d0 * 8, m * 8, doc_chunk.data()));
    for (int64_t k = 0; k < m; ++k) {
      const int64_t d = doc_chunk[k];
      const int64_t at = d0 + k;
      if ((at == 0 && d != 0) || d < previous || d > n) {
        return Invalid(idx.path(),
                       absl::StrCat("document_indices[", at, "] is ", d,
                                    at == 0 ? "; the first must be 0"
                                            : absl::StrCat("; expected ", previous, "..", n,
                                                           " (never decreasing, at most the "
                                                           "sequence count)")));
      }
      previous = d;
    }
  }
  if (documents > 0 && previous != n) {
    return Invalid(idx.path(), absl::StrCat("document_indices ends at ", previous,
                                            ", not at the sequence count ", n,
                                            " (the sequences after it are in no document)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view TokenFormatName(TokenFormat format) {
  switch (format) {
    case TokenFormat::kLlmc: return "llmc";
    case TokenFormat::kRawU16: return "raw_u16";
    case TokenFormat::kMegatron: return "megatron";
  }
  return "?";
}

absl::StatusOr<TokenFormat> ParseTokenFormat(absl::string_view name) {
  if (name.empty() || name == "llmc") return TokenFormat::kLlmc;
  if (name == "raw_u16") return TokenFormat::kRawU16;
  if (name == "megatron") return TokenFormat::kMegatron;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format \"", name, "\"; known: llmc, raw_u16, megatron"));
}

absl::StatusOr<std::string> LlmcHeader(int64_t token_count, bool u32) {
  if (token_count < 0 || token_count > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        token_count, " tokens do not fit llm.c's header (an int32 count, at most ",
        std::numeric_limits<int32_t>::max(), ")"));
  }
  int32_t header[kLlmcHeaderInts] = {};
  header[0] = u32 ? kLlmcMagicU32 : kLlmcMagicU16;
  header[1] = u32 ? kLlmcVersionU32 : kLlmcVersionU16;
  header[2] = static_cast<int32_t>(token_count);
  return std::string(reinterpret_cast<const char*>(header), sizeof(header));
}

absl::StatusOr<TokenFile> TokenFile::Open(const std::string& path, TokenFormat format) {
  switch (format) {
    case TokenFormat::kRawU16: return OpenRawU16(path);
    case TokenFormat::kLlmc: return OpenLlmc(path);
    case TokenFormat::kMegatron: break;
  }
  return OpenMegatron(path);
}

absl::StatusOr<TokenFile> TokenFile::OpenRawU16(const std::string& path) {
  ASSIGN_OR_RETURN(ReadOnlyFile data, ReadOnlyFile::Open(path));
  if (data.size() % 2 != 0) {
    return Invalid(path, absl::StrCat("holds ", Bytes(data.size()),
                                      ", not a whole number of uint16 tokens (raw_u16)"));
  }
  TokenFile f(path, TokenFormat::kRawU16, std::move(data));
  f.token_count_ = f.data_.size() / 2;
  return f;
}

absl::StatusOr<TokenFile> TokenFile::OpenLlmc(const std::string& path) {
  ASSIGN_OR_RETURN(ReadOnlyFile data, ReadOnlyFile::Open(path));
  ASSIGN_OR_RETURN(const LlmcTokens tokens, ReadLlmcHeader(data));
  TokenFile f(path, TokenFormat::kLlmc, std::move(data));
  f.token_bytes_ = tokens.token_bytes;
  f.token_type_ = tokens.token_type;
  f.token_count_ = tokens.count;
  f.data_offset_ = kLlmcHeaderBytes;
  return f;
}

// Validates the index, then its pointers against .bin.
absl::StatusOr<TokenFile> TokenFile::OpenMegatron(const std::string& path) {
  ASSIGN_OR_RETURN(ReadOnlyFile idx, OpenMegatronIndex(path));
  ASSIGN_OR_RETURN(ReadOnlyFile data, ReadOnlyFile::Open(path + ".bin"));
  ASSIGN_OR_RETURN(const MegatronHeader header, ReadMegatronHeader(idx));
  ASSIGN_OR_RETURN(MegatronSequences seqs, ReadMegatronSequences(idx, header, data));
  RETURN_IF_ERROR(CheckMegatronDocuments(idx, header));

  TokenFile f(path, TokenFormat::kMegatron, std::move(data));
  f.token_count_ = seqs.total;
  f.token_bytes_ = header.dtype->bytes;
  f.is_signed_ = header.dtype->is_signed;
  f.token_type_ = header.dtype->name;
  const int64_t n = static_cast<int64_t>(header.sequences);
  if (seqs.back_to_back) {
    f.data_offset_ = n > 0 ? seqs.pointers[0] : 0;
  } else {
    auto runs = std::make_shared<Runs>();
    runs->starts.resize(n + 1);
    runs->starts[0] = 0;
    for (int64_t i = 0; i < n; ++i) runs->starts[i + 1] = runs->starts[i] + seqs.lengths[i];
    runs->offsets = std::move(seqs.pointers);
    f.runs_ = std::move(runs);
  }
  return f;
}

absl::Status TokenFile::Read(int64_t first, int64_t count, int32_t* out) const {
  if (first < 0 || count < 0 || first > token_count_ || count > token_count_ - first) {
    return absl::OutOfRangeError(absl::StrCat(data_path(), ": tokens [", first, ", ",
                                              first + count, ") fall outside the ", token_count_,
                                              " tokens of the stream"));
  }
  if (runs_ == nullptr) {
    return ReadContiguous(first, count, data_offset_ + first * token_bytes_, out);
  }
  // The sequence holding `first`, then sequence by sequence.
  const std::vector<int64_t>& starts = runs_->starts;
  size_t seq = std::upper_bound(starts.begin(), starts.end(), first) - starts.begin() - 1;
  int64_t pos = first, done = 0;
  while (done < count) {
    const int64_t in_seq = std::min(count - done, starts[seq + 1] - pos);
    if (in_seq > 0) {
      const int64_t offset = runs_->offsets[seq] + (pos - starts[seq]) * token_bytes_;
      RETURN_IF_ERROR(ReadContiguous(pos, in_seq, offset, out + done));
    }
    pos += in_seq;
    done += in_seq;
    ++seq;
  }
  return absl::OkStatus();
}

absl::Status TokenFile::ReadContiguous(int64_t first, int64_t count, int64_t offset,
                                       int32_t* out) const {
  auto bad = [&](int64_t i, auto value) {
    return Invalid(data_path(), absl::StrCat("token at position ", first + i, " is ", value,
                                             ", not a token id (", token_type_,
                                             " stored; ids are 0 .. 2^31-1)"));
  };
  if (token_bytes_ == 4) {
    // int32 or uint32 as stored: in place, then a negative int32 is out of range either way.
    RETURN_IF_ERROR(data_.ReadAt(offset, static_cast<size_t>(count) * 4, out));
    for (int64_t i = 0; i < count; ++i) {
      if (out[i] < 0) {
        return is_signed_ ? bad(i, out[i]) : bad(i, static_cast<uint32_t>(out[i]));
      }
    }
    return absl::OkStatus();
  }
  std::vector<unsigned char> chunk;
  for (int64_t i0 = 0; i0 < count; i0 += kChunkTokens) {
    const int64_t m = std::min(kChunkTokens, count - i0);
    chunk.resize(static_cast<size_t>(m * token_bytes_));
    RETURN_IF_ERROR(data_.ReadAt(offset + i0 * token_bytes_, chunk.size(), chunk.data()));
    const unsigned char* p = chunk.data();
    int32_t* o = out + i0;
    switch (token_bytes_ * 2 + (is_signed_ ? 1 : 0)) {
      case 2:  // uint8
        for (int64_t k = 0; k < m; ++k) o[k] = p[k];
        break;
      case 3:  // int8
        for (int64_t k = 0; k < m; ++k) {
          const int8_t v = static_cast<int8_t>(p[k]);
          if (v < 0) return bad(i0 + k, static_cast<int>(v));
          o[k] = v;
        }
        break;
      case 4:  // uint16
        for (int64_t k = 0; k < m; ++k) o[k] = Load<uint16_t>(p + 2 * k);
        break;
      case 5:  // int16
        for (int64_t k = 0; k < m; ++k) {
          const int16_t v = Load<int16_t>(p + 2 * k);
          if (v < 0) return bad(i0 + k, v);
          o[k] = v;
        }
        break;
      default:  // int64
        for (int64_t k = 0; k < m; ++k) {
          const int64_t v = Load<int64_t>(p + 8 * k);
          if (v < 0 || v > std::numeric_limits<int32_t>::max()) return bad(i0 + k, v);
          o[k] = static_cast<int32_t>(v);
        }
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace weft
