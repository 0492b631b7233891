#include "common/checkpoint/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace weft::checkpoint {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

static_assert(sizeof(float) == 4, "checkpoints store IEEE-754 binary32");
// Shards hold little-endian floats, copied as they lie in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints assume a little-endian host");

constexpr char kIndexFile[] = "index.json";
constexpr char kLatestFile[] = "latest";
constexpr char kStagingPrefix[] = ".tmp-step-";
constexpr char kStepPrefix[] = "step-";
// A chunk is verified in blocks of this size, so verifying needs no chunk-sized buffer.
constexpr int64_t kVerifyBlockBytes = 16 << 20;
// FindUncovered gives up (and reports only volumes) beyond this many grid cells.
constexpr int64_t kMaxCoverageCells = 1 << 22;

std::string Dims(const std::vector<int64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ","), "]"); }

// "[0:2,4:8]": the half-open range of each dim.
std::string Region(const std::vector<int64_t>& offsets, const std::vector<int64_t>& lengths) {
  std::vector<std::string> parts;
  for (size_t d = 0; d < offsets.size(); ++d) {
    parts.push_back(absl::StrCat(offsets[d], ":", offsets[d] + lengths[d]));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

std::string ChunkRegion(const Chunk& c) { return Region(c.offsets, c.lengths); }

std::string Hex(uint32_t v) { return absl::StrFormat("0x%08x", v); }

// Saturates at int64 max instead of overflowing (the callers reject such shapes).
int64_t Volume(const std::vector<int64_t>& lengths) {
  int64_t v = 1;
  for (int64_t l : lengths) {
    if (l == 0) return 0;
    if (v > std::numeric_limits<int64_t>::max() / l) return std::numeric_limits<int64_t>::max();
    v *= l;
  }
  return v;
}

// The intersection of two boxes; false when it is empty.
bool Intersect(const std::vector<int64_t>& a_off, const std::vector<int64_t>& a_len,
               const std::vector<int64_t>& b_off, const std::vector<int64_t>& b_len,
               std::vector<int64_t>* off, std::vector<int64_t>* len) {
  off->assign(a_off.size(), 0);
  len->assign(a_off.size(), 0);
  for (size_t d = 0; d < a_off.size(); ++d) {
    const int64_t lo = std::max(a_off[d], b_off[d]);
    const int64_t hi = std::min(a_off[d] + a_len[d], b_off[d] + b_len[d]);
    if (hi <= lo) return false;
    (*off)[d] = lo;
    (*len)[d] = hi - lo;
  }
  return Volume(a_len) > 0 && Volume(b_len) > 0;
}

// A region of the box that no chunk covers, found on the grid of every chunk boundary (each
// grid cell lies wholly inside or outside each chunk). nullopt when the box is covered, or when
// the grid is too large to walk.
std::optional<std::pair<std::vector<int64_t>, std::vector<int64_t>>> FindUncovered(
    const std::vector<int64_t>& box_off, const std::vector<int64_t>& box_len,
    const std::vector<Chunk>& chunks) {
  const size_t rank = box_off.size();
  if (Volume(box_len) == 0) return std::nullopt;
  std::vector<std::vector<int64_t>> cuts(rank);
  int64_t cells = 1;
  for (size_t d = 0; d < rank; ++d) {
    std::set<int64_t> s = {box_off[d], box_off[d] + box_len[d]};
    for (const Chunk& c : chunks) {
      if (c.offsets.size() != rank) continue;
      for (int64_t x : {c.offsets[d], c.offsets[d] + c.lengths[d]}) {
        if (x > box_off[d] && x < box_off[d] + box_len[d]) s.insert(x);
      }
    }
    cuts[d].assign(s.begin(), s.end());
    cells *= static_cast<int64_t>(cuts[d].size() - 1);
    if (cells > kMaxCoverageCells) return std::nullopt;
  }
  std::vector<size_t> idx(rank, 0);
  std::vector<int64_t> off(rank), len(rank);
  while (true) {
    for (size_t d = 0; d < rank; ++d) {
      off[d] = cuts[d][idx[d]];
      len[d] = cuts[d][idx[d] + 1] - off[d];
    }
    bool covered = false;
    for (const Chunk& c : chunks) {
      if (c.offsets.size() != rank) continue;
      bool inside = true;
      for (size_t d = 0; d < rank && inside; ++d) {
        inside = off[d] >= c.offsets[d] && off[d] + len[d] <= c.offsets[d] + c.lengths[d];
      }
      if (inside && Volume(c.lengths) > 0) {
        covered = true;
        break;
      }
    }
    if (!covered) return std::make_pair(off, len);
    int d = static_cast<int>(rank) - 1;
    while (d >= 0 && ++idx[d] == cuts[d].size() - 1) idx[d--] = 0;
    if (d < 0) return std::nullopt;
  }
}

// The error for a box whose chunks cover only `covered` of its elements.
absl::Status MissingRegionError(const std::string& context, const std::string& name,
                                const std::vector<int64_t>& box_off,
                                const std::vector<int64_t>& box_len,
                                const std::vector<Chunk>& chunks, int64_t covered) {
  auto hole = FindUncovered(box_off, box_len, chunks);
  return absl::DataLossError(absl::StrCat(
      context, "tensor '", name, "': no chunk holds region ",
      hole ? Region(hole->first, hole->second) : std::string("(too fragmented to name)"),
      " of box ", Region(box_off, box_len), " (chunks cover ", covered, " of ", Volume(box_len),
      " elements)"));
}

// The tensor's chunks (which do not overlap) cover its whole global shape; the error is
// MissingRegionError's.
absl::Status CheckCovers(const std::string& context, const std::string& name,
                         const TensorEntry& e) {
  int64_t covered = 0;
  for (const Chunk& c : e.chunks) covered += Volume(c.lengths);
  if (covered == Volume(e.global_shape)) return absl::OkStatus();
  return MissingRegionError(context, name, std::vector<int64_t>(e.global_shape.size(), 0),
                            e.global_shape, e.chunks, covered);
}

// Structural UTF-8 check (lead byte and continuation bytes), so names serialize as they are.
bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
    if (extra < 0 || i + extra >= s.size() + (extra == 0 ? 1 : 0)) return false;
    for (int k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += 1 + extra;
  }
  return true;
}

absl::Status CheckTensorName(const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("a tensor has an empty name");
  if (!ValidUtf8(name)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor name '", name, "' is not UTF-8"));
  }
  if (name == "__metadata__") {
    return absl::InvalidArgumentError("tensor name '__metadata__' is reserved by safetensors");
  }
  return absl::OkStatus();
}

// A chunk file is a plain name inside the step folder.
bool PlainFileName(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f != kIndexFile;
}

// Checks one chunk against its tensor's global shape: rank, bounds, and a byte range of
// exactly 4 bytes per element.
absl::Status CheckChunk(const std::vector<int64_t>& shape, const Chunk& c) {
  if (c.offsets.size() != shape.size() || c.lengths.size() != shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk offsets ", Dims(c.offsets), " lengths ", Dims(c.lengths), " do not match rank ",
        shape.size(), " of shape ", Dims(shape)));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (c.offsets[d] < 0 || c.lengths[d] < 0 || c.offsets[d] > shape[d] ||
        c.lengths[d] > shape[d] - c.offsets[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", ChunkRegion(c), " lies outside shape ", Dims(shape)));
    }
  }
  if (!PlainFileName(c.file)) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", ChunkRegion(c), ": file '", c.file, "' is not a plain file name"));
  }
  if (c.begin < 0 || c.end < c.begin || c.end - c.begin != Volume(c.lengths) * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", ChunkRegion(c), " in ", c.file, ": byte range [", c.begin, ",", c.end,
        ") does not hold ", Volume(c.lengths), " F32 elements"));
  }
  return absl::OkStatus();
}

