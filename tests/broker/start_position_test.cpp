// start_position: the text forms of a consumer's start position (issue 20).

#include "broker/start_position.hpp"

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(StartPosition, NamesDigitsAndDateTimesParse) {
  EXPECT_EQ(*parse_start_position("earliest"), start_earliest);
  EXPECT_EQ(*parse_start_position("latest"), start_latest);
  EXPECT_EQ(*parse_start_position("1700000000000"), 1700000000000);
  EXPECT_EQ(*parse_start_position("2026-12-01"), 1796083200000);
  EXPECT_EQ(*parse_start_position("2026-12-01T08:30"), 1796113800000);
  EXPECT_EQ(*parse_start_position("2026-12-01T08:30:15.250Z"), 1796113815250);
  // A zone: 10:30 at +02:00 is 08:30 UTC.
  EXPECT_EQ(*parse_start_position("2026-12-01T10:30:00+02:00"), 1796113800000);
  EXPECT_EQ(*parse_start_position("2026-12-01T03:30:00-0500"), 1796113800000);
}

TEST(StartPosition, AnythingElseIsAnInvalidConfigNamingTheForms) {
  for (auto bad : {"", "newest", "2026-13-01", "2026-12-01T25:00", "2026-12-01T08",
                   "2026-12-01T08:00:00.Z", "2026-12-01 junk", "-5", "1e9",
                   "99999999999999999999999", "1969-12-31"}) {
    auto x = parse_start_position(bad);
    ASSERT_FALSE(x) << bad;
    EXPECT_TRUE(is(x.error(), ec::invalid_config)) << bad;
    EXPECT_NE(describe(x.error()).find("earliest, latest"), std::string::npos)
      << describe(x.error());
  }
}

TEST(StartPosition, TextRoundTrips) {
  EXPECT_EQ(start_position_text(start_earliest), "earliest");
  EXPECT_EQ(start_position_text(start_latest), "latest");
  EXPECT_EQ(start_position_text(1796113815250), "2026-12-01T08:30:15.250Z");
  EXPECT_EQ(*parse_start_position(start_position_text(1796113815250)),
            1796113815250);
  EXPECT_FALSE(validate_start_position(-1));
  EXPECT_FALSE(validate_start_position(0));
  EXPECT_TRUE(is(validate_start_position(-3), ec::invalid_config));
}

} // namespace
} // namespace ferry
