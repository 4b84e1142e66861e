#!/usr/bin/python3
"""Independent PyTorch reference of BERT (behaviour of google-research/bert modeling.py).

Used for gradient parity tests against the C++ model and as the speed peer in benchmarks.
Parameters carry Hugging Face BertForPreTraining / BertForSequenceClassification names; the MLM
decoder is tied to bert.embeddings.word_embeddings.weight (no separate decoder tensor).

Subcommands: grad, init, batch, bench (see --help of each). Run with /usr/bin/python3.
"""

import argparse
import collections
import json
import math
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

# ----------------------------------------------------------------------------------------------
# Config

_CONFIG_DEFAULTS = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "num_labels": 2,
    "classifier_dropout": None,
}

_ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),  # exact erf form
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "tanh": torch.tanh,
}


class Config(collections.namedtuple("Config", list(_CONFIG_DEFAULTS))):
    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    @property
    def classifier_dropout_prob(self):
        cd = self.classifier_dropout
        return self.hidden_dropout_prob if cd is None else cd


def make_config(d):
    """Builds a Config from a Hugging Face style dict (unknown keys ignored; defaults as HF BertConfig)."""
    vals = dict(_CONFIG_DEFAULTS)
    for k in _CONFIG_DEFAULTS:
        if k in d:
            vals[k] = d[k]
    if "num_labels" not in d and isinstance(d.get("id2label"), dict):
        vals["num_labels"] = len(d["id2label"])
    cfg = Config(**vals)
    if cfg.hidden_size % cfg.num_attention_heads:
        raise ValueError(f"hidden_size {cfg.hidden_size} not divisible by num_attention_heads "
                         f"{cfg.num_attention_heads}")
    if cfg.hidden_act not in _ACTIVATIONS:
        raise ValueError(f"unsupported hidden_act '{cfg.hidden_act}' (have {sorted(_ACTIVATIONS)})")
    return cfg


def load_config(path):
    with open(path) as f:
        return make_config(json.load(f))


# ----------------------------------------------------------------------------------------------
# Parameters

def param_shapes(cfg, task="pretrain"):
    """Ordered dict: HF parameter name -> shape, for task 'pretrain' or 'classify'."""
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    s = collections.OrderedDict()
    s["bert.embeddings.word_embeddings.weight"] = (V, H)
    s["bert.embeddings.position_embeddings.weight"] = (cfg.max_position_embeddings, H)
    s["bert.embeddings.token_type_embeddings.weight"] = (cfg.type_vocab_size, H)
    s["bert.embeddings.LayerNorm.weight"] = (H,)
    s["bert.embeddings.LayerNorm.bias"] = (H,)
    for l in range(cfg.num_hidden_layers):
        p = f"bert.encoder.layer.{l}."
        for n in ("query", "key", "value"):
            s[p + f"attention.self.{n}.weight"] = (H, H)
            s[p + f"attention.self.{n}.bias"] = (H,)
        s[p + "attention.output.dense.weight"] = (H, H)
        s[p + "attention.output.dense.bias"] = (H,)
        s[p + "attention.output.LayerNorm.weight"] = (H,)
        s[p + "attention.output.LayerNorm.bias"] = (H,)
        s[p + "intermediate.dense.weight"] = (I, H)
        s[p + "intermediate.dense.bias"] = (I,)
        s[p + "output.dense.weight"] = (H, I)
        s[p + "output.dense.bias"] = (H,)
        s[p + "output.LayerNorm.weight"] = (H,)
        s[p + "output.LayerNorm.bias"] = (H,)
    s["bert.pooler.dense.weight"] = (H, H)
    s["bert.pooler.dense.bias"] = (H,)
    if task == "pretrain":
        s["cls.predictions.transform.dense.weight"] = (H, H)
        s["cls.predictions.transform.dense.bias"] = (H,)
        s["cls.predictions.transform.LayerNorm.weight"] = (H,)
        s["cls.predictions.transform.LayerNorm.bias"] = (H,)
        s["cls.predictions.bias"] = (V,)
        s["cls.seq_relationship.weight"] = (2, H)
        s["cls.seq_relationship.bias"] = (2,)
    elif task == "classify":
        s["classifier.weight"] = (cfg.num_labels, H)
        s["classifier.bias"] = (cfg.num_labels,)
    else:
        raise ValueError(f"unknown task '{task}'")
    return s


