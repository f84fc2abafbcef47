"""Small helpers the HTML views share: service errors onto forms, page-or-fragment, notices."""

from __future__ import annotations

from flask import flash, redirect, render_template
from flask_wtf import FlaskForm

from app.errors import AppError, ValidationFailed
from app.extensions import db, htmx
from app.web.redirects import safe_next


def attach_error(form: FlaskForm, err: AppError) -> None:
    """Show a service error next to the field it names (`capabilities[0]` -> capabilities),
    or above the form when it names none."""
    db.session.rollback()  # the failed mutation may have left pending rows behind
    if not isinstance(err, ValidationFailed):
        form.form_errors.append(err.message)
        return
    for item in err.errors:
        name = item.get("field", "").split("[", 1)[0].split(".", 1)[0]
        field = form._fields.get(name)
        if field is None:
            form.form_errors.append(item["message"])
        else:
            field.errors = [*field.errors, item["message"]]


def page_or_fragment(page: str, fragment: str, status: int = 200, **context):
    """The whole page for a normal request; only the fragment for htmx."""
    return render_template(fragment if htmx else page, **context), status


def notice(html: str, message: str, category: str = "success") -> str:
    """An htmx response body plus an out-of-band flash appended to #flashes."""
    return html + render_template("_oob_flash.html", message=message, category=category)


def done(message: str, fragment: str, back_to: str, status: int = 200,
         category: str = "success", **context):
    """After a mutation: htmx gets the fresh fragment and a flash; a form post is redirected."""
    if htmx:
        return notice(render_template(fragment, **context), message, category), status
    flash(message, "error" if category == "error" else category)
    return redirect(safe_next(back_to))


def confirm_page(question: str, verb: str, action: str, back: str, detail: str = ""):
    """The question a delete or revoke asks without JavaScript (issue 15): its form is a GET
    to the action's URL, which answers with this page; [verb] posts, Cancel goes back."""
    return render_template("confirm.html", question=question, detail=detail, verb=verb,
                           action=action, back=safe_next(back))
