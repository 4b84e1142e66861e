#include "common/text/unicode.h"

#include <utf8proc.h>

#include <cstdint>

namespace bertps::text {
namespace {

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Word_Break MidLetter, MidNumLet and Single_Quote (Unicode
// WordBreakProperty.txt), the part of Case_Ignorable that is not a general
// category; utf8proc has no Word_Break table.
bool IsWordBreakMid(char32_t cp) {
  switch (cp) {
    case 0x0027:
    case 0x002E:
    case 0x003A:
    case 0x00B7:
    case 0x0387:
    case 0x055F:
    case 0x05F4:
    case 0x2018:
    case 0x2019:
    case 0x2024:
    case 0x2027:
    case 0xFE13:
    case 0xFE52:
    case 0xFE55:
    case 0xFF07:
    case 0xFF0E:
    case 0xFF1A:
      return true;
    default:
      return false;
  }
}

bool IsCaseIgnorable(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return IsWordBreakMid(cp);
  }
}

bool IsCased(char32_t cp) {
  const utf8proc_property_t* p =
      utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  switch (p->category) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
      return true;
    default:
      return p->lowercase_seqindex != UINT16_MAX ||
             p->uppercase_seqindex != UINT16_MAX ||
             p->titlecase_seqindex != UINT16_MAX;
  }
}

// CPython's handle_capital_sigma: is in[i] (U+03A3) in the Final_Sigma
// context \p{cased}\p{case-ignorable}* U+03A3 !(\p{case-ignorable}*\p{cased})?
bool IsFinalSigma(const std::vector<char32_t>& in, size_t i) {
  size_t j = i;
  while (j > 0 && IsCaseIgnorable(in[j - 1])) --j;
  if (j == 0 || !IsCased(in[j - 1])) return false;
  j = i + 1;
  while (j < in.size() && IsCaseIgnorable(in[j])) ++j;
  return j == in.size() || !IsCased(in[j]);
}

}  // namespace

uint8_t CanonicalCombiningClass(char32_t cp) {
  if (cp < 0x300) return 0;  // the first non-zero class is U+0300's
  return static_cast<uint8_t>(
      utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))
          ->combining_class);
}

char32_t DecodeUtf8(absl::string_view s, size_t* pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = *pos;
  const uint8_t b0 = p[i];
  if (b0 < 0x80) {
    *pos = i + 1;
    return b0;
  }
  // Length and the allowed range of the second byte (Unicode Table 3-7).
  int len;
  uint8_t lo = 0x80, hi = 0xBF;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    *pos = i + 1;
    return kInvalidCodePoint;
  }
  if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) {
    *pos = i + 1;
    return kInvalidCodePoint;
  }
  for (int k = 1; k < len; ++k) {
    if (!IsContinuation(p[i + k])) {
      *pos = i + 1;
      return kInvalidCodePoint;
    }
    cp = (cp << 6) | (p[i + k] & 0x3F);
  }
  *pos = i + len;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t CountCodePoints(absl::string_view s) {
  size_t n = 0;
  for (char c : s) n += !IsContinuation(static_cast<uint8_t>(c));
  return n;
}

CharClass ClassifyChar(char32_t cp) {
  if (cp == 0 || cp == 0xFFFD) return CharClass::kDrop;
  if (cp == '\t' || cp == '\n' || cp == '\r' || cp == ' ') {
    return CharClass::kSpace;
  }
  const utf8proc_category_t cat =
      utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  if (cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF) {
    return CharClass::kDrop;
  }
  if (IsPythonSpace(cp)) return CharClass::kSpace;
  if (IsCjk(cp)) return CharClass::kCjk;
  return CharClass::kOther;
}

bool IsPunctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) ||
      (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126)) {
    return true;
  }
  if (cp < 128) return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool IsCjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool IsPythonSpace(char32_t cp) {
  if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return true;
  if (cp < 0x1C) return false;
  const utf8proc_property_t* p =
      utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  return p->category == UTF8PROC_CATEGORY_ZS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

void PythonLower(const std::vector<char32_t>& in, std::vector<char32_t>* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    const char32_t c = in[i];
    if (c < 0x80) {
      out->push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    } else if (c == 0x0130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE
      out->push_back(0x0069);
      out->push_back(0x0307);
    } else if (c == 0x03A3) {  // GREEK CAPITAL LETTER SIGMA
      out->push_back(IsFinalSigma(in, i) ? 0x03C2 : 0x03C3);
    } else {
      out->push_back(static_cast<char32_t>(
          utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
}

void Nfd(const std::vector<char32_t>& in, std::vector<char32_t>* out) {
  utf8proc_int32_t buf[32];
  const size_t start = out->size();
  for (char32_t c : in) {
    if (c < 0xC0) {  // nothing below U+00C0 decomposes canonically
      out->push_back(c);
      continue;
    }
    const utf8proc_ssize_t n = utf8proc_decompose_char(
        static_cast<utf8proc_int32_t>(c), buf, 32, UTF8PROC_DECOMPOSE, nullptr);
    if (n <= 0 || n > 32) {  // not a scalar value (cannot happen for
      out->push_back(c);     // decoded input) or an impossible length
      continue;
    }
    for (utf8proc_ssize_t k = 0; k < n; ++k) {
      out->push_back(static_cast<char32_t>(buf[k]));
    }
  }
  // Canonical ordering: a stable sort by combining class within each run of
  // code points with a non-zero class (insertion sort; runs are short).
  char32_t* d = out->data();
  const size_t n = out->size();
  for (size_t i = start + 1; i < n; ++i) {
    const uint8_t cc = CanonicalCombiningClass(d[i]);
    if (cc == 0) continue;
    size_t j = i;
    const char32_t c = d[i];
    while (j > start) {
      const uint8_t prev = CanonicalCombiningClass(d[j - 1]);
      if (prev == 0 || prev <= cc) break;
      d[j] = d[j - 1];
      --j;
    }
    d[j] = c;
  }
}

bool IsNonspacingMark(char32_t cp) {
  return cp >= 0x300 && utf8proc_category(static_cast<utf8proc_int32_t>(cp)) ==
                            UTF8PROC_CATEGORY_MN;
}

}  // namespace bertps::text
