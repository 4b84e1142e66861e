// The readable text of a raw e-mail (RFC 5322 + MIME), for cleaning.
//
// ExtractEmailText keeps the Subject (RFC 2047 encoded words decoded) and
// the body; every other header is dropped. The body is found by walking the
// MIME tree: multipart/* parts recursively (boundaries from Content-Type),
// message/rfc822 parts as nested messages. The text/plain parts are kept, in
// order; when there is none, the text/html parts with their markup stripped
// (StripHtml, clean.h); other types (images, attachments) are dropped. A
// message without Content-Type is text/plain. Content-Transfer-Encoding
// quoted-printable and base64 are decoded (malformed input decodes as far as
// it goes). The charset parameter is converted to UTF-8 with ICU (us-ascii,
// utf-8, iso-8859-*, windows-125x, koi8-r, gb2312, ... whatever ICU knows);
// a missing or unknown charset means UTF-8 when the bytes are valid UTF-8,
// else ISO-8859-1. The result is valid UTF-8: "Subject\n\nbody" (or only the
// body when there is no subject).
//
// Thread-safety: pure functions, thread-safe.
#ifndef BERTPS_COMMON_TEXT_EMAIL_H_
#define BERTPS_COMMON_TEXT_EMAIL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace bertps::text {

std::string ExtractEmailText(absl::string_view raw);

// Decoders used by ExtractEmailText, exposed for tests.
std::string DecodeQuotedPrintable(absl::string_view in);
std::string DecodeBase64Lenient(absl::string_view in);  // skips non-alphabet
// Bytes in `charset` -> UTF-8 (see above for missing/unknown charsets).
std::string CharsetToUtf8(absl::string_view bytes, absl::string_view charset);
// A header value with RFC 2047 encoded words (=?cs?B|Q?...?=) decoded.
std::string DecodeHeaderValue(absl::string_view value);

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_EMAIL_H_
