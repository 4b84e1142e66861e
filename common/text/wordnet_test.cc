#include "common/text/wordnet.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/text/test_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps::text {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

const WordNet* Shared() {
  static const WordNet* wn = [] {
    auto w = WordNet::Load(WordNetDir());
    if (!w.ok()) {
      std::fprintf(stderr, "%s\n", w.status().ToString().c_str());
      return static_cast<WordNet*>(nullptr);
    }
    return new WordNet(std::move(*w));
  }();
  return wn;
}

#define REQUIRE_WORDNET()                                 \
  const WordNet* wn = Shared();                           \
  if (wn == nullptr)                                      \
  GTEST_FAIL() << "no WordNet in " << WordNetDir()        \
                << ": run tools/get_data.sh wordnet"

TEST(WordNetTest, LoadsEverySynset) {
  REQUIRE_WORDNET();
  // WordNet 3.0's published counts (wnstats(7WN)).
  EXPECT_EQ(wn->num_synsets(WordNet::kNoun), 82115u);
  EXPECT_EQ(wn->num_synsets(WordNet::kVerb), 13767u);
  EXPECT_EQ(wn->num_synsets(WordNet::kAdj), 18156u);
  EXPECT_EQ(wn->num_synsets(WordNet::kAdv), 3621u);
  EXPECT_EQ(wn->num_lemmas(WordNet::kNoun), 117798u);
  EXPECT_EQ(wn->num_lemmas(WordNet::kVerb), 11529u);
  EXPECT_EQ(wn->num_lemmas(WordNet::kAdj), 21479u);
  EXPECT_EQ(wn->num_lemmas(WordNet::kAdv), 4481u);
}

TEST(WordNetTest, SynonymsComeFromTheSynsets) {
  REQUIRE_WORDNET();
  // car.n.01 is {car, auto, automobile, machine, motorcar}.
  std::vector<std::string> car = wn->Synonyms("car");
  for (const char* s : {"auto", "automobile", "machine", "motorcar", "railcar",
                        "cable car", "elevator car", "gondola"}) {
    EXPECT_THAT(car, Contains(s));
  }
  EXPECT_THAT(car, Not(Contains("car")));
  EXPECT_TRUE(std::is_sorted(car.begin(), car.end()));
  EXPECT_EQ(std::adjacent_find(car.begin(), car.end()), car.end());
  // Capitalised input is looked up lowercased; capitalised lemmas stay so.
  EXPECT_EQ(wn->Synonyms("Car"), car);
  EXPECT_THAT(wn->Synonyms("dog"), Contains("Canis familiaris"));
  // Adjective position markers are dropped: "galore(ip)".
  EXPECT_THAT(wn->Synonyms("abounding"), Contains("galore"));
  // Collocations: spaces and underscores both find "ice_cream".
  EXPECT_THAT(wn->Synonyms("ice cream"), Contains("icecream"));
  EXPECT_EQ(wn->Synonyms("ice_cream"), wn->Synonyms("ice cream"));
  EXPECT_THAT(wn->Synonyms("xyzzyplugh"), IsEmpty());
  EXPECT_THAT(wn->Synonyms(""), IsEmpty());
  EXPECT_THAT(wn->Synonyms("café"), IsEmpty());
}

TEST(WordNetTest, InflectedWordsReachTheirSynsets) {
  REQUIRE_WORDNET();
  // Regular: detachment rules. "cars" reaches car's synsets; "car" itself
  // then counts as a synonym of "cars".
  std::vector<std::string> cars = wn->Synonyms("cars");
  EXPECT_THAT(cars, Contains("automobile"));
  EXPECT_THAT(cars, Contains("car"));
  // Irregular: the exception lists.
  EXPECT_THAT(wn->Synonyms("geese"), Contains("goose"));
  EXPECT_THAT(wn->Synonyms("ran"), Contains("run"));
}

