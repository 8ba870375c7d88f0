"""The evaluation rules on top of the engine (:mod:`sago_fast.runtime`): what the model reads and how its
answers are read.

- :mod:`.prompting`: a variant's prompt as the model reads it (plain text or a chat template);
- :mod:`.scoring`: lm-evaluation-harness's conventions for scoring a continuation after a prompt;
- :mod:`.multiple_choice`: multiple-choice answers under every answer mode (``cloze``, ``cloze_norm``, ``letter``);
- :mod:`.free_answers`: generated answers, extracted and compared with the references;
- :mod:`.answering`: every variant of a chunk answered, one prefill per prompt.
"""
