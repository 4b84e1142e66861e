#include "common/model/encoder_layer.h"

#include "Eigen/Core"
#include "common/model/activations.h"
#include "common/model/attention.h"
#include "common/model/layernorm.h"
#include "common/model/linear.h"

namespace bertps {
namespace {

template <typename T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using CVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// dst += src (the residual connections), on the compute threads.
template <typename T>
void AddInPlace(const T* src, int64_t n, T* dst) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// 64-byte aligned pieces of one buffer, in elements of T (sizeof(T) divides
// 64 for float and double).
template <typename T>
class Carver {
 public:
  explicit Carver(T* base) : base_(base) {}
  T* Take(int64_t n) {
    T* p = base_ == nullptr ? nullptr : base_ + offset_;
    const int64_t per_line = 64 / static_cast<int64_t>(sizeof(T));
    offset_ += (n + per_line - 1) / per_line * per_line;
    return p;
  }
  int64_t size() const { return offset_; }

 private:
  T* base_;
  int64_t offset_ = 0;
};

template <typename T>
EncoderLayerActs<T> Acts(const BertConfig& c, int64_t b, int64_t s,
                         Carver<T>* ar) {
  const int64_t bs = b * s, h = c.hidden_size, inter = c.intermediate_size;
  const int64_t nh = c.num_attention_heads;
  EncoderLayerActs<T> l;
  l.qkvt = ar->Take(3 * bs * h);
  l.probs = ar->Take(b * nh * s * s);
  l.ctx = ar->Take(bs * h);
  l.attn_sum = ar->Take(bs * h);
  l.ln1_mean = ar->Take(bs);
  l.ln1_rstd = ar->Take(bs);
  l.a = ar->Take(bs * h);
  l.h1 = ar->Take(bs * inter);
  l.g = ar->Take(bs * inter);
  l.ffn_sum = ar->Take(bs * h);
  l.ln2_mean = ar->Take(bs);
  l.ln2_rstd = ar->Take(bs);
  l.out = ar->Take(bs * h);
  return l;
}

template <typename T>
EncoderLayerScratch<T> Scratch(const BertConfig& c, int64_t b, int64_t s,
                               Carver<T>* ar) {
  const int64_t bs = b * s, h = c.hidden_size, inter = c.intermediate_size;
  const int64_t nh = c.num_attention_heads;
  EncoderLayerScratch<T> f;
  f.qkv = ar->Take(bs * 3 * h);
  f.probs_a = ar->Take(b * nh * s * s);
  f.probs_b = ar->Take(b * nh * s * s);
  f.headsa = ar->Take(bs * h);
  f.headsb = ar->Take(3 * bs * h);
  f.dqkv = ar->Take(bs * 3 * h);
  f.d_b = ar->Take(bs * h);
  f.d_c = ar->Take(bs * h);
  f.d_i = ar->Take(bs * inter);
  return f;
}

}  // namespace

template <typename P>
EncoderLayerTensors<P> EncoderLayerTensorsOf(
    int64_t layer, const std::function<P*(const std::string&)>& lookup) {
  const std::string p = "bert.encoder.layer." + std::to_string(layer) + ".";
  EncoderLayerTensors<P> t;
  t.qkv_w = lookup(p + "attention.self.query.weight");
  t.qkv_b = lookup(p + "attention.self.query.bias");
  t.ao_w = lookup(p + "attention.output.dense.weight");
  t.ao_b = lookup(p + "attention.output.dense.bias");
  t.ln1_g = lookup(p + "attention.output.LayerNorm.weight");
  t.ln1_b = lookup(p + "attention.output.LayerNorm.bias");
  t.i_w = lookup(p + "intermediate.dense.weight");
  t.i_b = lookup(p + "intermediate.dense.bias");
  t.o_w = lookup(p + "output.dense.weight");
  t.o_b = lookup(p + "output.dense.bias");
  t.ln2_g = lookup(p + "output.LayerNorm.weight");
  t.ln2_b = lookup(p + "output.LayerNorm.bias");
  return t;
}

template <typename T>
int64_t EncoderLayerActsSize(const BertConfig& c, int64_t b, int64_t s) {
  Carver<T> ar(nullptr);
  Acts(c, b, s, &ar);
  return ar.size();
}

template <typename T>
int64_t EncoderLayerScratchSize(const BertConfig& c, int64_t b, int64_t s) {
  Carver<T> ar(nullptr);
  Scratch(c, b, s, &ar);
  return ar.size();
}

template <typename T>
EncoderLayerActs<T> CarveEncoderLayerActs(const BertConfig& c, int64_t b,
                                          int64_t s, T* base) {
  Carver<T> ar(base);
  return Acts(c, b, s, &ar);
}

template <typename T>
EncoderLayerScratch<T> CarveEncoderLayerScratch(const BertConfig& c, int64_t b,
                                                int64_t s, T* base) {
  Carver<T> ar(base);
  return Scratch(c, b, s, &ar);
}

template <typename T>
void EncoderLayerForward(kernels::MatmulEngine* mm, const BertConfig& c,
                         const EncoderLayerStep& st,
                         const EncoderLayerTensors<const T>& w, const T* x,
                         const int32_t* mask, const EncoderLayerActs<T>& l,
                         const EncoderLayerScratch<T>& f) {
  const int64_t b = st.b, s = st.s, h = c.hidden_size;
  const int64_t inter = c.intermediate_size, bs = b * s;
  const double eps = c.layer_norm_eps, hp = st.hidden_dropout;
  auto key = [&](uint32_t site) {
    DropoutKey k = st.key;
    k.site = site;
    return k;
  };
  const AttentionDims adims{b, s, c.num_attention_heads, c.head_size()};
  // Fused q/k/v projection: the three weights are contiguous (3H, H).
  LinearForward(mm, x, w.qkv_w, w.qkv_b, bs, h, 3 * h, f.qkv);
  AttentionForward(mm, adims,
                   AttentionDropout{key(DropoutSiteAttentionProbs(st.layer)),
                                    st.attention_dropout, st.example_offset},
                   f.qkv, mask, l.qkvt, l.probs, f.probs_a, f.headsa, l.ctx);
  LinearForward(mm, l.ctx, w.ao_w, w.ao_b, bs, h, h, l.attn_sum);
  DropoutForward(key(DropoutSiteAttentionOutput(st.layer)), hp, bs, h, s,
                 st.example_offset, l.attn_sum, l.attn_sum);
  AddInPlace(x, bs * h, l.attn_sum);
  LayerNormForward(l.attn_sum, w.ln1_g, w.ln1_b, bs, h, eps, l.a, l.ln1_mean,
                   l.ln1_rstd);
  LinearForward(mm, l.a, w.i_w, w.i_b, bs, h, inter, l.h1);
  GeluForward(c.hidden_act, l.h1, bs * inter, l.g);
  LinearForward(mm, l.g, w.o_w, w.o_b, bs, inter, h, l.ffn_sum);
  DropoutForward(key(DropoutSiteFfnOutput(st.layer)), hp, bs, h, s,
                 st.example_offset, l.ffn_sum, l.ffn_sum);
  AddInPlace(l.a, bs * h, l.ffn_sum);
  LayerNormForward(l.ffn_sum, w.ln2_g, w.ln2_b, bs, h, eps, l.out, l.ln2_mean,
                   l.ln2_rstd);
}

template <typename T>
void EncoderLayerBackward(kernels::MatmulEngine* mm, const BertConfig& c,
                          const EncoderLayerStep& st,
                          const EncoderLayerTensors<const T>& w,
                          const EncoderLayerTensors<T>& gw, const T* x,
                          const EncoderLayerActs<T>& l,
                          const EncoderLayerScratch<T>& f, T* d) {
  const int64_t b = st.b, s = st.s, h = c.hidden_size;
  const int64_t inter = c.intermediate_size, bs = b * s;
  const double hp = st.hidden_dropout;
  auto key = [&](uint32_t site) {
    DropoutKey k = st.key;
    k.site = site;
    return k;
  };
  const AttentionDims adims{b, s, c.num_attention_heads, c.head_size()};
  // out = LN2(dropout(dense2(gelu(dense1(a)))) + a)
  LayerNormBackward(d, l.ffn_sum, w.ln2_g, l.ln2_mean, l.ln2_rstd, bs, h,
                    f.d_b, gw.ln2_g, gw.ln2_b);
  DropoutBackward(key(DropoutSiteFfnOutput(st.layer)), hp, bs, h, s,
                  st.example_offset, f.d_b, f.d_c);
  LinearBackward(mm, f.d_c, l.g, w.o_w, bs, inter, h, f.d_i, false, gw.o_w,
                 gw.o_b);
  GeluBackward(c.hidden_act, f.d_i, l.h1, bs * inter, f.d_i);
  // d_b (residual into a) += d_i W1
  LinearBackward(mm, f.d_i, l.a, w.i_w, bs, h, inter, f.d_b, true, gw.i_w,
                 gw.i_b);
  // a = LN1(dropout(dense_o(ctx)) + x)
  LayerNormBackward(f.d_b, l.attn_sum, w.ln1_g, l.ln1_mean, l.ln1_rstd, bs, h,
                    d, gw.ln1_g, gw.ln1_b);
  DropoutBackward(key(DropoutSiteAttentionOutput(st.layer)), hp, bs, h, s,
                  st.example_offset, d, f.d_c);
  LinearBackward(mm, f.d_c, l.ctx, w.ao_w, bs, h, h, f.d_b, false, gw.ao_w,
                 gw.ao_b);
  AttentionBackward(mm, adims,
                    AttentionDropout{key(DropoutSiteAttentionProbs(st.layer)),
                                     st.attention_dropout, st.example_offset},
                    f.d_b, l.qkvt, l.probs, f.probs_a, f.probs_b, f.headsa,
                    f.headsb, f.dqkv);
  // d (residual into x) += dqkv Wqkv
  LinearBackward(mm, f.dqkv, x, w.qkv_w, bs, h, 3 * h, d, true, gw.qkv_w,
                 gw.qkv_b);
}

#define BERTPS_INSTANTIATE(T)                                                 \
  template int64_t EncoderLayerActsSize<T>(const BertConfig&, int64_t,        \
                                           int64_t);                          \
  template int64_t EncoderLayerScratchSize<T>(const BertConfig&, int64_t,     \
                                              int64_t);                       \
  template EncoderLayerTensors<T> EncoderLayerTensorsOf<T>(                   \
      int64_t, const std::function<T*(const std::string&)>&);                 \
  template EncoderLayerTensors<const T> EncoderLayerTensorsOf<const T>(       \
      int64_t, const std::function<const T*(const std::string&)>&);           \
  template EncoderLayerActs<T> CarveEncoderLayerActs<T>(const BertConfig&,    \
                                                        int64_t, int64_t, T*); \
  template EncoderLayerScratch<T> CarveEncoderLayerScratch<T>(                \
      const BertConfig&, int64_t, int64_t, T*);                               \
  template void EncoderLayerForward<T>(                                       \
      kernels::MatmulEngine*, const BertConfig&, const EncoderLayerStep&,     \
      const EncoderLayerTensors<const T>&, const T*, const int32_t*,          \
      const EncoderLayerActs<T>&, const EncoderLayerScratch<T>&);             \
  template void EncoderLayerBackward<T>(                                      \
      kernels::MatmulEngine*, const BertConfig&, const EncoderLayerStep&,     \
      const EncoderLayerTensors<const T>&, const EncoderLayerTensors<T>&,     \
      const T*, const EncoderLayerActs<T>&, const EncoderLayerScratch<T>&,    \
      T*);
BERTPS_INSTANTIATE(float)
BERTPS_INSTANTIATE(double)
#undef BERTPS_INSTANTIATE

}  // namespace bertps
