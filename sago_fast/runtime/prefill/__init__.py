"""How prompts reach the graph beyond one plain pass: shared prefixes found (:mod:`.shared_prefix`) and
prefilled once along prefix trees (:mod:`.tree_prefill`), continuations scored on a prompt's KV cache
(:mod:`.continuations`), greedy generation whose prompt step is such a prefill (:mod:`.prefilled_generation`).
All of it runs on the engine's passes (:class:`~sago_fast.runtime.passes.Passes`)."""
