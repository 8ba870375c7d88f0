"""sago as an lm-evaluation-harness backend, and lm-eval tasks as sago datasets.

``import sago_fast.lmeval`` registers the model name ``sago`` with lm-eval (lazily: nothing heavy is
imported until lm-eval builds the model), so ``lm_eval.simple_evaluate(model="sago", ...)`` and
``lm_eval --model sago`` (started through ``sago lm-eval``) find it. lm-eval is the optional extra
``sago_fast[lmeval]``.

- :mod:`.backend`: :class:`~sago_fast.lmeval.backend.SagoLM`, the ``LM`` subclass;
- :mod:`.arguments`: its model arguments, checked before any work and turned into sago's settings;
- :mod:`.requests`: grouping lm-eval's requests into sago passes (one prefill per context);
- :mod:`.request_log`: lm-eval's per-request results in a results file (``sago_db=FILE``);
- :mod:`.tasks`: a task YAML with local data as a sago dataset (``--dataset lmeval:task.yaml``);
- :mod:`.each`: a list of checkpoints (a training run) through lm-eval, one after the other;
- :mod:`.task_index`: lm-eval's task index built once (per command, and per lm-eval version for its own
  tasks);
- :mod:`.environment`: lm-eval's environment report gathered once per command.
"""

from __future__ import annotations

MODEL_NAMES = ("sago", "sago_fast")
BACKEND = "sago_fast.lmeval.backend:SagoLM"


def register() -> bool:
    """Register :data:`MODEL_NAMES` with lm-eval's model registry; False when lm-eval is not installed."""
    try:
        import lm_eval.models  # noqa: F401  (lm-eval's own names first: it adds them only to an empty registry)
        from lm_eval.api.registry import model_registry
    except ImportError:
        return False
    for name in MODEL_NAMES:
        if name not in model_registry:
            model_registry.register(name, target=BACKEND)
    return True


register()
