"""WSGI entry point and FLASK_APP target."""

from app import create_app
from app.bootstrap import prepare_instance
from app.security import key_agreement

app = create_app()
prepare_instance(app)
key_agreement.start(app)  # with REDIS_URL: warns when another process holds other keys
