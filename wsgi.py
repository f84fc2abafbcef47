"""WSGI entry point and FLASK_APP target."""

from app import create_app
from app.bootstrap import prepare_instance

app = create_app()
prepare_instance(app)
