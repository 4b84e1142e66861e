#include "common/text/clean.h"

#include <unicode/uchar.h>
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "common/text/email.h"
#include "common/text/unicode.h"
#include "nlohmann/json.hpp"

namespace bertps::text {
namespace {

int64_t Chars(absl::string_view s) {
  return static_cast<int64_t>(CountCodePoints(s));
}

std::string Utf8(char32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

// NFC of valid UTF-8 (unchanged when utf8proc fails).
std::string Nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
      static_cast<utf8proc_ssize_t>(s.size()), &out,
      static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return s;
  std::string r(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

// `letters` with combining `mark` after its last letter, composed (NFC).
std::string WithMark(absl::string_view letters, char32_t mark) {
  std::string s(letters);
  AppendUtf8(mark, &s);
  return Nfc(s);
}

// The character with Unicode name `name` (ICU), or "" when there is none.
std::string ByUnicodeName(const std::string& name) {
  UErrorCode err = U_ZERO_ERROR;
  const UChar32 c = u_charFromName(U_UNICODE_CHAR_NAME, name.c_str(), &err);
  if (U_FAILURE(err) || c < 0) return "";
  return Utf8(static_cast<char32_t>(c));
}

// GCIDE's named letters and signs -> Unicode character names.
const absl::flat_hash_map<std::string, std::string>& GcideNames() {
  static const auto* m = new absl::flat_hash_map<std::string, std::string>{
      {"ae", "LATIN SMALL LETTER AE"},
      {"AE", "LATIN CAPITAL LETTER AE"},
      {"oe", "LATIN SMALL LIGATURE OE"},
      {"OE", "LATIN CAPITAL LIGATURE OE"},
      {"eth", "LATIN SMALL LETTER ETH"},
      {"thorn", "LATIN SMALL LETTER THORN"},
      {"yogh", "LATIN SMALL LETTER YOGH"},
      {"ng", "LATIN SMALL LETTER ENG"},
      {"imac", "LATIN SMALL LETTER I WITH MACRON"},
      {"aum", "LATIN SMALL LETTER A WITH DIAERESIS"},
      {"udd", "LATIN SMALL LETTER U WITH DIAERESIS BELOW"},
      {"dsdot", "LATIN SMALL LETTER D WITH DOT BELOW"},
      {"sect", "SECTION SIGN"},
      {"deg", "DEGREE SIGN"},
      {"root", "SQUARE ROOT"},
      {"pounds", "POUND SIGN"},
      {"prime", "PRIME"},
      {"bprime", "DOUBLE PRIME"},
      {"sharp", "MUSIC SHARP SIGN"},
      {"flat", "MUSIC FLAT SIGN"},
      {"middot", "MIDDLE DOT"},
  };
  return *m;
}

bool IsAsciiLetters(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isalpha(c)) return false;
  }
  return true;
}

// A GCIDE letter name (bracket or <x/> form) -> text; "" if unknown.
std::string GcideLetter(absl::string_view name) {
  auto it = GcideNames().find(std::string(name));
  if (it != GcideNames().end()) return ByUnicodeName(it->second);
  if (name.size() >= 2 && name.size() <= 3 && name.back() == '^' &&
      IsAsciiLetters(name.substr(0, name.size() - 1))) {
    return WithMark(name.substr(0, name.size() - 1), 0x0306);  // breve
  }
  if (name.size() >= 2 && name.size() <= 3 &&
      IsAsciiLetters(name.substr(1))) {
    char32_t mark = 0;
    switch (name[0]) {
      case '\'': mark = 0x0301; break;  // acute
      case '`': mark = 0x0300; break;   // grave
      case '"': mark = 0x0308; break;   // diaeresis
      case '~': mark = 0x0303; break;   // tilde
      case '=': case '-': mark = 0x0304; break;  // macron
      case '.': mark = 0x0307; break;   // dot above
      case ',': mark = 0x0327; break;   // cedilla
      case '^': mark = 0x0302; break;   // circumflex
      default: break;
    }
    if (mark != 0) return WithMark(name.substr(1), mark);
  }
  // Greek letter names: [alpha], [Delta].
  if (IsAsciiLetters(name) && name.size() >= 2 && name.size() <= 8) {
    std::string n = absl::StrCat(
        absl::ascii_isupper(name[0]) ? "GREEK CAPITAL LETTER "
                                     : "GREEK SMALL LETTER ",
        absl::AsciiStrToUpper(name));
    return ByUnicodeName(n);
  }
  return "";
}

// HTML named character references: the common non-letter ones, then
// <letter><accent> names composed with NFC.
std::string HtmlEntity(absl::string_view name) {
  static const auto* m = new absl::flat_hash_map<std::string, char32_t>{
      {"amp", '&'},      {"lt", '<'},       {"gt", '>'},
      {"quot", '"'},     {"apos", '\''},    {"nbsp", 0xA0},
      {"copy", 0xA9},    {"reg", 0xAE},     {"trade", 0x2122},
      {"hellip", 0x2026}, {"mdash", 0x2014}, {"ndash", 0x2013},
      {"lsquo", 0x2018}, {"rsquo", 0x2019}, {"ldquo", 0x201C},
      {"rdquo", 0x201D}, {"bull", 0x2022},  {"middot", 0xB7},
      {"laquo", 0xAB},   {"raquo", 0xBB},   {"deg", 0xB0},
      {"pound", 0xA3},   {"euro", 0x20AC},  {"cent", 0xA2},
      {"yen", 0xA5},     {"sect", 0xA7},    {"para", 0xB6},
      {"times", 0xD7},   {"divide", 0xF7},  {"frac12", 0xBD},
      {"frac14", 0xBC},  {"frac34", 0xBE},  {"iexcl", 0xA1},
      {"iquest", 0xBF},  {"szlig", 0xDF},   {"aelig", 0xE6},
      {"AElig", 0xC6},   {"oslash", 0xF8},  {"Oslash", 0xD8},
      {"shy", 0xAD},     {"ensp", 0x2002},  {"emsp", 0x2003},
      {"thinsp", 0x2009},
  };
  auto it = m->find(std::string(name));
  if (it != m->end()) return Utf8(it->second);
  static const std::pair<const char*, char32_t> kAccents[] = {
      {"acute", 0x0301}, {"grave", 0x0300}, {"uml", 0x0308},
      {"circ", 0x0302},  {"tilde", 0x0303}, {"cedil", 0x0327},
      {"ring", 0x030A}};
  if (name.size() >= 4 && absl::ascii_isalpha(name[0])) {
    for (const auto& [suffix, mark] : kAccents) {
      if (name.substr(1) == suffix) return WithMark(name.substr(0, 1), mark);
    }
  }
  return "";
}

// Decodes &...; references in `s`.
std::string DecodeEntities(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i + 1);
    if (semi == absl::string_view::npos || semi - i > 33) {
      out += '&';
      continue;
    }
    absl::string_view name = s.substr(i + 1, semi - i - 1);
    std::string rep;
    if (name.size() >= 2 && name[0] == '#') {
      const bool hex = name[1] == 'x' || name[1] == 'X';
      absl::string_view digits = name.substr(hex ? 2 : 1);
      char32_t v = 0;
      bool ok = !digits.empty() && digits.size() <= 8;
      for (char c : digits) {
        if (!ok) break;
        int d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (hex && c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (hex && c >= 'A' && c <= 'F') d = c - 'A' + 10;
        if (d < 0) ok = false;
        else v = v * (hex ? 16 : 10) + static_cast<char32_t>(d);
      }
      if (ok) {
        if (v != 0 && v <= 0x10FFFF && (v < 0xD800 || v > 0xDFFF)) {
          rep = Utf8(v);
        }
        out += rep;  // an invalid number decodes to nothing
        i = semi;
        continue;
      }
    } else {
      rep = HtmlEntity(name);
      if (!rep.empty()) {
        out += rep;
        i = semi;
        continue;
      }
    }
    out += '&';
  }
  return out;
}

bool IsBlockTag(absl::string_view name) {
  static const auto* s = new absl::flat_hash_set<std::string>{
      "p",  "br", "div", "li", "tr", "td", "th", "table", "ul", "ol",
      "h1", "h2", "h3",  "h4", "h5", "h6", "hr", "title", "blockquote",
      "pre", "center", "dd", "dt", "body", "html", "head"};
  return s->contains(name);
}

// Finds `needle` (lower-case ASCII) in s from `from`, ignoring ASCII case.
size_t FindIgnoreCase(absl::string_view s, absl::string_view needle,
                      size_t from) {
  for (size_t i = from; i + needle.size() <= s.size(); ++i) {
    if (absl::EqualsIgnoreCase(s.substr(i, needle.size()), needle)) return i;
  }
  return absl::string_view::npos;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ULL;
  }
  return h;
}

