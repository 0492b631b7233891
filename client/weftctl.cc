// weftctl: the command line of Weft. Submits, watches, lists and cancels jobs on a coordinator,
// `weftctl local` runs a job on a coordinator and workers it starts itself, and `weftctl plan`
// shows what each rank would do without any daemon; `weftctl ckpt` inspects, verifies and exports
// checkpoints; `weftctl data` makes and inspects token files. See UsageText()
// in cli.cc for the commands.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/ckpt.h"
#include "client/cli.h"
#include "client/coordinator_client.h"
#include "client/data.h"
#include "client/event_format.h"
#include "client/local_cluster.h"
#include "client/plan.h"
#include "client/trace_format.h"
#include "common/bearer_token.h"
#include "common/coordinator_channel.h"
#include "common/cost_profile_json.h"
#include "common/job_state.h"
#include "common/version.h"
#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/yaml.h"
#include "common/status.h"
#include "common/tls.h"
#include "planner/cost/search.h"
#include "planner/submit/submit.h"
#include "google/protobuf/util/json_util.h"

namespace weft::client {
namespace {

constexpr int kLogTailLines = 20;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "weftctl: INVALID_ARGUMENT: model.layers[1] (fc1).type: ..." and exit status 1.
int Fail(const absl::Status& status) {
  std::cerr << "weftctl: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << std::endl;
  return 1;
}

void PrintLine(const std::string& line) {
  if (line.empty()) return;
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// The spec as written, after the checks SubmitJob makes (the model is checked by planning it).
absl::StatusOr<v1::JobSpec> LoadAndValidate(const std::string& path) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(path);
  if (!spec.ok()) return spec.status();
  // A mesh.auto spec is planned by the coordinator's search, over its workers.
  if (spec->mesh().auto_parallel()) return spec;
  v1::JobSpec checked = *spec;
  absl::Status s = planner::PrepareAndPlan(&checked, "check", 0).status();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return spec;
}

// ---- Interrupts: `local` must stop its children on SIGINT/SIGTERM/SIGHUP. The signals are
// blocked in every thread and taken by one thread with sigwait, which flags the interrupt and
// cancels the watch stream in progress, so the main thread unwinds and cleans up.

std::atomic<bool> g_interrupted{false};
std::mutex g_watch_mu;
grpc::ClientContext* g_watch_ctx = nullptr;  // guarded by g_watch_mu; not owned

void BlockTerminationSignals(sigset_t* set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, set, nullptr);
}

void StartSignalThread(sigset_t set) {
  std::thread([set]() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (g_interrupted.exchange(true)) continue;
      std::cerr << "\nweftctl: " << strsignal(sig) << ": stopping the local cluster" << std::endl;
      std::lock_guard<std::mutex> lock(g_watch_mu);
      if (g_watch_ctx != nullptr) g_watch_ctx->TryCancel();
    }
  }).detach();
}

// Streams a job's events to stdout until it is final; the job's final state in *state.
absl::Status WatchAndPrint(CoordinatorClient& client, const std::string& job_id, bool json,
                           v1::JobState* state) {
  // The spec's steps, for "step 3/10": the job's record with one step is enough.
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  request.set_steps_page_size(1);
  absl::StatusOr<v1::Job> job = client.GetJobPage(request);
  if (!job.ok()) return job.status();
  const int64_t total = job->spec().train().steps();
  StepProgress progress(job->spec());
  grpc::ClientContext ctx;
  {
    std::lock_guard<std::mutex> lock(g_watch_mu);
    g_watch_ctx = &ctx;
    if (g_interrupted) ctx.TryCancel();
  }
  absl::StatusOr<WatchResult> result = client.Watch(job_id, &ctx, [&](const v1::JobEvent& e) {
    if (json) {
      PrintLine(FormatEventJson(e));
    } else {
      PrintLine(e.has_step() ? progress.Line(e.step()) : FormatEventText(e, total));
    }
  });
  {
    std::lock_guard<std::mutex> lock(g_watch_mu);
    g_watch_ctx = nullptr;
  }
  if (g_interrupted) return absl::CancelledError("interrupted");
  if (!result.ok()) return result.status();
  if (!result->final) {
    return absl::UnavailableError(absl::StrCat("the watch stream of job ", job_id,
                                               " ended before the job finished (last state ",
                                               StateName(result->state), ")"));
  }
  *state = result->state;
  return absl::OkStatus();
}

