"""Who is in a workspace: users, members and their exit, invitations, API keys and login
sessions.
"""
