"""Test helper: another quantisation of a GGUF file (its tensors dequantised and quantised again with the
``gguf`` package; metadata copied, ``general.file_type`` set to the new type)."""

from __future__ import annotations

from pathlib import Path

FILE_TYPES = {"Q8_0": 7, "Q5_0": 8, "F16": 1}  # llama.cpp's LLAMA_FTYPE_MOSTLY_* numbers


def requantize(source: Path, target: Path, qtype: str = "Q8_0") -> Path:
    import gguf
    from gguf.quants import dequantize, quantize

    new_type = gguf.GGMLQuantizationType[qtype]
    reader = gguf.GGUFReader(source)
    architecture = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(target, architecture)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = FILE_TYPES[qtype] if field.name == "general.file_type" else field.contents()
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    float_types = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
    for tensor in reader.tensors:
        if tensor.tensor_type in float_types:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
            continue
        values = dequantize(tensor.data, tensor.tensor_type)
        writer.add_tensor(tensor.name, quantize(values, new_type), raw_dtype=new_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target
