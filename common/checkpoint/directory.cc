#include "common/checkpoint/directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/checkpoint/box_geometry.h"
#include "common/crash_point.h"
#include "common/dtype.h"
#include "common/file_io.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "common/utf8.h"

namespace weft::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr char kLatestFile[] = "latest";
constexpr char kStagingPrefix[] = ".tmp-step-";
constexpr char kStepPrefix[] = "step-";

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

}  // namespace

namespace internal {

// The step folder's index, parsed and checked (checksum, version, structure, its step equal to
// the folder's). This is what makes a folder a committed checkpoint.
absl::StatusOr<Index> LoadIndex(const std::string& step_dir) {
  const std::string path = absl::StrCat(step_dir, "/", kIndexFile);
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  ASSIGN_OR_RETURN(Index index, ParseIndex(text, path));
  std::optional<int64_t> step = StepOf(fs::path(step_dir).lexically_normal().filename().string());
  if (!step) step = StepOf(fs::path(step_dir).lexically_normal().parent_path().filename().string());
  if (step && *step != index.step) {
    return absl::DataLossError(absl::StrCat(path, ": index is for step ", index.step,
                                            " but lies in the folder of step ", *step));
  }
  return index;
}

}  // namespace internal

namespace {

using internal::CheckChunk;
using internal::CheckCovers;
using internal::CheckDType;
using internal::CheckNoOverlap;
using internal::CheckShape;
using internal::CheckShardEntry;
using internal::CheckTensorName;
using internal::Dims;
using internal::kIndexFile;
using internal::LoadIndex;

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
      (void)RemoveTree(p.string());  // best effort: a leftover is ignored anyway
    }
  }
  std::vector<std::string> rejected;
  // `latest`, when it names a valid step. A commit renames its folder into place before it
  // replaces `latest`: a process killed between the two leaves a newer valid step than `latest`
  // names, and that one is the newest checkpoint (resuming from `latest` would save that step
  // again, onto a folder that exists).
  std::optional<int64_t> pointed;
  std::string pointed_path;
  absl::StatusOr<std::string> pointer = ReadFileToString(absl::StrCat(dir, "/", kLatestFile));
  if (pointer.ok()) {
    const std::string name(absl::StripAsciiWhitespace(*pointer));
    if (std::optional<int64_t> step = StepOf(name)) {
      const std::string path = absl::StrCat(dir, "/", name);
      if (LoadIndex(path).ok()) {
        pointed = step;
        pointed_path = path;
      }
    }
  }
  for (const auto& [step, name] : StepFolders(dir)) {
    if (pointed.has_value() && step <= *pointed) return pointed_path;
    const std::string path = absl::StrCat(dir, "/", name);
    absl::StatusOr<Index> index = LoadIndex(path);
    if (index.ok()) return path;
    rejected.push_back(absl::StrCat(name, " (", index.status().message(), ")"));
  }
  if (pointed.has_value()) return pointed_path;
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
    (void)RemoveTree(doomed);
    if (!RenamePath(absl::StrCat(dir, "/", name), doomed).ok()) continue;
    (void)RemoveTree(doomed);
  }
  (void)FsyncDir(dir);
}

}  // namespace

