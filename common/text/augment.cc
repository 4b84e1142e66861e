#include "common/text/augment.h"

#include <utf8proc.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "common/text/unicode.h"
#include "common/splitmix.h"

namespace bertps::text {
namespace {

bool IsWordChar(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      return true;
    default:
      return false;
  }
}

// Written for this project: English function words (articles, pronouns,
// prepositions, conjunctions, auxiliaries, common adverbs) in the form
// EdaWords leaves them (lowercase, apostrophes removed).
const absl::flat_hash_set<absl::string_view>& StopWords() {
  static const auto* words = new absl::flat_hash_set<absl::string_view>{
      "a",          "about",    "above",     "after",     "again",
      "against",    "all",      "also",      "am",        "an",
      "and",        "any",      "are",       "arent",     "as",
      "at",         "be",       "because",   "been",      "before",
      "being",      "below",    "between",   "both",      "but",
      "by",         "can",      "cannot",    "cant",      "could",
      "couldnt",    "did",      "didnt",     "do",        "does",
      "doesnt",     "doing",    "dont",      "down",      "during",
      "each",       "either",   "else",      "ever",      "every",
      "few",        "for",      "from",      "further",   "had",
      "hadnt",      "has",      "hasnt",     "have",      "havent",
      "having",     "he",       "her",       "here",      "hers",
      "herself",    "him",      "himself",   "his",       "how",
      "however",    "i",        "if",        "in",        "into",
      "is",         "isnt",     "it",        "its",       "itself",
      "just",       "least",    "less",      "let",       "lets",
      "may",        "me",       "might",     "mine",      "more",
      "most",       "must",     "mustnt",    "my",        "myself",
      "neither",    "no",       "nor",       "not",       "now",
      "of",         "off",      "often",     "on",        "once",
      "only",       "onto",     "or",        "other",     "others",
      "ought",      "our",      "ours",      "ourselves", "out",
      "over",       "own",      "per",       "same",      "shall",
      "she",        "should",   "shouldnt",  "since",     "so",
      "some",       "still",    "such",      "than",      "that",
      "thats",      "the",      "their",     "theirs",    "them",
      "themselves", "then",     "there",     "therefore", "these",
      "they",       "this",     "those",     "though",    "through",
      "thus",       "to",       "too",       "under",     "until",
      "up",         "upon",     "us",        "very",      "via",
      "was",        "wasnt",    "we",        "were",      "werent",
      "what",       "when",     "where",     "whether",   "which",
      "while",      "who",      "whom",      "whose",     "why",
      "will",       "with",     "within",    "without",   "wont",
      "would",      "wouldnt",  "yet",       "you",       "your",
      "yours",      "yourself", "yourselves"};
  return *words;
}

std::string JoinWords(const std::vector<std::string>& words) {
  return absl::StrJoin(words, " ");
}

// Synonyms per distinct word, for one Eda call (a sentence repeats lookups
// for each of its candidates).
class SynonymCache {
 public:
  explicit SynonymCache(const WordNet& wn) : wn_(wn) {}
  const std::vector<std::string>& Get(const std::string& word) {
    auto it = cache_.find(word);
    if (it == cache_.end()) {
      it = cache_.emplace(word, EdaSynonyms(wn_, word)).first;
    }
    return it->second;
  }

 private:
  const WordNet& wn_;
  // Node map: references returned by Get stay valid.
  absl::node_hash_map<std::string, std::vector<std::string>> cache_;
};

std::vector<std::string> SynonymReplacementImpl(
    const std::vector<std::string>& words, int n, SynonymCache* syn,
    EdaRandom* rng) {
  std::vector<std::string> out = words;
  // Distinct non-stop words in order of first occurrence, then shuffled.
  std::vector<std::string> types;
  absl::flat_hash_set<absl::string_view> seen;
  for (const std::string& w : words) {
    if (!IsEdaStopWord(w) && seen.insert(w).second) types.push_back(w);
  }
  for (size_t i = types.size(); i > 1; --i) {
    std::swap(types[i - 1], types[rng->Uniform(i)]);
  }
  int replaced = 0;
  for (const std::string& type : types) {
    if (replaced >= n) break;
    const std::vector<std::string>& s = syn->Get(type);
    if (s.empty()) continue;
    const std::string& pick = s[rng->Uniform(s.size())];
    for (size_t i = 0; i < words.size(); ++i) {
      if (words[i] == type) out[i] = pick;
    }
    ++replaced;
  }
  return out;
}

std::vector<std::string> RandomInsertionImpl(
    const std::vector<std::string>& words, int n, SynonymCache* syn,
    EdaRandom* rng) {
  std::vector<std::string> out = words;
  std::vector<const std::vector<std::string>*> sources;  // per occurrence
  for (const std::string& w : words) {
    if (IsEdaStopWord(w)) continue;
    const std::vector<std::string>& s = syn->Get(w);
    if (!s.empty()) sources.push_back(&s);
  }
  if (sources.empty()) return out;
  for (int k = 0; k < n; ++k) {
    const std::vector<std::string>& s = *sources[rng->Uniform(sources.size())];
    const std::string& pick = s[rng->Uniform(s.size())];
    const size_t gap = rng->Uniform(out.size() + 1);
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(gap), pick);
  }
  return out;
}

}  // namespace

EdaRandom::EdaRandom(uint64_t seed, uint64_t key)
    : state_(SplitMix64(SplitMix64(seed) ^ (key * 0xD1B54A32D192ED03ull))) {}