absl::Status CheckShape(const std::vector<int64_t>& shape) {
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("shape ", Dims(shape), " has a negative dim"));
  }
  if (Volume(shape) > std::numeric_limits<int64_t>::max() / 8) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", Dims(shape), " is too large"));
  }
  return absl::OkStatus();
}

// No two non-empty chunks of a tensor overlap (then covered volumes can be added up).
absl::Status CheckNoOverlap(const TensorEntry& e) {
  std::vector<int64_t> off, len;
  for (size_t i = 0; i < e.chunks.size(); ++i) {
    for (size_t j = i + 1; j < e.chunks.size(); ++j) {
      const Chunk& a = e.chunks[i];
      const Chunk& b = e.chunks[j];
      if (Intersect(a.offsets, a.lengths, b.offsets, b.lengths, &off, &len)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunks ", ChunkRegion(a), " in ", a.file, " and ", ChunkRegion(b), " in ", b.file,
            " overlap on ", Region(off, len)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("renaming ", from, " to ", to, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// N for a folder name "step-<N>" (digits only), else nullopt.
std::optional<int64_t> StepOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kStepPrefix) || name.empty()) return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int64_t n;
  if (!absl::SimpleAtoi(name, &n)) return std::nullopt;
  return n;
}

// The step-<N> folders of dir, newest first.
std::vector<std::pair<int64_t, std::string>> StepFolders(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::optional<int64_t> step = StepOf(name);
    std::error_code ec2;
    if (step && it->is_directory(ec2)) out.push_back({*step, name});
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  ASSIGN_OR_RETURN(ReadOnlyFile f, ReadOnlyFile::Open(path));
  std::string text(static_cast<size_t>(f.size()), '\0');
  RETURN_IF_ERROR(f.ReadAt(0, text.size(), text.data()));
  return text;
}

// The step folder's index, parsed and checked (checksum, version, structure, its step equal to
// the folder's). This is what makes a folder a committed checkpoint.
absl::StatusOr<Index> LoadIndex(const std::string& step_dir) {
  const std::string path = absl::StrCat(step_dir, "/", kIndexFile);
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  ASSIGN_OR_RETURN(Index index, ParseIndex(text, path));
  std::optional<int64_t> step = StepOf(fs::path(step_dir).lexically_normal().filename().string());
  if (!step) step = StepOf(fs::path(step_dir).lexically_normal().parent_path().filename().string());
  if (step && *step != index.step) {
    return absl::DataLossError(absl::StrCat(path, ": index is for step ", index.step,
                                            " but lies in the folder of step ", *step));
  }
  return index;
}

absl::StatusOr<std::string> FindLatestImpl(const std::string& dir_arg, bool remove_staging) {
  std::string dir = dir_arg;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // "ckpt/" -> ckpt/step-N
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such checkpoint folder"));
  }
  if (remove_staging) {
    std::vector<fs::path> staging;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (absl::StartsWith(it->path().filename().string(), kStagingPrefix)) {
        staging.push_back(it->path());
      }
    }
    for (const fs::path& p : staging) {
      std::error_code ignored;
      fs::remove_all(p, ignored);  // best effort: a leftover is ignored anyway
    }
  }
  std::vector<std::string> rejected;
  absl::StatusOr<std::string> pointer = ReadWholeFile(absl::StrCat(dir, "/", kLatestFile));
  if (pointer.ok()) {
    const std::string name(absl::StripAsciiWhitespace(*pointer));
    if (StepOf(name)) {
      const std::string path = absl::StrCat(dir, "/", name);
      absl::StatusOr<Index> index = LoadIndex(path);
      if (index.ok()) return path;
    }
  }
  for (const auto& [step, name] : StepFolders(dir)) {
    const std::string path = absl::StrCat(dir, "/", name);
    absl::StatusOr<Index> index = LoadIndex(path);
    if (index.ok()) return path;
    rejected.push_back(absl::StrCat(name, " (", index.status().message(), ")"));
  }
  if (rejected.empty()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no committed checkpoint"));
  }
  return absl::NotFoundError(absl::StrCat(dir, ": no committed checkpoint; step folders without a valid index: ",
                                          absl::StrJoin(rejected, "; ")));
}

