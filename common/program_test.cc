#include "common/program.h"

#include "gtest/gtest.h"

namespace weft {
namespace {

v1::Program TwoByTwo(int rank) {
  v1::Program p;
  p.set_rank(rank);
  p.mutable_mesh()->add_shape(2);
  p.mutable_mesh()->add_shape(2);
  p.mutable_mesh()->add_dim_names("dp");
  p.mutable_mesh()->add_dim_names("mp");
  return p;
}

TEST(ResolveGroupRanksTest, FillsRanksFromMeshDims) {
  v1::Program p = TwoByTwo(3);
  v1::CommGroup* dp = p.add_groups();
  dp->set_id(1);
  dp->add_dims(0);
  v1::CommGroup* both = p.add_groups();
  both->set_id(4);
  both->add_dims(0);
  both->add_dims(1);
  v1::CommGroup* given = p.add_groups();
  given->set_id(7);
  given->add_ranks(3);
  ASSERT_TRUE(ResolveGroupRanks(&p).ok());
  EXPECT_EQ(std::vector<int>(p.groups(0).ranks().begin(), p.groups(0).ranks().end()),
            (std::vector<int>{1, 3}));
  EXPECT_EQ(p.groups(1).ranks_size(), 4);
  EXPECT_EQ(std::vector<int>(p.groups(2).ranks().begin(), p.groups(2).ranks().end()),
            (std::vector<int>{3}));
}

TEST(ResolveGroupRanksTest, RejectsBadGroups) {
  v1::Program p = TwoByTwo(0);
  p.add_groups()->set_id(2);
  absl::Status s = ResolveGroupRanks(&p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("group 2"), std::string::npos) << s;

  v1::Program q = TwoByTwo(0);
  q.add_groups()->add_dims(5);
  s = ResolveGroupRanks(&q);
  EXPECT_NE(s.message().find("mesh dim 5"), std::string::npos) << s;

  v1::Program r = TwoByTwo(9);
  r.add_groups()->add_dims(0);
  s = ResolveGroupRanks(&r);
  EXPECT_NE(s.message().find("rank 9"), std::string::npos) << s;
}

}  // namespace
}  // namespace weft
