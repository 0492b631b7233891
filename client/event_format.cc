#include "client/event_format.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "absl/strings/str_join.h"
#include "common/utf8.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace weft::client {

std::string StateName(v1::JobState state) {
  const std::string& name = v1::JobState_Name(state);
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.17g", value);
}

std::string JsonString(const std::string& value) {
  // Replace invalid UTF-8 rather than throw: messages may quote arbitrary bytes.
  return nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// "3/10", or "3" when total_steps is 0 (unknown).
std::string StepOfTotal(int64_t step, int64_t total_steps) {
  return total_steps > 0 ? absl::StrCat(step, "/", total_steps) : absl::StrCat(step);
}

}  // namespace

std::string FormatStepJson(const v1::StepMetrics& step) {
  return absl::StrCat("{\"type\":\"step\",\"step\":", step.step(),
                      ",\"loss\":", JsonNumber(step.loss()),
                      ",\"lr\":", JsonNumber(step.lr()),
                      ",\"grad_norm\":", JsonNumber(step.grad_norm()),
                      ",\"step_seconds\":", JsonNumber(step.step_seconds()),
                      ",\"samples_per_second\":", JsonNumber(step.samples_per_second()),
                      ",\"bytes_sent\":", step.bytes_sent(),
                      ",\"peak_bytes\":", step.peak_bytes(), "}");
}

std::string FormatStateJson(v1::JobState state, const std::string& message) {
  std::string out = absl::StrCat("{\"type\":\"state\",\"state\":", JsonString(StateName(state)));
  if (!message.empty() || state == v1::FAILED || state == v1::CANCELLED) {
    absl::StrAppend(&out, ",\"message\":", JsonString(message));
  }
  absl::StrAppend(&out, "}");
  return out;
}

std::string FormatEvalJson(const v1::EvalMetrics& eval) {
  return absl::StrCat("{\"type\":\"eval\",\"step\":", eval.step(),
                      ",\"loss\":", JsonNumber(eval.loss()), "}");
}

std::string FormatEvalText(const v1::EvalMetrics& eval, int64_t total_steps) {
  return absl::StrCat("eval after step ", StepOfTotal(eval.step(), total_steps), "  loss ",
                      absl::StrFormat("%.6g", eval.loss()));
}

std::string FormatEventJson(const v1::JobEvent& event) {
  switch (event.event_case()) {
    case v1::JobEvent::kStep:
      return FormatStepJson(event.step());
    case v1::JobEvent::kEval:
      return FormatEvalJson(event.eval());
    case v1::JobEvent::kState:
      return FormatStateJson(event.state(), event.message());
    case v1::JobEvent::kSaved:
      return FormatSavedJson(event.saved());
    case v1::JobEvent::kRestart:
      return FormatRestartJson(event.restart());
    case v1::JobEvent::kResize:
      return FormatResizeJson(event.resize());
    default:
      return "";
  }
}

std::string FormatSavedJson(const v1::CheckpointSaved& saved) {
  return absl::StrCat("{\"type\":\"checkpoint\",\"step\":", saved.step(),
                      ",\"bytes\":", saved.bytes(), ",\"seconds\":", JsonNumber(saved.seconds()),
                      ",\"path\":", JsonString(saved.path()), "}");
}

std::string FormatSavedText(const v1::CheckpointSaved& saved) {
  return absl::StrCat("checkpoint step ", saved.step(), "  ",
                      absl::StrFormat("%.1f", saved.bytes() / 1e6), " MB  (",
                      absl::StrFormat("%.3f", saved.seconds()), " s)  ", saved.path());
}

std::string FormatRestartJson(const v1::Restart& restart) {
  return absl::StrCat("{\"type\":\"restart\",\"attempt\":", restart.attempt(),
                      ",\"restarts_left\":", restart.restarts_left(), ",\"rank\":", restart.rank(),
                      ",\"worker\":", JsonString(restart.worker()),
                      ",\"host\":", JsonString(restart.host()),
                      ",\"cause\":", JsonString(restart.cause()), "}");
}

