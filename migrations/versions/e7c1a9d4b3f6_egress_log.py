"""the egress log, and a workspace's switch to keep none

Revision ID: e7c1a9d4b3f6
Revises: d5b9f3a1e7c2
Create Date: 2026-12-03 14:40:00

One row per connection Docker's egress gateway decided, ingested from the host's log
files and swept after EGRESS_LOG_RETENTION_DAYS (issue 24 item 2).
"""
from alembic import op
import sqlalchemy as sa

revision = 'e7c1a9d4b3f6'
down_revision = 'd5b9f3a1e7c2'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'egress_events',
        sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
        sa.Column('tenant_id', sa.Integer(), nullable=False),
        sa.Column('sandbox_config_id', sa.String(length=36), nullable=True),
        sa.Column('session_id', sa.String(length=36), nullable=True),
        sa.Column('user_id', sa.Integer(), nullable=True),
        sa.Column('purpose', sa.String(length=16), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('protocol', sa.String(length=8), nullable=False),
        sa.Column('host', sa.String(length=253), nullable=True),
        sa.Column('address', sa.String(length=45), nullable=True),
        sa.Column('port', sa.Integer(), nullable=False),
        sa.Column('verdict', sa.String(length=8), nullable=False),
        sa.Column('rule', sa.String(length=300), nullable=False),
        sa.Column('sent', sa.BigInteger(), nullable=False),
        sa.Column('received', sa.BigInteger(), nullable=False),
        sa.Column('duration_ms', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_egress_events_tenant_at', 'egress_events', ['tenant_id', 'at', 'id'])
    op.create_index('ix_egress_events_session_at', 'egress_events', ['session_id', 'at'])
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.add_column(sa.Column('egress_log_disabled', sa.Boolean(), nullable=False,
                                      server_default=sa.false()))


def downgrade():
    with op.batch_alter_table('tenants', schema=None) as batch_op:
        batch_op.drop_column('egress_log_disabled')
    op.drop_index('ix_egress_events_session_at', table_name='egress_events')
    op.drop_index('ix_egress_events_tenant_at', table_name='egress_events')
    op.drop_table('egress_events')