// How to reach the coordinator: the client token of --token_file (else of $WEFT_TOKEN_FILE),
// TLS with the CA of --tls_ca (else of $WEFT_TLS_CA) and --tls_server_name; each file read here,
// so that a bad one fails before any call, naming it.
absl::StatusOr<CoordinatorChannelOptions> Connection(const CommandLine& cl) {
  auto flag_or_env = [](const std::string& flag_value, const char* env) {
    const char* value = std::getenv(env);
    return !flag_value.empty() ? flag_value : std::string(value != nullptr ? value : "");
  };
  CoordinatorChannelOptions connection;
  if (const std::string path = flag_or_env(cl.token_file, "WEFT_TOKEN_FILE"); !path.empty()) {
    ASSIGN_OR_RETURN(connection.token, ReadBearerTokenFile(path));
  }
  if (const std::string path = flag_or_env(cl.tls_ca, "WEFT_TLS_CA"); !path.empty()) {
    absl::StatusOr<std::string> ca = ReadPemCertificates(path);
    if (!ca.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          cl.tls_ca.empty() ? "$WEFT_TLS_CA " : "--tls_ca ", ca.status().message()));
    }
    connection.tls_ca_pem = *std::move(ca);
  }
  if (!cl.tls_server_name.empty() && connection.tls_ca_pem.empty()) {
    return absl::InvalidArgumentError(
        "--tls_server_name needs --tls_ca (it names the certificate TLS checks)");
  }
  connection.tls_server_name = cl.tls_server_name;
  return connection;
}

// `submit`'s job id. By default the spec is checked here for its structure only and sent as
// YAML: its paths are the cluster's, which the coordinator resolves under its roots and checks.
// With --check-local-files it is read, checked and planned here against this machine's files,
// its relative paths resolved against its folder, and sent as a JobSpec.
absl::StatusOr<std::string> Submit(const CommandLine& cl, CoordinatorClient& client) {
  const std::string& path = cl.positional[0];
  if (cl.check_local_files) {
    ASSIGN_OR_RETURN(v1::JobSpec spec, LoadAndValidate(path));
    return client.Submit(spec);
  }
  ASSIGN_OR_RETURN(const std::string yaml, ReadJobSpecFile(path));
  JobSpecYamlOptions syntax_only;
  syntax_only.read_files = false;
  RETURN_IF_ERROR(Annotate(ParseJobSpecYaml(yaml, "", syntax_only).status(), path));
  absl::StatusOr<std::string> id = client.SubmitYaml(yaml, /*spec_dir=*/"");
  // The coordinator's reasons name a field of the spec: say which spec.
  if (absl::IsInvalidArgument(id.status()) || absl::IsNotFound(id.status()) ||
      absl::IsPermissionDenied(id.status()) || absl::IsResourceExhausted(id.status())) {
    return Annotate(id.status(), path);
  }
  return id;
}

int RunSubmit(const CommandLine& cl) {
  absl::StatusOr<CoordinatorChannelOptions> connection = Connection(cl);
  if (!connection.ok()) return Fail(connection.status());
  CoordinatorClient client(cl.coordinator, *connection);
  absl::StatusOr<std::string> id = Submit(cl, client);
  if (!id.ok()) return Fail(id.status());
  if (cl.json) {
    PrintLine(absl::StrCat("{\"type\":\"submitted\",\"job_id\":", JsonString(*id), "}"));
  } else {
    PrintLine(*id);
  }
  if (!cl.watch) return 0;
  v1::JobState state;
  absl::Status s = WatchAndPrint(client, *id, cl.json, &state);
  if (!s.ok()) return Fail(s);
  return state == v1::SUCCEEDED ? 0 : 1;
}

