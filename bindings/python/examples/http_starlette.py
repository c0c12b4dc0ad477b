# Starlette (ASGI); FastAPI takes the same add_middleware line.
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratecell import Limiter
from ratecell.asgi import RateLimitMiddleware


async def hello(request):
    return PlainTextResponse("hello")


app = Starlette(routes=[Route("/", hello)])
limiter = Limiter("gcra", 100, period=60, capacity=100_000, overflow="evict")
app.add_middleware(RateLimitMiddleware, limiter=limiter)  # or: app = RateLimitMiddleware(app, limiter)
