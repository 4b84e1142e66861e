// Fuzzes the parsers that read untrusted corpus text (common/text): MIME
// e-mail (ExtractEmailText: headers, multipart, quoted-printable, base64,
// RFC 2047 words, charsets), HTML (StripHtml) and GCIDE dictionary markup
// (StripDictMarkup), each on the whole input. Invariants: no crash or
// sanitizer report; an e-mail always gives well-formed UTF-8; HTML and
// dictionary markup give well-formed UTF-8 for well-formed UTF-8 input; no
// output is more than 4 times its input (plus a constant).
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/text/clean.h"
#include "common/text/email.h"
#include "common/text/unicode.h"
#include "fuzz/fuzz_input.h"

namespace {

bool WellFormedUtf8(absl::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    if (bertps::text::DecodeUtf8(s, &pos) == bertps::text::kInvalidCodePoint) {
      return false;
    }
  }
  return true;
}

void CheckSize(const char* what, absl::string_view in, const std::string& out) {
  BERTPS_FUZZ_CHECK(out.size() <= 4 * in.size() + 64,
                    "%s: %zu bytes out of %zu", what, out.size(), in.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  const bool valid = WellFormedUtf8(in);

  const std::string mail = bertps::text::ExtractEmailText(in);
  BERTPS_FUZZ_CHECK(WellFormedUtf8(mail), "e-mail text is ill-formed UTF-8");
  CheckSize("e-mail", in, mail);

  const std::string html = bertps::text::StripHtml(in);
  BERTPS_FUZZ_CHECK(!valid || WellFormedUtf8(html),
                    "HTML text is ill-formed UTF-8");
  CheckSize("HTML", in, html);

  const std::string dict = bertps::text::StripDictMarkup(in);
  BERTPS_FUZZ_CHECK(!valid || WellFormedUtf8(dict),
                    "dictionary text is ill-formed UTF-8");
  CheckSize("dictionary", in, dict);
  return 0;
}
