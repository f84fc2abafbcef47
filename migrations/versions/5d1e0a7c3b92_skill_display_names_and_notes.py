"""skill catalog: display name (any script) beside the slug, and notes on the bundle

Revision ID: 5d1e0a7c3b92
Revises: 22c1464bfff0
Create Date: 2026-12-01 00:58:00.000000

"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = '5d1e0a7c3b92'
down_revision = '22c1464bfff0'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('skill_catalog', schema=None) as batch_op:
        batch_op.add_column(sa.Column('display_name', sa.String(length=255), server_default='',
                                      nullable=False))
        batch_op.add_column(sa.Column('notes', sa.JSON(), server_default=sa.text("'[]'"),
                                      nullable=False))


def downgrade():
    with op.batch_alter_table('skill_catalog', schema=None) as batch_op:
        batch_op.drop_column('notes')
        batch_op.drop_column('display_name')
