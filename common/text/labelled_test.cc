#include "common/text/labelled.h"

#include <cstdlib>
#include <map>
#include <string>

#include "common/text/test_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps::text {
namespace {

TEST(LabelledTest, SpamAssassinSlice) {
  CleanOptions o;
  o.dedup_exact = true;
  CleanReport rep;
  auto docs = ExtractLabelled("spamassassin",
                              DataDir() + "/corpus/slices/spamassassin", o, {},
                              &rep);
  if (!docs.ok() && absl::IsNotFound(docs.status())) {
    GTEST_FAIL() << "run tools/get_data.sh slices";
  }
  ASSERT_TRUE(docs.ok()) << docs.status();
  std::map<std::string, int> n;
  for (const Document& d : *docs) {
    ++n[d.label];
    EXPECT_EQ(d.label == "spam", d.id.rfind("spam", 0) == 0) << d.id;
    EXPECT_EQ(d.text.find("Received:"), std::string::npos) << d.id;
  }
  EXPECT_EQ(rep.documents_in, 150);
  EXPECT_EQ(n["spam"] + n["ham"], rep.documents_out);
  EXPECT_GE(n["spam"], 55);
  EXPECT_GE(n["ham"], 85);
  std::printf("spamassassin slice: %s\n", rep.ToJson().c_str());
}

TEST(LabelledTest, DebianSections) {
  auto docs = ExtractLabelled("debian-sections",
                              DataDir() + "/corpus/slices/debian.deb822",
                              CleanOptions{}, DefaultDebianSections(), nullptr);
  if (!docs.ok() && absl::IsNotFound(docs.status())) {
    GTEST_FAIL() << "run tools/get_data.sh slices";
  }
  ASSERT_TRUE(docs.ok()) << docs.status();
  std::map<std::string, int> n;
  for (const Document& d : *docs) ++n[d.label];
  EXPECT_EQ(n.size(), DefaultDebianSections().size());
  for (const auto& [label, count] : n) {
    EXPECT_THAT(DefaultDebianSections(), testing::Contains(label));
    EXPECT_GT(count, 3) << label;
  }
  // Long descriptions: the synopsis, then paragraphs on their own lines.
  EXPECT_NE((*docs)[0].text.find('\n'), std::string::npos);
}

TEST(LabelledTest, ParseDebianPackagesArchiveAreas) {
  auto docs = ParseDebianPackages(
      "Package: a\nSection: contrib/net\nDescription: syn\n one\n two\n .\n three\n\n"
      "Package: b\nSection: libs\nDescription: x\n y\n",
      {"net"});
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 1u);
  EXPECT_EQ((*docs)[0].label, "net");
  EXPECT_EQ((*docs)[0].text, "syn\none two\nthree");
}

TEST(LabelledTest, FortunesAndUnknownSource) {
  auto docs = ExtractLabelled("fortunes", DataDir() + "/corpus/fortunes",
                              CleanOptions{}, {}, nullptr);
  if (!docs.ok() && absl::IsNotFound(docs.status())) {
    GTEST_FAIL() << "run tools/get_data.sh fortunes";
  }
  ASSERT_TRUE(docs.ok());
  std::map<std::string, int> n;
  for (const Document& d : *docs) ++n[d.label];
  EXPECT_EQ(n.size(), 43u);
  EXPECT_FALSE(ExtractLabelled("nope", "x", CleanOptions{}, {}, nullptr).ok());
}

}  // namespace
}  // namespace bertps::text
