#include "common/text/vocab_builder.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "common/status.h"
#include "common/text/tokenizer.h"
#include "common/text/unicode.h"

namespace bertps::text {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxWordChars =
    WordpieceTokenizer::kDefaultMaxInputCharsPerWord;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
         static_cast<uint32_t>(b);
}
int32_t Left(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t Right(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFF); }

absl::Status CheckOptions(const VocabBuilderOptions& o) {
  if (o.limit_alphabet < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit_alphabet must be >= 1, not ", o.limit_alphabet));
  }
  if (o.min_frequency < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_frequency must be >= 1, not ", o.min_frequency));
  }
  if (o.num_unused < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_unused must be >= 0, not ", o.num_unused));
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& s : o.special_tokens) {
    if (s.empty() || std::any_of(s.begin(), s.end(), [](char c) {
          return absl::ascii_isspace(static_cast<unsigned char>(c));
        })) {
      return absl::InvalidArgumentError(
          absl::StrCat("special token '", s, "' is empty or has whitespace"));
    }
    if (!seen.insert(s).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("special token '", s, "' given twice"));
    }
  }
  return absl::OkStatus();
}

// The merge loop over the distinct words (see the header).
class Trainer {
 public:
  Trainer(const VocabBuilderOptions& o, VocabBuilderStats* stats)
      : o_(o), stats_(stats) {}

  absl::StatusOr<std::vector<std::string>> Run(
      std::vector<std::pair<std::string, int64_t>> counts);

 private:
  struct Word {
    std::vector<int32_t> pieces;
    int64_t count;
  };
  struct PairStat {
    int64_t count = 0;
    uint32_t version = 0;
    std::vector<int32_t> words;  // may hold stale or repeated entries
  };
  struct Candidate {
    int64_t ab, a, b;  // counts when pushed
    uint64_t key;
    uint32_t version;
  };
  // True if x ranks below y (for std::priority_queue).
  struct Below {
    bool operator()(const Candidate& x, const Candidate& y) const {
      using U = unsigned __int128;
      const U lhs =
          static_cast<U>(x.ab) * static_cast<U>(y.a) * static_cast<U>(y.b);
      const U rhs =
          static_cast<U>(y.ab) * static_cast<U>(x.a) * static_cast<U>(x.b);
      if (lhs != rhs) return lhs < rhs;
      if (x.ab != y.ab) return x.ab < y.ab;
      return x.key > y.key;  // smaller (id(a), id(b)) ranks higher
    }
  };

  int32_t PieceId(const std::string& s) {
    auto [it, inserted] =
        piece_id_.emplace(s, static_cast<int32_t>(pieces_.size()));
    if (inserted) {
      pieces_.push_back(s);
      piece_count_.push_back(0);
      piece_pairs_.emplace_back();
    }
    return it->second;
  }
  void AddPair(uint64_t key, int64_t delta, int32_t word) {
    PairStat& p = pairs_[key];
    if (p.count == 0 && delta > 0) {
      piece_pairs_[Left(key)].insert(key);
      piece_pairs_[Right(key)].insert(key);
    }
    p.count += delta;
    if (delta > 0) p.words.push_back(word);
    touched_.insert(key);
  }
  // Adds (sign +1) or removes (-1) the word's pieces and pairs.
  void Account(int32_t w, int sign) {
    const Word& word = words_[w];
    const int64_t c = sign * word.count;
    for (size_t i = 0; i < word.pieces.size(); ++i) {
      piece_count_[word.pieces[i]] += c;
      if (i + 1 < word.pieces.size()) {
        AddPair(PairKey(word.pieces[i], word.pieces[i + 1]), c, w);
      }
    }
  }
  // Invalidates the heap entries of `key` and pushes a fresh one.
  void Refresh(uint64_t key) {
    auto it = pairs_.find(key);
    if (it == pairs_.end()) return;
    PairStat& p = it->second;
    ++p.version;
    if (p.count <= 0) {
      piece_pairs_[Left(key)].erase(key);
      piece_pairs_[Right(key)].erase(key);
      pairs_.erase(it);
      return;
    }
    if (p.count >= o_.min_frequency) {
      heap_.push_back({p.count, piece_count_[Left(key)],
                       piece_count_[Right(key)], key, p.version});
      if (!bulk_) std::push_heap(heap_.begin(), heap_.end(), Below());
    }
  }
  void Merge(uint64_t key);
  // One fresh entry per live pair, stale ones dropped (capacity kept).
  void RebuildHeap() {
    heap_.clear();
    std::vector<uint64_t> all;
    all.reserve(pairs_.size());
    for (const auto& [k, p] : pairs_) all.push_back(k);
    std::sort(all.begin(), all.end());
    bulk_ = true;
    for (uint64_t k : all) Refresh(k);
    bulk_ = false;
    std::make_heap(heap_.begin(), heap_.end(), Below());
  }