// Sorted, unique shingle hashes of a document (see clean.h).
std::vector<uint64_t> Shingles(absl::string_view text, int k) {
  std::vector<uint64_t> words;
  for (absl::string_view w :
       absl::StrSplit(text, absl::ByAnyChar(" \n\t"), absl::SkipEmpty())) {
    words.push_back(Fnv1a(absl::AsciiStrToLower(w)));
  }
  std::vector<uint64_t> sh;
  const size_t n = words.size();
  const size_t kk = static_cast<size_t>(k);
  const size_t count = n <= kk ? (n > 0 ? 1 : 0) : n - kk + 1;
  for (size_t i = 0; i < count; ++i) {
    uint64_t h = 0x1234567ULL;
    for (size_t j = i; j < std::min(n, i + kk); ++j) {
      h = SplitMix64(h ^ words[j]);
    }
    sh.push_back(h);
  }
  std::sort(sh.begin(), sh.end());
  sh.erase(std::unique(sh.begin(), sh.end()), sh.end());
  return sh;
}

double Jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  size_t i = 0, j = 0, both = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) {
      ++both;
      ++i;
      ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  const size_t uni = a.size() + b.size() - both;
  return uni == 0 ? 1.0 : static_cast<double>(both) / static_cast<double>(uni);
}

}  // namespace