std::string FormatRestartText(const v1::Restart& restart) {
  std::string where = restart.rank() >= 0 ? absl::StrCat(" rank ", restart.rank()) : "";
  if (!restart.worker().empty()) absl::StrAppend(&where, " on ", restart.worker());
  if (!restart.host().empty()) absl::StrAppend(&where, " (", restart.host(), ")");
  return absl::StrCat("restart: attempt ", restart.attempt() + 1, " failed", where, ": ",
                      restart.cause(), "; ", restart.restarts_left(), " restart",
                      restart.restarts_left() == 1 ? "" : "s", " left");
}

std::string FormatResizeJson(const v1::Resize& resize) {
  return absl::StrCat("{\"type\":\"resize\",\"dim\":", JsonString(resize.dim()),
                      ",\"from\":", resize.from_size(), ",\"to\":", resize.to_size(),
                      ",\"micro_batches\":", resize.micro_batches(),
                      ",\"world_size\":", resize.world_size(), ",\"step\":", resize.step(), "}");
}

std::string FormatResizeText(const v1::Resize& resize) {
  const bool grow = resize.to_size() > resize.from_size();
  return absl::StrCat("resize: ", grow ? "grow " : "shrink ", resize.dim(), " ",
                      resize.from_size(), " -> ", resize.to_size(), " (", resize.world_size(),
                      " ranks, ", resize.micro_batches(), " micro-batch",
                      resize.micro_batches() == 1 ? "" : "es", ")",
                      grow ? absl::StrCat(" from the checkpoint of step ", resize.step())
                           : " from the newest checkpoint");
}

std::string FormatThousands(double value) {
  if (!std::isfinite(value)) return absl::StrCat(value);
  const bool negative = value < 0;
  std::string digits = absl::StrFormat("%.0f", std::fabs(value));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return negative ? "-" + out : out;
}

std::string FormatStepText(const v1::StepMetrics& step, int64_t total_steps,
                           int64_t tokens_per_sample) {
  std::string out = absl::StrCat("step ", StepOfTotal(step.step(), total_steps));
  absl::StrAppend(&out, "  loss ", absl::StrFormat("%.6g", step.loss()));
  // Reports from workers that predate them carry neither.
  if (step.lr() > 0 || step.grad_norm() > 0) {
    absl::StrAppend(&out, "  lr ", absl::StrFormat("%.3g", step.lr()), "  grad norm ",
                    absl::StrFormat("%.4g", step.grad_norm()));
  }
  if (step.samples_per_second() > 0) {
    absl::StrAppend(&out, "  ", FormatThousands(step.samples_per_second()), " samples/s");
    if (tokens_per_sample > 0) {
      absl::StrAppend(&out, "  ", FormatThousands(step.samples_per_second() * tokens_per_sample),
                      " tokens/s");
    }
  }
  if (step.bytes_sent() > 0) {
    absl::StrAppend(&out, "  ", absl::StrFormat("%.1f", step.bytes_sent() / 1e6), " MB/step");
  }
  if (step.peak_bytes() > 0) {
    absl::StrAppend(&out, "  ", absl::StrFormat("%.1f", step.peak_bytes() / 1e6), " MB peak");
  }
  if (step.step_seconds() > 0) {
    absl::StrAppend(&out, "  (", absl::StrFormat("%.3f", step.step_seconds()), " s)");
  }
  return out;
}

StepProgress::StepProgress(const v1::JobSpec& spec)
    : total_steps_(spec.train().steps()),
      tokens_per_sample_(spec.data().source() == "tokens" ? spec.data().seq_len() : 0) {}

std::string StepProgress::Line(const v1::StepMetrics& step) {
  std::string out = FormatStepText(step, total_steps_, tokens_per_sample_);
  if (step.step_seconds() > 0) {
    constexpr double kWeight = 0.2;
    average_seconds_ = average_seconds_ == 0
                           ? step.step_seconds()
                           : kWeight * step.step_seconds() + (1 - kWeight) * average_seconds_;
  }
  const int64_t left = total_steps_ - step.step();
  if (left > 0 && average_seconds_ > 0) {
    absl::StrAppend(&out, "  ETA ",
                    FormatDuration(static_cast<int64_t>(left * average_seconds_ * 1000)));
  }
  return out;
}

