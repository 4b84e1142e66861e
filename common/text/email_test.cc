#include "common/text/email.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "common/io/bert_example.h"
#include "common/io/file_util.h"
#include "common/text/unicode.h"
#include "common/text/test_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps::text {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Mail(const std::string& name) {
  auto r = io::ReadFileToString(DataDir() + "/corpus/slices/spamassassin/" + name);
  return r.ok() ? *r : "";
}

TEST(EmailTest, QuotedPrintableTextAndBase64Attachment) {
  // multipart/mixed: a text/plain quoted-printable part and a base64
  // application/octet-stream attachment (dropped).
  const std::string raw = Mail("spam-1/00022.8203cdf03888f656dc0381701148f73d.txt");
  if (raw.empty()) GTEST_FAIL() << "run tools/get_data.sh slices";
  const std::string t = ExtractEmailText(raw);
  EXPECT_EQ(t.substr(0, t.find('\n')), "Relationship");
  EXPECT_THAT(t, Not(HasSubstr("Content-Type")));
  EXPECT_THAT(t, Not(HasSubstr("Received:")));
  EXPECT_THAT(t, Not(HasSubstr("=20\n")));
  EXPECT_THAT(t, Not(HasSubstr("=\n")));
  EXPECT_THAT(t, Not(HasSubstr("SecAtt")));  // the boundary
}

TEST(EmailTest, Base64HtmlPartIsDecodedAndStripped) {
  const std::string raw = Mail("spam-1/00023.b6d27c684f5fc803cfa1060adb2d0805.txt");
  if (raw.empty()) GTEST_FAIL() << "run tools/get_data.sh slices";
  const std::string t = ExtractEmailText(raw);
  EXPECT_EQ(t.substr(0, t.find('\n')), "Penile enlargement method - guaranteed !");
  EXPECT_THAT(t, Not(HasSubstr("<")));
  EXPECT_THAT(t, Not(HasSubstr("PGh0bWw")));  // base64 of "<html"
  EXPECT_GT(t.size(), 200u);
}

TEST(EmailTest, QuotedPrintableHtmlSpam) {
  const std::string raw = Mail("spam-1/00001.7848dde101aa985090474a91ec93fcf0.txt");
  if (raw.empty()) GTEST_FAIL() << "run tools/get_data.sh slices";
  const std::string t = ExtractEmailText(raw);
  EXPECT_EQ(t.substr(0, t.find('\n')), "Life Insurance - Why Pay More?");
  EXPECT_THAT(t, Not(HasSubstr("<")));
  EXPECT_THAT(t, Not(HasSubstr("=3D")));
  EXPECT_THAT(t, Not(HasSubstr("&nbsp;")));
}

TEST(EmailTest, Latin1Charset) {
  const std::string raw = Mail("easy-ham-1/00007.37a8af848caae585af4fe35779656d55.txt");
  if (raw.empty()) GTEST_FAIL() << "run tools/get_data.sh slices";
  EXPECT_THAT(ExtractEmailText(raw), HasSubstr("250,000\n (\u00A3160,000)."));
}

TEST(EmailTest, EncodedWordSubjects) {
  // Real Subject lines of the corpus (easy-ham-1/02434, hard-ham-1/00039).
  EXPECT_EQ(DecodeHeaderValue("=?iso-8859-1?Q?Re:_RE:_=5Bzzzzteana=5D_Sitting_"
                              "Bull_=FCber_alles_=5BLong=5D?="),
            "Re: RE: [zzzzteana] Sitting Bull \u00FCber alles [Long]");
  const std::string jp = DecodeHeaderValue(
      "=?iso-2022-jp?B?GyRCRnxLXDhsJE43b0w+IUolNSVWJTglJyUvJUghSyEhJTkbKEI=?=");
  EXPECT_THAT(jp, HasSubstr("\u65E5\u672C\u8A9E"));  // 日本語
  EXPECT_EQ(DecodeHeaderValue("plain =?bogus"), "plain =?bogus");
}

TEST(EmailTest, Decoders) {
  EXPECT_EQ(DecodeQuotedPrintable("a=3Db=\nc =\r\nd=XY="), "a=bc d=XY");
  EXPECT_EQ(DecodeBase64Lenient("aGVs\nbG8=\n"), "hello");
  EXPECT_EQ(CharsetToUtf8("caf\xE9", "windows-1252"), "caf\u00E9");
  EXPECT_EQ(CharsetToUtf8("caf\xE9", ""), "caf\u00E9");        // not UTF-8
  EXPECT_EQ(CharsetToUtf8("caf\xE9", "no-such"), "caf\u00E9");
  EXPECT_EQ(CharsetToUtf8("caf\xC3\xA9", "us-ascii"), "caf\u00E9");
}

// The byte offset of the first ill-formed UTF-8 sequence, or -1.
int64_t FirstInvalidUtf8(const std::string& s) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t at = pos;
    if (DecodeUtf8(s, &pos) == kInvalidCodePoint) return static_cast<int64_t>(at);
  }
  return -1;
}

// Every mail of the slice (30 of each of the 5 groups, tools/get_data.sh
// slices), whole and cut short every 97 bytes (truncated parts and
// boundaries), gives valid UTF-8; whole mails give text.
TEST(EmailTest, EveryMailOfTheSliceGivesValidUtf8) {
  const std::string root = DataDir() + "/corpus/slices/spamassassin";
  std::vector<std::string> files;
  for (const char* group :
       {"easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"}) {
    auto matched = io::MatchShardFiles({root + "/" + group + "/*.txt"});
    ASSERT_TRUE(matched.ok())
        << matched.status() << ": run tools/get_data.sh slices";
    files.insert(files.end(), matched->begin(), matched->end());
  }
  ASSERT_EQ(files.size(), 150u);
  int64_t empty = 0, cuts = 0;
  for (const std::string& f : files) {
    auto raw = io::ReadFileToString(f);
    ASSERT_TRUE(raw.ok()) << raw.status();
    const std::string text = ExtractEmailText(*raw);
    ASSERT_EQ(FirstInvalidUtf8(text), -1) << f;
    if (text.empty()) ++empty;
    for (size_t cut = 0; cut < raw->size(); cut += 97, ++cuts) {
      ASSERT_EQ(FirstInvalidUtf8(ExtractEmailText(raw->substr(0, cut))), -1)
          << f << " cut at " << cut;
    }
  }
  EXPECT_EQ(empty, 0);
  EXPECT_GT(cuts, 150 * 10);
}

}  // namespace
}  // namespace bertps::text
