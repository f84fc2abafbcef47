"""Sandbox providers behind one protocol (Docker, E2B, Cube). They never import models."""
