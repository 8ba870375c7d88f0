"""lm-eval's requests and the sago backend's answers, in a results file (``model_args sago_db=FILE``).

Table ``lmeval_requests``, one row per request: ``session_id`` (one per backend instance, that is one
lm-eval run of one checkpoint), ``model_id`` (sago's content hash, as in ``models``), ``checkpoint``,
``request_type`` (loglikelihood, loglikelihood_rolling, generate_until), ``task``, ``doc_id``,
``request_index`` (lm-eval's ``idx``: the option of a multiple-choice doc), ``context``,
``continuation`` (loglikelihood: the option; generate_until: the generation kwargs as JSON), ``loglik``,
``is_greedy`` and ``generation``. Each call's rows are written in one transaction, waiting for the file
as every writer does (:mod:`sago_fast.store.locking`), so lm-eval runs can be queried beside sago runs::

    SELECT task, doc_id, arg_max(continuation, loglik) AS answer
    FROM lmeval_requests WHERE request_type = 'loglikelihood' GROUP BY ALL
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sago_fast.store.liveness import utc_now

if TYPE_CHECKING:
    from sago_fast.runtime.model import SagoModel


class RequestLog:
    """Writes each call's requests and results to ``path`` (created if missing; the backend checks it is
    writable before it loads the model)."""

    def __init__(self, path: str | os.PathLike[str], model: SagoModel) -> None:
        self.path = str(path)
        self.session_id = uuid.uuid4().hex
        self.model_id = model.model_id
        self.checkpoint = str(model.checkpoint.display_path)

    def add_loglikelihoods(self, requests: Sequence[Any], results: Sequence[tuple[float, bool]]) -> None:
        self._write(
            requests,
            "loglikelihood",
            [r.args[1] for r in requests],
            [v for v, _ in results],
            [g for _, g in results],
            [None] * len(requests),
        )

    def add_rolling(self, requests: Sequence[Any], results: Sequence[float]) -> None:
        none = [None] * len(requests)
        self._write(requests, "loglikelihood_rolling", none, list(results), none, none)  # the text: context

    def add_generations(self, requests: Sequence[Any], results: Sequence[str]) -> None:
        kwargs = [json.dumps(r.args[1], sort_keys=True, default=str) for r in requests]
        none = [None] * len(requests)
        self._write(requests, "generate_until", kwargs, none, none, list(results))

    def _write(
        self,
        requests: Sequence[Any],
        kind: str,
        continuations: Sequence[Any],
        loglik: Sequence[Any],
        greedy: Sequence[Any],
        generations: Sequence[Any],
    ) -> None:
        from sago_fast.store import Store

        if not requests:
            return
        n = len(requests)
        columns = {
            "session_id": [self.session_id] * n,
            "created_at": [utc_now().replace(tzinfo=None)] * n,
            "model_id": [self.model_id] * n,
            "checkpoint": [self.checkpoint] * n,
            "request_type": [kind] * n,
            "task": [getattr(r, "task_name", None) for r in requests],
            "doc_id": [getattr(r, "doc_id", None) for r in requests],
            "request_index": [getattr(r, "idx", None) for r in requests],
            "context": [r.args[0] for r in requests],
            "continuation": list(continuations),
            "loglik": list(loglik),
            "is_greedy": list(greedy),
            "generation": list(generations),
        }
        with Store(self.path) as store, store.transaction():
            store.insert("lmeval_requests", columns)
