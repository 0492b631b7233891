// weftctl's command line: a subcommand, its positional arguments and flags, parsed by hand so
// that flags may come before or after the subcommand (`weftctl --json watch J` and
// `weftctl watch J --json` mean the same) and a flag given to a command that does not take it
// is an error instead of being ignored.
//
// E.g.
//   ASSIGN_OR_RETURN(CommandLine cl, ParseCommandLine({"local", "--ranks", "4", "job.yaml"},
//                                                    /*default_coordinator=*/"127.0.0.1:7070"));
//   // cl.command == "local", cl.ranks == 4, cl.positional == {"job.yaml"}
#ifndef WEFT_CLIENT_CLI_H_
#define WEFT_CLIENT_CLI_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weft/v1/job.pb.h"

namespace weft::client {

inline constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";
// `list` shows at most this many jobs unless --limit says otherwise.
inline constexpr int kDefaultListLimit = 100;

struct CommandLine {
  std::string command;  // submit | get | list | cancel | delete | watch | logs | workers |
                        // calibrate | local | plan | trace | ckpt | data | help | version
  // ckpt: positional[0] is inspect | verify | export; data: tokenize | inspect; each checked
  // with its arguments.
  std::vector<std::string> positional;  // after the command
  std::string coordinator;              // HOST:PORT
  std::string token_file;               // the client token (else $WEFT_TOKEN_FILE)
  std::string tls_ca;                   // the CA for TLS (else $WEFT_TLS_CA)
  std::string tls_server_name;          // the name the coordinator's certificate holds
  bool json = false;
  bool watch = false;                   // submit
  // submit: resolve relative paths against SPEC's folder and check the files here (the cluster
  // sees them at the same paths) rather than leaving the paths to the cluster.
  bool check_local_files = false;
  int ranks = 0;                        // local; 0: the spec's world size
  std::string coordinator_bin;          // local
  std::string worker_bin;               // local
  bool keep_tmp = false;                // local: keep the temporary folder and its logs
  std::string data_root;                // local: the daemons' --data_root (default: SPEC's folder)
  std::string checkpoint_root;          // local: their --checkpoint_root (default: SPEC's folder)
  std::string trace;                    // local: record a timeline and write it to this file
  std::string device;                   // local: cpu | cuda, overrides the spec's device
  std::string reason;                   // cancel
  int limit = kDefaultListLimit;        // list: at most this many jobs
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;  // list: only jobs in this state (else all)
  int rank = -1;                        // logs: only this rank's lines; -1: every rank's
  int attempt = -1;                     // logs: only this attempt's; -1: every attempt's
  bool follow = false;                  // logs: poll for new lines until the job is final
  bool bytes = false;                   // data tokenize: byte-level tokens (the only tokenizer)
  // data tokenize: the last `holdout` of the tokens (0: none) go to holdout_out instead of OUT.
  double holdout = 0;
  std::string holdout_out;
  std::string format;                   // data inspect: llmc | raw_u16 | megatron; ckpt export:
                                        // weft | hf
  bool with_optimizer = false;          // ckpt export: the optimizer states too
  // plan: the ranks listed in full (empty: the default, every rank of up to 16, else one per
  // pipeline stage); list_all_ranks: every rank.
  std::vector<int> list_ranks;
  bool list_all_ranks = false;
  // plan --auto: search the strategies for `ranks` (0: the spec's mesh size) on workers of
  // these hosts (one entry per worker; empty: all on one host), priced by the cost profile in
  // `profile`, within memory_bytes per worker (0: the profile's, else no limit).
  bool auto_search = false;
  std::vector<std::string> hosts;
  std::string profile;
  int64_t memory_bytes = 0;
  bool help = false;
  bool version = false;  // --version (any command): print the version and exit
};

// The coordinator address to use when --coordinator is absent: $WEFT_COORDINATOR if set and
// non-empty, else 127.0.0.1:7070.
std::string DefaultCoordinator(const char* env_value);

// args excludes argv[0]. Checks the command exists, its positional count, and that every flag
// applies to it.
absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const std::string& default_coordinator);

// The help text printed by `weftctl help` and on usage errors.
std::string UsageText();

}  // namespace weft::client

#endif  // WEFT_CLIENT_CLI_H_