// Removes step folders beyond the `keep` newest, never `committed`. Best effort: a folder that
// cannot be removed now is tried again after the next commit. Each goes first by rename to a
// staging name, so a half-removed folder is never mistaken for a checkpoint.
void CollectGarbage(const std::string& dir, int keep, int64_t committed) {
  if (keep <= 0) return;
  int kept = 0;
  for (const auto& [step, name] : StepFolders(dir)) {
    if (step == committed || kept < keep) {
      ++kept;
      continue;
    }
    const std::string doomed = absl::StrCat(dir, "/", kStagingPrefix, step, ".removing");
    std::error_code ec;
    fs::remove_all(doomed, ec);
    if (!Rename(absl::StrCat(dir, "/", name), doomed).ok()) continue;
    fs::remove_all(doomed, ec);
  }
  (void)FsyncDir(dir);
}

Json ChunkJson(const Chunk& c) {
  Json j = Json::object();
  j["offsets"] = c.offsets;
  j["lengths"] = c.lengths;
  j["file"] = c.file;
  j["byte_range"] = {c.begin, c.end};
  j["crc32c"] = c.crc32c;
  return j;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

bool AsInt(const Json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return true;
  }
  return false;
}

bool AsIntVector(const Json& j, std::vector<int64_t>* out) {
  if (!j.is_array()) return false;
  out->clear();
  for (const Json& x : j) {
    int64_t v;
    if (!AsInt(x, &v)) return false;
    out->push_back(v);
  }
  return true;
}

