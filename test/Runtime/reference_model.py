#!/usr/bin/env python3
"""A reference forward and loss of the decoders zeroc generates, in float64,
with the Python standard library only.

Written from the published model definitions, not from zeroc's kernels:
Hugging Face's GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, GemmaForCausalLM, Phi3ForCausalLM and MixtralForCausalLM
(transformers' modeling_*.py), read from a Hugging Face config.json with the Hugging Face
defaults. It is the independent side
of test/Runtime/zerorun_e2e.py's grad-check scenario: its loss must equal
zerorun's on the same weights and tokens, and its central finite
differences must equal the gradients zerorun computes with the compiled
backward (`zerorun --dump-grads`).

What zeroc's models fix beyond the configs (docs/model-dialect.md): linear
weights are [out, in] (nn.Linear, not GPT-2's Conv1D [in, out]); GPT-2 has
separate q_proj, k_proj, v_proj where Hugging Face fuses c_attn, and no
dropout; names drop the `model.` prefix. Activations here are lists of
rows, one row per token, the batch's sequences one after another.

  reference_model.py CONFIG.json WEIGHTS.safetensors TOKENS.u16 \\
      --micro-batch B --seq-len S     # prints the loss of step 1's batch
"""

import argparse
import json
import math
import struct
from operator import mul

LLAMA_LIKE = ("llama", "mistral", "qwen2", "gemma", "phi3", "mixtral")


# ----------------------------------------------------------------------------
# Files: safetensors (F32) and headerless uint16 token files.
# ----------------------------------------------------------------------------