absl::StatusOr<int> LshBandsFor(double threshold, int perms) {
  if (!(threshold > 0.0 && threshold <= 1.0) || perms < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "near-duplicate banding: threshold ", threshold, " or permutations ",
        perms, " out of range"));
  }
  int best = 0;
  for (int rows = 1; rows <= perms; rows *= 2) {
    if (perms % rows != 0) break;
    const int bands = perms / rows;
    const double miss = std::pow(1.0 - std::pow(threshold, rows), bands);
    if (miss <= kMaxNearMiss) best = bands;  // fewer bands: fewer candidates
  }
  if (best == 0) {
    // r = 1: (1 - t)^perms <= kMaxNearMiss.
    const double lowest = 1.0 - std::pow(kMaxNearMiss, 1.0 / perms);
    return absl::InvalidArgumentError(absl::StrCat(
        "near_threshold ", threshold, " is below what ", perms,
        " MinHash permutations can serve (at least ", lowest,
        " for a miss rate under ", kMaxNearMiss, ")"));
  }
  return best;
}

namespace {

// Removes near duplicates (see clean.h) from docs, `bands` LSH bands.
std::vector<Document> DedupNear(std::vector<Document> docs,
                                const CleanOptions& o, int bands,
                                CleanStepReport* r) {
  const int perms = o.minhash_perms;
  const int rows = perms / bands;
  std::vector<uint64_t> seeds(perms);
  for (int p = 0; p < perms; ++p) {
    seeds[p] = SplitMix64(o.seed * 0x100000001B3ULL + static_cast<uint64_t>(p));
  }
  std::vector<std::vector<uint64_t>> kept_shingles;
  absl::flat_hash_map<uint64_t, std::vector<int>> buckets;  // band key -> kept
  std::vector<Document> out;
  std::vector<uint64_t> sig(perms);
  for (Document& d : docs) {
    std::vector<uint64_t> sh = Shingles(d.text, o.shingle_words);
    std::fill(sig.begin(), sig.end(), ~0ULL);
    for (uint64_t s : sh) {
      for (int p = 0; p < perms; ++p) {
        sig[p] = std::min(sig[p], SplitMix64(s ^ seeds[p]));
      }
    }
    std::vector<uint64_t> keys(bands);
    for (int b = 0; b < bands; ++b) {
      uint64_t k = SplitMix64(static_cast<uint64_t>(b) + 0x51ED270B27ULL);
      for (int j = 0; j < rows; ++j) k = SplitMix64(k ^ sig[b * rows + j]);
      keys[b] = k;
    }
    bool dup = false;
    absl::flat_hash_set<int> seen;
    for (uint64_t k : keys) {
      auto it = buckets.find(k);
      if (it == buckets.end()) continue;
      for (int c : it->second) {
        if (!seen.insert(c).second) continue;
        if (Jaccard(sh, kept_shingles[c]) >= o.near_threshold) {
          dup = true;
          break;
        }
      }
      if (dup) break;
    }
    if (dup) {
      ++r->documents_removed;
      r->chars_removed += Chars(d.text);
      continue;
    }
    const int idx = static_cast<int>(kept_shingles.size());
    kept_shingles.push_back(std::move(sh));
    for (uint64_t k : keys) buckets[k].push_back(idx);
    out.push_back(std::move(d));
  }
  return out;
}

int64_t CountWords(absl::string_view text) {
  int64_t n = 0;
  for (absl::string_view w :
       absl::StrSplit(text, absl::ByAnyChar(" \n\t"), absl::SkipEmpty())) {
    (void)w;
    ++n;
  }
  return n;
}

}  // namespace