bool AsCrc(const Json& j, uint32_t* out) {
  int64_t v;
  if (!AsInt(j, &v) || v < 0 || v > 0xffffffffll) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

std::string StagingDir(const std::string& dir, int64_t step) {
  return absl::StrCat(dir, "/", kStagingPrefix, step);
}

std::string StepDir(const std::string& dir, int64_t step) {
  return absl::StrCat(dir, "/", kStepPrefix, step);
}

absl::StatusOr<std::vector<IndexedChunk>> WriteShard(const std::string& staging_dir, int rank,
                                                     const std::vector<ShardPiece>& pieces) {
  const std::string file = absl::StrCat("rank-", rank, ".safetensors");
  const std::string path = absl::StrCat(staging_dir, "/", file);
  const std::string context = absl::StrCat("writing shard ", path);
  if (rank < 0) return absl::InvalidArgumentError(absl::StrCat(context, ": negative rank"));

  // Tensors in name order, as safetensors writers lay them out.
  std::map<std::string, const ShardPiece*> by_name;
  for (const ShardPiece& p : pieces) {
    RETURN_IF_ERROR(Annotate(CheckTensorName(p.name), context));
    RETURN_IF_ERROR(Annotate(CheckShape(p.global_shape), absl::StrCat(context, ": tensor '", p.name, "'")));
    Chunk c;
    c.offsets = p.offsets;
    c.lengths = p.lengths;
    c.file = file;
    c.end = Volume(p.lengths) * 4;
    RETURN_IF_ERROR(Annotate(CheckChunk(p.global_shape, c),
                             absl::StrCat(context, ": tensor '", p.name, "'")));
    if (p.data == nullptr && Volume(p.lengths) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": tensor '", p.name, "' chunk ", ChunkRegion(c), " has no data"));
    }
    const std::string key = absl::StrCat(p.name, "@", absl::StrJoin(p.offsets, ","));
    if (!by_name.emplace(key, &p).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": tensor '", p.name, "' chunk at ", Dims(p.offsets), " given twice"));
    }
  }

  std::vector<SafetensorsHeaderEntry> entries;
  for (const auto& [key, p] : by_name) entries.push_back({key, p->lengths});
  const SafetensorsHeader header = EncodeSafetensorsHeader(
      entries, {{"format_version", absl::StrCat(kFormatVersion)}, {"rank", absl::StrCat(rank)}});

  std::vector<absl::string_view> parts = {header.bytes};
  std::vector<IndexedChunk> out;
  size_t i = 0;
  for (const auto& [key, p] : by_name) {
    const auto& [begin, end] = header.ranges[i++];
    const size_t bytes = static_cast<size_t>(end - begin);
    const char* data = reinterpret_cast<const char*>(p->data);
    parts.emplace_back(bytes == 0 ? "" : absl::string_view(data, bytes));
    IndexedChunk ic;
    ic.tensor = p->name;
    ic.global_shape = p->global_shape;
    ic.chunk.offsets = p->offsets;
    ic.chunk.lengths = p->lengths;
    ic.chunk.file = file;
    ic.chunk.begin = begin;
    ic.chunk.end = end;
    ic.chunk.crc32c = Crc32c(data, bytes);
    out.push_back(std::move(ic));
  }

  std::error_code ec;
  fs::create_directories(staging_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(context, ": cannot create the folder: ", ec.message()));
  RETURN_IF_ERROR(Annotate(WriteFile(path, parts), "writing shard"));
  RETURN_IF_ERROR(Annotate(FsyncDir(staging_dir), context));
  return out;
}

std::string SerializeIndex(const Index& index) {
  Json body = Json::object();
  body["format_version"] = index.format_version;
  body["step"] = index.step;
  body["metadata"] = Json::object();
  for (const auto& [k, v] : index.metadata) body["metadata"][k] = v;
  body["tensors"] = Json::object();
  for (const auto& [name, e] : index.tensors) {
    Json t = Json::object();
    t["dtype"] = e.dtype;
    t["shape"] = e.global_shape;
    t["chunks"] = Json::array();
    for (const Chunk& c : e.chunks) t["chunks"].push_back(ChunkJson(c));
    body["tensors"][name] = t;
  }
  const uint32_t checksum = [&] {
    const std::string canonical = Dump(body);
    return Crc32c(canonical.data(), canonical.size());
  }();

  // Laid out one chunk per line for people; the checksum does not depend on the layout.
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"format_version\": ", index.format_version, ",\n");
  absl::StrAppend(&out, "  \"step\": ", index.step, ",\n");
  absl::StrAppend(&out, "  \"metadata\": ", Dump(body["metadata"]), ",\n");
  absl::StrAppend(&out, "  \"tensors\": {");
  bool first = true;
  for (const auto& [name, t] : body["tensors"].items()) {
    absl::StrAppend(&out, first ? "" : ",", "\n    ", Dump(Json(name)), ": {\"dtype\": ",
                    Dump(t["dtype"]), ", \"shape\": ", Dump(t["shape"]), ", \"chunks\": [");
    bool first_chunk = true;
    for (const Json& c : t["chunks"]) {
      absl::StrAppend(&out, first_chunk ? "" : ",", "\n      ", Dump(c));
      first_chunk = false;
    }
    absl::StrAppend(&out, "]}");
    first = false;
  }
  absl::StrAppend(&out, "\n  },\n  \"checksum\": ", checksum, "\n}\n");
  return out;
}