def read_safetensors(path):
    """({name: (shape, [float])}, metadata) of an F32 safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            raise ValueError("%s: %s: dtype %s, expected F32" % (path, name,
                                                                 e["dtype"]))
        b, end = e["data_offsets"]
        data = blob[8 + n + b:8 + n + end]
        out[name] = (e["shape"], list(struct.unpack("<%df" % (len(data) // 4),
                                                    data)))
    return out, meta


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: (shape, [float])} as F32 (values rounded to f32)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        shape, values = tensors[name]
        data = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_tokens_u16(path):
    with open(path, "rb") as f:
        blob = f.read()
    return list(struct.unpack("<%dH" % (len(blob) // 2), blob))


def step_batch(tokens, batch, seq, step=0):
    """Inputs and targets ([batch * seq] each) of one rank's only micro-step
    of step `step` (docs/data-format.md): sequence k of the step is tokens
    [(step * batch + k) * seq, ... + seq + 1), its last seq the targets."""
    inputs, targets = [], []
    for k in range(batch):
        start = (step * batch + k) * seq
        window = tokens[start:start + seq + 1]
        inputs += window[:-1]
        targets += window[1:]
    return inputs, targets


# ----------------------------------------------------------------------------
# The architectures, from Hugging Face config.json.
# ----------------------------------------------------------------------------

class Config:
    def __init__(self, hf):
        self.family = hf["model_type"]
        if self.family == "gpt2":
            self.vocab = hf["vocab_size"]
            self.hidden = hf["n_embd"]
            self.layers = hf["n_layer"]
            self.heads = hf["n_head"]
            self.kv_heads = self.heads
            self.ff = hf.get("n_inner") or 4 * self.hidden
            self.eps = hf.get("layer_norm_epsilon", 1e-5)
            self.positions = hf["n_positions"]
            self.tied = hf.get("tie_word_embeddings", True)
            if hf.get("activation_function", "gelu_new") not in (
                    "gelu_new", "gelu_pytorch_tanh"):
                raise ValueError("only the tanh GELU is modelled")
        elif self.family in LLAMA_LIKE:
            f = self.family
            self.vocab = hf["vocab_size"]
            self.hidden = hf["hidden_size"]
            self.layers = hf["num_hidden_layers"]
            self.heads = hf["num_attention_heads"]
            # MixtralConfig's defaults: 8 key/value heads, eps 1e-5,
            # rope_theta 1e6.
            moe = f == "mixtral"
            self.kv_heads = hf.get("num_key_value_heads",
                                   8 if moe else self.heads)
            self.ff = hf["intermediate_size"]
            self.eps = hf.get("rms_norm_eps",
                              1e-5 if f in ("phi3", "mixtral") else 1e-6)
            self.theta = hf.get("rope_theta", 1e6 if moe else 10000.0)
            # MixtralSparseMoeBlock: num_local_experts SwiGLU experts, each
            # token to the num_experts_per_tok largest softmax
            # probabilities, renormalised.
            self.experts = hf.get("num_local_experts", 8) if moe else 0
            self.top_k = hf.get("num_experts_per_tok", 2) if moe else 0
            if moe and (hf.get("output_router_logits") or
                        hf.get("router_jitter_noise")):
                raise ValueError("the auxiliary loss and router jitter are "
                                 "not modelled")
            self.tied = hf.get("tie_word_embeddings", f == "gemma")
            if hf.get("attention_bias") or hf.get("mlp_bias"):
                raise ValueError("attention_bias / mlp_bias are not modelled")
            # Qwen2Attention: q, k and v with bias, o without.
            self.qkv_bias = f == "qwen2"
            # MistralConfig's default window is 4096; Phi3Config has none.
            if f == "mistral":
                self.window = hf.get("sliding_window", 4096)
            elif f in ("phi3", "mixtral"):
                self.window = hf.get("sliding_window")
            else:
                self.window = None
            # GemmaMLP: gelu_pytorch_tanh(gate) * up; GemmaModel scales the
            # embeddings by sqrt(hidden) in the activation dtype;
            # GemmaRMSNorm multiplies by (1 + weight) in f32.
            self.gemma = f == "gemma"
            # Phi3Attention.qkv_proj and Phi3MLP.gate_up_proj.
            self.fused = f == "phi3"
        else:
            raise ValueError("unknown model_type %r" % self.family)
        self.head_dim = hf.get("head_dim") or self.hidden // self.heads

    def parameter_shapes(self):
        """{name: shape} of every parameter, Hugging Face's names."""
        d, ff, v = self.hidden, self.ff, self.vocab
        shapes = {}
        if self.family == "gpt2":
            shapes["wte.weight"] = [v, d]
            shapes["wpe.weight"] = [self.positions, d]
            for l in range(self.layers):
                p = "h.%d." % l
                for ln in ("ln_1", "ln_2"):
                    shapes[p + ln + ".weight"] = [d]
                    shapes[p + ln + ".bias"] = [d]
                for proj in ("q_proj", "k_proj", "v_proj", "c_proj"):
                    shapes[p + "attn.%s.weight" % proj] = [d, d]
                    shapes[p + "attn.%s.bias" % proj] = [d]
                shapes[p + "mlp.c_fc.weight"] = [ff, d]
                shapes[p + "mlp.c_fc.bias"] = [ff]
                shapes[p + "mlp.c_proj.weight"] = [d, ff]
                shapes[p + "mlp.c_proj.bias"] = [d]
            shapes["ln_f.weight"] = [d]
            shapes["ln_f.bias"] = [d]
        else:
            q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
            shapes["embed_tokens.weight"] = [v, d]
            for l in range(self.layers):
                p = "layers.%d." % l
                shapes[p + "input_layernorm.weight"] = [d]
                shapes[p + "post_attention_layernorm.weight"] = [d]
                if self.fused:
                    shapes[p + "self_attn.qkv_proj.weight"] = [q + 2 * kv, d]
                else:
                    shapes[p + "self_attn.q_proj.weight"] = [q, d]
                    shapes[p + "self_attn.k_proj.weight"] = [kv, d]
                    shapes[p + "self_attn.v_proj.weight"] = [kv, d]
                if self.qkv_bias:
                    shapes[p + "self_attn.q_proj.bias"] = [q]
                    shapes[p + "self_attn.k_proj.bias"] = [kv]
                    shapes[p + "self_attn.v_proj.bias"] = [kv]
                shapes[p + "self_attn.o_proj.weight"] = [d, q]
                if self.experts:
                    # The experts' weights stacked (experts.e.w1.weight is
                    # slice e of experts.w1).
                    e, moe = self.experts, p + "block_sparse_moe."
                    shapes[moe + "gate.weight"] = [e, d]
                    shapes[moe + "experts.w1"] = [e, ff, d]
                    shapes[moe + "experts.w3"] = [e, ff, d]
                    shapes[moe + "experts.w2"] = [e, d, ff]
                elif self.fused:
                    shapes[p + "mlp.gate_up_proj.weight"] = [2 * ff, d]
                else:
                    shapes[p + "mlp.gate_proj.weight"] = [ff, d]
                    shapes[p + "mlp.up_proj.weight"] = [ff, d]
                if not self.experts:
                    shapes[p + "mlp.down_proj.weight"] = [d, ff]
            shapes["norm.weight"] = [d]
        if not self.tied:
            shapes["lm_head.weight"] = [v, d]
        return shapes

    def layer_of(self, name):
        """The block a parameter belongs to: 0 .. layers-1; -1 for the
        embeddings (everything downstream depends on them), `layers` for
        the final norm and the head."""
        parts = name.split(".")
        if parts[0] in ("h", "layers"):
            return int(parts[1])
        if name in ("wte.weight", "wpe.weight", "embed_tokens.weight"):
            return -1
        return self.layers


