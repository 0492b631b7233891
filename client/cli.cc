#include "client/cli.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "common/byte_size.h"
#include "common/status.h"

namespace weft::client {
namespace {

// Checks a command's arguments beyond their count (a ckpt or data subcommand's), with the flags
// applied.
using CommandCheck = absl::Status (*)(const CommandLine& cl);

absl::Status CheckCkpt(const CommandLine& cl);
absl::Status CheckData(const CommandLine& cl);

struct CommandInfo {
  int min_positional;
  int max_positional;
  const char* positional_name;  // for errors: "SPEC", "JOB"
  CommandCheck check = nullptr;
};

const std::map<std::string, CommandInfo>& Commands() {
  static const auto* commands = new std::map<std::string, CommandInfo>{
      {"submit", {1, 1, "SPEC"}}, {"get", {1, 1, "JOB"}},     {"list", {0, 0, ""}},
      {"cancel", {1, 1, "JOB"}},  {"watch", {1, 1, "JOB"}},   {"workers", {0, 0, ""}},
      {"delete", {1, 1000, "JOB..."}},
      {"logs", {1, 1, "JOB"}},
      {"local", {1, 1, "SPEC"}},  {"plan", {1, 1, "SPEC"}},    {"help", {0, 1, "COMMAND"}},
      {"version", {0, 0, ""}},
      {"calibrate", {1, 1, "PROFILE"}},
      {"trace", {2, 2, "JOB FILE"}},
      {"ckpt", {2, 3, "inspect|verify DIR or export DIR OUT", CheckCkpt}},
      {"data", {2, 1001, "tokenize --bytes IN... OUT or inspect FILE", CheckData}},
  };
  return *commands;
}

// Sets a flag's field of `cl` from its value ("true" for a flag given without one); errors name
// the flag. The command is known by then (cl->command, empty when none was given).
using FlagSetter = std::function<absl::Status(const std::string& name, const std::string& value,
                                              CommandLine* cl)>;

struct FlagInfo {
  bool takes_value;
  std::set<std::string> commands;  // empty: every command
  FlagSetter set;
};

absl::StatusOr<bool> ParseBoolValue(const std::string& flag, const std::string& value) {
  const std::string v = absl::AsciiStrToLower(value);
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": expected true or false, got \"", value, "\""));
}

// A job state by its name in any case ("running", "RUNNING"); an error lists the names.
absl::StatusOr<v1::JobState> ParseJobState(const std::string& value) {
  v1::JobState state;
  if (v1::JobState_Parse(absl::AsciiStrToUpper(value), &state) &&
      state != v1::JOB_STATE_UNSPECIFIED) {
    return state;
  }
  std::vector<std::string> names;
  const google::protobuf::EnumDescriptor* states = v1::JobState_descriptor();
  for (int i = 0; i < states->value_count(); ++i) {
    if (states->value(i)->number() != v1::JOB_STATE_UNSPECIFIED) {
      names.push_back(states->value(i)->name());
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("--state: unknown job state \"", value,
                                                 "\"; known: ", absl::StrJoin(names, ", ")));
}

// The setters most flags share: a boolean, any text, text that must not be empty (`what` it must
// be: "--token_file: must be a file"), and presence alone (--help, --version).
FlagSetter SetBool(bool CommandLine::*field) {
  return [field](const std::string& name, const std::string& value, CommandLine* cl) {
    ASSIGN_OR_RETURN(cl->*field, ParseBoolValue(name, value));
    return absl::OkStatus();
  };
}
FlagSetter SetText(std::string CommandLine::*field) {
  return [field](const std::string&, const std::string& value, CommandLine* cl) {
    cl->*field = value;
    return absl::OkStatus();
  };
}
FlagSetter SetNonEmpty(std::string CommandLine::*field, const char* what) {
  return [field, what](const std::string& name, const std::string& value, CommandLine* cl) {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", what));
    cl->*field = value;
    return absl::OkStatus();
  };
}
FlagSetter SetPresent(bool CommandLine::*field) {
  return [field](const std::string&, const std::string&, CommandLine* cl) {
    cl->*field = true;
    return absl::OkStatus();
  };
}

absl::Status SetOutput(const std::string&, const std::string& value, CommandLine* cl) {
  if (value != "json") {
    return absl::InvalidArgumentError(absl::StrCat(
        "-o/--output: \"", value, "\" is not an output format; weftctl has json (-o json, "
        "the same as --json) and, without the flag, text"));
  }
  cl->json = true;
  return absl::OkStatus();
}

absl::Status SetHoldout(const std::string&, const std::string& value, CommandLine* cl) {
  double f = 0;
  if (!absl::SimpleAtod(value, &f) || !(f > 0 && f < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--holdout: the held-out fraction of the tokens, a number in (0, 1), got \"", value,
        "\""));
  }
  cl->holdout = f;
  return absl::OkStatus();
}