int RunGet(const CommandLine& cl) {
  absl::StatusOr<CoordinatorChannelOptions> connection = Connection(cl);
  if (!connection.ok()) return Fail(connection.status());
  CoordinatorClient client(cl.coordinator, *connection);
  absl::StatusOr<v1::Job> job = client.GetJob(cl.positional[0]);
  if (!job.ok()) return Fail(job.status());
  if (cl.json) {
    PrintLine(ProtoToJson(*job));
    return 0;
  }
  // Each rank's host, for the workers still registered (a coordinator too old to list them, or
  // one that refuses, leaves the hosts out).
  std::map<std::string, std::string> hosts;
  if (job->workers_size() > 0) {
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.ListWorkers();
    if (workers.ok()) {
      for (const v1::WorkerInfo& w : *workers) hosts[w.worker_id()] = w.host();
    }
  }
  std::cout << FormatJobDetails(*job, NowMs(), absl::LocalTimeZone(), hosts) << std::flush;
  return 0;
}

int RunList(const CommandLine& cl) {
  absl::StatusOr<CoordinatorChannelOptions> connection = Connection(cl);
  if (!connection.ok()) return Fail(connection.status());
  CoordinatorClient client(cl.coordinator, *connection);
  absl::StatusOr<JobList> list = client.ListJobs(cl.state, cl.limit);
  if (!list.ok()) return Fail(list.status());
  if (cl.json) {
    v1::ListJobsResponse resp;
    for (const v1::JobSummary& j : list->jobs) *resp.add_jobs() = j;
    PrintLine(ProtoToJson(resp));
  } else {
    std::cout << FormatJobsTable(list->jobs, NowMs()) << std::flush;
  }
  if (list->more) {
    std::cerr << "weftctl: the first " << list->jobs.size()
              << " jobs; more follow (--limit N shows N)" << std::endl;
  }
  return 0;
}

int RunCancel(const CommandLine& cl) {
  absl::StatusOr<CoordinatorChannelOptions> connection = Connection(cl);
  if (!connection.ok()) return Fail(connection.status());
  CoordinatorClient client(cl.coordinator, *connection);
  absl::StatusOr<v1::Job> job =
      client.CancelJob(cl.positional[0], cl.reason.empty() ? "cancelled by weftctl" : cl.reason);
  if (!job.ok()) return Fail(job.status());
  PrintLine(absl::StrCat(job->id(), " ", StateName(job->state())));
  return 0;
}

int RunDelete(const CommandLine& cl) {
  absl::StatusOr<CoordinatorChannelOptions> connection = Connection(cl);
  if (!connection.ok()) return Fail(connection.status());
  CoordinatorClient client(cl.coordinator, *connection);
  int failed = 0;
  for (const std::string& job_id : cl.positional) {
    absl::StatusOr<v1::Job> job = client.DeleteJob(job_id);
    if (!job.ok()) {
      failed += Fail(job.status());
      continue;
    }
    if (cl.json) {
      PrintLine(absl::StrCat("{\"type\":\"deleted\",\"job_id\":", JsonString(job->id()),
                             ",\"state\":", JsonString(StateName(job->state())), "}"));
    } else {
      PrintLine(absl::StrCat(job->id(), " deleted (", StateName(job->state()), ")"));
    }
  }
  return failed == 0 ? 0 : 1;
}

int RunWatch(const CommandLine& cl) {
  absl::StatusOr<CoordinatorChannelOptions> connection = Connection(cl);
  if (!connection.ok()) return Fail(connection.status());
  CoordinatorClient client(cl.coordinator, *connection);
  v1::JobState state;
  absl::Status s = WatchAndPrint(client, cl.positional[0], cl.json, &state);
  if (!s.ok()) return Fail(s);
  return state == v1::SUCCEEDED ? 0 : 1;
}

// `weftctl logs --follow` reads again from this long before the last line it printed: a rank's
// lines reach the coordinator up to a flush (250 ms) after they were logged, later than other
// ranks' lines logged after them (or a worker's clock runs behind).
constexpr int64_t kFollowOverlapMs = 10000;

