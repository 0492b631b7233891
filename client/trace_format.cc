#include "client/trace_format.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "client/event_format.h"
#include "nlohmann/json.hpp"

namespace weft::client {

std::string FormatChromeTrace(const v1::JobTrace& trace) {
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const v1::RankTrace& rank : trace.ranks()) {
    for (const v1::TraceSpan& span : rank.spans()) origin = std::min(origin, span.start_us());
  }
  nlohmann::json events = nlohmann::json::array();
  for (const v1::RankTrace& rank : trace.ranks()) {
    std::string label = absl::StrCat("rank ", rank.rank());
    if (!rank.worker_id().empty()) absl::StrAppend(&label, " (", rank.worker_id(), ")");
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", rank.rank()},
                      {"tid", 0},
                      {"args", {{"name", label}}}});
    // Perfetto lists processes by this index: rank order.
    events.push_back({{"name", "process_sort_index"},
                      {"ph", "M"},
                      {"pid", rank.rank()},
                      {"tid", 0},
                      {"args", {{"sort_index", rank.rank()}}}});
    bool collective_lane = false;
    for (const v1::TraceSpan& span : rank.spans()) {
      collective_lane = collective_lane || span.lane() == 1;
      events.push_back({{"name", span.name()},
                        {"cat", span.category()},
                        {"ph", "X"},
                        {"ts", span.start_us() - origin},
                        {"dur", span.duration_us()},
                        {"pid", rank.rank()},
                        {"tid", span.lane()},
                        {"args", {{"micro_batch", span.micro_batch()}, {"chunk", span.chunk()}}}});
    }
    // Name the threads only when collectives ran on their own: a rank's one row otherwise.
    if (collective_lane) {
      for (int lane : {0, 1}) {
        events.push_back({{"name", "thread_name"},
                          {"ph", "M"},
                          {"pid", rank.rank()},
                          {"tid", lane},
                          {"args", {{"name", lane == 0 ? "executor" : "collectives"}}}});
      }
    }
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::Status WriteChromeTrace(const v1::JobTrace& trace, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write the trace to ", path, ": ", std::strerror(errno)));
  }
  out << FormatChromeTrace(trace) << "\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("writing the trace to ", path, " failed"));
  return absl::OkStatus();
}

std::string TraceSummary(const v1::JobTrace& trace) {
  int64_t spans = 0;
  for (const v1::RankTrace& rank : trace.ranks()) spans += rank.spans_size();
  std::string out = absl::StrCat(trace.ranks_size(), " rank", trace.ranks_size() == 1 ? "" : "s",
                                 ", ", FormatThousands(static_cast<double>(spans)), " span",
                                 spans == 1 ? "" : "s");
  if (trace.dropped_spans() > 0) {
    absl::StrAppend(&out, ", ", FormatThousands(static_cast<double>(trace.dropped_spans())),
                    " dropped by the coordinator's bound");
  }
  return out;
}

}  // namespace weft::client