absl::Status SetFormat(const std::string&, const std::string& value, CommandLine* cl) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--format: needs ", cl->command == "ckpt" ? "weft or hf" : "llmc, raw_u16 or megatron"));
  }
  cl->format = value;
  return absl::OkStatus();
}

absl::Status SetRanks(const std::string&, const std::string& value, CommandLine* cl) {
  if (!absl::SimpleAtoi(value, &cl->ranks) || cl->ranks <= 0 || cl->ranks > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks: expected a number of ranks in 1..1024, got \"", value, "\""));
  }
  return absl::OkStatus();
}

// --hosts 2x4 (2 hosts of 4 workers: h0 h0 h0 h0 h1 ...) or a:2,b:2 (hosts by name).
absl::Status SetHosts(const std::string&, const std::string& value, CommandLine* cl) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "--hosts: expected HOSTSxWORKERS (2x4) or NAME:WORKERS,... (a:2,b:2), got \"", value,
        "\""));
  };
  cl->hosts.clear();
  std::vector<std::string> parts = absl::StrSplit(value, 'x');
  int hosts = 0, workers = 0;
  if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &hosts) &&
      absl::SimpleAtoi(parts[1], &workers)) {
    if (hosts < 1 || workers < 1 || hosts * static_cast<int64_t>(workers) > 65536) return bad();
    for (int h = 0; h < hosts; ++h) {
      for (int w = 0; w < workers; ++w) cl->hosts.push_back(absl::StrCat("h", h));
    }
    return absl::OkStatus();
  }
  for (absl::string_view entry : absl::StrSplit(value, ',')) {
    std::vector<std::string> kv = absl::StrSplit(entry, ':');
    if (kv.size() != 2 || kv[0].empty() || !absl::SimpleAtoi(kv[1], &workers) || workers < 1 ||
        cl->hosts.size() + workers > 65536) {
      return bad();
    }
    for (int w = 0; w < workers; ++w) cl->hosts.push_back(kv[0]);
  }
  return absl::OkStatus();
}

// --memory 512MiB, 2GiB, 80GB or a number of bytes (common/byte_size.h).
absl::Status SetMemory(const std::string&, const std::string& value, CommandLine* cl) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(value);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory: bytes per worker: ", bytes.status().message()));
  }
  cl->memory_bytes = *bytes;
  return absl::OkStatus();
}

absl::Status SetLimit(const std::string&, const std::string& value, CommandLine* cl) {
  if (!absl::SimpleAtoi(value, &cl->limit) || cl->limit <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--limit: expected a number of jobs, at least 1, got \"", value, "\""));
  }
  return absl::OkStatus();
}

// --rank and --attempt: a number, 0 or more.
absl::Status SetRankOrAttempt(const std::string& name, const std::string& value,
                              CommandLine* cl) {
  int* field = name == "rank" ? &cl->rank : &cl->attempt;
  if (!absl::SimpleAtoi(value, field) || *field < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, ": expected a", name == "rank" ? " rank" : "n attempt",
        " (0 or more), got \"", value, "\""));
  }
  return absl::OkStatus();
}

absl::Status SetState(const std::string&, const std::string& value, CommandLine* cl) {
  ASSIGN_OR_RETURN(cl->state, ParseJobState(value));
  return absl::OkStatus();
}

