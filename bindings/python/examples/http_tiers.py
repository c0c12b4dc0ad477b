# A quota per plan (Starlette or FastAPI): the plan from a header picks the
# tier; a plan the limits lack is the first tier's.
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratecell import Limit
from ratecell.asgi import RateLimitMiddleware, Tiered


async def hello(request):
    return PlainTextResponse("hello")


plans = Tiered(
    {"free": Limit("gcra", 100, period=3600), "pro": Limit("gcra", 10_000, period=3600)},
    capacity=100_000,
)
app = RateLimitMiddleware(
    Starlette(routes=[Route("/", hello)]), plans, key="X-Api-Key",
    tier=lambda scope: dict(scope["headers"]).get(b"x-plan", b"").decode(),
)