  const VocabBuilderOptions& o_;
  VocabBuilderStats* stats_;
  std::vector<Word> words_;
  std::vector<std::string> pieces_;   // piece id -> string
  std::vector<int64_t> piece_count_;  // piece id -> weighted count
  std::vector<absl::flat_hash_set<uint64_t>> piece_pairs_;  // live pairs
  absl::flat_hash_map<std::string, int32_t> piece_id_;
  absl::flat_hash_map<uint64_t, PairStat> pairs_;
  absl::flat_hash_set<uint64_t> touched_;
  std::vector<Candidate> heap_;  // a max-heap under Below
  bool bulk_ = false;            // Refresh appends without heap order
};

void Trainer::Merge(uint64_t key) {
  const int32_t a = Left(key), b = Right(key);
  const std::string& bs = pieces_[b];
  const int32_t c = PieceId(pieces_[a] + bs.substr(2));  // b starts "##"
  std::vector<int32_t> ws = std::move(pairs_[key].words);
  std::sort(ws.begin(), ws.end());
  ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
  touched_.clear();
  for (int32_t w : ws) {
    std::vector<int32_t>& p = words_[w].pieces;
    bool has = false;
    for (size_t i = 0; i + 1 < p.size() && !has; ++i) {
      has = p[i] == a && p[i + 1] == b;
    }
    if (!has) continue;
    Account(w, -1);
    size_t out = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      if (i + 1 < p.size() && p[i] == a && p[i + 1] == b) {
        p[out++] = c;
        ++i;
      } else {
        p[out++] = p[i];
      }
    }
    p.resize(out);
    Account(w, +1);
  }
  // Pairs whose own count changed, and every pair of a piece whose count
  // changed (a, b and c), get fresh scores.
  for (int32_t piece : {a, b, c}) {
    for (uint64_t k : piece_pairs_[piece]) touched_.insert(k);
  }
  touched_.insert(key);
  std::vector<uint64_t> keys(touched_.begin(), touched_.end());
  std::sort(keys.begin(), keys.end());  // deterministic heap contents
  for (uint64_t k : keys) Refresh(k);
  if (heap_.size() > 4 * pairs_.size() + (1 << 20)) RebuildHeap();
}

absl::StatusOr<std::vector<std::string>> Trainer::Run(
    std::vector<std::pair<std::string, int64_t>> counts) {
  // Distinct words in byte order, counts summed.
  std::sort(counts.begin(), counts.end());
  std::vector<std::pair<std::string, int64_t>> distinct;
  for (auto& wc : counts) {
    if (wc.first.empty() || wc.second <= 0) continue;
    if (!distinct.empty() && distinct.back().first == wc.first) {
      distinct.back().second += wc.second;
    } else {
      distinct.push_back(std::move(wc));
    }
  }
  counts.clear();
  stats_->distinct_words = static_cast<int64_t>(distinct.size());

  // Alphabet: the most frequent code points.
  std::vector<std::vector<char32_t>> chars(distinct.size());
  absl::flat_hash_map<char32_t, int64_t> char_count;
  for (size_t i = 0; i < distinct.size(); ++i) {
    const std::string& w = distinct[i].first;
    for (size_t pos = 0; pos < w.size();) {
      const char32_t cp = DecodeUtf8(w, &pos);
      if (cp == kInvalidCodePoint) continue;
      chars[i].push_back(cp);
      char_count[cp] += distinct[i].second;
    }
  }
  std::vector<std::pair<int64_t, char32_t>> by_count;
  for (const auto& [cp, n] : char_count) by_count.push_back({-n, cp});
  std::sort(by_count.begin(), by_count.end());
  const size_t keep =
      std::min(by_count.size(), static_cast<size_t>(o_.limit_alphabet));
  std::vector<char32_t> alphabet;
  for (size_t i = 0; i < keep; ++i) alphabet.push_back(by_count[i].second);
  std::sort(alphabet.begin(), alphabet.end());
  const absl::flat_hash_set<char32_t> in_alphabet(alphabet.begin(),
                                                  alphabet.end());
  stats_->alphabet = static_cast<int64_t>(alphabet.size());
  stats_->dropped_chars = static_cast<int64_t>(by_count.size() - keep);

  // Initial vocabulary.
  std::vector<std::string> vocab = o_.special_tokens;
  for (int i = 0; i < o_.num_unused; ++i) {
    vocab.push_back(absl::StrCat("[unused", i, "]"));
  }
  for (const std::string& s : vocab) PieceId(s);
  const size_t num_fixed = vocab.size();
  for (char32_t cp : alphabet) {
    std::string s;
    AppendUtf8(cp, &s);
    vocab.push_back(s);
  }
  for (char32_t cp : alphabet) {
    if (IsPunctuation(cp) || IsCjk(cp)) continue;
    std::string s = "##";
    AppendUtf8(cp, &s);
    vocab.push_back(std::move(s));
  }
  for (size_t i = num_fixed; i < vocab.size(); ++i) {
    if (piece_id_.contains(vocab[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "special token '", vocab[i], "' is also an alphabet character"));
    }
    PieceId(vocab[i]);
  }
  if (vocab.size() > static_cast<size_t>(o_.vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size ", o_.vocab_size, " is below the initial vocabulary of ",
        vocab.size(), " entries (", o_.special_tokens.size(), " special, ",
        o_.num_unused, " unused, ", vocab.size() - num_fixed,
        " for the alphabet of ", alphabet.size(),
        " characters); raise vocab_size or lower limit_alphabet"));
  }

  // Words as initial pieces.
  std::string piece;
  for (size_t i = 0; i < distinct.size(); ++i) {
    const std::vector<char32_t>& cps = chars[i];
    const bool usable = cps.size() <= kMaxWordChars &&
                        std::all_of(cps.begin(), cps.end(), [&](char32_t cp) {
                          return in_alphabet.contains(cp);
                        });
    if (!usable) {
      ++stats_->skipped_words;
      continue;
    }
    Word word{{}, distinct[i].second};
    for (size_t j = 0; j < cps.size(); ++j) {
      piece = j == 0 ? "" : "##";
      AppendUtf8(cps[j], &piece);
      auto it = piece_id_.find(piece);
      if (it == piece_id_.end()) break;  // "##" + punctuation: never merged
      word.pieces.push_back(it->second);
    }
    if (word.pieces.size() != cps.size()) {
      ++stats_->skipped_words;
      continue;
    }
    words_.push_back(std::move(word));
  }
  distinct.clear();
  chars.clear();
  for (int32_t w = 0; w < static_cast<int32_t>(words_.size()); ++w) {
    Account(w, +1);
  }
  RebuildHeap();

  // Merges.
  while (vocab.size() < static_cast<size_t>(o_.vocab_size)) {
    if (heap_.empty()) {
      stats_->exhausted = true;
      break;
    }
    std::pop_heap(heap_.begin(), heap_.end(), Below());
    const Candidate top = heap_.back();
    heap_.pop_back();
    auto it = pairs_.find(top.key);
    if (it == pairs_.end() || it->second.version != top.version) continue;
    const size_t before = pieces_.size();
    Merge(top.key);
    ++stats_->merges;
    if (pieces_.size() > before) vocab.push_back(pieces_.back());
  }
  return vocab;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> BuildWordPieceVocabFromCounts(
    const std::vector<std::pair<std::string, int64_t>>& word_counts,
    const VocabBuilderOptions& o, VocabBuilderStats* stats) {
  RETURN_IF_ERROR(CheckOptions(o));
  VocabBuilderStats local;
  if (stats == nullptr) stats = &local;
  *stats = VocabBuilderStats();
  const auto start = Clock::now();
  Trainer trainer(o, stats);
  auto vocab = trainer.Run(word_counts);
  stats->merge_seconds = Seconds(start);
  return vocab;
}

