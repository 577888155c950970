#!/usr/bin/env python3
"""Writes the token files of test/Runtime/DataTest.cpp, in the layouts the
other projects' writers produce (read, not copied):

- llm.c, dev/data/data_common.py `write_datafile`: 256 little-endian int32
  (magic, version, token count, zeros), then the tokens (uint16 for
  "gpt-2": magic 20240520 version 1; uint32 for "llama-3": 20240801, 7).
- nanoGPT, data/*/prepare.py: `np.array(ids, dtype=np.uint16).tofile(...)`,
  no header.
- Megatron-LM, megatron/core/datasets/indexed_dataset.py
  `IndexedDatasetBuilder` + `_IndexWriter`: PREFIX.bin holds the tokens of
  every sequence back to back; PREFIX.idx is b"MMIDIDX\\x00\\x00", uint64
  version 1, uint8 dtype code, uint64 sequence count, uint64 document count,
  int32 lengths, int64 byte pointers, int64 document indices (a leading 0,
  then the sequence count after each document).

Plus corrupt variants, one defect each. Only the standard library, so that
anyone can rerun it: `python3 make_token_files.py` in this directory
rewrites every file (the output is deterministic).

Token i of every dataset is token(i, modulus, mult, add) below; DataTest.cpp
recomputes the same formula.
"""
import os
import struct
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))


def token(i, modulus, mult, add):
    return (i * mult + add) % modulus


def gpt2_tokens(n):
    return [token(i, 50257, 7919, 11) for i in range(n)]


def llama3_tokens(n):
    return [token(i, 128256, 104729, 5) for i in range(n)]


def small_tokens(n):
    return [token(i, 1000, 31, 7) for i in range(n)]


def le(typecode, values):
    a = array(typecode, values)
    if struct.pack("=H", 1) != struct.pack("<H", 1):
        a.byteswap()
    return a.tobytes()


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


# --- llm.c ------------------------------------------------------------------

def llmc_header(magic, version, count):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, count
    return le("i", header)


def llmc_file(tokens, model="gpt-2", count=None, version=None):
    magic, default_version, code = {
        "gpt-2": (20240520, 1, "H"),
        "llama-3": (20240801, 7, "I"),
    }[model]
    header = llmc_header(magic, default_version if version is None else version,
                         len(tokens) if count is None else count)
    return header + le(code, tokens)


# --- Megatron ---------------------------------------------------------------

DTYPE_CODES = {"uint8": (1, "B"), "int8": (2, "b"), "int16": (3, "h"),
               "int32": (4, "i"), "int64": (5, "q"), "float64": (6, "d"),
               "float32": (7, "f"), "uint16": (8, "H")}


def megatron_dataset(documents, dtype):
    """documents: a list of documents, each a list of sequences (token lists),
    added as IndexedDatasetBuilder.add_item per sequence and end_document per
    document. Returns (bin bytes, idx fields)."""
    code, typecode = DTYPE_CODES[dtype]
    size = array(typecode).itemsize
    data, lengths, doc_indices = b"", [], [0]
    for doc in documents:
        for seq in doc:
            data += le(typecode, seq)
            lengths.append(len(seq))
        doc_indices.append(len(lengths))
    pointers, at = [], 0
    for n in lengths:
        pointers.append(at)
        at += n * size
    return data, dict(code=code, lengths=lengths, pointers=pointers,
                      doc_indices=doc_indices)


def megatron_index(code, lengths, pointers, doc_indices, magic=b"MMIDIDX\x00\x00",
                   version=1):
    return (magic + struct.pack("<Q", version) + struct.pack("<B", code) +
            struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(doc_indices)) +
            le("i", lengths) + le("q", pointers) + le("q", doc_indices))


def write_megatron(prefix, data, index):
    write(prefix + ".bin", data)
    write(prefix + ".idx", index)


def split(tokens, doc_shapes):
    """Cuts `tokens` into documents of sequences of the given lengths."""
    docs, at = [], 0
    for shape in doc_shapes:
        doc = []
        for n in shape:
            doc.append(tokens[at:at + n])
            at += n
        docs.append(doc)
    assert at == len(tokens)
    return docs


# Four documents (the third empty), seven sequences, 60 tokens.
MEGATRON_SHAPES = [[5, 7], [10, 3], [], [20, 4, 11]]


def main():
    write("llmc-gpt2.bin", llmc_file(gpt2_tokens(300)))
    write("llmc-llama3.bin", llmc_file(llama3_tokens(200), "llama-3"))
    write("nanogpt-train.bin", le("H", gpt2_tokens(300)))

    data, f = megatron_dataset(split(small_tokens(60), MEGATRON_SHAPES), "uint16")
    write_megatron("megatron-uint16", data, megatron_index(**f))
    data32, f32 = megatron_dataset(split(small_tokens(60), MEGATRON_SHAPES), "int32")
    write_megatron("megatron-int32", data32, megatron_index(**f32))

    # Corrupt llm.c files.
    write("llmc-bad-version.bin", llmc_file(gpt2_tokens(300), version=2))
    write("llmc-count-too-large.bin", llmc_file(gpt2_tokens(300), count=400))
    write("llmc-truncated.bin", llmc_file(gpt2_tokens(300))[:512])
    write("llmc-renamed.u16", llmc_file(gpt2_tokens(300)))

    # Corrupt Megatron datasets: the uint16 one with one defect each.
    write_megatron("megatron-bad-magic", data,
                   megatron_index(**f, magic=b"MMIDIDY\x00\x00"))
    write_megatron("megatron-bad-version", data, megatron_index(**f, version=2))
    write_megatron("megatron-truncated", data, megatron_index(**f)[:60])
    write_megatron("megatron-short-bin", data[:-4], megatron_index(**f))
    write_megatron("megatron-float", data, megatron_index(**dict(f, code=7)))
    bad_docs = dict(f, doc_indices=f["doc_indices"][:-1] + [5])
    write_megatron("megatron-bad-docs", data, megatron_index(**bad_docs))
    bad_ptr = dict(f, pointers=f["pointers"][:3] + [f["pointers"][3] + 2] +
                   f["pointers"][4:])
    write_megatron("megatron-bad-pointer", data, megatron_index(**bad_ptr))

    # Headerless trouble.
    write("nanogpt-odd.bin", le("H", gpt2_tokens(150)) + b"\x07")
    write("uint32-named.bin", le("I", small_tokens(100)))
    write("unknown.tok", b"GPT2" + le("H", gpt2_tokens(20)))


if __name__ == "__main__":
    main()