absl::StatusOr<Index> ParseIndex(const std::string& text, const std::string& path) {
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("damaged index: not valid JSON");
  if (!j.is_object()) return bad("damaged index: not a JSON object");
  auto sum = j.find("checksum");
  uint32_t stored = 0;
  if (sum == j.end() || !AsCrc(*sum, &stored)) return bad("damaged index: no checksum");
  j.erase("checksum");
  const std::string canonical = Dump(j);
  const uint32_t computed = Crc32c(canonical.data(), canonical.size());
  if (computed != stored) {
    return bad(absl::StrCat("damaged index: checksum mismatch (stored ", Hex(stored),
                            ", computed ", Hex(computed), ")"));
  }

  Index index;
  int64_t v;
  auto version = j.find("format_version");
  if (version == j.end() || !AsInt(*version, &v)) return bad("no format_version");
  if (v != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": unsupported format version ", v, " (this Weft reads version ", kFormatVersion, ")"));
  }
  index.format_version = static_cast<int>(v);
  auto step = j.find("step");
  if (step == j.end() || !AsInt(*step, &index.step) || index.step < 0) return bad("no valid step");
  auto meta = j.find("metadata");
  if (meta != j.end()) {
    if (!meta->is_object()) return bad("metadata is not an object");
    for (auto it = meta->begin(); it != meta->end(); ++it) {
      if (!it->is_string()) return bad(absl::StrCat("metadata '", it.key(), "' is not a string"));
      index.metadata[it.key()] = it->get<std::string>();
    }
  }
  auto tensors = j.find("tensors");
  if (tensors == j.end() || !tensors->is_object()) return bad("no tensors object");
  for (auto it = tensors->begin(); it != tensors->end(); ++it) {
    const std::string& name = it.key();
    auto tbad = [&](absl::string_view what) { return bad(absl::StrCat("tensor '", name, "': ", what)); };
    const Json& t = it.value();
    if (!t.is_object()) return tbad("not an object");
    TensorEntry e;
    auto dtype = t.find("dtype");
    if (dtype == t.end() || !dtype->is_string()) return tbad("no dtype");
    e.dtype = dtype->get<std::string>();
    if (e.dtype != "F32") return tbad(absl::StrCat("dtype ", e.dtype, " (only F32 is supported)"));
    auto shape = t.find("shape");
    if (shape == t.end() || !AsIntVector(*shape, &e.global_shape)) return tbad("no shape");
    absl::Status s = CheckShape(e.global_shape);
    if (!s.ok()) return tbad(s.message());
    auto chunks = t.find("chunks");
    if (chunks == t.end() || !chunks->is_array()) return tbad("no chunks");
    for (const Json& cj : *chunks) {
      Chunk c;
      auto f = cj.is_object() ? cj.find("file") : cj.end();
      auto r = cj.is_object() ? cj.find("byte_range") : cj.end();
      std::vector<int64_t> range;
      if (!cj.is_object() || !cj.contains("offsets") || !AsIntVector(cj["offsets"], &c.offsets) ||
          !cj.contains("lengths") || !AsIntVector(cj["lengths"], &c.lengths) || f == cj.end() ||
          !f->is_string() || r == cj.end() || !AsIntVector(*r, &range) || range.size() != 2 ||
          !cj.contains("crc32c") || !AsCrc(cj["crc32c"], &c.crc32c)) {
        return tbad(absl::StrCat("chunk ", e.chunks.size(),
                                 " needs offsets, lengths, file, byte_range [begin,end], crc32c"));
      }
      c.file = f->get<std::string>();
      c.begin = range[0];
      c.end = range[1];
      s = CheckChunk(e.global_shape, c);
      if (!s.ok()) return tbad(s.message());
      e.chunks.push_back(std::move(c));
    }
    s = CheckNoOverlap(e);
    if (!s.ok()) return tbad(s.message());
    index.tensors.emplace(name, std::move(e));
  }
  return index;
}

