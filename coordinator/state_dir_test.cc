#include "coordinator/state_dir.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace weft::coordinator {
namespace {

absl::StatusOr<std::string> With(const std::map<std::string, std::string>& env) {
  return DefaultStateDir([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(StateDirTest, SystemdThenXdgThenHome) {
  EXPECT_EQ(*With({{"STATE_DIRECTORY", "/var/lib/weft"}, {"HOME", "/home/a"}}), "/var/lib/weft");
  EXPECT_EQ(*With({{"STATE_DIRECTORY", "/var/lib/weft:/var/lib/other"}}), "/var/lib/weft");
  EXPECT_EQ(*With({{"XDG_STATE_HOME", "/home/a/state"}, {"HOME", "/home/a"}}),
            "/home/a/state/weft");
  EXPECT_EQ(*With({{"HOME", "/home/a"}}), "/home/a/.local/state/weft");
  // Relative values are ignored, as the XDG spec asks.
  EXPECT_EQ(*With({{"XDG_STATE_HOME", "state"}, {"HOME", "/home/a"}}),
            "/home/a/.local/state/weft");
  absl::StatusOr<std::string> none = With({{"HOME", ""}});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("--data_dir"), absl::string_view::npos);
}

}  // namespace
}  // namespace weft::coordinator
