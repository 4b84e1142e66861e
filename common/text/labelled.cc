#include "common/text/labelled.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/io/file_util.h"
#include "common/status.h"

namespace bertps::text {
namespace {

// One deb822 stanza's Description field -> synopsis + paragraphs.
std::string DescriptionText(const std::vector<std::string>& lines) {
  std::vector<std::string> paragraphs;
  std::string cur;
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view l = absl::StripAsciiWhitespace(lines[i]);
    if (l == ".") {
      if (!cur.empty()) paragraphs.push_back(std::move(cur));
      cur.clear();
      continue;
    }
    if (l.empty()) continue;
    if (!cur.empty()) cur += ' ';
    absl::StrAppend(&cur, l);
  }
  if (!cur.empty()) paragraphs.push_back(std::move(cur));
  std::string text(absl::StripAsciiWhitespace(lines.empty() ? "" : lines[0]));
  for (const std::string& p : paragraphs) absl::StrAppend(&text, "\n", p);
  return text;
}

}  // namespace

const std::vector<std::string>& DefaultDebianSections() {
  static const auto* s = new std::vector<std::string>{
      "games", "sound", "graphics", "science", "mail",
      "editors", "net", "text", "utils"};
  return *s;
}

absl::StatusOr<std::vector<Document>> ParseDebianPackages(
    absl::string_view deb822, const std::vector<std::string>& sections) {
  std::vector<Document> docs;
  std::string package, section;
  std::vector<std::string> desc;  // first line: synopsis
  bool in_desc = false;
  auto flush = [&] {
    if (!package.empty() && !desc.empty()) {
      const size_t slash = section.rfind('/');
      const std::string sec =
          slash == std::string::npos ? section : section.substr(slash + 1);
      if (sections.empty() ||
          std::find(sections.begin(), sections.end(), sec) != sections.end()) {
        docs.push_back(Document{package, DescriptionText(desc), sec});
      }
    }
    package.clear();
    section.clear();
    desc.clear();
    in_desc = false;
  };
  for (absl::string_view line : absl::StrSplit(deb822, '\n')) {
    if (absl::StripTrailingAsciiWhitespace(line).empty()) {
      flush();
      continue;
    }
    if (line[0] == ' ' || line[0] == '\t') {
      if (in_desc) desc.emplace_back(line);
      continue;
    }
    in_desc = false;
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view key = line.substr(0, colon);
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (key == "Package") package = std::string(value);
    if (key == "Section") section = std::string(value);
    if (key == "Description" || key == "Description-en") {
      desc.emplace_back(value);
      in_desc = true;
    }
  }
  flush();
  return docs;
}

absl::StatusOr<std::vector<Document>> ExtractLabelled(
    const std::string& source, const std::string& input,
    const CleanOptions& options, const std::vector<std::string>& sections,
    CleanReport* report) {
  std::vector<Document> docs;
  CleanOptions o = options;
  if (source == "spamassassin") {
    ASSIGN_OR_RETURN(docs, ReadDocuments(input, "email"));
    for (Document& d : docs) {
      d.label = absl::StartsWith(d.id, "spam") ? "spam" : "ham";
    }
    o.strip_email = true;
  } else if (source == "debian-sections") {
    ASSIGN_OR_RETURN(std::string data, io::ReadFileToString(input));
    ASSIGN_OR_RETURN(docs, ParseDebianPackages(data, sections));
  } else if (source == "fortunes") {
    ASSIGN_OR_RETURN(docs, ReadDocuments(input, "fortunes"));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown labelled source '", source,
        "' (have spamassassin, debian-sections, fortunes)"));
  }
  return CleanDocuments(std::move(docs), o, report);
}

}  // namespace bertps::text