std::string FormatStateText(v1::JobState state, const std::string& message) {
  if (message.empty()) return absl::StrCat("state ", StateName(state));
  return absl::StrCat("state ", StateName(state), ": ", EscapeControlCharacters(message));
}

std::string FormatEventText(const v1::JobEvent& event, int64_t total_steps) {
  switch (event.event_case()) {
    case v1::JobEvent::kStep:
      return FormatStepText(event.step(), total_steps);
    case v1::JobEvent::kEval:
      return FormatEvalText(event.eval(), total_steps);
    case v1::JobEvent::kState:
      return FormatStateText(event.state(), event.message());
    case v1::JobEvent::kSaved:
      return FormatSavedText(event.saved());
    case v1::JobEvent::kRestart:
      return FormatRestartText(event.restart());
    case v1::JobEvent::kResize:
      return FormatResizeText(event.resize());
    default:
      return "";
  }
}

std::string FormatAge(int64_t then_ms, int64_t now_ms) {
  if (then_ms <= 0 || now_ms < then_ms) return "-";
  const int64_t s = (now_ms - then_ms) / 1000;
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 120 * 60) return absl::StrCat(s / 60, "m");
  if (s < 48 * 3600) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string FormatJobsTable(const std::vector<v1::JobSummary>& jobs, int64_t now_ms) {
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "STATE", "STEPS", "LOSS", "AGE"}};
  for (const v1::JobSummary& job : jobs) {
    std::string steps = absl::StrCat(job.last_step().step());
    if (job.total_steps() > 0) absl::StrAppend(&steps, "/", job.total_steps());
    const std::string loss =
        job.has_last_step() ? absl::StrFormat("%.6g", job.last_step().loss()) : "-";
    rows.push_back({job.id(), EscapeControlCharacters(job.name()), StateName(job.state()), steps,
                    loss,
                    FormatAge(job.create_time_ms(), now_ms)});
  }
  return FormatTable(rows);
}

namespace {
std::string Gib(int64_t bytes) { return absl::StrFormat("%.1f GiB", bytes / 1073741824.0); }
}  // namespace

std::string FormatDevice(const v1::DeviceInfo& d) {
  if (d.kind().empty()) return "-";
  std::vector<std::string> facts;
  if (d.kind() == "cuda") {
    // "cuda NVIDIA H100 80GB HBM3 (79.1 GiB, cc 9.0, 132 SMs)"
    std::string out = d.kind();
    if (!d.name().empty()) absl::StrAppend(&out, " ", d.name());
    if (d.memory_bytes() > 0) facts.push_back(Gib(d.memory_bytes()));
    if (!d.compute_capability().empty()) {
      facts.push_back(absl::StrCat("cc ", d.compute_capability()));
    }
    if (d.cores() > 0) facts.push_back(absl::StrCat(d.cores(), " SMs"));
    if (!facts.empty()) absl::StrAppend(&out, " (", absl::StrJoin(facts, ", "), ")");
    return out;
  }
  // "cpu (8 cores, 31.3 GiB)": the CPU model is long and in `workers --json`.
  if (d.cores() > 0) facts.push_back(absl::StrCat(d.cores(), " cores"));
  if (d.memory_bytes() > 0) facts.push_back(Gib(d.memory_bytes()));
  return facts.empty() ? d.kind() : absl::StrCat(d.kind(), " (", absl::StrJoin(facts, ", "), ")");
}