// ------------------------------------------------------------ the steps

std::string StripHtml(absl::string_view html) {
  std::string text;
  text.reserve(html.size());
  size_t i = 0;
  while (i < html.size()) {
    const char c = html[i];
    if (c != '<') {
      text += c;
      ++i;
      continue;
    }
    if (html.substr(i, 4) == "<!--") {
      const size_t end = html.find("-->", i + 4);
      i = end == absl::string_view::npos ? html.size() : end + 3;
      continue;
    }
    const char n = i + 1 < html.size() ? html[i + 1] : '\0';
    if (!absl::ascii_isalpha(n) && n != '/' && n != '!' && n != '?') {
      text += c;  // a literal "<"
      ++i;
      continue;
    }
    // Tag name.
    size_t j = i + 1 + (n == '/' ? 1 : 0);
    size_t name_start = j;
    while (j < html.size() && absl::ascii_isalnum(html[j])) ++j;
    const std::string name =
        absl::AsciiStrToLower(html.substr(name_start, j - name_start));
    // End of the tag (quotes respected).
    char quote = 0;
    while (j < html.size()) {
      if (quote != 0) {
        if (html[j] == quote) quote = 0;
      } else if (html[j] == '"' || html[j] == '\'') {
        quote = html[j];
      } else if (html[j] == '>') {
        break;
      }
      ++j;
    }
    i = j < html.size() ? j + 1 : html.size();
    if (n != '/' && (name == "script" || name == "style")) {
      const size_t end = FindIgnoreCase(html, absl::StrCat("</", name), i);
      if (end == absl::string_view::npos) {
        i = html.size();
      } else {
        const size_t gt = html.find('>', end);
        i = gt == absl::string_view::npos ? html.size() : gt + 1;
      }
      continue;
    }
    if (IsBlockTag(name)) text += '\n';  // inline tags: nothing inserted
  }
  return DecodeEntities(text);
}

