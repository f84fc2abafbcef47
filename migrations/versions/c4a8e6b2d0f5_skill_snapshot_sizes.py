"""what each skill snapshot added to its image

Revision ID: c4a8e6b2d0f5
Revises: b7e2d4f1c9a3
Create Date: 2026-12-03 07:25:00

Counted against the workspace's quota of skill image bytes (services/quotas.py); NULL
for snapshots built before it or by a provider that cannot say.
"""
from alembic import op
import sqlalchemy as sa

revision = 'c4a8e6b2d0f5'
down_revision = 'b7e2d4f1c9a3'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('skill_snapshots', schema=None) as batch_op:
        batch_op.add_column(sa.Column('size_bytes', sa.BigInteger(), nullable=True))


def downgrade():
    with op.batch_alter_table('skill_snapshots', schema=None) as batch_op:
        batch_op.drop_column('size_bytes')
