"""Where a prefill's KV cache (``present.*``) lives between the passes that continue from it.

``present.<kind>.<layer>``: (batch, kv_heads, length, head_dim) per layer, by far the largest output of a
pass (for a 1B model, ~40 MB per 100-token prompt in fp16). Option blocks and shared prefixes feed it back
as the next pass's ``past_key_values.*``, for some of its rows.

- :class:`HostCache`: numpy arrays, as ``session.run`` returns them (CPU).
- :class:`DeviceCache`: ONNX Runtime values left where the session computed them (IOBinding; the GPU on
  CUDA). Rows are selected on the device by a one-node ``Gather`` graph run by the same provider, so the
  cache never crosses to the host between passes; a whole batch is fed back as it is.
Both answer ``rows(selection) -> {past input name: value}`` and ``host() -> {present name: array}`` (for
the one-row-per-continuation path, which also cuts the cache's last column).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from sago_fast.runtime.decode import past_input_names

Rows = slice | np.ndarray  # a contiguous range, or row indices (repeats allowed)


class KVCache(Protocol):
    def rows(self, rows: Rows) -> dict[str, Any]: ...

    def host(self) -> dict[str, np.ndarray]: ...


def present_names(outputs: dict[str, Any]) -> list[str]:
    return [name for name in outputs if name.startswith("present.")]


@dataclass(frozen=True)
class HostCache:
    presents: dict[str, np.ndarray]  # present name -> (batch, kv_heads, length, head_dim)

    def rows(self, rows: Rows) -> dict[str, Any]:
        names = list(self.presents)
        return {
            past: np.ascontiguousarray(self.presents[name][rows])  # a slice of rows is a view already
            for name, past in zip(names, past_input_names(names), strict=True)
        }

    def host(self) -> dict[str, np.ndarray]:
        return self.presents


class RowGather:
    """``data[indices]`` along the first axis, on ``device``, for ONNX Runtime values: a one-node graph per
    element type, run with IOBinding (input and output stay on the device; only the indices travel)."""

    def __init__(self, providers: list[Any], device: str) -> None:
        self.providers, self.device = providers, device
        self._sessions: dict[int, Any] = {}

    def _session(self, elem_type: int) -> Any:
        if elem_type not in self._sessions:
            import onnxruntime as ort
            from onnx import TensorProto, helper

            node = helper.make_node("Gather", ["data", "indices"], ["out"], axis=0)
            graph = helper.make_graph(
                [node],
                "rows",
                [
                    helper.make_tensor_value_info("data", elem_type, ["n", "h", "t", "d"]),
                    helper.make_tensor_value_info("indices", TensorProto.INT64, ["k"]),
                ],
                [helper.make_tensor_value_info("out", elem_type, ["k", "h", "t", "d"])],
            )
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
            self._sessions[elem_type] = ort.InferenceSession(
                model.SerializeToString(), providers=self.providers
            )
        return self._sessions[elem_type]

    def __call__(self, value: Any, indices: np.ndarray) -> Any:
        from onnx.helper import np_dtype_to_tensor_dtype

        session = self._session(np_dtype_to_tensor_dtype(np.dtype(_dtype(value))))
        binding = session.io_binding()
        binding.bind_ortvalue_input("data", value)
        binding.bind_cpu_input("indices", np.ascontiguousarray(indices, dtype=np.int64))
        binding.bind_output("out", self.device, 0)
        session.run_with_iobinding(binding)
        return binding.get_outputs()[0]


_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def _dtype(value: Any) -> type:
    return _ORT_TYPES[value.data_type()]


@dataclass(frozen=True)
class DeviceCache:
    values: dict[str, Any]  # present name -> OrtValue (batch, kv_heads, length, head_dim) on the device
    gather: RowGather

    @property
    def batch(self) -> int:
        return int(next(iter(self.values.values())).shape()[0])

    def rows(self, rows: Rows) -> dict[str, Any]:
        names = list(self.values)
        if (
            isinstance(rows, slice)
            and rows.indices(self.batch)[:2] == (0, self.batch)
            and rows.step in (None, 1)
        ):
            picked = dict(self.values)  # the whole batch: fed back as it is
        else:
            indices = np.arange(self.batch)[rows] if isinstance(rows, slice) else np.asarray(rows)
            picked = {name: self.gather(value, indices) for name, value in self.values.items()}
        return {past: picked[name] for name, past in zip(names, past_input_names(names), strict=True)}

    def host(self) -> dict[str, np.ndarray]:
        return {name: value.numpy() for name, value in self.values.items()}
