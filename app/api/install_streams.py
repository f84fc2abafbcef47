"""The live views of an install run as server-sent events (reference 7.3, 7.5).

The skill is resolved (404 JSON, no stream) and the wake-up subscription registered
before the response starts; closing the response only drops the subscription.
"""

from __future__ import annotations

import threading

from flask import Response, current_app, stream_with_context

from app.api import bp
from app.api._core import doc
from app.api.installed_skills import ONE, installed_skill
from app.auth.guards import FULL_ACCESS, guard
from app.errors import Unavailable
from app.models import Role
from app.services import wakeups
from app.services.skills.installs import stream
from app.tenancy import current_tenant


class StreamSlots:
    """Open streams of one app in this process, counted against the limit read at each
    open (so a changed SKILL_STREAMS_MAX applies to the next stream)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.open = 0

    def take(self, limit: int) -> bool:
        with self._lock:
            if self.open >= limit:
                return False
            self.open += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.open -= 1


def stream_slot() -> StreamSlots:
    """A per-process cap on open streams, so streams can never take every server thread."""
    app = current_app._get_current_object()
    slots = app.extensions.setdefault("skill_stream_slots", StreamSlots())
    if not slots.take(int(app.config.get("SKILL_STREAMS_MAX", 224))):
        raise Unavailable("Too many open event streams on this server; poll the skill or "
                          "retry shortly.")
    return slots


def _event_stream(skill_id: str, body) -> Response:
    """Wrap a generator built on an already-entered subscription."""
    slot = stream_slot()
    subscription = wakeups.subscription(skill_id)
    waiter = subscription.__enter__()
    try:
        response = Response(stream_with_context(body(waiter)), mimetype="text/event-stream",
                            headers=stream.HEADERS)
    except BaseException:
        slot.release()
        subscription.__exit__(None, None, None)
        raise

    def closed() -> None:
        slot.release()
        subscription.__exit__(None, None, None)

    response.call_on_close(closed)
    return response


@bp.get(f"{ONE}/install-events")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Live progress of the skill's install or removal as server-sent events: "
     "`event: message` frames {percent, stage, log?, status?, done}, `: keep-alive` every "
     "5 s, ending on a done frame (or `detached` after 60 minutes)",
     errors=(404, 503), stream=True)
def install_events(config_id, skill_id):
    row = installed_skill(config_id, skill_id)
    tenant_id = current_tenant().id
    return _event_stream(row.id, lambda waiter: stream.follow_progress(tenant_id, row, waiter))


@bp.get(f"{ONE}/transcript")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("The install transcript as server-sent events in the chat stream frame shape "
     "{id, response_type, content, done, session_id, assistant_message_id, data}, ending "
     "with `complete`; 204 before the run's first event", errors=(404, 503), stream=True)
def install_transcript(config_id, skill_id):
    row = installed_skill(config_id, skill_id)
    run_id = stream.transcript_run(row)
    if run_id is None:
        return Response(status=204)
    tenant_id, session_id = current_tenant().id, row.install_session_id or ""
    return _event_stream(row.id, lambda waiter: stream.follow_transcript(
        tenant_id, row.id, run_id, session_id, waiter))
