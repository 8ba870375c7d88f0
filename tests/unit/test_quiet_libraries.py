"""`sago zoo --lora` and GGUF conversion speak through sago's own lines: no transformers bar over the GGUF
tensors, no PEFT UserWarnings while adapters train."""

from __future__ import annotations

import io
import warnings


def test_the_gguf_conversion_bar_is_off_inside_and_back_after():
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from sago_fast.checkpoints.gguf import _no_conversion_bar

    out = io.StringIO()
    with _no_conversion_bar():
        list(gguf_utils.tqdm(range(3), desc="Converting", file=out))
    assert out.getvalue() == ""
    list(gguf_utils.tqdm(range(3), desc="Converting", file=out))
    assert "Converting" in out.getvalue()  # restored


def test_peft_user_warnings_are_silenced_while_training_only():
    from sago_fast.zoo.lora_training import _quiet_libraries

    def peft_warns():
        warnings.warn_explicit(
            "no config.json beside the base", UserWarning, "peft/utils/other.py", 1, "peft.utils"
        )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _quiet_libraries():
            peft_warns()
        assert caught == []
        peft_warns()
        assert len(caught) == 1
