#!/usr/bin/env python3
"""Tests of scripts/sft_to_tokens.py: the files it writes from
Inputs/data/sft-pairs.jsonl are the ones checked in there (which
DataTest.cpp, `SftConverterOutputReadsBack`, reads with zerorun's loader),
their bytes are the layouts of docs/data-format.md decoded here
independently, and every error names the line and exits 1.

  sft_to_tokens_test.py WORK_DIR
"""
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "sft_to_tokens.py")
INPUTS = os.path.join(HERE, "Inputs", "data")
PAIRS = os.path.join(INPUTS, "sft-pairs.jsonl")

failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def convert(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)

    # ZTOK: the prompt's tokens 0, the answer's 1, examples back to back.
    out = os.path.join(work, "sft-ztok.bin")
    r = convert(PAIRS, "-o", out)
    check(r.returncode == 0, "ztok conversion runs: " + r.stderr.strip())
    data = read(out)
    check(data[:8] == b"ZTOK\x01\x00\x02\x00", "ZTOK header, version 1, width 2")
    tokens = list(struct.unpack("<%dH" % ((len(data) - 8) // 2), data[8:]))
    check(tokens == [10, 11, 12, 20, 21, 13, 22, 23, 24, 25], "ZTOK tokens")
    check(read(out + ".mask") == bytes([0, 0, 0, 1, 1, 0, 1, 1, 1, 1]),
          "ZTOK mask")
    for name in ("sft-ztok.bin", "sft-ztok.bin.mask"):
        check(read(os.path.join(work, name)) ==
              read(os.path.join(INPUTS, name)), name + " is the checked-in one")

    # Megatron with an EOS: one sequence and one document per example.
    prefix = os.path.join(work, "sft-megatron")
    r = convert(PAIRS, "-o", prefix, "--format", "megatron", "--eos", "3")
    check(r.returncode == 0, "megatron conversion runs: " + r.stderr.strip())
    idx = read(prefix + ".idx")
    check(idx[:9] == b"MMIDIDX\x00\x00", "idx magic")
    version, code, n, d = struct.unpack("<QBQQ", idx[9:34])
    check((version, code, n, d) == (1, 8, 3, 4),
          "idx version 1, uint16 (8), 3 sequences, 4 document indices")
    lengths = struct.unpack("<3i", idx[34:46])
    pointers = struct.unpack("<3q", idx[46:70])
    docs = struct.unpack("<4q", idx[70:102])
    check(len(idx) == 102, "idx size")
    check(lengths == (6, 5, 2), "sequence lengths (with the EOS)")
    check(pointers == (0, 12, 22), "byte pointers")
    check(docs == (0, 1, 2, 3), "document indices")
    check(struct.unpack("<13H", read(prefix + ".bin")) ==
          (10, 11, 12, 20, 21, 3, 13, 22, 23, 24, 3, 25, 3), "megatron tokens")
    check(read(prefix + ".bin.mask") ==
          bytes([0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1]), "megatron mask")
    for name in ("sft-megatron.bin", "sft-megatron.idx",
                 "sft-megatron.bin.mask"):
        check(read(os.path.join(work, name)) ==
              read(os.path.join(INPUTS, name)), name + " is the checked-in one")

    # Wide ids: width 4.
    wide = os.path.join(work, "wide.jsonl")
    with open(wide, "w") as f:
        f.write('{"prompt": [70000], "answer": [1]}\n')
    r = convert(wide, "-o", os.path.join(work, "wide.bin"))
    check(r.returncode == 0 and
          read(os.path.join(work, "wide.bin"))[:8] == b"ZTOK\x01\x00\x04\x00",
          "an id above 65535 gives 4-byte tokens")

    # Errors.
    cases = [
        ('{"prompt": [1], "answer": [2]}\nnot json\n', "bad.jsonl:2: not JSON"),
        ('{"prompt": [1]}\n',
         'bad.jsonl:1: "answer" must be a list of token ids (integers)'),
        ('{"prompt": [1], "answer": ["a"]}\n',
         'bad.jsonl:1: "answer" must be a list of token ids'),
        ('{"prompt": [-1], "answer": [2]}\n',
         'bad.jsonl:1: "prompt" has token id -1, outside [0, 2^32)'),
        ('{"prompt": [1], "answer": []}\n',
         "bad.jsonl:1: the answer is empty: nothing to train on"),
        ('{"prompt": [1], "answer": [2], "labels": [3]}\n',
         'bad.jsonl:1: unknown key "labels" (expected prompt and answer)'),
        ('[1, 2]\n', 'bad.jsonl:1: expected an object'),
        ('\n', "bad.jsonl: no examples"),
    ]
    bad = os.path.join(work, "bad.jsonl")
    for text, message in cases:
        with open(bad, "w") as f:
            f.write(text)
        r = convert(bad, "-o", os.path.join(work, "bad.bin"))
        check(r.returncode == 1 and message in r.stderr,
              "error %r (got %r)" % (message, r.stderr.strip()))
    r = convert(wide, "-o", os.path.join(work, "narrow.bin"), "--width", "2")
    check(r.returncode == 1 and "token id 70000 does not fit in 2 bytes"
          in r.stderr, "error: an id too wide for --width 2")
    r = convert(os.path.join(work, "missing.jsonl"), "-o", bad)
    check(r.returncode == 1 and "missing.jsonl: No such file or directory"
          in r.stderr, "error: a missing input")

    if failures:
        print("FAILED: %d check(s)" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