absl::Status CommitCheckpoint(const std::string& dir, int64_t step,
                              const std::vector<IndexedChunk>& chunks, int keep,
                              const std::map<std::string, std::string>& metadata) {
  const std::string context = absl::StrCat("committing checkpoint step ", step, " in ", dir);
  auto fail = [&](absl::StatusCode code, absl::string_view what) {
    return absl::Status(code, absl::StrCat(context, ": ", what));
  };
  if (step < 0) return fail(absl::StatusCode::kInvalidArgument, "negative step");
  const std::string staging = StagingDir(dir, step);
  const std::string final_dir = StepDir(dir, step);
  std::error_code ec;
  if (!fs::is_directory(staging, ec)) {
    return fail(absl::StatusCode::kFailedPrecondition,
                absl::StrCat(staging, " does not exist (no shard was written)"));
  }
  if (fs::exists(final_dir, ec)) {
    return fail(absl::StatusCode::kAlreadyExists, absl::StrCat(final_dir, " already exists"));
  }
  for (const auto& [k, v] : metadata) {
    if (!ValidUtf8(k) || !ValidUtf8(v)) {
      return fail(absl::StatusCode::kInvalidArgument, absl::StrCat("metadata '", k, "' is not UTF-8"));
    }
  }

  Index index;
  index.step = step;
  index.metadata = metadata;
  for (const IndexedChunk& ic : chunks) {
    RETURN_IF_ERROR(Annotate(CheckTensorName(ic.tensor), context));
    auto [it, added] = index.tensors.try_emplace(ic.tensor);
    TensorEntry& e = it->second;
    if (added) {
      RETURN_IF_ERROR(Annotate(CheckShape(ic.global_shape), absl::StrCat(context, ": tensor '", ic.tensor, "'")));
      e.global_shape = ic.global_shape;
    } else if (e.global_shape != ic.global_shape) {
      return fail(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("tensor '", ic.tensor, "': chunks disagree on the global shape: ",
                               Dims(e.global_shape), " from ", e.chunks.front().file, ", ",
                               Dims(ic.global_shape), " from ", ic.chunk.file));
    }
    RETURN_IF_ERROR(Annotate(CheckChunk(e.global_shape, ic.chunk),
                             absl::StrCat(context, ": tensor '", ic.tensor, "'")));
    e.chunks.push_back(ic.chunk);
  }
  for (auto& [name, e] : index.tensors) {
    std::sort(e.chunks.begin(), e.chunks.end(), [](const Chunk& a, const Chunk& b) {
      return std::tie(a.offsets, a.lengths, a.file) < std::tie(b.offsets, b.lengths, b.file);
    });
    RETURN_IF_ERROR(Annotate(CheckNoOverlap(e), absl::StrCat(context, ": tensor '", name, "'")));
    RETURN_IF_ERROR(CheckCovers(absl::StrCat(context, ": "), name, e));
  }
  // Every chunk's file is there and long enough, so the index never names missing bytes.
  std::map<std::string, std::pair<int64_t, std::string>> need;  // file -> (max end, a tensor)
  for (const auto& [name, e] : index.tensors) {
    for (const Chunk& c : e.chunks) {
      auto& n = need[c.file];
      if (c.end >= n.first) n = {c.end, name};
    }
  }
  for (const auto& [file, n] : need) {
    const std::string path = absl::StrCat(staging, "/", file);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return fail(absl::StatusCode::kFailedPrecondition,
                  absl::StrCat(path, " (tensor '", n.second, "') is missing"));
    }
    if (st.st_size < n.first) {
      return fail(absl::StatusCode::kFailedPrecondition,
                  absl::StrCat(path, " holds ", st.st_size, " bytes but tensor '", n.second,
                               "' needs ", n.first));
    }
  }

  RETURN_IF_ERROR(Annotate(WriteFile(absl::StrCat(staging, "/", kIndexFile), {SerializeIndex(index)}), context));
  RETURN_IF_ERROR(Annotate(FsyncDir(staging), context));
  RETURN_IF_ERROR(Annotate(Rename(staging, final_dir), context));
  RETURN_IF_ERROR(Annotate(FsyncDir(dir), context));
  RETURN_IF_ERROR(Annotate(WriteFileAtomically(absl::StrCat(dir, "/", kLatestFile),
                                               {absl::StrCat(kStepPrefix, step, "\n")}),
                           context));
  CollectGarbage(dir, keep, step);
  return absl::OkStatus();
}

