// FormatProgram: a readable listing of one rank's Program for `weftctl plan`: groups, init,
// each instruction with the local shapes it touches, collectives with their group and the
// bytes this rank moves (ring algorithms), and totals (memory by role, traffic per step).
//
// E.g.
//   for (const v1::Program& p : programs) std::cout << FormatProgram(p);
#ifndef WEFT_PLANNER_FORMAT_H_
#define WEFT_PLANNER_FORMAT_H_

#include <cstdint>
#include <string>

#include "common/program.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

std::string FormatProgram(const v1::Program& program);

// The group of `program` with id `group_id`, or null when it has none.
const v1::CommGroup* FindGroup(const v1::Program& program, int group_id);

// Bytes this rank sends for one collective instruction (ring all-reduce 2(K-1)/K * n,
// all-gather and reduce-scatter (K-1)/K of the full tensor, all-to-all every piece of the
// local tensor but this member's own); 0 for local instructions.
int64_t CollectiveBytes(const v1::Program& program, const v1::Instruction& instruction);
// The same, knowing the members of the instruction's group (GroupMembers).
int64_t CollectiveBytes(const v1::Program& program, const v1::Instruction& instruction,
                        const std::vector<int>& members);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_FORMAT_H_
