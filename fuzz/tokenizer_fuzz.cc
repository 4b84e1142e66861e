// Fuzzes the WordPiece tokenizer (common/text/tokenizer.h) with the real
// bert-base-uncased vocabulary (data/vocab, tools/get_data.sh) on arbitrary
// bytes, invalid UTF-8 included. Invariants: no crash; ids are in
// [0, vocab size); Encode() equals the ids of Tokenize()'s tokens; every
// token is in the vocabulary and is well-formed UTF-8; BasicTokenizer
// tokens are never empty; both cased and uncased tokenizers.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/text/tokenizer.h"
#include "fuzz/fuzz_input.h"

namespace {

using bertps::text::FullTokenizer;

const FullTokenizer* Load(bool lower) {
  const std::string path =
      bertps::fuzz::DataDir() + "/vocab/bert-base-uncased-vocab.txt";
  auto t = FullTokenizer::Create(path, lower);
  if (!t.ok()) {
    std::fprintf(stderr, "%s (run tools/get_data.sh; BERTPS_DATA_DIR)\n",
                 t.status().ToString().c_str());
    std::abort();
  }
  return t->release();
}

bool WellFormedUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    uint32_t cp;
    if ((c >> 5) == 6) {
      n = 1, cp = c & 0x1f;
    } else if ((c >> 4) == 14) {
      n = 2, cp = c & 0x0f;
    } else if ((c >> 3) == 30) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = s[i + k];
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

void Check(const FullTokenizer& tok, absl::string_view text) {
  const std::vector<std::string> tokens = tok.Tokenize(text);
  const std::vector<int32_t> ids = tok.Encode(text);
  BERTPS_FUZZ_CHECK(tokens.size() == ids.size(), "%zu tokens, %zu ids",
                    tokens.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    BERTPS_FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok.vocab().size(),
                      "id %d out of range", ids[i]);
    BERTPS_FUZZ_CHECK(tok.vocab().Find(tokens[i]) == ids[i],
                      "token %zu '%s' is not id %d", i, tokens[i].c_str(),
                      ids[i]);
    BERTPS_FUZZ_CHECK(WellFormedUtf8(tokens[i]), "token %zu ill-formed", i);
  }
  tok.basic().ForEachToken(text, [](absl::string_view t) {
    BERTPS_FUZZ_CHECK(!t.empty(), "empty basic token");
    BERTPS_FUZZ_CHECK(WellFormedUtf8(t), "ill-formed basic token");
  });
}

const FullTokenizer* uncased = nullptr;
const FullTokenizer* cased = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Loaded at start-up: a missing vocab fails at once, not on an input.
  uncased = Load(true);
  cased = Load(false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  Check(*uncased, text);
  Check(*cased, text);
  return 0;
}