uint64_t EdaRandom::Next() {
  state_ += 0x9E3779B97F4A7C15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

size_t EdaRandom::Uniform(size_t n) {
  return static_cast<size_t>((static_cast<unsigned __int128>(Next()) * n) >>
                             64);
}

double EdaRandom::UniformDouble() {
  return static_cast<double>(Next() >> 11) * 0x1.0p-53;
}

std::vector<std::string> EdaWords(absl::string_view text) {
  std::vector<std::string> words;
  std::vector<char32_t> word, lower;
  auto flush = [&] {
    if (word.empty()) return;
    lower.clear();
    PythonLower(word, &lower);
    std::string utf8;
    for (char32_t cp : lower) AppendUtf8(cp, &utf8);
    words.push_back(std::move(utf8));
    word.clear();
  };
  for (size_t pos = 0; pos < text.size();) {
    const char32_t cp = DecodeUtf8(text, &pos);
    if (cp == kInvalidCodePoint || cp == '\'' || cp == 0x2019) continue;
    if (IsWordChar(cp)) {
      word.push_back(cp);
    } else {
      flush();
    }
  }
  flush();
  return words;
}

bool IsEdaStopWord(absl::string_view word) {
  return StopWords().contains(word);
}

std::vector<std::string> EdaSynonyms(const WordNet& wn,
                                     absl::string_view word) {
  std::vector<std::string> out;
  for (const std::string& lemma : wn.Synonyms(word)) {
    std::string s = JoinWords(EdaWords(lemma));
    if (!s.empty() && s != word) out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> SynonymReplacement(
    const std::vector<std::string>& words, int n, const WordNet& wn,
    EdaRandom* rng) {
  SynonymCache syn(wn);
  return SynonymReplacementImpl(words, n, &syn, rng);
}

std::vector<std::string> RandomInsertion(const std::vector<std::string>& words,
                                         int n, const WordNet& wn,
                                         EdaRandom* rng) {
  SynonymCache syn(wn);
  return RandomInsertionImpl(words, n, &syn, rng);
}

std::vector<std::string> RandomSwap(const std::vector<std::string>& words,
                                    int n, EdaRandom* rng) {
  std::vector<std::string> out = words;
  if (out.size() < 2) return out;
  for (int k = 0; k < n; ++k) {
    const size_t i = rng->Uniform(out.size());
    size_t j = rng->Uniform(out.size() - 1);
    if (j >= i) ++j;
    std::swap(out[i], out[j]);
  }
  return out;
}

std::vector<std::string> RandomDeletion(const std::vector<std::string>& words,
                                        double p, EdaRandom* rng) {
  if (words.size() <= 1) return words;
  std::vector<std::string> out;
  for (const std::string& w : words) {
    if (rng->UniformDouble() >= p) out.push_back(w);
  }
  if (out.empty()) out.push_back(words[rng->Uniform(words.size())]);
  return out;
}

int EdaCount(double alpha, size_t num_words) {
  return std::max(1, static_cast<int>(alpha * static_cast<double>(num_words)));
}

std::vector<std::string> Eda(absl::string_view sentence, const WordNet& wn,
                             const EdaOptions& o, uint64_t key) {
  std::vector<std::string> out;
  if (o.num_aug <= 0) return out;
  const bool any =
      o.alpha_sr > 0 || o.alpha_ri > 0 || o.alpha_rs > 0 || o.p_rd > 0;
  if (!any) return out;
  const std::vector<std::string> words = EdaWords(sentence);
  if (words.empty()) return std::vector<std::string>(o.num_aug);
  EdaRandom rng(o.seed, key);
  SynonymCache syn(wn);
  const int per_op = o.num_aug / 4 + 1;
  const size_t len = words.size();
  if (o.alpha_sr > 0) {
    const int n = EdaCount(o.alpha_sr, len);
    for (int i = 0; i < per_op; ++i) {
      out.push_back(JoinWords(SynonymReplacementImpl(words, n, &syn, &rng)));
    }
  }
  if (o.alpha_ri > 0) {
    const int n = EdaCount(o.alpha_ri, len);
    for (int i = 0; i < per_op; ++i) {
      out.push_back(JoinWords(RandomInsertionImpl(words, n, &syn, &rng)));
    }
  }
  if (o.alpha_rs > 0) {
    const int n = EdaCount(o.alpha_rs, len);
    for (int i = 0; i < per_op; ++i) {
      out.push_back(JoinWords(RandomSwap(words, n, &rng)));
    }
  }
  if (o.p_rd > 0) {
    for (int i = 0; i < per_op; ++i) {
      out.push_back(JoinWords(RandomDeletion(words, o.p_rd, &rng)));
    }
  }
  for (size_t i = out.size(); i > 1; --i) {
    std::swap(out[i - 1], out[rng.Uniform(i)]);
  }
  if (out.size() > static_cast<size_t>(o.num_aug)) out.resize(o.num_aug);
  return out;
}

absl::Status AugmentLines(const WordNet& wn, const EdaOptions& o,
                          std::istream& in, std::ostream& out,
                          uint64_t first_key, int64_t* sentences_out) {
  std::string line;
  int64_t sentences = 0;
  for (uint64_t key = first_key; std::getline(in, line); ++key) {
    out << line << '\n';
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    for (const std::string& a : Eda(line, wn, o, key)) out << a << '\n';
    ++sentences;
  }
  if (in.bad()) return absl::DataLossError("augment: reading the input failed");
  out.flush();
  if (!out) return absl::DataLossError("augment: writing the output failed");
  if (sentences_out != nullptr) *sentences_out = sentences;
  return absl::OkStatus();
}

}  // namespace bertps::text