absl::StatusOr<std::string> FindLatest(const std::string& dir) {
  return FindLatestImpl(dir, /*remove_staging=*/true);
}

absl::StatusOr<std::string> FindLatestReadOnly(const std::string& dir) {
  return FindLatestImpl(dir, /*remove_staging=*/false);
}

absl::StatusOr<std::string> ResolveStepDir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / kIndexFile, ec)) return dir;
  return FindLatestReadOnly(dir);
}

absl::StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& step_dir) {
  CheckpointReader r;
  r.step_dir_ = step_dir;
  ASSIGN_OR_RETURN(r.index_, LoadIndex(step_dir));
  // Each file once, with the chunk that reaches furthest into it.
  std::map<std::string, std::pair<const Chunk*, std::string>> last;
  for (const auto& [name, e] : r.index_.tensors) {
    for (const Chunk& c : e.chunks) {
      auto& l = last[c.file];
      if (l.first == nullptr || c.end > l.first->end) l = {&c, name};
    }
  }
  for (const auto& [file, l] : last) {
    const std::string path = absl::StrCat(step_dir, "/", file);
    const std::string what = absl::StrCat("tensor '", l.second, "'");
    absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(path);
    if (!f.ok()) return Annotate(f.status(), absl::StrCat("loading ", what, " from ", path));
    if (f->size() < l.first->end) {
      return absl::DataLossError(absl::StrCat(
          "loading ", what, " from ", path, ": truncated: the file holds ", f->size(),
          " bytes, chunk ", ChunkRegion(*l.first), " ends at byte ", l.first->end));
    }
    r.files_.emplace(file, *std::move(f));
  }
  return r;
}

