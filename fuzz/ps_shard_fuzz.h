// The request script of fuzz_ps_shard (ps_shard_fuzz.cc), shared with the
// seed generator (make_seeds.cc).
//
// Setup bytes (kPsSetupBytes):
//   0: consistency mode (% 3: BSP, ASP, SSP) and optimizer ((/ 3) % 4:
//      adam_weight_decay, adamw, lamb, sgd)
//   1: workers 1 + % 3; shards 1 + (/ 3) % 2; shard index (/ 6) % shards;
//      backup workers (BSP) and SSP staleness from (/ 12)
// Records (fuzz_input.h), one request each, payload = serialized proto:
#ifndef BERTPS_FUZZ_PS_SHARD_FUZZ_H_
#define BERTPS_FUZZ_PS_SHARD_FUZZ_H_

#include <cstdint>

#include "common/model/bert_config.h"

namespace bertps {
namespace fuzz {

constexpr int kPsSetupBytes = 2;

enum PsOp : uint8_t {
  kPsBeginPush = 0,   // PushHeader: a new push stream (drops the previous one)
  kPsChunk = 1,       // TensorChunk of the open push
  kPsFinishPush = 2,  // (empty) end of the push stream
  kPsPull = 3,        // PullRequest
  kPsAnnounce = 4,    // AnnounceRequest
  kPsExchange = 5,    // ExchangeRequest
  kPsCheckpoint = 6,  // CheckpointRequest (dir replaced by a scratch dir)
  kPsRestore = 7,     // RestoreRequest (manifest: the last one written)
  kPsRestoreBytes = 8,  // raw manifest.json bytes, restored from
  kPsFullPush = 9,    // PushHeader: a complete, valid push of small values
  kPsDescribe = 10,   // (empty) Describe + Stats
  kPsNumOps = 11,
};

// The tiny model the fuzzed shards hold (about 3k parameters).
inline BertConfig FuzzModelConfig() {
  BertConfig c;
  c.vocab_size = 64;
  c.hidden_size = 8;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 16;
  c.type_vocab_size = 2;
  return c;
}

}  // namespace fuzz
}  // namespace bertps

#endif  // BERTPS_FUZZ_PS_SHARD_FUZZ_H_
