#!/usr/bin/env python3
"""Tokenised prompt/answer pairs -> a zerorun token file and its loss mask.

  scripts/sft_to_tokens.py PAIRS.jsonl -o OUT [--format ztok|megatron]
                           [--eos ID] [--width 2|4]

PAIRS.jsonl holds one JSON object per line, {"prompt": [ids], "answer":
[ids]} (blank lines are skipped). The examples are written back to back in
file order, each as its prompt's tokens, then its answer's, then --eos if
given. The loss mask OUT.mask (docs/data-format.md, "Fine-tuning data") has
one byte per token: 0 on the prompt, 1 on the answer and its EOS, so that
`zerorun --data OUT --loss-mask` trains on the answers only.

--format ztok (the default) writes zeroc's ZTOK file OUT. --format megatron
writes a Megatron-LM indexed dataset OUT.bin + OUT.idx (one sequence and one
document per example, as IndexedDatasetBuilder.add_item + end_document do)
and OUT.bin.mask; `--no-cross-doc-loss` then also knows where each example
starts. --width is the bytes per token (default: 2 if every id fits in
uint16, else 4).

Only the standard library. Errors name the line and stop with exit code 1.
"""
import argparse
import json
import struct
import sys
from array import array

ZTOK_VERSION = 1
MEGATRON_DTYPE = {2: (8, "H"), 4: (4, "i")}  # width -> (DType code, array)


def fail(msg):
    print("sft_to_tokens.py: error: " + msg, file=sys.stderr)
    sys.exit(1)


def little_endian(typecode, values):
    a = array(typecode, values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def read_pairs(path):
    """[(prompt ids, answer ids)], checked."""
    pairs = []
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = "%s:%d" % (path, n)
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                fail("%s: not JSON: %s" % (where, e.msg))
            if not isinstance(obj, dict):
                fail("%s: expected an object {\"prompt\": [ids], \"answer\": "
                     "[ids]}" % where)
            ex = []
            for key in ("prompt", "answer"):
                ids = obj.get(key)
                if not isinstance(ids, list) or not all(
                        isinstance(t, int) and not isinstance(t, bool)
                        for t in ids):
                    fail("%s: \"%s\" must be a list of token ids (integers)"
                         % (where, key))
                bad = [t for t in ids if t < 0 or t >= 2 ** 32]
                if bad:
                    fail("%s: \"%s\" has token id %d, outside [0, 2^32)"
                         % (where, key, bad[0]))
                ex.append(ids)
            extra = sorted(set(obj) - {"prompt", "answer"})
            if extra:
                fail("%s: unknown key \"%s\" (expected prompt and answer)"
                     % (where, extra[0]))
            if not ex[1]:
                fail("%s: the answer is empty: nothing to train on" % where)
            pairs.append((ex[0], ex[1]))
    if not pairs:
        fail("%s: no examples" % path)
    return pairs


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="prompt/answer JSONL -> token file + loss mask")
    ap.add_argument("pairs")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--format", choices=("ztok", "megatron"), default="ztok")
    ap.add_argument("--eos", type=int, help="a token id ending each answer")
    ap.add_argument("--width", type=int, choices=(2, 4))
    args = ap.parse_args(argv)

    pairs = read_pairs(args.pairs)
    tokens, mask, lengths = [], [], []
    for prompt, answer in pairs:
        answer = answer + ([args.eos] if args.eos is not None else [])
        tokens += prompt + answer
        mask += [0] * len(prompt) + [1] * len(answer)
        lengths.append(len(prompt) + len(answer))
    top = max(tokens)
    width = args.width or (2 if top < 2 ** 16 else 4)
    if top >= 2 ** (8 * width) or (args.format == "megatron" and width == 4
                                   and top >= 2 ** 31):
        fail("token id %d does not fit in %d bytes" % (top, width))
    code = "H" if width == 2 else "I"

    if args.format == "ztok":
        token_path = args.output
        with open(token_path, "wb") as f:
            f.write(b"ZTOK" + struct.pack("<HH", ZTOK_VERSION, width))
            f.write(little_endian(code, tokens))
    else:
        dtype, typecode = MEGATRON_DTYPE[width]
        token_path = args.output + ".bin"
        with open(token_path, "wb") as f:
            f.write(little_endian(typecode, tokens))
        pointers, at = [], 0
        for n in lengths:
            pointers.append(at)
            at += n * width
        with open(args.output + ".idx", "wb") as f:
            f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) +
                    struct.pack("<B", dtype) +
                    struct.pack("<QQ", len(lengths), len(lengths) + 1))
            f.write(little_endian("i", lengths))
            f.write(little_endian("q", pointers))
            f.write(little_endian("q", range(len(lengths) + 1)))
    with open(token_path + ".mask", "wb") as f:
        f.write(bytes(mask))
    print("%s: %d examples, %d tokens (%d in the loss), %d-byte ids; mask %s"
          % (token_path, len(pairs), len(tokens), sum(mask), width,
             token_path + ".mask"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