def _is_layer_norm(name):
    return "LayerNorm" in name or "layer_norm" in name


def _is_bias(name):
    return name.endswith("bias") and not _is_layer_norm(name)


def _truncated_normal(rng, shape, std):
    """Normal(0, std) truncated at 2 std by resampling (as tf.truncated_normal_initializer)."""
    x = rng.standard_normal(shape)
    bad = np.abs(x) > 2.0
    while bad.any():
        x[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(x) > 2.0
    return x * std


def init_params(cfg, task="pretrain", seed=0, std=None, perturb=False):
    """Returns an ordered dict name -> float32 np.ndarray of fresh weights.

    Matrices/embeddings: truncated normal (std = initializer_range unless given); biases 0;
    LayerNorm weight 1, bias 0. perturb=True: LayerNorm weight 1 + 0.1 N(0,1), every bias and
    LayerNorm bias 0.02 N(0,1), so all gradients are non-trivial in parity tests.
    """
    std = cfg.initializer_range if std is None else std
    rng = np.random.default_rng(seed)
    out = collections.OrderedDict()
    for name, shape in param_shapes(cfg, task).items():
        if _is_layer_norm(name) and name.endswith("weight"):
            v = np.ones(shape) + (0.1 * rng.standard_normal(shape) if perturb else 0.0)
        elif name.endswith("bias"):
            v = 0.02 * rng.standard_normal(shape) if perturb else np.zeros(shape)
        else:
            v = _truncated_normal(rng, shape, std)
        out[name] = v.astype(np.float32)
    return out


_ALIASES = {
    # Some Hugging Face checkpoints store the MLM output bias only under the decoder's name.
    "cls.predictions.bias": ("cls.predictions.decoder.bias",),
}


def select_params(tensors, cfg, task):
    """Picks the task's parameters out of a loaded checkpoint; checks shapes; lists extras.

    Returns (ordered dict name -> np.ndarray, list of ignored names). Raises ValueError on a
    missing tensor or a shape mismatch.
    """
    out = collections.OrderedDict()
    used = set()
    missing = []
    for name, shape in param_shapes(cfg, task).items():
        src = name
        if src not in tensors:
            src = next((a for a in _ALIASES.get(name, ()) if a in tensors), None)
        if src is None:
            missing.append(name)
            continue
        arr = tensors[src]
        if tuple(arr.shape) != tuple(shape):
            raise ValueError(f"tensor '{src}' has shape {list(arr.shape)}, config wants {list(shape)}")
        out[name] = arr
        used.add(src)
    if missing:
        raise ValueError(f"weights lack {len(missing)} tensor(s) for task '{task}': {missing[:8]}"
                         + (" ..." if len(missing) > 8 else ""))
    ignored = [n for n in tensors if n not in used]
    return out, ignored


def to_torch_params(arrays, dtype):
    return collections.OrderedDict(
        (n, torch.tensor(np.asarray(a), dtype=dtype).requires_grad_(True)) for n, a in arrays.items())


# ----------------------------------------------------------------------------------------------
# Model (functional; p maps HF names to tensors)

def _layer_norm(x, p, prefix, cfg):
    # Under bf16 autocast a product's output is bf16 while PyTorch 1.13 runs
    # layer_norm as it comes: its statistics are computed in the parameters'
    # precision (float32), as mixed precision does (a no-op otherwise).
    w = p[prefix + ".weight"]
    return F.layer_norm(x.to(w.dtype), (cfg.hidden_size,), w, p[prefix + ".bias"],
                        cfg.layer_norm_eps)


def encode(p, cfg, input_ids, input_mask, segment_ids, train):
    """Returns (sequence_output [B,S,H], pooled_output [B,H]). Index tensors are int64."""
    B, S = input_ids.shape
    H, nh, d = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
    if S > cfg.max_position_embeddings:
        raise ValueError(f"sequence length {S} > max_position_embeddings {cfg.max_position_embeddings}")
    act = _ACTIVATIONS[cfg.hidden_act]
    hp, ap = cfg.hidden_dropout_prob, cfg.attention_probs_dropout_prob
    dtype = p["bert.embeddings.word_embeddings.weight"].dtype

    x = (F.embedding(input_ids, p["bert.embeddings.word_embeddings.weight"])
         + F.embedding(segment_ids, p["bert.embeddings.token_type_embeddings.weight"])
         + p["bert.embeddings.position_embeddings.weight"][:S].unsqueeze(0))
    x = _layer_norm(x, p, "bert.embeddings.LayerNorm", cfg)
    x = F.dropout(x, hp, train)

    # [B,1,1,S]: 0 where attended, -10000 where masked out.
    ext = ((1.0 - input_mask.to(dtype)) * -10000.0)[:, None, None, :]
    scale = 1.0 / math.sqrt(d)

    def heads(t):  # [B,S,H] -> [B,nh,S,d]
        return t.view(B, S, nh, d).transpose(1, 2)

    for l in range(cfg.num_hidden_layers):
        pre = f"bert.encoder.layer.{l}."
        q = heads(F.linear(x, p[pre + "attention.self.query.weight"], p[pre + "attention.self.query.bias"]))
        k = heads(F.linear(x, p[pre + "attention.self.key.weight"], p[pre + "attention.self.key.bias"]))
        v = heads(F.linear(x, p[pre + "attention.self.value.weight"], p[pre + "attention.self.value.bias"]))
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale + ext  # [B,nh,S,S]
        probs = F.dropout(torch.softmax(scores, dim=-1), ap, train)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(B, S, H)
        a = F.linear(ctx, p[pre + "attention.output.dense.weight"], p[pre + "attention.output.dense.bias"])
        a = _layer_norm(F.dropout(a, hp, train) + x, p, pre + "attention.output.LayerNorm", cfg)
        i = act(F.linear(a, p[pre + "intermediate.dense.weight"], p[pre + "intermediate.dense.bias"]))
        o = F.linear(i, p[pre + "output.dense.weight"], p[pre + "output.dense.bias"])
        x = _layer_norm(F.dropout(o, hp, train) + a, p, pre + "output.LayerNorm", cfg)

    pooled = torch.tanh(F.linear(x[:, 0], p["bert.pooler.dense.weight"], p["bert.pooler.dense.bias"]))
    return x, pooled


class _FusedTiedMlmLoss(torch.autograd.Function):
    """sum(w * -log_softmax(x E^T + b)[label]) / (sum(w) + 1e-5) with one reused [N,V] buffer.

    Same value and gradients as the plain autograd form; avoids allocating (and page-faulting)
    the logits, log-probabilities and their gradients every step. The workspace buffer is
    overwritten by the next forward, so backward must run before the next forward.
    """

    @staticmethod
    def forward(ctx, x, emb, bias, labels, weights, workspace):
        N, V = x.shape[0], emb.shape[0]
        key = (N, V, x.dtype)
        buf = workspace.get(key)
        if buf is None:
            buf = workspace[key] = torch.empty(N, V, dtype=x.dtype)
        torch.addmm(bias, x, emb.t(), out=buf)                       # logits [N,V]
        buf.sub_(buf.max(dim=1, keepdim=True).values)                 # shifted logits
        picked = buf.gather(1, labels[:, None]).squeeze(1)            # [N]
        buf.exp_()
        sums = buf.sum(dim=1)                                         # [N]
        nll = torch.log(sums) - picked
        denom = weights.sum() + 1e-5
        ctx.save_for_backward(x, emb, labels, weights, sums)
        ctx.buf, ctx.denom = buf, denom
        return (weights * nll).sum() / denom

    @staticmethod
    def backward(ctx, grad_out):
        x, emb, labels, weights, sums = ctx.saved_tensors
        buf = ctx.buf
        coef = grad_out * weights / ctx.denom                         # [N]
        buf.div_(sums[:, None])                                       # softmax
        buf[torch.arange(buf.shape[0]), labels] -= 1.0
        buf.mul_(coef[:, None])                                       # d loss / d logits
        dx = buf.mm(emb)
        demb = buf.t().mm(x)
        dbias = buf.sum(dim=0)
        ctx.buf = None
        return dx, demb, dbias, None, None, None


def mlm_loss(p, cfg, seq, positions, labels, weights, fused_workspace=None):
    B, S, H = seq.shape
    act = _ACTIVATIONS[cfg.hidden_act]
    offsets = (positions + torch.arange(B, dtype=positions.dtype)[:, None] * S).reshape(-1)
    x = seq.reshape(B * S, H).index_select(0, offsets)              # [B*P,H]
    x = act(F.linear(x, p["cls.predictions.transform.dense.weight"],
                     p["cls.predictions.transform.dense.bias"]))
    x = _layer_norm(x, p, "cls.predictions.transform.LayerNorm", cfg)
    labels = labels.reshape(-1)
    w = weights.reshape(-1).to(x.dtype)
    emb, bias = p["bert.embeddings.word_embeddings.weight"], p["cls.predictions.bias"]
    if fused_workspace is not None:
        return _FusedTiedMlmLoss.apply(x, emb, bias, labels, w, fused_workspace)
    logp = torch.log_softmax(F.linear(x, emb, bias), dim=-1)          # [B*P,V]
    nll = -logp.gather(1, labels[:, None]).squeeze(1)
    return (w * nll).sum() / (w.sum() + 1e-5)


def pretrain_loss(p, cfg, batch, train=False, fused_workspace=None):
    """Returns (loss, mlm_loss, nsp_loss)."""
    seq, pooled = encode(p, cfg, batch["input_ids"], batch["input_mask"], batch["segment_ids"], train)
    mlm = mlm_loss(p, cfg, seq, batch["masked_lm_positions"], batch["masked_lm_ids"],
                   batch["masked_lm_weights"], fused_workspace)
    nsp_logits = F.linear(pooled, p["cls.seq_relationship.weight"], p["cls.seq_relationship.bias"])
    nsp = F.cross_entropy(nsp_logits, batch["next_sentence_labels"].reshape(-1))
    return mlm + nsp, mlm, nsp


def classify_loss(p, cfg, batch, train=False):
    """Returns (loss, logits [B,num_labels])."""
    _, pooled = encode(p, cfg, batch["input_ids"], batch["input_mask"], batch["segment_ids"], train)
    pooled = F.dropout(pooled, cfg.classifier_dropout_prob, train)
    logits = F.linear(pooled, p["classifier.weight"], p["classifier.bias"])
    return F.cross_entropy(logits, batch["label_ids"].reshape(-1)), logits


# ----------------------------------------------------------------------------------------------
# Batches

_BATCH_KEYS = {
    "pretrain": ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                 "masked_lm_weights", "next_sentence_labels"),
    "classify": ("input_ids", "input_mask", "segment_ids", "label_ids"),
}


