# Flask under waitress behind a reverse proxy at 10.0.0.1. waitress drops
# X-Forwarded-For unless told the proxy: then every client would share the
# proxy's quota. Told, it puts the client's address in REMOTE_ADDR, which
# the middleware keys on (so no trusted_proxies here as well).
from flask import Flask
from waitress import serve

from ratecell import Limiter
from ratecell.wsgi import RateLimitMiddleware

app = Flask(__name__)


@app.get("/")
def hello():
    return "hello"


limiter = Limiter("gcra", 100, period=60, capacity=100_000, overflow="evict")
app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limiter)

WAITRESS_PROXY = {"trusted_proxy": "10.0.0.1", "trusted_proxy_headers": "x-forwarded-for"}

if __name__ == "__main__":
    serve(app, host="0.0.0.0", port=8080, **WAITRESS_PROXY)