# ----------------------------------------------------------------------------
# Building blocks. x is a list of rows; W a list of rows ([out][in]).
# ----------------------------------------------------------------------------

def rows(values, shape):
    """A flat [out * in] list as `out` rows."""
    n = shape[-1]
    return [values[i:i + n] for i in range(0, len(values), n)]


def linear(x, w, b=None):
    """y = x W^T + b (nn.Linear)."""
    if b is None:
        return [[sum(map(mul, r, wo)) for wo in w] for r in x]
    return [[sum(map(mul, r, wo)) + bo for wo, bo in zip(w, b)] for r in x]


def layer_norm(x, g, b, eps):
    out = []
    for r in x:
        n = len(r)
        mean = sum(r) / n
        c = [v - mean for v in r]
        inv = 1.0 / math.sqrt(sum(v * v for v in c) / n + eps)
        out.append([v * inv * gi + bi for v, gi, bi in zip(c, g, b)])
    return out


def rms_norm(x, g, eps, offset=0.0):
    """LlamaRMSNorm; GemmaRMSNorm with offset 1 (scale by 1 + weight)."""
    out = []
    for r in x:
        inv = 1.0 / math.sqrt(sum(v * v for v in r) / len(r) + eps)
        out.append([v * inv * (offset + gi) for v, gi in zip(r, g)])
    return out


def f32(v):
    """v rounded to float32, as torch.tensor(v, dtype=float32)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def gelu_tanh(v):
    """GPT-2's gelu_new."""
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) *
                                      (v + 0.044715 * v * v * v)))


def silu(v):
    return v / (1.0 + math.exp(-v))


def add(x, y):
    return [[a + b for a, b in zip(r, s)] for r, s in zip(x, y)]


def rotate(x, seq, heads, head_dim, theta, positions=None):
    """Hugging Face's rotary embedding: in every head, element i pairs with
    i + head_dim/2 (rotate_half), at angle position * theta^(-2i/head_dim);
    the position of token t is t % seq, or positions[t] (position_ids)."""
    half = head_dim // 2
    freqs = [theta ** (-2.0 * i / head_dim) for i in range(half)]
    out = []
    for t, r in enumerate(x):
        pos = positions[t] if positions else t % seq
        cos = [math.cos(pos * f) for f in freqs]
        sin = [math.sin(pos * f) for f in freqs]
        o = list(r)
        for h in range(heads):
            base = h * head_dim
            for i in range(half):
                a, b = r[base + i], r[base + half + i]
                o[base + i] = a * cos[i] - b * sin[i]
                o[base + half + i] = b * cos[i] + a * sin[i]
        out.append(o)
    return out