std::string StripDictMarkup(absl::string_view in) {
  std::string s;
  s.reserve(in.size());
  // Pass 1: <x/> entities, <tags>, \pron\ (+ a respelling), {xrefs}.
  size_t i = 0;
  while (i < in.size()) {
    const char c = in[i];
    if (c == '<') {
      const size_t gt = in.find('>', i + 1);
      const size_t nl = in.find('\n', i + 1);
      if (gt != absl::string_view::npos && gt - i <= 80 &&
          (nl == absl::string_view::npos || gt < nl)) {
        absl::string_view tag = in.substr(i + 1, gt - i - 1);
        if (tag.size() >= 2 && tag.back() == '/') {
          std::string l = GcideLetter(tag.substr(0, tag.size() - 1));
          if (l.empty()) l = HtmlEntity(tag.substr(0, tag.size() - 1));
          s += l;
        }
        i = gt + 1;
        continue;
      }
    } else if (c == '\\') {
      const size_t end = in.find('\\', i + 1);
      const size_t nl = in.find('\n', i + 1);
      if (end != absl::string_view::npos && end - i <= 100 &&
          (nl == absl::string_view::npos || end < nl)) {
        i = end + 1;
        // A respelling in parentheses right after the pronunciation.
        size_t j = i;
        while (j < in.size() && in[j] == ' ') ++j;
        if (j < in.size() && in[j] == '(') {
          const size_t close = in.find(')', j);
          const size_t nl2 = in.find('\n', j);
          if (close != absl::string_view::npos &&
              (nl2 == absl::string_view::npos || close < nl2)) {
            i = close + 1;
          }
        }
        // "Abacus \Ab"a*cus\ (...), n." -> "Abacus, n."
        if (!s.empty() && s.back() == ' ' && i < in.size() &&
            (in[i] == ',' || in[i] == ';' || in[i] == '.')) {
          s.pop_back();
        }
        continue;
      }
    } else if (c == '{' || c == '}') {
      ++i;
      continue;
    }
    s += c;
    ++i;
  }
  // Pass 2: bracket letters; lines that are only a bracketed note.
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(s, '\n')) {
    absl::string_view t = absl::StripAsciiWhitespace(line);
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']' &&
        t.find(']') == t.size() - 1) {
      continue;  // [1913 Webster], [PJC], ...
    }
    std::string out;
    size_t k = 0;
    while (k < line.size()) {
      if (line[k] == '[') {
        const size_t close = line.find(']', k + 1);
        if (close != absl::string_view::npos && close - k <= 10) {
          std::string l = GcideLetter(line.substr(k + 1, close - k - 1));
          if (!l.empty()) {
            out += l;
            k = close + 1;
            continue;
          }
        }
      }
      out += line[k];
      ++k;
    }
    lines.push_back(std::move(out));
  }
  return absl::StrJoin(lines, "\n");
}

std::string StripControl(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = DecodeUtf8(text, &pos);
    if (cp == kInvalidCodePoint) continue;
    if (cp == 0x08) {  // backspace: erase the previous character on the line
      if (!out.empty() && out.back() != '\n') {
        size_t k = out.size() - 1;
        while (k > 0 && (static_cast<unsigned char>(out[k]) & 0xC0) == 0x80) --k;
        out.resize(k);
      }
      continue;
    }
    if (cp == '\t' || cp == '\n' || cp == '\r') {
      out += static_cast<char>(cp);
      continue;
    }
    const utf8proc_category_t cat =
        utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    if (cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
        cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CN) {
      continue;
    }
    out.append(text.data() + start, pos - start);
  }
  return out;
}

absl::StatusOr<std::string> NormalizeUnicode(absl::string_view text,
                                             absl::string_view form) {
  int opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  if (form == "NFKC") {
    opts |= UTF8PROC_COMPAT;
  } else if (form != "NFC") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown normalization '", form, "' (NFC, NFKC, none)"));
  }
  const std::string valid = SanitizeUtf8(text, false, nullptr);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
      static_cast<utf8proc_ssize_t>(valid.size()), &out,
      static_cast<utf8proc_option_t>(opts));
  if (n < 0) {
    return absl::InternalError(
        absl::StrCat("utf8proc: ", utf8proc_errmsg(n)));
  }
  std::string r(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

std::string NormalizeWhitespace(absl::string_view text) {
  // Pass 1: line breaks and spaces.
  std::string s;
  s.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = DecodeUtf8(text, &pos);
    if (cp == kInvalidCodePoint) continue;
    if (cp == '\r') {
      if (pos < text.size() && text[pos] == '\n') ++pos;
      s += '\n';
      continue;
    }
    if (cp == '\n') {
      s += '\n';
      continue;
    }
    if (cp == '\t' || cp == 0x0B || cp == 0x0C || cp == 0x85 ||
        cp == 0x2028 || cp == 0x2029 ||
        utf8proc_category(static_cast<utf8proc_int32_t>(cp)) ==
            UTF8PROC_CATEGORY_ZS) {
      s += ' ';
      continue;
    }
    s.append(text.data() + start, pos - start);
  }
  // Pass 2: lines.
  std::string out;
  out.reserve(s.size());
  bool pending_blank = false;
  for (absl::string_view line : absl::StrSplit(s, '\n')) {
    std::string l;
    for (absl::string_view w : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      if (!l.empty()) l += ' ';
      absl::StrAppend(&l, w);
    }
    if (l.empty()) {
      pending_blank = !out.empty();
      continue;
    }
    if (!out.empty()) out += pending_blank ? "\n\n" : "\n";
    pending_blank = false;
    out += l;
  }
  return out;
}

