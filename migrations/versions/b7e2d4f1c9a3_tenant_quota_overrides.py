"""the operator's quota overrides per workspace

Revision ID: b7e2d4f1c9a3
Revises: a3c9e51b7d20
Create Date: 2026-12-03 07:00:00

Quotas (services/quotas.py) have deployment defaults; `flask quotas set` stores one
workspace's own limits here. NULL: the deployment's defaults.
"""
from alembic import op
import sqlalchemy as sa

revision = 'b7e2d4f1c9a3'
down_revision = 'a3c9e51b7d20'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.add_column(sa.Column('quotas', sa.JSON(), nullable=True))


def downgrade():
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.drop_column('quotas')