absl::Status SetDevice(const std::string&, const std::string& value, CommandLine* cl) {
  if (value != "cpu" && value != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: expected cpu or cuda, got \"", value, "\""));
  }
  cl->device = value;
  return absl::OkStatus();
}

absl::Status SetListRanks(const std::string&, const std::string& value, CommandLine* cl) {
  if (value == "all") {
    cl->list_all_ranks = true;
    return absl::OkStatus();
  }
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    int rank;
    if (!absl::SimpleAtoi(part, &rank) || rank < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--list_ranks: expected all or ranks like 0,5,9, got \"", value, "\""));
    }
    cl->list_ranks.push_back(rank);
  }
  return absl::OkStatus();
}

// The commands that call a coordinator given by --coordinator, with its credentials.
const std::set<std::string>& ConnectingCommands() {
  static const auto* commands = new std::set<std::string>{
      "submit", "get", "list", "cancel", "delete", "watch", "logs", "workers", "trace",
      "calibrate"};
  return *commands;
}

// Every flag: whether it takes a value, the commands it applies to, and how it sets its field.
const std::map<std::string, FlagInfo>& Flags() {
  using C = CommandLine;
  static const std::set<std::string> output_commands = {
      "submit", "get", "list", "delete", "watch", "logs", "workers", "local", "plan", "ckpt"};
  static const auto* flags = new std::map<std::string, FlagInfo>{
      {"coordinator", {true, {}, SetNonEmpty(&C::coordinator, "must be HOST:PORT")}},
      {"token_file", {true, ConnectingCommands(), SetNonEmpty(&C::token_file, "must be a file")}},
      {"tls_ca", {true, ConnectingCommands(), SetNonEmpty(&C::tls_ca, "must be a file")}},
      {"tls_server_name",
       {true, ConnectingCommands(), SetNonEmpty(&C::tls_server_name, "must be a name")}},
      {"json", {false, output_commands, SetBool(&C::json)}},
      {"output", {true, output_commands, SetOutput}},
      {"watch", {false, {"submit"}, SetBool(&C::watch)}},
      {"check_local_files", {false, {"submit"}, SetBool(&C::check_local_files)}},
      {"ranks", {true, {"local", "plan"}, SetRanks}},
      {"auto", {false, {"plan"}, SetBool(&C::auto_search)}},
      {"hosts", {true, {"plan"}, SetHosts}},
      {"profile", {true, {"plan"}, SetNonEmpty(&C::profile, "must be a cost profile file")}},
      {"memory", {true, {"plan"}, SetMemory}},
      {"coordinator_bin", {true, {"local"}, SetText(&C::coordinator_bin)}},
      {"worker_bin", {true, {"local"}, SetText(&C::worker_bin)}},
      {"keep_tmp", {false, {"local"}, SetBool(&C::keep_tmp)}},
      {"data_root", {true, {"local"}, SetText(&C::data_root)}},
      {"checkpoint_root", {true, {"local"}, SetText(&C::checkpoint_root)}},
      {"trace", {true, {"local"}, SetNonEmpty(&C::trace, "needs a FILE to write")}},
      {"device", {true, {"local"}, SetDevice}},
      {"reason", {true, {"cancel"}, SetText(&C::reason)}},
      {"limit", {true, {"list"}, SetLimit}},
      {"state", {true, {"list"}, SetState}},
      {"rank", {true, {"logs"}, SetRankOrAttempt}},
      {"attempt", {true, {"logs"}, SetRankOrAttempt}},
      {"follow", {false, {"logs"}, SetBool(&C::follow)}},
      {"bytes", {false, {"data"}, SetBool(&C::bytes)}},
      {"holdout", {true, {"data"}, SetHoldout}},
      {"holdout_out", {true, {"data"}, SetNonEmpty(&C::holdout_out, "must be a file")}},
      {"format", {true, {"data", "ckpt"}, SetFormat}},
      {"with_optimizer", {false, {"ckpt"}, SetBool(&C::with_optimizer)}},
      {"list_ranks", {true, {"plan"}, SetListRanks}},
      {"help", {false, {}, SetPresent(&C::help)}},
      {"version", {false, {}, SetPresent(&C::version)}},
  };
  return *flags;
}

