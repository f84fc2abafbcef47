"""The live views of an install run as server-sent events (reference 7.3, 7.5).

The skill is resolved (404 JSON, no stream) and the wake-up subscription registered
before the response starts; closing the response only drops the subscription.
"""

from __future__ import annotations

from flask import Response, current_app, stream_with_context

from app.api import bp
from app.api._core import doc
from app.api.installed_skills import ONE, installed_skill
from app.auth.guards import FULL_ACCESS, guard
from app.models import Role
from app.services import capacity, wakeups
from app.services.skills.installs import stream
from app.tenancy import current_tenant, principal

STREAM_SLOT = "stream"  # a kind of capacity.ThreadSlots


class Slot:
    """One open stream's place; release it exactly once, when the response closes (the
    server may call that after the request's context is gone: it brings its own)."""

    def __init__(self, app, slots: capacity.ThreadSlots, hold_id: str) -> None:
        self._app, self._slots, self._hold = app, slots, hold_id

    def release(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            self._slots.release(STREAM_SLOT)
            with self._app.app_context():
                capacity.release(hold)


def stream_slot() -> Slot:
    """A place for one more open stream of the caller, so streams can never take every
    server thread, nor one member or workspace all of them."""
    app = current_app._get_current_object()
    who, cfg = principal(), app.config
    # At most SKILL_STREAMS_MAX open streams and terminals together in this process.
    slots, most = capacity.thread_slots(app), int(cfg["SKILL_STREAMS_MAX"])
    slots.take(STREAM_SLOT, most, most, "Too many open event streams on this server; poll "
               "the skill or retry shortly.")
    try:
        hold = capacity.admit(
            capacity.Use("stream", who.tenant_id, holder(who)),
            (capacity.Limit("streams_per_member", "member", int(cfg["STREAMS_PER_MEMBER"])),
             capacity.Limit("streams_per_workspace", "workspace",
                            int(cfg["STREAMS_PER_WORKSPACE"]))),
            "live views", "close one (another tab or script), or poll instead.")
    except BaseException:
        slots.release(STREAM_SLOT)
        raise
    return Slot(app, slots, hold)


def holder(who) -> str:
    """Whom a capacity hold counts against: the member, or the API key itself."""
    if who.api_key is not None:
        return f"api-key:{who.api_key.prefix}"
    return f"user:{who.user.id}"


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
     errors=(404, 429, 503), stream=True)
def install_events(config_id, skill_id):
    row = installed_skill(config_id, skill_id)
    tenant_id = current_tenant().id
    return _event_stream(row.id, lambda waiter: stream.follow_progress(tenant_id, row, waiter))


@bp.get(f"{ONE}/transcript")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("The install transcript as server-sent events in the chat stream frame shape "
     "{id, response_type, content, done, session_id, assistant_message_id, data}, ending "
     "with `complete`; 204 before the run's first event", errors=(404, 429, 503), stream=True)
def install_transcript(config_id, skill_id):
    row = installed_skill(config_id, skill_id)
    run_id = stream.transcript_run(row)
    if run_id is None:
        return Response(status=204)
    tenant_id, session_id = current_tenant().id, row.install_session_id or ""
    return _event_stream(row.id, lambda waiter: stream.follow_transcript(
        tenant_id, row.id, run_id, session_id, waiter))