absl::StatusOr<std::vector<std::string>> BuildWordPieceVocab(
    const std::vector<std::string>& files, const VocabBuilderOptions& o,
    VocabBuilderStats* stats) {
  RETURN_IF_ERROR(CheckOptions(o));
  if (files.empty()) {
    return absl::InvalidArgumentError("build-vocab: no input files");
  }
  VocabBuilderStats local;
  if (stats == nullptr) stats = &local;
  *stats = VocabBuilderStats();
  const auto start = Clock::now();
  const BasicTokenizer basic(o.do_lower_case);
  absl::flat_hash_map<std::string, int64_t> counts;
  std::string line;
  for (const std::string& path : files) {
    {
      // Only regular files: a FIFO or a device would never end.
      ASSIGN_OR_RETURN(const int fd, io::OpenRegularFile(path));
      close(fd);
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return io::ErrnoStatus(errno, "open", path);
    while (std::getline(in, line)) {
      stats->bytes += static_cast<int64_t>(line.size()) + 1;
      basic.ForEachToken(line, [&](absl::string_view token) {
        ++counts[token];
        ++stats->words;
      });
    }
    if (in.bad()) {
      return absl::DataLossError(absl::StrCat("read ", path, " failed"));
    }
  }
  std::vector<std::pair<std::string, int64_t>> list(counts.begin(),
                                                    counts.end());
  counts = {};
  stats->count_seconds = Seconds(start);
  const auto merge_start = Clock::now();
  Trainer trainer(o, stats);
  auto vocab = trainer.Run(std::move(list));
  stats->merge_seconds = Seconds(merge_start);
  return vocab;
}

absl::Status WriteVocabFile(const std::string& path,
                            const std::vector<std::string>& tokens) {
  std::string text;
  for (const std::string& t : tokens) {
    if (t.empty() || std::any_of(t.begin(), t.end(), [](char c) {
          return absl::ascii_isspace(static_cast<unsigned char>(c));
        })) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab token '", t, "' is empty or has whitespace"));
    }
    absl::StrAppend(&text, t, "\n");
  }
  return io::WriteFileAtomically(path, text);
}

}  // namespace bertps::text