// A flag as given, before it is checked against the command: its name (dashes as underscores)
// and its value ("true" for a flag given without one).
struct GivenFlag {
  std::string name;
  std::string value;
};

// kubectl's -o json (also -o=json, -ojson): --output json. args[*i] starts with "-o"; a value in
// the next argument advances *i.
absl::StatusOr<GivenFlag> ReadShortOutput(const std::vector<std::string>& args, size_t* i) {
  std::string value = args[*i].substr(2);
  if (absl::StartsWith(value, "=")) value = value.substr(1);
  if (value.empty()) {
    if (*i + 1 >= args.size()) return absl::InvalidArgumentError("-o needs a value (json)");
    value = args[++*i];
  }
  return GivenFlag{"output", value};
}

// --name, --name=value or --name value (for a flag that takes one: then *i advances); dashes
// in the name are underscores. An unknown name is an error.
absl::StatusOr<GivenFlag> ReadLongFlag(const std::vector<std::string>& args, size_t* i) {
  std::string name = args[*i].substr(2);
  std::string value;
  bool has_value = false;
  const size_t eq = name.find('=');
  if (eq != std::string::npos) {
    value = name.substr(eq + 1);
    name = name.substr(0, eq);
    has_value = true;
  }
  std::replace(name.begin(), name.end(), '-', '_');
  auto it = Flags().find(name);
  if (it == Flags().end()) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
  if (it->second.takes_value && !has_value) {
    if (*i + 1 >= args.size()) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    }
    value = args[++*i];
    has_value = true;
  }
  return GivenFlag{name, has_value ? value : "true"};
}

// Splits args into the command and its positional arguments (into cl) and the flags, returned in
// order. Flags may come anywhere; after "--" every argument is positional.
absl::StatusOr<std::vector<GivenFlag>> SplitArgs(const std::vector<std::string>& args,
                                                 CommandLine* cl) {
  std::vector<GivenFlag> flags;
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!flags_done && arg == "--") {
      flags_done = true;
    } else if (!flags_done && arg == "-h") {
      flags.push_back({"help", ""});
    } else if (!flags_done && absl::StartsWith(arg, "-o") && !absl::StartsWith(arg, "--")) {
      ASSIGN_OR_RETURN(GivenFlag flag, ReadShortOutput(args, &i));
      flags.push_back(std::move(flag));
    } else if (!flags_done && absl::StartsWith(arg, "--") && arg.size() > 2) {
      ASSIGN_OR_RETURN(GivenFlag flag, ReadLongFlag(args, &i));
      flags.push_back(std::move(flag));
    } else if (cl->command.empty()) {
      cl->command = arg;
    } else {
      cl->positional.push_back(arg);
    }
  }
  return flags;
}

// Sets a flag given to cl's command, after checking that it applies to the command (any command
// while none is given).
absl::Status ApplyFlag(const GivenFlag& flag, CommandLine* cl) {
  const FlagInfo& info = Flags().at(flag.name);
  if (!cl->command.empty() && !info.commands.empty() && info.commands.count(cl->command) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag.name, " does not apply to '", cl->command, "' (only to ",
        absl::StrJoin(info.commands, ", "), ")"));
  }
  return info.set(flag.name, flag.value, cl);
}

// The command's entry; an unknown command is an error listing the known ones.
absl::StatusOr<const CommandInfo*> FindCommand(const std::string& command) {
  auto it = Commands().find(command);
  if (it == Commands().end()) {
    std::vector<std::string> names;
    for (const auto& kv : Commands()) names.push_back(kv.first);
    return absl::InvalidArgumentError(absl::StrCat("unknown command '", command,
                                                   "'; known: ", absl::StrJoin(names, ", ")));
  }
  return &it->second;
}

absl::Status CheckPositionalCount(const CommandLine& cl, const CommandInfo& info) {
  const int n = static_cast<int>(cl.positional.size());
  if (n < info.min_positional) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", cl.command, "' needs ", info.positional_name));
  }
  if (n > info.max_positional) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", cl.command, "' takes ",
        info.max_positional == 0   ? std::string("no arguments")
        : info.max_positional == 1 ? absl::StrCat("one ", info.positional_name)
                                   : std::string(info.positional_name),
        ", got unexpected '", cl.positional[info.max_positional], "'"));
  }
  return absl::OkStatus();
}