std::string FormatWorkersTable(const std::vector<v1::WorkerInfo>& workers, int64_t now_ms) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "HOST", "DEVICE", "STATE", "JOB/RANK", "HEARTBEAT"}};
  for (const v1::WorkerInfo& w : workers) {
    const std::string device = FormatDevice(w.device());
    const std::string job =
        w.job_id().empty() ? "-" : absl::StrCat(w.job_id(), "/", w.rank());
    const std::string beat =
        w.last_heartbeat_ms() > 0 ? absl::StrCat(FormatAge(w.last_heartbeat_ms(), now_ms), " ago")
                                  : "-";
    rows.push_back({w.worker_id(), w.host().empty() ? "-" : w.host(), device,
                    w.state().empty() ? "-" : w.state(), job, beat});
  }
  return FormatTable(rows);
}

std::string FormatCostProfiles(const std::vector<v1::CostProfile>& profiles,
                               const std::vector<v1::WorkerInfo>& workers) {
  std::string out;
  std::set<std::string> kinds_with;
  for (const v1::CostProfile& p : profiles) {
    kinds_with.insert(p.kind());
    absl::StrAppend(
        &out, "cost profile ", p.kind(), " @ ", p.host().empty() ? "any host" : p.host(), " (",
        p.device().empty() ? "?" : p.device(), ", measured ",
        p.measured_unix_ms() > 0
            ? absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::FromUnixMillis(p.measured_unix_ms()),
                               absl::UTCTimeZone())
            : "?",
        "):");
    for (const v1::KernelCost& k : p.kernels()) {
      if (k.dtype() != v1::F32 || k.fit().per_unit_s() <= 0) continue;
      if (k.kind() == v1::KernelCost::MATMUL) {
        absl::StrAppend(&out, absl::StrFormat(" matmul%s %.1f GFLOP/s,",
                                              k.precision() == "bf16" ? " (bf16 products)" : "",
                                              1e-9 / k.fit().per_unit_s()));
      } else if (k.kind() == v1::KernelCost::MEMORY) {
        absl::StrAppend(&out, absl::StrFormat(" memory %.1f GB/s,", 1e-9 / k.fit().per_unit_s()));
      }
    }
    if (p.overlap_slowdown() > 0) {
      absl::StrAppend(&out, absl::StrFormat(" overlap slowdown %.2f", p.overlap_slowdown()));
    }
    absl::StrAppend(&out, "\n");
    for (const v1::LinkCost& l : p.links()) {
      if (l.op() != v1::Instruction::ALL_REDUCE && l.op() != v1::Instruction::SEND) continue;
      absl::StrAppend(
          &out, absl::StrFormat("  %-10s %d ranks %-10s %.3f ms + %.2f GB/s\n",
                                v1::Instruction::Op_Name(l.op()), l.group_size(),
                                v1::LinkCost::Scope_Name(l.scope()), 1e3 * l.fit().alpha_s(),
                                l.fit().per_unit_s() > 0 ? 1e-9 / l.fit().per_unit_s() : 0.0));
    }
  }
  std::set<std::string> kinds;
  for (const v1::WorkerInfo& w : workers) kinds.insert(w.device().kind());
  for (const std::string& kind : kinds) {
    if (!kind.empty() && !kinds_with.count(kind)) {
      absl::StrAppend(&out, "no cost profile of ", kind,
                      " workers: mesh.auto jobs of that kind cannot be searched (weftctl "
                      "calibrate FILE stores one)\n");
    }
  }
  return out;
}

namespace {

// Proto3's JSON mapping writes 64-bit integers as strings; these become numbers again, walking
// the JSON alongside the message's descriptor.
void Int64sAsNumbers(const google::protobuf::Descriptor& descriptor, nlohmann::json* json) {
  using google::protobuf::FieldDescriptor;
  if (!json->is_object()) return;
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor& field = *descriptor.field(i);
    auto it = json->find(field.name());
    if (it == json->end()) continue;
    const FieldDescriptor* value = field.is_map() ? field.message_type()->map_value() : &field;
    auto convert = [&](nlohmann::json* v) {
      if (value->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        Int64sAsNumbers(*value->message_type(), v);
      } else if (v->is_string() && (value->cpp_type() == FieldDescriptor::CPPTYPE_INT64 ||
                                    value->cpp_type() == FieldDescriptor::CPPTYPE_UINT64)) {
        const std::string text = v->get<std::string>();
        int64_t i64 = 0;
        uint64_t u64 = 0;
        if (value->cpp_type() == FieldDescriptor::CPPTYPE_INT64 && absl::SimpleAtoi(text, &i64)) {
          *v = i64;
        } else if (absl::SimpleAtoi(text, &u64)) {
          *v = u64;
        }
      }
    };
    if (field.is_map()) {
      for (auto& [key, v] : it->items()) convert(&v);
    } else if (field.is_repeated()) {
      for (auto& v : *it) convert(&v);
    } else {
      convert(&*it);
    }
  }
}

}  // namespace

