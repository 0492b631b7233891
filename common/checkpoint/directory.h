// The checkpoint folder protocol. A checkpoint is <dir>/step-<N>/: the shard files and
// index.json. Shards are written into <dir>/.tmp-step-<N>/ and fsynced; CommitCheckpoint writes
// index.json last, fsyncs it and the folder, renames the folder to step-<N>, fsyncs <dir>, then
// replaces <dir>/latest by write-then-rename, and only then removes checkpoints beyond `keep`.
// A reader never sees a half checkpoint: a folder without a valid index is never loaded, and
// leftover .tmp-step-* folders are ignored (and removed by FindLatest).
//
// E.g.
//   // On the coordinator, once every writing rank reported its chunks:
//   RETURN_IF_ERROR(CommitCheckpoint(dir, step, all_chunks, /*keep=*/3));
//   ASSIGN_OR_RETURN(std::string latest, FindLatest(dir));   // <dir>/step-<step>
#ifndef WEFT_COMMON_CHECKPOINT_DIRECTORY_H_
#define WEFT_COMMON_CHECKPOINT_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint/index.h"
#include "common/checkpoint/shard.h"

namespace weft::checkpoint {

// Whether `dir` may be a job's checkpoint.dir: it does not exist yet, or it is a folder holding
// only what Weft writes there (step-<N> and .tmp-step-* folders, `latest` naming a step, its
// temporary copies). Otherwise INVALID_ARGUMENT naming the folder and the first foreign
// entries, so a save never overwrites a user's file (a `latest` of their own, say).
absl::Status CheckFolderIsWefts(const std::string& dir);

// The index metadata naming the job that saved a checkpoint (the coordinator sets it on every
// commit; CommitCheckpoint and a restarted job's resume go by it).
inline constexpr char kJobIdMetadata[] = "job_id";

// <dir>/.tmp-step-<N>
std::string StagingDir(const std::string& dir, int64_t step);
// <dir>/step-<N>
std::string StepDir(const std::string& dir, int64_t step);

// Builds the index from every rank's chunks, then runs the commit protocol above. Errors name
// the tensor: chunks that disagree on the global shape or the dtype, overlap or do not cover
// it; a chunk whose shard file is missing, too short, or stores it otherwise (dtype, shape,
// byte range) than reported.
//
// One job's folder: with metadata's "job_id" set, the folder's newest committed checkpoint must
// be that job's own or `started_from` (the step folder the job resumed or took its parameters
// from), else FAILED_PRECONDITION naming the job that owns it: another job saving into the folder
// would repoint its `latest` and `keep` would delete its steps.
absl::Status CommitCheckpoint(const std::string& dir, int64_t step,
                              const std::vector<IndexedChunk>& chunks, int keep,
                              const std::map<std::string, std::string>& metadata = {},
                              const std::string& started_from = "");

// The job that wrote the step folder's checkpoint (its index's "job_id"); empty when it names
// none (a checkpoint written outside a job).
absl::StatusOr<std::string> CheckpointOwner(const std::string& step_dir);

// The newest committed checkpoint folder in dir: the highest step-<N> with a valid index, found
// from <dir>/latest when that names a valid one and no newer valid step exists (a commit killed
// after its rename, before it replaced `latest`). NOT_FOUND when there is none. Removes leftover
// staging folders.
absl::StatusOr<std::string> FindLatest(const std::string& dir);

// FindLatest without removing anything, for readers that may run beside a save in progress
// (weftctl ckpt): staging folders are only ignored.
absl::StatusOr<std::string> FindLatestReadOnly(const std::string& dir);

// `dir` itself when it holds index.json (a step folder), else FindLatestReadOnly(dir): what a
// user means by naming a checkpoint (weftctl ckpt, a spec's init_from).
absl::StatusOr<std::string> ResolveStepDir(const std::string& dir);

namespace internal {

// The step folder's index, parsed and checked (checksum, version, structure, its step equal to
// the folder's). This is what makes a folder a committed checkpoint.
absl::StatusOr<Index> LoadIndex(const std::string& step_dir);

}  // namespace internal
}  // namespace weft::checkpoint

#endif  // WEFT_COMMON_CHECKPOINT_DIRECTORY_H_
