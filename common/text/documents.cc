#include "common/text/documents.h"

#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/io/file_util.h"
#include "common/status.h"
#include "common/text/unicode.h"
#include "nlohmann/json.hpp"

namespace bertps::text {
namespace {

namespace fs = std::filesystem;

bool IsBlank(absl::string_view line) {
  return absl::StripAsciiWhitespace(line).empty();
}

// Lines of `data` without their "\n" / "\r\n" terminators.
std::vector<absl::string_view> Lines(absl::string_view data) {
  std::vector<absl::string_view> lines = absl::StrSplit(data, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  for (auto& l : lines) {
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  }
  return lines;
}

// Blank-line separated blocks; each block's lines (stripped of surrounding
// whitespace) joined with `sep`.
std::vector<Document> Blocks(absl::string_view data, const std::string& name,
                             absl::string_view sep) {
  std::vector<Document> docs;
  std::vector<absl::string_view> cur;
  auto flush = [&] {
    if (cur.empty()) return;
    docs.push_back(Document{absl::StrCat(name, ":", docs.size()),
                            absl::StrJoin(cur, sep), ""});
    cur.clear();
  };
  for (absl::string_view l : Lines(data)) {
    if (IsBlank(l)) {
      flush();
    } else {
      cur.push_back(absl::StripAsciiWhitespace(l));
    }
  }
  flush();
  return docs;
}

std::vector<Document> Fortunes(absl::string_view data,
                               const std::string& name) {
  const std::string category = fs::path(name).filename().string();
  std::vector<Document> docs;
  std::string cur;
  auto flush = [&] {
    if (!IsBlank(cur)) {
      while (!cur.empty() && cur.back() == '\n') cur.pop_back();
      docs.push_back(Document{absl::StrCat(category, ":", docs.size()), cur,
                              category});
    }
    cur.clear();
  };
  for (absl::string_view l : Lines(data)) {
    if (l == "%") {
      flush();
    } else {
      absl::StrAppend(&cur, l, "\n");
    }
  }
  flush();
  return docs;
}

absl::StatusOr<std::vector<Document>> Jsonl(absl::string_view data,
                                            const std::string& name) {
  std::vector<Document> docs;
  int line_no = 0;
  for (absl::string_view l : Lines(data)) {
    ++line_no;
    if (IsBlank(l)) continue;
    nlohmann::json j = nlohmann::json::parse(l.begin(), l.end(), nullptr,
                                             /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", line_no, ": not a JSON object"));
    }
    Document d;
    auto str = [&](const char* key, std::string* out) -> absl::Status {
      auto it = j.find(key);
      if (it == j.end() || it->is_null()) return absl::OkStatus();
      if (!it->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ":", line_no, ": \"", key, "\" is not a string"));
      }
      *out = it->get<std::string>();
      return absl::OkStatus();
    };
    if (!j.contains("text")) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", line_no, ": no \"text\""));
    }
    RETURN_IF_ERROR(str("text", &d.text));
    RETURN_IF_ERROR(str("label", &d.label));
    RETURN_IF_ERROR(str("id", &d.id));
    if (d.id.empty()) d.id = absl::StrCat(name, ":", line_no);
    docs.push_back(std::move(d));
  }
  return docs;
}

bool Skipped(const fs::path& p, const std::string& format) {
  const std::string f = p.filename().string();
  if (f.empty() || f[0] == '.' || f == "SOURCE") return true;
  return format == "fortunes" && (p.extension() == ".dat" || p.extension() == ".u8");
}

}  // namespace

std::string SanitizeUtf8(absl::string_view s, bool replace, int64_t* bad) {
  std::string out;
  out.reserve(s.size());
  int64_t n = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const char32_t cp = DecodeUtf8(s, &pos);
    if (cp == kInvalidCodePoint) {
      ++n;
      if (replace) AppendUtf8(0xFFFD, &out);
    } else {
      out.append(s.data() + start, pos - start);
    }
  }
  if (bad != nullptr) *bad = n;
  return out;
}