int RunLogs(const CommandLine& cl) {
  absl::StatusOr<CoordinatorChannelOptions> connection = Connection(cl);
  if (!connection.ok()) return Fail(connection.status());
  CoordinatorClient client(cl.coordinator, *connection);
  v1::GetJobLogsRequest request;
  request.set_job_id(cl.positional[0]);
  if (cl.rank >= 0) request.set_rank(cl.rank);
  if (cl.attempt >= 0) request.set_attempt(cl.attempt);
  const absl::TimeZone local = absl::LocalTimeZone();
  // Lines of one rank's attempt are numbered in the order they arrive: a line is new when its
  // number is above the last printed of its rank's attempt.
  std::map<std::pair<int, int>, int64_t> printed;
  int64_t latest_ms = 0;
  auto print = [&](const v1::JobLogLine& line) {
    int64_t& last = printed[{line.attempt(), line.rank()}];
    if (line.seq() <= last) return;
    last = line.seq();
    latest_ms = std::max(latest_ms, line.time_ms());
    PrintLine(cl.json ? FormatLogLineJson(line) : FormatLogLineText(line, local));
  };
  if (!cl.follow) {
    const absl::Status s = client.ReadJobLogs(request, print);
    return s.ok() ? 0 : Fail(s);
  }
  while (true) {
    // The state first: the lines read after a final state include every line logged before it.
    v1::GetJobRequest get;
    get.set_job_id(request.job_id());
    get.set_steps_page_size(1);
    absl::StatusOr<v1::Job> job = client.GetJobPage(get);
    if (!job.ok()) return Fail(job.status());
    request.set_since_ms(std::max<int64_t>(0, latest_ms - kFollowOverlapMs));
    const absl::Status s = client.ReadJobLogs(request, print);
    if (!s.ok()) return Fail(s);
    if (IsFinalState(job->state())) return 0;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int RunTrace(const CommandLine& cl) {
  absl::StatusOr<CoordinatorChannelOptions> connection = Connection(cl);
  if (!connection.ok()) return Fail(connection.status());
  CoordinatorClient client(cl.coordinator, *connection);
  absl::StatusOr<v1::JobTrace> trace = client.GetJobTrace(cl.positional[0]);
  if (!trace.ok()) return Fail(trace.status());
  absl::Status s = WriteChromeTrace(*trace, cl.positional[1]);
  if (!s.ok()) return Fail(s);
  PrintLine(absl::StrCat("wrote ", cl.positional[1], ": ", TraceSummary(*trace)));
  return 0;
}

int RunWorkers(const CommandLine& cl) {
  absl::StatusOr<CoordinatorChannelOptions> connection = Connection(cl);
  if (!connection.ok()) return Fail(connection.status());
  CoordinatorClient client(cl.coordinator, *connection);
  absl::StatusOr<v1::ListWorkersResponse> resp = client.ListWorkersAndProfiles();
  if (!resp.ok()) return Fail(resp.status());
  if (cl.json) {
    PrintLine(ProtoToJson(*resp));
  } else {
    const std::vector<v1::WorkerInfo> workers(resp->workers().begin(), resp->workers().end());
    const std::vector<v1::CostProfile> profiles(resp->profiles().begin(), resp->profiles().end());
    std::cout << FormatWorkersTable(workers, NowMs()) << FormatCostProfiles(profiles, workers)
              << std::flush;
  }
  return 0;
}

int RunCalibrate(const CommandLine& cl) {
  absl::StatusOr<v1::CostProfile> profile = ReadCostProfile(cl.positional[0]);
  if (!profile.ok()) return Fail(profile.status());
  absl::StatusOr<CoordinatorChannelOptions> connection = Connection(cl);
  if (!connection.ok()) return Fail(connection.status());
  CoordinatorClient client(cl.coordinator, *connection);
  absl::StatusOr<v1::CostProfile> stored = client.PutCostProfile(*profile);
  if (!stored.ok()) {
    return Fail(absl::Status(stored.status().code(), absl::StrCat(cl.positional[0], ": ",
                                                                  stored.status().message())));
  }
  std::cout << FormatCostProfiles({*stored}, {}) << std::flush;
  return 0;
}

bool IsExecutable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::string SelfExe(const char* argv0) {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) return std::string(buf, n);
  return argv0;
}

int RunLocal(const CommandLine& cl, const char* argv0) {
  sigset_t signals;
  BlockTerminationSignals(&signals);
  StartSignalThread(signals);

  absl::StatusOr<v1::JobSpec> spec = LoadAndValidate(cl.positional[0]);
  if (!spec.ok()) return Fail(spec.status());
  if (!cl.trace.empty()) spec->set_trace(true);
  if (!cl.device.empty()) spec->set_device(cl.device);
  const int64_t world = WorldSize(*spec);
  const int ranks = cl.ranks > 0 ? cl.ranks : static_cast<int>(world);
  if (world != ranks) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        cl.positional[0], ": mesh: shape [", absl::StrJoin(spec->mesh().shape(), ","), "] has ",
        world, " ranks, but --ranks is ", ranks, " (one worker per rank)")));
  }
  const std::string self = SelfExe(argv0);
  absl::StatusOr<std::string> coordinator_bin =
      FindDaemonBinary(cl.coordinator_bin, self, "coordinator", "weft-coordinator", IsExecutable);
  if (!coordinator_bin.ok()) return Fail(coordinator_bin.status());
  absl::StatusOr<std::string> worker_bin =
      FindDaemonBinary(cl.worker_bin, self, "worker", "weft-worker", IsExecutable);
  if (!worker_bin.ok()) return Fail(worker_bin.status());

  LocalClusterOptions options;
  options.ranks = ranks;
  options.device = spec->device();
  options.coordinator_bin = *coordinator_bin;
  options.worker_bin = *worker_bin;
  options.keep_tmp = cl.keep_tmp;
  // The daemons are confined to the spec's folder unless told otherwise: a job reads its data
  // and writes its checkpoints beside its spec.
  auto absolute = [](const std::string& path) {
    return std::filesystem::absolute(path).lexically_normal().string();
  };
  const std::string spec_folder =
      std::filesystem::path(absolute(cl.positional[0])).parent_path().string();
  options.data_root = cl.data_root.empty() ? spec_folder : absolute(cl.data_root);
  options.checkpoint_root =
      cl.checkpoint_root.empty() ? spec_folder : absolute(cl.checkpoint_root);
  options.interrupted = []() { return g_interrupted.load(); };
  options.progress = &std::cerr;
  LocalCluster cluster(options);

  // Any failure: say why, show the children's logs, stop them.
  auto fail = [&](const absl::Status& s) {
    if (g_interrupted) {
      cluster.Stop();
      std::cerr << "weftctl: interrupted" << std::endl;
      return 130;
    }
    Fail(s);
    std::cerr << cluster.LogTails(kLogTailLines);
    if (!cl.keep_tmp) std::cerr << "weftctl: rerun with --keep_tmp to keep the logs" << std::endl;
    cluster.Stop();
    return 1;
  };

  absl::Status s = cluster.Start();
  if (!s.ok()) return fail(s);
  CoordinatorClient client(cluster.address(), {cluster.client_token()});
  absl::StatusOr<std::string> id = client.Submit(*spec);
  if (!id.ok()) return fail(id.status());
  std::cerr << "weftctl: submitted job " << *id << " (" << spec->name() << ", " << ranks
            << " rank(s))" << std::endl;
  // --trace: the timeline, whatever became of the job, with what the coordinator holds.
  auto write_trace = [&]() -> absl::Status {
    if (cl.trace.empty()) return absl::OkStatus();
    absl::StatusOr<v1::JobTrace> trace = client.GetJobTrace(*id);
    if (!trace.ok()) return Annotate(trace.status(), "fetching the trace");
    RETURN_IF_ERROR(WriteChromeTrace(*trace, cl.trace));
    std::cerr << "weftctl: wrote the trace to " << cl.trace << " (" << TraceSummary(*trace) << ")"
              << std::endl;
    return absl::OkStatus();
  };
  auto try_write_trace = [&] {
    absl::Status t = write_trace();
    if (!t.ok()) std::cerr << "weftctl: no trace written: " << t.message() << std::endl;
  };
  const auto start = std::chrono::steady_clock::now();
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  s = WatchAndPrint(client, *id, cl.json, &state);
  if (g_interrupted) {
    (void)client.CancelJob(*id, "weftctl local was interrupted");
    try_write_trace();
    return fail(absl::CancelledError("interrupted"));
  }
  if (!s.ok()) {
    try_write_trace();
    // The stream broke: a dead coordinator or worker is the likely cause.
    absl::Status children = cluster.CheckChildren();
    if (!children.ok()) s = Annotate(s, children.ToString());
    return fail(s);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (state != v1::SUCCEEDED) {
    try_write_trace();
    std::cerr << "weftctl: job " << *id << " " << StateName(state) << "\n"
              << cluster.LogTails(kLogTailLines);
    if (!cl.keep_tmp) std::cerr << "weftctl: rerun with --keep_tmp to keep the logs" << std::endl;
    cluster.Stop();
    return 1;
  }
  std::cerr << "weftctl: job " << *id << " SUCCEEDED in " << absl::StrFormat("%.1f", seconds)
            << " s" << std::endl;
  s = write_trace();
  if (!s.ok()) return fail(s);
  cluster.Stop();
  return 0;
}