const std::vector<std::string>& StopWords() {
  static const auto* w = new std::vector<std::string>{
      "a",     "about", "above", "after",  "again", "all",   "am",
      "an",    "and",   "any",   "are",    "as",    "at",    "be",
      "been",  "being", "but",   "by",     "can",   "could", "did",
      "do",    "does",  "for",   "from",   "had",   "has",   "have",
      "he",    "her",   "him",   "his",    "i",     "if",    "in",
      "into",  "is",    "it",    "its",    "me",    "my",    "of",
      "on",    "or",    "our",   "she",    "so",    "than",  "that",
      "the",   "their", "them",  "then",   "there", "these", "they",
      "this",  "those", "to",    "too",    "very",  "was",   "we",
      "were",  "what",  "when",  "which",  "who",   "will",  "with",
      "would", "you",   "your"};
  return *w;
}

std::string RemoveStopwords(absl::string_view text) {
  static const auto* set = new absl::flat_hash_set<std::string>(
      StopWords().begin(), StopWords().end());
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> words;
    for (absl::string_view w : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      size_t b = 0, e = w.size();
      while (b < e && absl::ascii_ispunct(w[b])) ++b;
      while (e > b && absl::ascii_ispunct(w[e - 1])) --e;
      if (b < e && set->contains(absl::AsciiStrToLower(w.substr(b, e - b)))) {
        std::string rest = absl::StrCat(w.substr(0, b), w.substr(e));
        if (!rest.empty()) words.push_back(std::move(rest));
      } else {
        words.emplace_back(w);
      }
    }
    lines.push_back(absl::StrJoin(words, " "));
  }
  return absl::StrJoin(lines, "\n");
}

// ------------------------------------------------------------ the report

CleanStepReport& CleanReport::Step(absl::string_view step) {
  for (CleanStepReport& s : steps) {
    if (s.step == step) return s;
  }
  steps.push_back(CleanStepReport{std::string(step), 0, 0});
  return steps.back();
}

void CleanReport::Merge(const CleanReport& other) {
  documents_in += other.documents_in;
  documents_out += other.documents_out;
  chars_in += other.chars_in;
  chars_out += other.chars_out;
  for (const CleanStepReport& s : other.steps) {
    CleanStepReport& mine = Step(s.step);
    mine.documents_removed += s.documents_removed;
    mine.chars_removed += s.chars_removed;
  }
}

std::string CleanReport::ToJson() const {
  nlohmann::ordered_json j;
  j["documents_in"] = documents_in;
  j["documents_out"] = documents_out;
  j["chars_in"] = chars_in;
  j["chars_out"] = chars_out;
  j["steps"] = nlohmann::ordered_json::array();
  for (const CleanStepReport& s : steps) {
    nlohmann::ordered_json e;
    e["step"] = s.step;
    e["documents_removed"] = s.documents_removed;
    e["chars_removed"] = s.chars_removed;
    j["steps"].push_back(e);
  }
  return j.dump();
}

// ------------------------------------------------------------ the pipeline