std::string ProtoToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) return "{}";
  nlohmann::json json = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return out;
  Int64sAsNumbers(*message.GetDescriptor(), &json);
  return json.dump();
}

std::string FormatDuration(int64_t ms) {
  if (ms < 0) ms = 0;
  const int64_t s = ms / 1000;
  if (s < 60) return absl::StrFormat("%.1fs", static_cast<double>(ms) / 1000);
  if (s < 3600) return absl::StrFormat("%dm %02ds", s / 60, s % 60);
  return absl::StrFormat("%dh %02dm %02ds", s / 3600, s / 60 % 60, s % 60);
}

std::string FormatJobDetails(const v1::Job& job, int64_t now_ms, absl::TimeZone tz,
                             const std::map<std::string, std::string>& hosts) {
  std::vector<std::string> lines;
  lines.push_back(absl::StrCat("id:       ", job.id()));
  lines.push_back(absl::StrCat("name:     ", EscapeControlCharacters(job.spec().name())));
  lines.push_back(absl::StrCat("state:    ", StateName(job.state())));
  if (!job.message().empty()) {
    lines.push_back(absl::StrCat("message:  ", EscapeControlCharacters(job.message())));
  }
  std::string mesh = absl::StrCat("[", absl::StrJoin(job.spec().mesh().shape(), ","), "]");
  if (job.spec().mesh().dim_names_size() > 0) {
    absl::StrAppend(&mesh, " (", absl::StrJoin(job.spec().mesh().dim_names(), ","), ")");
  }
  lines.push_back(absl::StrCat("mesh:     ", mesh));
  lines.push_back(absl::StrCat(
      "attempt:  ", job.attempt(), " (", job.attempt() + 1, " run", job.attempt() == 0 ? "" : "s",
      job.grows() > 0 ? absl::StrCat(", ", job.grows(), " begun by a grow") : "",
      ", train.max_restarts ", job.spec().train().max_restarts(), ")"));
  auto when = [&](int64_t ms) {
    return absl::FormatTime("%Y-%m-%d %H:%M:%E3S %Z", absl::FromUnixMillis(ms), tz);
  };
  lines.push_back(absl::StrCat("created:  ", when(job.create_time_ms()), " (",
                               FormatAge(job.create_time_ms(), now_ms), " ago)"));
  if (job.start_time_ms() > 0) {
    lines.push_back(absl::StrCat("started:  ", when(job.start_time_ms())));
    const bool ended = job.end_time_ms() > 0;
    if (ended) lines.push_back(absl::StrCat("ended:    ", when(job.end_time_ms())));
    lines.push_back(absl::StrCat(
        "duration: ", FormatDuration((ended ? job.end_time_ms() : now_ms) - job.start_time_ms()),
        ended ? "" : " so far"));
  }
  std::string steps = absl::StrCat(job.steps_size() > 0 ? job.steps().rbegin()->step() : 0, "/",
                                   job.spec().train().steps());
  lines.push_back(absl::StrCat("steps:    ", steps));
  if (job.steps_size() > 0) {
    lines.push_back(absl::StrCat("last:     ", FormatStepText(*job.steps().rbegin(),
                                                               job.spec().train().steps())));
  }
  if (job.has_last_eval()) {
    lines.push_back(absl::StrCat("eval:     ", FormatEvalText(job.last_eval(),
                                                               job.spec().train().steps())));
  }
  if (job.spec().train().has_elastic()) {
    const v1::Elastic& elastic = job.spec().train().elastic();
    const v1::Mesh& mesh = job.spec().mesh();
    const auto at = std::find(mesh.dim_names().begin(), mesh.dim_names().end(), elastic.dim());
    const int dim = static_cast<int>(at - mesh.dim_names().begin());
    const int64_t submitted = dim < mesh.shape_size() ? mesh.shape(dim) : 0;
    lines.push_back(absl::StrCat(
        "elastic:  ", elastic.dim(), " ", job.elastic_size() > 0 ? job.elastic_size() : submitted,
        " of ", submitted, " (min ", elastic.min(), ", wait ", elastic.wait_s(), " s); ",
        job.resizes_size(), " resize", job.resizes_size() == 1 ? "" : "s"));
    for (const v1::Resize& resize : job.resizes()) {
      lines.push_back(absl::StrCat("  ", absl::FormatTime("%H:%M:%E3S", absl::FromUnixMillis(
                                                                            resize.time_ms()), tz),
                                   "  ", FormatResizeText(resize)));
    }
  }
  if (job.workers_size() > 0) {
    std::vector<std::string> ranks;
    bool any_host = false;
    for (int r = 0; r < job.workers_size(); ++r) {
      auto host = hosts.find(job.workers(r));
      const bool known = host != hosts.end() && !host->second.empty();
      any_host |= known;
      ranks.push_back(absl::StrCat(r, ": ", job.workers(r), known ? " on " : "",
                                   known ? host->second : ""));
    }
    lines.push_back(absl::StrCat("workers:  ", absl::StrJoin(ranks, ", "),
                                 any_host ? " (rank: worker on host)" : " (rank: worker)"));
  }
  if (job.rank_errors_size() > 0) {
    const int failed = job.rank_errors_size() + job.rank_errors_omitted();
    const v1::RankError& first = job.rank_errors(0);
    lines.push_back(absl::StrCat("errors:   ", failed, " rank", failed == 1 ? "" : "s",
                                 " failed in attempt ", first.attempt(), ", earliest first"));
    for (const v1::RankError& error : job.rank_errors()) {
      lines.push_back(absl::StrCat("  ", FormatRankError(error, first.failed_at_ms())));
    }
    if (job.rank_errors_omitted() > 0) {
      lines.push_back(absl::StrCat("  and ", job.rank_errors_omitted(), " more (not kept)"));
    }
  }
  return absl::StrCat(absl::StrJoin(lines, "\n"), "\n");
}