int RunAutoPlan(const CommandLine& cl) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(cl.positional[0]);
  if (!spec.ok()) return Fail(spec.status());
  absl::StatusOr<v1::CostProfile> profile = ReadCostProfile(cl.profile);
  if (!profile.ok()) return Fail(profile.status());
  planner::cost::SearchOptions options;
  // --ranks, else mesh.ranks (auto), else the written mesh's size.
  options.ranks = static_cast<int>(cl.ranks > 0                   ? cl.ranks
                                   : spec->mesh().auto_parallel() ? spec->mesh().ranks()
                                                                  : WorldSize(*spec));
  if (options.ranks == 0) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        cl.positional[0], ": mesh.auto without mesh.ranks: say how many with --ranks N")));
  }
  options.host_of_slot = cl.hosts;
  options.memory_bytes = cl.memory_bytes;
  absl::StatusOr<planner::cost::SearchResult> result =
      planner::cost::SearchStrategies(*spec, options, *profile);
  if (!result.ok()) {
    return Fail(absl::Status(result.status().code(),
                             absl::StrCat(cl.positional[0], ": ", result.status().message())));
  }
  std::cout << (cl.json ? planner::cost::FormatSearchJson(*result)
                        : planner::cost::FormatSearch(*result))
            << std::flush;
  return 0;
}

