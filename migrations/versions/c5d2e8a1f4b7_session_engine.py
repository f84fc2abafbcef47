"""sessions record the Docker engine that holds their sandbox

Revision ID: c5d2e8a1f4b7
Revises: b7e3f1a9c2d4
Create Date: 2026-12-05 08:30:00

A session's sandbox lives on one engine: its name and the engine's own id are recorded
at binding, so another host never replaces it (decisions 17, issue 28 item 3). The
binding state is a plain string, so `gone` needs no schema change; existing bindings
keep no engine and are judged as before until their next sandbox.
"""
from alembic import op
import sqlalchemy as sa

revision = 'c5d2e8a1f4b7'
down_revision = 'b7e3f1a9c2d4'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('sandbox_sessions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('engine', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('engine_uid', sa.String(length=128), nullable=True))


def downgrade():
    op.execute("UPDATE sandbox_sessions SET binding_state = 'none' WHERE binding_state = 'gone'")
    with op.batch_alter_table('sandbox_sessions', schema=None) as batch_op:
        batch_op.drop_column('engine_uid')
        batch_op.drop_column('engine')
