#include "common/text/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "common/status.h"
#include "common/text/unicode.h"

namespace bertps::text {
namespace {

// ASCII classes of BasicTokenizer, equal to ClassifyChar/IsPunctuation on
// 0..127 (checked by tokenizer_test): Cc other than \t\n\r is dropped.
enum AsciiKind : uint8_t { kDrop, kSpace, kPunct, kWordChar };

constexpr std::array<uint8_t, 128> MakeAsciiKinds() {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if (c == '\t' || c == '\n' || c == '\r' || c == ' ') {
      t[c] = kSpace;
    } else if (c < 32 || c == 127) {
      t[c] = kDrop;
    } else if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) ||
               (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) {
      t[c] = kPunct;
    } else {
      t[c] = kWordChar;
    }
  }
  return t;
}
constexpr std::array<uint8_t, 128> kAsciiKinds = MakeAsciiKinds();

inline char LowerAscii(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
}

inline bool IsContinuationByte(char c) {
  return (static_cast<uint8_t>(c) & 0xC0) == 0x80;
}

// Per-call scratch of BasicTokenizer (reused across the words of one call).
struct BasicScratch {
  std::string word;   // current word, cleaned (and ASCII-lowercased)
  std::string piece;  // current output token (non-ASCII path)
  std::vector<char32_t> cps, lowered, nfd;
};

// DecodeUtf8 with the common 2- and 3-byte forms inline (the others, and
// every ill-formed sequence, are left to DecodeUtf8).
inline char32_t DecodeNext(absl::string_view text, size_t* pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size(), i = *pos;
  const uint8_t b0 = p[i];
  if (b0 >= 0xC2 && b0 <= 0xDF && i + 1 < n && (p[i + 1] & 0xC0) == 0x80) {
    *pos = i + 2;
    return (char32_t{b0} & 0x1F) << 6 | (p[i + 1] & 0x3F);
  }
  // E0 and ED restrict the second byte (overlongs, surrogates).
  if (b0 >= 0xE1 && b0 <= 0xEF && b0 != 0xED && i + 2 < n &&
      (p[i + 1] & 0xC0) == 0x80 && (p[i + 2] & 0xC0) == 0x80) {
    *pos = i + 3;
    return (char32_t{b0} & 0x0F) << 12 | char32_t{p[i + 1] & 0x3Fu} << 6 |
           (p[i + 2] & 0x3F);
  }
  return DecodeUtf8(text, pos);
}

// Decodes a non-ASCII code point of well-formed UTF-8.
inline char32_t DecodeWellFormed(const char* s, size_t* pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s) + *pos;
  if (p[0] < 0xE0) {
    *pos += 2;
    return (char32_t{p[0]} & 0x1F) << 6 | (p[1] & 0x3F);
  }
  if (p[0] < 0xF0) {
    *pos += 3;
    return (char32_t{p[0]} & 0x0F) << 12 | char32_t{p[1] & 0x3Fu} << 6 |
           (p[2] & 0x3F);
  }
  *pos += 4;
  return (char32_t{p[0]} & 0x07) << 18 | char32_t{p[1] & 0x3Fu} << 12 |
         char32_t{p[2] & 0x3Fu} << 6 | (p[3] & 0x3F);
}

// BasicTokenizer's facts about one code point of the Basic Multilingual
// Plane, from unicode.h. `lower` is what lowercasing gives for the code point
// alone: str.lower(), NFD, nonspacing marks removed (possibly nothing). It is
// exact inside a word whenever no code point of the word has kBmpLowerSlow:
// then no context applies (U+03A3 is the only context-dependent str.lower()
// here) and canonical reordering only permutes marks of non-zero combining
// class, which are all Mn and removed, so the word's result is the
// concatenation of its code points' `lower`.
enum : uint8_t {
  kBmpPunct = 1,       // IsPunctuation(cp)
  kBmpLowerSlow = 2,   // lowercasing a word with cp takes the general path
  kBmpLowerPunct = 4,  // `lower` is a single punctuation code point
};
struct BmpChar {
  CharClass cls = CharClass::kDrop;
  uint8_t flags = 0;
  uint8_t lower_len = 0;  // bytes of `lower`
  char lower[13] = {};    // UTF-8
};
static_assert(sizeof(BmpChar) == 16, "one table entry per 16 bytes");

