#include "common/text/email.h"

#include <unicode/ucnv.h>
#include <unicode/unistr.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/text/clean.h"
#include "common/text/documents.h"

namespace bertps::text {
namespace {

struct Header {
  std::string name;  // lower case
  std::string value;
};

struct Part {
  std::vector<Header> headers;
  absl::string_view body;
};

// Splits headers (unfolding continuation lines) from the body at the first
// empty line. A message without an empty line is all headers if every line
// looks like one, else all body.
Part ParsePart(absl::string_view raw) {
  Part p;
  size_t pos = 0;
  Header* last = nullptr;
  while (pos < raw.size()) {
    size_t eol = raw.find('\n', pos);
    const size_t next = eol == absl::string_view::npos ? raw.size() : eol + 1;
    absl::string_view line = raw.substr(pos, next - pos);
    absl::string_view content = absl::StripTrailingAsciiWhitespace(line);
    if (content.empty()) {  // end of headers
      p.body = raw.substr(next);
      return p;
    }
    if ((line[0] == ' ' || line[0] == '\t') && last != nullptr) {
      absl::StrAppend(&last->value, " ", absl::StripAsciiWhitespace(content));
    } else {
      const size_t colon = content.find(':');
      if (colon == absl::string_view::npos || colon == 0 ||
          content.substr(0, colon).find(' ') != absl::string_view::npos) {
        // Not a header ("From " mbox line is skipped; otherwise the body
        // starts here).
        if (pos == 0 && absl::StartsWith(content, "From ")) {
          pos = next;
          continue;
        }
        p.body = raw.substr(pos);
        return p;
      }
      p.headers.push_back(
          Header{absl::AsciiStrToLower(content.substr(0, colon)),
                 std::string(absl::StripAsciiWhitespace(content.substr(colon + 1)))});
      last = &p.headers.back();
    }
    pos = next;
  }
  return p;
}

const std::string* Find(const Part& p, absl::string_view name) {
  for (const Header& h : p.headers) {
    if (h.name == name) return &h.value;
  }
  return nullptr;
}

// Content-Type "type/sub; k=v; k2="v2"" -> lower-case type and parameters.
struct ContentType {
  std::string type = "text/plain";
  std::string charset;
  std::string boundary;
};

ContentType ParseContentType(const std::string* v) {
  ContentType ct;
  if (v == nullptr) return ct;
  std::vector<absl::string_view> fields = absl::StrSplit(*v, ';');
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(fields[0]));
  if (t.find('/') != std::string::npos) ct.type = t;
  for (size_t i = 1; i < fields.size(); ++i) {
    absl::string_view f = absl::StripAsciiWhitespace(fields[i]);
    const size_t eq = f.find('=');
    if (eq == absl::string_view::npos) continue;
    std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(f.substr(0, eq)));
    absl::string_view val = absl::StripAsciiWhitespace(f.substr(eq + 1));
    if (val.size() >= 2 && val.front() == '"') {
      val.remove_prefix(1);
      const size_t q = val.find('"');
      if (q != absl::string_view::npos) val = val.substr(0, q);
    }
    if (key == "charset") ct.charset = absl::AsciiStrToLower(val);
    if (key == "boundary") ct.boundary = std::string(val);
  }
  return ct;
}

// The parts of a multipart body between "--boundary" lines (the preamble
// and epilogue dropped). A missing closing boundary ends at the body's end.
std::vector<absl::string_view> SplitMultipart(absl::string_view body,
                                              const std::string& boundary) {
  std::vector<absl::string_view> parts;
  const std::string delim = "--" + boundary;
  size_t pos = 0;
  size_t start = absl::string_view::npos;
  while (pos <= body.size()) {
    size_t eol = body.find('\n', pos);
    const size_t next = eol == absl::string_view::npos ? body.size() : eol + 1;
    absl::string_view line =
        absl::StripTrailingAsciiWhitespace(body.substr(pos, next - pos));
    if (absl::StartsWith(line, delim)) {
      if (start != absl::string_view::npos) {
        parts.push_back(body.substr(start, pos - start));
      }
      if (absl::StartsWith(line.substr(delim.size()), "--")) return parts;
      start = next;
    }
    if (next >= body.size()) break;
    pos = next;
  }
  if (start != absl::string_view::npos && start < body.size()) {
    parts.push_back(body.substr(start));
  }
  return parts;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

struct Texts {
  std::vector<std::string> plain;
  std::vector<std::string> html;
};

void Walk(absl::string_view raw, int depth, Texts* out) {
  Part p = ParsePart(raw);
  ContentType ct = ParseContentType(Find(p, "content-type"));
  if (depth > 20) return;  // a pathological nesting: stop
  if (absl::StartsWith(ct.type, "multipart/") && !ct.boundary.empty()) {
    for (absl::string_view sub : SplitMultipart(p.body, ct.boundary)) {
      Walk(sub, depth + 1, out);
    }
    return;
  }
  if (ct.type == "message/rfc822") {
    Walk(p.body, depth + 1, out);
    return;
  }
  const bool plain = ct.type == "text/plain";
  const bool html = ct.type == "text/html";
  if (!plain && !html) return;
  const std::string* d = Find(p, "content-disposition");
  if (d != nullptr && absl::StartsWithIgnoreCase(*d, "attachment") &&
      !plain) {
    return;
  }
  std::string body;
  const std::string* cte = Find(p, "content-transfer-encoding");
  const std::string enc =
      cte == nullptr ? "" : absl::AsciiStrToLower(absl::StripAsciiWhitespace(*cte));
  if (enc == "quoted-printable") {
    body = DecodeQuotedPrintable(p.body);
  } else if (enc == "base64") {
    body = DecodeBase64Lenient(p.body);
  } else {
    body = std::string(p.body);
  }
  std::string text = CharsetToUtf8(body, ct.charset);
  if (plain) {
    out->plain.push_back(std::move(text));
  } else {
    out->html.push_back(StripHtml(text));
  }
}

}  // namespace

