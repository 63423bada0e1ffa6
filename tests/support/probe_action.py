"""An action that answers with what its worker process keeps for its slots: the contexts
(``workers.jobs.context``: Redis client, action) and the helper threads the calls run in
(``workers.deadline``)."""

from typing import Any

from workers import deadline, jobs


def slot_state(call: dict[str, Any]) -> dict[str, Any]:
    return {"contexts": jobs._context.cache_info().currsize, "helpers": len(deadline._helpers)}