// ckpt inspect DIR [--json], ckpt verify DIR, ckpt export DIR OUT [--format F] [--with-optimizer].
absl::Status CheckCkpt(const CommandLine& cl) {
  const int n = static_cast<int>(cl.positional.size());
  const std::string& sub = cl.positional[0];
  const int want = sub == "export" ? 3 : 2;
  if (sub != "inspect" && sub != "verify" && sub != "export") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown 'ckpt' command '", sub, "'; known: inspect, verify, export"));
  }
  if (n != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'ckpt ", sub, "' takes ", sub == "export" ? "DIR OUT.safetensors" : "one DIR"));
  }
  if (cl.json && sub != "inspect") {
    return absl::InvalidArgumentError("--json applies to 'ckpt inspect' only");
  }
  if (sub != "export" && (!cl.format.empty() || cl.with_optimizer)) {
    return absl::InvalidArgumentError(absl::StrCat(
        !cl.format.empty() ? "--format" : "--with-optimizer", " applies to 'ckpt export' only"));
  }
  if (!cl.format.empty() && cl.format != "weft" && cl.format != "hf") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--format: unknown checkpoint export format \"", cl.format, "\"; known: weft, hf"));
  }
  if (cl.format == "hf" && cl.with_optimizer) {
    return absl::InvalidArgumentError(
        "--with-optimizer: a Hugging Face export (--format hf) holds parameters only");
  }
  return absl::OkStatus();
}

// data tokenize --bytes IN... OUT [--holdout F --holdout_out VAL], data inspect FILE [--format F].
absl::Status CheckData(const CommandLine& cl) {
  const int n = static_cast<int>(cl.positional.size());
  const std::string& sub = cl.positional[0];
  if (sub != "tokenize" && sub != "inspect") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown 'data' command '", sub, "'; known: tokenize, inspect"));
  }
  const bool tokenize = sub == "tokenize";
  if (tokenize ? n < 3 : n != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("'data ", sub, "' takes ", tokenize ? "IN... OUT.bin" : "one FILE"));
  }
  if (!tokenize && (cl.holdout > 0 || !cl.holdout_out.empty())) {
    return absl::InvalidArgumentError("--holdout applies to 'data tokenize' only");
  }
  if (cl.holdout_out.empty() != (cl.holdout == 0)) {
    return absl::InvalidArgumentError(
        "--holdout F and --holdout_out VAL.bin go together: the last fraction F of the tokens "
        "is written to VAL.bin instead of OUT");
  }
  if (tokenize && !cl.bytes) {
    return absl::InvalidArgumentError(
        "'data tokenize' needs --bytes (byte-level tokens, vocab 256: the one tokenizer "
        "weftctl has)");
  }
  if (!tokenize && cl.bytes) {
    return absl::InvalidArgumentError("--bytes applies to 'data tokenize' only");
  }
  if (tokenize && !cl.format.empty()) {
    return absl::InvalidArgumentError(
        "--format applies to 'data inspect' only ('data tokenize' writes llmc)");
  }
  return absl::OkStatus();
}

}  // namespace

