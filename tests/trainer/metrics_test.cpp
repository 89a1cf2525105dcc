#include "trainer/metrics.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(Metrics, TimeLeftReadsAtAGlance) {
  EXPECT_EQ(format_duration(0.0), "0s");
  EXPECT_EQ(format_duration(-3.0), "0s");
  EXPECT_EQ(format_duration(44.6), "45s");
  EXPECT_EQ(format_duration(60.0), "1m00s");
  EXPECT_EQ(format_duration(725.0), "12m05s");
  EXPECT_EQ(format_duration(3599.4), "59m59s");
  EXPECT_EQ(format_duration(3600.0 * 3 + 4 * 60 + 30), "3h04m");
}

}  // namespace
}  // namespace baton