TEST(WordNetTest, BaseFormsFollowMorphy) {
  REQUIRE_WORDNET();
  EXPECT_THAT(wn->BaseForms("geese"), ElementsAre("goose"));
  EXPECT_THAT(wn->BaseForms("dogs"), ElementsAre("dog"));
  EXPECT_THAT(wn->BaseForms("running"), ElementsAre("run", "running"));
  EXPECT_THAT(wn->BaseForms("better"), ElementsAre("better", "good", "well"));
  EXPECT_THAT(wn->BaseForms("churches"), ElementsAre("church"));
  EXPECT_THAT(wn->BaseForms("boxes"), ElementsAre("box"));
  EXPECT_THAT(wn->BaseForms("women"), ElementsAre("woman"));
  EXPECT_THAT(wn->BaseForms("bodies"), ElementsAre("body"));
  EXPECT_THAT(wn->BaseForms("happiest"), ElementsAre("happy"));
  // Per part of speech, the word itself first.
  EXPECT_THAT(wn->BaseForms("running", WordNet::kVerb), ElementsAre("run"));
  EXPECT_THAT(wn->BaseForms("running", WordNet::kNoun), ElementsAre("running"));
  // Both rules apply: -ing>-e and -ing.
  EXPECT_THAT(wn->BaseForms("hoping", WordNet::kVerb),
              ElementsAre("hope", "hop"));
  EXPECT_THAT(wn->BaseForms("xyzzyplugh"), IsEmpty());
  // Exception entries win over the rules: "axes" -> ax, axis (noun.exc).
  EXPECT_THAT(wn->BaseForms("axes", WordNet::kNoun),
              testing::IsSupersetOf({"ax", "axis"}));
}

// A copy of the database in a temporary directory, to break.
class BrokenWordNetTest : public testing::Test {
 protected:
  void SetUp() override {
    if (Shared() == nullptr) GTEST_FAIL() << "no WordNet";
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/wordnet_copy");
    ASSERT_EQ(std::system(absl::StrCat("rm -rf ", dir_, " && mkdir -p ", dir_,
                                       " && cp ", WordNetDir(), "/*.* ", dir_)
                              .c_str()),
              0);
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ + "/" + name, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name, std::ios::binary | std::ios::trunc)
        << text;
  }
  std::string dir_;
};

TEST_F(BrokenWordNetTest, MissingFileIsNotFound) {
  ASSERT_EQ(std::remove((dir_ + "/verb.exc").c_str()), 0);
  auto wn = WordNet::Load(dir_);
  EXPECT_EQ(wn.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(wn.status().message(), HasSubstr("verb.exc"));
  EXPECT_THAT(wn.status().message(), HasSubstr("wordnet-base"));
  EXPECT_EQ(WordNet::Load(dir_ + "/nowhere").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(BrokenWordNetTest, ShiftedDataFileIsDataLoss) {
  // One byte inserted early moves every later synset off its offset.
  std::string data = Read("data.adv");
  data.insert(data.find("\n0") + 1, "x");
  Write("data.adv", data);
  auto wn = WordNet::Load(dir_);
  EXPECT_EQ(wn.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(wn.status().message(), HasSubstr("data.adv:30"));
}

TEST_F(BrokenWordNetTest, TruncatedDataFileIsDataLoss) {
  // Index offsets then point past the end of data.noun.
  std::string data = Read("data.noun");
  Write("data.noun", data.substr(0, data.size() / 2 + 0));
  auto wn = WordNet::Load(dir_);
  EXPECT_EQ(wn.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(wn.status().message(), HasSubstr("data.noun"));
}

TEST_F(BrokenWordNetTest, BadIndexOffsetIsDataLoss) {
  std::string index = Read("index.verb");
  const size_t at = index.find("\nrun v ");
  ASSERT_NE(at, std::string::npos);
  const size_t eol = index.find('\n', at + 1);
  index.replace(at + 1, eol - at - 1, "run v 1 0 1 0 00000001  ");
  Write("index.verb", index);
  auto wn = WordNet::Load(dir_);
  EXPECT_EQ(wn.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(wn.status().message(), HasSubstr("'run'"));
  EXPECT_THAT(wn.status().message(), HasSubstr("00000001"));
}

TEST_F(BrokenWordNetTest, EmptyOrForeignFileIsDataLoss) {
  Write("adv.exc", "");
  EXPECT_EQ(WordNet::Load(dir_).status().code(), absl::StatusCode::kDataLoss);
  Write("adv.exc", "better well\n");
  Write("index.adj", "this is not an index\n");
  auto wn = WordNet::Load(dir_);
  EXPECT_EQ(wn.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(wn.status().message(), HasSubstr("index.adj:1"));
}

}  // namespace
}  // namespace bertps::text
