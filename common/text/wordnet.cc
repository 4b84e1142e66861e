#include "common/text/wordnet.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/io/file_util.h"
#include "common/status.h"

namespace bertps::text {
namespace {

constexpr const char* kPosName[WordNet::kNumPos] = {"noun", "verb", "adj",
                                                    "adv"};

struct Rule {
  absl::string_view suffix;
  absl::string_view replacement;
};

// morphy(7WN) detachment rules.
const std::vector<Rule>& Rules(int pos) {
  static const auto* rules = new std::vector<Rule>[WordNet::kNumPos] {
    {{"s", ""},      {"ses", "s"},   {"xes", "x"},   {"zes", "z"},
     {"ches", "ch"}, {"shes", "sh"}, {"men", "man"}, {"ies", "y"}},
        {{"s", ""},   {"ies", "y"}, {"es", "e"},  {"es", ""},
         {"ed", "e"}, {"ed", ""},   {"ing", "e"}, {"ing", ""}},
        {{"er", ""}, {"est", ""}, {"er", "e"}, {"est", "e"}}, {},
  };
  return rules[pos];
}

absl::Status Malformed(const std::string& path, size_t line_no,
                       absl::string_view why) {
  return absl::DataLossError(
      absl::StrCat(path, ":", line_no, ": ", why, " (not a WordNet 3.0 file)"));
}

// Calls fn(line, line_no, byte_offset) for each line that is not part of the
// license header (lines starting with two spaces). Stops at the first error.
template <typename Fn>
absl::Status ForEachLine(absl::string_view text, Fn&& fn) {
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == absl::string_view::npos) nl = text.size();
    absl::string_view line = text.substr(pos, nl - pos);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!absl::StartsWith(line, "  ") &&
        !absl::StripAsciiWhitespace(line).empty()) {
      RETURN_IF_ERROR(fn(line, line_no, pos));
    }
    pos = nl + 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWordNetFile(const std::string& path) {
  auto text = io::ReadFileToString(path);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("WordNet file ", path, ": ", text.status().message(),
                     " (install the wordnet-base package or pass the "
                     "directory of index.noun, data.noun, noun.exc, ...)"));
  }
  if (text->empty()) {
    return absl::DataLossError(
        absl::StrCat("WordNet file ", path, " is empty"));
  }
  return text;
}

std::string Normalize(absl::string_view word) {
  std::string w = absl::AsciiStrToLower(absl::StripAsciiWhitespace(word));
  std::replace(w.begin(), w.end(), ' ', '_');
  return w;
}

// A data-file lemma as a synonym: '_' -> ' ', "(p)"/"(a)"/"(ip)" dropped.
std::string LemmaText(absl::string_view lemma) {
  if (!lemma.empty() && lemma.back() == ')') {
    size_t open = lemma.rfind('(');
    if (open != absl::string_view::npos && open > 0) {
      lemma = lemma.substr(0, open);
    }
  }
  std::string s(lemma);
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

}  // namespace

size_t WordNet::num_lemmas(Pos pos) const { return index_[pos].size(); }