absl::Status CheckpointReader::VerifyChunk(const std::string& name, const Chunk& chunk) const {
  const std::string path = absl::StrCat(step_dir_, "/", chunk.file);
  const std::string context =
      absl::StrCat("loading tensor '", name, "' from ", path, ": chunk ", ChunkRegion(chunk));
  auto f = files_.find(chunk.file);
  if (f == files_.end()) return absl::InternalError(absl::StrCat(context, ": file not open"));
  std::vector<char> block(static_cast<size_t>(std::min(kVerifyBlockBytes, chunk.end - chunk.begin)));
  uint32_t crc = 0;
  for (int64_t at = chunk.begin; at < chunk.end;) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(block.size(), chunk.end - at));
    RETURN_IF_ERROR(Annotate(f->second.ReadAt(at, n, block.data()), context));
    crc = Crc32c(block.data(), n, crc);
    at += static_cast<int64_t>(n);
  }
  if (crc != chunk.crc32c) {
    return absl::DataLossError(absl::StrCat(context, " (bytes [", chunk.begin, ",", chunk.end,
                                            ")): checksum mismatch (index ", Hex(chunk.crc32c),
                                            ", data ", Hex(crc), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckpointReader::CheckCoverage(const std::string& name) const {
  auto it = index_.tensors.find(name);
  if (it == index_.tensors.end()) {
    return absl::NotFoundError(absl::StrCat(step_dir_, ": no tensor '", name, "' in the checkpoint"));
  }
  return CheckCovers(absl::StrCat(step_dir_, ": "), name, it->second);
}

std::vector<absl::Status> CheckpointReader::VerifyEach(int64_t* bytes_checked) const {
  std::vector<absl::Status> problems;
  int64_t bytes = 0;
  for (const auto& [name, e] : index_.tensors) {
    absl::Status s = CheckCoverage(name);
    if (!s.ok()) problems.push_back(s);
    for (const Chunk& c : e.chunks) {
      s = VerifyChunk(name, c);
      if (s.ok()) {
        bytes += c.end - c.begin;
      } else {
        problems.push_back(s);
      }
    }
  }
  if (bytes_checked != nullptr) *bytes_checked = bytes;
  return problems;
}

absl::Status CheckpointReader::VerifyAll() const {
  const std::vector<absl::Status> problems = VerifyEach();
  return problems.empty() ? absl::OkStatus() : problems.front();
}

absl::Status CheckpointReader::ReadBox(const std::string& name,
                                       const std::vector<int64_t>& offsets,
                                       const std::vector<int64_t>& lengths, float* out) const {
  auto it = index_.tensors.find(name);
  if (it == index_.tensors.end()) {
    return absl::NotFoundError(absl::StrCat(step_dir_, ": no tensor '", name, "' in the checkpoint"));
  }
  const TensorEntry& e = it->second;
  const size_t rank = e.global_shape.size();
  if (offsets.size() != rank || lengths.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loading tensor '", name, "' from ", step_dir_, ": shape mismatch: saved shape ",
        Dims(e.global_shape), ", box offsets ", Dims(offsets), " lengths ", Dims(lengths)));
  }
  for (size_t d = 0; d < rank; ++d) {
    if (offsets[d] < 0 || lengths[d] < 0 || offsets[d] + lengths[d] > e.global_shape[d]) {
      return absl::OutOfRangeError(absl::StrCat(
          "loading tensor '", name, "' from ", step_dir_, ": box ", Region(offsets, lengths),
          " lies outside the saved shape ", Dims(e.global_shape)));
    }
  }
  const int64_t box_volume = Volume(lengths);
  if (box_volume == 0) return absl::OkStatus();

  // Row-major strides of the box in `out`.
  std::vector<int64_t> out_strides(rank, 1);
  for (int d = static_cast<int>(rank) - 2; d >= 0; --d) out_strides[d] = out_strides[d + 1] * lengths[d + 1];

  int64_t covered = 0;
  std::vector<int64_t> ioff, ilen;
  std::vector<float> buffer;
  for (const Chunk& c : e.chunks) {
    if (!Intersect(offsets, lengths, c.offsets, c.lengths, &ioff, &ilen)) continue;
    covered += Volume(ilen);
    // A chunk inside the box whose elements are contiguous in `out` is read straight there:
    // dims before the first of length > 1 have length 1, later dims span the whole box.
    bool direct = ilen == c.lengths;
    size_t first = 0;
    while (first < rank && c.lengths[first] == 1) ++first;
    for (size_t d = first + 1; direct && d < rank; ++d) direct = c.lengths[d] == lengths[d];
    int64_t start = 0;
    for (size_t d = 0; d < rank; ++d) start += (ioff[d] - offsets[d]) * out_strides[d];
    float* dst = direct ? out + start : nullptr;
    if (!direct) {
      buffer.resize(static_cast<size_t>(Volume(c.lengths)));
      dst = buffer.data();
    }
    const std::string path = absl::StrCat(step_dir_, "/", c.file);
    const std::string context =
        absl::StrCat("loading tensor '", name, "' from ", path, ": chunk ", ChunkRegion(c));
    auto f = files_.find(c.file);
    if (f == files_.end()) return absl::InternalError(absl::StrCat(context, ": file not open"));
    const size_t bytes = static_cast<size_t>(c.end - c.begin);
    RETURN_IF_ERROR(Annotate(f->second.ReadAt(c.begin, bytes, dst), context));
    const uint32_t crc = Crc32c(dst, bytes);
    if (crc != c.crc32c) {
      return absl::DataLossError(absl::StrCat(context, " (bytes [", c.begin, ",", c.end,
                                              ")): checksum mismatch (index ", Hex(c.crc32c),
                                              ", data ", Hex(crc), ")"));
    }
    if (direct) continue;
    // Copy the intersection row by row (innermost dim runs) from the chunk into out.
    std::vector<int64_t> src_strides(rank, 1);
    for (int d = static_cast<int>(rank) - 2; d >= 0; --d) src_strides[d] = src_strides[d + 1] * c.lengths[d + 1];
    const int64_t run = rank == 0 ? 1 : ilen[rank - 1];
    const size_t outer = rank == 0 ? 0 : rank - 1;
    std::vector<int64_t> idx(outer, 0);
    while (true) {
      int64_t src = 0, dsti = 0;
      for (size_t d = 0; d < rank; ++d) {
        const int64_t g = ioff[d] + (d < outer ? idx[d] : 0);
        src += (g - c.offsets[d]) * src_strides[d];
        dsti += (g - offsets[d]) * out_strides[d];
      }
      std::memcpy(out + dsti, buffer.data() + src, static_cast<size_t>(run) * sizeof(float));
      int d = static_cast<int>(outer) - 1;
      while (d >= 0 && ++idx[d] == ilen[d]) idx[d--] = 0;
      if (d < 0) break;
    }
  }
  if (covered != box_volume) {
    return MissingRegionError(absl::StrCat("loading from ", step_dir_, ": "), name, offsets,
                              lengths, e.chunks, covered);
  }
  return absl::OkStatus();
}

}  // namespace weft::checkpoint
