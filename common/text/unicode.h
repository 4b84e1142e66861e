// Unicode facts BERT's tokenizer (google-research/bert tokenization.py, run
// by CPython 3) depends on, computed from utf8proc's tables: UTF-8 decoding
// with Python's errors="ignore" semantics, the character classes of
// BasicTokenizer, Python's str.isspace() and str.lower(), and NFD.
//
// Thread-safety: every function is pure and thread-safe. No ownership.
#ifndef BERTPS_COMMON_TEXT_UNICODE_H_
#define BERTPS_COMMON_TEXT_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace bertps::text {

inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

// Decodes the code point that starts at s[*pos] and advances *pos past it.
// An ill-formed byte (a stray continuation byte, an overlong form, a
// surrogate, a value > U+10FFFF or a truncated sequence) yields
// kInvalidCodePoint and advances by exactly one byte, so that skipping every
// kInvalidCodePoint gives what Python's bytes.decode("utf-8", "ignore")
// keeps (the well-formed sequences, in order). Requires *pos < s.size().
char32_t DecodeUtf8(absl::string_view s, size_t* pos);

// Appends the UTF-8 encoding of `cp` (a valid scalar value) to *out.
void AppendUtf8(char32_t cp, std::string* out);

// Number of code points in well-formed UTF-8 `s` (bytes that are not
// continuation bytes).
size_t CountCodePoints(absl::string_view s);

// How BasicTokenizer's first pass (_clean_text, _tokenize_chinese_chars and
// the whitespace split) treats a code point.
enum class CharClass : uint8_t {
  kDrop,   // U+0000, U+FFFD, category Cc/Cf other than \t \n \r: removed
  kSpace,  // separates words: \t \n \r space, Zs, and the rest of Python's
           // str.split() whitespace that survives cleaning (U+2028, U+2029)
  kCjk,    // a CJK ideograph: a word of its own
  kOther,  // part of a word (letters, digits, marks, punctuation, ...)
};
CharClass ClassifyChar(char32_t cp);

// tokenization.py _is_punctuation: ASCII 33-47, 58-64, 91-96, 123-126, or a
// Unicode P* category (so ASCII symbols such as $ + < = > ^ ` | ~ count).
bool IsPunctuation(char32_t cp);

// tokenization.py _is_chinese_char: the CJK Unified Ideographs blocks and
// their extensions and compatibility blocks (not Hangul, Hiragana, Katakana).
bool IsCjk(char32_t cp);

// Python's str.isspace() for one code point: category Zs or bidirectional
// class WS, B or S (what str.split() and str.strip() use).
bool IsPythonSpace(char32_t cp);

// Python's str.lower() on a sequence of code points, appended to *out:
// the full lowercase mapping, which differs from the simple mapping
// (utf8proc_tolower) only for U+0130 (-> U+0069 U+0307) and for U+03A3,
// which becomes final sigma U+03C2 when preceded by a cased letter and not
// followed by one (case-ignorable characters skipped on both sides).
// "Cased" is approximated as category Lu/Ll/Lt or having a case mapping
// (misses only U+00AA and U+00BA); "case-ignorable" is Mn/Me/Cf/Lm/Sk plus
// the Word_Break MidLetter/MidNumLet/Single_Quote characters.
void PythonLower(const std::vector<char32_t>& in, std::vector<char32_t>* out);

// Canonical decomposition (NFD) of `in`, appended to *out: each code point's
// full canonical decomposition (Hangul syllables included), then canonical
// ordering of combining marks. Appends only valid scalar values.
void Nfd(const std::vector<char32_t>& in, std::vector<char32_t>* out);

// True for category Mn (nonspacing mark), which BERT drops after NFD when
// lowercasing ("accent stripping").
bool IsNonspacingMark(char32_t cp);

// Canonical_Combining_Class of `cp` (0 for starters), the key of NFD's
// canonical ordering.
uint8_t CanonicalCombiningClass(char32_t cp);

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_UNICODE_H_
