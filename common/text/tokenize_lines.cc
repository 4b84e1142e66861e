#include "common/text/tokenize_lines.h"

#include <charconv>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace bertps::text {
namespace {

constexpr size_t kChunk = 1 << 20;  // read and write granularity

}  // namespace

absl::Status TokenizeLines(const FullTokenizer& tokenizer, std::istream& in,
                           std::ostream& out, TokenizeLinesStats* stats) {
  TokenizeLinesStats st;
  std::string buf;     // unconsumed input: at most one partial line + chunk
  std::string outbuf;  // formatted output not yet written
  std::vector<int32_t> ids;
  outbuf.reserve(kChunk + 4096);

  auto emit_line = [&](absl::string_view line) -> absl::Status {
    ids.clear();
    tokenizer.EncodeAppend(line, &ids);
    char num[16];
    for (size_t k = 0; k < ids.size(); ++k) {
      if (k > 0) outbuf.push_back(' ');
      auto r = std::to_chars(num, num + sizeof(num), ids[k]);
      outbuf.append(num, r.ptr);
    }
    outbuf.push_back('\n');
    ++st.lines;
    st.tokens += static_cast<int64_t>(ids.size());
    if (outbuf.size() >= kChunk) {
      out.write(outbuf.data(), static_cast<std::streamsize>(outbuf.size()));
      outbuf.clear();
      if (!out) return absl::UnavailableError("tokenize: write failed");
    }
    return absl::OkStatus();
  };

  while (true) {
    const size_t old = buf.size();
    buf.resize(old + kChunk);
    in.read(buf.data() + old, static_cast<std::streamsize>(kChunk));
    const size_t got = static_cast<size_t>(in.gcount());
    buf.resize(old + got);
    st.bytes += static_cast<int64_t>(got);
    size_t pos = 0;
    for (size_t nl; (nl = buf.find('\n', pos)) != std::string::npos;
         pos = nl + 1) {
      absl::Status s = emit_line(absl::string_view(buf).substr(pos, nl - pos));
      if (!s.ok()) return s;
    }
    buf.erase(0, pos);
    if (got < kChunk) break;  // end of input (or an error, checked below)
  }
  if (in.bad()) return absl::DataLossError("tokenize: read failed");
  if (!buf.empty()) {
    absl::Status s = emit_line(buf);
    if (!s.ok()) return s;
  }
  out.write(outbuf.data(), static_cast<std::streamsize>(outbuf.size()));
  out.flush();
  if (!out) return absl::UnavailableError("tokenize: write failed");
  if (stats != nullptr) *stats = st;
  return absl::OkStatus();
}

}  // namespace bertps::text
