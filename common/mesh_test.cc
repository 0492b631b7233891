#include "common/mesh.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

using Groups = std::vector<std::vector<int>>;

TEST(MeshTest, OneDimGroupsCoverAllRanks) {
  absl::StatusOr<Mesh> mesh = Mesh::Create({4}, {"dp"});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->size(), 4);
  EXPECT_EQ(mesh->AllGroups({0}), (Groups{{0, 1, 2, 3}}));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(mesh->Coordinate(r), std::vector<int64_t>{r});
    EXPECT_EQ(mesh->GroupRanks(r, {0}), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(mesh->GroupIndex(r, {0}), 0);
    EXPECT_EQ(mesh->GroupRanks(r, {}), std::vector<int>{r});
  }
  EXPECT_EQ(mesh->DimsLabel({0}), "dp");
}

TEST(MeshTest, TwoByTwoRowMajorAndGroups) {
  absl::StatusOr<Mesh> mesh = Mesh::Create({2, 2}, {"dp", "mp"});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->Coordinate(2), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(mesh->RankAt({1, 1}), 3);
  // dp groups: ranks differing only along dp.
  EXPECT_EQ(mesh->AllGroups({0}), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(mesh->AllGroups({1}), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(mesh->AllGroups({1, 0}), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(mesh->GroupRanks(3, {0}), (std::vector<int>{1, 3}));
  EXPECT_EQ(mesh->GroupRanks(2, {1}), (std::vector<int>{2, 3}));
  // Every rank finds itself in the group whose index it computes.
  for (int dim = 0; dim < 2; ++dim) {
    Groups all = mesh->AllGroups({dim});
    for (int r = 0; r < 4; ++r) {
      int index = mesh->GroupIndex(r, {dim});
      ASSERT_LT(index, static_cast<int>(all.size()));
      EXPECT_EQ(all[index], mesh->GroupRanks(r, {dim}));
      // A member's index in the group is its coordinate along the group dim.
      const std::vector<int>& g = all[index];
      EXPECT_EQ(g[mesh->Coordinate(r)[dim]], r);
    }
  }
  EXPECT_EQ(mesh->DimsLabel({1, 0}), "dp,mp");
  EXPECT_EQ(mesh->ToString(), "[2,2](dp,mp)");
}

TEST(MeshTest, ThreeDimGroupIndexMatchesEnumeration) {
  absl::StatusOr<Mesh> mesh = Mesh::Create({2, 3, 2}, {"pp", "dp", "mp"});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  for (std::vector<int> dims : {std::vector<int>{1}, std::vector<int>{0, 2}}) {
    Groups all = mesh->AllGroups(dims);
    int covered = 0;
    for (const auto& g : all) covered += g.size();
    EXPECT_EQ(covered, 12);
    for (int r = 0; r < 12; ++r) EXPECT_EQ(all[mesh->GroupIndex(r, dims)], mesh->GroupRanks(r, dims));
  }
}

TEST(MeshTest, RejectsBadShapes) {
  EXPECT_FALSE(Mesh::Create({}, {}).ok());
  EXPECT_FALSE(Mesh::Create({2, 0}, {"dp", "mp"}).ok());
  EXPECT_FALSE(Mesh::Create({2, 2}, {"dp", "dp"}).ok());
  EXPECT_FALSE(Mesh::Create({2, 2}, {"dp"}).ok());
  absl::StatusOr<Mesh> unnamed = Mesh::Create({2, 2}, {});
  ASSERT_TRUE(unnamed.ok());
  EXPECT_EQ(unnamed->dim_name(1), "d1");
}

}  // namespace
}  // namespace weft