std::string DefaultCoordinator(const char* env_value) {
  if (env_value != nullptr && env_value[0] != '\0') return env_value;
  return kDefaultCoordinator;
}

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const std::string& default_coordinator) {
  CommandLine cl;
  cl.coordinator = default_coordinator;
  // Flags are collected first and checked against the command once it is known.
  ASSIGN_OR_RETURN(std::vector<GivenFlag> flags, SplitArgs(args, &cl));
  for (const GivenFlag& flag : flags) RETURN_IF_ERROR(ApplyFlag(flag, &cl));
  if (cl.command.empty()) {
    // --help or --version alone are those commands.
    if (!cl.help && !cl.version) return absl::InvalidArgumentError("no command given");
    cl.command = cl.help ? "help" : "version";
    return cl;
  }
  ASSIGN_OR_RETURN(const CommandInfo* info, FindCommand(cl.command));
  if (cl.help || cl.version) return cl;
  RETURN_IF_ERROR(CheckPositionalCount(cl, *info));
  if (cl.command == "plan" && !cl.auto_search &&
      (cl.ranks > 0 || !cl.hosts.empty() || !cl.profile.empty() || cl.memory_bytes > 0)) {
    return absl::InvalidArgumentError(
        "plan: --ranks, --hosts, --profile and --memory are for the search (plan --auto)");
  }
  if (cl.auto_search && cl.profile.empty()) {
    return absl::InvalidArgumentError(
        "plan --auto needs a cost profile: --profile FILE, as weft-calibrate --out FILE writes "
        "it on the workers' machines");
  }
  if (info->check != nullptr) RETURN_IF_ERROR(info->check(cl));
  return cl;
}

