// Gloo reports failures by exceptions; Weft by absl::Status. One conversion for every user of
// Gloo's transport or its rendezvous stores (the Gloo and NCCL communicators).
//
// E.g.
//   try {
//     store->get(key);
//   } catch (...) {
//     return FromGlooException(std::current_exception(), "rendezvous on " + key);
//   }
#ifndef WEFT_WORKER_COMM_GLOO_GLOO_STATUS_H_
#define WEFT_WORKER_COMM_GLOO_GLOO_STATUS_H_

#include <exception>
#include <string>

#include "absl/status/status.h"

namespace weft {

// Status for an exception thrown by Gloo while doing `context` (e.g. "all_reduce on group 1
// (dp) ranks [0,1]"): DEADLINE_EXCEEDED for Gloo's timeouts ("Timed out waiting ...", "Wait
// timeout for key(s)"), UNAVAILABLE for other I/O errors, INTERNAL otherwise. Gloo's source
// location prefix is dropped.
absl::Status FromGlooException(const std::exception_ptr& error, const std::string& context);

}  // namespace weft

#endif  // WEFT_WORKER_COMM_GLOO_GLOO_STATUS_H_