def causal_attention(q, k, v, batch, seq, heads, kv_heads, head_dim,
                     window=None, documents=None):
    """softmax(q k^T / sqrt(head_dim)) v over the positions up to each
    query's (with a sliding window w, the w latest: Hugging Face's
    sliding_window_overlay, kv_idx > q_idx - w); query head h reads kv head
    h // (heads / kv_heads) (repeat_kv). With `documents` (per token of the
    batch, the position in its row where its document starts), only the
    keys of the query's own document (a packed-sequence mask)."""
    scale = 1.0 / math.sqrt(head_dim)
    group = heads // kv_heads
    out = [[0.0] * (heads * head_dim) for _ in range(batch * seq)]
    for s in range(batch):
        t0 = s * seq
        for h in range(heads):
            qo, ko = h * head_dim, (h // group) * head_dim
            ks = [k[t0 + j][ko:ko + head_dim] for j in range(seq)]
            vs = [v[t0 + j][ko:ko + head_dim] for j in range(seq)]
            for i in range(seq):
                first = max(0, i - window + 1) if window else 0
                if documents:
                    first = max(first, documents[t0 + i])
                keys = range(first, i + 1)
                qi = q[t0 + i][qo:qo + head_dim]
                scores = [sum(map(mul, qi, ks[j])) * scale for j in keys]
                top = max(scores)
                p = [math.exp(x - top) for x in scores]
                z = sum(p)
                row = out[t0 + i]
                for d in range(head_dim):
                    row[qo + d] = sum(pj * vs[j][d]
                                      for pj, j in zip(p, keys)) / z
    return out


def moe_block(x, gate, w1, w3, w2, top_k):
    """MixtralSparseMoeBlock: router_logits = gate(x); p = softmax (f32 in
    Hugging Face, float64 here); the top_k largest p, renormalised; the
    weighted sum of the selected experts' w2(silu(w1 v) * w3 v). w1, w3, w2
    are lists of per-expert weight matrices (rows)."""
    logits = linear(x, gate)
    out = []
    for r, lg in zip(x, logits):
        m = max(lg)
        e = [math.exp(v - m) for v in lg]
        z = sum(e)
        p = [v / z for v in e]
        # torch.topk: decreasing, ties to the lower index.
        chosen = sorted(range(len(p)), key=lambda i: (-p[i], i))[:top_k]
        total = sum(p[i] for i in chosen)
        y = [0.0] * len(r)
        for i in chosen:
            gate_act = [silu(v) for v in linear([r], w1[i])[0]]
            up = linear([r], w3[i])[0]
            down = linear([[g * u for g, u in zip(gate_act, up)]], w2[i])[0]
            weight = p[i] / total
            y = [a + weight * b for a, b in zip(y, down)]
        out.append(y)
    return out


def cross_entropy(logits, targets):
    """Mean over the counted tokens of logsumexp(logits) - logits[target];
    a target -100 is not counted (Hugging Face's label convention)."""
    total, counted = 0.0, 0
    for r, t in zip(logits, targets):
        if t == -100:
            continue
        top = max(r)
        total += top + math.log(sum(math.exp(v - top) for v in r)) - r[t]
        counted += 1
    return total / counted


# ----------------------------------------------------------------------------
# The model: embeddings, blocks and head separately, so that a caller that
# perturbs one block's parameter can start from the residual stream before
# that block.
# ----------------------------------------------------------------------------

class Model:
    def __init__(self, config, batch, seq, documents=None, positions=None):
        """documents: per token of the batch, where its document starts in
        its row (attention within documents); positions: per token its
        position (position_ids; t % seq when None)."""
        self.c, self.batch, self.seq = config, batch, seq
        self.documents, self.positions = documents, positions

    def weights(self, params, name):
        shape, values = params[name]
        if len(shape) == 3:
            # Stacked experts: one [rows][cols] matrix per expert.
            n = shape[1] * shape[2]
            return [rows(values[e * n:(e + 1) * n], shape[1:])
                    for e in range(shape[0])]
        return rows(values, shape) if len(shape) == 2 else values

    def embed(self, params, inputs):
        c = self.c
        if c.family == "gpt2":
            wte = self.weights(params, "wte.weight")
            wpe = self.weights(params, "wpe.weight")
            pos = self.positions or [t % self.seq
                                     for t in range(len(inputs))]
            return [[a + b for a, b in zip(wte[tok], wpe[pos[t]])]
                    for t, tok in enumerate(inputs)]
        table = self.weights(params, "embed_tokens.weight")
        if c.gemma:
            # GemmaTextScaledWordEmbedding: times sqrt(hidden) in the
            # weights' dtype (f32 here).
            scale = f32(math.sqrt(c.hidden))
            return [[x * scale for x in table[tok]] for tok in inputs]
        return [list(table[tok]) for tok in inputs]

    def block(self, params, l, x):
        c, w = self.c, lambda n: self.weights(params, n)
        if c.family == "gpt2":
            p = "h.%d." % l
            h = layer_norm(x, w(p + "ln_1.weight"), w(p + "ln_1.bias"), c.eps)
            q = linear(h, w(p + "attn.q_proj.weight"), w(p + "attn.q_proj.bias"))
            k = linear(h, w(p + "attn.k_proj.weight"), w(p + "attn.k_proj.bias"))
            v = linear(h, w(p + "attn.v_proj.weight"), w(p + "attn.v_proj.bias"))
            a = causal_attention(q, k, v, self.batch, self.seq, c.heads,
                                 c.kv_heads, c.head_dim,
                                 documents=self.documents)
            x = add(x, linear(a, w(p + "attn.c_proj.weight"),
                              w(p + "attn.c_proj.bias")))
            h = layer_norm(x, w(p + "ln_2.weight"), w(p + "ln_2.bias"), c.eps)
            f = linear(h, w(p + "mlp.c_fc.weight"), w(p + "mlp.c_fc.bias"))
            f = [[gelu_tanh(v) for v in r] for r in f]
            return add(x, linear(f, w(p + "mlp.c_proj.weight"),
                                 w(p + "mlp.c_proj.bias")))
        p = "layers.%d." % l
        offset = 1.0 if c.gemma else 0.0
        qw, kvw = c.heads * c.head_dim, c.kv_heads * c.head_dim
        h = rms_norm(x, w(p + "input_layernorm.weight"), c.eps, offset)
        if c.fused:
            # Phi3Attention: qkv[..., :q], then k, then v.
            qkv = linear(h, w(p + "self_attn.qkv_proj.weight"))
            q = [r[:qw] for r in qkv]
            k = [r[qw:qw + kvw] for r in qkv]
            v = [r[qw + kvw:] for r in qkv]
        else:
            bias = (lambda n: w(p + "self_attn.%s.bias" % n)) \
                if c.qkv_bias else (lambda n: None)
            q = linear(h, w(p + "self_attn.q_proj.weight"), bias("q_proj"))
            k = linear(h, w(p + "self_attn.k_proj.weight"), bias("k_proj"))
            v = linear(h, w(p + "self_attn.v_proj.weight"), bias("v_proj"))
        q = rotate(q, self.seq, c.heads, c.head_dim, c.theta, self.positions)
        k = rotate(k, self.seq, c.kv_heads, c.head_dim, c.theta,
                   self.positions)
        a = causal_attention(q, k, v, self.batch, self.seq, c.heads,
                             c.kv_heads, c.head_dim, c.window,
                             self.documents)
        x = add(x, linear(a, w(p + "self_attn.o_proj.weight")))
        h = rms_norm(x, w(p + "post_attention_layernorm.weight"), c.eps,
                     offset)
        if c.experts:
            moe = p + "block_sparse_moe."
            return add(x, moe_block(h, w(moe + "gate.weight"),
                                    w(moe + "experts.w1"),
                                    w(moe + "experts.w3"),
                                    w(moe + "experts.w2"), c.top_k))
        if c.fused:
            # Phi3MLP: gate, up = gate_up_proj(x).chunk(2, dim=-1).
            gate_up = linear(h, w(p + "mlp.gate_up_proj.weight"))
            gate = [r[:c.ff] for r in gate_up]
            up = [r[c.ff:] for r in gate_up]
        else:
            gate = linear(h, w(p + "mlp.gate_proj.weight"))
            up = linear(h, w(p + "mlp.up_proj.weight"))
        act = gelu_tanh if c.gemma else silu
        prod = [[act(g) * u for g, u in zip(gr, ur)]
                for gr, ur in zip(gate, up)]
        return add(x, linear(prod, w(p + "mlp.down_proj.weight")))

    def head(self, params, x, targets):
        c = self.c
        if c.family == "gpt2":
            h = layer_norm(x, self.weights(params, "ln_f.weight"),
                           self.weights(params, "ln_f.bias"), c.eps)
        else:
            h = rms_norm(x, self.weights(params, "norm.weight"), c.eps,
                         1.0 if c.gemma else 0.0)
        table = "lm_head.weight" if not c.tied else (
            "wte.weight" if c.family == "gpt2" else "embed_tokens.weight")
        return cross_entropy(linear(h, self.weights(params, table)), targets)

    def residuals(self, params, inputs):
        """The residual stream entering each block, and leaving the last."""
        xs = [self.embed(params, inputs)]
        for l in range(self.c.layers):
            xs.append(self.block(params, l, xs[-1]))
        return xs

    def loss(self, params, inputs, targets, start=-1, cached=None):
        """The mean cross-entropy. With `cached` (residuals() at weights
        equal to `params` in every block before `start`), the blocks before
        `start` are not recomputed."""
        if start < 0 or cached is None:
            x = self.embed(params, inputs)
            start = 0
        else:
            x = cached[start]
        for l in range(start, self.c.layers):
            x = self.block(params, l, x)
        return self.head(params, x, targets)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("weights")
    ap.add_argument("tokens")
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    args = ap.parse_args()
    with open(args.config) as f:
        config = Config(json.load(f))
    params, _ = read_safetensors(args.weights)
    inputs, targets = step_batch(read_tokens_u16(args.tokens),
                                 args.micro_batch, args.seq_len)
    model = Model(config, args.micro_batch, args.seq_len)
    print("%.17g" % model.loss(params, inputs, targets))


if __name__ == "__main__":
    main()