// The table for U+0000..U+FFFF (1 MiB), built on first use (a few ms),
// immutable afterwards and never freed.
const BmpChar* BmpTable() {
  static const BmpChar* const table = [] {
    auto* t = new BmpChar[0x10000];
    std::vector<char32_t> one(1), lowered, nfd;
    std::string bytes;
    for (char32_t cp = 0; cp < 0x10000; ++cp) {
      BmpChar& e = t[cp];
      if (cp >= 0xD800 && cp <= 0xDFFF) {  // surrogates are never decoded
        e.flags = kBmpLowerSlow;
        continue;
      }
      e.cls = ClassifyChar(cp);
      e.flags = IsPunctuation(cp) ? kBmpPunct : 0;
      one[0] = cp;
      lowered.clear();
      PythonLower(one, &lowered);
      nfd.clear();
      Nfd(lowered, &nfd);
      bytes.clear();
      int kept = 0, punct = 0;
      bool slow = cp == 0x03A3;  // final sigma depends on the neighbours
      for (char32_t c : nfd) {
        if (IsNonspacingMark(c)) continue;
        if (CanonicalCombiningClass(c) != 0) slow = true;  // reorderable
        ++kept;
        punct += IsPunctuation(c) ? 1 : 0;
        AppendUtf8(c, &bytes);
      }
      if ((punct > 0 && kept > 1) || bytes.size() > sizeof(e.lower)) {
        slow = true;
      }
      if (slow) {
        e.flags |= kBmpLowerSlow;
        continue;
      }
      if (punct > 0) e.flags |= kBmpLowerPunct;
      e.lower_len = static_cast<uint8_t>(bytes.size());
      std::memcpy(e.lower, bytes.data(), bytes.size());
    }
    return t;
  }();
  return table;
}

// Python str.strip() of whitespace, on well-formed UTF-8.
absl::string_view StripPythonSpace(absl::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    size_t next = b;
    if (!IsPythonSpace(DecodeUtf8(s, &next))) break;
    b = next;
  }
  size_t e = s.size();
  while (e > b) {
    size_t start = e - 1;
    while (start > b && IsContinuationByte(s[start])) --start;
    size_t next = start;
    if (!IsPythonSpace(DecodeUtf8(s, &next))) break;
    e = start;
  }
  return s.substr(b, e - b);
}

// Copy of `s` without ill-formed UTF-8 bytes.
std::string DropInvalidUtf8(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    if (DecodeUtf8(s, &i) != kInvalidCodePoint) {
      out.append(s.data() + start, i - start);
    }
  }
  return out;
}

// If `s` is exactly the UTF-8 of one code point in U+0080..U+FFFF, sets *cp.
inline bool SingleBmpCodePoint(absl::string_view s, char32_t* cp) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  if (s.size() == 2) {
    if (p[0] < 0xC2 || p[0] > 0xDF || (p[1] & 0xC0) != 0x80) return false;
    *cp = (char32_t{p[0]} & 0x1F) << 6 | (p[1] & 0x3F);
    return true;
  }
  if (s.size() == 3) {
    if (p[0] < 0xE0 || p[0] > 0xEF || (p[1] & 0xC0) != 0x80 ||
        (p[2] & 0xC0) != 0x80 || (p[0] == 0xE0 && p[1] < 0xA0) ||
        (p[0] == 0xED && p[1] > 0x9F)) {
      return false;
    }
    *cp = (char32_t{p[0]} & 0x0F) << 12 | char32_t{p[1] & 0x3Fu} << 6 |
          (p[2] & 0x3F);
    return true;
  }
  return false;
}