int RunPlan(const CommandLine& cl) {
  if (cl.auto_search) return RunAutoPlan(cl);
  absl::StatusOr<PlannedJob> job = PlanSpecFile(cl.positional[0], cl.list_ranks, cl.list_all_ranks);
  if (!job.ok()) return Fail(job.status());
  std::cout << (cl.json ? FormatPlanJson(*job) + "\n" : FormatPlanText(*job)) << std::flush;
  return 0;
}

int RunCkpt(const CommandLine& cl) {
  const std::string& sub = cl.positional[0];
  absl::StatusOr<std::string> step_dir = checkpoint::ResolveStepDir(cl.positional[1]);
  if (!step_dir.ok()) return Fail(step_dir.status());
  absl::StatusOr<checkpoint::CheckpointReader> reader =
      checkpoint::CheckpointReader::Open(*step_dir);
  if (!reader.ok()) return Fail(reader.status());
  if (sub == "inspect") {
    std::cout << (cl.json ? FormatCheckpointJson(*reader) + "\n" : FormatCheckpointText(*reader))
              << std::flush;
    return 0;
  }
  if (sub == "verify") {
    int64_t bytes = 0;
    const std::vector<absl::Status> problems = reader->VerifyEach(&bytes);
    for (const absl::Status& s : problems) Fail(s);
    if (!problems.empty()) {
      std::cerr << "weftctl: " << *step_dir << ": " << problems.size() << " problem(s)"
                << std::endl;
      return 1;
    }
    PrintLine(absl::StrCat(*step_dir, ": OK: ", reader->index().tensors.size(), " tensor(s), ",
                           bytes, " bytes checked"));
    return 0;
  }
  ExportOptions options;
  options.format = cl.format == "hf" ? ExportOptions::Format::kHf : ExportOptions::Format::kWeft;
  options.with_optimizer = cl.with_optimizer;
  absl::StatusOr<ExportSummary> summary = ExportCheckpoint(*reader, cl.positional[2], options);
  if (!summary.ok()) return Fail(summary.status());
  std::string line = absl::StrCat("wrote ", cl.positional[2], ": ", summary->tensors,
                                  " tensor(s) from ", *step_dir);
  if (!summary->config_path.empty()) {
    absl::StrAppend(&line, " in Hugging Face's layout, and ", summary->config_path);
  }
  if (summary->optimizer_states_left_out > 0) {
    const bool hf = options.format == ExportOptions::Format::kHf;
    absl::StrAppend(&line, " (", summary->optimizer_states_left_out,
                    " optimizer state(s) left out", hf ? ")" : "; --with-optimizer writes them)");
  }
  PrintLine(line);
  return 0;
}

