"""The Skills views' forms: install targets, errors placed next to their fields, and the
Add form's body, streamed by hand (a multipart upload may exceed the app's body limit).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

from flask import request
from flask_wtf.csrf import CSRFError, validate_csrf
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.formparser import FormDataParser
from wtforms import ValidationError

from app.errors import AppError, BadRequest, ValidationFailed
from app.models import SandboxConfig
from app.services.sandboxes import configs as sandbox_configs
from app.services.skills import catalog as service
from app.services.skills.limits import MULTIPART_SLACK, BoundedSpool, BundleTooLarge
from app.tenancy import current_tenant
from app.web.sandboxes.configs import KIND_LABELS

MiB = 1024 * 1024


@dataclass
class Targets:
    """The sandbox configs a form offers as install targets, and what was ticked."""

    configs: list[SandboxConfig]
    picked: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, fields: MultiDict) -> Targets:
        """Ticked ids that look like ids; an unknown or foreign one is the service's 404."""
        return cls(sandbox_configs.list_configs(current_tenant()),
                   [v for v in fields.getlist("sandbox_config_ids") if is_uuid(v)])

    def name(self, config_id: str) -> tuple[str, str]:
        row = next((c for c in self.configs if c.id == config_id), None)
        return (row.name, KIND_LABELS.get(row.sandbox_type, "")) if row else (config_id, "")


def is_uuid(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False


@dataclass
class Problems:
    """Errors by field (`source`, `file`, `sandbox_config_ids`) plus the form's own."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    alert: str | None = None
    status: int = 400

    def add(self, name: str, message: str) -> None:
        self.fields.setdefault(name, []).append(message)

    def place(self, err: AppError, field_name: str) -> None:
        """A service error next to its field: bundle, source and size errors on the input
        that was used; validation errors where they point; anything else above the form."""
        self.status = err.status
        if isinstance(err, ValidationFailed) and err.errors:
            for item in err.errors:
                name = item.get("field", "").split("[", 1)[0]
                known = name in ("source", "file", "sandbox_config_ids")
                self.add(name if known else field_name, item["message"])
        elif err.status in (400, 413):
            self.add(field_name, err.message)
        else:
            self.alert = err.message

    def __bool__(self) -> bool:
        return bool(self.fields or self.alert)


@contextmanager
def submission() -> Iterator[tuple[MultiDict, IO[bytes] | None]]:
    """The add form's fields and its zip (None when no file was chosen).

    A multipart body is parsed here, not by Flask: the zip streams into a spool that
    refuses to grow past the bundle limit, and this route alone may receive more than the
    app's 1 MiB body limit. CSRF: htmx sends the token as a header, checked before the
    body is read; a plain form post carries it as a field, checked once parsed.
    """
    limit_mb = service.limit_mb()
    header = request.headers.get("X-CSRFToken")
    if header:
        check_csrf(header)
    spools: list[BoundedSpool] = []

    def new_spool(*_args, **_kwargs) -> BoundedSpool:
        spools.append(BoundedSpool(limit_mb * MiB, limit_mb))
        return spools[-1]

    streamed = request.mimetype == "multipart/form-data"
    try:
        if streamed:
            request.max_content_length = limit_mb * MiB + MULTIPART_SLACK
            fields, files = multipart(new_spool)
        else:
            fields, files = request.form, MultiDict()
        if not header:
            check_csrf(fields.get("csrf_token"))
        upload = files.get("file")
        if upload is None or not upload.filename:
            yield fields, None
        else:
            upload.stream.seek(0)
            yield fields, upload.stream
    except RequestEntityTooLarge:
        if streamed:
            raise BundleTooLarge(limit_mb) from None
        raise
    finally:
        for spool in spools:
            spool.close()


def check_csrf(token: str | None) -> None:
    try:
        validate_csrf(token)
    except ValidationError as exc:
        raise CSRFError(exc.args[0]) from None


def multipart(new_spool) -> tuple[MultiDict, MultiDict]:
    parser = FormDataParser(stream_factory=new_spool, max_form_memory_size=MiB,
                            max_form_parts=1000, silent=False)
    try:
        _, fields, files = parser.parse(request.stream, "multipart/form-data",
                                        request.content_length, request.mimetype_params)
    except ValueError:
        raise BadRequest("The upload could not be read; choose the file again.") from None
    return fields, files