bool IsAscii(absl::string_view s) {
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------- Vocab

void Vocab::Add(std::string token) {
  const int32_t id = static_cast<int32_t>(tokens_.size());
  max_token_bytes_ = std::max(max_token_bytes_, token.size());
  auto note_start = [this](absl::string_view t, size_t table) {
    if (t.size() < 2) return;
    uint8_t& m = max_bytes_by_start_[table | static_cast<uint8_t>(t[0]) << 8 |
                                     static_cast<uint8_t>(t[1])];
    m = static_cast<uint8_t>(
        std::max<size_t>(m, std::min<size_t>(t.size(), 255)));
  };
  note_start(token, 0);
  char32_t cp;
  if (SingleBmpCodePoint(token, &cp)) bmp_ids_[cp] = id;
  if (token.size() >= 2 && token[0] == '#' && token[1] == '#') {
    cont_ids_.insert_or_assign(token.substr(2), id);
    note_start(absl::string_view(token).substr(2), 0x10000);
    if (SingleBmpCodePoint(absl::string_view(token).substr(2), &cp)) {
      bmp_ids_[0x10000 | cp] = id;
    }
  }
  ids_.insert_or_assign(token, id);
  tokens_.push_back(std::move(token));
}

Vocab Vocab::FromText(absl::string_view text) {
  Vocab v;
  const bool ascii = IsAscii(text);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == absl::string_view::npos) nl = text.size();
    absl::string_view line = text.substr(pos, nl - pos);
    if (ascii) {
      v.Add(std::string(StripPythonSpace(line)));
    } else {
      const std::string clean = DropInvalidUtf8(line);
      v.Add(std::string(StripPythonSpace(clean)));
    }
    pos = nl + 1;
  }
  return v;
}

Vocab Vocab::FromTokens(const std::vector<std::string>& tokens) {
  Vocab v;
  for (const std::string& t : tokens) v.Add(t);
  return v;
}

absl::StatusOr<Vocab> Vocab::Load(const std::string& path) {
  // The largest vocabularies in use (250k multilingual pieces) are ~5 MB.
  absl::StatusOr<std::string> read = io::ReadFileToString(path, 64 << 20);
  if (!read.ok()) return Annotate(read.status(), "vocab");
  const std::string text = std::move(*read);
  Vocab v = FromText(text);
  if (v.size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab: ", path, " is empty"));
  }
  return v;
}

int32_t Vocab::Find(absl::string_view token) const {
  char32_t cp;
  if (SingleBmpCodePoint(token, &cp)) return bmp_ids_[cp];
  auto it = ids_.find(token);
  return it == ids_.end() ? kNotFound : it->second;
}

int32_t Vocab::FindContinuation(absl::string_view suffix) const {
  char32_t cp;
  if (SingleBmpCodePoint(suffix, &cp)) return bmp_ids_[0x10000 | cp];
  auto it = cont_ids_.find(suffix);
  return it == cont_ids_.end() ? kNotFound : it->second;
}

// ------------------------------------------------------- BasicTokenizer