def make_batch(cfg, batch, seq, preds, seed=0, task="pretrain"):
    """A random but valid batch as an ordered dict of numpy arrays (I32, masked_lm_weights F32).

    Row 0 is full length; other rows have trailing padding (length >= preds + 2). Segment ids
    are 0 then 1 inside the unpadded part. Masked positions are distinct, sorted, inside the
    unpadded part and never 0 ([CLS]); each row predicts 1..preds tokens, the rest is padding
    (position 0, id 0, weight 0).
    """
    rng = np.random.default_rng(seed)
    B, S, P = batch, seq, preds
    if task == "pretrain" and S < P + 2:
        raise ValueError(f"seq {S} too short for {P} predictions (need seq >= preds + 2)")
    if S > cfg.max_position_embeddings:
        raise ValueError(f"seq {S} > max_position_embeddings {cfg.max_position_embeddings}")
    min_len = min(S, max(P + 2, 2, S // 2))
    input_ids = np.zeros((B, S), np.int32)
    input_mask = np.zeros((B, S), np.int32)
    segment_ids = np.zeros((B, S), np.int32)
    pos = np.zeros((B, P), np.int32)
    ids = np.zeros((B, P), np.int32)
    wts = np.zeros((B, P), np.float32)
    for b in range(B):
        n = S if b == 0 else int(rng.integers(min_len, S + 1))
        input_ids[b, :n] = rng.integers(1, cfg.vocab_size, n) if cfg.vocab_size > 1 else 0
        input_mask[b, :n] = 1
        if cfg.type_vocab_size > 1 and n >= 2:
            split = int(rng.integers(1, n))
            segment_ids[b, split:n] = 1
        if task == "pretrain":
            k = int(rng.integers(1, P + 1)) if b else P
            chosen = np.sort(rng.choice(np.arange(1, n), size=k, replace=False))
            pos[b, :k] = chosen
            ids[b, :k] = rng.integers(0, cfg.vocab_size, k)
            wts[b, :k] = 1.0
    out = collections.OrderedDict(input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids)
    if task == "pretrain":
        out["masked_lm_positions"] = pos
        out["masked_lm_ids"] = ids
        out["masked_lm_weights"] = wts
        out["next_sentence_labels"] = rng.integers(0, 2, B).astype(np.int32)
    else:
        out["label_ids"] = rng.integers(0, cfg.num_labels, B).astype(np.int32)
    return out


def batch_to_torch(arrays, task, dtype):
    missing = [k for k in _BATCH_KEYS[task] if k not in arrays]
    if missing:
        raise ValueError(f"batch lacks {missing} for task '{task}'")
    out = {}
    for k in _BATCH_KEYS[task]:
        a = np.asarray(arrays[k])
        out[k] = torch.tensor(a, dtype=dtype) if k == "masked_lm_weights" else torch.tensor(a.astype(np.int64))
    return out


def check_batch(b, cfg, task):
    ids = b["input_ids"]
    B, S = ids.shape
    for k in ("input_mask", "segment_ids"):
        if tuple(b[k].shape) != (B, S):
            raise ValueError(f"batch '{k}' shape {list(b[k].shape)} != input_ids shape {[B, S]}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
        raise ValueError(f"input_ids outside [0, {cfg.vocab_size})")
    if b["segment_ids"].numel() and (b["segment_ids"].min() < 0 or b["segment_ids"].max() >= cfg.type_vocab_size):
        raise ValueError(f"segment_ids outside [0, {cfg.type_vocab_size})")
    if task == "pretrain":
        pshape = tuple(b["masked_lm_positions"].shape)
        for k in ("masked_lm_ids", "masked_lm_weights"):
            if tuple(b[k].shape) != pshape:
                raise ValueError(f"batch '{k}' shape {list(b[k].shape)} != masked_lm_positions {list(pshape)}")
        if pshape[0] != B:
            raise ValueError("masked_lm_positions batch size differs from input_ids")
        mp = b["masked_lm_positions"]
        if mp.numel() and (mp.min() < 0 or mp.max() >= S):
            raise ValueError(f"masked_lm_positions outside [0, {S})")
        mi = b["masked_lm_ids"]
        if mi.numel() and (mi.min() < 0 or mi.max() >= cfg.vocab_size):
            raise ValueError(f"masked_lm_ids outside [0, {cfg.vocab_size})")
        nl = b["next_sentence_labels"].reshape(-1)
        if nl.numel() != B or (nl.numel() and (nl.min() < 0 or nl.max() > 1)):
            raise ValueError("next_sentence_labels must be [B] values in {0,1}")
    else:
        li = b["label_ids"].reshape(-1)
        if li.numel() != B or (li.numel() and (li.min() < 0 or li.max() >= cfg.num_labels)):
            raise ValueError(f"label_ids must be [B] values in [0, {cfg.num_labels})")


# ----------------------------------------------------------------------------------------------
# Optimizer (optimization.py's AdamWeightDecay) and clipping

class AdamWeightDecay:
    """m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; u = m/(sqrt(v)+eps) + wd*w (not for LayerNorm
    or bias); w -= lr*u. No bias correction."""

    def __init__(self, params, lr=1e-4, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01):
        self.params = params
        self.lr, self.b1, self.b2, self.eps, self.wd = lr, beta1, beta2, eps, weight_decay
        self.m = {n: torch.zeros_like(t) for n, t in params.items()}
        self.v = {n: torch.zeros_like(t) for n, t in params.items()}
        self.u = {n: torch.empty_like(t) for n, t in params.items()}  # update scratch
        self.decay = {n: not (_is_layer_norm(n) or n.endswith("bias")) for n in params}

    @torch.no_grad()
    def step(self, lr=None):
        lr = self.lr if lr is None else lr
        for n, w in self.params.items():
            g = w.grad
            if g is None:
                continue
            m, v, u = self.m[n], self.v[n], self.u[n]
            m.mul_(self.b1).add_(g, alpha=1.0 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1.0 - self.b2)
            torch.sqrt(v, out=u)
            u.add_(self.eps)
            torch.div(m, u, out=u)
            if self.decay[n] and self.wd:
                u.add_(w, alpha=self.wd)
            w.add_(u, alpha=-lr)


@torch.no_grad()
def clip_by_global_norm(params, clip_norm=1.0):
    """Scales all gradients by clip_norm / max(global_norm, clip_norm). Returns the global norm."""
    grads = [t.grad for t in params.values() if t.grad is not None]
    norm = torch.stack([g.norm() for g in grads]).double().norm().item() if grads else 0.0
    if norm > clip_norm:
        for g in grads:
            g.mul_(clip_norm / norm)
    return norm


# ----------------------------------------------------------------------------------------------
# Commands

_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def loss_and_grads(cfg, weights, batch_arrays, task="pretrain", dtype=torch.float64, fused_mlm=False):
    """Eval-mode (no dropout) loss and gradients.

    Returns (info dict for the JSON line, ordered dict name -> gradient tensor of `dtype`).
    """
    p = to_torch_params(weights, dtype)
    b = batch_to_torch(batch_arrays, task, dtype)
    check_batch(b, cfg, task)
    if task == "pretrain":
        loss, mlm, nsp = pretrain_loss(p, cfg, b, train=False, fused_workspace={} if fused_mlm else None)
        info = {"mlm_loss": mlm.item(), "nsp_loss": nsp.item(), "loss": loss.item()}
    else:
        loss, logits = classify_loss(p, cfg, b, train=False)
        info = {"loss": loss.item(), "logits": logits.detach().tolist()}
    loss.backward()
    grads = collections.OrderedDict(
        (n, (t.grad if t.grad is not None else torch.zeros_like(t)).detach()) for n, t in p.items())
    return info, grads


def compute_grads(cfg, weights, batch_arrays, task="pretrain", dtype=torch.float64, fused_mlm=False):
    """As loss_and_grads, with the gradients as float32 numpy arrays (what `grad` writes)."""
    info, grads = loss_and_grads(cfg, weights, batch_arrays, task, dtype, fused_mlm)
    return info, collections.OrderedDict((n, g.to(torch.float32).numpy()) for n, g in grads.items())


def eval_loss(cfg, weights, batch_arrays, task="pretrain", dtype=torch.float64):
    """Eval-mode loss as a Python float, without gradients (for finite differences)."""
    with torch.no_grad():
        p = collections.OrderedDict((n, torch.as_tensor(np.asarray(a), dtype=dtype)) for n, a in weights.items())
        b = batch_to_torch(batch_arrays, task, dtype)
        if task == "pretrain":
            return pretrain_loss(p, cfg, b, train=False)[0].item()
        return classify_loss(p, cfg, b, train=False)[0].item()


def cmd_grad(args):
    cfg = load_config(args.config)
    tensors, _ = safetensors_io.load(args.weights)
    weights, ignored = select_params(tensors, cfg, args.task)
    if ignored:
        print(f"grad: ignoring {len(ignored)} tensor(s) not used by task '{args.task}': {ignored[:6]}"
              + (" ..." if len(ignored) > 6 else ""), file=sys.stderr)
    batch, _ = safetensors_io.load(args.batch)
    info, grads = compute_grads(cfg, weights, batch, args.task, _DTYPES[args.dtype], args.fused_mlm)
    safetensors_io.save(args.out, grads, metadata={"format": "pt", "task": args.task, "dtype": args.dtype})
    print(json.dumps(info))


def cmd_init(args):
    cfg = load_config(args.config)
    params = init_params(cfg, args.task, args.seed, args.std, args.perturb)
    safetensors_io.save(args.out, params, metadata={"format": "pt", "task": args.task, "seed": args.seed})


def cmd_batch(args):
    cfg = load_config(args.config)
    b = make_batch(cfg, args.batch, args.seq, args.preds, args.seed, args.task)
    safetensors_io.save(args.out, b, metadata={"task": args.task, "seed": args.seed})


def _tune_malloc():
    """Keeps glibc from returning big freed blocks to the OS (and page-faulting them back in)
    every step: mmap threshold at its maximum (32 MiB), no trimming. Returns True on success."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        ok = libc.mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)
        ok = libc.mallopt(M_TRIM_THRESHOLD, 1 << 30) and ok
        return bool(ok)
    except (OSError, AttributeError):
        return False


def cmd_bench(args):
    malloc_tuned = _tune_malloc() if args.malloc_tune else False
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(args.seed)
    cfg = load_config(args.config)
    task = args.task
    p = to_torch_params(init_params(cfg, task, seed=args.seed), torch.float32)
    b = batch_to_torch(make_batch(cfg, args.batch, args.seq, args.preds, args.seed, task), task, torch.float32)
    opt = AdamWeightDecay(p, lr=args.lr)
    workspace = {} if args.mlm_impl == "fused" else None
    fwd, bwd, optm, total, losses = [], [], [], [], []
    faults = []
    for step in range(args.warmup + args.steps):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        # bf16 autocast: products (linear, matmul, bmm) on bf16 operands,
        # the rest in float32, as PyTorch's CPU mixed precision does.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            if task == "pretrain":
                loss = pretrain_loss(p, cfg, b, train=True, fused_workspace=workspace)[0]
            else:
                loss = classify_loss(p, cfg, b, train=True)[0]
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        clip_by_global_norm(p, 1.0)
        opt.step()
        for t in p.values():
            t.grad = None
        t3 = time.perf_counter()
        if step >= args.warmup:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            optm.append((t3 - t2) * 1e3)
            total.append((t3 - t0) * 1e3)
            losses.append(loss.item())
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    r = lambda x: round(x, 3)  # noqa: E731
    print(json.dumps({
        "median_ms": r(statistics.median(total)), "min_ms": r(min(total)), "max_ms": r(max(total)),
        "forward_ms": r(statistics.median(fwd)), "backward_ms": r(statistics.median(bwd)),
        "optimizer_ms": r(statistics.median(optm)), "steps": args.steps, "warmup": args.warmup,
        "threads": args.threads, "torch": torch.__version__, "task": task, "mlm_impl": args.mlm_impl,
        "autocast": args.autocast,
        "batch": args.batch, "seq": args.seq, "preds": args.preds,
        "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size, "vocab": cfg.vocab_size,
        "last_loss": r(losses[-1]) if losses else None,
        "page_faults_per_step": int(statistics.median(faults)), "malloc_tuned": malloc_tuned,
    }))


def build_parser():
    ap = argparse.ArgumentParser(prog="bert_torch.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    tasks = ("pretrain", "classify")

    g = sub.add_parser("grad", help="loss and gradients of every parameter (dropout off)")
    g.add_argument("--config", required=True)
    g.add_argument("--weights", required=True)
    g.add_argument("--batch", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--task", choices=tasks, default="pretrain")
    g.add_argument("--dtype", choices=sorted(_DTYPES), default="float64")
    g.add_argument("--fused-mlm", action="store_true",
                   help="use the buffer-reusing MLM loss (as bench does) instead of plain autograd")
    g.set_defaults(func=cmd_grad)

    i = sub.add_parser("init", help="random weights")
    i.add_argument("--config", required=True)
    i.add_argument("--out", required=True)
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("--std", type=float, default=None, help="default: config initializer_range")
    i.add_argument("--task", choices=tasks, default="pretrain")
    i.add_argument("--perturb", action="store_true",
                   help="random LayerNorm params and biases so every gradient is exercised")
    i.set_defaults(func=cmd_init)

    bt = sub.add_parser("batch", help="a random but valid batch")
    bt.add_argument("--config", required=True)
    bt.add_argument("--out", required=True)
    bt.add_argument("--batch", type=int, default=4)
    bt.add_argument("--seq", type=int, default=16)
    bt.add_argument("--preds", type=int, default=3)
    bt.add_argument("--seed", type=int, default=0)
    bt.add_argument("--task", choices=tasks, default="pretrain")
    bt.set_defaults(func=cmd_batch)

    be = sub.add_parser("bench", help="time full float32 training steps")
    be.add_argument("--config", required=True)
    be.add_argument("--batch", type=int, default=32)
    be.add_argument("--seq", type=int, default=128)
    be.add_argument("--preds", type=int, default=20)
    be.add_argument("--steps", type=int, default=10)
    be.add_argument("--warmup", type=int, default=2)
    be.add_argument("--threads", type=int, default=1)
    be.add_argument("--seed", type=int, default=0)
    be.add_argument("--lr", type=float, default=1e-4)
    be.add_argument("--task", choices=tasks, default="pretrain")
    be.add_argument("--autocast", choices=("none", "bf16"), default="none",
                    help="bf16: forward under torch.autocast('cpu', dtype=torch.bfloat16)")
    be.add_argument("--mlm-impl", choices=("fused", "autograd"), default="fused",
                    help="fused: one reused logits buffer (default); autograd: plain log_softmax")
    be.add_argument("--no-malloc-tune", dest="malloc_tune", action="store_false",
                    help="leave glibc malloc thresholds at their defaults")
    be.set_defaults(func=cmd_bench)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, OSError) as e:
        print(f"bert_torch.py {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
