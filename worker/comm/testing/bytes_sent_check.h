// The traffic-accounting check every Communicator implementation shares: member `rank` of a
// group of `size` runs each op once and bytes_sent() (and its factory's) must grow by the closed
// form of what Gloo's algorithms send (K members, B bytes): ring all-reduce 2 (K-1)/K * B for
// even chunks, ring all-gather everything but the next member's chunk, all-to-all and
// reduce-scatter everything but the own chunk, binomial broadcast B per child, send its
// message; recv and barrier nothing.
//
// E.g. (in each rank's thread of a conformance test)
//   ExpectBytesSentFollowTheAlgorithms(comm, factory, size, rank, ReduceOp::kSum);
#ifndef WEFT_WORKER_COMM_TESTING_BYTES_SENT_CHECK_H_
#define WEFT_WORKER_COMM_TESTING_BYTES_SENT_CHECK_H_

#include "worker/comm/communicator.h"

namespace weft::testing {

void ExpectBytesSentFollowTheAlgorithms(Communicator& comm, const CommunicatorFactory& factory,
                                        int size, int rank, ReduceOp all_reduce_op);

}  // namespace weft::testing

#endif  // WEFT_WORKER_COMM_TESTING_BYTES_SENT_CHECK_H_