std::string UsageText() {
  return R"(usage: weftctl [--coordinator HOST:PORT] COMMAND [ARGS] [FLAGS]

Commands:
  submit SPEC [--watch] [--json]   check SPEC's YAML here, send it to the coordinator, print the
         [--check-local-files]     job id; --watch then streams its events like 'watch'. The
                                   paths SPEC names are the cluster's: the coordinator resolves
                                   relative ones against its --data_root (checkpoint.dir against
                                   its --checkpoint_root) and checks the files.
                                   --check-local-files: the cluster sees this machine's files at
                                   the same paths: resolve relative paths against SPEC's folder,
                                   and check the files and plan the job here first
  get JOB [--json]                 show one job, and each rank's error in its latest failed
                                   attempt, earliest (the cause) first; --json: with every step
                                   of its current attempt (read from the coordinator a page at
                                   a time)
  list [--limit N] [--state S]     list jobs in submit order: id, name, state, steps done, last
       [--json]                    loss, age; the first N (default 100), read from the
                                   coordinator a page at a time; --state: only jobs in state S
                                   (PENDING, PLANNING, RUNNING, SUCCEEDED, FAILED, CANCELLED or
                                   RESTARTING)
  cancel JOB [--reason TEXT]       cancel a job; prints its state after the call
  delete JOB... [--json]           delete jobs that ended (SUCCEEDED, FAILED or CANCELLED) with
                                   their events and logs; their checkpoints stay. A job still
                                   running is refused (cancel it first). Exits 1 if any failed
  watch JOB [--json]               stream a job's events until it ends; exits 0 only if it
                                   SUCCEEDED
  logs JOB [--rank R] [--attempt A] [--follow] [--json]
                                   the lines the job's workers logged while they ran its ranks,
                                   by attempt, then time: "attempt A rank R  HH:MM:SS.mmm level
                                   text"; --rank, --attempt: only those; --follow: poll every
                                   second for new lines until the job has ended
  workers [--json]                 list workers: id, host, device, state, job/rank, heartbeat;
                                   then the cost profiles the coordinator holds
  calibrate PROFILE                store a cost profile (weft-calibrate --out PROFILE, run on the
                                   workers' hosts) in the coordinator for its worker kind and
                                   host: what `mesh: {auto: true}` jobs are searched with
  local [--ranks N] [--json] SPEC  start a coordinator and N workers on 127.0.0.1 as child
                                   processes, run SPEC on them, stop them; exits 0 only if the
                                   job SUCCEEDED. N defaults to the spec's mesh size.
        [--coordinator_bin PATH] [--worker_bin PATH] [--keep_tmp] [--trace FILE]
        [--device cpu|cuda] [--data_root DIR] [--checkpoint_root DIR]
                                   --trace FILE: record the job's timeline and write it to
                                   FILE as a Chrome trace (also when the job fails)
                                   --device: run the job on cpu or cuda (rank r on cuda:r)
                                   whatever the spec's device says
                                   --data_root, --checkpoint_root: the daemons read data and
                                   init_from, and checkpoints, only under these folders
                                   (default: SPEC's folder, for both)
  plan SPEC [--json]               validate SPEC and plan it offline (no coordinator): per rank,
       [--list_ranks R,...|all]    the instructions with local shapes, each collective with its
                                   group and bytes sent, the memory at its peak and for
                                   parameters, gradients, optimizer states and peak activations;
                                   then the bytes moved per step. --json: one JSON document.
                                   Meshes of more than 16 ranks list one rank per pipeline stage
                                   in full and a memory/traffic line for every rank, unless
                                   --list_ranks says which ranks (or all) to list
  plan --auto SPEC --profile FILE  search SPEC's strategies offline: every mesh pp x dp x mp of
       [--ranks N] [--hosts 2x4]   N ranks (default: the spec's mesh size), ZeRO level,
       [--memory 16GiB] [--json]   micro-batches, pipeline schedule and virtual stages,
                                   recompute and sequence parallelism, each planned; those whose
                                   planned peak exceeds --memory per worker (default: the
                                   profile's) are dropped, the rest ranked by the simulator's
                                   step time over FILE (weft-calibrate --out FILE), ranks placed
                                   on --hosts (HOSTSxWORKERS or NAME:WORKERS,...; default one
                                   host) as the scheduler would. Prints the pick as the spec keys
                                   that pin it, its predicted step, tokens/s, memory and split,
                                   the runners-up and why each lost, and the spec's own strategy
  trace JOB FILE                   write the timeline of a job submitted with 'trace: true' to
                                   FILE as Chrome trace-event JSON (open it in ui.perfetto.dev
                                   or chrome://tracing): one process per rank, a slice per
                                   forward/backward block, send, recv and collective
  ckpt inspect DIR [--json]        a checkpoint (DIR: a step folder, or a checkpoint folder for
                                   its latest committed step): per tensor its dtype, global
                                   shape and chunks (offsets, lengths, file, byte range,
                                   crc32c); the files and their sizes; the totals
  ckpt verify DIR                  read every chunk and check its crc32c and that each tensor
                                   is covered; exits 1 naming each bad tensor and file
  ckpt export DIR OUT.safetensors  write the parameters whole (their dtype, by global name) into
       [--with-optimizer]          one safetensors file, atomically; --with-optimizer: the
       [--format weft|hf]          optimizer states too (fc0.weight/adamw.m, for Weft's resume).
                                   --format hf (a gpt2 or llama job's checkpoint): a Hugging Face
                                   model: the parameters in Hugging Face's names, layouts and
                                   dtypes, and config.json beside OUT (in its folder), for
                                   from_pretrained or init_from
  data tokenize --bytes IN...       write the INs' bytes, one file after another, as byte-level
       OUT.bin [--holdout F        tokens (each byte one token, vocab 256) to OUT.bin, an llm.c
       --holdout_out VAL.bin]      token file (data.source: tokens, format llmc), atomically;
                                   --holdout: the last fraction F of the tokens go to VAL.bin
                                   instead (a held-out split for eval)
  data inspect FILE [--format F]   a token file's format, token count and first tokens; F:
                                   llmc (default), raw_u16, or megatron (FILE the prefix of
                                   FILE.idx and FILE.bin)
  help                             this text
  version, --version               print weftctl's version

Flags:
  --coordinator HOST:PORT  the coordinator to talk to (default $WEFT_COORDINATOR, else
                           127.0.0.1:7070)
  --token_file FILE        the file holding the coordinator's client token (its
                           --client_token_file), sent as a bearer token with every call
                           (default $WEFT_TOKEN_FILE; none when neither is set)
  --tls_ca FILE            PEM file of the CA certificate the coordinator's TLS certificate
                           (its --tls_cert) must chain to; calls then go over TLS (default
                           $WEFT_TLS_CA; plaintext when neither is set)
  --tls_server_name NAME   the name the coordinator's certificate must hold, where it is not
                           the host of --coordinator
  --json, -o json          one JSON object per line: {"type":"step","step":S,"loss":L,
                           "step_seconds":T,"samples_per_second":X} per step and
                           {"type":"state","state":...,"message":...} per state change;
                           logs: {"type":"log","attempt":A,"rank":R,"seq":N,"time_ms":T,
                           "level":...,"text":...} per line
)";
}

}  // namespace weft::client