// One pass over the bytes: drop what _clean_text drops, end a word at
// whitespace, make each CJK ideograph a word, and hand each word to
// `process`, which lowercases/strips accents and splits off punctuation.
template <typename Fn>
void BasicTokenizer::Run(absl::string_view text, Fn&& fn) const {
  BasicScratch s;
  const bool lower = do_lower_case_;
  const BmpChar* bmp = nullptr;  // fetched at the first non-ASCII byte

  // Emits the tokens of the word in s.word (`ascii`: all bytes < 0x80;
  // `slow`: lowercasing needs the general path, see BmpChar).
  auto process = [&](bool ascii, bool slow) {
    const std::string& w = s.word;
    if (ascii) {
      size_t start = 0;
      for (size_t k = 0; k < w.size(); ++k) {
        if (kAsciiKinds[static_cast<uint8_t>(w[k])] == kPunct) {
          if (k > start) fn(absl::string_view(w.data() + start, k - start));
          fn(absl::string_view(w.data() + k, 1));
          start = k + 1;
        }
      }
      if (start < w.size()) {
        fn(absl::string_view(w.data() + start, w.size() - start));
      }
      return;
    }
    if (!lower) {  // punctuation split on the bytes as they are
      size_t start = 0;
      for (size_t k = 0; k < w.size();) {
        const size_t cp_start = k;
        bool punct;
        if (static_cast<uint8_t>(w[k]) < 0x80) {
          punct = kAsciiKinds[static_cast<uint8_t>(w[k])] == kPunct;
          ++k;
        } else {
          const char32_t cp = DecodeWellFormed(w.data(), &k);
          punct = cp < 0x10000 ? (bmp[cp].flags & kBmpPunct) != 0
                               : IsPunctuation(cp);
        }
        if (punct) {
          if (cp_start > start) {
            fn(absl::string_view(w.data() + start, cp_start - start));
          }
          fn(absl::string_view(w.data() + cp_start, k - cp_start));
          start = k;
        }
      }
      if (start < w.size()) {
        fn(absl::string_view(w.data() + start, w.size() - start));
      }
      return;
    }
    if (!slow) {  // the concatenation of the table's `lower` strings
      s.piece.clear();
      for (size_t k = 0; k < w.size();) {
        const uint8_t b = static_cast<uint8_t>(w[k]);
        if (b < 0x80) {
          if (kAsciiKinds[b] == kPunct) {
            if (!s.piece.empty()) fn(absl::string_view(s.piece));
            s.piece.clear();
            fn(absl::string_view(w.data() + k, 1));
          } else {
            s.piece.push_back(static_cast<char>(b));
          }
          ++k;
          continue;
        }
        const BmpChar& e = bmp[DecodeWellFormed(w.data(), &k)];
        if (e.flags & kBmpLowerPunct) {
          if (!s.piece.empty()) fn(absl::string_view(s.piece));
          s.piece.clear();
          fn(absl::string_view(e.lower, e.lower_len));
        } else {
          s.piece.append(e.lower, e.lower_len);
        }
      }
      if (!s.piece.empty()) fn(absl::string_view(s.piece));
      return;
    }
    // str.lower(), NFD, drop Mn, then the punctuation split.
    s.cps.clear();
    for (size_t k = 0; k < w.size();) s.cps.push_back(DecodeUtf8(w, &k));
    s.lowered.clear();
    PythonLower(s.cps, &s.lowered);
    s.nfd.clear();
    Nfd(s.lowered, &s.nfd);
    s.piece.clear();
    for (char32_t cp : s.nfd) {
      if (IsNonspacingMark(cp)) continue;
      if (IsPunctuation(cp)) {
        if (!s.piece.empty()) fn(absl::string_view(s.piece));
        s.piece.clear();
        AppendUtf8(cp, &s.piece);
        fn(absl::string_view(s.piece));
        s.piece.clear();
      } else {
        AppendUtf8(cp, &s.piece);
      }
    }
    if (!s.piece.empty()) fn(absl::string_view(s.piece));
  };

  bool ascii = true, slow = false;
  auto flush = [&] {
    if (!s.word.empty()) {
      process(ascii, slow);
      s.word.clear();
    }
    ascii = true;
    slow = false;
  };

  const char* p = text.data();
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = static_cast<uint8_t>(p[i]);
    if (b < 0x80) {
      switch (kAsciiKinds[b]) {
        case kDrop:
          break;
        case kSpace:
          flush();
          break;
        default:
          s.word.push_back(lower ? LowerAscii(p[i]) : p[i]);
      }
      ++i;
      continue;
    }
    const size_t start = i;
    const char32_t cp = DecodeNext(text, &i);
    if (cp == kInvalidCodePoint) continue;
    if (bmp == nullptr) bmp = BmpTable();
    CharClass cls;
    bool cp_slow;
    if (cp < 0x10000) {
      cls = bmp[cp].cls;
      cp_slow = (bmp[cp].flags & kBmpLowerSlow) != 0;
    } else {
      cls = ClassifyChar(cp);
      cp_slow = true;
    }
    switch (cls) {
      case CharClass::kDrop:
        break;
      case CharClass::kSpace:
        flush();
        break;
      case CharClass::kCjk:
        flush();
        s.word.append(p + start, i - start);
        ascii = false;
        slow = cp_slow;
        flush();
        break;
      case CharClass::kOther:
        s.word.append(p + start, i - start);
        ascii = false;
        slow |= cp_slow;
        break;
    }
  }
  flush();
}

std::vector<std::string> BasicTokenizer::Tokenize(
    absl::string_view text) const {
  std::vector<std::string> out;
  Run(text, [&](absl::string_view t) { out.emplace_back(t); });
  return out;
}

void BasicTokenizer::ForEachToken(
    absl::string_view text,
    absl::FunctionRef<void(absl::string_view)> fn) const {
  Run(text, fn);
}

// --------------------------------------------------- WordpieceTokenizer

absl::StatusOr<WordpieceTokenizer> WordpieceTokenizer::Create(
    const Vocab* vocab, absl::string_view unk_token,
    int max_input_chars_per_word) {
  const int32_t unk = vocab->Find(unk_token);
  if (unk == Vocab::kNotFound) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab has no unknown token '", unk_token, "'"));
  }
  return WordpieceTokenizer(vocab, unk, max_input_chars_per_word);
}