absl::StatusOr<WordNet> WordNet::Load(const std::string& dir) {
  WordNet wn;
  for (int p = 0; p < kNumPos; ++p) {
    // data.<pos>: one synset per line; the line starts with its byte offset.
    const std::string data_path = absl::StrCat(dir, "/data.", kPosName[p]);
    ASSIGN_OR_RETURN(const std::string data, ReadWordNetFile(data_path));
    absl::flat_hash_map<uint32_t, uint32_t> synset_of_offset;
    RETURN_IF_ERROR(ForEachLine(
        data,
        [&](absl::string_view line, size_t line_no,
            size_t byte_offset) -> absl::Status {
          std::vector<absl::string_view> f =
              absl::StrSplit(line, ' ', absl::SkipEmpty());
          uint32_t offset = 0;
          int w_cnt = 0;
          if (f.size() < 6 || f[0].size() != 8 ||
              !absl::SimpleAtoi(f[0], &offset) ||
              !absl::SimpleHexAtoi(f[3], &w_cnt) || w_cnt <= 0 ||
              f.size() < 4 + 2 * static_cast<size_t>(w_cnt)) {
            return Malformed(data_path, line_no,
                             "expected 'offset lex_filenum ss_type w_cnt "
                             "word lex_id ...'");
          }
          if (offset != byte_offset) {
            return Malformed(
                data_path, line_no,
                absl::StrCat("synset offset ", f[0],
                             " is not the line's byte offset ", byte_offset));
          }
          synset_of_offset[offset] =
              static_cast<uint32_t>(wn.synset_begin_[p].size());
          wn.synset_begin_[p].push_back(
              static_cast<uint32_t>(wn.lemmas_[p].size()));
          for (int i = 0; i < w_cnt; ++i) {
            wn.lemmas_[p].push_back(LemmaText(f[4 + 2 * i]));
          }
          return absl::OkStatus();
        }));
    if (wn.synset_begin_[p].empty()) {
      return Malformed(data_path, 0, "no synsets");
    }

    // index.<pos>: lemma pos synset_cnt p_cnt [ptr...] sense_cnt
    // tagsense_cnt offset... (synset_cnt offsets, last on the line).
    const std::string index_path = absl::StrCat(dir, "/index.", kPosName[p]);
    ASSIGN_OR_RETURN(const std::string index, ReadWordNetFile(index_path));
    RETURN_IF_ERROR(ForEachLine(
        index,
        [&](absl::string_view line, size_t line_no, size_t) -> absl::Status {
          std::vector<absl::string_view> f =
              absl::StrSplit(line, ' ', absl::SkipEmpty());
          int synset_cnt = 0;
          if (f.size() < 6 || !absl::SimpleAtoi(f[2], &synset_cnt) ||
              synset_cnt <= 0 ||
              f.size() < 6 + static_cast<size_t>(synset_cnt)) {
            return Malformed(index_path, line_no,
                             "expected 'lemma pos synset_cnt p_cnt ... "
                             "synset_offset...'");
          }
          std::vector<uint32_t>& synsets = wn.index_[p][std::string(f[0])];
          for (size_t i = f.size() - synset_cnt; i < f.size(); ++i) {
            uint32_t offset = 0;
            auto it = synset_of_offset.end();
            if (absl::SimpleAtoi(f[i], &offset)) {
              it = synset_of_offset.find(offset);
            }
            if (it == synset_of_offset.end()) {
              return Malformed(
                  index_path, line_no,
                  absl::StrCat("lemma '", f[0], "' names synset offset ", f[i],
                               ", which is not a synset line of ", data_path));
            }
            synsets.push_back(it->second);
          }
          return absl::OkStatus();
        }));

    // <pos>.exc: inflected base [base...]
    const std::string exc_path = absl::StrCat(dir, "/", kPosName[p], ".exc");
    ASSIGN_OR_RETURN(const std::string exc, ReadWordNetFile(exc_path));
    RETURN_IF_ERROR(ForEachLine(
        exc,
        [&](absl::string_view line, size_t line_no, size_t) -> absl::Status {
          std::vector<absl::string_view> f =
              absl::StrSplit(line, ' ', absl::SkipEmpty());
          if (f.size() < 2) {
            return Malformed(exc_path, line_no,
                             "expected 'inflected_form base_form...'");
          }
          std::vector<std::string>& bases =
              wn.exceptions_[p][std::string(f[0])];
          for (size_t i = 1; i < f.size(); ++i) bases.emplace_back(f[i]);
          return absl::OkStatus();
        }));
  }
  return wn;
}

std::vector<std::string> WordNet::BaseForms(absl::string_view word,
                                            Pos pos) const {
  const std::string w = Normalize(word);
  std::vector<std::string> out;
  if (w.empty()) return out;
  auto keep = [&](std::string candidate) {
    if (index_[pos].contains(candidate) &&
        std::find(out.begin(), out.end(), candidate) == out.end()) {
      out.push_back(std::move(candidate));
    }
  };
  keep(w);
  auto exc = exceptions_[pos].find(w);
  if (exc != exceptions_[pos].end()) {
    for (const std::string& base : exc->second) keep(base);
    return out;
  }
  for (const Rule& r : Rules(pos)) {
    if (w.size() > r.suffix.size() && absl::EndsWith(w, r.suffix)) {
      keep(absl::StrCat(
          absl::string_view(w).substr(0, w.size() - r.suffix.size()),
          r.replacement));
    }
  }
  return out;
}

std::vector<std::string> WordNet::BaseForms(absl::string_view word) const {
  std::vector<std::string> out;
  for (int p = 0; p < kNumPos; ++p) {
    for (std::string& b : BaseForms(word, static_cast<Pos>(p))) {
      out.push_back(std::move(b));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> WordNet::Synonyms(absl::string_view word) const {
  std::string self = Normalize(word);
  std::replace(self.begin(), self.end(), '_', ' ');
  std::vector<std::string> out;
  for (int p = 0; p < kNumPos; ++p) {
    for (const std::string& base : BaseForms(word, static_cast<Pos>(p))) {
      auto it = index_[p].find(base);
      if (it == index_[p].end()) continue;
      for (uint32_t s : it->second) {
        const size_t begin = synset_begin_[p][s];
        const size_t end = s + 1 < synset_begin_[p].size()
                               ? synset_begin_[p][s + 1]
                               : lemmas_[p].size();
        for (size_t i = begin; i < end; ++i) {
          if (absl::AsciiStrToLower(lemmas_[p][i]) != self) {
            out.push_back(lemmas_[p][i]);
          }
        }
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace bertps::text