std::string DecodeQuotedPrintable(absl::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c != '=') {
      out += c;
      continue;
    }
    // Soft line break: "=" then optional whitespace then a newline.
    size_t j = i + 1;
    while (j < in.size() && (in[j] == ' ' || in[j] == '\t')) ++j;
    if (j < in.size() && (in[j] == '\n' || in[j] == '\r')) {
      if (in[j] == '\r' && j + 1 < in.size() && in[j + 1] == '\n') ++j;
      i = j;
      continue;
    }
    if (j >= in.size()) {  // "=" at the very end
      i = j;
      continue;
    }
    if (i + 2 < in.size() && HexValue(in[i + 1]) >= 0 &&
        HexValue(in[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(in[i + 1]) * 16 + HexValue(in[i + 2]));
      i += 2;
    } else {
      out += c;  // a literal "=" (malformed): kept
    }
  }
  return out;
}

std::string DecodeBase64Lenient(absl::string_view in) {
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '+') {
      v = 62;
    } else if (c == '/') {
      v = 63;
    } else if (c == '=') {
      break;  // padding: the end of the data
    } else {
      continue;  // line breaks and other noise
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

std::string CharsetToUtf8(absl::string_view bytes, absl::string_view charset) {
  std::string cs = absl::AsciiStrToLower(absl::StripAsciiWhitespace(charset));
  int64_t bad = 0;
  if (cs.empty() || cs == "utf-8" || cs == "utf8" || cs == "us-ascii" ||
      cs == "ascii") {
    std::string s = SanitizeUtf8(bytes, true, &bad);
    if (bad == 0) return s;
    cs = "iso-8859-1";  // not UTF-8 after all: the usual mislabel
  }
  UErrorCode err = U_ZERO_ERROR;
  UConverter* conv = ucnv_open(cs.c_str(), &err);
  if (U_FAILURE(err) || conv == nullptr) {
    std::string s = SanitizeUtf8(bytes, true, &bad);
    if (bad == 0) return s;
    err = U_ZERO_ERROR;
    conv = ucnv_open("iso-8859-1", &err);
    if (U_FAILURE(err)) return SanitizeUtf8(bytes, true, nullptr);
  }
  icu::UnicodeString u(bytes.data(), static_cast<int32_t>(bytes.size()), conv,
                       err);
  ucnv_close(conv);
  if (U_FAILURE(err)) return SanitizeUtf8(bytes, true, nullptr);
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::string DecodeHeaderValue(absl::string_view value) {
  std::string out;
  size_t pos = 0;
  bool last_was_word = false;
  while (pos < value.size()) {
    const size_t start = value.find("=?", pos);
    if (start == absl::string_view::npos) break;
    // =?charset?X?text?=
    const size_t q1 = value.find('?', start + 2);
    const size_t q2 = q1 == absl::string_view::npos ? q1 : value.find('?', q1 + 1);
    const size_t end = q2 == absl::string_view::npos ? q2 : value.find("?=", q2 + 1);
    if (end == absl::string_view::npos || q2 != q1 + 2) {
      break;
    }
    absl::string_view between = value.substr(pos, start - pos);
    // Whitespace between two encoded words is dropped (RFC 2047 6.2).
    if (!(last_was_word && absl::StripAsciiWhitespace(between).empty())) {
      absl::StrAppend(&out, CharsetToUtf8(between, ""));
    }
    absl::string_view cs = value.substr(start + 2, q1 - start - 2);
    const char mode = absl::ascii_tolower(value[q1 + 1]);
    absl::string_view data = value.substr(q2 + 1, end - q2 - 1);
    std::string bytes;
    if (mode == 'b') {
      bytes = DecodeBase64Lenient(data);
    } else {
      std::string d(data);
      for (char& c : d) {
        if (c == '_') c = ' ';
      }
      bytes = DecodeQuotedPrintable(d);
    }
    const size_t star = cs.find('*');  // RFC 2231 language suffix
    absl::StrAppend(&out, CharsetToUtf8(bytes, cs.substr(0, star)));
    pos = end + 2;
    last_was_word = true;
  }
  absl::StrAppend(&out, CharsetToUtf8(value.substr(pos), ""));
  return out;
}

std::string ExtractEmailText(absl::string_view raw) {
  Part top = ParsePart(raw);
  Texts texts;
  Walk(raw, 0, &texts);
  std::string out;
  if (const std::string* s = Find(top, "subject")) {
    out = DecodeHeaderValue(*s);
  }
  const std::vector<std::string>& body =
      texts.plain.empty() ? texts.html : texts.plain;
  for (const std::string& b : body) {
    if (!out.empty()) out += "\n\n";
    out += b;
  }
  return out;
}

}  // namespace bertps::text
