"""Writes a copy of a GGUF file with every tensor dequantized to F32 and the metadata unchanged (general.file_type
set to ALL_F32), with the PyPI `gguf` package: the same model without quantization error, e.g. for
`mk perplexity` on SmolLM2 Q4_1 against its F32 dequantization. Usage: dequantize_gguf.py IN.gguf OUT.gguf"""
import sys

import gguf
import numpy as np


def main(src, dst):
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # the writer writes the header and the architecture itself
        if key == "general.file_type":
            w.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), field.types[0], sub)
    for t in r.tensors:
        # dequantize gives numpy shape (rows, cols) = the GGUF dims reversed, which add_tensor records as is.
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, data.reshape([int(d) for d in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{dst}: {len(r.tensors)} tensors as F32")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
