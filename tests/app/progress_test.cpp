#include "app/progress.h"

#include <gtest/gtest.h>

#include <sstream>

namespace baton {
namespace {

TEST(Progress, FormatsCountsRateAndEta) {
  ProgressSnapshot p;
  p.documents = 50;
  p.total_documents = 200;
  p.tokens = 1'500'000;
  p.seconds = 10.0;
  // A quarter done in 10 s: 30 s to go at the same pace.
  EXPECT_EQ(
      format_progress(p),
      "50/200 documents (25.0%), 1.50M tokens, 0.15M tokens/s, ETA 30s");
  p.documents = 2;
  p.seconds = 75.0;
  EXPECT_NE(format_progress(p).find("ETA 2h03m"), std::string::npos)
      << format_progress(p);
  p.documents = 200;
  EXPECT_EQ(
      format_progress(p),
      "200/200 documents (100.0%), 1.50M tokens, 0.02M tokens/s, done in "
      "1m15s");
}

TEST(Progress, TerminalRedrawsInPlacePlainOutputPrintsLines) {
  std::ostringstream terminal;
  ProgressReporter bar(terminal, /*terminal=*/true, 3);
  for (int i = 0; i < 3; ++i) {
    bar.add(10);
  }
  bar.finish();
  const std::string drawn = terminal.str();
  EXPECT_EQ(drawn.front(), '\r');
  EXPECT_EQ(drawn.back(), '\n');
  EXPECT_NE(
      drawn.find("3/3 documents (100.0%), 0.00M tokens"), std::string::npos)
      << drawn;
  EXPECT_EQ(drawn.find('\n'), drawn.size() - 1);  // one line, redrawn

  std::ostringstream log;
  ProgressReporter plain(log, /*terminal=*/false, 3, /*plain_interval_s=*/1e9);
  plain.add(10);
  plain.finish();
  EXPECT_EQ(log.str().find('\r'), std::string::npos);
  EXPECT_EQ(log.str().rfind("1/3 documents (33.3%)", 0), 0u) << log.str();
}

}  // namespace
}  // namespace baton
