// The timeline of a job (JobService.GetJobTrace) as a Chrome trace-event JSON document, the
// format Perfetto (ui.perfetto.dev) and chrome://tracing open: one process per rank (named
// "rank R" by a metadata event), every span a complete ("X") event on thread 0 with its
// micro-batch and chunk in args, times in microseconds relative to the earliest span of any
// rank (ranks' wall clocks are compared as they are: on one machine they agree).
//
// E.g.
//   FormatChromeTrace(trace) ->
//     {"traceEvents":[{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}},
//       {"name":"F mb0 c0","cat":"forward","ph":"X","ts":0,"dur":112,"pid":0,"tid":0,
//        "args":{"micro_batch":0,"chunk":0}}, ...],"displayTimeUnit":"ms"}
#ifndef WEFT_CLIENT_TRACE_FORMAT_H_
#define WEFT_CLIENT_TRACE_FORMAT_H_

#include <string>

#include "absl/status/status.h"
#include "weft/v1/service.pb.h"

namespace weft::client {

std::string FormatChromeTrace(const v1::JobTrace& trace);

// Writes FormatChromeTrace(trace) to `path` (replacing it); errors name the path.
absl::Status WriteChromeTrace(const v1::JobTrace& trace, const std::string& path);

// "3 ranks, 1,204 spans" (and ", 12 dropped by the coordinator's bound" when some were).
std::string TraceSummary(const v1::JobTrace& trace);

}  // namespace weft::client

#endif  // WEFT_CLIENT_TRACE_FORMAT_H_
