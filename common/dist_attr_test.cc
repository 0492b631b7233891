#include "common/dist_attr.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

Mesh MakeMesh(std::vector<int64_t> shape, std::vector<std::string> names) {
  absl::StatusOr<Mesh> mesh = Mesh::Create(std::move(shape), std::move(names));
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return *mesh;
}

std::vector<int64_t> Offsets(const v1::TensorBox& box) {
  return std::vector<int64_t>(box.offsets().begin(), box.offsets().end());
}

TEST(DistAttrTest, SplitSizesGiveRemainderToLast) {
  EXPECT_EQ(SplitSizes(10, 4), (std::vector<int64_t>{2, 2, 2, 4}));
  EXPECT_EQ(SplitSizes(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(SplitSizes(3, 4), (std::vector<int64_t>{0, 0, 0, 3}));
  EXPECT_EQ(ShardRange(10, 4, 3), (std::pair<int64_t, int64_t>{6, 4}));
  EXPECT_EQ(ShardRange(10, 4, 1), (std::pair<int64_t, int64_t>{2, 2}));
}

TEST(DistAttrTest, UnevenShardLocalShapesAndBoxes) {
  Mesh mesh = MakeMesh({4}, {"dp"});
  absl::StatusOr<DistAttr> attr = DistAttr::Create(mesh, {Placement::Shard(-2)}, 2);
  ASSERT_TRUE(attr.ok()) << attr.status();
  EXPECT_EQ(attr->placement(0), Placement::Shard(0));  // normalized
  std::vector<int64_t> rows;
  for (int r = 0; r < 4; ++r) rows.push_back(attr->LocalShape({10, 3}, r)[0]);
  EXPECT_EQ(rows, (std::vector<int64_t>{2, 2, 2, 4}));
  EXPECT_EQ(Offsets(attr->Box({10, 3}, 3)), (std::vector<int64_t>{6, 0}));
  EXPECT_EQ(attr->LocalShape({10, 3}, 3), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(attr->MaxLocalElements({10, 3}), 12);
}

TEST(DistAttrTest, TwoDimMeshShardsAndNestedSplit) {
  Mesh mesh = MakeMesh({2, 2}, {"dp", "mp"});
  absl::StatusOr<DistAttr> attr =
      DistAttr::Create(mesh, {Placement::Shard(0), Placement::Shard(1)}, 2);
  ASSERT_TRUE(attr.ok());
  // Rank 1 = (dp 0, mp 1): rows 0..3, cols 3..5 of [8, 6].
  v1::TensorBox box = attr->Box({8, 6}, 1);
  EXPECT_EQ(Offsets(box), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(attr->LocalShape({8, 6}, 1), (std::vector<int64_t>{4, 3}));

  // Both mesh dims split axis 0: dp outermost, each level uneven by Paddle's rule.
  absl::StatusOr<DistAttr> nested =
      DistAttr::Create(mesh, {Placement::Shard(0), Placement::Shard(0)}, 1);
  ASSERT_TRUE(nested.ok());
  // 11 -> dp pieces 5, 6; each -> mp pieces (2, 3), (3, 3).
  std::vector<std::pair<int64_t, int64_t>> expect = {{0, 2}, {2, 3}, {5, 3}, {8, 3}};
  for (int r = 0; r < 4; ++r) {
    v1::TensorBox b = nested->Box({11}, r);
    EXPECT_EQ(b.offsets(0), expect[r].first) << r;
    EXPECT_EQ(b.lengths(0), expect[r].second) << r;
  }
}

TEST(DistAttrTest, PartialAndReplicateDoNotSplit) {
  Mesh mesh = MakeMesh({2, 2}, {"dp", "mp"});
  absl::StatusOr<DistAttr> attr =
      DistAttr::Create(mesh, {Placement::Partial(), Placement::Replicate()}, 2);
  ASSERT_TRUE(attr.ok());
  EXPECT_TRUE(attr->HasPartial());
  EXPECT_FALSE(attr->IsReplicated());
  EXPECT_EQ(attr->LocalShape({5, 7}, 3), (std::vector<int64_t>{5, 7}));
  EXPECT_TRUE(DistAttr::Replicated(mesh).IsReplicated());
  EXPECT_EQ(attr->ToString(), "[Partial(sum), Replicate()]");
}

TEST(DistAttrTest, RejectsWrongCountAndAxis) {
  Mesh mesh = MakeMesh({2, 2}, {"dp", "mp"});
  absl::Status s = DistAttr::Create(mesh, {Placement::Shard(0)}, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[Shard(0)]"), std::string::npos) << s;
  s = DistAttr::Create(mesh, {Placement::Shard(2), Placement::Replicate()}, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("axis 2"), std::string::npos) << s;
}

TEST(DistAttrTest, ProtoRoundTrip) {
  for (Placement p : {Placement::Replicate(), Placement::Shard(-1), Placement::Partial(),
                      Placement::Partial(Placement::Reduce::kAvg)}) {
    absl::StatusOr<Placement> back = Placement::FromProto(p.ToProto());
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, p);
  }
  EXPECT_FALSE(Placement::FromProto(v1::Placement()).ok());
}

}  // namespace
}  // namespace weft
