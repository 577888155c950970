#!/usr/bin/env python3
"""zerorun against transformers on real Hugging Face checkpoints.

Live (torch, transformers and safetensors installed):

    hf_check.py --zeroc build/bin/zeroc --zerorun build/bin/zerorun \\
        --work /tmp/hf [--write-golden test/Runtime/Inputs/hf]

creates small random GPT-2, Llama, Mistral, Qwen2, Gemma, Phi-3 and Mixtral models
(and Mixtral with its auxiliary load-balancing loss, output_router_logits: the
reference is then MixtralForCausalLM's loss, cross-entropy plus
router_aux_loss_coef * aux_loss) with transformers (f32 and bf16), saves them with save_pretrained (safetensors), and for each:

1. compiles the saved config.json with zeroc (stage 0, one rank) and runs
   zerorun's first forward from the saved weights on fixed tokens
   (`--init-from DIR --dump-grads`, which prints the loss);
2. compares that loss with transformers' on the same tokens: relative
   1e-5 in f32, 1e-2 in bf16 (every activation rounded to bf16, in a
   different order of operations than torch's);
3. runs `zerorun --init-from DIR --steps 0 --checkpoint-dir` and
   `zeroc consolidate --format hf`, checks that the output has the same
   tensor names and bytes as the saved model and the same config, and that
   transformers loads it (AutoModelForCausalLM.from_pretrained) to the same
   loss. The same model saved in shards (max_shard_size 8KB, with
   model.safetensors.index.json) gives zerorun the same loss.

--write-golden copies each saved model, the tokens and the losses to
test/Runtime/Inputs/hf/<model>-<dtype>/ (expected.json).

Golden (CI; the standard library only):

    hf_check.py --zeroc ... --zerorun ... --work DIR --golden test/Runtime/Inputs/hf

runs steps 1 and 3 on the checked-in models and compares the loss with the
transformers loss recorded in expected.json, within the same tolerances.

Without torch, the live mode exits 77 (ctest's skip code).
"""

import argparse
import json
import math
import os
import shlex
import shutil
import struct
import subprocess
import sys

MICRO_BATCH = 2
SEQ_LEN = 16
# Relative tolerances of zerorun's loss against transformers'.
TOLERANCE = {"f32": 1e-5, "bf16": 1e-2}
SKIP = 77


