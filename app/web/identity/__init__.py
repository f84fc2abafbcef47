"""Sign-in, the account page, members, invitations and API keys."""
