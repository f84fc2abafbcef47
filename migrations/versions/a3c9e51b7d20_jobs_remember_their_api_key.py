"""jobs remember the API key that started them

Revision ID: a3c9e51b7d20
Revises: f613dd2d9714
Create Date: 2026-12-02 19:40:00

A key without full access may read the jobs it started (the sandbox check's 202) and no
other; existing rows started by no key keep NULL.
"""
from alembic import op
import sqlalchemy as sa

revision = 'a3c9e51b7d20'
down_revision = 'f613dd2d9714'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('api_key_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key('fk_jobs_api_key_id_api_keys', 'api_keys', ['api_key_id'],
                                    ['id'], ondelete='SET NULL')


def downgrade():
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_constraint('fk_jobs_api_key_id_api_keys', type_='foreignkey')
        batch_op.drop_column('api_key_id')
