#include "tools/printable.h"

#include <utf8proc.h>

#include "absl/strings/str_format.h"

namespace bertps {
namespace {

bool Escaped(utf8proc_int32_t cp) {
  return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) ||
         cp == 0x2028 || cp == 0x2029;
}

}  // namespace

std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t cp = -1;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0 || cp < 0) {  // not UTF-8: this byte alone
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned>(*p));
      ++p;
      --left;
      continue;
    }
    if (cp == '\\') {
      out += "\\\\";
    } else if (Escaped(cp)) {
      switch (cp) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case 0x1b: out += "\\e"; break;
        default:
          if (cp < 0x80) {
            absl::StrAppendFormat(&out, "\\x%02x", cp);
          } else {
            absl::StrAppendFormat(&out, "\\u%04x", cp);
          }
      }
    } else {
      out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
    }
    p += n;
    left -= n;
  }
  return out;
}

}  // namespace bertps