absl::Status CheckFolderIsWefts(const std::string& dir) {
  std::error_code ec;
  const fs::file_status own = fs::symlink_status(dir, ec);
  if (ec || !fs::exists(own)) return absl::OkStatus();  // the first save makes it
  if (!fs::is_directory(fs::status(dir, ec))) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": is not a folder"));
  }
  // `latest` is Weft's when it is a small regular file (not a link) naming a step folder; its
  // bytes are never quoted.
  auto is_pointer = [&](const fs::path& path) {
    std::error_code e;
    if (!fs::is_regular_file(fs::symlink_status(path, e)) || fs::file_size(path, e) > 64) {
      return false;
    }
    absl::StatusOr<std::string> text = ReadFileToString(path.string());
    return text.ok() && StepOf(absl::StripAsciiWhitespace(*text)).has_value();
  };
  auto wefts = [&](const fs::directory_entry& entry) {
    const std::string name = entry.path().filename().string();
    std::error_code e;
    const fs::file_status status = entry.symlink_status(e);
    if (name == kLatestFile) return is_pointer(entry.path());
    if (absl::StartsWith(name, absl::StrCat(kLatestFile, ".tmp-"))) {
      return fs::is_regular_file(status);
    }
    if (StepOf(name) || absl::StartsWith(name, kStagingPrefix)) return fs::is_directory(status);
    return false;
  };
  std::vector<std::string> foreign;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!wefts(*it)) foreign.push_back(it->path().filename().string());
  }
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  }
  if (foreign.empty()) return absl::OkStatus();
  std::sort(foreign.begin(), foreign.end());
  const size_t shown = std::min<size_t>(foreign.size(), 3);
  return absl::InvalidArgumentError(absl::StrCat(
      dir, ": holds ", foreign.size(), " entr", foreign.size() == 1 ? "y" : "ies",
      " Weft did not write (", absl::StrJoin(foreign.begin(), foreign.begin() + shown, ", "),
      foreign.size() > shown ? ", ..." : "",
      "); a checkpoint folder holds only step-N folders and `latest`, and Weft never "
      "overwrites another's files: name a new or empty folder"));
}

std::string StagingDir(const std::string& dir, int64_t step) {
  return absl::StrCat(dir, "/", kStagingPrefix, step);
}

std::string StepDir(const std::string& dir, int64_t step) {
  return absl::StrCat(dir, "/", kStepPrefix, step);
}

absl::StatusOr<std::string> CheckpointOwner(const std::string& step_dir) {
  ASSIGN_OR_RETURN(Index index, LoadIndex(step_dir));
  auto owner = index.metadata.find(kJobIdMetadata);
  return owner == index.metadata.end() ? std::string() : owner->second;
}

