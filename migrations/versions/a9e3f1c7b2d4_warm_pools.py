"""warm pools: started sandboxes a config keeps ready for new sessions

Revision ID: a9e3f1c7b2d4
Revises: c5d2e8a1f4b7
Create Date: 2026-12-05 19:40:00

Issue 29 item 2. A pool sandbox's row says which session claimed it (its Docker labels
cannot change) and stays until that session ends.
"""
from alembic import op
import sqlalchemy as sa

revision = 'a9e3f1c7b2d4'
down_revision = 'c5d2e8a1f4b7'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'warm_pools',
        sa.Column('config_id', sa.String(length=36), nullable=False),
        sa.Column('tenant_id', sa.Integer(), nullable=False),
        sa.Column('last_session_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('problem', sa.String(length=300), nullable=False),
        sa.Column('problem_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('failures', sa.Integer(), nullable=False),
        sa.Column('retry_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['config_id'], ['sandbox_configs.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('config_id'),
    )
    op.create_index('ix_warm_pools_tenant_id', 'warm_pools', ['tenant_id'])
    op.create_index('ix_warm_pools_last_session_at', 'warm_pools', ['last_session_at'])
    op.create_table(
        'pool_sandboxes',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('tenant_id', sa.Integer(), nullable=False),
        sa.Column('config_id', sa.String(length=36), nullable=False),
        sa.Column('engine', sa.String(length=64), nullable=False),
        sa.Column('engine_uid', sa.String(length=128), nullable=True),
        sa.Column('fingerprint', sa.String(length=64), nullable=False),
        sa.Column('state', sa.Enum('warming', 'ready', 'claimed', 'draining', name='pool_state',
                                   native_enum=False, length=16), nullable=False),
        sa.Column('sandbox_id', sa.String(length=128), nullable=True),
        sa.Column('policy', sa.JSON(), nullable=True),
        sa.Column('session_id', sa.String(length=36), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('ready_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['config_id'], ['sandbox_configs.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_pool_sandboxes_tenant_id', 'pool_sandboxes', ['tenant_id'])
    op.create_index('ix_pool_sandboxes_session_id', 'pool_sandboxes', ['session_id'])
    op.create_index('ix_pool_sandboxes_config_state', 'pool_sandboxes', ['config_id', 'state'])


def downgrade():
    op.drop_index('ix_pool_sandboxes_config_state', table_name='pool_sandboxes')
    op.drop_index('ix_pool_sandboxes_session_id', table_name='pool_sandboxes')
    op.drop_index('ix_pool_sandboxes_tenant_id', table_name='pool_sandboxes')
    op.drop_table('pool_sandboxes')
    op.drop_index('ix_warm_pools_last_session_at', table_name='warm_pools')
    op.drop_index('ix_warm_pools_tenant_id', table_name='warm_pools')
    op.drop_table('warm_pools')
