// One coordinator per --data_dir: an exclusive lock (flock) on <data_dir>/weft.lock, held for
// the process's life and released by the kernel when it exits, however it exits. A second
// coordinator on the same folder would mark the first's running jobs RESTARTING in the shared
// store and wait for ever on its own; it is refused at start instead, naming the holder's pid.
//
// E.g.
//   ASSIGN_OR_RETURN(DataDirLock lock, DataDirLock::Acquire(data_dir));   // kept until exit
#ifndef WEFT_COORDINATOR_DATA_DIR_LOCK_H_
#define WEFT_COORDINATOR_DATA_DIR_LOCK_H_

#include <string>

#include "absl/status/statusor.h"

namespace weft::coordinator {

class DataDirLock {
 public:
  // FAILED_PRECONDITION when another process holds the folder's lock (naming its pid); INTERNAL
  // when the lock file cannot be opened.
  static absl::StatusOr<DataDirLock> Acquire(const std::string& data_dir);
  DataDirLock(DataDirLock&& other) noexcept;
  DataDirLock& operator=(DataDirLock&&) = delete;
  DataDirLock(const DataDirLock&) = delete;
  ~DataDirLock();

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_DATA_DIR_LOCK_H_