std::string FormatRankError(const v1::RankError& error, int64_t first_ms) {
  std::string where = absl::StrCat("rank ", error.rank(), " (");
  if (!error.worker().empty()) absl::StrAppend(&where, "worker ", error.worker());
  if (!error.host().empty()) absl::StrAppend(&where, " on host ", error.host());
  if (!error.worker().empty() || !error.host().empty()) absl::StrAppend(&where, ", ");
  return absl::StrCat(where, "attempt ", error.attempt(), ", +",
                      error.failed_at_ms() - first_ms, " ms): ",
                      EscapeControlCharacters(error.message()));
}

std::string FormatLogLineText(const v1::JobLogLine& line, absl::TimeZone tz) {
  const absl::Time time = absl::FromUnixMillis(line.time_ms());
  return absl::StrCat("attempt ", line.attempt(), " rank ", line.rank(), "  ",
                      absl::FormatTime("%H:%M:%E3S", time, tz), " ",
                      absl::StrFormat("%-7s", line.level()), "  ", line.text());
}

std::string FormatLogLineJson(const v1::JobLogLine& line) {
  return absl::StrCat("{\"type\":\"log\",\"attempt\":", line.attempt(), ",\"rank\":", line.rank(),
                      ",\"seq\":", line.seq(), ",\"time_ms\":", line.time_ms(),
                      ",\"level\":", JsonString(line.level()),
                      ",\"text\":", JsonString(line.text()), "}");
}

}  // namespace weft::client