def safetensors_contents(path):
    """name -> (dtype, shape, raw bytes) of a file, an index or a directory."""
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        path = index if os.path.exists(index) else os.path.join(path, "model.safetensors")
    if path.endswith(".json"):
        with open(path) as f:
            weight_map = json.load(f)["weight_map"]
        out = {}
        for shard in sorted(set(weight_map.values())):
            out.update(safetensors_contents(os.path.join(os.path.dirname(path), shard)))
        return out
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    return {k: (v["dtype"], v["shape"], data[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in header.items()}


def run(cmd, cwd=None):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit("FAILED: %s\n%s" % (" ".join(cmd), p.stdout))
    return p.stdout


def write_tokens(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<%dI" % len(tokens), *tokens))


def ds_config(path, dtype, stage=0, micro_batch=MICRO_BATCH):
    cfg = {"train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0},
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}}
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    with open(path, "w") as f:
        json.dump(cfg, f)


def round_trip(args, name, plan, model_dir, tokens_path, work, ranks=1, consolidate=()):
    """zerorun --init-from --steps 0 with a checkpoint, then consolidate
    --format hf: the same names, dtypes, shapes, bytes and config.json."""
    ckpt = os.path.join(work, "ckpt%d" % ranks)
    back = os.path.join(work, "consolidated%d" % ranks)
    shutil.rmtree(ckpt, ignore_errors=True)
    shutil.rmtree(back, ignore_errors=True)
    cmd = [args.zerorun, plan, "--data", tokens_path, "--init-from", model_dir, "--steps", "0",
           "--checkpoint-dir", ckpt, "--plain"]
    if ranks > 1:
        cmd = shlex.split(args.mpirun) + ["-np", str(ranks)] + cmd
    run(cmd)
    run([args.zeroc, "consolidate", ckpt, "--format", "hf", "-o", back] + list(consolidate))
    original, written = safetensors_contents(model_dir), safetensors_contents(back)
    if sorted(original) != sorted(written):
        sys.exit("%s: consolidate --format hf names differ: %s" % (name, sorted(set(original) ^ set(written))))
    for t in original:
        if original[t][:2] != written[t][:2]:
            sys.exit("%s: '%s' is %s in the model, %s after the round trip" % (name, t, original[t][:2], written[t][:2]))
        if original[t][2] != written[t][2]:
            sys.exit("%s: '%s' has other bytes after the round trip" % (name, t))
    with open(os.path.join(model_dir, "config.json")) as f:
        config_in = json.load(f)
    with open(os.path.join(back, "config.json")) as f:
        config_out = json.load(f)
    if config_in != config_out:
        sys.exit("%s: config.json differs after the round trip:\n%s\n%s" % (name, config_in, config_out))
    shards = len([f for f in os.listdir(back) if f.endswith(".safetensors")])
    print("%s: round trip on %d rank(s): %d tensors in %d file(s), same names, shapes, dtypes and bytes; "
          "same config.json" % (name, ranks, len(original), shards))
    return back


def zerorun_checks(args, name, model_dir, tokens_path, dtype, work):
    """Steps 1 and 3: zerorun's loss from the HF files, and the round trip
    (also at stage 3 on 2 ranks, each reading its slices, with --mpirun).
    Returns the loss and the consolidated directory."""
    ds = os.path.join(work, "ds.json")
    ds_config(ds, dtype)
    plan = os.path.join(work, "plan.json")
    run([args.zeroc, os.path.join(model_dir, "config.json"), "--seq-len", str(SEQ_LEN),
         "--config", ds, "--world-size", "1", "--quiet", "-o", plan])
    out = run([args.zerorun, plan, "--data", tokens_path, "--init-from", model_dir,
               "--dump-grads", os.path.join(work, "grads.safetensors")])
    loss = float(out.split(" loss ")[1].split(":")[0])

    backs = [round_trip(args, name, plan, model_dir, tokens_path, work)]
    if args.mpirun:
        ds3 = os.path.join(work, "ds3.json")
        ds_config(ds3, dtype, stage=3, micro_batch=1)
        plan3 = os.path.join(work, "plan3.json")
        run([args.zeroc, os.path.join(model_dir, "config.json"), "--seq-len", str(SEQ_LEN),
             "--config", ds3, "--world-size", "2", "--quiet", "-o", plan3])
        # Sharded output: several files and the index.
        backs.append(round_trip(args, name, plan3, model_dir, tokens_path, work, ranks=2,
                                consolidate=["--max-shard-size", "8KB"]))
    return loss, backs


def check_loss(name, dtype, zerorun_loss, reference):
    rel = abs(zerorun_loss - reference) / abs(reference)
    ok = rel <= TOLERANCE[dtype]
    print("%s: zerorun loss %.9g, transformers %.9g, relative difference %.2e (tolerance %.0e): %s"
          % (name, zerorun_loss, reference, rel, TOLERANCE[dtype], "ok" if ok else "FAIL"))
    return ok


def golden(args):
    ok = True
    names = sorted(d for d in os.listdir(args.golden) if os.path.isdir(os.path.join(args.golden, d)))
    if not names:
        sys.exit("no golden models in " + args.golden)
    for name in names:
        src = os.path.join(args.golden, name)
        with open(os.path.join(src, "expected.json")) as f:
            expected = json.load(f)
        work = os.path.join(args.work, name)
        os.makedirs(work, exist_ok=True)
        loss, _ = zerorun_checks(args, name, src, os.path.join(src, "tokens.u32"), expected["dtype"], work)
        ok &= check_loss(name, expected["dtype"], loss, expected["loss_transformers"])
    print("%d passed, %d failed" % (len(names) if ok else 0, 0 if ok else 1))
    return 0 if ok else 1


def live(args):
    try:
        import torch
        import transformers
        import transformers as tf
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print("skipped: %s (the live check needs torch and transformers)" % e)
        return SKIP
    torch.manual_seed(0)
    vocab = 64
    small = dict(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                 rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=0)
    makers = {
        "gpt2": lambda: tf.GPT2Config(vocab_size=vocab, n_positions=32, n_embd=16, n_layer=2,
                                      n_head=4, activation_function="gelu_new",
                                      bos_token_id=0, eos_token_id=0),
        "llama": lambda: tf.LlamaConfig(tie_word_embeddings=False, **small),
        "mistral": lambda: tf.MistralConfig(sliding_window=6, **small),
        "qwen2": lambda: tf.Qwen2Config(tie_word_embeddings=True, use_sliding_window=False,
                                        **small),
        "gemma": lambda: tf.GemmaConfig(head_dim=8, hidden_act="gelu_pytorch_tanh",
                                        hidden_activation="gelu_pytorch_tanh", **small),
        "phi3": lambda: tf.Phi3Config(sliding_window=5, tie_word_embeddings=False,
                                      pad_token_id=0, **small),
        # save_pretrained writes the published per-expert layout
        # (block_sparse_moe.experts.E.w1/w2/w3.weight), not transformers 5's
        # in-memory fused experts.gate_up_proj. Intermediate size 8 keeps
        # the golden files small.
        "mixtral": lambda: tf.MixtralConfig(num_local_experts=4, num_experts_per_tok=2,
                                            **dict(small, intermediate_size=8)),
        # With the auxiliary load-balancing loss (output_router_logits):
        # MixtralForCausalLM adds router_aux_loss_coef times
        # load_balancing_loss_func of every layer's router logits; a large
        # coefficient makes the term a tenth of the loss.
        "mixtral_aux": lambda: tf.MixtralConfig(
            num_local_experts=4, num_experts_per_tok=2, output_router_logits=True,
            router_aux_loss_coef=0.5, **dict(small, intermediate_size=8)),
    }
    configs = {}
    for arch in args.archs.split(","):
        if arch not in makers:
            sys.exit("--archs: unknown architecture %r (known: %s)" % (arch, ", ".join(makers)))
        configs[arch] = makers[arch]()
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (MICRO_BATCH * SEQ_LEN + 1,), generator=g).tolist()
    batch = torch.tensor([tokens[k * SEQ_LEN:k * SEQ_LEN + SEQ_LEN + 1] for k in range(MICRO_BATCH)])

    def hf_loss(model):
        with torch.no_grad():
            out = model(batch[:, :-1])
            logits = out.logits.float()
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
            # The loss MixtralForCausalLM returns with labels: the
            # cross-entropy plus router_aux_loss_coef * aux_loss.
            if getattr(model.config, "output_router_logits", False):
                loss = loss + model.config.router_aux_loss_coef * out.aux_loss.float()
            return loss.item()

    ok = True
    count = 0
    for arch, config in configs.items():
        for dtype in ("f32", "bf16"):
            name = "%s-%s" % (arch, dtype)
            work = os.path.join(args.work, name)
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            torch.manual_seed(2)
            model = AutoModelForCausalLM.from_config(config)
            # Random norms and biases too, and weights large enough that
            # the loss is far from log(vocab).
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.2)
            model.eval()
            if dtype == "bf16":
                model = model.to(torch.bfloat16)
            model_dir = os.path.join(work, "model")
            model.save_pretrained(model_dir, safe_serialization=True)
            # The reference is the saved model as transformers loads it
            # (buffers such as Llama's rotary inv_freq are recomputed on
            # loading, not saved).
            reference = hf_loss(AutoModelForCausalLM.from_pretrained(model_dir).eval())
            tokens_path = os.path.join(work, "tokens.u32")
            write_tokens(tokens_path, tokens)
            loss, backs = zerorun_checks(args, name, model_dir, tokens_path, dtype, work)
            ok &= check_loss(name, dtype, loss, reference)
            # The same weights as transformers shards them (an index and
            # several files) give zerorun the same loss.
            sharded_dir = os.path.join(work, "model-sharded")
            model.save_pretrained(sharded_dir, safe_serialization=True, max_shard_size="8KB")
            shards = len([f for f in os.listdir(sharded_dir) if f.endswith(".safetensors")])
            out = run([args.zerorun, os.path.join(work, "plan.json"), "--data", tokens_path,
                       "--init-from", sharded_dir,
                       "--dump-grads", os.path.join(work, "grads-sharded.safetensors")])
            sharded_loss = float(out.split(" loss ")[1].split(":")[0])
            print("%s: from %d shards and the index save_pretrained wrote: loss %.9g (%s)"
                  % (name, shards, sharded_loss, "same" if sharded_loss == loss else "DIFFERENT"))
            ok &= sharded_loss == loss and shards > 1
            for back in backs:
                reloaded = AutoModelForCausalLM.from_pretrained(back).eval()
                reloaded_loss = hf_loss(reloaded)
                same = reloaded_loss == reference
                print("%s: transformers loads %s: loss %.9g (%s)"
                      % (name, back, reloaded_loss, "same" if same else "DIFFERENT"))
                ok &= same
            count += 1
            if args.write_golden:
                dst = os.path.join(args.write_golden, name)
                shutil.rmtree(dst, ignore_errors=True)
                os.makedirs(dst)
                for f in os.listdir(model_dir):
                    shutil.copy(os.path.join(model_dir, f), dst)
                shutil.copy(tokens_path, dst)
                with open(os.path.join(dst, "expected.json"), "w") as f:
                    json.dump({"dtype": dtype, "micro_batch": MICRO_BATCH, "seq_len": SEQ_LEN,
                               "loss_transformers": reference, "loss_zerorun_when_written": loss,
                               "torch": torch.__version__, "transformers": transformers.__version__},
                              f, indent=1)
                    f.write("\n")
    print("%d passed, %d failed" % (count if ok else 0, 0 if ok else 1))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zeroc", required=True)
    ap.add_argument("--zerorun", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--golden", help="check the checked-in models (no torch needed)")
    ap.add_argument("--write-golden", help="live: write the models and losses here")
    ap.add_argument("--mpirun", help="also round-trip at stage 3 on 2 ranks with this mpirun")
    ap.add_argument("--archs", default="gpt2,llama,mistral,qwen2,gemma,phi3,mixtral,mixtral_aux",
                    help="live: the architectures (gpt2, llama, mistral, qwen2, gemma, phi3, "
                    "mixtral, mixtral_aux)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    return golden(args) if args.golden else live(args)


if __name__ == "__main__":
    sys.exit(main())