int RunData(const CommandLine& cl) {
  if (cl.positional[0] == "tokenize") {
    const std::vector<std::string> in(cl.positional.begin() + 1, cl.positional.end() - 1);
    const std::string& out = cl.positional.back();
    absl::StatusOr<TokenSplit> split = TokenizeBytesSplit(in, out, cl.holdout, cl.holdout_out);
    if (!split.ok()) return Fail(split.status());
    const std::string from = in.size() == 1 ? in[0] : absl::StrCat(in.size(), " files");
    PrintLine(absl::StrCat("wrote ", out, ": ", split->train, " tokens (llmc, byte-level, vocab ",
                           kByteVocabSize, ") from ", from));
    if (split->holdout > 0) {
      PrintLine(absl::StrCat("wrote ", cl.holdout_out, ": ", split->holdout,
                             " tokens held out (the last ", cl.holdout, " of them)"));
    }
    return 0;
  }
  absl::StatusOr<TokenFormat> format = ParseTokenFormat(cl.format);
  if (!format.ok()) return Fail(Annotate(format.status(), "--format"));
  absl::StatusOr<TokenFile> file = TokenFile::Open(cl.positional[1], *format);
  if (!file.ok()) return Fail(file.status());
  absl::StatusOr<std::string> text = FormatTokenFileText(*file);
  if (!text.ok()) return Fail(text.status());
  std::cout << *text << std::flush;
  return 0;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<CommandLine> cl =
      ParseCommandLine(args, DefaultCoordinator(std::getenv("WEFT_COORDINATOR")));
  if (!cl.ok()) {
    std::cerr << "weftctl: " << cl.status().message() << "\n\n" << UsageText();
    return 2;
  }
  if (cl->help || cl->command == "help") {
    std::cout << UsageText();
    return 0;
  }
  if (cl->version || cl->command == "version") {
    std::cout << VersionLine("weftctl") << "\n";
    return 0;
  }
  if (cl->command == "submit") return RunSubmit(*cl);
  if (cl->command == "get") return RunGet(*cl);
  if (cl->command == "list") return RunList(*cl);
  if (cl->command == "cancel") return RunCancel(*cl);
  if (cl->command == "delete") return RunDelete(*cl);
  if (cl->command == "watch") return RunWatch(*cl);
  if (cl->command == "logs") return RunLogs(*cl);
  if (cl->command == "workers") return RunWorkers(*cl);
  if (cl->command == "calibrate") return RunCalibrate(*cl);
  if (cl->command == "local") return RunLocal(*cl, argv[0]);
  if (cl->command == "plan") return RunPlan(*cl);
  if (cl->command == "trace") return RunTrace(*cl);
  if (cl->command == "ckpt") return RunCkpt(*cl);
  if (cl->command == "data") return RunData(*cl);
  std::cerr << "weftctl: unknown command " << cl->command << "\n";
  return 2;
}

}  // namespace
}  // namespace weft::client

int main(int argc, char** argv) { return weft::client::Main(argc, argv); }
