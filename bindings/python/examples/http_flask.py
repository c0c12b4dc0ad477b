# Flask (WSGI); for Django, wrap get_wsgi_application() the same way in wsgi.py.
from flask import Flask

from ratecell import Limiter
from ratecell.wsgi import RateLimitMiddleware

app = Flask(__name__)


@app.get("/")
def hello():
    return "hello"


limiter = Limiter("gcra", 100, period=60, capacity=100_000, overflow="evict")
app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limiter)
