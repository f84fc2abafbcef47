"""what the egress gateway refused during each run

Revision ID: d5b9f3a1e7c2
Revises: c4a8e6b2d0f5
Create Date: 2026-12-03 15:30:00

[{host, port, count}] from Docker's egress gateway (issue 24 item 3); NULL for runs
before it, on other providers, or with nothing refused.
"""
from alembic import op
import sqlalchemy as sa

revision = 'd5b9f3a1e7c2'
down_revision = 'c4a8e6b2d0f5'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('exec_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('egress_denied', sa.JSON(), nullable=True))


def downgrade():
    with op.batch_alter_table('exec_runs', schema=None) as batch_op:
        batch_op.drop_column('egress_denied')