absl::StatusOr<std::vector<Document>> CleanDocuments(
    std::vector<Document> docs, const CleanOptions& o, CleanReport* report) {
  const bool normalize = o.normalization != "none";
  if (normalize && o.normalization != "NFC" && o.normalization != "NFKC") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown normalization '", o.normalization, "' (NFC, NFKC, none)"));
  }
  int bands = o.lsh_bands;
  if (o.dedup_near) {
    if (!(o.near_threshold > 0.0 && o.near_threshold <= 1.0) ||
        o.shingle_words < 1 || o.lsh_bands < 0 || o.minhash_perms < 1 ||
        (o.lsh_bands > 0 && o.minhash_perms % o.lsh_bands != 0)) {
      return absl::InvalidArgumentError(
          "dedup_near needs near_threshold in (0, 1], shingle_words >= 1 and "
          "minhash_perms a positive multiple of lsh_bands");
    }
    if (bands == 0) {
      ASSIGN_OR_RETURN(bands, LshBandsFor(o.near_threshold, o.minhash_perms));
    }
  }
  if (o.min_chars < 0 || o.max_chars < 0 || o.min_words < 0) {
    return absl::InvalidArgumentError(
        "min_chars, max_chars and min_words must be >= 0");
  }
  CleanReport r;
  r.documents_in = static_cast<int64_t>(docs.size());

  // The e-mail step reads raw bytes (charsets), so it runs before utf8.
  for (Document& d : docs) {
    int64_t bad = 0;
    r.chars_in += Chars(SanitizeUtf8(d.text, false, &bad)) + bad;
  }
  if (o.strip_email) {
    CleanStepReport& s = r.Step("email");
    for (Document& d : docs) {
      int64_t bad = 0;
      const int64_t before = Chars(SanitizeUtf8(d.text, false, &bad)) + bad;
      d.text = ExtractEmailText(d.text);
      s.chars_removed += before - Chars(d.text);
    }
  }
  {
    CleanStepReport& s = r.Step("utf8");
    for (Document& d : docs) {
      int64_t bad = 0;
      d.text = SanitizeUtf8(d.text, false, &bad);
      s.chars_removed += bad;
    }
  }
  // A per-document transformation step.
  auto transform = [&](const char* name, auto fn) -> absl::Status {
    CleanStepReport& s = r.Step(name);
    for (Document& d : docs) {
      const int64_t before = Chars(d.text);
      absl::StatusOr<std::string> t = fn(d.text);
      if (!t.ok()) return Annotate(t.status(), absl::StrCat("document ", d.id));
      d.text = std::move(*t);
      s.chars_removed += before - Chars(d.text);
    }
    return absl::OkStatus();
  };
  using SO = absl::StatusOr<std::string>;
  if (o.strip_html) {
    RETURN_IF_ERROR(transform(
        "html", [](const std::string& t) -> SO { return StripHtml(t); }));
  }
  if (o.strip_dict_markup) {
    RETURN_IF_ERROR(transform(
        "dict", [](const std::string& t) -> SO { return StripDictMarkup(t); }));
  }
  if (o.strip_control) {
    RETURN_IF_ERROR(transform(
        "control", [](const std::string& t) -> SO { return StripControl(t); }));
  }
  if (normalize) {
    RETURN_IF_ERROR(transform("normalize", [&](const std::string& t) -> SO {
      return NormalizeUnicode(t, o.normalization);
    }));
  }
  if (o.normalize_whitespace) {
    RETURN_IF_ERROR(transform("whitespace", [](const std::string& t) -> SO {
      return NormalizeWhitespace(t);
    }));
  }
  if (o.remove_stopwords) {
    RETURN_IF_ERROR(transform("stopwords", [](const std::string& t) -> SO {
      return RemoveStopwords(t);
    }));
  }
  // A filter step: keeps the documents `keep` accepts, in order.
  auto filter = [&](const char* name, auto keep) {
    CleanStepReport& s = r.Step(name);
    std::vector<Document> kept;
    kept.reserve(docs.size());
    for (Document& d : docs) {
      if (keep(d)) {
        kept.push_back(std::move(d));
      } else {
        ++s.documents_removed;
        s.chars_removed += Chars(d.text);
      }
    }
    docs = std::move(kept);
  };
  filter("empty", [](const Document& d) {
    for (char c : d.text) {
      if (!absl::ascii_isspace(c)) return true;
    }
    return false;
  });
  if (o.min_chars > 0 || o.max_chars > 0 || o.min_words > 0) {
    filter("length", [&](const Document& d) {
      const int64_t n = Chars(d.text);
      if (o.min_chars > 0 && n < o.min_chars) return false;
      if (o.max_chars > 0 && n > o.max_chars) return false;
      return o.min_words <= 0 || CountWords(d.text) >= o.min_words;
    });
  }
  if (o.dedup_exact) {
    absl::flat_hash_set<std::string> seen;
    filter("dedup_exact",
           [&](const Document& d) { return seen.insert(d.text).second; });
  }
  if (o.dedup_near) {
    docs = DedupNear(std::move(docs), o, bands, &r.Step("dedup_near"));
  }
  r.documents_out = static_cast<int64_t>(docs.size());
  for (const Document& d : docs) r.chars_out += Chars(d.text);
  if (report != nullptr) report->Merge(r);
  return docs;
}

}  // namespace bertps::text