absl::StatusOr<std::vector<Document>> ParseDocuments(
    absl::string_view data, const std::string& name,
    const std::string& format) {
  if (format == "text") return Blocks(data, name, "\n");
  if (format == "paragraphs") return Blocks(data, name, " ");
  if (format == "jsonl") return Jsonl(data, name);
  if (format == "fortunes") return Fortunes(data, name);
  if (format == "email") {
    return std::vector<Document>{Document{name, std::string(data), ""}};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown document format '", format,
                   "' (have text, paragraphs, jsonl, email, fortunes)"));
}

absl::StatusOr<std::vector<Document>> ReadDocuments(const std::string& path,
                                                    const std::string& format) {
  RETURN_IF_ERROR(ParseDocuments("", path, format).status());
  std::error_code ec;
  std::vector<std::pair<std::string, std::string>> files;  // (name, path)
  if (fs::is_directory(path, ec)) {
    for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (!it->is_regular_file() || Skipped(it->path(), format)) continue;
      files.emplace_back(fs::relative(it->path(), path).string(),
                         it->path().string());
    }
    if (ec) {
      return absl::InternalError(
          absl::StrCat("reading directory ", path, ": ", ec.message()));
    }
    std::sort(files.begin(), files.end());
  } else if (fs::exists(path, ec)) {
    files.emplace_back(fs::path(path).filename().string(), path);
  } else {
    return absl::NotFoundError(absl::StrCat("no such file or directory: ", path));
  }
  std::vector<Document> all;
  for (const auto& [name, file] : files) {
    ASSIGN_OR_RETURN(std::string data, io::ReadFileToString(file));
    ASSIGN_OR_RETURN(std::vector<Document> docs,
                     ParseDocuments(data, name, format));
    for (auto& d : docs) all.push_back(std::move(d));
  }
  return all;
}

std::vector<std::string> SplitSentences(absl::string_view text) {
  std::vector<std::string> out;
  UErrorCode err = U_ZERO_ERROR;
  static const icu::Locale* locale = new icu::Locale("en_US@ss=standard");
  std::unique_ptr<icu::BreakIterator> it(
      icu::BreakIterator::createSentenceInstance(*locale, err));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const std::string clean = SanitizeUtf8(line, /*replace=*/false, nullptr);
    if (IsBlank(clean)) continue;
    if (U_FAILURE(err) || it == nullptr) {  // no ICU data: a line is a sentence
      out.emplace_back(absl::StripAsciiWhitespace(clean));
      continue;
    }
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(clean);
    it->setText(u);
    int32_t start = it->first();
    for (int32_t end = it->next(); end != icu::BreakIterator::DONE;
         start = end, end = it->next()) {
      std::string s;
      u.tempSubStringBetween(start, end).toUTF8String(s);
      absl::string_view t = absl::StripAsciiWhitespace(s);
      if (!t.empty()) out.emplace_back(t);
    }
  }
  return out;
}

absl::Status WriteTextDocuments(const std::vector<Document>& docs,
                                const std::string& path) {
  std::string data;
  for (const Document& d : docs) {
    std::vector<std::string> sentences = SplitSentences(d.text);
    if (sentences.empty()) continue;
    for (const std::string& s : sentences) absl::StrAppend(&data, s, "\n");
    data += "\n";
  }
  return io::WriteFileAtomically(path, data);
}

absl::Status WriteJsonl(const std::vector<Document>& docs,
                        const std::string& path) {
  std::string data;
  for (const Document& d : docs) {
    nlohmann::json j;
    j["id"] = SanitizeUtf8(d.id, true, nullptr);
    if (!d.label.empty()) j["label"] = SanitizeUtf8(d.label, true, nullptr);
    j["text"] = SanitizeUtf8(d.text, true, nullptr);
    absl::StrAppend(&data, j.dump(), "\n");
  }
  return io::WriteFileAtomically(path, data);
}

}  // namespace bertps::text
