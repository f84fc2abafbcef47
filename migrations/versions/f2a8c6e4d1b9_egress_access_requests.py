"""members' requests for hosts their sandbox's egress policy refused

Revision ID: f2a8c6e4d1b9
Revises: e7c1a9d4b3f6
Create Date: 2026-12-03 15:20:00

Pending until an admin allows the host on the config (a validated policy edit) or
declines; both are audited (issue 24 item 5).
"""
from alembic import op
import sqlalchemy as sa

revision = 'f2a8c6e4d1b9'
down_revision = 'e7c1a9d4b3f6'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'egress_access_requests',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('tenant_id', sa.Integer(), nullable=False),
        sa.Column('sandbox_config_id', sa.String(length=36), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=True),
        sa.Column('session_id', sa.String(length=36), nullable=True),
        sa.Column('host', sa.String(length=253), nullable=False),
        sa.Column('reason', sa.String(length=500), nullable=False),
        sa.Column('status', sa.String(length=12), nullable=False),
        sa.Column('decided_by', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['sandbox_config_id'], ['sandbox_configs.id'],
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['decided_by'], ['users.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_egress_access_requests_tenant_status', 'egress_access_requests',
                    ['tenant_id', 'status'])


def downgrade():
    op.drop_index('ix_egress_access_requests_tenant_status',
                  table_name='egress_access_requests')
    op.drop_table('egress_access_requests')
