"""config secrets sealed one by one

Sandbox config documents were stored as one encrypted token, so a lost or rotated-away
key made the whole config unreadable (every request touching it failed). They are now
JSON with each secret encrypted on its own (models.types.SecretFieldsJSON). This rewrites
every row this deployment's keys can open; a row they cannot open is left as it was.
No schema change: the column stays text.

Revision ID: b7e2d0c41a95
Revises: e4f70f066a01
Create Date: 2026-12-01 00:10:00.000000

"""
import json

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = 'b7e2d0c41a95'
down_revision = 'e4f70f066a01'
branch_labels = None
depends_on = None

ROWS = sa.table("sandbox_configs", sa.column("id", sa.String), sa.column("config", sa.Text))


def _rewrite(convert) -> None:
    conn = op.get_bind()
    for row_id, stored in conn.execute(sa.select(ROWS.c.id, ROWS.c.config)).all():
        new = convert(stored) if stored else None
        if new is not None and new != stored:
            conn.execute(ROWS.update().where(ROWS.c.id == row_id).values(config=new))


def upgrade():
    from app.models.types import seal_secrets
    from app.security.crypto import crypto

    def convert(stored: str):
        if stored.startswith("{"):
            return None  # already sealed one by one
        plain = crypto().try_decrypt(stored)
        if plain is None:
            return None  # no key opens it: left for the operator (flask secrets rotate says so)
        return json.dumps(seal_secrets(json.loads(plain)), sort_keys=True)

    _rewrite(convert)


def downgrade():
    from app.models.types import open_secrets
    from app.security.config_secrets import lost
    from app.security.crypto import crypto

    def convert(stored: str):
        if not stored.startswith("{"):
            return None
        doc = open_secrets(json.loads(stored))
        # A secret no key opens cannot go back into a whole-document token: keep the row.
        if lost(doc):
            return None
        return crypto().encrypt(json.dumps(doc, sort_keys=True))

    _rewrite(convert)
