"""The HTTP API's routes, one APIRouter per resource (its OpenAPI tag): health (service),
sweeps, reports, tools (planner and inspector), kernels. app.create_app includes them in that
order; deps holds what they share (path parameters, the bearer scheme, the service)."""
