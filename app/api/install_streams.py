"""The live views of an install run as server-sent events (reference 7.3, 7.5).

The skill is resolved (404 JSON, no stream) and the wake-up subscription registered
before the response starts; closing the response only drops the subscription.
"""

from __future__ import annotations

import threading
from collections import Counter

from flask import Response, current_app, stream_with_context

from app.api import bp
from app.api._core import doc
from app.api.installed_skills import ONE, installed_skill
from app.auth.guards import FULL_ACCESS, guard
from app.errors import Unavailable
from app.models import Role
from app.services import wakeups
from app.services.quotas import OverQuota
from app.services.skills.installs import stream
from app.tenancy import current_tenant, principal


class StreamSlots:
    """Open streams of one app in this process: at most SKILL_STREAMS_MAX in all (its open
    web terminals included: they hold threads too), and of
    those at most STREAMS_PER_WORKSPACE for one workspace and STREAMS_PER_MEMBER for one
    member (issue 22 item 5), read at each open. What a stream holds is a thread of this
    process, so this process's count is the one that matters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.open = 0
        self.held: Counter[tuple] = Counter()

    def take(self, workspace: int, member: str) -> Slot:
        cfg = current_app.config
        keys = (("streams_per_workspace", int(cfg["STREAMS_PER_WORKSPACE"]),
                 ("w", workspace)),
                ("streams_per_member", int(cfg["STREAMS_PER_MEMBER"]),
                 ("m", workspace, member)))
        with self._lock:
            terminals = current_app.extensions.get("terminal_slots")
            held = self.open + (terminals.open if terminals is not None else 0)
            if held >= int(cfg["SKILL_STREAMS_MAX"]):
                raise Unavailable("Too many open event streams on this server; poll the "
                                  "skill or retry shortly.")
            for quota, limit, key in reversed(keys):  # the member's own share first
                if self.held[key] >= limit:
                    raise OverQuota.of(quota, limit, self.held[key], (
                        f"This is past the {limit} live views a "
                        f"{'member' if key[0] == 'm' else 'workspace'} may keep open on "
                        "this server; close one (another tab or script), or poll instead."))
            self.open += 1
            for _, _, key in keys:
                self.held[key] += 1
        return Slot(self, [key for _, _, key in keys])

    def _release(self, keys: list[tuple]) -> None:
        with self._lock:
            self.open -= 1
            for key in keys:
                self.held[key] -= 1
                if not self.held[key]:
                    del self.held[key]


class Slot:
    """One open stream's place; release it exactly once, when the response closes."""

    def __init__(self, slots: StreamSlots, keys: list[tuple]) -> None:
        self._slots, self._keys = slots, keys

    def release(self) -> None:
        keys, self._keys = self._keys, None
        if keys is not None:
            self._slots._release(keys)


def stream_slot() -> Slot:
    """A place for one more open stream of the caller, so streams can never take every
    server thread, nor one member or workspace all of them."""
    app = current_app._get_current_object()
    slots = app.extensions.setdefault("skill_stream_slots", StreamSlots())
    who = principal()
    return slots.take(who.tenant_id, who.actor_label)


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