absl::Status CommitCheckpoint(const std::string& dir, int64_t step,
                              const std::vector<IndexedChunk>& chunks, int keep,
                              const std::map<std::string, std::string>& metadata,
                              const std::string& started_from) {
  const std::string context = absl::StrCat("committing checkpoint step ", step, " in ", dir);
  auto fail = [&](absl::StatusCode code, absl::string_view what) {
    return absl::Status(code, absl::StrCat(context, ": ", what));
  };
  if (step < 0) return fail(absl::StatusCode::kInvalidArgument, "negative step");
  if (auto job = metadata.find(kJobIdMetadata); job != metadata.end()) {
    absl::StatusOr<std::string> newest = FindLatestReadOnly(dir);
    if (newest.ok() && *newest != started_from) {
      absl::StatusOr<std::string> owner = CheckpointOwner(*newest);
      if (owner.ok() && *owner != job->second) {
        return fail(absl::StatusCode::kFailedPrecondition,
                    absl::StrCat("its newest checkpoint, ", *newest, ", is job ",
                                 owner->empty() ? "(unnamed)" : *owner,
                                 "'s: two jobs cannot save into one folder"));
      }
    }
  }
  const std::string staging = StagingDir(dir, step);
  const std::string final_dir = StepDir(dir, step);
  std::error_code ec;
  // Looked up beneath its root like every open: a folder swapped for a link leading outside is
  // refused as such, not looked into.
  if (const int fd = OpenConfined(staging, O_PATH | O_DIRECTORY); fd >= 0) {
    close(fd);
  } else if (errno == EXDEV) {
    return Annotate(OpenError(staging, "cannot open"), context);
  } else {
    return fail(absl::StatusCode::kFailedPrecondition,
                absl::StrCat(staging, " does not exist (no shard was written)"));
  }
  if (fs::exists(final_dir, ec)) {
    // Committed before, complete (its index is written before the rename): a process killed
    // between that rename and `latest` left it, and an attempt that resumed from an older step
    // ran the step again to the same numbers. It stands; this save's staging goes.
    absl::StatusOr<Index> existing = LoadIndex(final_dir);
    if (!existing.ok()) {
      return fail(absl::StatusCode::kAlreadyExists,
                  absl::StrCat(final_dir, " already exists and is not a committed checkpoint (",
                               existing.status().message(), "); remove it to save this step"));
    }
    (void)RemoveTree(staging);
    RETURN_IF_ERROR(Annotate(WriteFileAtomically(absl::StrCat(dir, "/", kLatestFile),
                                                 {absl::StrCat(kStepPrefix, step, "\n")}),
                             context));
    CollectGarbage(dir, keep, step);
    return absl::OkStatus();
  }
  for (const auto& [k, v] : metadata) {
    if (!IsValidUtf8(k) || !IsValidUtf8(v)) {
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
    const std::string tensor = absl::StrCat(context, ": tensor '", ic.tensor, "'");
    RETURN_IF_ERROR(Annotate(CheckDType(ic.dtype), tensor));
    if (added) {
      RETURN_IF_ERROR(Annotate(CheckShape(ic.global_shape), tensor));
      e.global_shape = ic.global_shape;
      e.dtype = ic.dtype;
    } else if (e.global_shape != ic.global_shape) {
      return fail(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("tensor '", ic.tensor, "': chunks disagree on the global shape: ",
                               Dims(e.global_shape), " from ", e.chunks.front().file, ", ",
                               Dims(ic.global_shape), " from ", ic.chunk.file));
    } else if (e.dtype != ic.dtype) {
      return fail(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("tensor '", ic.tensor, "': chunks disagree on the dtype: ",
                               SafetensorsDTypeName(e.dtype), " from ", e.chunks.front().file,
                               ", ", SafetensorsDTypeName(ic.dtype), " from ", ic.chunk.file));
    }
    RETURN_IF_ERROR(Annotate(CheckChunk(e.global_shape, e.dtype, ic.chunk), tensor));
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
    absl::StatusOr<ReadOnlyFile> shard = ReadOnlyFile::Open(path);
    if (absl::IsNotFound(shard.status())) {
      return fail(absl::StatusCode::kFailedPrecondition,
                  absl::StrCat(path, " (tensor '", n.second, "') is missing"));
    }
    if (!shard.ok()) return Annotate(shard.status(), context);
    if (shard->size() < n.first) {
      return fail(absl::StatusCode::kFailedPrecondition,
                  absl::StrCat(path, " holds ", shard->size(), " bytes but tensor '", n.second,
                               "' needs ", n.first));
    }
  }

  // Each shard stores its chunks as reported (dtype, shape, byte range): the index and the
  // shard headers, which other safetensors readers go by, say the same.
  std::map<std::string, std::vector<std::pair<const std::string*, const Chunk*>>> by_file;
  for (const auto& [name, e] : index.tensors) {
    for (const Chunk& c : e.chunks) by_file[c.file].push_back({&name, &c});
  }
  for (const auto& [file, in_file] : by_file) {
    absl::StatusOr<SafetensorsFile> shard = SafetensorsFile::Open(absl::StrCat(staging, "/", file));
    if (!shard.ok()) {
      return Annotate(shard.status(),
                      absl::StrCat(context, ": tensor '", *in_file.front().first, "'"));
    }
    for (const auto& [name, c] : in_file) {
      RETURN_IF_ERROR(Annotate(CheckShardEntry(*shard, *name, index.tensors.at(*name).dtype, *c),
                               absl::StrCat(context, ": tensor '", *name, "' in ", shard->path())));
    }
  }

  RETURN_IF_ERROR(Annotate(WriteFile(absl::StrCat(staging, "/", kIndexFile), {SerializeIndex(index)}), context));
  RETURN_IF_ERROR(Annotate(FsyncDir(staging), context));
  CrashPoint(kCoordinatorAfterIndex, step);  // crash tests (common/crash_point.h)
  RETURN_IF_ERROR(Annotate(RenamePath(staging, final_dir), context));
  RETURN_IF_ERROR(Annotate(FsyncDir(dir), context));
  CrashPoint(kCoordinatorAfterRename, step);
  RETURN_IF_ERROR(Annotate(WriteFileAtomically(absl::StrCat(dir, "/", kLatestFile),
                                               {absl::StrCat(kStepPrefix, step, "\n")}),
                           context));
  CrashPoint(kCoordinatorAfterLatest, step);
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

}  // namespace weft::checkpoint