template <typename PieceFn>
bool WordpieceTokenizer::Split(absl::string_view word, PieceFn&& piece) const {
  const size_t n = word.size();
  // Bytes >= code points, so only a long word needs counting.
  if (n > static_cast<size_t>(max_chars_) &&
      CountCodePoints(word) > static_cast<size_t>(max_chars_)) {
    return false;
  }
  const char* p = word.data();
  const size_t max_bytes = vocab_->max_token_bytes();
  size_t start = 0;
  while (start < n) {
    // Longest candidate first; nothing longer than the longest entry can
    // match. Candidates end on code point boundaries.
    size_t longest = max_bytes;
    if (start + 1 < n) {  // pieces of 2+ bytes: bounded by their first two
      const size_t m = vocab_->max_token_bytes_from(
          static_cast<uint8_t>(p[start]), static_cast<uint8_t>(p[start + 1]),
          start != 0);
      longest = m == 255 ? max_bytes : std::max<size_t>(m, 1);
    }
    size_t end = std::min(n, start + longest);
    while (end > start && end < n && IsContinuationByte(p[end])) --end;
    int32_t id = Vocab::kNotFound;
    while (end > start) {
      id = start == 0 ? vocab_->Find(absl::string_view(p, end))
                      : vocab_->FindContinuation(
                            absl::string_view(p + start, end - start));
      if (id != Vocab::kNotFound) break;
      do {
        --end;
      } while (end > start && IsContinuationByte(p[end]));
    }
    if (id == Vocab::kNotFound) return false;
    piece(id, start, end);
    start = end;
  }
  return true;
}

void WordpieceTokenizer::EncodeWord(absl::string_view word,
                                    std::vector<int32_t>* ids) const {
  const size_t mark = ids->size();
  if (!Split(word, [ids](int32_t id, size_t, size_t) { ids->push_back(id); })) {
    ids->resize(mark);
    ids->push_back(unk_id_);
  }
}

void WordpieceTokenizer::TokenizeWord(absl::string_view word,
                                      std::vector<std::string>* tokens) const {
  const size_t mark = tokens->size();
  const bool ok = Split(word, [&](int32_t, size_t b, size_t e) {
    std::string t = b == 0 ? std::string() : std::string("##");
    t.append(word.data() + b, e - b);
    tokens->push_back(std::move(t));
  });
  if (!ok) {
    tokens->resize(mark);
    tokens->push_back(vocab_->token(unk_id_));
  }
}

std::vector<std::string> WordpieceTokenizer::Tokenize(
    absl::string_view text) const {
  std::vector<std::string> out;
  std::string word;
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const char32_t cp = DecodeUtf8(text, &i);
    if (cp == kInvalidCodePoint) continue;
    if (IsPythonSpace(cp)) {
      TokenizeWord(word, &out);
      word.clear();
    } else {
      word.append(text.data() + start, i - start);
    }
  }
  TokenizeWord(word, &out);
  return out;
}

// -------------------------------------------------------- FullTokenizer

absl::StatusOr<std::unique_ptr<FullTokenizer>> FullTokenizer::Create(
    const std::string& vocab_path, bool do_lower_case) {
  ASSIGN_OR_RETURN(Vocab vocab, Vocab::Load(vocab_path));
  return Create(std::move(vocab), do_lower_case);
}

absl::StatusOr<std::unique_ptr<FullTokenizer>> FullTokenizer::Create(
    Vocab vocab, bool do_lower_case) {
  auto v = std::make_unique<Vocab>(std::move(vocab));
  ASSIGN_OR_RETURN(WordpieceTokenizer wp, WordpieceTokenizer::Create(v.get()));
  return std::unique_ptr<FullTokenizer>(
      new FullTokenizer(std::move(v), do_lower_case, std::move(wp)));
}

void FullTokenizer::EncodeAppend(absl::string_view text,
                                 std::vector<int32_t>* ids) const {
  basic_.Run(text, [&](absl::string_view t) { wordpiece_.EncodeWord(t, ids); });
}

std::vector<int32_t> FullTokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  EncodeAppend(text, &ids);
  return ids;
}

std::vector<std::string> FullTokenizer::Tokenize(absl::string_view text) const {
  std::vector<std::string> out;
  basic_.Run(text,
             [&](absl::string_view t) { wordpiece_.TokenizeWord(t, &out); });
  return out;
}

}  // namespace bertps::text
