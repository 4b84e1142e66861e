#include "common/text/documents.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "common/io/file_util.h"
#include "common/text/test_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps::text {
namespace {

using ::testing::ElementsAre;

std::string TempPath(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t != nullptr ? t : "/tmp") + "/" + name;
}

TEST(DocumentsTest, TextFormatBibleChapters) {
  auto docs = ReadDocuments(DataDir() + "/corpus/slices/bible.txt", "text");
  if (!docs.ok()) GTEST_FAIL() << "run tools/get_data.sh slices";
  ASSERT_EQ(docs->size(), 3u);  // Genesis 1-3
  EXPECT_EQ((*docs)[0].id, "bible.txt:0");
  EXPECT_EQ(std::count((*docs)[0].text.begin(), (*docs)[0].text.end(), '\n'),
            30);  // 31 verses
  EXPECT_TRUE(absl::StartsWith((*docs)[2].text, "Now the serpent was more subtil"));
}

TEST(DocumentsTest, FortunesAndEmailDirectories) {
  auto f = ReadDocuments(DataDir() + "/corpus/fortunes/science", "fortunes");
  if (!f.ok()) GTEST_FAIL() << "run tools/get_data.sh fortunes";
  ASSERT_GT(f->size(), 100u);
  EXPECT_EQ((*f)[0].label, "science");
  EXPECT_EQ((*f)[0].id, "science:0");
  for (const Document& d : *f) EXPECT_FALSE(absl::StrContains(d.text, "\n%\n"));
  auto m = ReadDocuments(DataDir() + "/corpus/slices/spamassassin", "email");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 150u);
  EXPECT_EQ((*m)[0].id, "easy-ham-1/00001.7c53336b37003a9286aba55d2945844c.txt");
}

TEST(DocumentsTest, SentencesOfARealDescription) {
  auto docs = ReadDocuments(DataDir() + "/corpus/slices/debian.deb822",
                            "paragraphs");
  if (!docs.ok()) GTEST_FAIL() << "run tools/get_data.sh slices";
  // ICU's suppressions keep abbreviations such as "Mr." inside a sentence.
  EXPECT_THAT(SplitSentences("Mr. Smith reads JPEG files. It writes PNG.\n"
                             "Second line"),
              ElementsAre("Mr. Smith reads JPEG files.", "It writes PNG.",
                          "Second line"));
  // Genesis 1 as one paragraph: at least its 31 verses come back.
  auto bible = ReadDocuments(DataDir() + "/corpus/slices/bible.txt",
                             "paragraphs");
  ASSERT_TRUE(bible.ok());
  std::vector<std::string> s = SplitSentences((*bible)[0].text);
  EXPECT_GE(s.size(), 31u);
  EXPECT_EQ(s[0], "In the beginning God created the heaven and the earth.");
  for (const std::string& x : s) {
    EXPECT_EQ(x, std::string(absl::StripAsciiWhitespace(x)));
  }
  EXPECT_THAT(SplitSentences("bad \xFF byte. Next."),
              ElementsAre("bad  byte.", "Next."));
}

TEST(DocumentsTest, TextAndJsonlRoundTrip) {
  auto docs = ReadDocuments(DataDir() + "/corpus/slices/bible.txt", "text");
  if (!docs.ok()) GTEST_FAIL() << "run tools/get_data.sh slices";
  const std::string txt = TempPath("bible_out.txt");
  ASSERT_TRUE(WriteTextDocuments(*docs, txt).ok());
  auto back = ReadDocuments(txt, "text");
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 3u);
  // Verses with several sentences are split; no text is lost.
  auto letters = [](const std::string& s) {
    std::string r;
    for (char c : s) {
      if (c != ' ' && c != '\n') r += c;
    }
    return r;
  };
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(letters((*back)[i].text), letters((*docs)[i].text));
  }
  std::vector<Document> j = *docs;
  j[0].label = "genesis";
  j[1].text += "\xFF";  // ill-formed: written as U+FFFD
  const std::string jl = TempPath("bible.jsonl");
  ASSERT_TRUE(WriteJsonl(j, jl).ok());
  auto jb = ReadDocuments(jl, "jsonl");
  ASSERT_TRUE(jb.ok()) << jb.status();
  ASSERT_EQ(jb->size(), 3u);
  EXPECT_EQ((*jb)[0].label, "genesis");
  EXPECT_EQ((*jb)[0].text, (*docs)[0].text);
  EXPECT_EQ((*jb)[1].text, (*docs)[1].text + "\uFFFD");
}

TEST(DocumentsTest, Errors) {
  EXPECT_EQ(ReadDocuments("/no/such/path", "text").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseDocuments("x", "f", "xml").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto bad = ParseDocuments("{\"text\":\"a\"}\n{oops\n", "f.jsonl", "jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), testing::HasSubstr("f.jsonl:2"));
  EXPECT_FALSE(ParseDocuments("{\"text\":3}", "f", "jsonl").ok());
}

}  // namespace
}  // namespace bertps::text
