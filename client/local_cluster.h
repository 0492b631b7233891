// `weftctl local`: one weft-coordinator and N weft-worker child processes on 127.0.0.1, in a
// temporary folder that holds the coordinator's data, the port file and one log per child.
// Children (common/subprocess) stay in weftctl's process group, die with weftctl
// (PR_SET_PDEATHSIG) and Stop() ends them (SIGTERM, then SIGKILL after a grace period), so
// nothing outlives the command.
//
// E.g.
//   LocalCluster cluster({.ranks = 4, .coordinator_bin = c, .worker_bin = w});
//   RETURN_IF_ERROR(cluster.Start());          // returns once 4 workers are registered
//   CoordinatorClient client(cluster.address());
//   ...
//   cluster.Stop();
#ifndef WEFT_CLIENT_LOCAL_CLUSTER_H_
#define WEFT_CLIENT_LOCAL_CLUSTER_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"

namespace weft::client {

// Where a daemon binary is: flag_value if given; else, next to weftctl's own executable
// (self_exe), <dir>/../<folder>/<name> (the bazel-bin layout) then <dir>/<name>.
// NOT_FOUND lists the paths tried.
absl::StatusOr<std::string> FindDaemonBinary(
    const std::string& flag_value, const std::string& self_exe, const std::string& folder,
    const std::string& name, const std::function<bool(const std::string&)>& is_executable);

// OPENBLAS_NUM_THREADS for each of `ranks` children sharing `cpus` cores: max(1, cpus/ranks).
int ThreadsPerRank(int cpus, int ranks);

// The children's environment: the parent's, plus OPENBLAS_NUM_THREADS=threads and
// OMP_WAIT_POLICY=passive (worker/kernels/cpu/loops.h: the CPU kernels' OpenMP threads sleep
// between loops instead of spinning against OpenBLAS's), each unless the parent already sets it.
std::vector<std::string> ChildEnvironment(const std::vector<std::string>& parent_env,
                                          int threads);

// The last `lines` lines of text.
std::string TailLines(const std::string& text, int lines);

struct LocalClusterOptions {
  int ranks = 1;
  std::string device = "cpu";  // cpu, or cuda: worker r runs on cuda:r
  std::string coordinator_bin;
  std::string worker_bin;
  // --data_root and --checkpoint_root of every daemon; empty: none.
  std::string data_root;
  std::string checkpoint_root;
  bool keep_tmp = false;                // keep the folder (logs, job store) after Stop
  std::function<bool()> interrupted;    // polled while waiting; true aborts Start
  std::ostream* progress = nullptr;     // a line per milestone; null: silent
  int start_timeout_s = 60;             // for the port file and for the workers to register
  int grace_s = 5;                      // between SIGTERM and SIGKILL in Stop
};

class LocalCluster {
 public:
  explicit LocalCluster(LocalClusterOptions options);
  ~LocalCluster();  // Stop()
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // Makes the folder, writes a fresh client and worker token into it (mode 0600), starts the
  // coordinator with them, reads its port, starts the workers and waits until all of them are
  // registered. On error the children started so far keep running until
  // Stop(), so that their logs can be shown first.
  absl::Status Start();

  // "127.0.0.1:<port>" once Start has read the port file.
  const std::string& address() const { return address_; }
  // The client token Start made for the cluster (its coordinator asks every JobService call for
  // it, and the workers for a worker token of their own).
  const std::string& client_token() const { return client_token_; }
  const std::string& dir() const { return dir_; }

  // An error naming the first child that has exited (with its exit status).
  absl::Status CheckChildren();

  // "==> <log path> <==" and the last `lines` lines of each child's log.
  std::string LogTails(int lines) const;

  // Ends every child (SIGTERM, wait up to grace_s, SIGKILL), reaps them and removes the folder
  // unless keep_tmp. Idempotent.
  void Stop();

 private:
  struct Child {
    std::string name;  // coordinator, worker-0, ...
    std::string log_path;
    std::unique_ptr<Subprocess> process;
  };

  absl::Status Spawn(const std::string& name, const std::vector<std::string>& argv);
  absl::Status WaitForPort();
  absl::Status WaitForWorkers();
  bool Interrupted() const { return options_.interrupted && options_.interrupted(); }
  void Progress(const std::string& line) const;

  LocalClusterOptions options_;
  std::string dir_;
  std::string address_;
  std::string client_token_;
  std::vector<std::string> env_;
  std::vector<Child> children_;
  bool stopped_ = false;
};

}  // namespace weft::client

#endif  // WEFT_CLIENT_LOCAL_CLUSTER_H_
